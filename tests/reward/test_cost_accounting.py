"""Cost and latency accounting from tool records and the policy's own tokens, checked by hand."""

from __future__ import annotations

import pytest

from orchestra.types import ToolRecord, ToolResult
from reward.cost import episode_cost, episode_latency


def test_breakdown_by_hand(episode):
    traj = episode(charges=[("search", 0.008, 0.5), ("expert-1", 0.012, 3.0), ("python", 0.001, 1.25),
                            ("expert-1", 0.004, 2.0)],
                   models={"expert-1": "gpt-5"}, prompt_tokens=2000, gen_tokens=500, gen_latency_s=0.75)
    traj.tool_records[2].result.meta["estimated"] = True
    # orchestrator: 2000 tokens in at $0.5/Mtok + 500 out at $2/Mtok = 0.001 + 0.001
    c = episode_cost(traj, orchestrator_price_in=0.5, orchestrator_price_out=2.0)
    assert c.experts_usd == pytest.approx(0.016)
    assert c.tools_usd == pytest.approx(0.009)
    assert c.orchestrator_usd == pytest.approx(0.002)
    assert c.total_usd == pytest.approx(0.027)
    assert c.by_model == pytest.approx({"gpt-5": 0.016})
    assert c.by_tool == pytest.approx({"search": 0.008, "expert-1": 0.016, "python": 0.001})
    assert (c.policy_tokens_in, c.policy_tokens_out, c.estimated) == (2000, 500, True)
    assert episode_latency(traj) == pytest.approx(6.75)
    assert episode_latency(traj, count_generation=True) == pytest.approx(7.5)


def test_free_policy_and_empty_episode(episode):
    c = episode_cost(episode(charges=[], prompt_tokens=100, gen_tokens=10))
    assert c.total_usd == 0.0 and c.by_tool == {} and not c.estimated
    assert episode_latency(episode(charges=[])) == 0.0


def test_bad_charges_and_prices_are_clear_errors(episode):
    traj = episode(charges=[("search", 0.01, 1.0)])
    traj.tool_records.append(ToolRecord(1, "broken", "broken", {}, ToolResult("x", cost_usd=float("nan"))))
    with pytest.raises(ValueError, match="turn 1 tool 'broken'"):
        episode_cost(traj)
    with pytest.raises(ValueError, match="orchestrator_price_in"):
        episode_cost(episode(), orchestrator_price_in=-1.0)
