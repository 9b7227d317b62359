"""Host-process plumbing for the code sandbox (tools/sandbox.py): a child's pipes, its process group, probes.

`CappedReader` drains a pipe but keeps at most a cap (a run printing 100 MB never holds more than the cap in
memory); `feed` writes the code to the child's stdin; `decode` turns what was kept into text with a truncation
note; `kill_group` kills the whole process group (and with it the pid namespace); `cleanup` removes a fallback's
private work dir. `probe` says, once per process, whether a command line runs here (with or without the
syscall filter); `bwrap_flags`, `user_processes` and `world_accessible` are the host facts the sandbox's
arguments and limits depend on. Which isolation to use, and the limits themselves, are tools/sandbox.py's.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import subprocess
from typing import Any

from tools import syscall_filter
from tools.sandbox_root import scrubbed_env

_PROBED: dict[tuple[Any, ...], bool] = {}


class CappedReader:
    """Drains a pipe to EOF but keeps at most `cap` bytes (the rest is counted, then dropped)."""

    def __init__(self, stream: asyncio.StreamReader, cap: int):
        self.stream, self.cap = stream, cap
        self.kept = bytearray()
        self.total = 0

    async def drain(self) -> None:
        while True:
            chunk = await self.stream.read(1 << 16)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]


async def feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    try:
        proc.stdin.write(data)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):  # the child died before reading all of its code
        pass


def decode(reader: CappedReader, max_chars: int) -> tuple[str, bool]:
    text = bytes(reader.kept).decode("utf-8", "replace")
    if len(text) <= max_chars and reader.total <= len(reader.kept):
        return text, False
    return text[:max_chars] + f"\n... [output truncated: {reader.total} bytes in all]", True


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cleanup(workdir: str | None) -> None:
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def probe(argv: tuple[str, ...], bpf: bytes | None = None, flt: Any = None) -> bool:
    """Whether `argv` exits 0, cached per process: with `bpf` given to bwrap (--seccomp), `flt` loaded before exec."""
    key = (argv, bpf, flt)
    if key not in _PROBED:
        fds = (syscall_filter.pipe_with(bpf),) if bpf is not None else ()
        full = [argv[0], "--seccomp", str(fds[0]), *argv[1:]] if fds else list(argv)
        try:
            ok = subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True, timeout=15, pass_fds=fds,
                                env=scrubbed_env("/tmp"), cwd="/", preexec_fn=flt.load if flt else None
                                ).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        finally:
            for fd in fds:
                os.close(fd)
        _PROBED[key] = ok
    return _PROBED[key]


@functools.lru_cache(maxsize=4)
def bwrap_flags(*flags: str) -> tuple[str, ...]:
    """Those of `flags` this bwrap knows (`bwrap --help` lists them), e.g. --disable-userns from 0.8 on."""
    try:
        out = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(f for f in flags if f in out.split())


def user_processes(uid: int) -> int:
    """Processes this uid already has: RLIMIT_NPROC counts them all, so the cap is relative to it."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def world_accessible(path: str) -> bool:
    """Whether another uid could execute `path` (every parent directory searchable by others)."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts)):
        try:
            if not os.stat("/".join(parts[:i])).st_mode & 0o001:
                return False
        except OSError:
            return False
    return os.access(real, os.X_OK) and bool(os.stat(real).st_mode & 0o001)
