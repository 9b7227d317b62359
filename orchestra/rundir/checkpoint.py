"""Atomic, verifiable checkpoints in a run directory: `<run_dir>/checkpoints/step_000012/`.

A checkpoint is written into a hidden temporary directory, sealed with a MANIFEST.json holding each file's
size and sha256, fsynced, and only then renamed into place (rename is atomic on one filesystem). A crash
mid-write therefore leaves either the previous checkpoint or a stray temp dir, never a half checkpoint under
a real name. `latest_good` walks checkpoints newest first and skips (and reports) any whose manifest is missing
or whose files no longer match it, so a corrupt checkpoint falls back to the previous one.
What goes inside (policy, optimizer, RNG, data position, reward-actor state) is the caller's business.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
MANIFEST = "MANIFEST.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save(run_dir: str | Path, step: int, write: Callable[[Path], None], meta: dict[str, Any], keep: int = 2) -> Path:
    """Call `write(tmp_dir)` to fill a checkpoint, seal it, and atomically publish it as step_<step>."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_step_{step:06d}_", dir=root))
    try:
        write(tmp)
        (tmp / "meta.json").write_text(json.dumps({**meta, "step": step}, indent=1))
        files = {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
                files[str(p.relative_to(tmp))] = {"size": p.stat().st_size, "sha256": _sha256(p)}
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
        _fsync_dir(tmp)
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it atomically enough
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root, keep)
    return final


def verify(path: Path) -> str | None:
    """None if the checkpoint matches its manifest, else what is wrong."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return "no manifest (incomplete write)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as e:
        return f"unreadable manifest: {e}"
    for name, want in files.items():
        p = path / name
        if not p.is_file():
            return f"missing file {name}"
        if p.stat().st_size != want["size"] or _sha256(p) != want["sha256"]:
            return f"file {name} does not match its manifest (corrupt)"
    return None


def candidates(run_dir: str | Path) -> list[Path]:
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_")), reverse=True)


def latest_good(run_dir: str | Path, report: Callable[[str], None] | None = None) -> Path | None:
    """Newest checkpoint that verifies; corrupt ones are reported (and left in place for inspection)."""
    for path in candidates(run_dir):
        problem = verify(path)
        if problem is None:
            return path
        msg = f"checkpoint {path} is unusable ({problem}); falling back to an earlier one"
        (report or log.warning)(msg)
    return None


def latest_run(root: str | Path) -> Path | None:
    """The run directory under `root` (or `root` itself) whose newest good checkpoint was written last: what
    `make eval` and `make serve` use when no checkpoint is named."""
    root = Path(root)
    runs = [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    found = [(good.stat().st_mtime, run) for run in runs if (good := latest_good(run, report=lambda _m: None))]
    return max(found)[1] if found else None


def model_dir(path: str | Path) -> Path:
    """The HF model directory (with config.json) a path names: the path itself; for a run dir, inside its newest
    good checkpoint; for a checkpoint dir, the subdir holding the model (`learner/`, as cluster/trainer.py saves
    it, or `policy/`, `model/`). ValueError saying what is missing."""
    p = Path(path).expanduser()
    if (p / "checkpoints").is_dir():
        found = latest_good(p)
        if found is None:
            raise ValueError(f"run dir {p} holds no valid checkpoint")
        p = found
    for candidate in (p, p / "learner", p / "policy", p / "model"):
        if (candidate / "config.json").is_file():
            return candidate
    raise ValueError(f"{p} is neither an HF checkpoint (config.json) nor a run/checkpoint dir holding one")


def tokenizer_mismatch(path: Path, tokenizer: Any) -> str | None:
    """Why a checkpoint's saved tokenizer (`<path>/learner/`) is not `tokenizer`, or None when they agree or the
    checkpoint saved none. The tiny tokenizer is trained on the project's own text, so a code change (a zoo file,
    the system prompt) builds another one: resuming a run saved before it would feed the old weights other
    token ids (measured: format_ok 0 on every step after resuming a good step-0 checkpoint)."""
    saved = path / "learner"
    if not (saved / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    old = AutoTokenizer.from_pretrained(str(saved), local_files_only=True).get_vocab()
    new = tokenizer.get_vocab()
    if old == new:
        return None
    differ = sum(old.get(t) != i for t, i in new.items()) + len(set(old) - set(new))
    return (f"{path} was saved with another tokenizer than this code builds ({len(old)} vs {len(new)} tokens, "
            f"{differ} differ): its weights would read other token ids")


class ResumeError(RuntimeError):
    """A checkpoint this code cannot continue training from (cluster/train.py prints it as one line)."""


def check_resumable(path: Path, tokenizer: Any) -> None:
    """ResumeError when `tokenizer_mismatch`: training on would only produce garbage, reported as progress."""
    why = tokenizer_mismatch(path, tokenizer)
    if why:
        raise ResumeError(f"cannot resume: {why}. Train in a new run dir (run_dir=...) or resume with the code "
                          "the run was trained with")


def read_meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "meta.json").read_text())


def _prune(root: Path, keep: int) -> None:
    for stray in root.glob(".tmp_step_*"):  # leftovers of writes killed mid-way (also with keep <= 0: keep all)
        shutil.rmtree(stray, ignore_errors=True)
    if keep <= 0:
        return
    good = [p for p in sorted(root.iterdir(), reverse=True) if p.is_dir() and p.name.startswith("step_")]
    for old in good[keep:]:
        shutil.rmtree(old, ignore_errors=True)


# What an HF loader that reads every *.safetensors in a directory (vLLM) may see: a learner dir also holds the
# frozen reference (`ref_model.safetensors`), and vLLM, finding no shard index, loads both into one model without a
# word (a mix of policy and reference weights; ../shared reviews, vllm-cpu 2).
SERVABLE = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
            "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
            "vocab.json", "merges.txt")


def servable_dir(path: str | Path) -> Path:
    """The model dir of `path` (model_dir) as a loader that reads every safetensors file may take it: the dir
    itself when it holds nothing else, else `<dir>.servable/` beside it, with links to the HF files only (model
    shards included, the learner's reference, optimizer and RNG files left out)."""
    src = model_dir(path)
    extra = [p.name for p in src.glob("*.safetensors") if p.name not in SERVABLE and not p.name.startswith("model-")]
    if not extra:
        return src
    out = src.with_name(src.name + ".servable")
    out.mkdir(exist_ok=True)
    for p in src.iterdir():
        if p.name in SERVABLE or (p.name.startswith("model-") and p.suffix == ".safetensors"):
            link = out / p.name
            if not link.exists():
                link.symlink_to(p.resolve())
    return out
