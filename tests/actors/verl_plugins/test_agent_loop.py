"""The verl agent-loop plugin on CPU: verl 0.9.1's AgentLoopBase machinery with a fake LLM server client (token
in, token out) and the byte tokenizer; tools in-process (FakeTool) behind the same ToolClient protocol the
tool-server actors speak; the reward through the real RewardActor class and verl's own advantage code."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

pytest.importorskip("verl.experimental.agent_loop")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from actors.reward_actor import RewardActor  # noqa: E402
from actors.verl_plugins.agent_loop import BoundedToolClient, OrchestraAgentLoop  # noqa: E402
from actors.verl_plugins.reward import KEYS, compute_score  # noqa: E402
from cluster.verl.config import agent_loop_entries  # noqa: E402
from orchestra.config import load_config  # noqa: E402
from orchestra.data.tasks import to_verl_rows  # noqa: E402
from orchestra.types import ToolCall, ToolContext  # noqa: E402
from reward.score import score_group  # noqa: E402
from tests.helpers.fakes import ByteTokenizer, FakeTool, call_text, close, make_task  # noqa: E402
from tools.base import LocalToolClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
PROMPT_LEN, RESPONSE_LEN = 4096, 1024


class FakeServer:
    """verl's LLMServerClient surface: generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput.
    Replies are scripted per session (the session id is part of our request id)."""

    def __init__(self, tok: ByteTokenizer, scripts: dict[str, list[str]], step: int = 7):
        self.tok, self.scripts, self.step = tok, scripts, step
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        session = request_id.rsplit("-", 2)[1]
        n = sum(1 for c in self.calls if c["session"] == session)
        script = self.scripts[session]
        ids = self.tok.encode(script[min(n, len(script) - 1)]) + [self.tok.eos_token_id]
        ids = ids[: sampling_params["max_tokens"]]
        self.calls.append({"session": session, "request_id": request_id, "prompt_ids": list(prompt_ids),
                           "params": dict(sampling_params), "ids": ids})
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed",
                           extra_fields={"global_steps": self.step})


def tools(search_latency: float = 1.0) -> LocalToolClient:
    return LocalToolClient({
        "search": FakeTool("search", cost_usd=0.01, latency_s=search_latency, reply="found: 2+2=4",
                           documents=["2 + 2 = 4"]),
        "answer": FakeTool("answer", reply="", answers=True,
                           parameters={"type": "object", "properties": {"answer": {"type": "string"}}}),
    })


class AnswerTool(FakeTool):
    async def call(self, args, ctx):  # the answer tool answers with its argument
        self.reply = str(args.get("answer", ""))
        return await super().call(args, ctx)


def answer_tools() -> LocalToolClient:
    client = tools()
    client.tools["answer"] = AnswerTool("answer", answers=True,
                                        parameters={"type": "object", "properties": {"answer": {"type": "string"}}})
    return client


def make_loop(overrides: list[str], server, tool_client, reward_client=None, n: int = 2,
              namespace: str | None = None) -> OrchestraAgentLoop:
    """Instantiated exactly as verl's AgentLoopWorker does, from the entry our launcher writes."""
    import hydra

    trainer = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": PROMPT_LEN, "response_length": RESPONSE_LEN, "n": n, "val_kwargs": {"n": 1}}}})
    entry = OmegaConf.create({**agent_loop_entries(overrides)[0], "actor_namespace": namespace})
    return hydra.utils.instantiate(config=entry, trainer_config=DictConfigWrap(trainer), server_manager=server,
                                   tokenizer=ByteTokenizer(), processor=None, hf_model_type=None, dataset_cls=None,
                                   data_config=DictConfigWrap(OmegaConf.create({})), tools=ToolListWrap([]),
                                   tool_client=tool_client, reward_client=reward_client)


def row(task, uid="u1", session=0, split="train") -> dict:
    r = to_verl_rows([task], split=split, agent_name="orchestra")[0]
    return {**r, "raw_prompt": r["prompt"], "uid": uid, "session_id": session, "global_steps": 7, "index": 0}


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
BASE = ["experiment=cpu_tiny", "reward=toolorchestra", "sampling.max_tokens=200", "agent.max_turns=4"]


def test_registered_with_verl():
    assert _agent_loop_registry["orchestra"]["_target_"] == "actors.verl_plugins.agent_loop.OrchestraAgentLoop"


@pytest.mark.verl_cpu  # a fresh interpreter importing verl: make test-verl-cpu
def test_importing_the_loop_keeps_the_jobs_agent_loop_entry(tmp_path):
    """verl's AgentLoopWorker loads the job's agent-loop yaml into its registry, then imports our module on the
    first episode's instantiate: the import must not swap the yaml's entry (which carries the run's config) for a
    bare one, or every later episode runs the default experiment (a fresh interpreter: the import happens there)."""
    entries = agent_loop_entries(["experiment=adaptive_control", "algo.steps=3"])
    (tmp_path / "agent_loop.yaml").write_text(OmegaConf.to_yaml(entries))
    code = (
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "from verl.experimental.agent_loop import agent_loop as v\n"
        "for c in OmegaConf.load(sys.argv[1]):\n"  # as AgentLoopWorker.__init__ does
        "    v._agent_loop_registry[c.name] = c\n"
        "import actors.verl_plugins.agent_loop  # noqa: F401\n"
        "print(list(v._agent_loop_registry['orchestra'].get('orchestra_overrides', [])))\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "agent_loop.yaml")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['experiment=adaptive_control', 'algo.steps=3']"


async def test_reprompt_group_reward_one_output_per_turn():
    tok = ByteTokenizer()
    task = make_task(2, tools=["search", "answer"])  # gold "4"
    server = FakeServer(tok, {"0": [call_text("search", query="2+2"), call_text("answer", answer="4")],
                              "1": [call_text("answer", answer="5")]})
    reward = RewardActor(rubric="toolorchestra", group_deadline_s=30.0)
    loops = [make_loop(BASE + ["reward=toolorchestra"], server, answer_tools(), reward) for _ in range(2)]
    start = time.perf_counter()
    outs_a, outs_b = await asyncio.gather(*(lp.run(dict(SAMPLING), **row(task, session=i))
                                            for i, lp in enumerate(loops)))
    assert time.perf_counter() - start < 10  # the group barrier released both sessions, no deadline

    assert [len(outs_a), len(outs_b)] == [2, 1]
    calls_a = [c for c in server.calls if c["session"] == "0"]
    for out, call in zip(outs_a, calls_a, strict=True):  # token in, token out: exactly what the server saw and returned
        assert out.prompt_ids == call["prompt_ids"] and out.response_ids == call["ids"]
        assert out.response_mask == [1] * len(call["ids"]) and out.response_logprobs == [-0.25] * len(call["ids"])
        assert call["params"]["max_tokens"] == 200 and call["params"]["temperature"] == 1.0
    assert len({c["request_id"] for c in calls_a}) == 1  # one sticky session per episode
    assert "Documents" in tok.decode(outs_a[1].prompt_ids)  # reprompt: turn 2 re-renders with the document

    ea = outs_a[-1].extra_fields
    assert ea["tool_names"] == ["search", "answer"] and ea["tool_costs"] == [0.01, 0.0]
    assert ea["tool_latencies"] == [1.0, 0.0] and close(ea["cost_usd"], 0.01) and close(ea["latency_s"], 1.0)
    assert ea["answer"] == "4" and ea["termination"] == "answered" and ea["correct"] is True
    assert ea["min_global_steps"] == ea["max_global_steps"] == 7
    assert [o.extra_fields["turn"] for o in outs_a] == [0, 1]
    assert outs_b[-1].extra_fields["correct"] is False

    # The local backend's numbers for the same trajectories.
    local = await score_group([loops[0].trajectory, loops[1].trajectory], task, rubric="toolorchestra")
    assert all(close(o.reward_score, local[0].advantage) for o in outs_a)
    assert close(outs_b[0].reward_score, local[1].advantage) and local[0].advantage > 0
    assert all("reward_extra_info" in o.extra_fields for o in outs_a + outs_b)

    # verl's V1 advantage path (GRPO on each session's final output, broadcast to its turns) with
    # norm_adv_by_std_in_grpo=False leaves our advantages as they are: no second normalisation.
    outs = outs_a + outs_b
    keys = ["u1_0_0", "u1_0_1", "u1_1_0"]
    width = max(len(o.response_ids) for o in outs)
    mask = torch.zeros(len(outs), width, dtype=torch.int64)
    scores = torch.zeros(len(outs), width)
    for i, o in enumerate(outs):
        mask[i, : len(o.response_mask)] = torch.tensor(o.response_mask)
        scores[i, len(o.response_ids) - 1] = o.reward_score
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": scores},
                               non_tensors={"uid": np.array(["u1"] * 3, dtype=object)})
    got = compute_advantage_for_multi_trajectories(data, keys, "grpo", num_repeat=2, norm_adv_by_std_in_grpo=False)
    adv = got.batch["advantages"]
    expect = [local[0].advantage, local[0].advantage, local[1].advantage]
    for i in range(3):
        assert torch.allclose(adv[i][mask[i].bool()], torch.tensor(expect[i]), atol=1e-5)


async def test_transcript_one_output_tool_tokens_masked():
    tok = ByteTokenizer()
    task = make_task(2, tools=["search", "answer"])
    server = FakeServer(tok, {"0": [call_text("search", query="2+2"), call_text("answer", answer="4")]})
    loop = make_loop(BASE + ["agent.context_mode=transcript", "reward=scalar"], server, answer_tools())
    outs = await loop.run(dict(SAMPLING), **row(task, session=0))
    assert len(outs) == 1 and outs[0].reward_score is None  # scalar: verl's reward function scores it
    out, (c1, c2) = outs[0], server.calls
    assert out.prompt_ids == c1["prompt_ids"]
    n1 = len(c1["ids"])
    assert out.response_ids[:n1] == c1["ids"] and out.response_ids[-len(c2["ids"]):] == c2["ids"]
    # the second prompt the server saw is the first prompt + everything so far (never re-tokenized)
    assert c2["prompt_ids"] == out.prompt_ids + out.response_ids[: len(out.response_ids) - len(c2["ids"])]
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
    assert sum(out.response_mask) == n1 + len(c2["ids"])
    tool_part = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0]
    assert "found: 2+2=4" in tok.decode(tool_part) and out.response_mask[:n1] == [1] * n1
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 0)
    assert out.extra_fields["tool_costs"] == [0.01, 0.0] and out.extra_fields["context_mode"] == "transcript"

    # scalar reward path: verl's naive manager hands compute_score the row's extra_info + our extra_fields
    info = {**row(task)["extra_info"], **out.extra_fields}
    got = await compute_score(task.data_source, tok.decode(out.response_ids), task.answer, info,
                              orchestra_overrides=["experiment=cpu_tiny", "reward=scalar"])
    local = await score_group([loop.trajectory], task, rubric="scalar")
    assert set(got) == set(KEYS) and close(got["score"], local[0].reward) and got["acc"] == 1.0
    assert close(got["cost_usd"], local[0].cost["total_usd"]) and close(got["latency_s"], local[0].latency_s)


async def test_validation_rows_report_the_rubric_value():
    tok = ByteTokenizer()
    task = make_task(2, tools=["search", "answer"])
    server = FakeServer(tok, {"0": [call_text("answer", answer="4")]})
    loop = make_loop(BASE, server, answer_tools(), RewardActor(rubric="toolorchestra", group_deadline_s=30.0))
    outs = await asyncio.wait_for(loop.run(dict(SAMPLING), **row(task, split="heldout")), 10)
    info = outs[-1].extra_fields["reward_extra_info"]
    assert outs[-1].reward_score == info["orch_reward"] and info["acc"] == 1.0  # group of val_kwargs.n = 1


async def test_engine_failure_still_yields_a_masked_output():
    class Broken(FakeServer):
        async def generate(self, *a, **k):
            raise RuntimeError("replica down")

    task = make_task(1, tools=["search", "answer"])
    loop = make_loop(BASE + ["reward=scalar"], Broken(ByteTokenizer(), {}), answer_tools())
    (out,) = await loop.run(dict(SAMPLING), **row(task))
    assert out.response_mask == [0] and out.extra_fields["termination"] == "error"
    got = await compute_score(task.data_source, "", task.answer, {**row(task)["extra_info"], **out.extra_fields},
                              orchestra_overrides=["experiment=cpu_tiny", "reward=scalar"])
    assert got["failed"] == 1.0 and got["score"] == 0.0
    # verl's V1 trainer stores each output's staleness tags (agent_loop_tq.py:205-219) and casts them with
    # np.array(..., dtype=int) in its step metrics (v1/trainer_base.py:1897): on 64e2e69 they were None here,
    # a TypeError that took the whole training step down. They fall back to the row's own global step.
    tags = [{"min_global_steps": out.extra_fields.get("min_global_steps"),
             "max_global_steps": out.extra_fields.get("max_global_steps")}]
    for key in ("min_global_steps", "max_global_steps"):
        assert np.array([t[key] for t in tags], dtype=int).tolist() == [row(task)["global_steps"]]


async def test_a_prompt_never_outgrows_prompt_length():
    """The loop's budget is agent.max_context_tokens within verl's prompt_length. On 64e2e69 it was prompt_length +
    response_length: a reprompt turn's prompt past prompt_length was generated from, then cut from its head (the
    system turn) in the output verl trains on, so the trained log-probs were not the rollout's."""
    tok = ByteTokenizer()
    task = make_task(2, tools=["search", "answer"], problem="What is 2 + 2? " + "Context. " * 480)  # ~4.4k tokens
    server = FakeServer(tok, {"0": [call_text("answer", answer="4")]})
    loop = make_loop(BASE + ["reward=scalar", "agent.max_context_tokens=5000"], server, answer_tools())
    outs = await loop.run(dict(SAMPLING), **row(task))
    assert all(len(c["prompt_ids"]) <= PROMPT_LEN for c in server.calls)
    assert not server.calls and outs[-1].extra_fields["termination"] == "context"
    short = make_task(3, tools=["search", "answer"])
    server = FakeServer(tok, {"0": [call_text("answer", answer="6")]})
    (out,) = await make_loop(BASE + ["reward=scalar", "agent.max_context_tokens=5000"], server,
                             answer_tools()).run(dict(SAMPLING), **row(short))
    assert out.prompt_ids == server.calls[0]["prompt_ids"]  # what the rollout saw is what verl trains on


async def test_tool_calls_are_bounded_in_time_and_characters():
    slow = FakeTool("search", latency_s=30.0, sleep=True)
    chatty = FakeTool("answer", reply="x" * 5000)
    client = BoundedToolClient(LocalToolClient({"search": slow, "answer": chatty}), timeout_s=0.2, max_chars=100)
    ctx = ToolContext(task=make_task(1))
    start = time.perf_counter()
    r = await client.call(ToolCall("search", {"query": "q"}), ctx)
    assert r.error and "timed out" in r.error and time.perf_counter() - start < 5
    r = await client.call(ToolCall("answer", {"query": "q"}), ctx)
    assert len(r.text) == 100 and r.text.endswith("(truncated)")


def test_scalar_advantages_match_verl_grpo():
    """verl normalises scalar rewards itself (norm_adv_by_std_in_grpo=True): the same as our local path."""
    from reward.advantages import scalar_advantages

    rewards = [1.0, 0.2, 0.7, -0.1]
    r = torch.zeros(4, 3)
    r[:, -1] = torch.tensor(rewards)
    adv, _ = compute_grpo_outcome_advantage(r, torch.ones(4, 3), np.array(["a", "a", "b", "b"], dtype=object))
    assert torch.allclose(adv[:, 0], torch.tensor(scalar_advantages(rewards, ["a", "a", "b", "b"])), atol=1e-5)


async def test_named_tool_and_reward_actors_through_ray(ray_cluster):
    """The cluster path: no injected clients; the loop finds `tool:<name>` and `reward` actors by name."""
    ray = ray_cluster
    from actors.tool_server import make_tool_server

    ns = f"verl-plugin-test-{os.getpid()}"
    over = BASE + ["zoo.tools=[calculator]", "agent.answer_mode=text"]
    calc = make_tool_server("calculator", asdict(load_config(over).zoo), namespace=ns)
    reward = ray.remote(RewardActor).options(name="reward", namespace=ns, max_concurrency=64).remote(
        rubric="toolorchestra", group_deadline_s=30.0)
    try:
        tok = ByteTokenizer()
        task = make_task(2, tools=["calculator"])
        server = FakeServer(tok, {"0": [call_text("calculator", expression="2+2"), "4"], "1": ["5"]})
        loops = [make_loop(over, server, None, None, namespace=ns) for _ in range(2)]
        outs_a, outs_b = await asyncio.wait_for(asyncio.gather(
            *(lp.run(dict(SAMPLING), **row(task, uid="ray1", session=i)) for i, lp in enumerate(loops))), 60)
        ea = outs_a[-1].extra_fields
        assert ea["tool_names"] == ["calculator"] and ea["tool_errors"] == [""] and ea["answer"] == "4"
        assert "calculator" in tok.decode(outs_a[1].prompt_ids)  # the actor's result reached the next prompt
        assert outs_a[-1].reward_score > 0 > outs_b[-1].reward_score
    finally:
        ray.kill(calc)
        ray.kill(reward)
