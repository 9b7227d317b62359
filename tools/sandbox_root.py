"""The code sandbox's root: what sandboxed code sees of the host's files, and the environment it gets.

`sandbox_root(python, binaries)` gives the bwrap arguments that build the root from nothing, read-only: only the
interpreter (its symlink chain recreated), the sys.path dirs inside its prefix and base prefix (stdlib,
lib-dynload, the venv's site-packages: the tool promises numpy and sympy), the venv's pyvenv.cfg, the dirs of the
shared libraries `ldd` names for it (and for `binaries`, e.g. setpriv), and /usr/share/zoneinfo. No /etc, shell or
other binaries, project checkout, home, /run, host /tmp (Ray's session dir). `scrubbed_env` is the whole
environment the code gets. The mounts, namespaces, filter and limits around this root, and which isolation runs
at all, are tools/sandbox.py's.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment the code gets: nothing inherited, so no API key can leak in."""
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": home}


@functools.lru_cache(maxsize=8)
def sandbox_root(python: str, binaries: tuple[str, ...] = ()) -> tuple[str, ...]:
    """bwrap arguments that build the sandbox's root from nothing: read-only binds of only what `python` (and
    `binaries`) need to run, plus the symlinks that lead to them. Raises RuntimeError when that cannot be
    worked out or would expose too much; the caller then falls back (loudly) to a weaker isolation."""
    query = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.path]))"
    out = subprocess.run([python, "-I", "-c", query], capture_output=True, text=True, check=True, timeout=30,
                         env=scrubbed_env("/tmp"), cwd="/")
    prefix, base, path = json.loads(out.stdout)
    homes = tuple(os.path.realpath(p) for p in (prefix, base))
    links: dict[str, str] = {}
    binds: set[str] = set()

    def expose(p: str, whole_dir: bool = False) -> None:
        real = _resolve(p, links)
        binds.add(os.path.dirname(real) if whole_dir else real)

    for exe in (python, *binaries):
        expose(exe)
        for lib in _shared_libraries(os.path.realpath(exe)):
            expose(lib, whole_dir=True)  # the whole dir: extension modules load more libraries from it later
    if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
        expose(os.path.join(prefix, "pyvenv.cfg"))  # without it a venv's python forgets its site-packages
    # Only sys.path entries inside the interpreter's own trees: a .pth file may add the project checkout.
    for entry in path:
        if os.path.isdir(entry) and any(_within(os.path.realpath(entry), h) for h in homes):
            expose(entry)
    if os.path.isdir("/usr/share/zoneinfo"):
        expose("/usr/share/zoneinfo")
    binds = {b for b in binds if not any(b != o and _within(b, o) for o in binds)}  # drop nested binds
    protected = [os.path.realpath(p) for p in (Path(__file__).resolve().parents[1], os.path.expanduser("~"))]
    for b in binds:  # a top-level dir, or one holding the checkout or home, would undo the whole point
        top_level = b.count("/") < 2 and b not in ("/lib", "/lib64", "/lib32")
        if top_level or any(_within(p, b) for p in protected):
            raise RuntimeError(f"the interpreter needs {b}, too broad to expose")
    links = {at: to for at, to in links.items() if not any(_within(at, b) for b in binds)}  # already there
    parents = {d for p in (*binds, *links) for d in _ancestors(p)} - {"/tmp"}
    argv: list[str] = []
    for d in sorted(parents):  # explicit 0755: bwrap makes implicit parents 0700, unreadable once we drop uid
        argv += ["--perms", "0755", "--dir", d]
    for at in sorted(links):
        argv += ["--symlink", links[at], at]
    for b in sorted(binds):
        argv += ["--ro-bind", b, b]
    return tuple(argv)


def _resolve(path: str, links: dict[str, str]) -> str:
    """realpath(path), recording into `links` every symlink passed on the way (where it is -> what it says),
    so the sandbox can recreate them: a venv's python is usually a chain of links into a base install."""
    # Not abspath: it folds "x/.." lexically, which is wrong when x is a symlink (ldd prints such paths).
    full = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    done, todo, hops = "/", [c for c in full.split("/") if c], 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, part)
        if not os.path.islink(here):
            done = here
            continue
        hops += 1
        if hops > 40:
            raise RuntimeError(f"too many symlinks resolving {path}")
        links[here] = os.readlink(here)
        todo = [c for c in links[here].split("/") if c] + todo
        done = "/" if links[here].startswith("/") else done
    if not os.path.exists(done):
        raise RuntimeError(f"{path} does not exist")
    return done


def _shared_libraries(exe: str) -> list[str]:
    """The shared objects (and ELF interpreter) `ldd` says `exe` loads, as absolute paths."""
    if not shutil.which("ldd", path=SAFE_PATH):
        raise RuntimeError("ldd not found")
    out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30, env=scrubbed_env("/tmp"))
    if out.returncode != 0:
        if "not a dynamic executable" in out.stdout + out.stderr:
            return []
        raise RuntimeError(f"ldd {exe} failed: {out.stderr.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        target = line.split("=>", 1)[-1].strip().split(" (")[0].strip()
        if "not found" in line:
            raise RuntimeError(f"{exe}: {line.strip()}")
        if target.startswith("/"):
            libs.append(target)
    return libs


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
