"""`python -m cluster.demo [url=http://127.0.0.1:8000] [preference=balanced] [question="..."]` (`make demo`).

Sends one chat request to a running `make serve` with the `openai` client and prints the answer, the tool trace
(tier, expert, $ and seconds per call) and the episode's total $ and seconds. The API key is $ORCHESTRA_API_KEY,
else the key `make serve` generated (runs/serve_api_key). Every failure a newcomer can hit prints one line
saying what to do.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

KEY_FILE = Path("runs") / "serve_api_key"
DEFAULTS = {"url": "http://127.0.0.1:8000", "preference": "balanced", "model": "orchestra",
            "question": "What is 17 * 23?"}


def api_key() -> str:
    key = os.environ.get("ORCHESTRA_API_KEY", "").strip()
    if not key and KEY_FILE.is_file():
        key = KEY_FILE.read_text().strip()
    return key


def main(argv: list[str] | None = None) -> int:
    args = dict(DEFAULTS)
    for item in (sys.argv[1:] if argv is None else argv):
        key, sep, value = item.partition("=")
        if not sep or key not in DEFAULTS:
            print(f"unknown argument {item!r}; use {', '.join(f'{k}=...' for k in DEFAULTS)}", file=sys.stderr)
            return 2
        args[key] = value
    key = api_key()
    if not key:
        print(f"no API key: export ORCHESTRA_API_KEY=... (the key `make serve` was given), or start `make serve` "
              f"without one so it writes {KEY_FILE}", file=sys.stderr)
        return 2
    import openai

    client = openai.OpenAI(base_url=args["url"].rstrip("/") + "/v1", api_key=key, timeout=300, max_retries=0)
    start = time.perf_counter()
    try:
        resp = client.chat.completions.create(model=args["model"], messages=[{"role": "user",
                                                                              "content": args["question"]}],
                                              extra_body={"preference": args["preference"]})
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
    wall = time.perf_counter() - start
    extra = (resp.model_extra or {}).get("orchestra") or {}
    print(f"Q: {args['question']}  (preference {args['preference']})")
    print(f"A: {resp.choices[0].message.content}")
    trace = extra.get("trace", [])
    for call in trace:
        err = f"  error: {call['error']}" if call.get("error") else ""
        sim = " simulated" if call.get("simulated") else ""
        print(f"  turn {call['turn']}: {call['tool']} via {call['tier']} ({call.get('expert') or '-'}{sim}): "
              f"${call['cost_usd']:.6f}, {call['latency_s']:.2f} s{err}")
    print(f"episode: {extra.get('termination', '?')} after {extra.get('turns', '?')} turns, "
          f"${extra.get('cost_usd', 0.0):.6f} of tools, {extra.get('latency_s', 0.0):.2f} s of tool latency; "
          f"request {wall:.2f} s wall")
    if any(call.get("simulated") for call in trace):  # say so, rather than let an empty answer look like a bug
        print("note: the embedded zoo's experts are simulated (priced and timed like the real models, seconds not "
              "slept); they know no answer to a served question. Real experts: zoo.experts.<name>.kind=openai.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
