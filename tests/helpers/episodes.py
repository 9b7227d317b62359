"""Builders for finished episodes with known tool charges, shared by the reward and reward-actor tests."""

from __future__ import annotations

import itertools

from orchestra.types import ToolRecord, ToolResult, Trajectory, Turn

_ids = itertools.count()


def build_episode(uid: str = "g0", answer: str | None = "4", charges: list[tuple[str, float, float]] = (),
                  termination: str = "answered", prompt_tokens: int = 0, gen_tokens: int = 0,
                  gen_latency_s: float = 0.0, episode_id: str = "", models: dict[str, str] | None = None,
                  tool_counts: dict[str, int] | None = None) -> Trajectory:
    """charges: (tool id, $ charged, service seconds) per call, one call per turn. `models` marks a tool id
    as an expert (its results carry meta["model"])."""
    models = models or {}
    records, counts = [], {}
    for turn, (tool, usd, secs) in enumerate(charges):
        meta = {"model": models[tool]} if tool in models else {}
        records.append(ToolRecord(turn=turn, name=tool, tool_id=tool, arguments={},
                                  result=ToolResult(text="ok", cost_usd=usd, latency_s=secs, meta=meta)))
        counts[tool] = counts.get(tool, 0) + 1
    turns = [Turn(prompt_ids=[1] * prompt_tokens, response_ids=[2] * gen_tokens, logprobs=[0.0] * gen_tokens,
                  gen_latency_s=gen_latency_s)] if (prompt_tokens or gen_tokens or gen_latency_s) else []
    return Trajectory(task_id="t", uid=uid, turns=turns, answer=answer, termination=termination,
                      tool_records=records, tool_counts=tool_counts if tool_counts is not None else counts,
                      cost_usd=sum(c[1] for c in charges), latency_s=sum(c[2] for c in charges),
                      gen_latency_s=gen_latency_s, episode_id=episode_id or f"{uid}-{next(_ids)}")
