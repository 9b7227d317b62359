"""Deterministic replay of recorded episodes: `python -m cluster.replay <run_dir> (--all | --episode ID ...)`.

A training run records every episode (orchestra/rundir/records.py: seed, policy version, generated ids and their
log-probs, every tool call and its result, reward). Replay re-runs an episode offline — no Ray, no tool servers, no
network — with the same agent loop, prompter and reward code as today's checkout: the policy's weights of the
recorded version on an HF engine at batch size 1, the episode's own sampling seed, and a tool client that serves the
recorded results in order. It then compares prompts (by hash), generated token ids and their log-probs, tool calls,
answer and the re-scored reward with the record and prints the first divergence, so a code change or another
checkpoint shows up as a diff. It ends with `RESULT replay_reproduced=<fraction>`.

Batch composition: the run sampled its episodes in batches, replay samples each alone, and the two forward passes
may differ in the last bits of the logits (by CPU, by GPU). Where that flips a sampled token — the episode's draw
fell within `--tol` of a token boundary and the recorded token's log-prob agrees within `--tol` — the token is a
*near-tie* (orchestra/engine/ties.py): replay keeps the recorded token, reports the tie, and the episode still
counts as reproduced. `replay_exact` is the fraction that needed no such tie. A flip the rule does not explain, or a
log-prob that moved by more than `--tol`, is a divergence.

Weights of version v come from `episodes/weights/v*.pt` (log.replay_weights), else a checkpoint whose learner
holds version v, else (v = 0) the initial policy; with none of those the episode is reported as "no weights
for version v" and not counted, never replayed on other weights. Episodes that ended in an error (a tool
catalogue or engine failure) are skipped: nothing was generated that could be compared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.engine.ties import TIE_TOL
from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from reward.rubric import rubric_of


class ReplayTools:
    """The agent loop's ToolClient over one episode's recorded calls: serves their results in order and notes
    any call that differs from the record (the replayed policy then gets an error result, as a real tool
    would not have answered the recorded question)."""

    def __init__(self, schemas: list[dict[str, Any]], records: list[dict[str, Any]]):
        self._schemas = schemas
        # unknown-tool calls never reach a ToolClient (the loop answers them), so they are not served here
        self.pending = [r for r in records if not r["result"].get("meta", {}).get("unknown_tool")]
        self.diffs: list[str] = []
        self.served = 0

    def schemas(self, task: Task) -> list[dict[str, Any]]:
        return self._schemas

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        n, self.served = self.served, self.served + 1
        if not self.pending:
            self.diffs.append(f"tool call {n} (turn {ctx.turn}): replayed {call.name}({call.arguments}) was "
                              "not in the record")
            return ToolResult.failure("replay: no recorded result for this call")
        rec = self.pending.pop(0)
        if (rec["name"], rec["arguments"]) != (call.name, call.arguments):
            self.diffs.append(f"tool call {n} (turn {ctx.turn}): recorded {rec['name']}({rec['arguments']}) vs "
                              f"replayed {call.name}({call.arguments})")
            return ToolResult.failure("replay: this call differs from the recorded one")
        return ToolResult.from_dict(rec["result"])


class ReplayEngine:
    """The HF engine at batch size 1, its sampler following one recorded episode turn by turn (`start` per
    episode): a turn whose prompt matches the record's follows its recorded tokens through near-ties."""

    def __init__(self, engine: Any, tol: float):
        self.engine, self.tol = engine, tol
        self.turns: list[dict[str, Any]] = []
        self.played = 0
        self.follower = self._new_follower()

    def _new_follower(self) -> Any:
        from orchestra.engine.ties import Follower

        self.engine.sampler = Follower(tol=self.tol)
        return self.engine.sampler

    def start(self, turns: list[dict[str, Any]]) -> None:
        self.turns, self.played = list(turns), 0
        self.follower = self._new_follower()

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        from orchestra.rundir.records import ids_hash

        n, self.played = self.played, self.played + 1
        want = self.turns[n] if n < len(self.turns) else None
        if want is not None and want["prompt_hash"] == ids_hash(prompt_ids) and not self.follower.divergence:
            self.follower.expect(n, want["response_ids"], want.get("logprobs"))
        else:  # another prompt (token_diffs reports it), an extra turn, or after a divergence: run free
            self.follower.expect(n, None)
        return await self.engine.generate(prompt_ids, sampling)

    def release(self, ids: list[int]) -> None:
        self.engine.release(ids)


class Policy:
    """The run's policy on an HF engine at batch size 1; switches weights by recorded version."""

    def __init__(self, cfg: Any, run_dir: Path, tol: float = 1e-3):
        from cluster import launch
        from orchestra.agent.prompt import Prompter
        from orchestra.engine import eos_token_ids
        from orchestra.engine.hf import HFEngine
        from orchestra.policy.models import load_policy, set_torch_threads

        set_torch_threads(cfg.cluster.torch_threads)  # as the rollout workers ran (reduction order)
        self.cfg, self.run_dir = cfg, run_dir
        self.model_kwargs = launch.model_kwargs(cfg)
        model, self.tokenizer = load_policy(cfg.model.name, **self.model_kwargs)
        self.hf = HFEngine.from_model(model, self.tokenizer, max_batch_size=1, batch_wait_ms=0.0)
        self.engine = ReplayEngine(self.hf, tol)
        self.prompter = Prompter(self.tokenizer, **launch.prompter_kwargs(cfg))
        self.eos = eos_token_ids(self.tokenizer)
        self.agent_kwargs = cfg.agent.loop_kwargs()
        self.loaded: int | None = 0  # load_policy gave the initial weights: version 0

    def weights(self, version: int) -> tuple[dict[str, Any] | None, str]:
        """(state dict, where from) for `version`; (None, "") when nothing on disk holds it."""
        import torch

        from orchestra.rundir import checkpoint
        from orchestra.rundir.records import weights_path

        path = weights_path(self.run_dir, version)
        if path.is_file():
            return torch.load(path, weights_only=True), str(path)
        for ck in checkpoint.candidates(self.run_dir):
            learner = ck / "learner"
            state = learner / "learner.json"
            if state.is_file() and json.loads(state.read_text()).get("version") == version:
                from safetensors.torch import load_file

                return load_file(str(learner / "model.safetensors")), str(ck)
        if version == 0:  # the workers' weights before any sync
            from orchestra.policy.models import load_policy

            return dict(load_policy(self.cfg.model.name, **self.model_kwargs)[0].state_dict()), "initial policy"
        return None, ""

    def load(self, version: int) -> str | None:
        """Put `version` on the engine as a rollout worker would (full weights, then a LoRA payload merged into
        them); None when no weights exist for it."""
        if self.loaded == version:
            return "loaded"
        from orchestra.policy.lora import LORA_KEY, AdapterMerger

        state, source = self.weights(version)
        if state is None:
            return None
        base = {k: v for k, v in state.items() if k != LORA_KEY}
        if base:
            self.hf.load_weights(base, version)
        if LORA_KEY in state:
            self.hf.load_weights(AdapterMerger().merge(self.hf.model, state), version, partial=True)
        self.loaded = version
        return source


@dataclass
class Outcome:
    record: dict[str, Any]
    status: str  # reproduced | diverged | skipped
    diffs: list[str] = field(default_factory=list)
    traj: Any = None
    seconds: float = 0.0
    ties: list[Any] = field(default_factory=list)  # near-tie tokens kept from the record (orchestra/engine/ties.py)
    logprob_diff: float = 0.0  # largest |recorded - replayed| log-prob over the followed tokens


def token_diffs(rec: dict[str, Any], traj: Any, decode: Any) -> list[str]:
    """The first place where the replayed turns leave the recorded ones (prompt, then generated ids)."""
    from orchestra.rundir.records import ids_hash

    for i in range(max(len(rec["turns"]), len(traj.turns))):
        if i >= len(rec["turns"]) or i >= len(traj.turns):
            return [f"turn count: recorded {len(rec['turns'])} vs replayed {len(traj.turns)}"]
        want, got = rec["turns"][i], traj.turns[i]
        if want["prompt_hash"] != ids_hash(got.prompt_ids):
            return [f"turn {i}: prompt differs (recorded {want['prompt_len']} tokens, replayed "
                    f"{len(got.prompt_ids)}): prompt rendering or tool results changed"]
        a, b = want["response_ids"], got.response_ids
        if a != b:
            j = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            ta, tb = (repr(decode(x[j:j + 1])) if j < len(x) else "<end>" for x in (a, b))
            return [f"turn {i} token {j}: recorded {ta} vs replayed {tb} (after {decode(a[:j])!r})"]
    return []


async def replay(records: list[dict[str, Any]], policy: Policy, schemas: dict[str, Any],
                 say: Any = print) -> list[Outcome]:
    from orchestra.agent.loop import AgentLoop
    from orchestra.engine import Sampling

    out: list[Outcome] = []
    for rec in sorted(records, key=lambda r: (r["version"] is None, r["version"] or 0)):  # few weight swaps
        if rec["termination"] == "error":
            out.append(Outcome(rec, "skipped", [f"episode ended in an error: {rec.get('error')}"]))
            continue
        if rec["version"] is None:  # ended before its first generation (budget): any weights will do
            rec = {**rec, "version": policy.loaded if policy.loaded is not None else 0}
        source = policy.load(rec["version"])
        if source is None:
            out.append(Outcome(rec, "skipped", [f"no checkpoint or saved weights for version {rec['version']}"]))
            continue
        if source != "loaded":
            say(f"weights of version {rec['version']}: {source}")
        start = time.perf_counter()
        policy.engine.start(rec["turns"])
        tools = ReplayTools(schemas[rec["schemas"]], rec["tool_calls"])
        loop = AgentLoop(policy.engine, tools, policy.prompter, eos_token_ids=policy.eos, **policy.agent_kwargs)
        traj = await loop.run(Task.from_dict(rec["task"]), Sampling(**rec["sampling"]), uid=rec["uid"],
                              episode_id=rec["id"], policy_version=rec["version"])
        for t, want in zip(traj.turns, rec["turns"]):  # wall-clock, not reproducible: the record's counts
            t.gen_latency_s = want["gen_latency_s"]
        traj.gen_latency_s = sum(t.gen_latency_s for t in traj.turns)
        follower = policy.engine.follower
        diffs = token_diffs(rec, traj, policy.prompter.decode)
        if diffs and follower.divergence:
            diffs[0] += f"; {follower.divergence.split(': ', 1)[1]}"
        if follower.max_logprob_diff > follower.tol:
            diffs.append(f"log-probs: {follower.worst} differs by {follower.max_logprob_diff:.3g} from the record "
                         f"(tolerance {follower.tol:g}): other weights or numerics")
        diffs += tools.diffs
        if tools.pending:
            diffs.append(f"{len(tools.pending)} recorded tool call(s) not made, from {tools.pending[0]['name']}")
        if (traj.answer, traj.termination) != (rec["answer"], rec["termination"]):
            diffs.append(f"end: recorded {rec['termination']} {rec['answer']!r} vs replayed {traj.termination} "
                         f"{traj.answer!r}")
        out.append(Outcome(rec, "diverged" if diffs else "reproduced", diffs, traj, time.perf_counter() - start,
                           list(follower.ties), follower.max_logprob_diff))
    return out


def tie_note(o: Outcome, decode: Any) -> str:
    """' (k near-ties: where, which tokens, margin)' for a reproduced episode that needed any."""
    if not o.ties:
        return ""
    t = o.ties[0]
    more = f", +{len(o.ties) - 1} more" if len(o.ties) > 1 else ""
    return (f" ({len(o.ties)} near-tie{'s' if len(o.ties) > 1 else ''}: turn {t.turn} token {t.index} recorded "
            f"{decode([t.recorded])!r}, alone {decode([t.replayed])!r}, {t.margin:.2g} apart{more})")


async def rescore(outcomes: list[Outcome], cfg: Any) -> None:
    """Score the replayed episodes with today's reward code, grouped as the run grouped them (kind, step, uid),
    and add a diff where the reward differs from the recorded one."""
    from orchestra.rundir.records import score_kwargs
    from reward.score import score_group

    groups: dict[tuple[str, int, str], list[Outcome]] = {}
    for o in outcomes:
        if o.traj is not None:
            groups.setdefault((o.record["kind"], o.record["step"], o.record["uid"]), []).append(o)
    for (kind, _, _), members in groups.items():
        scored = await score_group([o.traj for o in members], [Task.from_dict(o.record["task"]) for o in members],
                                   **score_kwargs(cfg, kind))
        for o, s in zip(members, scored, strict=True):
            rec = o.record
            if rec["status"] != "scored":  # late / failed scoring in the run: its reward was the failure reward
                continue
            if abs(s.reward - rec["reward"]) > 1e-9:
                o.diffs.append(f"reward: recorded {rec['reward']:.6g} {rec['terms']} vs replayed {s.reward:.6g} "
                               f"{s.terms}")
                o.status = "diverged"


def load_run_config(run_dir: Path) -> Any:
    """The run's resolved config (config.yaml), as the trainer wrote it."""
    from omegaconf import OmegaConf

    from orchestra.config import ExperimentConfig

    base = OmegaConf.structured(ExperimentConfig)
    return OmegaConf.to_object(OmegaConf.merge(base, OmegaConf.load(run_dir / "config.yaml")))


def select(records: list[dict[str, Any]], ids: list[str], cfg: Any) -> list[dict[str, Any]]:
    """The asked-for episodes; under a group-relative rubric a training episode brings its whole group (its
    reward depends on the others)."""
    if not ids:
        return records
    missing = set(ids) - {r["id"] for r in records}
    if missing:
        raise SystemExit(f"no recorded episode {sorted(missing)[0]!r} in this run")
    chosen = [r for r in records if r["id"] in ids]
    if rubric_of(cfg.reward.rubric).grouped:
        groups = {(r["step"], r["uid"]) for r in chosen if r["kind"] == "train"}
        chosen = [r for r in records if r["id"] in ids or (r["kind"] == "train" and (r["step"], r["uid"]) in groups)]
    return chosen


def main(argv: list[str] | None = None) -> int:
    from orchestra.rundir.records import read_records, read_schemas

    ap = argparse.ArgumentParser(prog="python -m cluster.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--episode", action="append", default=[], help="episode id (repeatable)")
    ap.add_argument("--all", action="store_true", help="every recorded episode")
    ap.add_argument("--kind", choices=("train", "eval"), help="only training or only held-out episodes")
    ap.add_argument("--limit", type=int, default=0, help="at most this many episodes (after --kind)")
    ap.add_argument("--tol", type=float, default=TIE_TOL,
                    help="near-tie and log-prob tolerance (default %(default)g; see orchestra/engine/ties.py)")
    args = ap.parse_args(argv)
    if not args.all and not args.episode:
        ap.error("give --episode ID or --all")
    run_dir = args.run_dir.expanduser().resolve()
    cfg = load_run_config(run_dir)
    records = [r for r in read_records(run_dir) if args.kind in (None, r["kind"])]
    if not records:
        raise SystemExit(f"{run_dir}: no episode records (episodes/*.jsonl; log.episodes=true records them)")
    records = select(records, args.episode, cfg)[: args.limit or None]
    if cfg.engine.kind != "hf":
        print(f"note: the run generated with engine {cfg.engine.kind!r}; replay uses the HF engine")
    started = time.perf_counter()
    policy = Policy(cfg, run_dir, tol=args.tol)
    outcomes = asyncio.run(replay(records, policy, read_schemas(run_dir)))
    asyncio.run(rescore(outcomes, cfg))
    for o in outcomes:
        r = o.record
        where = f"{r['kind']} step {r['step']}" if r["kind"] == "train" else "eval"
        line = f"{r['id']} ({where}, v{r['version']}, {len(r['turns'])} turns): {o.status}"
        print(line + tie_note(o, policy.prompter.decode) + "".join(f"\n    {d}" for d in o.diffs[:3]))
    done = [o for o in outcomes if o.status != "skipped"]
    ok = sum(o.status == "reproduced" for o in done)
    exact = sum(o.status == "reproduced" and not o.ties for o in done)
    print(f"{ok}/{len(done)} replayed episodes reproduced token-for-token and reward-for-reward ({ok - exact} "
          f"through near-ties of batch-variant logits); {len(outcomes) - len(done)} skipped; "
          f"{time.perf_counter() - started:.1f}s in all")
    print(f"RESULT replay_reproduced={ok / len(done) if done else 0.0:.4f}")
    print(f"RESULT replay_exact={exact / len(done) if done else 0.0:.4f}")
    print(f"RESULT replay_near_ties={sum(len(o.ties) for o in done)}")
    print(f"RESULT replay_logprob_max_diff={max((o.logprob_diff for o in done), default=0.0):.3g}")
    print(f"RESULT replay_episodes={len(done)}")
    print(f"RESULT replay_skipped={len(outcomes) - len(done)}")
    if done:
        print(f"RESULT replay_s_per_episode={sum(o.seconds for o in done) / len(done):.4f}")
    return 0 if ok == len(done) else 1


if __name__ == "__main__":
    sys.exit(main())
