"""τ²-bench evaluation (`python -m cluster.evaluate dataset=tau2:<domain>[:<version>[:<tasks.json>]]`).

`tau2_spec` reads the dataset spec (what it omits comes from cfg.tau2); `run_tau2` plays every policy against
tau2's user simulator for `seeds` trials per task, scores each episode with the official evaluator and writes
episodes.jsonl and report.json / report.md (pass^1..pass^k, reward, $ and tool latency per policy). The CLI and
its own keys are cluster/evaluate.py's; the episode driver and scoring are tools/tau2/'s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cluster.eval_policies import all_failed, policy_engines, policy_tokenizer

TAU2_BASELINES = ("strongest", "cheapest")


def tau2_spec(cfg: Any, dataset: str) -> dict[str, Any]:
    """domain_tasks kwargs from `tau2:<domain>[:<version>[:<path>]]`; what the spec omits comes from cfg.tau2."""
    from tools.tau2.evaluation import parse_dataset

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
    from orchestra.agent.scripted import call_text, script_engine
    from orchestra.engine import Sampling, eos_token_ids
    from orchestra.jsonl import write_jsonl
    from orchestra.preferences import parse_preference
    from tools.registry import tier_costs
    from tools.tau2.domain import domain_tasks
    from tools.tau2.evaluation import driver_factory, run_tau2_eval, summarize_tau2
    from tools.tau2.wiring import call_experts, driver_limits, user_simulator

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
