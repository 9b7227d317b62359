"""Escape attempts against the bwrap sandbox, one test each: every one must be contained, return within its
limits and leave the host as it was. The whole module runs from a parent holding a fake secret in its
environment (and the same secret in a fake .env and a fake Ray session file), and no output may ever show it.
The fallback isolations do not contain most of these (see tools/sandbox.py); they are not tested here.

The kernel-surface tests (one per class of tools/syscall_filter.py) make the raw system calls with ctypes, in a
sandbox whose filter answers MARK instead of EPERM: many of these calls fail without the filter too (no
capability), so only an errno no kernel path returns shows the filter denied them. Their arguments are chosen so
that, without the filter, the call either succeeds harmlessly inside the sandbox or fails with another errno."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tools import syscall_filter
from tools.sandbox import Sandbox, SandboxRun

REPO = Path(__file__).resolve().parents[2]
SECRET = "orchestra-escape-" + uuid.uuid4().hex
HOST_HOME = Path(os.path.expanduser("~")).resolve()

if Sandbox().shortfall:
    pytest.skip("needs bubblewrap and the syscall filter (make setup installs both; as root also util-linux "
                f"setpriv); the escape suite checks that sandbox only. Missing: {Sandbox().shortfall}",
                allow_module_level=True)
MARK = 4000  # what the filter returns in the kernel-surface tests ("Unknown error 4000": no kernel path returns it)


@pytest.fixture(autouse=True)
def secret_env(monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_SECRET", SECRET)


@pytest.fixture()
def sb() -> Sandbox:
    return Sandbox(cpu_seconds=1, memory_mb=384, max_processes=16, wall_timeout_s=3, max_output_chars=3000,
                   tmp_size_mb=8)


@pytest.fixture()
def marked() -> Sandbox:
    return Sandbox(cpu_seconds=2, memory_mb=384, max_processes=16, wall_timeout_s=5, max_output_chars=6000,
                   tmp_size_mb=8, denied_errno=MARK)


async def run(sb: Sandbox, code: str) -> SandboxRun:
    r = await sb.run(code)
    assert r.isolation == "bwrap" and r.seccomp and r.error is None, r
    assert r.wall_s < sb.wall_timeout_s + 2, r
    assert SECRET not in r.stdout + r.stderr, r
    return r


def host_pids_with(token: str) -> list[int]:
    """Host processes whose command line carries `token` (zombies have none, so they do not count)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def only_the_way_to_python(directory: Path, visible: list[str]) -> None:
    """Entries of a host directory seen inside may only lead to the interpreter's trees (~/.pyenv, a venv in
    the checkout): the binds' parents exist there as empty directories, nothing beside them."""
    trees = [Path(p).resolve() for p in (sys.base_prefix, sys.prefix, os.path.realpath(sys.executable))]
    trees += [Path(sys.prefix), Path(sys.executable)]  # the venv's own (unresolved) path, recreated inside
    for name in visible:
        assert any(t.is_relative_to(directory / name) for t in trees), (directory, name)


def try_read(paths) -> str:
    """Sandbox code: print OPENED <path> for every path it could read or list, DENIED <path> otherwise."""
    return f"""
import os
for p in {[str(p) for p in paths]!r}:
    try:
        data = os.listdir(p) if os.path.isdir(p) else open(p, "rb").read(200)
        print("OPENED", p, data)
    except OSError as e:
        print("DENIED", p, type(e).__name__)
"""


async def test_runs_unprivileged_with_a_bare_environment(sb):
    r = await run(sb, "import json, os\nprint(json.dumps(sorted(os.environ)))\nprint(os.getuid(), os.geteuid())\n"
                      "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm'))])")
    env, ids, caps = r.stdout.splitlines()
    assert set(json.loads(env)) <= {"HOME", "LANG", "PATH", "PWD"}, r  # bwrap sets PWD for --chdir
    assert "0" not in ids.split(), r
    assert caps.count("0000000000000000") == 2, r


async def test_project_checkout_invisible(sb):
    targets = [REPO / "tools" / "sandbox.py", REPO / "pyproject.toml", REPO / ".git" / "config", REPO / "tests"]
    r = await run(sb, try_read(targets) + f"""
import json
print("REPO", json.dumps(sorted(os.listdir({str(REPO)!r})) if os.path.isdir({str(REPO)!r}) else []))
try:
    import orchestra; print("IMPORTED", orchestra.__file__)
except ImportError as e:
    print("NOIMPORT", e)
""")
    assert r.stdout.count("DENIED") == len(targets) and "NOIMPORT" in r.stdout, r
    only_the_way_to_python(REPO, json.loads(r.stdout.split("REPO ", 1)[1].splitlines()[0]))


async def test_environ_files_hold_no_secret(sb):
    r = await run(sb, """
import glob, os
print(dict(os.environ))
for f in ["/proc/self/environ", "/proc/1/environ", f"/proc/{os.getppid()}/environ", *glob.glob("/proc/*/environ"),
          *glob.glob("/proc/*/cmdline")]:
    try:
        print(f, open(f, "rb").read())
    except OSError as e:
        print(f, type(e).__name__)
""")
    assert "ORCHESTRA_TEST_SECRET" not in r.stdout and "/proc/self/environ b'" in r.stdout, r


async def test_ray_session_dir_and_host_tmp_invisible(sb, tmp_path):
    token = tmp_path / "ray" / "session_2024-01-01_00-00-00_1" / "sockets" / "token"
    token.parent.mkdir(parents=True)
    token.write_text(SECRET)
    ray_dirs = [Path("/tmp/ray"), Path("/tmp/ray/session_latest")]
    r = await run(sb, try_read([token, token.parent, tmp_path] + ray_dirs)
                  + "import json\nprint('TMP', json.dumps(sorted(os.listdir('/tmp'))))")
    assert r.stdout.count("DENIED") == 3 + len(ray_dirs), r
    # the sandbox's /tmp is its own tmpfs: empty, unless the venv itself lives under /tmp (a checkout there)
    only_the_way_to_python(Path("/tmp"), json.loads(r.stdout.split("TMP ", 1)[1].splitlines()[0]))


async def test_home_and_dotenv_unreadable(sb, tmp_path, monkeypatch):
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    monkeypatch.setenv("HOME", str(fake_home))
    r = await run(sb, try_read([fake_home / ".env", fake_home]) + f"""
import json
print("HOME", os.path.expanduser("~"))
try:
    print("REALHOME", json.dumps(sorted(os.listdir({str(HOST_HOME)!r}))))
except OSError as e:
    print("REALHOME []")
""")
    assert r.stdout.count("DENIED") == 2 and "HOME /tmp" in r.stdout, r
    only_the_way_to_python(HOST_HOME, json.loads(r.stdout.split("REALHOME ", 1)[1].splitlines()[0]))


async def test_writes_outside_tmp_denied(sb):
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))
    name = f"escape-{uuid.uuid4().hex}"
    targets = [f"/{name}", f"/usr/{name}", f"{site}/{name}.pth", f"{os.path.realpath(site)}/{name}.pth",
               f"{REPO}/{name}", f"{HOST_HOME}/{name}", f"/dev/shm/{name}", f"/proc/{name}", f"/dev/{name}"]
    r = await run(sb, f"""
for p in {targets!r}:
    try:
        open(p, "w").write("x"); print("WROTE", p)
    except OSError as e:
        print("DENIED", p, type(e).__name__)
open("/tmp/{name}", "w").write("fine"); print("TMP", open("/tmp/{name}").read())
""")
    assert r.stdout.count("DENIED") == len(targets) and "TMP fine" in r.stdout, r
    assert not any(os.path.exists(p) for p in targets)
    assert not os.path.exists(f"/tmp/{name}")  # its /tmp was private


async def test_tmp_is_size_capped(sb):
    r = await run(sb, """
import os
n = 0
try:
    for i in range(100):
        with open(f"/tmp/f{i}", "wb") as f:
            f.write(b"x" * (1 << 20)); n += 1
except OSError as e:
    print("STOPPED", type(e).__name__)
print("MB", n)
""")
    assert "STOPPED" in r.stdout and int(r.stdout.split("MB")[1]) <= sb.tmp_size_mb, r


async def test_network_and_dns_blocked(sb):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"\0orchestra-escape-{uuid.uuid4().hex}"
    abstract.bind(abstract_name)
    abstract.listen(8)
    try:
        r = await run(sb, f"""
import socket
def attempt(label, fn):
    try:
        fn(); print("REACHED", label)
    except OSError as e:
        print("BLOCKED", label, type(e).__name__)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {srv.getsockname()[1]}), timeout=1))
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
attempt("tcp-out", lambda: socket.create_connection(("1.1.1.1", 443), timeout=1))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect({abstract_name!r}))
""")
        assert r.stdout.count("BLOCKED") == 5 and "REACHED" not in r.stdout, r
        with pytest.raises(BlockingIOError):  # nothing ever reached our listener
            srv.accept()
    finally:
        srv.close()
        abstract.close()


async def test_fork_bomb_contained(sb):
    token = uuid.uuid4().hex
    r = await run(sb, f"""
import os, sys
n = 0
for _ in range(500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(20)", {token!r}])
    n += 1
print("FORKED", n)
""")
    assert 0 < int(r.stdout.split("FORKED")[1]) <= sb.max_processes, r
    assert not host_pids_with(token)  # the sleepers died with the sandbox


async def test_memory_bomb_contained(sb):
    r = await run(sb, """
chunks = []
try:
    while True:
        chunks.append(bytearray(16 << 20))
except MemoryError:
    print("MemoryError after MB", 16 * len(chunks))
""")
    assert "MemoryError" in r.stdout and int(r.stdout.split()[-1]) <= sb.memory_mb, r


async def test_cpu_loop_killed_by_rlimit(sb):
    r = await run(sb, "while True:\n    pass\n")
    assert r.exit_code is not None and r.exit_code < 0 and not r.timed_out, r  # SIGXCPU / SIGKILL
    assert r.wall_s < sb.cpu_seconds + 2, r


async def test_huge_output_truncated(sb):
    r = await run(sb, "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(64):\n"
                      "    sys.stdout.write(chunk); sys.stderr.write(chunk)\n")
    assert r.truncated and len(r.stdout) < sb.max_output_chars + 100 and len(r.stderr) < sb.max_output_chars + 100
    assert f"{64 << 20} bytes" in r.stdout, r.stdout[-200:]


@pytest.mark.parametrize("parent", ["exits", "hangs"])
async def test_daemon_outliving_the_run_is_killed(sb, parent):
    token = uuid.uuid4().hex
    r = await run(sb, f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # double fork: reparented, own session and process group
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", {token!r}])
    os._exit(0)
time.sleep(0.3)
print("DAEMONIZED", flush=True)
if {parent == "hangs"}:
    time.sleep(30)
""")
    assert "DAEMONIZED" in r.stdout and r.timed_out == (parent == "hangs"), r
    deadline = time.monotonic() + 2
    while host_pids_with(token) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not host_pids_with(token)


async def test_symlink_and_dotdot_tricks(sb, tmp_path):
    (tmp_path / "target").write_text(SECRET)
    site = os.path.realpath(next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)))
    up = "/".join([".."] * site.count("/"))
    via = [f"/tmp/../{REPO}/tools/sandbox.py", f"{site}/{up}/{REPO}/tools/sandbox.py",
           f"/proc/self/root/{tmp_path}/target", f"/proc/1/root/{tmp_path}/target", f"/proc/1/cwd/{tmp_path}/target",
           f"/proc/self/cwd/../{REPO}/pyproject.toml", "/dev/fd/3", "/dev/fd/4"]
    r = await run(sb, f"""
import os
os.symlink({str(tmp_path / "target")!r}, "/tmp/link")
os.symlink("/proc/1/root/{REPO}/tools/sandbox.py", "/tmp/link2")
for p in {via!r} + ["/tmp/link", "/tmp/link2"]:
    try:
        print("OPENED", p, open(p, "rb").read(100))
    except OSError as e:
        print("DENIED", p, type(e).__name__)
print("FDS", sorted(os.listdir("/proc/self/fd")))
""")
    assert r.stdout.count("DENIED") == len(via) + 2 and "OPENED" not in r.stdout, r
    assert "FDS ['0', '1', '2', '3']" in r.stdout, r  # stdio and listdir's own fd: nothing of ours inherited


async def test_ptrace_of_parent_and_host_denied(sb):
    # Its parent is pid 1 of its namespace (bwrap's init). As root the code runs under another uid, so that is
    # denied too; as an ordinary user init shares the sandbox's uid and namespaces, so only the host counts.
    targets = [os.getpid()] + ([1] if os.geteuid() == 0 else [])
    r = await run(sb, f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
print("PPID", os.getppid())
for pid in {targets!r}:
    for req in (PTRACE_ATTACH, PTRACE_SEIZE):
        rc = libc.ptrace(req, pid, None, None)
        print("ATTACHED" if rc == 0 else "DENIED", pid, req, os.strerror(ctypes.get_errno()))
    for f in (f"/proc/{{pid}}/mem", f"/proc/{{pid}}/environ"):
        try:
            fd = os.open(f, os.O_RDWR if f.endswith("mem") else os.O_RDONLY)
            print("OPENED", f, os.read(fd, 64)); os.close(fd)
        except OSError as e:
            print("DENIED", f, type(e).__name__)
""")
    assert "PPID 1" in r.stdout and r.stdout.count("DENIED") == 4 * len(targets), r


async def test_signals_to_host_processes_do_not_arrive(sb):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r = await run(sb, f"""
import os, signal
for pid in ({victim.pid}, {os.getpid()}, {os.getppid()}):
    try:
        os.kill(pid, signal.SIGKILL); print("SIGNALLED", pid)
    except OSError as e:
        print("DENIED", pid, type(e).__name__)
for target in (1, -1):  # its namespace's init (immune to SIGKILL from inside), then every pid it may signal
    try:
        os.kill(target, signal.SIGKILL if target == 1 else signal.SIGTERM)
    except OSError:
        pass
print("ALIVE")
""")
        assert "ALIVE" in r.stdout and r.stdout.count("DENIED") == 3, r
        await asyncio.sleep(0.1)
        assert victim.poll() is None  # the host process survived
    finally:
        victim.kill()
        victim.wait()


# ---------------------------------------------------------------- the kernel surface (the syscall filter)
def nr(name: str) -> int:
    """The native number of a system call (-1: this architecture has none)."""
    number = syscall_filter._binding().resolve_syscall(0, name)
    return number if number >= 0 else syscall_filter._NEWER.get(name, -1)


SYSCALL = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def arg(a):
    if a is None:
        return ctypes.c_void_p(None)
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return ctypes.c_long(a) if isinstance(a, int) else a  # else a ctypes buffer, passed by address
def call(label, number, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(number), *map(arg, args))
    print("CALL", label, rc, ctypes.get_errno() if rc == -1 else 0, flush=True)
    return rc
"""


def calls(r: SandboxRun) -> dict[str, tuple[int, int]]:
    """label -> (return value, errno) of every call the code made."""
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("CALL "):
            _, label, rc, err = line.split()
            out[label] = (int(rc), int(err))
    return out


async def denied(sb: Sandbox, attempts: list[tuple[str, str, tuple | str]], setup: str = "", after: str = ""
                 ) -> dict[str, tuple[int, int]]:
    """Run `attempts` (label, syscall name, arguments as a tuple or as source text) in the sandbox, after
    `setup`; assert each got the filter's errno and the code lived on. Returns every call's outcome."""
    todo = [(label, nr(name), args) for label, name, args in attempts if nr(name) >= 0]
    assert todo, "no attempt exists on this architecture"
    lines = [f"call({label!r}, {number}, {args if isinstance(args, str) else ', '.join(map(repr, args))})"
             for label, number, args in todo]
    r = await run(sb, SYSCALL + setup + "\n".join(lines) + "\n" + after + "\nprint('SURVIVED')\n")
    got = calls(r)
    for label, _number, _args in todo:
        assert got.get(label) == (-1, MARK), (label, got.get(label), r)
    assert "SURVIVED" in r.stdout, r  # a denied call is an error return, never a kill
    return got


async def test_kernel_keyring_denied(marked):
    await denied(marked, [("add_key", "add_key", (b"user", b"orchestra-escape", b"v", 1, -2)),  # process keyring
                          ("request_key", "request_key", (b"user", b"orchestra-none", None, 0)),
                          ("keyctl", "keyctl", (0, -2, 0))])  # KEYCTL_GET_KEYRING_ID: works unfiltered


async def test_bpf_denied(marked):
    await denied(marked, [("bpf_map_create", "bpf", (0, None, 0)), ("bpf_prog_load", "bpf", (5, None, 0))])


async def test_userfaultfd_denied(marked):
    # UFFD_USER_MODE_ONLY: allowed to unprivileged users since Linux 5.11, so it opens unfiltered
    await denied(marked, [("userfaultfd_user", "userfaultfd", (1 | os.O_CLOEXEC,)),
                          ("userfaultfd", "userfaultfd", (os.O_CLOEXEC,))])


async def test_perf_events_denied(marked):
    await denied(marked, [("perf_event_open", "perf_event_open", (None, 0, -1, -1, 0))])


async def test_io_uring_denied(marked):
    # a zeroed struct io_uring_params: unfiltered, io_uring_setup makes a real ring
    await denied(marked, [("io_uring_setup", "io_uring_setup", "8, ctypes.create_string_buffer(120)"),
                          ("io_uring_enter", "io_uring_enter", (-1, 0, 0, 0, None, 0)),
                          ("io_uring_register", "io_uring_register", (-1, 0, None, 0))])


async def test_nested_namespaces_denied(marked):
    newuser, newns, thread = 0x10000000, 0x20000, 0x10000
    # CLONE_THREAD without CLONE_SIGHAND is EINVAL before any child exists, so nothing forks even unfiltered
    clones = [(f"clone_{flag:#x}", "clone", (flag | thread, 0, 0, 0, 0))
              for flag in syscall_filter.CLONE_NAMESPACE_FLAGS]
    got = await denied(marked, [("unshare_user_mount", "unshare", (newuser | newns,)),  # the example
                                ("unshare_net", "unshare", (0x40000000,)), ("setns", "setns", (-1, 0))] + clones,
                       after=f"call('clone3', {nr('clone3')}, None, 0)")
    assert got["clone3"] == (-1, errno.ENOSYS)  # ENOSYS whatever the errno: glibc then falls back to clone


async def test_mounts_denied(marked):
    await denied(marked, [("mount", "mount", (b"none", b"/tmp", 1, 0, None)),  # fstype pointer 1: EFAULT unfiltered
                          ("umount2", "umount2", (b"/tmp", 0xFF00)),
                          ("pivot_root", "pivot_root", (b"/tmp", b"/tmp")), ("chroot", "chroot", (b"/tmp",)),
                          ("open_tree", "open_tree", (-100, b"/tmp", 0x80000)),
                          ("move_mount", "move_mount", (-1, b"", -1, b"", 0)),
                          ("fsopen", "fsopen", (b"tmpfs", 0)),  # unfiltered: a new tmpfs context
                          ("fsconfig", "fsconfig", (-1, 0, None, None, 0)), ("fsmount", "fsmount", (-1, 0, 0)),
                          ("fspick", "fspick", (-100, b"/tmp", 0)),
                          ("mount_setattr", "mount_setattr", (-1, b"", 0, None, 0)),
                          ("open_tree_attr", "open_tree_attr", (-100, b"/tmp", 0x80000, None, 0))])


async def test_tracing_own_children_denied(marked):
    # Unfiltered, a process may trace and read the memory of its own child (same uid; no Yama here, or ptrace
    # scope 1): the filter takes that away too, so no sandboxed process can inspect or steer another.
    setup = ("pid = os.fork()\nif pid == 0:\n    import time; time.sleep(10); os._exit(0)\n"
             "buf = ctypes.create_string_buffer(8)\niov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\n")
    await denied(marked, [("ptrace_attach", "ptrace", "16, pid, None, None"),  # PTRACE_ATTACH
                          ("process_vm_readv", "process_vm_readv", "pid, iov, 1, iov, 1, 0"),
                          ("process_vm_writev", "process_vm_writev", "pid, iov, 1, iov, 1, 0"),
                          ("kcmp", "kcmp", "os.getpid(), pid, 0, 0, 0"),  # KCMP_FILE of fd 0
                          ("pidfd_getfd", "pidfd_getfd", (-1, 0, 0))],
                 setup=setup, after="os.kill(pid, 9); os.waitpid(pid, 0)")


async def test_personality_limited_to_the_default_personas(marked):
    allowed = (0xFFFFFFFF, 0x8, 0x20008, 0x0)  # the query, PER_LINUX32, + UNAME26, back to PER_LINUX
    got = await denied(marked, [("no_randomize", "personality", (0x0040000,)),  # ADDR_NO_RANDOMIZE
                                ("read_implies_exec", "personality", (0x0400000,)),
                                ("mmap_page_zero", "personality", (0x0100000,)),
                                ("linux32_no_randomize", "personality", (0x0040008,))],
                       after="\n".join(f"call('allowed_{v:#x}', {nr('personality')}, {v})" for v in allowed))
    assert all(got[f"allowed_{v:#x}"][0] >= 0 for v in allowed), got


async def test_host_administration_denied(marked):
    # Refused anyway without capabilities; the filter makes a bug in a capability check not enough. Arguments
    # are invalid on purpose (reboot's magic, a bad clock, ...), so nothing would happen even with a capability.
    await denied(marked, [("kexec_load", "kexec_load", (0, 0, None, 0)),
                          ("kexec_file_load", "kexec_file_load", (-1, -1, 0, None, 0xDEAD)),
                          ("init_module", "init_module", (None, 0, None)),
                          ("finit_module", "finit_module", (-1, None, 0)),
                          ("delete_module", "delete_module", (b"orchestra-none", 0)), ("acct", "acct", (None,)),
                          ("swapon", "swapon", (None, 0)), ("swapoff", "swapoff", (None,)),
                          ("reboot", "reboot", (0, 0, 0, None)), ("settimeofday", "settimeofday", (1, None)),
                          ("clock_settime", "clock_settime", (9999, None)),
                          ("clock_adjtime", "clock_adjtime", (9999, None)),
                          ("quotactl", "quotactl", (0xFF, None, 0, None)),
                          ("quotactl_fd", "quotactl_fd", (-1, 0, 0, None)),
                          ("lookup_dcookie", "lookup_dcookie", (0, None, 0)),
                          ("open_by_handle_at", "open_by_handle_at", (-1, None, 0)),
                          ("name_to_handle_at", "name_to_handle_at", (-100, b"/tmp", None, None, 0xDEAD)),
                          ("iopl", "iopl", (4,)), ("ioperm", "ioperm", (0, 0x10001, 0)), ("vhangup", "vhangup", ()),
                          ("syslog", "syslog", (10, None, 0)), ("fanotify_init", "fanotify_init", (0xDEAD0000, 0)),
                          ("uselib", "uselib", (None,))])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32 exists on x86_64 only")
async def test_other_abis_denied(marked):
    # An x32 system call (a native number with bit 30 set) would otherwise skip rules written for x86_64's.
    r = await run(marked, SYSCALL + f"call('x32_add_key', {0x40000000 | nr('add_key')}, None, None, None, 0, -2)")
    assert calls(r)["x32_add_key"] == (-1, MARK), r


async def test_denied_calls_are_eperm_and_ordinary_code_still_runs(sb):
    """With the production errno: a denied call is a plain PermissionError, clone3 is ENOSYS (so glibc's
    pthread_create and posix_spawn fall back to clone), and threads, fork, subprocesses and numpy work."""
    r = await run(sb, SYSCALL + f"""
call("add_key", {nr("add_key")}, b"user", b"orchestra-escape", b"v", 1, -2)
call("clone3", {nr("clone3")}, None, 0)
import threading, subprocess, numpy
box = []
t = threading.Thread(target=lambda: box.append(sum(range(10)))); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
print("FORK", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print("THREAD", box, "SUB", subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True,
                                           text=True).stdout.strip(), "NUMPY", int(numpy.arange(4).sum()))
print([line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")])
""")
    got = calls(r)
    assert got["add_key"] == (-1, errno.EPERM) and got["clone3"] == (-1, errno.ENOSYS), r
    assert "FORK 7" in r.stdout and "THREAD [45] SUB 42 NUMPY 6" in r.stdout, r
    assert "['2']" in r.stdout, r  # seccomp mode 2: a filter is on
