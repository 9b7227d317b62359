"""`python -m cluster.tau2_gold DOMAIN [--tasks FILE] [--split NAME] [--limit N] [--no-drop]`: gold-replay a τ² domain.

DOMAIN is a shipped domain (airline, retail, mock, telecom) or a domain directory (db.json, policy.md, tasks.json,
tools.py: tools/tau2/domain_files.py). Every task's gold actions run through our adapter and the official
evaluator (tools/tau2/gold.py); it prints which files were used, the pass count, how many tasks score 0 once
their last write is dropped, and a count of τ²'s own gold-action warnings instead of one line each. Exit status:
0 when every task's gold actions pass, 1 when some fail, 2 on bad input (one line naming the file and field).
No user simulator, policy or network is involved.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.tau2_gold", description=__doc__.splitlines()[0])
    p.add_argument("domain", help="airline | retail | mock | telecom | path to a domain directory")
    p.add_argument("--tasks", default="", help="a τ² tasks.json (default: the domain's own)")
    p.add_argument("--version", default="v0.2.0", choices=("v0.2.0", "current"),
                   help="label of the task file (current: tau2-bench HEAD's; airline needs --tasks for it)")
    p.add_argument("--split", default="", help="only the tasks of this split (e.g. test)")
    p.add_argument("--limit", type=int, default=0, help="the first N tasks only")
    p.add_argument("--no-drop", action="store_true", help="skip the replay without each task's last write")
    args = p.parse_args(argv)
    from tools.tau2.domain import get_domain
    from tools.tau2.gold import replay_domain

    start = time.perf_counter()
    try:
        domain = get_domain(args.domain)
        tasks = domain.tasks(args.version, args.tasks or None, args.split or None)
    except (ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tasks = tasks[: args.limit] if args.limit > 0 else tasks
    print(f"domain {domain.files.describe()}" + (f"; tasks {args.tasks}" if args.tasks else ""))
    report = asyncio.run(replay_domain(domain, tasks, args.version, drop_last_write=not args.no_drop))
    for line in report.lines():
        print(line)
    print(f"{len(tasks)} tasks in {time.perf_counter() - start:.1f} s")
    return 0 if not report.failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
