"""`python -m cluster.demo [url=http://127.0.0.1:8000] [presets=accuracy-first,cost-first] [question="..."]`
(`make demo`).

Asks a running `make serve` one question under each preset (default two), greedily (temperature 0, so a route is
the policy's choice, not a sampling accident), with the `openai` client, and prints the routes side by side: per
turn the tool, tier, expert, $ and seconds (and the code the sandbox ran, with what it printed), then each answer
and total, one line saying whether the routes differ, and where each answer came from: the sandbox's output
repeated by a simulated answerer, a retrieved passage, a simulated expert that knows no answer, or a real expert.
Which policy routed (the served model or the run's estimator router, `make serve ARGS="policy=estimator"`) is
the server's setting; the demo prints what the server reports. The API key is $ORCHESTRA_API_KEY, else the key
`make serve` generated (runs/serve_api_key). Every failure a newcomer can hit prints one line saying what to do.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any

KEY_FILE = Path("runs") / "serve_api_key"
DEFAULTS = {"url": "http://127.0.0.1:8000", "presets": "accuracy-first,cost-first", "model": "orchestra",
            "question": "What is 17 * 23?"}
LABEL = 8  # width of the row-label column
POLICIES = {"model": "the served model", "estimator": "the run's estimator router"}


def api_key() -> str:
    key = os.environ.get("ORCHESTRA_API_KEY", "").strip()
    if not key and KEY_FILE.is_file():
        key = KEY_FILE.read_text().strip()
    return key


def ask(client: Any, args: dict[str, str], preset: str) -> dict[str, Any]:
    """One greedy request under `preset`: the answer, the `orchestra` extension and the wall seconds."""
    start = time.perf_counter()
    resp = client.chat.completions.create(model=args["model"], messages=[{"role": "user", "content": args["question"]}],
                                          temperature=0, extra_body={"preference": preset})
    extra = (resp.model_extra or {}).get("orchestra") or {}
    return {"preset": preset, "answer": resp.choices[0].message.content or "", "wall_s": time.perf_counter() - start,
            **extra}


def _turn_cell(call: dict[str, Any]) -> list[str]:
    if "not run again" in (call.get("error") or ""):  # the server's repeat guard (orchestra/agent/loop.py)
        return [f"{call['tool']} {call['tier']}", "a repeat of an earlier call: not run again, $0"]
    sim = " (simulated)" if call.get("simulated") else ""
    lines = [f"{call['tool']} {call['tier']}", f"{call.get('expert') or '-'}{sim}",
             f"${call['cost_usd']:.6f}, {call['latency_s']:.2f} s"]
    if call.get("code"):
        printed = " ".join((call.get("output") or "").split()) or "(nothing)"
        lines.append(f"ran {call['code']} -> {printed}")
    if call.get("error"):
        lines.append(f"error: {call['error']}")
    return lines


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def columns(results: list[dict[str, Any]]) -> list[tuple[str, list[list[str]]]]:
    """(row label, per preset the cell's lines) rows: a header, one row per turn, the answer and the totals."""
    rows: list[tuple[str, list[list[str]]]] = [("", [[r["preset"]] for r in results])]
    by_turn: list[dict[int, list[str]]] = []
    for r in results:
        turns: dict[int, list[str]] = {}
        for c in r.get("trace", []):
            turns.setdefault(c["turn"], []).extend(_turn_cell(c))
        by_turn.append(turns)
    for t in sorted({t for turns in by_turn for t in turns}):
        rows.append((f"turn {t}", [turns.get(t, ["-"]) for turns in by_turn]))
    rows.append(("answer", [[r["answer"]] for r in results]))
    rows.append(("total", [[f"{r.get('termination', '?')} after {_plural(r.get('turns', '?'), 'turn')}",
                            f"${r.get('cost_usd', 0.0):.6f}, {r.get('latency_s', 0.0):.2f} s of tools",
                            f"{r['wall_s']:.2f} s wall"] for r in results]))
    return rows


def side_by_side(rows: list[tuple[str, list[list[str]]]], width: int) -> str:
    """Rows as text columns of equal width; each line of a cell is wrapped inside its column."""
    n = len(rows[0][1])
    col = max(24, (width - LABEL) // n - 2)
    out = []
    for label, cells in rows:
        wrapped = [[part for line in cell for part in (textwrap.wrap(line, col) or [""])] for cell in cells]
        for i, parts in enumerate(zip_longest(*wrapped, fillvalue="")):
            line = (label if i == 0 else "").ljust(LABEL) + "".join(p.ljust(col + 2) for p in parts)
            out.append(line.rstrip())
        out.append("")
    return "\n".join(out).rstrip()


def route(r: dict[str, Any]) -> str:
    return " -> ".join(f"{c['tool']}/{c['tier']}" for c in r.get("trace", [])) or "(no tool call)"


def source(r: dict[str, Any]) -> str:
    """Where this answer came from, from the trace (tools/experts/sim.py labels simulated answers)."""
    answers = [c for c in r.get("trace", []) if c["tool"] == "answer" and not c.get("error")]
    if r.get("termination") != "answered" or not answers:
        return f"no answer ({r.get('termination', '?')})"
    last = answers[-1]
    if not last.get("simulated"):
        return f"answered by {last.get('expert') or last['tier']} (not simulated)"
    if last.get("answer_from") == "code_output":
        runs = [c for c in r["trace"] if c.get("code") and c["turn"] < last["turn"]]
        ran = f" running `{runs[-1]['code']}`" if runs else ""
        return (f"the sandbox's output{ran} (the code was written by a simulated expert), repeated by the simulated "
                f"{last.get('expert')}")
    if last.get("answer_from") == "document":
        return f"a retrieved passage, repeated by the simulated {last.get('expert')}"
    return f"a simulated expert ({last.get('expert')}), which knows no answer to a served question"


def main(argv: list[str] | None = None) -> int:
    from orchestra.config import ConfigError
    from orchestra.config.cli import parse_cli

    try:
        args = {**DEFAULTS, **parse_cli(list(sys.argv[1:] if argv is None else argv), "cluster.demo", own=DEFAULTS,
                                         overrides=False).own}
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    presets = [p.strip() for p in args["presets"].split(",") if p.strip()]
    if not presets:
        print("presets= names no preset; e.g. presets=accuracy-first,cost-first", file=sys.stderr)
        return 2
    key = api_key()
    if not key:
        print(f"no API key: export ORCHESTRA_API_KEY=... (the key `make serve` was given), or start `make serve` "
              f"without one so it writes {KEY_FILE}", file=sys.stderr)
        return 2
    import openai

    client = openai.OpenAI(base_url=args["url"].rstrip("/") + "/v1", api_key=key, timeout=300, max_retries=0)
    try:
        results = [ask(client, args, p) for p in presets]
    except openai.APIConnectionError:
        print(f"nothing is serving at {args['url']}: run `make serve` in another terminal first", file=sys.stderr)
        return 1
    except openai.AuthenticationError:
        print("the server refused the API key: use the key it was started with (ORCHESTRA_API_KEYS there, "
              f"ORCHESTRA_API_KEY here, or {KEY_FILE})", file=sys.stderr)
        return 1
    except openai.APIStatusError as e:
        print(f"the server answered {e.status_code}: {e.message}", file=sys.stderr)
        return 1
    policy = results[0].get("policy")
    print(f"Q: {args['question']}")
    print(f"routed by {POLICIES.get(policy, policy or 'the server')}, greedily (temperature 0), under "
          f"{len(presets)} preset{'s' * (len(presets) > 1)}\n")
    print(side_by_side(columns(results), min(max(shutil.get_terminal_size((100, 24)).columns, 72), 140)))
    routes = {route(r) for r in results}
    if len(results) > 1:
        print("\nroutes " + ("differ: " + "; ".join(f"{r['preset']}: {route(r)}" for r in results)
                             if len(routes) > 1 else f"are the same under every preset: {routes.pop()}"))
    for r in results:
        print(f"answer ({r['preset']}): from {source(r)}")
    if any(c.get("simulated") for r in results for c in r.get("trace", [])):
        print("note: the embedded zoo's experts are simulated (priced and timed like the real models, seconds not "
              "slept); they know no answer to a served question, so only a real tool (the sandbox) can give one. "
              "Real experts: make serve ARGS=\"checkpoint=<run> experts=FILE\" (docs/serving.md).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
