"""The code sandbox's seccomp filter: the system calls sandboxed code may not make, built with libseccomp.

A deny list over a default of "allow" (what Docker's default profile denies that matters here, plus a few
cheap extras), by class, because each class is a way into the kernel that sandboxed Python never needs:

* keyring (add_key, request_key, keyctl) -- kernel key storage shared beyond the sandbox, a frequent exploit path;
* bpf, userfaultfd, perf_event_open, io_uring_* -- the kernel subsystems most exploits of recent years went
  through (io_uring and userfaultfd also make races easy to win);
* namespaces: unshare, setns, clone with any CLONE_NEW* flag, and clone3, whose flags sit in memory a filter
  cannot read: it gets ENOSYS (as under Docker), so glibc falls back to clone, which is filtered. A nested user
  namespace would hand the code every capability inside it, and with them the rest of this list;
* mounts: mount, umount2, pivot_root, chroot and the new mount API (open_tree, move_mount, fsopen, fsconfig,
  fsmount, fspick, mount_setattr, open_tree_attr);
* tracing other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp;
* personality: only Linux's default personas (0, PER_LINUX32, UNAME26 and both, and the 0xffffffff query), as
  Docker; the others turn off address-space randomisation or make data executable;
* the host's administration, already refused for want of capabilities, denied again so a bug in a capability
  check is not enough: kexec_load, kexec_file_load, init_module, finit_module, delete_module, acct, swapon,
  swapoff, reboot, settimeofday, clock_settime, clock_adjtime, quotactl, quotactl_fd, lookup_dcookie,
  open_by_handle_at, name_to_handle_at, iopl, ioperm, vhangup, syslog, fanotify_init, nfsservctl, uselib, _sysctl.

Denied calls fail with EPERM (clone3: ENOSYS), never kill, so Python sees a plain OSError. So do all system
calls of another ABI (32-bit int 0x80, x32): the rules are written for the native one only. A deny list lets
through what it does not name: system calls newer than libseccomp's own table are allowed unless listed by
number in `_NEWER`.

`bpf_program()` exports the filter once per process as the raw BPF bytes that bwrap's `--seccomp FD` loads as
the last step before it runs the code (tools/sandbox.py). `syscall_filter()` gives the libseccomp object itself,
which the weaker fallbacks load in the child before exec. Both raise FilterUnavailable (with the reason) when
libseccomp or its binding, pyseccomp, is missing; the sandbox then counts as weaker (see tools/sandbox.py).
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from typing import Any

DENIED: dict[str, tuple[str, ...]] = {
    "keyring": ("add_key", "request_key", "keyctl"),
    "bpf": ("bpf",),
    "userfaultfd": ("userfaultfd",),
    "perf": ("perf_event_open",),
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "namespaces": ("unshare", "setns"),  # + clone with CLONE_NEW* flags and clone3, below
    "mounts": ("mount", "umount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
               "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr"),
    "tracing": ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
    "host_admin": ("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "acct",
                   "swapon", "swapoff", "reboot", "settimeofday", "stime", "clock_settime", "clock_adjtime",
                   "quotactl", "quotactl_fd", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at", "iopl",
                   "ioperm", "vhangup", "syslog", "fanotify_init", "nfsservctl", "uselib", "_sysctl"),
}
# What `unshare -r -n --pid --mount-proc` (the fallback) must still do itself after the filter is on.
NAMESPACE_CLASSES = ("namespaces", "mounts")
# Newer than libseccomp 2.5.4's syscall table; since Linux 5.1 new system calls have one number on every arch.
_NEWER = {"open_tree_attr": 467}
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (CLONE_NEWTIME only exists for unshare/clone3)
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
# Docker's allowed personas: PER_LINUX (0), PER_LINUX32 (0x8), UNAME26 (0x20000), both, and 0xffffffff (query).
PERSONA_BITS = (3, 17)


class FilterUnavailable(RuntimeError):
    """The filter cannot be built here (no libseccomp, no binding, unknown architecture)."""


def persona_rules() -> list[tuple[int, int]]:
    """(mask, value) pairs such that personality(x) is denied iff some pair has x & mask == value.

    libseccomp 2.5 allows one comparison per argument in a rule, so "x not in {0, 8, 0x20000, 0x20008,
    0xffffffff}" is written as an OR of "bit i set, bit j clear" with i any bit outside PERSONA_BITS. Pairs
    (i, i+1 mod 32), plus (i, i+2) where i+1 is an allowed bit, cover every x with a disallowed bit that is not
    all ones: walk up from a disallowed set bit to the first clear bit j; the bit below j is set, and is either
    disallowed (pair (j-1, j)) or an allowed bit whose neighbour below is disallowed (pair (j-2, j)). An allowed
    x has no disallowed bit, and 0xffffffff no clear bit, so neither matches. Checked exhaustively on the
    interesting values in tests/tools/test_syscall_filter.py."""
    pairs = [(i, (i + 1) % 32) for i in range(32) if i not in PERSONA_BITS]
    pairs += [(b - 1, b + 1) for b in PERSONA_BITS]
    return [((1 << i) | (1 << j), 1 << i) for i, j in pairs]


def _binding() -> Any:
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as e:  # pyseccomp raises RuntimeError without libseccomp.so.2
        raise FilterUnavailable(f"libseccomp is not usable ({type(e).__name__}: {e}); install libseccomp2 and "
                                "the pyseccomp package (make setup does both)") from None
    return pyseccomp


@functools.lru_cache(maxsize=8)
def syscall_filter(deny_errno: int = errno.EPERM, namespaces: bool = True) -> Any:
    """The filter as a pyseccomp.SyscallFilter (built once per process and arguments). `namespaces=False`
    leaves out NAMESPACE_CLASSES, for the `unshare` fallback, which needs them after the filter is loaded."""
    sc = _binding()
    deny = sc.ERRNO(deny_errno)
    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        flt.set_attr(sc.Attr.ACT_BADARCH, deny)  # 32-bit / x32 calls would skip every rule below
        for cls, names in DENIED.items():
            if namespaces or cls not in NAMESPACE_CLASSES:
                for name in names:
                    number = sc.resolve_syscall(sc.Arch.NATIVE, name)
                    if number < 0:  # not on this arch (a pseudo number) or unknown to this libseccomp
                        number = _NEWER.get(name, -1)
                    if number >= 0:
                        flt.add_rule(deny, number)
        if namespaces:
            flags_arg = 1 if os.uname().machine.startswith("s390") else 0  # clone's arguments differ on s390
            for flag in CLONE_NAMESPACE_FLAGS:
                flt.add_rule(deny, "clone", sc.Arg(flags_arg, sc.MASKED_EQ, flag, flag))
            flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for mask, value in persona_rules():
            flt.add_rule(deny, "personality", sc.Arg(0, sc.MASKED_EQ, mask, value))
    except OSError as e:
        raise FilterUnavailable(f"libseccomp could not build the filter: {e}") from None
    return flt


@functools.lru_cache(maxsize=8)
def bpf_program(deny_errno: int = errno.EPERM) -> bytes:
    """The whole filter as a BPF program (struct sock_filter[]), what bwrap's --seccomp reads from a fd."""
    flt = syscall_filter(deny_errno)
    with tempfile.TemporaryFile() as f:
        try:
            flt.export_bpf(f)
        except OSError as e:
            raise FilterUnavailable(f"libseccomp could not export the filter: {e}") from None
        f.seek(0)
        return f.read()


def pipe_with(data: bytes) -> int:
    """A pipe's read end holding `data` (the write end closed): a fresh fd per run, read from its start (a shared
    file's offset would be at its end after the first run). A filter is a few KiB, far below a pipe's 64 KiB."""
    if len(data) > 60_000:
        raise ValueError(f"a {len(data)}-byte filter does not fit a pipe buffer")
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r
