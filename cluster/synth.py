"""`python -m cluster.synth mode=template|teacher n=... out=DIR [key=value ...]` — synthesize a task set.

template (offline, seeded): n QA tasks of the template families (orchestra/data/synth/template.py) plus the
  func_call tasks of the built-in DB domains (orchestra/data/synth/stages.py). Keys: seed, split (train|heldout),
  families (comma list), domains (comma list, `none` for no func_call tasks), records, domain_tasks.
teacher (any OpenAI-compatible endpoint): keys base_url, model, api_key_env (the NAME of the env var with
  the key), topics (comma list; one domain per topic), records, domain_tasks, retries.
Writes DIR/tasks.jsonl, DIR/tasks.parquet, DIR/tasks.corpus.jsonl (retrieval passages), DIR/verl.parquet
(verl's RL rows) and DIR/rejected.jsonl (stage, reason) — every rejected item with why.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def parse_args(argv: list[str]) -> dict[str, str]:
    """Every argument is a key=value of this entry point (orchestra/config/cli.py's grammar)."""
    from orchestra.config import ConfigError
    from orchestra.config.cli import parse_cli

    try:
        return dict(item.split("=", 1) for item in parse_cli(argv, "cluster.synth").overrides)
    except ConfigError as e:
        raise SystemExit(str(e)) from None


def _list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def run(args: dict[str, str], progress: Any = None) -> dict[str, Any]:
    """Synthesize and write; returns counts. `progress(advance)` is called as domains/tasks finish."""
    from orchestra.data.synth.stages import BUILTIN, template_domain, to_tasks
    from orchestra.data.synth.template import default_tiers, generate_tasks
    from orchestra.data.tasks import save_corpus, save_tasks, save_verl_parquet
    from orchestra.jsonl import write_jsonl

    mode = args.get("mode", "template")
    out = Path(args.get("out") or "data/synth")
    seed = int(args.get("seed", 0))
    tiers = default_tiers()
    tasks, corpus, rejected = [], [], []
    records, per_domain = int(args.get("records", 8)), int(args.get("domain_tasks", 12))
    if mode == "template":
        split = args.get("split", "train")
        ts = generate_tasks(int(args.get("n", 100)), seed, _list(args.get("families", "")) or None, split, tiers)
        tasks += ts.tasks
        corpus = ts.corpus
        if progress:
            progress(len(ts.tasks))
        domains = [] if args.get("domains") == "none" else _list(args.get("domains", "")) or sorted(BUILTIN)
        for name in domains:
            d = template_domain(seed, name, records, per_domain)
            got, bad = to_tasks(d, tiers, id_prefix=f"{split}-")
            tasks += got
            rejected += [{"domain": name, "stage": s, "reason": r} for s, r in bad]
            if progress:
                progress(len(got))
    elif mode == "teacher":
        from orchestra.data.synth.teacher import Teacher

        if not args.get("base_url") or not args.get("model"):
            raise SystemExit("teacher mode needs base_url=... and model=...")
        teacher = Teacher(args["base_url"], args["model"], args.get("api_key_env", ""),
                          retries=int(args.get("retries", 1)))
        for topic in _list(args.get("topics", "library")):
            d = teacher.build_domain(topic, records, per_domain)
            got, bad = to_tasks(d, tiers, id_prefix=f"teacher-{topic}-")
            tasks += got
            rejected += [{"domain": d.name, "stage": s, "reason": r} for s, r in bad]
            if progress:
                progress(len(got))
    else:
        raise SystemExit(f"mode must be template or teacher, got {mode!r}")
    save_tasks(tasks, out / "tasks.jsonl")
    save_tasks(tasks, out / "tasks.parquet")
    save_corpus(corpus, out / "tasks.corpus.jsonl")
    save_verl_parquet(tasks, out / "verl.parquet")
    write_jsonl(out / "rejected.jsonl", rejected)
    return {"tasks": len(tasks), "func_call": sum(t.category == "func_call" for t in tasks),
            "rejected": len(rejected), "passages": len(corpus), "out": str(out)}


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    console = Console()
    with Progress(console=console) as bar:
        task = bar.add_task(f"synth ({args.get('mode', 'template')})", total=None)
        counts = run(args, progress=lambda k: bar.advance(task, k))
    console.print(counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
