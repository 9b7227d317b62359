"""Outcome judges: is an episode's final answer right? One registry of named judges, all `async`, none raising.

Judges (names used in `RewardConfig.judges`, a map data_source -> judge name with a "default" key):
  exact   normalised exact match (case, punctuation, English articles, whitespace), any gold alias;
  f1      token F1 against the best alias, correct when F1 >= `threshold` (default 0.5; score = the F1);
  math    math-verify equivalence (`\\boxed{}` extraction, `\\frac{1}{2}` == 0.5), exact-match shortcut first;
  choice  multiple-choice letters A..J pulled out of text such as "The answer is (C)";
  llm     an LLM grader behind any OpenAI-compatible endpoint (`LLMJudge`), after an exact-match shortcut;
          empty answers and answers over 500 words are wrong without asking it;
  recorded  replay zoos: the verdict recorded in the log for the model whose answer ended the episode (the
          answer call's `recorded_correct`, tools/experts/replay.py); the answer string is not compared, so a
          routing log needs no gold string the judges can match (cluster/routing_log.py presets use it).
`judge(name, answer, gold, question="", **kw) -> Judgement`. A judge that fails (bad name, parser crash,
endpoint down, unparseable verdict) returns `correct=False` with the reason; it never raises, so one bad
episode can not stall a reward group. Gold may be one string or a list of accepted aliases.

Left to others: which judge a data source uses (config), and what the verdict is worth (reward/rubric.py).
The openai SDK is imported only when an LLM judge first runs, so `import reward` stays light.
"""

from __future__ import annotations

import asyncio
import os
import re
import string
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestra.types import Judgement

Gold = str | Sequence[str]
MAX_ANSWER_WORDS = 500
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.IGNORECASE)
_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def _aliases(gold: Gold) -> list[str]:
    if isinstance(gold, str):
        return [gold]
    return [str(g) for g in gold]


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, gold: Gold) -> Judgement:
    norm = normalize_answer(answer)
    for alias in _aliases(gold):
        if norm == normalize_answer(alias):
            return Judgement(True, 1.0, "exact", f"matches {alias!r} after normalisation")
    return Judgement(False, 0.0, "exact", "no gold alias matches after normalisation")


def token_f1(answer: str, gold: str) -> float:
    """Harmonic mean of token precision and recall over normalised tokens (multiset overlap)."""
    pred, ref = normalize_answer(answer).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_match(answer: str, gold: Gold, threshold: float = 0.5) -> Judgement:
    best, alias = max((token_f1(answer, a), a) for a in _aliases(gold))
    return Judgement(best >= threshold, best, "f1", f"token F1 {best:.3f} vs {alias!r} (threshold {threshold})")


# ---------------------------------------------------------------- math
def _math_parse(text: str, gold: bool = False) -> list:
    from math_verify import parse

    # Timeouts off: math-verify's use signal.alarm, which only works on the main thread; we run it in a
    # worker thread and bound it with asyncio.wait_for instead (see `math_match`).
    if "$" in text or "\\boxed" in text:
        return parse(text, parsing_timeout=None)
    # Bare LaTeX such as "\frac12" or "\left( 3, \frac{\pi}{2} \right)" needs math delimiters to be read
    # as LaTeX. Gold answers are LaTeX by convention, so the delimited reading comes first; for answers
    # both readings are kept (verify accepts a match between any pair).
    wrapped = parse(f"${text}$", parsing_timeout=None)
    if gold and wrapped:
        return wrapped
    return wrapped + parse(text, parsing_timeout=None)


def math_equivalent(answer: str, gold: Gold) -> Judgement:
    """Synchronous math-verify check; gold is parsed the same way as the answer (bare or boxed LaTeX)."""
    from math_verify import verify

    if exact_match(answer, gold).correct:
        return Judgement(True, 1.0, "math", "exact match")
    pred = _math_parse(answer)
    if not pred:
        return Judgement(False, 0.0, "math", "no mathematical expression found in the answer")
    for alias in _aliases(gold):
        ref = _math_parse(alias, gold=True)
        if ref and verify(ref, pred, timeout_seconds=None):
            return Judgement(True, 1.0, "math", f"{pred[-1]!s} is equivalent to {alias!r}")
    return Judgement(False, 0.0, "math", f"{pred[-1]!s} is not equivalent to the gold answer")


async def math_match(answer: str, gold: Gold, timeout_s: float = 10.0) -> Judgement:
    """math-verify in a worker thread; past `timeout_s` the episode is judged wrong (the thread is left to
    finish on its own: sympy can not be interrupted from outside)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(math_equivalent, answer, gold), timeout_s)
    except asyncio.TimeoutError:
        return Judgement(False, 0.0, "math", f"math-verify took longer than {timeout_s}s")


# ---------------------------------------------------------------- multiple choice
_CHOICE_PATTERNS = [
    re.compile(r"answer\s+is\s*:?\s*\(?\*{0,2}([A-J])\b\)?"),   # "The answer is (C)", "answer is: C"
    re.compile(r"[Aa]nswer\s*:\s*\(?\*{0,2}([A-J])\b\)?"),       # "Answer: C", "Answer: **C**"
    re.compile(r"\\boxed\{\s*(?:\\text\{)?\s*([A-J])\s*\}"),      # "\boxed{C}"
    re.compile(r"\(([A-J])\)"),                                  # a lone "(C)"
]


def extract_choice(text: str) -> str | None:
    """The option letter A..J a text commits to, or None. A bare letter ("c", "(C)", "C.") counts;
    otherwise the LAST match of the most specific pattern wins (models often restate options first)."""
    stripped = str(text).strip().strip("*").strip()
    bare = re.fullmatch(r"\(?([A-Ja-j])[).:]?", stripped)
    if bare:
        return bare.group(1).upper()
    for pattern in _CHOICE_PATTERNS:
        found = pattern.findall(stripped)
        if found:
            return found[-1]
    return None


def choice_match(answer: str, gold: Gold) -> Judgement:
    picked = extract_choice(answer)
    if picked is None:
        return Judgement(False, 0.0, "choice", "no option letter found in the answer")
    letters = [extract_choice(a) for a in _aliases(gold)]
    if picked in letters:
        return Judgement(True, 1.0, "choice", f"picked {picked}")
    shown = [x for x in letters if x] or _aliases(gold)
    return Judgement(False, 0.0, "choice", f"picked {picked}, gold {shown}")


# ---------------------------------------------------------------- LLM judge
JUDGE_SYSTEM = "You grade answers to questions against a reference answer. You are strict and brief."
JUDGE_TEMPLATE = """Question:
{question}

Reference answer:
{gold}

Candidate answer:
{answer}

Does the candidate answer say the same thing as the reference answer? Differences in wording, formatting,
or rounding that the question allows do not matter. A candidate that offers several answers, hedges, or adds
a claim that contradicts the reference is wrong. Give one short sentence of reasoning, then a last line that is
exactly `VERDICT: CORRECT` or `VERDICT: INCORRECT`."""
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(CORRECT|INCORRECT)", re.IGNORECASE)


class LLMJudge:
    """An LLM grader reached through the openai SDK (any OpenAI-compatible server: vLLM, OpenAI, a fake).
    The API key is read from the env var named `api_key_env` at call time and never logged; with no key
    set, "EMPTY" is sent (what self-hosted servers expect). `max_concurrency` bounds calls in flight."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "", timeout_s: float = 60.0,
                 max_retries: int = 2, max_tokens: int = 256, max_concurrency: int = 16):
        if not base_url or not model:
            raise ValueError("LLMJudge needs a base_url and a model name")
        self.base_url, self.model, self.api_key_env = base_url, model, api_key_env
        self.timeout_s, self.max_retries, self.max_tokens = timeout_s, max_retries, max_tokens
        self.max_concurrency = max_concurrency
        self._client: Any = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: Any = None

    def _ensure(self) -> None:
        # The SDK's httpx client and the semaphore belong to one event loop; rebuild if the loop changed.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            from openai import AsyncOpenAI

            key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
            self._client = AsyncOpenAI(base_url=self.base_url, api_key=key or "EMPTY", timeout=self.timeout_s,
                                       max_retries=self.max_retries)
            self._sem, self._loop = asyncio.Semaphore(self.max_concurrency), loop

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __call__(self, answer: str, gold: Gold, question: str = "") -> Judgement:
        answer = str(answer or "").strip()
        if not answer:
            return Judgement(False, 0.0, "llm", "empty answer")
        words = len(answer.split())
        if words > MAX_ANSWER_WORDS:
            return Judgement(False, 0.0, "llm", f"answer has {words} words (> {MAX_ANSWER_WORDS})")
        shortcut = exact_match(answer, gold)
        if shortcut.correct:
            return Judgement(True, 1.0, "llm", "exact-match shortcut")
        self._ensure()
        prompt = JUDGE_TEMPLATE.format(question=question or "(not given)", gold=" | ".join(_aliases(gold)),
                                       answer=answer)
        assert self._sem is not None
        try:
            async with self._sem:
                resp = await self._client.chat.completions.create(
                    model=self.model, temperature=0.0, max_tokens=self.max_tokens,
                    messages=[{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}])
            text = (resp.choices[0].message.content or "") if resp.choices else ""
        except Exception as e:  # the SDK's errors carry no secrets; keep only the class and first line
            return Judgement(False, 0.0, "llm", f"judge call failed: {type(e).__name__}: {str(e)[:200]}")
        found = _VERDICT.findall(text)
        if not found:
            return Judgement(False, 0.0, "llm", f"no verdict in judge reply: {text[:200]!r}")
        ok = found[-1].upper() == "CORRECT"
        return Judgement(ok, float(ok), "llm", text.strip()[:500])


# ---------------------------------------------------------------- registry
JudgeFn = Callable[..., Awaitable[Judgement]]


async def _exact(answer, gold, question="", **_):
    return exact_match(answer, gold)


async def _f1(answer, gold, question="", threshold: float = 0.5, **_):
    return f1_match(answer, gold, threshold)


async def _math(answer, gold, question="", math_timeout_s: float = 10.0, **_):
    return await math_match(answer, gold, math_timeout_s)


async def _choice(answer, gold, question="", **_):
    return choice_match(answer, gold)


async def _llm(answer, gold, question="", llm: LLMJudge | None = None, **_):
    if llm is None:
        return Judgement(False, 0.0, "llm", "no LLM judge endpoint configured (pass llm=LLMJudge(...))")
    return await llm(answer, gold, question)


async def _recorded(answer, gold, question="", traj: Any = None, **_):
    records = [r for r in (getattr(traj, "tool_records", None) or []) if r.result.answer is not None]
    if not records:
        return Judgement(False, 0.0, "recorded", "no answer call in the episode")
    verdict = records[-1].result.meta.get("recorded_correct")
    if not isinstance(verdict, bool):
        return Judgement(False, 0.0, "recorded", f"the answer call ({records[-1].tool_id}) carries no recorded "
                         "verdict: the `recorded` judge needs a replay zoo")
    return Judgement(verdict, float(verdict), "recorded", f"{records[-1].tool_id} was recorded "
                     f"{'right' if verdict else 'wrong'} on this question")


JUDGES: dict[str, JudgeFn] = {"exact": _exact, "f1": _f1, "math": _math, "choice": _choice, "llm": _llm,
                              "recorded": _recorded}


def register_judge(name: str, fn: JudgeFn) -> None:
    """Add a judge: `async fn(answer, gold, question="", **kw) -> Judgement`."""
    JUDGES[name] = fn


def judge_for(data_source: str, judges: dict[str, str]) -> str:
    """The judge configured for a data source; "synthetic/arith" falls back to "synthetic", then to the
    "default" entry, then to "exact"."""
    parts = str(data_source).split("/")
    for end in range(len(parts), 0, -1):
        name = judges.get("/".join(parts[:end]))
        if name:
            return name
    return judges.get("default") or "exact"


async def judge(name: str, answer: str | None, gold: Gold, question: str = "", **kw: Any) -> Judgement:
    """Run judge `name`; a missing answer, an unknown judge or any exception is a wrong answer with a reason."""
    fn = JUDGES.get(name)
    if fn is None:
        return Judgement(False, 0.0, name, f"unknown judge {name!r}; known: {sorted(JUDGES)}")
    if answer is None:
        return Judgement(False, 0.0, name, "no answer given")
    try:
        return await fn(str(answer), gold, question, **kw)
    except Exception as e:
        return Judgement(False, 0.0, name, f"judge failed: {type(e).__name__}: {str(e)[:200]}")
