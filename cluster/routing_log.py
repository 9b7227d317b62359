"""`python -m cluster.routing_log LOG... --out DIR [...]`: a routing log -> tasks, a replay zoo and presets, one command.

Reads and checks the log (layouts, fields and errors: orchestra/data/routing_log.py), prices every model, judges
the models of a log that gives only gold answers, and writes DIR/{tasks.jsonl, replay/, zoo.yaml,
experiment.yaml, experts.yaml} all at once (a temporary directory renamed into place). Then, from the checkout:
  make train ARGS="experiment=DIR/experiment.yaml"
  make eval ARGS="experiment=DIR/experiment.yaml checkpoint=runs/<name> preference=all"   (every preset)
  make serve ARGS="checkpoint=runs/<name> experts=DIR/experts.yaml"   (once experts.yaml says where each model
  is served: a binding template, placeholders refused by name; actors/serve/binding.py)
Prices: `--price MODEL=IN,OUT` ($ per million tokens: self-hosted or unlisted models), else genai-prices by the
model's own name or by `--priced-as MODEL=NAME` (`provider:model` names the provider). A model without a price is
an error, never $0. Verdicts: a model's recorded `correct`; where it is blank, its `model_answer` (else its
response) judged against the gold answer by `--judge` (reward/judges.py). Training judges episodes by those
recorded verdicts (the `recorded` judge), so the policy is scored exactly as the log scored the models; a log of
verdicts without response text is read too (the replay experts answer with a marker text, their $ counts the
prompt's tokens only where the log records none).
Layouts are found from the columns (long, `<model>|<field>`, RouteLLM's `<model>` + `<model>_response`, or bare
true/false verdict columns); `--models A,B` names the model columns where they can't be found. `--family-column NAME`
(else a column named category, family, subject or domain) is the task family: per-family reports, and the routers'
family feature (router.meta_keys) when there are two or more families. `--exclude FILE` drops the questions whose
id or prompt it lists (read_exclusions below), e.g. contaminated prompts. LOG may be several files or a folder of
them (per-subject files: without a family column, each file's name is its family; orchestra/data/log_files.py).
Repeated questions (the same id, else the same prompt text): a model's records with one verdict are merged; records
that disagree are settled by `--duplicates majority|first|error` (default majority, ties keep the first record;
orchestra/data/log_repeats.py says why), and the counts are printed.
Bad input exits 2 with one line naming the file, the row and the field, and writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any

import yaml

from orchestra.data.log_outputs import expert_key, write_outputs
from orchestra.data.log_repeats import DEFAULT_DUPLICATES, DUPLICATE_RULES
from orchestra.data.routing_log import Judge, RoutingLog, RoutingLogError, read_log, read_rows
from orchestra.preferences import COST_ORDER

JUDGES = ("exact", "f1", "math", "choice")
ASSUMED_LATENCY_S = 2.0
LAYOUTS = {"long": "one row per question and model", "wide": "`<model>|<field>` columns",
           "by model": "`<model>` = the verdict, `<model>_<field>` columns"}


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.rpartition("=")
        if not sep or not key or not value:
            raise RoutingLogError(f"{flag} {item!r}: expected MODEL=VALUE")
        out[key] = value
    return out


def prices(log: RoutingLog, explicit: dict[str, str], priced_as: dict[str, str]) -> dict[str, dict[str, Any]]:
    """model -> {model (the priced name), price_in/out ($/Mtok), explicit}; unknown models are errors."""
    from tools.pricing import PriceTable, UnknownModelError

    for flag, given in (("--price", explicit), ("--priced-as", priced_as)):
        for m in given:
            if m not in log.models:
                raise RoutingLogError(f"{flag} {m}=...: the log has no model {m!r} (models: {', '.join(log.models)})")
    table, out = PriceTable(), {}
    for m in log.models:
        if m in explicit:
            try:
                p_in, p_out = (float(x) for x in explicit[m].split(","))
                table.set_override(m, p_in, p_out)
            except ValueError:
                raise RoutingLogError(f"--price {m}={explicit[m]}: expected IN,OUT dollars per million tokens "
                                      "(two numbers >= 0)") from None
            out[m] = {"model": m, "price": (p_in, p_out), "explicit": True}
            continue
        ref = priced_as.get(m, m)
        try:
            out[m] = {"model": ref, "price": table.price(ref), "explicit": False}
        except UnknownModelError:
            where = next(q.calls[m].where for q in log.questions)
            raise RoutingLogError(f"routing log {log.path}: {where}: model {m!r} has no price (genai-prices does not "
                                  f"know {ref!r}): pass --price {m}=IN,OUT ($ per million tokens) or --priced-as "
                                  f"{m}=<a model genai-prices knows>") from None
    return out


def judge_with(judge_name: str) -> Judge:
    """read_log's judge: each (model's answer, gold answer, prompt) scored by reward/judges' `judge_name`, for the
    verdicts a log leaves blank (repeated records included: they are compared by verdict)."""
    from reward.judges import judge

    def run(items: list[tuple[str, str, str]]) -> list[float]:
        async def all_of() -> list[Any]:
            return await asyncio.gather(*(judge(judge_name, answer, gold, prompt) for answer, gold, prompt in items))

        return [float(v.correct) for v in asyncio.run(all_of())]

    return run


def per_question_cost(log: RoutingLog, m: str, price: tuple[float, float]) -> float:
    """Mean $ of model m per question: as recorded, else tokens x price (tokens estimated from text, 4 chars each;
    no output tokens where the log has no response, as the replay expert counts them)."""
    costs = []
    for q in log.questions:
        c = q.calls[m]
        t_in = c.tokens_in if c.tokens_in is not None else len(q.prompt) // 4 + 1
        t_out = c.tokens_out if c.tokens_out is not None else 0 if c.response is None else len(c.response) // 4 + 1
        costs.append(c.cost_usd if c.cost_usd is not None else (t_in * price[0] + t_out * price[1]) / 1e6)
    return mean(costs)


# with extracted answers for at least this share of (question, model) calls, the preset offers consult / submit
# (adaptive plans that compare answers: orchestra/routing/cascade.py); a missing answer agrees with nothing
ANSWERS_FOR_ADAPTIVE = 0.9


def answers_recorded(log: RoutingLog) -> float:
    """The share of (question, model) calls whose extracted answer the log records."""
    calls = [c for q in log.questions for c in q.calls.values()]
    return sum(c.model_answer not in (None, "") for c in calls) / max(len(calls), 1)


def presets(log: RoutingLog, out: Path, name: str, priced: dict[str, dict[str, Any]], latency: dict[str, str],
            heldout: int, cost: dict[str, float]) -> dict[str, str]:
    """zoo.yaml and experiment.yaml (paths absolute, so both work from anywhere)."""
    ranked = sorted(log.models, key=lambda m: (-cost[m], m))  # answer-1 = the priciest, as in the shipped zoos
    experts = {}
    for m in ranked:
        calls = [q.calls[m] for q in log.questions]
        lat = latency.get(m)
        if lat is None:
            recorded = [c.latency_s for c in calls if c.latency_s is not None]
            lat = mean(recorded) if len(recorded) == len(calls) else ASSUMED_LATENCY_S
        e: dict[str, Any] = {"kind": "replay", "model": priced[m]["model"],
                             "replay_path": str(out / "replay" / f"{expert_key(m)}.jsonl"),
                             "max_tokens": max([4096] + [c.tokens_out or 0 for c in calls]), "latency_s": float(lat)}
        if priced[m]["explicit"]:
            e["price_in_per_mtok"], e["price_out_per_mtok"] = priced[m]["price"]
        experts[expert_key(m)] = e
    keys = [expert_key(m) for m in ranked]
    if len(set(keys)) != len(keys):
        raise RoutingLogError(f"routing log {log.path}: models {ranked} give clashing expert names {keys}")
    adaptive = answers_recorded(log) >= ANSWERS_FOR_ADAPTIVE
    zoo = {"name": name, "tools": ["answer", "consult", "submit"] if adaptive else ["answer"], "seed": 0,
           "experts": experts,
           "tiers": {f"answer-{i + 1}": k for i, k in enumerate(keys)}}
    n_train = len(log.questions) - heldout
    exp = {"defaults": {"model": "tiny", "zoo": "zoo.yaml", "reward": "scalar", "backend": "local"},
           "name": name, "seed": 0,
           "data": {"source": str(out / "tasks.jsonl"), "n_train": n_train, "n_heldout": heldout,
                    "preference_pairs": "accuracy-first|balanced|cost-first"},
           "reward": {"judges": {"routing_log": "recorded"}, "cost_scale": float(f"{cost[ranked[0]]:.3g}")},
           "eval": {"n_tasks": heldout, "preference": "balanced", "presets": list(COST_ORDER), "temperature": 0.0,
                    "sweep": True},
           # as mmlu_pro_replay: the preference in bin words, the router's suggestion, no catalogue (docs/quality.md)
           "agent": {"max_turns": 3 if adaptive else 2, "preference_words": True, "preference_numbers": False,
                     "preference_levels": [0.056, 0.178, 0.56, 1.78], "route_hints": True, "tool_catalogue": "none"},
           # room for the restated preference and route hint before each call (sft.restate_preference, below)
           "sampling": {"max_tokens": 80, "temperature": 1.0},
           "algo": {"steps": 12, "group_size": 8, "prompts_per_step": 4, "lr": 1.0e-4, "balance_prefs": True,
                    "micro_batch_size": 64},
           # the expected-value warm start (docs/presets.md, cpu_tiny): every question played by every model, the
           # estimator router fitted on those outcomes, each (question, preset) labelled with its best route
           "sft": {"teacher": "expected_value", "vectors": [*COST_ORDER, "latency-first"], "vectors_sampled": 4,
                   "sample_cost": [0.01, 10.0], "sample_latency": [0.1, 3.0], "sample_latency_zero": 0.5,
                   "steps": 400, "until_agreement": 0.9, "until_follows": True, "max_steps": 800,
                   "restate_preference": True, "label_balance": 0.5, "lr": 3.0e-3,
                   "batch_size": 16, "demos": min(240, n_train)},
           # text_stats: the question's length, numbers and symbols as a candidate the router's cross-validation may
           # take; on seven two-model logs cut from MMLU-Pro it raised APGR by 0.013-0.018 on three and left the others
           # within 0.001 (docs/quality.md, "The estimator router"); with them the $ / seconds ridges fit in logs
           # (orchestra/routing/spend.py)
           "router": {"explore_tasks": 0, "text_stats": True,
                      **({"meta_keys": ["family"]} if len(families(log)) > 1 else {})},
           "checkpoint": {"every_steps": 10}, "cluster": {"torch_threads": 2}}
    head = f"# Written by `python -m cluster.routing_log {log.path}`; rerun it rather than edit by hand.\n"
    zoo_note = ("# Replay experts: each model's recorded answers, tokens and $ (tools/experts/replay.py); tiers by "
                "$ per question, priciest first.\n# latency_s: the recorded mean, else an assumed "
                f"{ASSUMED_LATENCY_S} s (reported virtually, never slept).\n")
    exp_note = ("# Sized and trained like mmlu_pro_replay (2-core CPU). Episodes are judged by the log's own verdicts (judge "
                "`recorded`);\n# reward.cost_scale = the priciest model's mean $ per question, so that the cost "
                "term of the scalar rubric\n# weighs about as much as being right, and preferences can change the "
                "route.\n")
    dump = lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True)  # noqa: E731
    return {"zoo.yaml": head + zoo_note + dump(zoo), "experiment.yaml": head + exp_note + dump(exp)}


def binding_template(log: RoutingLog, priced: dict[str, dict[str, Any]]) -> str:
    """experts.yaml: each model of the log bound to a placeholder endpoint, for serving a run trained on the
    replayed log against the live models (actors/serve/binding.py refuses it until the placeholders are filled)."""
    from actors.serve.binding import PLACEHOLDER

    entries: dict[str, dict[str, Any]] = {}
    for m in log.models:
        e: dict[str, Any] = {"base_url": f"http://{PLACEHOLDER}:8000/v1", "api_key_env": f"{PLACEHOLDER}_API_KEY",
                             "model": priced[m]["model"]}
        if priced[m]["explicit"]:
            e["price_in_per_mtok"], e["price_out_per_mtok"] = priced[m]["price"]
        entries[expert_key(m)] = e
    head = (f"# Written by `python -m cluster.routing_log {log.path}`: where each model of the log is served, for\n"
            "#   make serve ARGS=\"checkpoint=runs/<name> experts=<this file>\"\n"
            "# Fill in every entry: base_url = the OpenAI-compatible endpoint (https://api.openai.com/v1, a vLLM server's\n"
            "# http://HOST:PORT/v1, ...); api_key_env = the NAME of the environment variable holding its key (\"\" for\n"
            "# none; never the key itself); model = the name that server knows it by. Prices: genai-prices by `model`,\n"
            "# or price_in_per_mtok / price_out_per_mtok ($ per million tokens). Cost = the server's usage x price.\n")
    return head + yaml.safe_dump(entries, sort_keys=False, allow_unicode=True)


def families(log: RoutingLog) -> dict[str, int]:
    """Task family -> questions (the family column's values)."""
    return dict(Counter(q.category for q in log.questions if q.category))


def read_exclusions(path: str, column: str = "", columns: dict[str, str] | None = None) -> set[str]:
    """The ids and prompts an exclusion file lists: a .csv/.tsv/.jsonl/.json/.parquet table's `column` (default:
    its id and prompt columns, as --columns names them), else any other file's lines (one id or prompt a line)."""
    p = Path(path).expanduser()
    if p.suffix.lower() not in (".csv", ".tsv", ".jsonl", ".json", ".parquet"):
        if not p.is_file():
            raise RoutingLogError(f"exclusion file {p}: no such file")
        return {x.strip() for x in p.read_text(encoding="utf-8").splitlines() if x.strip()}
    rows = read_rows(p, "exclusion file")
    keys = list(dict.fromkeys(k for _, r in rows if isinstance(r, dict) for k in r))
    wanted = [column] if column else [c for c in ((columns or {}).get(f, f) for f in ("id", "prompt")) if c in keys]
    if not wanted or wanted[0] not in keys:
        raise RoutingLogError(f"exclusion file {p}: no column {column or 'id or prompt'!r} (columns: "
                              f"{', '.join(map(str, keys))[:300]}); name it with --exclude-column")
    return {str(r[c]).strip() for _, r in rows if isinstance(r, dict) for c in wanted
            if r.get(c) is not None and str(r[c]).strip()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.routing_log", description=__doc__.splitlines()[0])
    p.add_argument("log", nargs="+", help="routing log: .csv, .tsv, .jsonl, .json or .parquet files (long, wide or "
                   "by-model layout), or folders of them (e.g. one file per subject: the file name is the family)")
    p.add_argument("--out", required=True, help="output directory (replaced only with --force)")
    p.add_argument("--name", default="", help="experiment and zoo name (default: the output directory's name)")
    p.add_argument("--columns", default="", help="field=column pairs, e.g. prompt=question,answer=gold")
    p.add_argument("--models", default="", help="the model columns of a wide log, A,B (default: found)")
    p.add_argument("--family-column", default="", metavar="NAME",
                   help="the task family's column (default: category, family, subject or domain if present)")
    p.add_argument("--exclude", action="append", default=[], metavar="FILE",
                   help="drop the questions it lists: one id or prompt a line, or a CSV/JSONL's id/prompt column")
    p.add_argument("--exclude-column", default="", metavar="NAME", help="the --exclude table's column to read")
    p.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT", help="$ per million tokens")
    p.add_argument("--priced-as", action="append", default=[], metavar="MODEL=NAME", help="genai-prices name")
    p.add_argument("--latency", action="append", default=[], metavar="MODEL=SECONDS", help="typical seconds")
    p.add_argument("--judge", default="exact", choices=JUDGES, help="for models with no recorded 'correct'")
    p.add_argument("--heldout", type=int, default=-1, help="held-out questions (default: a fifth)")
    p.add_argument("--drop-incomplete", action="store_true", help="skip questions some model did not answer")
    p.add_argument("--duplicates", default=DEFAULT_DUPLICATES, choices=DUPLICATE_RULES,
                   help="a model recorded right and wrong on one repeated question: keep the majority verdict (ties: "
                        "the first record), the first record, or stop (default: %(default)s; one verdict: merged)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    args = p.parse_args(argv)
    try:
        columns = _pairs([c for c in args.columns.split(",") if c], "--columns")
        if args.family_column:
            if columns.get("category", args.family_column) != args.family_column:
                raise RoutingLogError(f"--family-column {args.family_column} and --columns "
                                      f"category={columns['category']} name two columns: give one")
            columns["category"] = args.family_column
        exclude: set[str] = set()
        for f in args.exclude:
            exclude |= read_exclusions(f, args.exclude_column, columns)
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        log = read_log(args.log, columns, drop_incomplete=args.drop_incomplete, models=models, exclude=exclude,
                       duplicates=args.duplicates, judge=judge_with(args.judge))
        priced = prices(log, _pairs(args.price, "--price"), _pairs(args.priced_as, "--priced-as"))
        latency = _pairs(args.latency, "--latency")
        n = len(log.questions)
        heldout = n // 5 if args.heldout < 0 else args.heldout
        if not 0 <= heldout < n:
            raise RoutingLogError(f"--heldout {heldout}: must leave training questions (the log has {n})")
        out = Path(args.out).expanduser().resolve()
        name = args.name or out.name
        cost = {m: per_question_cost(log, m, priced[m]["price"]) for m in log.models}
        files = {**presets(log, out, name, priced, latency, heldout, cost),
                 "experts.yaml": binding_template(log, priced)}
        write_outputs(log, out, files, force=args.force)
    except RoutingLogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _summary(log, args, out, name, n, heldout, priced, cost, len(exclude))
    return 0


def _summary(log: RoutingLog, args: argparse.Namespace, out: Path, name: str, n: int, heldout: int,
             priced: dict[str, dict[str, Any]], cost: dict[str, float], n_listed: int) -> None:
    if log.files > 1:
        skipped = f"; not logs, skipped: {', '.join(log.skipped_files)}" if log.skipped_files else ""
        print(f"read {log.files} files ({log.path}){skipped}")
    print(f"{n} questions x {len(log.models)} models ({log.dropped} dropped: not answered by every model; "
          f"{log.judged} verdicts judged by `{args.judge}` against the gold answer)")
    if log.repeats:
        print(log.repeats.summary())
    print(f"layout: {log.layout} ({LAYOUTS.get(log.layout, 'mixed')}); models: {', '.join(log.models)}")
    if args.exclude:
        print(f"excluded {log.excluded} rows: --exclude {' '.join(args.exclude)} lists {n_listed} ids/prompts, "
              f"{n_listed - log.exclude_matched} of them matching no row")
    fams = families(log)
    if log.family_column or log.family_from_files:
        src = f"column {log.family_column!r}" if log.family_column else "file names"
        print(f"task families from {src}: {len(fams)} ("
              f"{', '.join(f'{k} {v}' for k, v in sorted(fams.items())[:8])}{', ...' if len(fams) > 8 else ''})")
    calls = [c for q in log.questions for c in q.calls.values()]
    absent = sum(c.response is None for c in calls)
    if absent:
        print(f"responses absent: {absent} of {len(calls)} answers record only a verdict; their replay experts answer "
              "with a marker text, judged by the recorded verdict, and their $ counts the prompt's tokens only "
              "where the log records none")
    share = answers_recorded(log)
    if share >= ANSWERS_FOR_ADAPTIVE:
        print(f"extracted answers recorded for {share:.0%} of answers: the preset offers consult / submit (adaptive "
              "plans that escalate when two models disagree)")
    else:
        print(f"extracted answers recorded for {share:.0%} of answers only (need {ANSWERS_FOR_ADAPTIVE:.0%}): the "
              "signal adaptive plans read is missing, so the preset offers answer alone (one call per question)")
    for m in sorted(log.models, key=lambda m: -cost[m]):
        acc = mean(float(q.calls[m].score >= 0.5) for q in log.questions)
        print(f"  {m}: accuracy {acc:.3f}, ${cost[m]:.6f} per question (priced as {priced[m]['model']})")
    oracle = mean(float(any(c.score >= 0.5 for c in q.calls.values())) for q in log.questions)
    print(f"  any model right (the oracle router's accuracy): {oracle:.3f}")
    print(f"wrote {out}/: tasks.jsonl, replay/, zoo.yaml, experiment.yaml, experts.yaml ({n - heldout} train / "
          f"{heldout} held out)")
    print(f'next: make train ARGS="experiment={out}/experiment.yaml"\n'
          f'      make eval ARGS="experiment={out}/experiment.yaml checkpoint=runs/{name} preference=all"\n'
          f'      then, to serve against the live models, fill in {out}/experts.yaml (where each one runs) and\n'
          f'      make serve ARGS="checkpoint=runs/{name} experts={out}/experts.yaml"')


if __name__ == "__main__":
    raise SystemExit(main())
