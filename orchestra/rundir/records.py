"""Episode records: what a training run writes per episode so that cluster/replay.py can re-run it offline.

Layout under `<run_dir>/episodes/`:
  step_000003.jsonl, eval_sft.jsonl, eval_final.jsonl  one JSON line per episode (below), rewritten whole when
                                                      a resumed run plays that step again
  schemas.json                                         tool catalogues by content hash (the prompt renders them)
  weights/v000123.pt                                   the policy weights of version 123 (`log.replay_weights`)
A record holds the episode id, kind (train | eval), step, uid, the task as the worker got it (preference
included), sampling settings with the episode's seed, the policy version it ran on, per turn the prompt length,
a hash of the prompt ids, the generated ids and their log-probs (6 decimals), every tool call with its full
result (text, $, seconds, error, meta), the answer and the reward with its terms. Token ids keep records compact
and exact.

Seeds: `episode_seed` gives every episode its own sampling stream, a pure function of (run seed, step or eval
tag, index). Sampling from a private stream draws from the same distribution as the shared one, so seeding
changes no expectation of what is learned, only makes each draw repeatable.
Left to others: when to record (cluster/trainer.py), replaying (cluster/replay.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from orchestra.jsonl import load_jsonl, write_jsonl

SEED_BITS = 40  # the agent loop derives turn seeds as seed * 1_000_003 + turn: stays below torch's 2**64


def episode_seed(run_seed: int, *parts: Any) -> int:
    """A stable seed for one episode (hash of the run seed and the episode's coordinates)."""
    key = ":".join(str(p) for p in (run_seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % (1 << SEED_BITS)


def ids_hash(ids: list[int]) -> str:
    """Short fingerprint of a token sequence (prompts are long and re-rendered by replay, so only compared)."""
    return hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:16]


def episodes_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "episodes"


def weights_path(run_dir: str | Path, version: int) -> Path:
    return episodes_dir(run_dir) / "weights" / f"v{version:06d}.pt"


def score_kwargs(cfg: Any, kind: str) -> dict[str, Any]:
    """reward.score.score_group's arguments for an episode kind: `eval` is the held-out score (the scalar rubric,
    no training-only terms), `train` the reward actor's rubric (one place, so replay re-scores as the run did)."""
    r, m = cfg.reward, cfg.model
    common = {"judges": dict(r.judges), "cost_scale": r.cost_scale, "latency_scale": r.latency_scale,
              "price_in": m.price_in_per_mtok, "price_out": m.price_out_per_mtok, "failure_reward": r.failure_reward}
    if kind == "eval":
        return {**common, "rubric": "scalar"}
    return {**common, "rubric": r.rubric, "min_std": r.min_std, "clip": r.adv_clip,
            "count_generation": r.count_generation_latency, "unanswered_penalty": r.unanswered_penalty,
            "norm_adv_by_std": r.norm_adv_by_std}


def episode_record(kind: str, step: int, request: dict[str, Any], sampling: dict[str, Any], traj: dict[str, Any],
                   scored: dict[str, Any], schemas: str) -> dict[str, Any]:
    """One JSON-able record from a rollout request, its trajectory dict and its Scored dict."""
    turns = traj.get("turns", [])
    return {"id": traj.get("episode_id", ""), "kind": kind, "step": step, "uid": traj.get("uid", ""),
            "task": request["task"], "sampling": {**sampling, "seed": request.get("seed")}, "schemas": schemas,
            "version": turns[0]["policy_version"] if turns else None,
            "turns": [{"prompt_len": len(t["prompt_ids"]), "prompt_hash": ids_hash(t["prompt_ids"]),
                       "response_ids": t["response_ids"], "finish_reason": t["finish_reason"],
                       # replay's near-tie rule compares them (orchestra/engine/ties.py); 1e-6 is far below its tol
                       "logprobs": [round(float(x), 6) for x in t.get("logprobs") or []],
                       "gen_latency_s": t["gen_latency_s"]} for t in turns],
            "tool_calls": traj.get("tool_records", []), "answer": traj.get("answer"),
            "termination": traj.get("termination"), "error": traj.get("error"),
            "cost_usd": traj.get("cost_usd", 0.0), "latency_s": traj.get("latency_s", 0.0),
            "reward": scored.get("reward"), "terms": scored.get("terms", {}), "correct": scored.get("correct"),
            "advantage": scored.get("advantage"), "status": scored.get("status", "scored")}


class EpisodeLog:
    """Writes a run's episode records and the tool catalogues they reference."""

    def __init__(self, run_dir: str | Path):
        self.dir = episodes_dir(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "schemas.json"
        self.schemas: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}

    def schema_key(self, schemas: list[dict[str, Any]]) -> str:
        """Store a catalogue once; records name it by hash (the same few catalogues recur in every episode)."""
        text = json.dumps(schemas, sort_keys=True)
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        if key not in self.schemas:
            self.schemas[key] = schemas
            _write_atomic(self.dir / "schemas.json", json.dumps(self.schemas))
        return key

    def write(self, name: str, records: list[dict[str, Any]]) -> Path:
        path = self.dir / f"{name}.jsonl"
        return write_jsonl(path, records, atomic=True, compact=True)


def save_weights(run_dir: str | Path, version: int, state_dict: dict[str, Any]) -> Path:
    """The weights a version's episodes ran on, as the learner sent them (full, or base + LoRA payload)."""
    import torch

    path = weights_path(run_dir, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state_dict, tmp)
    os.replace(tmp, path)  # never a half-written file under a version's name
    return path


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of a run, in file order (eval files and steps by name)."""
    out: list[dict[str, Any]] = []
    for path in sorted(episodes_dir(run_dir).glob("*.jsonl")):
        out += load_jsonl(path)
    return out


def read_schemas(run_dir: str | Path) -> dict[str, Any]:
    path = episodes_dir(run_dir) / "schemas.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
