"""Cost and latency accounting of one finished episode, from what its tool results charged.

Cost = experts (tool results that name a `model` in meta: expert tokens x price, as the expert tool charged)
     + tools (search fees, sandbox seconds x rate, anything else a tool charged)
     + orchestrator (the policy's own prompt + generated tokens at its configured $/Mtok).
Pricing itself (genai-prices, overrides, unknown model = config error) happens where a call is made
(tools/pricing.py, the expert tools); this module only adds up `ToolResult.cost_usd` and prices the policy's
tokens, so every dollar is traceable to one record (`by_tool`, `by_model`).
Latency = the sum of tool service times (`ToolResult.latency_s`, queueing excluded), optionally plus the
orchestrator's generation time.

Left to others: prices (tools/pricing.py, config), what cost is worth in reward (reward/rubric.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestra.types import Trajectory


@dataclass
class CostBreakdown:
    experts_usd: float
    tools_usd: float
    orchestrator_usd: float
    total_usd: float
    by_tool: dict[str, float] = field(default_factory=dict)  # tool id -> $ (experts and tools)
    by_model: dict[str, float] = field(default_factory=dict)  # expert model -> $
    policy_tokens_in: int = 0
    policy_tokens_out: int = 0
    estimated: bool = False  # some tool reported its cost as an estimate

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_price(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0 ($ per million tokens), got {value!r}")
    return float(value)


def episode_cost(traj: Trajectory, orchestrator_price_in: float = 0.0,
                 orchestrator_price_out: float = 0.0) -> CostBreakdown:
    """Add up an episode's $ by source. Prices are $ per million tokens. A record with a negative or
    non-finite cost is a bug in the tool that charged it: ValueError naming the turn and tool."""
    price_in = _check_price("orchestrator_price_in", orchestrator_price_in)
    price_out = _check_price("orchestrator_price_out", orchestrator_price_out)
    experts = tools = 0.0
    by_tool: dict[str, float] = defaultdict(float)
    by_model: dict[str, float] = defaultdict(float)
    estimated = False
    for rec in traj.tool_records:
        usd = rec.result.cost_usd
        if not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
            raise ValueError(f"episode {traj.episode_id or traj.task_id}: turn {rec.turn} tool {rec.tool_id!r} "
                             f"charged an invalid cost {usd!r}")
        model = rec.result.meta.get("model")
        if model:
            experts += usd
            by_model[str(model)] += usd
        else:
            tools += usd
        by_tool[rec.tool_id] += usd
        estimated = estimated or bool(rec.result.meta.get("estimated"))
    tok_in, tok_out = traj.policy_tokens
    orchestrator = (tok_in * price_in + tok_out * price_out) / 1e6
    return CostBreakdown(experts_usd=experts, tools_usd=tools, orchestrator_usd=orchestrator,
                         total_usd=experts + tools + orchestrator, by_tool=dict(by_tool), by_model=dict(by_model),
                         policy_tokens_in=tok_in, policy_tokens_out=tok_out, estimated=estimated)


def episode_latency(traj: Trajectory, count_generation: bool = False) -> float:
    """Seconds: tool service times summed over the episode (+ the policy's generation time if asked)."""
    seconds = sum(max(float(rec.result.latency_s), 0.0) for rec in traj.tool_records)
    if count_generation:
        gen = traj.gen_latency_s or sum(t.gen_latency_s for t in traj.turns)
        seconds += max(float(gen), 0.0)
    return seconds
