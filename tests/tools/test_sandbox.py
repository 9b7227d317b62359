"""Sandbox: attacks run all at once (asyncio.gather: concurrent runs must not weaken each other), the python
tool, the refusal without full isolation, the opted-in fallbacks and the minimal root's construction. One test
per escape attempt lives in test_sandbox_escape.py. Needs Linux; passes with and without bubblewrap on the host
(tests that need it skip and say so; the fallback tests force the fallback)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

import tools.sandbox as sandbox_mod
import tools.sandbox_root as root_mod
from orchestra.types import Task, ToolContext
from tools import syscall_filter
from tools.python_tool import PythonTool
from tools.sandbox import REFUSED, Sandbox

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-" + uuid.uuid4().hex


def _ctx() -> ToolContext:
    return ToolContext(task=Task(id="t", problem="p", answer="a"))


@pytest.fixture()
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


def _sandbox_processes(sb: Sandbox) -> int:
    """Live processes running under this test process's per-run sandbox uids."""
    low = sb.uid_base + (os.getpid() % 8000) * 256
    count = 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and low <= os.stat(f"/proc/{entry}").st_uid < low + 256
        except OSError:
            pass
    return count


def _full_isolation_or_skip() -> None:
    missing = Sandbox().shortfall
    if missing:
        pytest.skip(f"needs bubblewrap and the syscall filter (make setup installs both): {missing}")


def _filter_or_skip() -> None:
    try:
        syscall_filter.syscall_filter()
    except syscall_filter.FilterUnavailable as e:
        pytest.skip(str(e))


def add_key() -> str:
    """Sandbox code: add a key to its process keyring (which the filter denies) and print what came back."""
    number = syscall_filter._binding().resolve_syscall(0, "add_key")
    return f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.syscall({number}, b"user", b"orchestra-test", b"v", 1, -2)  # -2: the process keyring
print("ADD_KEY", rc, ctypes.get_errno() if rc == -1 else 0)
"""


async def test_escape_suite(listener, monkeypatch):
    _full_isolation_or_skip()
    monkeypatch.setenv("FAKE_SECRET", SECRET)
    port = listener.getsockname()[1]
    marker = f"escape-{uuid.uuid4().hex}"
    outside = [REPO / marker, Path("/root") / marker, Path.home() / marker]
    sb = Sandbox(cpu_seconds=2, memory_mb=512, max_processes=16, wall_timeout_s=8, max_output_chars=2000)
    attacks = {
        "network": f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2); print("CONNECTED")
except OSError as e:
    print("BLOCKED", type(e).__name__)
""",
        "write": "".join(f"""
try:
    open({str(p)!r}, "w").write("x"); print("WROTE")
except OSError as e:
    print("DENIED", e.errno)
""" for p in outside) + "open('/tmp/ok', 'w').write('fine'); print('TMP', open('/tmp/ok').read())",
        "secret": """
import os, glob
print(sorted(os.environ))
print(os.environ.get("FAKE_SECRET"))
for f in glob.glob("/proc/*/environ"):
    try:
        print(open(f, "rb").read())
    except OSError:
        pass
""",
        "forkbomb": """
import os, time
n = 0
for _ in range(500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    n += 1
print("FORKED", n)
""",
        "memory": """
try:
    b = bytearray(4 * 1024**3); print("ALLOCATED", len(b))
except MemoryError:
    print("MemoryError")
""",
        "loop": "while True:\n    pass\n",
        "flood": "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(chunk)\n",
    }
    runs = dict(zip(attacks, await asyncio.gather(*(sb.run(code) for code in attacks.values())), strict=True))
    for name, run in runs.items():
        assert run.isolation == "bwrap" and run.seccomp, name
        assert run.wall_s < sb.wall_timeout_s + 2, (name, run.wall_s)
        assert run.error is None, (name, run.error)

    assert "BLOCKED" in runs["network"].stdout, runs["network"]
    with pytest.raises(BlockingIOError):  # nothing ever reached our listener
        listener.accept()

    assert runs["write"].stdout.count("DENIED") == len(outside), runs["write"]
    assert "TMP fine" in runs["write"].stdout
    assert not any(p.exists() for p in outside)

    assert SECRET not in runs["secret"].stdout + runs["secret"].stderr
    assert "FAKE_SECRET" not in runs["secret"].stdout
    assert runs["secret"].exit_code == 0

    forked = int(runs["forkbomb"].stdout.split("FORKED")[1])
    assert 0 < forked <= sb.max_processes, runs["forkbomb"]
    assert not runs["forkbomb"].timed_out

    assert "MemoryError" in runs["memory"].stdout, runs["memory"]

    loop = runs["loop"]  # killed by its CPU rlimit (SIGXCPU / SIGKILL), not by the wall timeout
    assert loop.exit_code is not None and loop.exit_code < 0 and not loop.timed_out, loop

    flood = runs["flood"]
    assert flood.truncated and len(flood.stdout) < sb.max_output_chars + 100
    assert "104857600 bytes" in flood.stdout
    assert _sandbox_processes(sb) == 0  # no sandbox process (the fork bomb's sleepers included) survived


async def test_wall_timeout_kills_sleeper():
    sb = Sandbox(wall_timeout_s=1.0, cpu_seconds=5, allow_unconfined=True)  # any isolation has the wall timeout
    run = await sb.run("import time\nprint('start', flush=True)\ntime.sleep(30)")
    assert run.timed_out and run.wall_s < 3
    assert "start" in run.stdout


async def test_runs_wait_for_a_slot_and_their_clock_starts_there():
    # three 0.6 s runs through one slot take ~1.8 s, yet none reaches its 1.5 s timeout: how many calls came at
    # once (the machine's load) must not decide whether code times out
    sb = Sandbox(wall_timeout_s=1.5, max_parallel=1, allow_unconfined=True)
    start = time.perf_counter()
    runs = await asyncio.gather(*[sb.run("import time; time.sleep(0.6); print('done')") for _ in range(3)])
    assert time.perf_counter() - start >= 1.8
    assert all(r.ok and r.stdout.strip() == "done" and r.wall_s < 1.5 for r in runs), runs
    assert max(r.queue_s for r in runs) >= 1.1 and min(r.queue_s for r in runs) < 0.5
    assert Sandbox().max_parallel == len(os.sched_getaffinity(0))  # default: one per CPU this process may use


async def test_python_tool_result_and_cost():
    tool = PythonTool(price_per_second=0.5, wall_timeout_s=5, allow_unconfined=True)  # any isolation bills alike
    res = await tool.call({"code": "print(6 * 7)\nimport sys; print('warn', file=sys.stderr)"}, _ctx())
    assert res.ok and res.text.startswith("42") and "warn" in res.text
    assert res.meta["isolation"] in ("bwrap", "unshare", "rlimits") and res.meta["exit_code"] == 0
    assert res.cost_usd == pytest.approx(min(res.latency_s, 5) * 0.5)
    assert 0 < res.cost_usd <= tool.cost_bound({}, _ctx())
    bad = await tool.call({"code": "1/0"}, _ctx())
    assert bad.ok and "ZeroDivisionError" in bad.text and bad.meta["exit_code"] == 1
    assert not (await tool.call({"code": 3}, _ctx())).ok
    slow = await PythonTool(wall_timeout_s=0.5, allow_unconfined=True).call({"code": "import time; time.sleep(5)"},
                                                                           _ctx())
    assert not slow.ok and "timed out" in slow.error


@pytest.mark.parametrize("weaker", [{"use_bwrap": False}, {"use_seccomp": False}])
async def test_refuses_without_full_isolation(weaker, caplog, monkeypatch, tmp_path):
    """No bwrap, or no syscall filter: the code is not run, the model gets an error observation (not an
    exception), and the log says once how to fix it."""
    monkeypatch.setattr(sandbox_mod, "_WARNED", set())
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    with caplog.at_level(logging.WARNING, logger="tools.sandbox"):
        sb = Sandbox(**weaker)
        runs = await asyncio.gather(sb.run(code), Sandbox(**weaker).run(code))
        res = await PythonTool(sandbox=sb).call({"code": code}, _ctx())
    assert sb.shortfall and all(r.error == REFUSED and r.exit_code is None for r in runs), runs
    assert not res.ok and "refused" in res.error and res.meta["exit_code"] is None
    assert not marker.exists()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "allow_unconfined=true" in errors[0].message, errors
    assert "bubblewrap" in errors[0].message and sb.shortfall in errors[0].message
    if "use_seccomp" in weaker:
        assert "no syscall filter (disabled)" in sb.shortfall


async def test_missing_libseccomp_is_refused_then_announced_when_opted_in(monkeypatch, caplog):
    def unavailable(*args, **kwargs):
        raise syscall_filter.FilterUnavailable("libseccomp is not usable (RuntimeError: Unable to find libseccomp)")
    monkeypatch.setattr(sandbox_mod, "_WARNED", set())
    monkeypatch.setattr(syscall_filter, "bpf_program", unavailable)
    monkeypatch.setattr(syscall_filter, "syscall_filter", unavailable)
    with caplog.at_level(logging.WARNING, logger="tools.sandbox"):
        refused = await Sandbox().run("print(1)")
        allowed = Sandbox(allow_unconfined=True)
        runs = await asyncio.gather(allowed.run("print(6 * 7)"), allowed.run("print(6 * 7)"))
    assert refused.error == REFUSED and "Unable to find libseccomp" in allowed.shortfall
    assert all(r.error is None and r.stdout.strip() == "42" and not r.seccomp for r in runs), runs
    warned = [r.message for r in caplog.records if "WEAKER isolation" in r.message]
    assert len(warned) == 1 and "allow_unconfined=true" in warned[0] and "no syscall filter" in warned[0], warned


async def test_fallbacks_when_opted_in_warn_once_and_filter(monkeypatch, caplog, listener):
    _filter_or_skip()
    monkeypatch.setattr(sandbox_mod, "_WARNED", set())
    monkeypatch.setenv("FAKE_SECRET", SECRET)
    port = listener.getsockname()[1]
    code = (f"import os, socket\nprint(os.environ.get('FAKE_SECRET'))\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1); print('CONNECTED')\n"
            f"except OSError:\n    print('BLOCKED')\n") + add_key()
    with caplog.at_level(logging.WARNING, logger="tools.sandbox"):
        first = Sandbox(use_bwrap=False, allow_unconfined=True)
        second = Sandbox(use_bwrap=False, allow_unconfined=True)
        runs = await asyncio.gather(first.run(code), second.run(code))
    assert [r.isolation for r in runs] == [first.isolation] * 2 and first.isolation in ("unshare", "rlimits")
    warned = [r.message for r in caplog.records if "WEAKER isolation" in r.message]
    assert len(warned) == 1 and ("NO file-system confinement" in warned[0] or "NO network" in warned[0]), warned
    for run in runs:
        assert SECRET not in run.stdout and run.exit_code == 0 and run.seccomp, run
        assert f"ADD_KEY -1 {errno.EPERM}" in run.stdout, run  # the filter is loaded before exec
        if run.isolation == "unshare":
            assert "BLOCKED" in run.stdout
    mem = await Sandbox(use_bwrap=False, use_unshare=False, memory_mb=256, allow_unconfined=True).run(
        "try:\n    bytearray(1 << 30)\nexcept MemoryError:\n    print('MemoryError')" + add_key())
    assert mem.isolation == "rlimits" and "MemoryError" in mem.stdout and mem.seccomp
    assert f"ADD_KEY -1 {errno.EPERM}" in mem.stdout, mem


def test_bad_limits_rejected():
    with pytest.raises(ValueError):
        Sandbox(cpu_seconds=0)
    with pytest.raises(ValueError):
        Sandbox(price_per_second=-1)
    with pytest.raises(ValueError, match="max_parallel"):
        Sandbox(max_parallel=-1)


def test_resolve_records_the_symlink_chain(tmp_path):
    (tmp_path / "base" / "bin").mkdir(parents=True)
    (tmp_path / "base" / "bin" / "python3.11").write_text("")
    (tmp_path / "base" / "bin" / "python3").symlink_to("python3.11")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python3").symlink_to(tmp_path / "base" / "bin" / "python3")
    (tmp_path / "venv" / "bin" / "python").symlink_to("python3")
    (tmp_path / "venv" / "up").symlink_to(tmp_path / "base" / "bin")
    links: dict[str, str] = {}
    real = root_mod._resolve(str(tmp_path / "venv" / "bin" / "python"), links)
    assert real == str(tmp_path / "base" / "bin" / "python3.11")
    assert links == {str(tmp_path / "venv" / "bin" / "python"): "python3",
                     str(tmp_path / "venv" / "bin" / "python3"): str(tmp_path / "base" / "bin" / "python3"),
                     str(tmp_path / "base" / "bin" / "python3"): "python3.11"}
    # ".." after a symlink is taken from where the link points, as the kernel does (not folded lexically)
    assert root_mod._resolve(str(tmp_path / "venv" / "up" / ".." / "bin" / "python3.11"), {}) == real


@pytest.mark.skipif(not shutil.which("ldd"), reason="needs ldd")
def test_sandbox_root_binds_only_the_interpreter(monkeypatch):
    argv = root_mod.sandbox_root.__wrapped__(sys.executable)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert binds and all(argv[argv.index(b) + 1] == b for b in binds)
    trees = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
    for b in binds:
        assert b.count("/") >= 2 or b in ("/lib", "/lib64"), b
        assert not REPO.is_relative_to(b) and not Path.home().resolve().is_relative_to(b), b
        assert not Path(b).is_relative_to(REPO) or any(Path(b).is_relative_to(t) for t in trees), b  # only a venv
    assert not any(Path(b).is_relative_to("/etc") for b in binds)
    # a library the interpreter would load from the checkout's top dir means binding the checkout: refused
    monkeypatch.setattr(root_mod, "_shared_libraries", lambda exe: [str(REPO / "pyproject.toml")])
    with pytest.raises(RuntimeError, match="too broad"):
        root_mod.sandbox_root.__wrapped__(sys.executable)


async def test_unbuildable_root_is_refused_loudly(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("the interpreter needs /, too broad to expose")

    real_which = shutil.which

    def which(cmd, *args, **kwargs):  # as on a host with bwrap, whether or not this one has it
        return "/usr/bin/bwrap" if cmd == "bwrap" else real_which(cmd, *args, **kwargs)
    monkeypatch.setattr(sandbox_mod, "_WARNED", set())
    monkeypatch.setattr(sandbox_mod, "sandbox_root", broken)
    monkeypatch.setattr(sandbox_mod.shutil, "which", which)
    with caplog.at_level(logging.WARNING, logger="tools.sandbox"):
        refused = await Sandbox().run("print(6 * 7)")
        sb = Sandbox(allow_unconfined=True)
        run = await sb.run("print(6 * 7)")
    assert refused.error == REFUSED and refused.stdout == ""
    assert sb.isolation in ("unshare", "rlimits") and run.stdout.strip() == "42"
    for level in (logging.ERROR, logging.WARNING):  # the refusal, then the opted-in run's warning
        assert any(r.levelno == level and "could not build the minimal root" in r.message
                   and "too broad" in r.message for r in caplog.records), level
