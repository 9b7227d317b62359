"""Deterministic replay (cluster/replay.py) without Ray: episodes of the tiny policy are sampled concurrently on
a batched engine with seeds, recorded as the trainer records them, and replayed one at a time from the record;
tokens and rewards must match exactly, and a changed tool result or changed weights must show as a divergence."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from cluster import launch
from cluster.replay import main as replay_main
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.config import load_config, to_yaml
from orchestra.engine import Sampling
from orchestra.engine.hf import HFEngine
from orchestra.policy.models import load_policy
from orchestra.policy.tokenizer import eos_token_ids
from orchestra.rundir import records as episodes
from orchestra.types import Trajectory
from reward.score import score_group
from tests.helpers.fakes import FakeTool, call_text, make_task
from tools.base import LocalToolClient

VERSION = 7  # any version number: replay must find its weights file


def _overfit(model, tok, prompter, tools, tasks, eos: int) -> None:
    """A few steps towards 'call search', so that the random tiny policy makes real tool calls."""
    target = tok.encode(call_text("search", query="sum"), add_special_tokens=False) + [eos]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(50):  # enough for any tiny tokenizer (25 sufficed for one, not for the next)
        for t in tasks[:2]:
            prompt = prompter.encode([prompter.system(t), prompter.reprompt_user(t, [], [], [])], tools.schemas(t))
            ids = torch.tensor([prompt + target])
            labels = ids.clone()
            labels[0, :len(prompt)] = -100
            model(input_ids=ids, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad()
    model.eval()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A recorded 'step': 4 tasks x 2 episodes sampled concurrently on one batched engine."""
    run_dir = tmp_path_factory.mktemp("replay") / "run"
    cfg = load_config(["cluster.torch_threads=1", "agent.max_turns=2", "sampling.max_tokens=32", f"run_dir={run_dir}"])
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    torch.manual_seed(0)
    model, tok = load_policy(cfg.model.name, **launch.model_kwargs(cfg))
    prompter = Prompter(tok, **launch.prompter_kwargs(cfg))
    tools = LocalToolClient({"search": FakeTool("search", cost_usd=0.002, latency_s=0.5, reply="found it",
                                                documents=["the sum of two and two is four"]),
                             "answer": FakeTool("answer", cost_usd=0.01, answers=True, reply="4")})
    tasks = [make_task(i, tools=["search", "answer"]) for i in range(4)]
    _overfit(model, tok, prompter, tools, tasks, eos_token_ids(tok)[0])
    episodes.save_weights(run_dir, VERSION, {k: v.detach().clone() for k, v in model.state_dict().items()})
    engine = HFEngine.from_model(model, tok, max_batch_size=16)
    loop = AgentLoop(engine, tools, prompter, eos_token_ids=eos_token_ids(tok), **cfg.agent.loop_kwargs())
    sampling = {"max_tokens": 32, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    requests = [{"task": t.to_dict(), "uid": f"s1-{i}-{t.id}", "group_size": 2, "episode_id": f"s1-e{2 * i + k}",
                 "seed": episodes.episode_seed(0, 1, 2 * i + k)} for i, t in enumerate(tasks) for k in range(2)]

    async def play() -> list[Trajectory]:
        return list(await asyncio.gather(*(
            loop.run(tasks[j // 2], Sampling(**sampling, seed=r["seed"]), uid=r["uid"], episode_id=r["episode_id"],
                     policy_version=VERSION) for j, r in enumerate(requests))))

    trajs = asyncio.run(play())
    assert engine.stats()["mean_batch_size"] > 1  # recorded under batching, replayed at batch size 1
    scored = asyncio.run(score_group(trajs, [tasks[j // 2] for j in range(len(trajs))],
                                     **episodes.score_kwargs(cfg, "train")))
    log = episodes.EpisodeLog(run_dir)
    log.write("step_000001", [episodes.episode_record("train", 1, r, sampling, tr.to_dict(), s.to_dict(),
                                             log.schema_key(tools.schemas(tasks[j // 2])))
                              for j, (r, tr, s) in enumerate(zip(requests, trajs, scored))])
    return run_dir, trajs


def test_replay_reproduces_tokens_and_rewards(run, capsys):
    run_dir, trajs = run
    assert sum(len(t.tool_records) for t in trajs) >= 2  # the episodes do call tools
    assert replay_main([str(run_dir), "--all"]) == 0
    out = capsys.readouterr().out
    assert "RESULT replay_reproduced=1.0000" in out and "RESULT replay_episodes=8" in out


def test_a_changed_tool_result_is_reported(run, capsys):
    run_dir, _ = run
    path = run_dir / "episodes" / "step_000001.jsonl"
    original = path.read_text()
    records = episodes.read_records(run_dir)
    victim = next(r for r in records if r["tool_calls"])
    victim["tool_calls"][0]["result"]["cost_usd"] += 1.0  # a tool that now charges more: the reward moves
    victim["tool_calls"][0]["result"]["meta"]["documents"] = ["another passage"]  # and the next prompt
    try:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        assert replay_main([str(run_dir), "--episode", victim["id"]]) == 1
        out = capsys.readouterr().out
        assert f"{victim['id']} (train step 1, v{VERSION}" in out and "diverged" in out
        assert "reward: recorded" in out
        if len(victim["turns"]) > 1:
            assert "turn 1: prompt differs" in out
    finally:
        path.write_text(original)


def test_other_weights_diverge_and_missing_weights_are_named(run, capsys):
    run_dir, _ = run
    weights = run_dir / "episodes" / "weights" / f"v{VERSION:06d}.pt"
    saved = torch.load(weights, weights_only=True)
    try:
        torch.save({k: v + 0.05 * torch.randn_like(v) for k, v in saved.items()}, weights)
        assert replay_main([str(run_dir), "--all"]) == 1
        out = capsys.readouterr().out
        assert "diverged" in out and "token" in out
        weights.unlink()
        assert replay_main([str(run_dir), "--all"]) == 0  # nothing replayable: nothing diverged
        out = capsys.readouterr().out
        assert f"no checkpoint or saved weights for version {VERSION}" in out and "RESULT replay_skipped=8" in out
    finally:
        torch.save(saved, weights)
