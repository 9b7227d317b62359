"""Checkpoints are atomic and verified: a half write is invisible, a corrupt one falls back to the previous."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestra.rundir import checkpoint


def writer(payload: bytes):
    def write(tmp: Path) -> None:
        (tmp / "weights.bin").write_bytes(payload)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "opt.bin").write_bytes(payload[::-1])
    return write


def test_save_verify_and_latest(tmp_path):
    checkpoint.save(tmp_path, 1, writer(b"one"), {"note": "a"}, keep=3)
    p2 = checkpoint.save(tmp_path, 2, writer(b"two"), {"note": "b"}, keep=3)
    assert checkpoint.verify(p2) is None
    assert checkpoint.latest_good(tmp_path) == p2
    assert checkpoint.read_meta(p2) == {"note": "b", "step": 2}


def test_crash_mid_write_leaves_previous_checkpoint(tmp_path):
    good = checkpoint.save(tmp_path, 1, writer(b"one"), {})

    def boom(tmp: Path) -> None:
        (tmp / "weights.bin").write_bytes(b"partial")
        raise KeyboardInterrupt  # killed mid-write

    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, 2, boom, {})
    assert checkpoint.latest_good(tmp_path) == good
    assert not list(checkpoint.checkpoint_dir(tmp_path).glob(".tmp_*"))


def test_corrupt_checkpoint_is_reported_and_skipped(tmp_path):
    good = checkpoint.save(tmp_path, 1, writer(b"one"), {})
    bad = checkpoint.save(tmp_path, 2, writer(b"two"), {})
    (bad / "weights.bin").write_bytes(b"bitrot")
    reports = []
    assert checkpoint.latest_good(tmp_path, report=reports.append) == good
    assert "corrupt" in reports[0] and "step_000002" in reports[0]
    (bad / checkpoint.MANIFEST).unlink()
    assert "no manifest" in checkpoint.verify(bad)


def test_keep_prunes_old(tmp_path):
    for step in range(1, 5):
        checkpoint.save(tmp_path, step, writer(b"x"), {}, keep=2)
    assert [p.name for p in checkpoint.candidates(tmp_path)] == ["step_000004", "step_000003"]


def test_servable_dir_leaves_out_the_learners_reference(tmp_path):
    """vLLM loads every *.safetensors of a dir: served as is, a learner checkpoint mixes the policy with its frozen
    reference (ref_model.safetensors) without a word. The servable dir links the HF files only."""
    from orchestra.rundir.checkpoint import servable_dir

    learner = tmp_path / "step_000001" / "learner"
    learner.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "ref_model.safetensors", "optimizer.pt"):
        (learner / name).write_text(name)
    out = servable_dir(learner)
    assert out != learner and sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                                       "tokenizer.json"]
    assert (out / "model.safetensors").read_text() == "model.safetensors"  # links to the learner's own files
    assert servable_dir(out) == out  # a clean dir is served as it is


def test_a_checkpoint_saved_with_another_tokenizer_is_not_resumed(tmp_path):
    """The tiny tokenizer is trained on the project's text, so new code can build another one: resuming a run
    saved before would feed its weights other token ids. The same tokenizer, or none saved, resumes."""
    from orchestra.config import load_config
    from orchestra.policy.models import load_tokenizer
    from orchestra.rundir.checkpoint import ResumeError, check_resumable, tokenizer_mismatch

    m = load_config([]).model
    tok = load_tokenizer(m.name, tiny=m.tiny, cache_dir=m.cache_dir, chat_template=m.chat_template)
    same, other, none = tmp_path / "same", tmp_path / "other", tmp_path / "none"
    for d in (same, other):
        tok.save_pretrained(str(d / "learner"))
    (none / "learner").mkdir(parents=True)
    spec = json.loads((other / "learner" / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: what a retrained vocabulary does at scale
    (other / "learner" / "tokenizer.json").write_text(json.dumps(spec))
    assert tokenizer_mismatch(same, tok) is None and tokenizer_mismatch(none, tok) is None
    check_resumable(same, tok)
    with pytest.raises(ResumeError, match=r"another tokenizer .* 2 differ"):
        check_resumable(other, tok)
