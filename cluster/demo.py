"""`python -m cluster.demo [url=http://127.0.0.1:8000] [presets=accuracy-first,cost-first] [question="..."]`
(`make demo`).

Asks a running `make serve` one question under each preset (default two), greedily (temperature 0, so a route is
the policy's choice, not a sampling accident), with the `openai` client, and prints the routes side by side: per
turn the tool, tier, expert, $ and seconds (and the code the sandbox ran, with what it printed), then each answer
and total, one line saying whether the routes differ, and where each answer came from: the sandbox's output
repeated by a simulated answerer, a retrieved passage, a simulated expert that knows no answer, or a real expert.
Each answer is then checked where the demo can know the truth: a plain-arithmetic question (the default, "What is
17 * 23?") is computed exactly by the calculator (tools/calculator.py, the same checked parser the simulated coder
uses) and the answer's one number compared with it; the line names the component that made the answer (the sandbox,
retrieval over the served corpus, a real expert) or says plainly that none did (a simulated expert alone knows no
answer to a served question; a retrieved passage is shown as a passage, never as the answer). Other questions are
marked "not checked".
Which policy routed (the served model or the run's estimator router, `make serve ARGS="policy=estimator"`) is
the server's setting; the demo prints what the server reports. The API key is $ORCHESTRA_API_KEY, else the key
`make serve` generated (runs/serve_api_key). Every failure a newcomer can hit prints one line saying what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
import time
from fractions import Fraction
from itertools import zip_longest
from pathlib import Path
from typing import Any

KEY_FILE = Path("runs") / "serve_api_key"
DEFAULTS = {"url": "http://127.0.0.1:8000", "presets": "accuracy-first,cost-first", "model": "orchestra",
            "question": "What is 17 * 23?"}
LABEL = 8  # width of the row-label column


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
    rows.append(("answer", [[shown_answer(r), r["check"][1]] if "check" in r else [r["answer"]] for r in results]))
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


def answering_call(r: dict[str, Any]) -> dict[str, Any] | None:
    """The call whose answer ended the episode: the last `answer`, or for a `submit` the consult of that tier it
    adopted (orchestra/agent/consults.py: it is that expert's answer); None when the episode gave no answer."""
    calls = [c for c in r.get("trace", []) if c["tool"] in ("answer", "submit") and not c.get("error")]
    if r.get("termination") != "answered" or not calls:
        return None
    last = calls[-1]
    if last["tool"] == "submit":
        consults = [c for c in r["trace"] if c["tool"] == "consult" and c["tier"] == last["tier"]
                    and c["turn"] < last["turn"] and not c.get("error")]
        return consults[-1] if consults else None
    return last


def source(r: dict[str, Any]) -> str:
    """Where this answer came from, from the trace (tools/experts/sim.py labels simulated answers)."""
    last = answering_call(r)
    if last is None:
        return f"no answer ({r.get('termination', '?')})"
    by = "submitted from a consult of " if last["tool"] == "consult" else ""
    if not last.get("simulated"):
        return f"answered by {by}{last.get('expert') or last['tier']} (not simulated)"
    if last.get("answer_from") == "code_output":
        runs = [c for c in r["trace"] if c.get("code") and c["turn"] < last["turn"]]
        ran = f" running `{runs[-1]['code']}`" if runs else ""
        return (f"the sandbox's output{ran} (the code was written by a simulated expert), repeated by the simulated "
                f"{last.get('expert')}")
    if last.get("answer_from") == "document":
        return f"a retrieved passage, repeated by the simulated {last.get('expert')}"
    return f"{by}a simulated expert ({last.get('expert')}), which knows no answer to a served question"


def component(r: dict[str, Any]) -> str | None:
    """The component that made the answer, in a few words; None when nothing real did (a simulated expert alone)."""
    last = answering_call(r)
    if last is None:
        return None
    if not last.get("simulated"):
        return f"{last.get('expert') or last['tier']} (a real expert)"
    return {"code_output": "the sandbox", "document": "retrieval over the served corpus"}.get(last.get("answer_from"))


def shown_answer(r: dict[str, Any]) -> str:
    """The answer as the table shows it: a retrieved passage repeated by a simulated answerer is labelled a passage
    (it is what the retriever found, not an answer), and a simulated expert alone is said to have none."""
    last = answering_call(r)
    if last is not None and last.get("simulated"):
        if last.get("answer_from") == "document":
            return f"(a retrieved passage, not an answer) {r['answer']}"
        if not last.get("answer_from"):
            return "(no real answer: a simulated expert alone answered)"
    return r["answer"]


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def _same(said: str, exact: str, decimal: str) -> bool:
    try:
        return Fraction(said) == Fraction(exact)
    except (ValueError, ZeroDivisionError):  # an irrational value (sqrt(2)): its decimal, to the last digits shown
        return abs(float(said) - float(decimal)) <= 1e-9 * max(1.0, abs(float(decimal)))


def check(question: str, r: dict[str, Any]) -> tuple[bool | None, str]:
    """(true / false / None: not checkable, a short verdict) for one result. A plain-arithmetic question is
    computed by the calculator and the answer must hold exactly one number, equal to it; an answer no real
    component made is never true."""
    from tools.calculator import arithmetic_in, evaluate

    expression = arithmetic_in(question)
    if expression is None:
        return None, "not checked (the demo checks plain arithmetic, by the calculator)"
    exact, decimal = evaluate(expression)
    computed = f"the calculator computes {expression} = {exact}"
    if component(r) is None:
        return False, f"false: no real component made this answer; {computed}"
    numbers = _NUMBER.findall(r["answer"])
    if len(numbers) != 1:
        return False, f"false: the answer holds {'no number' if not numbers else 'several numbers'}; {computed}"
    ok = _same(numbers[0], exact, decimal)
    return ok, f"{'true' if ok else 'false'}: {computed}" + ("" if ok else f", not {numbers[0]}")


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
    for r in results:
        r["check"] = check(args["question"], r)
    from orchestra.routing import registry

    policy = results[0].get("policy")
    about = {p.name: p.about for p in registry.among("serve")}  # the served model, the run's estimator router, ...
    print(f"Q: {args['question']}")
    print(f"routed by {about.get(policy, policy or 'the server')}, greedily (temperature 0), under "
          f"{len(presets)} preset{'s' * (len(presets) > 1)}\n")
    print(side_by_side(columns(results), min(max(shutil.get_terminal_size((100, 24)).columns, 72), 140)))
    routes = {route(r) for r in results}
    if len(results) > 1:
        print("\nroutes " + ("differ: " + "; ".join(f"{r['preset']}: {route(r)}" for r in results)
                             if len(routes) > 1 else f"are the same under every preset: {routes.pop()}"))
    for r in results:
        print(f"answer ({r['preset']}): from {source(r)}")
    for r in results:
        made = component(r)
        print(f"check ({r['preset']}): {r['check'][1]}; made by {made or 'no real component'}")
    if any(c.get("simulated") for r in results for c in r.get("trace", [])):
        print("note: the embedded zoo's experts are simulated (priced and timed like the real models, seconds not "
              "slept); they know no answer to a served question, so only a real tool (the sandbox, retrieval over the "
              "served corpus) can give one. Real experts: make serve ARGS=\"checkpoint=<run> experts=FILE\" "
              "(docs/serving.md).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
