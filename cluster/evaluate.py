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
  estimator   the estimator router (orchestra/routing/) as a policy under every preference: a run dir (or
              its router/ dir); default: the evaluated run's own router when it has one; `estimator=` none
  dataset     template | Task file | loader:<name>:<path> | tau2:<domain>[:<version>[:<tasks.json>]]
              (default: data.source); held-out split. τ²: see `run_tau2` (seeds are trials: pass^1..pass^k)
  n           number of tasks (default eval.n_tasks)
  preference  a preset name, `all` (every preset; the orchestrator runs under each), or weights a=1,cost=.5
  seeds       k seeds (0..k-1; sim experts and sampling vary with the seed)
  baselines   comma list of strongest,cheapest,random,heuristic,oracle (default: all but oracle, plus
              oracle when the zoo replays recorded outcomes)
  out         output directory (default <run_dir>/eval)
  tool_servers true: tools run in Ray tool-server actors (actors/tool_server.py, one set per seed, on the
              cluster of cluster.address / $RAY_ADDRESS or a local one); default: in-process tools
              (tools.registry.build_tools + LocalToolClient); the sim zoo needs no network either way.
The policies' engines run in this process (an evaluation is tool-bound, not learner-bound).
A run in which every episode ended in an error (no endpoint, no key, a broken engine) writes episodes.jsonl
but no report, and exits non-zero with the first episode's error: a report of zeros would read as a bad policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from orchestra.config import task_tiers

OWN = ("checkpoint", "base", "dataset", "n", "preference", "seeds", "baselines", "out", "concurrency",
       "tool_servers", "estimator")


def all_failed(records: list[dict[str, Any]], hint: str = "") -> str | None:
    """The message to stop with when every episode ended in an error (nothing was measured), else None."""
    if not records or not all(r.get("error") for r in records):
        return None
    first = str(records[0]["error"])
    return (f"evaluation failed: every episode ({len(records)}) ended in an error, so there is nothing to report; "
            f"the first: {first}{hint if first.startswith('user simulator') else ''}")


def split_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    own, rest = {}, []
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"argument {item!r} is not key=value")
        (own.__setitem__(key, value) if key in OWN else rest.append(item))
    return own, rest


def checkpoint_model_dir(path: str) -> Path:
    """A run dir / checkpoint dir / HF model dir -> the model directory (orchestra.rundir.checkpoint.model_dir)."""
    from orchestra.rundir import checkpoint

    try:
        return checkpoint.model_dir(path)
    except ValueError as e:
        raise SystemExit(str(e)) from None


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
    from actors.tool_server import RayToolClient, make_tool_servers
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


def policy_tokenizer(cfg: Any, own: dict[str, str]) -> Any:
    """The checkpoint's own tokenizer when one is evaluated: the tiny tokenizer is trained on the project's text
    and cached by its hash, so the config's tokenizer can differ from the one the policy was trained with."""
    from orchestra.policy.models import load_tokenizer

    m = cfg.model
    if own.get("checkpoint"):
        return load_tokenizer(str(checkpoint_model_dir(own["checkpoint"])), chat_template=m.chat_template)
    return load_tokenizer(m.name, tiny=m.tiny, cache_dir=m.cache_dir, chat_template=m.chat_template)


def policy_engines(cfg: Any, own: dict[str, str], tok: Any) -> dict[str, Any]:
    """HF engines of the learned policies asked for: `orchestrator` (checkpoint=) and `base` (base=true)."""
    engines: dict[str, Any] = {}
    if not (own.get("checkpoint") or own.get("base", "false").lower() == "true"):
        return engines
    from transformers import AutoModelForCausalLM

    from orchestra.engine.hf import HFEngine
    from orchestra.policy.models import load_policy, resolve_device

    m = cfg.model

    def engine(model):
        return HFEngine.from_model(model.to(resolve_device(m.device)).eval(), tok, **cfg.engine.hf_kwargs())
    if own.get("checkpoint"):
        engines["orchestrator"] = engine(AutoModelForCausalLM.from_pretrained(checkpoint_model_dir(own["checkpoint"])))
    if own.get("base", "false").lower() == "true":
        engines["base"] = engine(load_policy(m.name, tiny=m.tiny, dtype=m.dtype, device="cpu", cache_dir=m.cache_dir,
                                             chat_template=m.chat_template, seed=cfg.seed)[0])
    return engines


def estimator_router(own: dict[str, str]) -> dict[str, Any]:
    """{"estimator": its script function} when asked for (own `estimator`) or when the evaluated checkpoint's run
    has a fitted router (`<run_dir>/router/`, written by an expected-value warm start); else {}."""
    from orchestra.routing.router import EstimatorRouter, find_router, has_router
    from tools.retrieval.dense import embed_texts

    spec = own.get("estimator")
    if spec is not None and not spec:
        return {}
    if spec:
        if not has_router(spec):
            raise SystemExit(f"estimator={spec}: no estimator router there (expected {spec}/router/estimator.json)")
        return {"estimator": EstimatorRouter.load(spec, embed_texts).script}
    found = find_router(own["checkpoint"]) if own.get("checkpoint") else None
    return {"estimator": EstimatorRouter.load(found, embed_texts).script} if found else {}


def build(cfg: Any, own: dict[str, str]):
    """Everything the Evaluator needs: (evaluator, tasks, policies, preferences, seeds)."""
    from orchestra.agent.prompt import Prompter
    from orchestra.eval.baselines import BASELINES, tier_costs
    from orchestra.eval.runner import Evaluator
    from orchestra.policy.tokenizer import eos_token_ids
    from orchestra.preferences import PRESETS, parse_preference
    from tools.base import LocalToolClient
    from tools.registry import Build, build_experts, build_tools

    m, z, a = cfg.model, cfg.zoo, cfg.agent
    tasks, corpus = heldout_tasks(cfg, own.get("dataset", ""), int(own.get("n", cfg.eval.n_tasks)))
    seeds = list(range(int(own.get("seeds", cfg.eval.seeds))))
    tok = policy_tokenizer(cfg, own)
    prompter = Prompter(tok, **a.prompter_kwargs())
    if own.get("tool_servers", "false").lower() == "true":
        clients = tool_server_clients(cfg, corpus, seeds, tasks)
    else:
        retriever = Build(z, corpus=corpus).retriever() if "search" in z.tools and corpus else None
        clients = {s: LocalToolClient(build_tools(dataclasses.replace(z, seed=z.seed + s), corpus=corpus or None,
                                                  retriever=retriever)) for s in seeds}
    experts = build_experts(z)
    replay = any(e.kind == "replay" for e in z.experts.values())
    default = [b for b in BASELINES if b != "oracle" or replay]
    policies = [b for b in own.get("baselines", ",".join(default)).split(",") if b]
    engines = policy_engines(cfg, own, tok)
    routers = estimator_router(own)
    if routers:
        policies.insert(0, "estimator")
    if "orchestrator" in engines:
        policies.insert(0, "orchestrator")
    if "base" in engines:
        policies.append("base")
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
                   sampling=sampling, judges=dict(r.judges), cost_scale=r.cost_scale, latency_scale=r.latency_scale,
                   price_in=m.price_in_per_mtok, price_out=m.price_out_per_mtok,
                   concurrency=int(own.get("concurrency", 16)), results_path=out / "episodes.jsonl")
    return ev, tasks, policies, prefs, seeds, out


# ---------------------------------------------------------------- τ²-bench
TAU2_BASELINES = ("strongest", "cheapest")


def tau2_spec(cfg: Any, dataset: str) -> dict[str, Any]:
    """domain_tasks kwargs from `tau2:<domain>[:<version>[:<path>]]`; what the spec omits comes from cfg.tau2."""
    from orchestra.tau2.evaluation import parse_dataset

    dataset = f"tau2:{cfg.tau2.domain}" if dataset == "tau2" else dataset
    spec = parse_dataset(dataset)
    if len(dataset.split(":")) < 3 or not dataset.split(":")[2]:
        spec["version"] = cfg.tau2.task_version
    if "path" not in spec and cfg.tau2.tasks_path:
        spec["path"] = cfg.tau2.tasks_path
    if cfg.data.splits and dataset == cfg.data.source:  # the training run's held-out split of its own domain
        spec["split"] = cfg.data.splits.split(",")[1].strip()
    return spec


def run_tau2(cfg: Any, own: dict[str, str], overrides: list[str]) -> dict[str, Any]:
    """`dataset=tau2:*`: every policy plays every task `seeds` times (trials) against tau2's user simulator
    (cfg.tau2, in-process); the official evaluator scores each episode. Policies: the orchestrator
    (checkpoint=) and base (base=true) as real engines; baselines `strongest` / `cheapest` hand every turn to
    call_expert with the priciest / cheapest tier (the always-one-expert routers of the paper's τ² table).
    Writes episodes.jsonl and report.json / report.md (pass^1..pass^k, reward, $ and tool latency per policy)."""
    import json
    from dataclasses import asdict

    from rich.console import Console

    from orchestra.agent.prompt import Prompter
    from orchestra.engine import Sampling
    from orchestra.engine.scripted import call_text, script_engine
    from orchestra.eval.baselines import tier_costs
    from orchestra.jsonl import write_jsonl
    from orchestra.policy.tokenizer import eos_token_ids
    from orchestra.preferences import parse_preference
    from orchestra.tau2.domain import domain_tasks
    from orchestra.tau2.evaluation import driver_factory, run_tau2_eval, summarize_tau2
    from orchestra.tau2.wiring import call_experts, driver_limits, user_simulator

    a, tau2 = cfg.agent, asdict(cfg.tau2)
    spec = tau2_spec(cfg, own.get("dataset") or cfg.data.source)
    pref = parse_preference(own.get("preference", cfg.eval.preference))
    tasks = domain_tasks(**spec, limit=int(own.get("n", cfg.eval.n_tasks)), pref=pref)
    trials = int(own.get("seeds", cfg.eval.seeds))
    tok = policy_tokenizer(cfg, own)
    prompter = Prompter(tok, **a.prompter_kwargs())
    eos = eos_token_ids(tok)
    experts, tiers = call_experts(tau2, asdict(cfg.zoo))
    engines = {name: (lambda trial, e=e: e) for name, e in policy_engines(cfg, own, tok).items()}
    baselines = [b for b in own.get("baselines", ",".join(TAU2_BASELINES)).split(",") if b]
    for b in baselines:
        if b not in TAU2_BASELINES:
            raise SystemExit(f"τ² baselines are {TAU2_BASELINES}, got {b!r}")
        if not tiers:
            raise SystemExit("τ² baselines call experts: set tau2.call_expert=true and zoo.tiers / zoo.experts")
        ranked = sorted(tiers, key=lambda t: (tier_costs(cfg.zoo, tiers).get(t, float("inf")), t))
        text = call_text("call_expert", {"expert": ranked[-1] if b == "strongest" else ranked[0]})
        engines[b] = lambda trial, text=text: script_engine(tok, [text], eos[0])
    if not engines:
        raise SystemExit("nothing to evaluate: give checkpoint=, base=true or baselines=")
    user = user_simulator(tau2)
    driver_kw = driver_limits(tau2, a.loop_kwargs(), eos)
    sampling = Sampling(max_tokens=cfg.sampling.max_tokens, temperature=cfg.eval.temperature, top_p=cfg.sampling.top_p,
                        top_k=cfg.sampling.top_k)
    records: list[dict[str, Any]] = []
    for name, engine_for in engines.items():  # one policy at a time: episode ids repeat across policies
        make = driver_factory(spec["domain"], engine_for, prompter, user, experts=experts, tiers=tiers, **driver_kw)
        records += asyncio.run(run_tau2_eval(make, tasks, trials, sampling, concurrency=cfg.tau2.concurrency,
                                             policy=name))
    ks = tuple(range(1, trials + 1))
    summary = {p: summarize_tau2([r for r in records if r["policy"] == p], ks) for p in engines}
    out = Path(own.get("out") or Path(cfg.run_dir) / "eval")
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "episodes.jsonl", records)
    failed = all_failed(records, hint=f" (the user simulator: tau2.user_model={cfg.tau2.user_model or '<empty>'}, "
                                      f"tau2.user_api_base={cfg.tau2.user_api_base or '<the provider default>'}, "
                                      f"key from ${cfg.tau2.user_api_key_env or 'OPENAI_API_KEY'})")
    if failed:
        raise SystemExit(failed)
    report = {"dataset": spec, "trials": trials, "n_tasks": len(tasks), "overrides": overrides, "policies": summary}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    cols = [f"pass^{k}" for k in ks] + ["mean_reward", "mean_cost_usd", "mean_latency_s"]
    lines = ["| policy | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {p} | " + " | ".join(f"{s.get(c, float('nan')):.4g}" for c in cols) + " |" for p, s in summary.items()]
    (out / "report.md").write_text(f"# τ²-bench {spec['domain']} ({spec['version']}), {len(tasks)} tasks x "
                                   f"{trials} trials\n\n" + "\n".join(lines) + "\n")
    Console().print((out / "report.md").read_text())
    return report


def newest_run(run_dir: str) -> tuple[Path, str | None] | None:
    """The run dir beside `run_dir` with the newest good checkpoint, and the experiment it was trained in
    (what `make eval` / `make serve` use when no checkpoint is named): its preset name when conf/ has that
    preset, else the run's own saved config.yaml (a preset given as a path outside conf/ has no name to look up)."""
    import yaml

    from orchestra.config.load import CONF_DIR
    from orchestra.rundir.checkpoint import latest_run

    run = latest_run(Path(run_dir).parent)
    if run is None:
        return None
    saved = run / "config.yaml"
    if not saved.is_file():
        return run, None
    name = (yaml.safe_load(saved.read_text()) or {}).get("name")
    return run, name if name and (CONF_DIR / "experiment" / f"{name}.yaml").is_file() else str(saved)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from orchestra.config import load_config
    from orchestra.eval.report import write_report
    from orchestra.eval.tool_bands import catalogue_ids

    own, overrides = split_args(list(sys.argv[1:] if argv is None else argv))
    cfg = load_config(overrides)
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
