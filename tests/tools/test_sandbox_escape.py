"""Escape attempts against the bwrap sandbox, one test each: every one must be contained, return within its
limits and leave the host as it was. The whole module runs from a parent holding a fake secret in its
environment (and the same secret in a fake .env and a fake Ray session file), and no output may ever show it.
The fallback isolations do not contain most of these (see tools/sandbox.py); they are not tested here."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tools.sandbox import Sandbox, SandboxRun

REPO = Path(__file__).resolve().parents[2]
SECRET = "orchestra-escape-" + uuid.uuid4().hex
HOST_HOME = Path(os.path.expanduser("~")).resolve()

if Sandbox().isolation != "bwrap":
    pytest.skip("bubblewrap is not usable on this host (apt-get install bubblewrap; as root also util-linux "
                "setpriv); the escape suite checks the bwrap sandbox only", allow_module_level=True)


@pytest.fixture(autouse=True)
def secret_env(monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_SECRET", SECRET)


@pytest.fixture()
def sb() -> Sandbox:
    return Sandbox(cpu_seconds=1, memory_mb=384, max_processes=16, wall_timeout_s=3, max_output_chars=3000,
                   tmp_size_mb=8)


async def run(sb: Sandbox, code: str) -> SandboxRun:
    r = await sb.run(code)
    assert r.isolation == "bwrap" and r.error is None, r
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
