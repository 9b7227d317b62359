"""README.md's commands run as written on a fresh clone, and the docs' links resolve (fast: no network, no training).

Every shell line of README.md's fenced code blocks is checked the way its program would read it, without running
anything heavy:
  make <target> [VAR=value] [ARGS="..."]   the target and variables exist in the Makefile; ARGS go through the
                                           validation of the module the target runs (cluster.train and
                                           cluster.evaluate: orchestra.config.load_config; cluster.serve: its own
                                           `plan` plus the experts binding; cluster.demo: its keys; submit: the
                                           verl launcher's flags and load_config)
  [.venv/bin/]python -m <module> ...       the module exists (importlib.util.find_spec) and accepts the arguments:
                                           the same validators for key=value CLIs, `--help` for argparse CLIs
                                           (every --flag used must be one it lists); `cluster.routing_log` is run
                                           for real into a temporary directory (0.5 s), so that the commands using
                                           its outputs (`experiment=runs/data/.../experiment.yaml`) are checked
                                           against what it wrote
  pip install ...                          extras exist in pyproject.toml; pinned versions agree with the project's
  .venv/bin/<tool>, export, curl           the tool is installed; a valid name; a URL and JSON body the app serves
Paths the README names (conf/..., docs/..., examples/..., source files) must exist, and relative markdown links in
README.md and docs/*.md must resolve. Only lines carrying a `# needs a GPU` or `# needs a key` comment are skipped,
after the same static checks: they cannot run on a CPU-only machine without credentials.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
MARK = re.compile(r"#\s*needs a (GPU|key)\b")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
MAX_README_LINES = 250


@dataclass
class Command:
    line: int  # 1-based line of README.md where it starts
    text: str  # the logical line (continuations joined), comment included
    argv: list[str]  # shell words, comment stripped
    mark: str  # "GPU" / "key" when the line says it needs one, else ""

    def __str__(self) -> str:
        return f"README.md:{self.line}: {' '.join(self.argv)}"


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, first line number of the body, body lines) of every ``` block."""
    blocks, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence and lang is None:
            lang, start, body = fence.group(1).lower(), n + 1, []
        elif fence:
            blocks.append((lang, start, body))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def shell_commands(text: str) -> list[Command]:
    """Every command of the README's shell blocks: continuations (a trailing backslash, or a quote still open)
    joined, split at `&&` and `;`."""
    out = []
    for lang, start, body in fenced_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        i = 0
        while i < len(body):
            first, logical = i, body[i]
            while True:
                if logical.rstrip().endswith("\\") and i + 1 < len(body):
                    i += 1
                    logical = logical.rstrip()[:-1] + " " + body[i].strip()
                    continue
                try:
                    words = shlex.split(logical, comments=True)
                except ValueError:  # an open quote: the command goes on on the next line
                    if i + 1 >= len(body):
                        raise
                    i += 1
                    logical += "\n" + body[i]
                    continue
                break
            i += 1
            if not words:
                continue
            mark = MARK.search(logical)
            part: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", ";"):
                    if part:
                        out.append(Command(start + first, logical, part, mark.group(1) if mark else ""))
                    part = []
                else:
                    part.append(word)
    return out


COMMANDS = shell_commands(README.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the Makefile
def makefile_targets() -> dict[str, list[str]]:
    """target -> its recipe lines."""
    targets: dict[str, list[str]] = {}
    current = None
    for line in MAKEFILE.read_text().splitlines():
        rule = re.match(r"^([a-z][a-z-]*):(?!=)", line)
        if rule:
            current = rule.group(1)
            targets[current] = []
        elif line.startswith("\t") and current:
            targets[current].append(line.strip())
        elif line and not line.startswith("#"):
            current = None
    return targets


def makefile_variables() -> set[str]:
    return set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*(?:\?|:)?=", MAKEFILE.read_text(), re.M))


def target_module(target: str) -> tuple[str, list[str]]:
    """The module a target runs with $(ARGS), and the arguments its recipe puts before them."""
    for line in makefile_targets()[target]:
        found = re.search(r"-m (\S+)((?: \S+)*?) \$\(ARGS\)", line)
        if found:
            return found.group(1), found.group(2).split()
    return "", []


# ---------------------------------------------------------------- validators: the programs' own checks
def load(overrides: list[str]) -> None:
    from orchestra.config import load_config

    load_config([produced(o) for o in overrides])


def produced(override: str) -> str:
    """`experiment=runs/data/x/experiment.yaml`, written by a README command run earlier: that command's real output
    (run here into a temporary directory)."""
    key, _, value = override.partition("=")
    if not value.startswith("runs/") or (ROOT / value).exists():
        return override
    for cmd in COMMANDS:
        if "cluster.routing_log" in cmd.argv and "--out" in cmd.argv:
            out = cmd.argv[cmd.argv.index("--out") + 1].rstrip("/")
            if value.startswith(out + "/"):
                return f"{key}={run_routing_log(tuple(cmd.argv[cmd.argv.index('-m') + 2:])) / value[len(out) + 1:]}"
    return override


@functools.cache
def run_routing_log(args: tuple[str, ...]) -> Path:
    """The README's routing-log command, run as written but for its output directory."""
    import tempfile

    argv = list(args)
    out = Path(tempfile.mkdtemp(prefix="readme_routing_log_")) / Path(argv[argv.index("--out") + 1]).name
    argv[argv.index("--out") + 1] = str(out)
    proc = subprocess.run([sys.executable, "-m", "cluster.routing_log", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"python -m cluster.routing_log {' '.join(args)}: {proc.stderr[-2000:]}"
    return out


@functools.cache
def trained_runs() -> frozenset[str]:
    """The run dirs the README's `make train` commands write (what `checkpoint=runs/...` can name)."""
    from orchestra.config import load_config

    runs = set()
    for cmd in COMMANDS:
        if cmd.argv[:2] == ["make", "train"]:
            args = shlex.split(dict(a.split("=", 1) for a in cmd.argv if "=" in a).get("ARGS", ""))
            runs.add(load_config([produced(a) for a in args]).run_dir.rstrip("/"))
    return frozenset(runs)


def check_checkpoint(value: str) -> None:
    if value.startswith("runs/"):
        assert value.rstrip("/") in trained_runs(), f"checkpoint={value}: no `make train` in the README writes it " \
                                                    f"(they write {sorted(trained_runs())})"


def check_train(argv: list[str]) -> None:
    flags = [a for a in argv if a.startswith("--")]
    assert set(flags) <= {"--print-config"}, f"cluster.train takes no flags but --print-config: {flags}"
    load([a for a in argv if a not in flags])


def check_evaluate(argv: list[str]) -> None:
    from cluster.evaluate import split_args

    own, overrides = split_args(argv)
    load(overrides)
    check_checkpoint(own.get("checkpoint", ""))


def check_serve(argv: list[str]) -> None:
    from cluster.serve import check_experts, plan

    p = plan([produced(a) for a in argv])  # unknown keys and bad settings raise ValueError naming them
    check_checkpoint(str(p.args.get("checkpoint") or ""))
    load([f"experiment={p.args.get('experiment', 'cpu_tiny')}", *p.args["overrides"]])
    if p.args.get("experts"):
        check_experts(dict(p.args))  # the file exists and binds every tier the experiment's policy calls


def check_demo(argv: list[str]) -> None:
    from cluster.demo import DEFAULTS

    keys = [a.partition("=")[0] for a in argv]
    assert all("=" in a for a in argv) and set(keys) <= set(DEFAULTS), f"cluster.demo keys are {sorted(DEFAULTS)}"


def check_verl_job(argv: list[str]) -> None:
    from cluster.verl.job import FLAGS

    flags = [a for a in argv if a.startswith("--")]
    assert set(flags) <= set(FLAGS), f"cluster.verl.job flags are {FLAGS}: {flags}"
    load([a for a in argv if a not in FLAGS])


def check_synth(argv: list[str]) -> None:
    keys = set(re.findall(r"args\.get\(\"(\w+)\"", (ROOT / "cluster" / "synth.py").read_text()))
    assert {a.partition("=")[0] for a in argv} <= keys, f"cluster.synth reads {sorted(keys)}"


def check_vllm_server(argv: list[str]) -> None:
    from cluster.vllm_server import parse

    assert parse(argv).checkpoint, "cluster.vllm_server needs checkpoint="


def check_pytest(argv: list[str]) -> None:
    for a in argv:
        if not a.startswith("-") and "/" in a:
            assert (ROOT / a.split("::")[0]).exists(), a


KEY_VALUE_CLIS = {"cluster.train": check_train, "cluster.evaluate": check_evaluate, "cluster.serve": check_serve,
                  "cluster.demo": check_demo, "cluster.verl.job": check_verl_job, "cluster.synth": check_synth,
                  "tools.mcp": load, "pytest": check_pytest, "cluster.vllm_server": check_vllm_server}


def check_argparse(module: str, argv: list[str]) -> None:
    """An argparse CLI: its --help works (for the subcommand used, if any) and lists every --flag used."""
    usage = help_text(module, ()).split("\n\n")[0]
    subs = next((m for m in re.finditer(r"(\S+ )?\{([\w,-]+)\}", usage)  # `{a,b}` not after a --flag: subcommands
                 if not re.fullmatch(r"\[?-[^\]]*", (m.group(1) or "").strip())), None)
    sub = (argv[0],) if subs and argv and argv[0] in subs.group(2).split(",") else ()
    assert not subs or sub, f"{module}: give one of its subcommands {{{subs.group(2)}}}"
    text = help_text(module, sub)
    for flag in (a.split("=")[0] for a in argv if a.startswith("--")):
        listed = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
        assert listed, f"python -m {' '.join([module, *sub])}: no {flag}"
    if module == "cluster.routing_log":
        run_routing_log(tuple(argv))


@functools.cache
def help_text(module: str, sub: tuple[str, ...]) -> str:
    proc = subprocess.run([sys.executable, "-m", module, *sub, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"python -m {module} {' '.join(sub)} --help: {proc.stderr[-1000:]}"
    return proc.stdout


def check_module(module: str, argv: list[str]) -> None:
    assert importlib.util.find_spec(module) is not None, f"no module {module}"
    if module in KEY_VALUE_CLIS:
        KEY_VALUE_CLIS[module](argv)
    else:
        check_argparse(module, argv)


def check_make(argv: list[str]) -> None:
    targets, variables = makefile_targets(), makefile_variables()
    wanted = [a for a in argv if "=" not in a and not a.startswith("-")]
    assert wanted, "make without a target"
    for target in wanted:
        assert target in targets, f"no Makefile target {target!r}"
    assigned = dict(a.split("=", 1) for a in argv if "=" in a)
    for var in assigned:
        assert var in variables, f"the Makefile reads no variable {var}"
    args = shlex.split(assigned.get("ARGS", ""))
    for target in wanted:
        module, fixed = target_module(target)
        if not module:
            assert not args, f"make {target} does not pass ARGS on"
            continue
        fixed = [f.replace("$(EXP)", assigned.get("EXP", "h100_2x8")) for f in fixed]
        check_module(module, [*fixed, *args])


def pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def project_pins() -> dict[str, set[str]]:
    """name -> the versions the project pins it at (pyproject, Makefile, cluster/ray-cluster.yaml): the CPU venv and
    the GPU stack pin torch differently."""
    project = pyproject()
    specs = [*project["dependencies"], *(d for deps in project["optional-dependencies"].values() for d in deps)]
    text = " ".join([*specs, MAKEFILE.read_text(), (ROOT / "cluster" / "ray-cluster.yaml").read_text()])
    pins: dict[str, set[str]] = {}
    for name, version in re.findall(r"([A-Za-z0-9_.-]+)==([0-9][\w.]*)", text):
        pins.setdefault(name.lower(), set()).add(version)
    return pins


def check_pip(argv: list[str]) -> None:
    assert argv[:1] == ["install"], "only `pip install` is expected"
    extras = pyproject()["optional-dependencies"]
    pins = project_pins()
    for word in argv[1:]:
        found = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        if found:
            missing = set(found.group(1).split(",")) - set(extras)
            assert not missing, f"pyproject.toml has no extra {sorted(missing)}"
        pin = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", word)
        if pin and pin.group(1).lower() in pins:
            assert pin.group(2) in pins[pin.group(1).lower()], f"{word}: the project pins {pins[pin.group(1).lower()]}"


def check_curl(argv: list[str]) -> None:
    serve = yaml.safe_load((ROOT / "conf" / "serve.yaml").read_text())
    http, app = serve["http_options"], serve["applications"][0]
    url = urlparse(next(a for a in argv if a.startswith("http")))
    assert url.hostname in ("127.0.0.1", "localhost") and url.port == http["port"], url.geturl()
    assert f'"{url.path}"' in (ROOT / "actors" / "serve" / "http.py").read_text(), f"the app serves no {url.path}"
    if "-d" in argv:
        body = json.loads(argv[argv.index("-d") + 1])
        assert body["model"] == app["args"]["model_id"], body["model"]


def check_command(cmd: Command) -> None:
    argv = list(cmd.argv)
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):  # environment assignments before a command
        argv.pop(0)
    prog, rest = argv[0], argv[1:]
    if prog == "make":
        check_make(rest)
    elif prog in ("python", ".venv/bin/python", "python3"):
        assert rest[:1] == ["-m"], f"{cmd}: run modules with -m"
        check_module(rest[1], rest[2:])
    elif prog in ("pip", ".venv/bin/pip"):
        check_pip(rest)
    elif prog.startswith(".venv/bin/"):
        assert (Path(sys.executable).parent / Path(prog).name).exists(), f"{prog} is not installed by make setup"
    elif prog == "export":
        assert rest and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", rest[0]), rest
        from cluster.demo import KEY_FILE  # the key file `make serve` writes when no key is set

        for path in re.findall(r"\$\(cat ([^)\s]+)\)", cmd.text):
            assert path == str(KEY_FILE) or (ROOT / path).is_file(), f"{path}: make serve writes its key to {KEY_FILE}"
    elif prog == "curl":
        check_curl(rest)
    else:
        pytest.fail(f"{cmd}: the README test does not know {prog!r}; check it here or mark it `# needs a ...`")
    for word in rest:  # files the command reads from the checkout
        value = word.split("=", 1)[-1]
        if re.match(r"(conf|docs|examples|cluster|bench|tests|tools|orchestra|actors|reward)/", value):
            assert (ROOT / value).exists(), f"{cmd}: {value} does not exist"


@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"L{c.line}-{'-'.join(c.argv[:3])}" for c in COMMANDS])
def test_command_runs_as_written(cmd: Command) -> None:
    check_command(cmd)
    if cmd.mark:
        pytest.skip(f"{cmd}: needs a {cmd.mark} (checked statically only)")


def test_readme_has_the_two_commands_and_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    assert ["make", "train"] in [c.argv for c in COMMANDS] and ["make", "test"] in [c.argv for c in COMMANDS]


def prose(text: str) -> str:
    """The text outside fenced blocks, inline code spans blanked (a list index is no link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if re.match(r"^\s*```", line):
            fenced = not fenced
            kept.append("")
            continue
        kept.append("" if fenced else line)
    return "\n".join(kept)


def test_paths_and_make_targets_the_readme_names_exist() -> None:
    text = README.read_text(encoding="utf-8")
    paths = set(re.findall(r"(?<![\w/.-])((?:conf|docs|examples|cluster|bench|tests|tools|orchestra|actors|reward)"
                           r"/[\w./-]*[\w/])", text))
    assert paths, "the README names no file?"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"
    targets = makefile_targets()
    named = set(re.findall(r"`make ([a-z][a-z-]*)", text))
    assert named <= set(targets), f"README.md names make targets the Makefile lacks: {sorted(named - set(targets))}"
    modules = set(re.findall(r"python -m ([a-z_][\w.]*[a-z0-9_])", text))
    assert all(importlib.util.find_spec(m) is not None for m in modules), modules


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


@pytest.mark.parametrize("doc", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    text = prose(doc.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    bad = []
    for target in re.findall(r"\[[^\]\n]*\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md":
            anchors = {slug(h) for h in re.findall(r"^#+\s+(.*)$", dest.read_text(encoding="utf-8"), re.M)}
            if anchor not in anchors:
                bad.append(target)
    assert not bad, f"{doc.relative_to(ROOT)}: links that do not resolve: {bad}"
