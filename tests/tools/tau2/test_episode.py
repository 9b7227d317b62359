"""Full τ² episodes: scripted orchestrator (tests/helpers/fakes.ScriptedEngine) as the agent, tau2's user simulator
against a fake OpenAI server on 127.0.0.1, the mock domain's environment, the official evaluator as reward.
Also: per-episode isolation of DB writes, and call_expert routing + pricing."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.agent.loop import episode_samples
from orchestra.agent.prompt import Prompter
from orchestra.engine import Sampling
from orchestra.types import ToolCall, ToolContext
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tools.base import LocalToolClient
from tools.experts.base import ExpertReply
from tools.tau2.adapter import Tau2Sessions, domain_tools
from tools.tau2.domain import to_task
from tools.tau2.episode import Tau2EpisodeDriver


def _user_reply(messages):
    """The fake user: asks once, then stops once the agent says it is done."""
    last = messages[-1]["content"] if messages else ""
    if "created" in last.lower() or "done" in last.lower():
        return "Great, thank you! ###STOP###"
    return "Hi, please create a task called 'Important Meeting' for user_1."


@pytest.fixture(scope="module")
def fake_user():
    from tools.tau2.user import UserSimulatorPool

    with FakeOpenAI(_user_reply) as server:
        yield UserSimulatorPool("openai/fake-user", api_base=server.base_url, timeout_s=10, num_retries=0), server


@pytest.fixture(scope="module")
def mock_task(mock_domain):
    t = next(t for t in mock_domain.tasks("v0.2.0") if t.id == "create_task_1")
    return to_task(t, "mock", "v0.2.0", model_mapping={"expert-1": "fake-big", "expert-2": "fake-small"},
                   pricing={"fake-big": {"input": 10.0, "output": 40.0}})


def _driver(domain, user, script, experts=None, **kw):
    tok = ByteTokenizer()
    sessions = Tau2Sessions(domain)
    client = LocalToolClient(domain_tools(domain, sessions, experts=experts))
    engine = ScriptedEngine(tok, script)
    driver = Tau2EpisodeDriver(engine, client, Prompter(tok), sessions, user, eos_token_ids=[tok.eos_token_id],
                               max_context_tokens=60000, **kw)
    return driver, engine, sessions


async def test_full_episode_user_stop_and_reward(mock_domain, mock_task, fake_user):
    user, server = fake_user
    script = [call_text("create_task", user_id="user_1", title="Important Meeting"),
              "<think>the tool said it worked</think><message>Done: the task is created.</message>"]
    driver, engine, sessions = _driver(mock_domain, user, script)
    traj = await driver.run(mock_task, Sampling(max_tokens=400), episode_id="ep-good")
    assert traj.termination == "answered" and traj.meta["tau2_termination"] == "user_stop"
    assert traj.correct is True and traj.meta["tau2_score"]["score"] == 1.0, traj.meta["tau2_score"]
    assert traj.answer == "Done: the task is created." and len(traj.turns) == 2
    assert traj.tool_counts == {"create_task": 1} and len(sessions) == 0 and user.open_count() == 0
    roles = [m["role"] for m in traj.meta["tau2_messages"]]
    assert roles == ["assistant", "user", "assistant", "tool", "assistant", "user"]
    # the user simulator saw the agent's message (roles flipped: the agent is its "user")
    assert server.requests[-1]["messages"][-1] == {"role": "user", "content": "Done: the task is created."}
    # transcript mode: one sample, user/tool tokens masked, model tokens kept
    (sample,) = episode_samples(traj)
    assert sum(sample.response_mask) == sum(len(t.response_ids) for t in traj.turns)
    assert 0 in sample.response_mask and "Important Meeting" in ByteTokenizer().decode(traj.turns[1].prompt_ids)


async def test_wrong_write_scores_zero_and_turn_cap_truncates(mock_domain, mock_task, fake_user):
    user, _ = fake_user
    wrong = [call_text("create_task", user_id="user_1", title="Unimportant Meeting"), "Done, created it."]
    driver, _, _ = _driver(mock_domain, user, wrong)
    traj = await driver.run(mock_task, Sampling(max_tokens=400), episode_id="ep-wrong")
    assert traj.termination == "answered" and traj.correct is False
    assert traj.meta["tau2_score"]["info"]["db_match"] is False
    looping = [call_text("get_users")]
    driver, _, _ = _driver(mock_domain, user, looping, max_turns=3)
    traj = await driver.run(mock_task, Sampling(max_tokens=400), episode_id="ep-loop")
    assert traj.termination == "max_turns" and traj.meta["tau2_termination"] == "max_steps"
    assert traj.correct is False and "not a stop" in traj.meta["tau2_score"]["info"]["note"]


async def test_concurrent_episodes_do_not_share_db(mock_domain, mock_task):
    sessions = Tau2Sessions(mock_domain)
    client = LocalToolClient(domain_tools(mock_domain, sessions))
    pristine = mock_domain.new_env().get_db_hash()

    async def write(ep, title):
        ctx = ToolContext(task=mock_task, episode_id=ep)
        return await client.call(ToolCall("create_task", {"user_id": "user_1", "title": title}), ctx)

    a, b = await asyncio.gather(write("A", "Alpha"), write("B", "Beta"))
    assert a.ok and b.ok
    users_a = (await client.call(ToolCall("get_users", {}), ToolContext(task=mock_task, episode_id="A"))).text
    assert "Alpha" in a.text and "Beta" not in a.text and "Beta" in b.text and "Alpha" not in b.text
    sa, sb = sessions.get("A", mock_task), sessions.get("C", mock_task)
    assert sa.db_hash() != pristine and sb.db_hash() == pristine and sessions.get("B", mock_task).db_hash() != sa.db_hash()
    assert "user_1" in users_a
    refused = await client.call(ToolCall("create_task", {"user_id": "user_1"}), ToolContext(task=mock_task, episode_id="A"))
    assert refused.meta.get("invalid_arguments") and "title" in refused.text


class FakeExpert:
    """An Expert (tools/experts/ protocol) with scripted replies in the original's output convention."""

    latency_s = 1.5

    def __init__(self, name, replies):
        self.name = self.model = name
        self.replies, self.seen = list(replies), []

    def price(self):
        return (1.0, 2.0)

    def cost_bound(self, prompt_tokens_estimate, max_tokens=None):
        return (prompt_tokens_estimate * 1.0 + (max_tokens or 0) * 2.0) / 1e6

    async def complete(self, messages, max_tokens=None, ctx=None, *, purpose="answer"):
        self.seen.append(messages)
        return ExpertReply(text=self.replies.pop(0), tokens_in=1000, tokens_out=100, latency_s=self.latency_s,
                           cost_usd=0.123)


async def test_call_expert_routes_to_mapped_expert_and_is_priced(mock_domain, mock_task, fake_user):
    user, _ = fake_user
    big = FakeExpert("fake-big", ['<think>create it</think><tool_call>{"name": "create_task", "arguments": '
                                  '{"user_id": "user_1", "title": "Important Meeting"}}</tool_call>',
                                  "<think>tell them</think><message>Done, the task is created.</message>"])
    small = FakeExpert("fake-small", [])
    script = [call_text("call_expert", expert="expert-1"), call_text("call_expert", expert="expert-1")]
    driver, engine, _ = _driver(mock_domain, user, script, experts={"fake-big": big, "fake-small": small})
    schema_names = [s["function"]["name"] for s in driver.tools.schemas(mock_task)]
    assert "call_expert" in schema_names and "transfer_to_human_agents" not in schema_names
    traj = await driver.run(mock_task, Sampling(max_tokens=400), episode_id="ep-expert")
    assert len(big.seen) == 2 and not small.seen  # routed by the task's model_mapping
    assert "<policy>" in big.seen[0][0]["content"] and "create_task" in big.seen[0][0]["content"]
    assert traj.meta["tau2_termination"] == "user_stop" and traj.correct is True
    assert traj.tool_counts == {"expert-1": 2}
    # task.pricing overrides the expert's price: 1000 in @ $10/M + 100 out @ $40/M, per call
    assert traj.cost_usd == pytest.approx(2 * (1000 * 10 + 100 * 40) / 1e6)
    assert all(r.result.meta["model"] == "fake-big" for r in traj.tool_records)
    assert traj.latency_s >= 3.0
    bad = await driver.tools.call(ToolCall("call_expert", {"expert": "expert-9"}),
                                  ToolContext(task=mock_task, episode_id="ep-x"))
    assert not bad.ok and "expert-1" in bad.text


async def test_call_expert_with_the_configured_zoo_is_priced_by_genai_prices(mock_domain):
    """tau2_airline's zoo (sim experts, real prices): tiers map to experts, the call is charged at the expert's
    price; a simulated expert does not speak τ², so its reply is an 'unusable' observation, still paid for."""
    from orchestra.config import load_config
    from tools.registry import build_experts

    zoo = load_config(["experiment=tau2_airline"]).zoo
    experts = build_experts(zoo)
    sessions = Tau2Sessions(mock_domain)
    tools = domain_tools(mock_domain, sessions, experts=experts, tiers=dict(zoo.tiers))
    task = to_task(mock_domain.tasks("v0.2.0")[0], "mock")  # no model_mapping: the zoo's tiers apply
    schema = tools["call_expert"].schema(task)["function"]
    assert schema["parameters"]["properties"]["expert"]["enum"] == ["expert-1", "expert-2", "expert-3"]
    assert "expert-2: $" in schema["description"] and "per M tokens" in schema["description"]
    res = await LocalToolClient(tools).call(ToolCall("call_expert", {"expert": "expert-2"}),
                                            ToolContext(task=task, episode_id="z", budget_usd_left=1.0))
    assert res.meta["model"] == "gpt-5-mini" and res.cost_usd > 0 and res.tokens_out > 0
    p_in, p_out = experts["gpt-5-mini"].price()
    assert res.cost_usd == pytest.approx((res.tokens_in * p_in + res.tokens_out * p_out) / 1e6, rel=1e-6)
    refused = await LocalToolClient(tools).call(ToolCall("call_expert", {"expert": "expert-1"}),
                                                ToolContext(task=task, episode_id="z", budget_usd_left=0.0))
    assert refused.meta.get("budget_refused")
