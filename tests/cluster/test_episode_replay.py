"""Deterministic replay (cluster/replay.py) without Ray: episodes of the tiny policy are sampled concurrently on
a batched engine with seeds, recorded as the trainer records them, and replayed one at a time from the record;
tokens and rewards must match (through near-ties of batch-variant logits, orchestra/engine/ties.py), and a changed
tool result or changed weights must show as a divergence.

Batch composition: the same episodes are also recorded alone, together and beside long-prompt companions (other
left padding) on a model whose batched logits differ from its batch-of-one logits in the 4th decimal, as a
batch-variant kernel's do, with episode 0's seed chosen so that the difference flips its first token. Every
composition must replay as reproduced, the flip reported as a near-tie: on any CPU, not only on one whose kernels
happen to be batch-invariant."""

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
from orchestra.engine import Sampling, eos_token_ids
from orchestra.engine.hf import HFEngine
from orchestra.engine.sampling import inverse_cdf, sample_rows
from orchestra.engine.ties import compare_runs, judge
from orchestra.policy.models import load_policy
from orchestra.rundir import records as episodes
from orchestra.types import Trajectory
from reward.score import score_group
from tests.helpers.fakes import FakeTool, call_text, make_task
from tools.base import LocalToolClient

VERSION = 7  # any version number: replay must find its weights file
SAMPLING = {"max_tokens": 32, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
KERNEL_NOISE = 1e-4  # how far the emulated batched kernel moves the logits: within replay's tolerance (1e-3)


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


class Setup:
    """The tiny policy overfitted towards tool calls, its tools and tasks, and a way to record a 'step'."""

    def __init__(self, root):
        self.root = root
        self.cfg = load_config(["cluster.torch_threads=1", "agent.max_turns=2", "sampling.max_tokens=32",
                                f"run_dir={root}"])
        torch.manual_seed(0)
        self.model, self.tok = load_policy(self.cfg.model.name, **launch.model_kwargs(self.cfg))
        self.prompter = Prompter(self.tok, **launch.prompter_kwargs(self.cfg))
        self.tools = LocalToolClient({
            "search": FakeTool("search", cost_usd=0.002, latency_s=0.5, reply="found it",
                               documents=["the sum of two and two is four"]),
            "answer": FakeTool("answer", cost_usd=0.01, answers=True, reply="4")})
        self.tasks = [make_task(i, tools=["search", "answer"]) for i in range(4)]
        _overfit(self.model, self.tok, self.prompter, self.tools, self.tasks, eos_token_ids(self.tok)[0])
        self.weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def requests(self, seed0: int | None = None) -> list[dict]:
        out = [{"task": t.to_dict(), "uid": f"s1-{i}-{t.id}", "group_size": 2, "episode_id": f"s1-e{2 * i + k}",
                "seed": episodes.episode_seed(0, 1, 2 * i + k)} for i, t in enumerate(self.tasks) for k in range(2)]
        if seed0 is not None:
            out[0]["seed"] = seed0
        return out

    def record(self, name: str, requests: list[dict], max_batch_size: int = 16, companions: int = 0,
               sampler=None) -> tuple[object, list[Trajectory], dict]:
        """Play `requests` concurrently on one engine (plus `companions` unrecorded long-prompt episodes) and write
        them as step 1 of a run dir of their own. Returns (run dir, trajectories, engine stats)."""
        run_dir = self.root / name
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(to_yaml(self.cfg))
        episodes.save_weights(run_dir, VERSION, self.weights)
        # 50 ms for company: every request of the step joins the first batch, so a composition is the same each time
        engine = HFEngine.from_model(self.model, self.tok, max_batch_size=max_batch_size, batch_wait_ms=50.0,
                                     sampler=sampler)
        loop = AgentLoop(engine, self.tools, self.prompter, eos_token_ids=eos_token_ids(self.tok),
                         **self.cfg.agent.loop_kwargs())
        task_of = {t.id: t for t in self.tasks}
        long = make_task(99, tools=["search", "answer"], problem="Add these numbers: " + " + ".join(map(str, range(60))))

        async def play() -> list[Trajectory]:
            mine = [loop.run(task_of[r["task"]["id"]], Sampling(**SAMPLING, seed=r["seed"]), uid=r["uid"],
                             episode_id=r["episode_id"], policy_version=VERSION) for r in requests]
            extra = [loop.run(long, Sampling(**SAMPLING, seed=1000 + j), uid=f"x{j}", episode_id=f"x{j}",
                              policy_version=VERSION) for j in range(companions)]
            return list(await asyncio.gather(*mine, *extra))[:len(requests)]

        trajs = asyncio.run(play())
        tasks = [task_of[r["task"]["id"]] for r in requests]
        scored = asyncio.run(score_group(trajs, tasks, **episodes.score_kwargs(self.cfg, "train")))
        log = episodes.EpisodeLog(run_dir)
        log.write("step_000001", [
            episodes.episode_record("train", 1, r, SAMPLING, tr.to_dict(), s.to_dict(),
                                    log.schema_key(self.tools.schemas(t)))
            for r, tr, s, t in zip(requests, trajs, scored, tasks, strict=True)])
        return run_dir, trajs, engine.stats()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return Setup(tmp_path_factory.mktemp("replay"))


@pytest.fixture(scope="module")
def run(setup):
    """A recorded 'step': 4 tasks x 2 episodes sampled concurrently on one batched engine."""
    run_dir, trajs, stats = setup.record("run", setup.requests())
    assert stats["mean_batch_size"] > 1  # recorded under batching, replayed at batch size 1
    return run_dir, trajs


def test_replay_reproduces_tokens_and_rewards(run, capsys):
    run_dir, trajs = run
    assert sum(len(t.tool_records) for t in trajs) >= 2  # the episodes do call tools
    assert replay_main([str(run_dir), "--all"]) == 0
    out = capsys.readouterr().out
    assert "RESULT replay_reproduced=1.0000" in out and "RESULT replay_episodes=8" in out
    assert out.count(": reproduced") == 8
    assert float(out.split("RESULT replay_logprob_max_diff=")[1].split()[0]) < 1e-3  # the same distributions


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
        assert "not a near-tie" in out or "log-probs:" in out  # other weights are never excused as ties
        weights.unlink()
        assert replay_main([str(run_dir), "--all"]) == 0  # nothing replayable: nothing diverged
        out = capsys.readouterr().out
        assert f"no checkpoint or saved weights for version {VERSION}" in out and "RESULT replay_skipped=8" in out
    finally:
        torch.save(saved, weights)


# ------------------------------------------------------------------ batch composition

def _batch_variant(model) -> object:
    """A forward hook that moves batched logits (batch > 1) by up to KERNEL_NOISE, as a kernel whose reduction
    order depends on the batch shape does; a batch of one is left as it is."""
    gen = torch.Generator().manual_seed(0)
    noise = (torch.rand(model.config.vocab_size, generator=gen) * 2 - 1) * KERNEL_NOISE

    def hook(_module, _args, output):
        if output.logits.shape[0] > 1:
            output.logits.add_(noise.to(output.logits.dtype))
        return output

    return model.register_forward_hook(hook)


class FirstLogits:
    """An engine sampler that draws as the engine does and keeps each request's first-token logits, by seed."""

    def __init__(self):
        self.rows: dict[int, torch.Tensor] = {}

    def __call__(self, logits, rows):
        for i, r in enumerate(rows):
            self.rows.setdefault(r.sampling.seed, logits[i].clone())
        return sample_rows(logits, rows)


def _flipping_seed(alone: torch.Tensor, batched: torch.Tensor) -> int:
    """A seed whose first draw picks one token from the batch-of-one logits and another from the batched ones."""
    p = torch.softmax(torch.stack([alone, batched]), dim=-1)
    for seed in range(1, 200_000):
        u = torch.rand(1, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        a, b = inverse_cdf(p, u.expand(2, 1)).tolist()
        if a != b:
            return seed
    raise AssertionError("no seed found whose first draw the batched logits flip")


@pytest.fixture(scope="module")
def compositions(setup):
    """The same 8 requests recorded alone (batch size 1), together (one batch of 8) and beside 4 long-prompt
    companions (other padding), on the batch-variant model; episode 0's seed is one that the batched logits of
    its first token (as a probe recording saw them) flip."""
    handle = _batch_variant(setup.model)
    try:
        reqs = setup.requests()
        alone, together = FirstLogits(), FirstLogits()
        setup.record("probe-alone", reqs, max_batch_size=1, sampler=alone)
        setup.record("probe-together", reqs, sampler=together)
        seed0 = _flipping_seed(alone.rows[reqs[0]["seed"]], together.rows[reqs[0]["seed"]])
        reqs = setup.requests(seed0)
        out = {"alone": setup.record("alone", reqs, max_batch_size=1),
               "together": setup.record("together", reqs),
               "padded": setup.record("padded", reqs, companions=4)}
    finally:
        handle.remove()
    return out


def test_replay_holds_under_every_batch_composition(compositions, capsys):
    alone, together = compositions["alone"][1], compositions["together"][1]
    stats = {name: c[2] for name, c in compositions.items()}
    assert stats["alone"]["mean_batch_size"] == 1 < stats["together"]["mean_batch_size"]
    assert stats["padded"]["rows"] > stats["together"]["rows"]  # the companions shared the engine's batches
    # the constructed near-tie happened: batched and alone, episode 0 drew another first token
    assert alone[0].turns[0].response_ids[0] != together[0].turns[0].response_ids[0]
    for name, (run_dir, _, _) in compositions.items():
        assert replay_main([str(run_dir), "--all"]) == 0, name
        out = capsys.readouterr().out
        assert "RESULT replay_reproduced=1.0000" in out and "RESULT replay_episodes=8" in out, (name, out)
        if name == "alone":
            assert "RESULT replay_exact=1.0000" in out and "RESULT replay_near_ties=0" in out
        else:  # reported, with the two tokens and the margin, not hidden
            assert "s1-e0 (train step 1" in out and "near-tie: turn 0 token 0 recorded" in out, out
            assert "RESULT replay_exact=1.0000" not in out


def test_a_tie_too_wide_for_the_tolerance_is_a_divergence(compositions, capsys):
    run_dir = compositions["together"][0]
    assert replay_main([str(run_dir), "--episode", "s1-e0", "--tol", "1e-9"]) == 1
    out = capsys.readouterr().out
    assert "s1-e0" in out and "diverged" in out and "not a near-tie" in out


def test_the_near_tie_rule():
    logp = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    probs = logp.exp()
    # the draw 0.5 + 1e-5 picks token 1; token 0's interval [0, 0.5) lies 1e-5 away: a near-tie
    assert judge(logp, 0, 1, probs=probs, u=0.5 + 1e-5)[0]
    assert not judge(logp, 0, 1, probs=probs, u=0.6)[0]  # 0.1 of the mass away: a real divergence
    assert not judge(logp, 2, 1, probs=probs, u=0.5 + 1e-5)[0]  # the tie is with token 0, not token 2
    # the recorded log-prob must agree: same draw, but the record says the model gave token 0 p = 0.4
    tie, _, why = judge(logp, 0, 1, probs=probs, u=0.5 + 1e-5, recorded_logprob=float(torch.log(torch.tensor(0.4))))
    assert not tie and "log-prob" in why
    filtered = torch.tensor([0.625, 0.375, 0.0])  # top-k 2 left token 2 out
    assert not judge(logp, 2, 1, probs=filtered, u=0.99)[0]
    level = torch.tensor([-0.69315, -0.69320, -9.0])  # greedy: within 1e-3 of the argmax, then not
    assert judge(level, 1, 0)[0] and not judge(torch.tensor([-0.5, -0.9, -9.0]), 1, 0)[0]


def test_the_rule_for_engines_whose_draws_are_hidden():
    from orchestra.engine import Generation

    a = Generation([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4])
    assert compare_runs(a, Generation([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4 + 1e-5]))[0] == "same"
    assert compare_runs(a, Generation([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.5]))[0] == "diverged"  # same tokens only
    assert compare_runs(a, Generation([5, 6, 9], [-0.1, -0.2 + 1e-5, -2.0])) == (
        "near-tie", "token 2 differs; the 2 tokens before it agree within 1e-05 in log-prob")
    assert compare_runs(a, Generation([5, 6, 9], [-0.1, -0.25, -2.0]))[0] == "diverged"  # other distributions
