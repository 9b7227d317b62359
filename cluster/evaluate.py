"""`python -m cluster.evaluate [checkpoint=...] [dataset=...] [preference=...] [seeds=k] [key=value ...]`

Runs the orchestrator and the baselines over a held-out task set and writes report.json / report.md /
pareto.png / tool_mix.png plus episodes.jsonl (resumable: rerun the same command to finish a broken run); on
replay zoos (a routing log) also RouteLLM's yardstick, yardstick.json / yardstick.png and `RESULT yardstick_*`
lines (cluster/yardstick.py; orchestra/eval/yardstick.py, docs/quality.md).
Own keys (everything else is a config override, e.g. experiment=mmlu_pro_replay or agent.max_turns=3):
  checkpoint  run dir (newest good checkpoint), checkpoint dir, or HF model dir; empty (`checkpoint=`): the
              baselines alone; not given: the run beside run_dir with the newest good checkpoint, in the
              experiment it was trained in (so `make eval` right after `make train` needs no argument)
  base        true: also the untrained base policy (model.name, seeded) as a baseline
  estimator   the run's learned routers (the estimator router; orchestra/routing/registry.py, where=eval) as
              policies under every preference: a run dir (or its router/ dir); default: the evaluated run's own
              when it has them; `estimator=` none
  dataset     template | Task file | loader:<name>:<path> | tau2:<domain>[:<version>[:<tasks.json>]]
              (default: data.source); held-out split. τ²: cluster/tau2_eval.py (seeds are trials: pass^1..pass^k)
  n           number of tasks (default eval.n_tasks)
  preference  a preset name, `all` (every preset; the orchestrator runs under each), or weights a=1,cost=.5
  seeds       k seeds (0..k-1; sim experts and sampling vary with the seed)
  baselines   comma list of the registry's fixed policies: strongest,cheapest,random,heuristic,oracle (default:
              all but oracle, plus oracle when the zoo replays recorded outcomes)
  out         output directory (default <run_dir>/eval)
  tool_servers true: tools run in Ray tool-server actors (actors/tool_server.py, one set per seed, on the
              cluster of cluster.address / $RAY_ADDRESS or a local one); default: in-process tools
              (tools.registry.build_tools + LocalToolClient); the sim zoo needs no network either way.
The policies' engines run in this process (an evaluation is tool-bound, not learner-bound).
A run in which every episode ended in an error (no endpoint, no key, a broken engine) writes episodes.jsonl
but no report, and exits non-zero with the first episode's error: a report of zeros would read as a bad policy.
Here: the CLI and the task evaluation's wiring (`build`); the learned policies it loads are
cluster/eval_policies.py's, the newest-run lookup cluster/runs.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from actors.serve.binding import run_config
from cluster.eval_policies import all_failed, policy_engines, policy_tokenizer, run_routers
from cluster.runs import newest_run
from cluster.tau2_eval import run_tau2
from orchestra.config import ConfigError, task_tiers
from orchestra.config.cli import parse_cli

OWN = ("checkpoint", "base", "dataset", "n", "preference", "seeds", "baselines", "out", "concurrency",
       "tool_servers", "estimator")


def split_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(this entry point's own keys, config overrides): orchestra/config/cli.py's grammar."""
    cli = parse_cli(argv, "cluster.evaluate", own=OWN)
    return cli.own, cli.overrides


def adopt_run_config(own: dict[str, str], overrides: list[str]) -> list[str]:
    """The overrides with the evaluated checkpoint's own config first (`experiment=<run>/config.yaml`): the
    settings its policy was trained with (prompt rendering, route hints, tiers, data), as Serve adopts them, the
    command line's overrides on top. Unchanged when an experiment is named or the checkpoint has no config."""
    saved = run_config(own["checkpoint"]) if own.get("checkpoint") else None
    if saved is None or any(o.startswith("experiment=") for o in overrides):
        return overrides
    return [f"experiment={saved}", *overrides]


def heldout_tasks(cfg: Any, dataset: str, n: int) -> tuple[list, list]:
    """The first n held-out tasks. Held-out sets are prefix-stable (template generation is sequential; loaded
    sets are shuffled by seed and cut from the front), so with the training run's data.seed and n <=
    its data.n_heldout these are tasks the policy never trained on; a larger n is refused."""
    from orchestra.data.sources import build_task_set

    if (not dataset or dataset == cfg.data.source) and n > cfg.data.n_heldout:
        raise SystemExit(f"n={n} exceeds data.n_heldout={cfg.data.n_heldout}: the extra tasks could be "
                         "training tasks; raise data.n_heldout only if the policy was trained with it")
    data = dataclasses.replace(cfg.data, source=dataset or cfg.data.source, n_heldout=n, n_train=1)
    _train, heldout, corpus = build_task_set(data, task_tiers(cfg))
    return heldout, corpus


def tool_server_clients(cfg: Any, corpus: list, seeds: list[int], tasks: list) -> dict[int, Any]:
    """One set of tool-server actors per seed (sim experts draw from zoo.seed + k); schemas warmed up front
    so the event loop never blocks on a schema round trip."""
    from actors.tool_client import RayToolClient
    from actors.tool_server import make_tool_servers
    from cluster.launch import init_ray
    from tools.registry import zoo_dict

    init_ray(cfg)
    clients = {}
    for s in seeds:
        handles, _ledger = make_tool_servers(zoo_dict(dataclasses.replace(cfg.zoo, seed=cfg.zoo.seed + s)),
                                             build_kwargs={"corpus": corpus or None}, name_suffix=f"-eval{s}")
        clients[s] = RayToolClient(handles, timeout_s=cfg.zoo.server.timeout_s)
        for t in tasks:
            clients[s].schemas(t)
    return clients


def policy_list(own: dict[str, str], learned: dict[str, Any], engines: dict[str, Any], replay: bool
                ) -> tuple[list[str], dict[str, Any]]:
    """(the policies an evaluation runs, name -> task -> script of the learned ones among them), by the registry
    (orchestra/routing/registry.py, where=eval): the evaluated checkpoint first, then the run's learned routers
    (`learned`: cluster/eval_policies.run_routers; none with `estimator=`), the fixed baselines (own `baselines`,
    in its order; default: every fixed policy, the replay-only ones on replay zoos only), the base policy last."""
    from orchestra.routing import registry

    default = [p.name for p in registry.among("eval", "fixed") if replay or not p.replay_only]
    fixed = [b for b in own.get("baselines", ",".join(default)).split(",") if b]
    routers = {name: r.script for name, r in learned.items()} if own.get("estimator") != "" else {}
    ordered = registry.among("eval")  # the model policies the registry lists before its fixed ones run first
    cut = next((i for i, p in enumerate(ordered) if p.kind == "fixed"), len(ordered))
    head, tail = ([p.name for p in part if p.kind == "model" and p.name in engines]
                  for part in (ordered[:cut], ordered[cut:]))
    return [*head, *routers, *fixed, *tail], routers


def build(cfg: Any, own: dict[str, str]):
    """Everything the Evaluator needs: (evaluator, tasks, policies, preferences, seeds)."""
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import eos_token_ids
    from orchestra.eval.runner import Evaluator
    from orchestra.preferences import PRESETS, parse_preference
    from reward.score import episode_scorer
    from tools.base import LocalToolClient
    from tools.registry import Build, build_experts, build_tools, tier_costs

    m, z, a = cfg.model, cfg.zoo, cfg.agent
    tasks, corpus = heldout_tasks(cfg, own.get("dataset", ""), int(own.get("n", cfg.eval.n_tasks)))
    seeds = list(range(int(own.get("seeds", cfg.eval.seeds))))
    tok = policy_tokenizer(cfg, own)
    prompter = Prompter(tok, **a.prompter_kwargs())
    # the run's learned routers (the estimator router), loaded once: policies of their own (unless estimator= turns
    # them off) and, with route hints, what the policy reads (the estimator's estimates)
    hints = a.route_hints and bool(own.get("checkpoint"))  # `checkpoint=`: the baselines alone read no prompt
    learned = run_routers(own) if hints or own.get("estimator") != "" else {}
    router = learned.get("estimator")
    if hints:  # the policy was trained reading its run's router's suggestion: the same router's here
        if router is None:
            raise SystemExit("agent.route_hints=true: the policy reads its run's estimator router, and no router "
                             "was found next to the checkpoint (pass estimator=<run dir>)")
        router.attach_hints(tasks)
    if own.get("tool_servers", "false").lower() == "true":
        clients = tool_server_clients(cfg, corpus, seeds, tasks)
    else:
        retriever = Build(z, corpus=corpus).retriever() if "search" in z.tools and corpus else None
        clients = {s: LocalToolClient(build_tools(dataclasses.replace(z, seed=z.seed + s), corpus=corpus or None,
                                                  retriever=retriever)) for s in seeds}
    experts = build_experts(z)
    replay = any(e.kind == "replay" for e in z.experts.values())
    engines = policy_engines(cfg, own, tok)
    policies, routers = policy_list(own, learned, engines, replay)
    spec = own.get("preference", cfg.eval.preference)
    prefs = dict(PRESETS) if spec == "all" else {spec: parse_preference(spec)}
    if spec == "all":  # the first entry is the one fixed routers run under
        prefs = {cfg.eval.preference: PRESETS[cfg.eval.preference], **prefs}
    from orchestra.engine import Sampling

    sampling = Sampling(max_tokens=cfg.sampling.max_tokens, temperature=cfg.eval.temperature,
                        top_p=cfg.sampling.top_p, top_k=cfg.sampling.top_k)
    r = cfg.reward
    out = Path(own.get("out") or Path(cfg.run_dir) / "eval")
    ev = Evaluator(tok, prompter, clients, eos_token_ids(tok)[0], engines=engines, routers=routers,
                   tier_cost=tier_costs(z, task_tiers(cfg)), experts=experts,
                   agent_kwargs={**a.loop_kwargs(), "eos_token_ids": eos_token_ids(tok)},
                   sampling=sampling, concurrency=int(own.get("concurrency", 16)), results_path=out / "episodes.jsonl",
                   score=episode_scorer(dict(r.judges), cost_scale=r.cost_scale, latency_scale=r.latency_scale,
                                        price_in=m.price_in_per_mtok, price_out=m.price_out_per_mtok))
    return ev, tasks, policies, prefs, seeds, out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from orchestra.config import load_config
    from orchestra.eval.report import write_report
    from orchestra.eval.tool_bands import catalogue_ids

    try:
        own, overrides = split_args(list(sys.argv[1:] if argv is None else argv))
        cfg = load_config(overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if (own.get("dataset") or cfg.data.source).split(":")[0] == "tau2":
        run_tau2(cfg, own, overrides)
        return 0
    if "checkpoint" not in own and own.get("base", "false").lower() != "true":
        found = newest_run(cfg.run_dir)
        if found is None:
            print(f"no trained run under {Path(cfg.run_dir).parent}/: run `make train` first, or name one with "
                  "checkpoint=PATH (checkpoint= evaluates the baselines alone)", file=sys.stderr)
            return 2
        run, name = found
        if name and name != cfg.name and not any(o.startswith("experiment=") for o in overrides):
            overrides = [f"experiment={name}", *overrides]  # evaluate it as the experiment it was trained in
            cfg = load_config(overrides)
        own["checkpoint"] = str(run)
        own.setdefault("out", str(run / "eval"))
        print(f"evaluating the newest trained run, {run} ({cfg.name}); checkpoint=PATH picks another")
    adopted = adopt_run_config(own, overrides)
    if adopted != overrides:
        try:
            cfg = load_config(adopted)
        except ConfigError as e:
            print(f"config error: {e}", file=sys.stderr)
            return 2
        print(f"config: the run's own ({adopted[0].split('=', 1)[1]}); experiment=NAME evaluates under another")
    ev, tasks, policies, prefs, seeds, out = build(cfg, own)
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    n_jobs = sum((len(prefs) if p == "orchestrator" else 1) for p in policies) * len(seeds) * len(tasks)
    with Progress(console=console) as progress:
        bar = progress.add_task("episodes", total=n_jobs)
        records = asyncio.run(ev.run(tasks, policies, prefs, seeds,
                                     on_episode=lambda _r: progress.advance(bar)))
    if own.get("tool_servers", "false").lower() == "true":
        import ray

        ray.shutdown()
    failed = all_failed(records)
    if failed:
        raise SystemExit(failed)
    meta = {"seeds": seeds, "policies": policies, "preferences": prefs, "n_tasks": len(tasks),
            "overrides": overrides, **{k: v for k, v in own.items()}}
    report = write_report(records, out, meta=meta, plots=cfg.log.plots,
                          catalogue=catalogue_ids(tasks, cfg.zoo.tiers))
    console.print((out / "report.md").read_text())
    from cluster.yardstick import yardstick

    for name, value in yardstick(cfg, tasks, records, ev.routers, out, plots=cfg.log.plots).items():
        print(f"RESULT {name}={value:.4f}")  # RouteLLM's yardstick on replay zoos (orchestra/eval/yardstick.py)
    if "quality" in report:
        console.print(f"quality: {report['quality']}")
    console.print(f"report: {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
