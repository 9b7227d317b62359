"""The code sandbox: run untrusted Python (written by the orchestrator or an expert) and return its output.

`Sandbox.run(code)` executes `python -I -` (isolated mode, code on stdin) and returns a `SandboxRun`; the tool
named "python" around it is tools/python_tool.py. Isolation, strongest first (which one ran goes in
`meta["isolation"]`, whether the syscall filter was on in `meta["seccomp"]`):

* "bwrap" — bubblewrap over a root built from nothing, read-only (tools/sandbox_root.py: only the interpreter
  and what it loads; no /etc, shell or other binaries, project checkout, home, /run, host /tmp). Private
  size-capped tmpfs /tmp; fresh /proc (own pid namespace: no host process can be seen, signalled or traced) and
  /dev; no network (own net namespace, which also cuts abstract unix sockets); own ipc/uts namespaces;
  --new-session (no TIOCSTI into our terminal); --die-with-parent; environment cleared. As an ordinary user it
  runs as uid nobody via --unshare-user, with --disable-userns where bwrap has it (>= 0.8). As root it mounts
  privileged and drops, with `setpriv`, to a per-run unprivileged uid with no capabilities (as judge systems
  such as isolate do): Linux never applies RLIMIT_NPROC to kuid 0 (and nobody inside a user namespace created
  by root *is* kuid 0), and a uid shared between concurrent runs would let one run's fork bomb starve another.
  Last, bwrap loads the seccomp filter of tools/syscall_filter.py (`--seccomp FD`): no keyring, bpf, io_uring,
  userfaultfd, perf, nested namespaces or mounts, ptrace, odd personalities, nor host administration calls;
  denied calls fail with EPERM. Left visible: the bound paths' names (/proc/self/mountinfo, the
  editable-install finder in site-packages), the site-packages' contents, and host-wide kernel facts in /proc
  (cpuinfo, meminfo, uptime).
* "unshare" — no usable bwrap: `unshare -rn --pid --fork --kill-child --mount-proc`. No network, own pid
  namespace and /proc (host processes cannot be signalled, traced or read), but NO file-system confinement:
  code reads every file its uid can (the project, home, secrets files, /tmp/ray) and writes wherever its uid
  may; no private /tmp. The filter is loaded before exec without its namespace and mount classes, which
  `unshare` itself needs: nested namespaces and mounts inside them stay open.
* "rlimits" — not even that: rlimits and the whole filter only. No network, file-system or process
  confinement: code can connect anywhere, read and write what its uid can, and signal or read the environment
  of every process of its uid (the orchestrator's own, unless root drops to a per-run uid).

Anything short of "bwrap" with the filter is refused: `run` returns an error (the model sees it as the tool's
error observation) and logs once per process how to fix the host, unless the caller opted in with
`allow_unconfined=True` (config `zoo.sandbox.allow_unconfined`); then it runs the strongest isolation it has
and warns, once per process, what is missing.

Always: rlimits set in the child (CPU seconds, address space, file size, processes, open files), a wall
timeout that kills the whole process group (and with it the pid namespace), an environment reduced to
PATH, LANG, HOME so no API key reaches the code, and stdout/stderr read incrementally with a cap
(tools/sandbox_process.py), so a run printing 100 MB never holds more than the cap in memory. The tool bills
wall seconds x price_per_second; retries and the calls in flight are the tool server's (actors/tool_server.py).
At most `max_parallel` runs at once per sandbox (default: one per CPU this process may use); the rest wait, and a
run's wall clock, its timeout's and its bill's, starts when its turn comes. Why: the tool server lets 64 calls in,
and 64 interpreters at once on 2 cores took 5-7 s each for `print(1)`, so code that runs in 0.06 s alone timed out
at 10 s under load: whether an observation read "timed out" depended on the machine's load, and two runs of one
seed trained on different demonstrations (docs/recipe.md, "Reproducible runs").
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from tools import syscall_filter
from tools.sandbox_process import (
    CappedReader,
    bwrap_flags,
    cleanup,
    decode,
    feed,
    kill_group,
    probe,
    user_processes,
    world_accessible,
)
from tools.sandbox_root import SAFE_PATH, sandbox_root, scrubbed_env

log = logging.getLogger(__name__)

REFUSED = ("the code sandbox refused to run this code: the host lacks full isolation (bubblewrap with its "
           "syscall filter); nothing was run")
FIX = ("install bubblewrap and libseccomp2 (`make setup` does, or `apt-get install -y bubblewrap libseccomp2` "
       "and `pip install pyseccomp`), or accept weaker isolation explicitly with zoo.sandbox.allow_unconfined=true")
_WARNED: set[str] = set()
_RUN_COUNTER = itertools.count()


def _warn_once(key: str, message: str, level: int = logging.WARNING) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.log(level, message)


@dataclass
class SandboxRun:
    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal; None: never started
    timed_out: bool
    wall_s: float
    isolation: str
    truncated: bool = False
    error: str | None = None  # the sandbox itself failed (could not start, or refused), not the user's code
    seccomp: bool = False  # the syscall filter was loaded
    queue_s: float = 0.0  # waited for a free slot (max_parallel) before the run and its clock started

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.exit_code == 0


class Sandbox:
    """Runs Python code under the strongest isolation available; see the module docstring."""

    def __init__(self, cpu_seconds: int = 5, memory_mb: int = 512, file_size_mb: int = 16, max_processes: int = 32,
                 max_open_files: int = 64, wall_timeout_s: float = 10.0, max_output_chars: int = 4000,
                 price_per_second: float = 0.0, allow_unconfined: bool = False, *, use_bwrap: bool = True,
                 use_unshare: bool = True, use_seccomp: bool = True, python: str = "", tmp_size_mb: int = 64,
                 uid_base: int = 100_000, denied_errno: int = errno.EPERM, max_parallel: int = 0):
        """`allow_unconfined` lets code run (with a warning) where the full isolation cannot be had; without it
        such a sandbox refuses. `use_bwrap` / `use_unshare` / `use_seccomp` False force the weaker modes (tests,
        hosts where they misbehave). `python` defaults to this interpreter, so sandboxed code sees the project's
        packages (numpy, sympy). `denied_errno` is what filtered calls return: tests pick one no kernel would,
        to tell the filter's denials from the kernel's own EPERM. `max_parallel`: runs at once (0: one per CPU
        this process may use)."""
        if max_parallel < 0:
            raise ValueError(f"sandbox max_parallel must be >= 0 (0: one per CPU), got {max_parallel}")
        if cpu_seconds <= 0 or memory_mb <= 0 or wall_timeout_s <= 0 or max_processes <= 0:
            raise ValueError("sandbox limits must be positive")
        if price_per_second < 0:
            raise ValueError(f"price_per_second must be >= 0, got {price_per_second}")
        self.cpu_seconds, self.memory_mb, self.file_size_mb = int(cpu_seconds), int(memory_mb), int(file_size_mb)
        self.max_processes, self.max_open_files = int(max_processes), int(max_open_files)
        self.wall_timeout_s, self.max_output_chars = float(wall_timeout_s), int(max_output_chars)
        self.price_per_second = float(price_per_second)
        self.allow_unconfined = bool(allow_unconfined)
        self.use_bwrap, self.use_unshare, self.use_seccomp = use_bwrap, use_unshare, use_seccomp
        self.python = os.path.abspath(shutil.which(python) or python) if python else sys.executable
        self.tmp_size_mb, self.uid_base, self.denied_errno = int(tmp_size_mb), int(uid_base), int(denied_errno)
        self._isolation: str | None = None
        self._shortfall: str | None = None  # what is missing from the full isolation (None: nothing)
        self._filter_error = ""  # why there is no syscall filter ("" while there is one)
        self._bpf_program: bytes | None = None  # what bwrap's --seccomp loads, once chosen
        self.max_parallel = int(max_parallel) or len(os.sched_getaffinity(0))
        self._slots: tuple[Any, asyncio.Semaphore] | None = None  # (event loop, its semaphore): bound to one loop

    @classmethod
    def from_config(cls, cfg: Any, **kw) -> Sandbox:
        """From an orchestra.config.SandboxConfig (or anything with its fields)."""
        names = ("cpu_seconds", "memory_mb", "file_size_mb", "max_processes", "max_open_files", "wall_timeout_s",
                 "max_output_chars", "price_per_second")
        return cls(**{n: getattr(cfg, n) for n in names}, allow_unconfined=getattr(cfg, "allow_unconfined", False),
                   max_parallel=getattr(cfg, "max_parallel", 0), **kw)

    # -- choosing the isolation -------------------------------------------------------------------------
    @property
    def isolation(self) -> str:
        """"bwrap", "unshare" or "rlimits": probed once per process (a probe is one ~0.1 s run)."""
        if self._isolation is None:
            self._isolation = self._choose_isolation()
        return self._isolation

    @property
    def shortfall(self) -> str | None:
        """What this host's sandbox lacks of the full isolation (bwrap with the syscall filter), in words; None
        when it lacks nothing. Probes as `isolation` does. Without `allow_unconfined` a shortfall means refusal."""
        _ = self.isolation
        return self._shortfall

    def _bpf(self) -> bytes | None:
        """The filter for bwrap, or None (then `_filter_error` says why)."""
        if not self.use_seccomp:
            self._filter_error = "disabled"
            return None
        try:
            return syscall_filter.bpf_program(self.denied_errno)
        except syscall_filter.FilterUnavailable as e:
            self._filter_error = str(e)
            return None

    def _child_filter(self, iso: str) -> Any:
        """The filter the fallbacks load before exec (`unshare` without the classes it needs), or None."""
        if not self.use_seccomp:
            return None
        try:
            return syscall_filter.syscall_filter(self.denied_errno, namespaces=iso != "unshare")
        except syscall_filter.FilterUnavailable:
            return None

    def _choose_isolation(self) -> str:
        root, bpf = os.geteuid() == 0, self._bpf()
        why = "disabled" if not self.use_bwrap else "not usable here (bubblewrap not installed)"
        iso = ""
        if self.use_bwrap and shutil.which("bwrap") and (not root or shutil.which("setpriv", path=SAFE_PATH)):
            why = "not usable here (its probe run failed)"
            try:  # the probe runs the interpreter in the real root: it proves the binds (and the filter) suffice
                argv = tuple(self._bwrap_argv([self.python, "-I", "-c", "pass"], self.uid_base if root else None))
                if probe(argv, bpf=bpf):
                    iso = "bwrap"
                elif bpf is not None and probe(argv):
                    iso, bpf, self._filter_error = "bwrap", None, "bwrap did not accept it (--seccomp)"
            except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
                why = f"unusable: could not build the minimal root ({e})"
        if not iso and self.use_unshare and shutil.which("unshare") and probe(
                tuple(self._unshare_prefix() + ["true"]), flt=self._child_filter("unshare")):
            iso = "unshare"
        iso = iso or "rlimits"
        lost = {"unshare": f"bwrap is {why}; the fallback, `unshare -rn` + rlimits, has NO file-system "
                           "confinement (code reads every file its uid can: the project, home, secrets files, "
                           "Ray's /tmp/ray; writes where its uid may; no private /tmp), and nested namespaces and "
                           "mounts stay open (network and host processes stay cut off)",
                "rlimits": f"bwrap is {why} and `unshare -rn` unavailable; the fallback, rlimits only, has NO "
                           "network, file-system or process isolation (code can connect anywhere, read and write "
                           "every file its uid can, and signal or read the environment of every process of its "
                           "uid)"}.get(iso)
        missing = [lost] if lost else []
        if (bpf if iso == "bwrap" else self._child_filter(iso)) is None:
            missing.append(f"no syscall filter ({self._filter_error or 'unavailable'}): the kernel keyring, bpf, "
                           "io_uring, userfaultfd, perf events, namespaces, mounts and ptrace are open to the code")
        self._shortfall = "; ".join(missing) or None
        self._bpf_program = bpf if iso == "bwrap" else None
        return iso

    def _unshare_prefix(self) -> list[str]:
        # --mount-proc: without it /proc is the host's, and code could read /proc/<pid>/environ or write
        # /proc/<pid>/mem of same-uid host processes by their host pid.
        return ["unshare", "-r", "-n", "--pid", "--fork", "--kill-child", "--mount-proc"]

    def _bwrap_argv(self, inner: list[str], uid: int | None) -> list[str]:
        setpriv = shutil.which("setpriv", path=SAFE_PATH) if uid is not None else None
        # /tmp first: binds under it (a venv in /tmp) must land on the tmpfs, not be hidden by it. The root (a
        # tmpfs bwrap builds) is remounted read-only last, once every mount point exists: under --unshare-user
        # its dirs belong to the sandbox's own uid, which could otherwise fill it without any size cap.
        argv = ["bwrap", "--perms", "1777", "--size", str(self.tmp_size_mb << 20), "--tmpfs", "/tmp",
                *sandbox_root(self.python, (setpriv,) if setpriv else ()),
                "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", "--unshare-net", "--unshare-pid",
                "--unshare-ipc", "--unshare-uts", "--new-session", "--die-with-parent", "--chdir", "/tmp",
                "--clearenv"]
        for key, value in scrubbed_env("/tmp").items():
            argv += ["--setenv", key, value]
        if uid is None:  # --disable-userns: no nested user namespace either (also denied by the filter)
            return argv + ["--unshare-user", "--uid", "65534", "--gid", "65534", *bwrap_flags("--disable-userns")
                           ] + inner
        return argv + [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                       "--bounding-set=-all", "--no-new-privs"] + inner

    # -- running -----------------------------------------------------------------------------------------
    def _per_run_uid(self) -> int:
        # Unique per process and per concurrent run (mod 256): NPROC counts are per uid.
        return self.uid_base + (os.getpid() % 8000) * 256 + next(_RUN_COUNTER) % 256

    def _limits(self, nproc: int, uid: int | None, flt: Any = None):
        limits = [(resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1),
                  (resource.RLIMIT_AS, self.memory_mb << 20, self.memory_mb << 20),
                  (resource.RLIMIT_FSIZE, self.file_size_mb << 20, self.file_size_mb << 20),
                  (resource.RLIMIT_NPROC, nproc, nproc),
                  (resource.RLIMIT_NOFILE, self.max_open_files, self.max_open_files),
                  (resource.RLIMIT_CORE, 0, 0)]

        def apply() -> None:  # runs in the forked child, before exec
            for res, soft, hard in limits:
                resource.setrlimit(res, (soft, hard))
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            if flt is not None:  # last: after it, setuid & co. would still work, but nothing else needs to run
                flt.load()
        return apply

    def _plan(self) -> tuple[list[str], dict[str, str], str | None, Any]:
        """argv, env, private work dir (fallbacks only) and the preexec function for one run."""
        iso, root = self.isolation, os.geteuid() == 0
        inner = [self.python, "-I", "-"]
        if iso == "bwrap":
            uid = self._per_run_uid() if root else None
            nproc = self.max_processes if root else user_processes(os.getuid()) + self.max_processes
            return self._bwrap_argv(inner, uid), scrubbed_env("/tmp"), None, self._limits(nproc, None)
        workdir = tempfile.mkdtemp(prefix="orchestra-sandbox-")
        uid = None
        if root and world_accessible(self.python):
            uid = self._per_run_uid()
            os.chown(workdir, uid, uid)
        elif root:
            _warn_once("root-nproc", "sandbox: running as root without bwrap and the interpreter is not readable "
                                     "by other users: RLIMIT_NPROC is not enforced for root, so fork bombs are "
                                     "bounded only by the wall timeout")
        nproc = self.max_processes if uid is not None else user_processes(os.getuid()) + self.max_processes
        argv = (self._unshare_prefix() + inner) if iso == "unshare" else inner
        return argv, scrubbed_env(workdir), workdir, self._limits(nproc, uid, self._child_filter(iso))

    async def run(self, code: str) -> SandboxRun:
        """Run `code` once a slot is free (`max_parallel`); never raises for anything the code does (the result
        says what happened, and how long it waited for its slot)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.max_parallel))
        queued = time.perf_counter()
        async with self._slots[1]:
            waited = time.perf_counter() - queued
            run = await self._run(code)
        run.queue_s = waited
        return run

    async def _run(self, code: str) -> SandboxRun:
        start = time.perf_counter()
        # The first run probes bwrap/unshare (blocking subprocesses): keep that off the event loop.
        iso = self._isolation or await asyncio.to_thread(lambda: self.isolation)
        if self._shortfall:
            if not self.allow_unconfined:
                _warn_once("refused", f"sandbox: refusing to run model-written code: {self._shortfall}. To fix: "
                                      f"{FIX}", logging.ERROR)
                return SandboxRun("", "", None, False, time.perf_counter() - start, iso, error=REFUSED)
            _warn_once("unconfined", "sandbox: zoo.sandbox.allow_unconfined=true, so model-written code runs with "
                                     f"WEAKER isolation: {self._shortfall}")
        argv, env, workdir, preexec = self._plan()
        seccomp = self._bpf_program is not None if iso == "bwrap" else self._child_filter(iso) is not None
        fds: tuple[int, ...] = ()
        cap = self.max_output_chars * 4 + 4  # bytes: enough for max_output_chars of UTF-8
        try:
            if iso == "bwrap" and self._bpf_program is not None:
                fds = (syscall_filter.pipe_with(self._bpf_program),)
                argv[1:1] = ["--seccomp", str(fds[0])]  # bwrap loads it last, just before exec
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                cwd=workdir or "/", preexec_fn=preexec, start_new_session=True, pass_fds=fds)
        except (OSError, subprocess.SubprocessError) as e:
            cleanup(workdir)
            return SandboxRun("", "", None, False, time.perf_counter() - start, iso,
                              error=f"could not start the sandbox: {e}")
        finally:
            for fd in fds:
                os.close(fd)
        out, err = CappedReader(proc.stdout, cap), CappedReader(proc.stderr, cap)
        readers = [asyncio.ensure_future(out.drain()), asyncio.ensure_future(err.drain())]
        timed_out = False
        try:
            await asyncio.wait_for(feed(proc, code.encode("utf-8", "replace")), self.wall_timeout_s)
            await asyncio.wait_for(proc.wait(), max(self.wall_timeout_s - (time.perf_counter() - start), 0.01))
        except asyncio.TimeoutError:
            timed_out = True
        finally:
            kill_group(proc.pid)  # also reaps stragglers that outlived the main process
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
                # pipes close once every holder is dead; a grandchild that escaped the group gets 1 s.
                await asyncio.wait_for(asyncio.gather(*readers), 1.0)
            except asyncio.TimeoutError:
                for r in readers:
                    r.cancel()
            cleanup(workdir)
        stdout, t1 = decode(out, self.max_output_chars)
        stderr, t2 = decode(err, self.max_output_chars)
        code = proc.returncode
        if iso != "rlimits" and code is not None and 128 < code < 128 + 65:
            code = 128 - code  # bwrap / unshare report a child's death by signal N as 128+N, like a shell
        return SandboxRun(stdout, stderr, code, timed_out, time.perf_counter() - start, iso, t1 or t2,
                          seccomp=seccomp)
