"""SimExpert: a SIMULATED expert LLM for the embedded default (no model runs; nothing here is a real output).

It is named after a real model and priced like one (tools/pricing.py), but whether it is right is drawn,
deterministically, from hash(seed, task id, expert, attempt, purpose):

    p = skill[family] ** (1 + difficulty_slope * (difficulty - 1))        # difficulty in 1..3
    p = p + (1 - p) * context_boost    if the gold answer appears in ctx.documents or ctx.code_outputs

Real models' mistakes go together (on MMLU-Pro, gemini-1.5-flash and llama-3.1-70b are both right on 52 % of
questions where independence would give 40 %, and when both are wrong they give the same wrong letter 41 % of the
time). With `rho_task` / `rho_family` the draw is a Gaussian copula of a hardness shared by every expert on the task,
a share of the expert's `family`, and its own noise (`correct_draw`; each expert's accuracy is unchanged); with
`shared_distractor` a wrong expert gives the task's one common wrong answer with that chance (`wrong_key`), so two
agreeing experts can both be wrong, as real ones are. Without them (the default) every draw is independent.

When right it answers task.answer; otherwise a plausible wrong answer (task.meta["distractors"] or a
perturbation of the gold answer). For purpose="query" it writes a search query (the problem, or a vaguer
fragment of it when the draw fails); for purpose="code" it writes Python (task.meta["code"], or a perturbed
snippet). Token counts come from the profile with deterministic jitter; latency is virtual (reported, not
slept) unless sleep=True. Every reply carries meta["simulated"] = True. Reading the gold answer is what makes
it a simulation; real experts (tools/experts/) see only the prompt.

A served question (`make serve`) has no gold answer (task.answer == ""), so there is nothing to simulate being
right about; code and answer replies then say what they really do instead of inventing one (`served_text`):
the coder writes `print(<expression>)` when the question is plain arithmetic (found by the calculator's own
checked parser, tools/calculator.arithmetic_in; never eval'ed here), which enhance_reasoning then runs for real
in the sandbox, else a program that prints that it cannot derive the answer; the answerer repeats the latest
tool output in its context (a code output before a retrieved passage: a computed result answers more directly)
and says where it came from (meta["answer_from"]: "code_output" | "document"), else says plainly that it does
not know. Those replies carry no sim_correct (no gold to be right about). Tasks with a gold answer are untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from typing import Any

from orchestra.types import ToolContext
from tools.experts.base import ExpertReply, PricedExpert, estimate_tokens
from tools.pricing import PriceTable

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def unit_draw(*parts: Any) -> float:
    """A deterministic uniform number in [0, 1) from the parts (stable across processes, unlike hash())."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _norm(s: str) -> str:
    return " ".join(str(s).strip().lower().split())


def wrong_answer(answer: str, distractors: list[Any] | None, *key: Any) -> str:
    """A plausible wrong answer: a listed distractor, else a perturbed copy of the gold one (never equal to it)."""
    gold = _norm(answer)
    options = [str(d) for d in (distractors or []) if _norm(d) != gold]
    if options:
        return options[int(unit_draw("distractor", *key) * len(options))]
    a = str(answer).strip()
    if _NUMBER.fullmatch(a):
        delta = 1 + int(unit_draw("delta", *key) * 9)
        sign = 1 if unit_draw("sign", *key) < 0.5 else -1
        if "." in a:
            return f"{float(a) + sign * delta * 0.1:.{len(a.split('.')[1])}f}"
        return str(int(a) + sign * delta)
    if len(a) == 1 and a.isalpha():  # a multiple-choice letter: another letter
        letters = [c for c in "ABCDEFGHIJ" if c != a.upper()]
        return letters[int(unit_draw("letter", *key) * len(letters))]
    words = a.split()
    if len(words) > 1:  # drop a word: wrong, but close
        i = int(unit_draw("word", *key) * len(words))
        return " ".join(words[:i] + words[i + 1:])
    return (a[:-1] if len(a) > 2 else a + "x") or "unknown"


def perturb_code(code: str, *key: Any) -> str:
    """Change one number literal so the snippet runs but prints a wrong result."""
    matches = list(_NUMBER.finditer(code))
    if not matches:
        return code + "\n# (simulated mistake)\nprint('unsure')"
    m = matches[int(unit_draw("codepos", *key) * len(matches))]
    new = str(int(float(m.group())) + 1 + int(unit_draw("codedelta", *key) * 5))
    return code[:m.start()] + new + code[m.end():]


class SimExpert(PricedExpert):
    """SIMULATED expert: skill per task family, token and latency profile; priced like the real model."""

    def __init__(self, name: str, model: str, prices: PriceTable, *, skill: dict[str, float],
                 tokens_out: int = 300, latency_s: float = 2.0, max_tokens: int = 1024, seed: int = 0,
                 sleep: bool = False, difficulty_slope: float = 0.5, context_boost: float = 0.8,
                 jitter: float = 0.25, family: str = "", rho_task: float = 0.0, rho_family: float = 0.0,
                 shared_distractor: float = 0.0):
        super().__init__(name, model, prices, max_tokens, latency_s)
        if rho_task < 0 or rho_family < 0 or rho_task + rho_family >= 1 or not 0 <= shared_distractor <= 1:
            raise ValueError(f"expert {name}: need rho_task, rho_family >= 0 with a sum below 1 and shared_distractor "
                             f"in [0, 1], got {rho_task}, {rho_family}, {shared_distractor}")
        self.family = family or name  # no family: its mistakes share only the task's hardness
        self.rho_task, self.rho_family, self.shared_distractor = rho_task, rho_family, shared_distractor
        for family, value in skill.items():
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"expert {name}: skill[{family!r}] must be in [0, 1], got {value!r}")
        self.skill = {k: float(v) for k, v in skill.items()}
        self.tokens_out, self.seed, self.sleep = int(tokens_out), seed, sleep
        self.difficulty_slope, self.context_boost, self.jitter = difficulty_slope, context_boost, jitter

    def p_correct(self, ctx: ToolContext) -> float:
        """The configured chance that this expert is right for ctx's task (and context)."""
        task = ctx.task
        family = task.meta.get("family", "default")
        base = self.skill.get(family, self.skill.get("default", 0.5))
        difficulty = min(max(int(task.meta.get("difficulty", 1)), 1), 3)
        p = base ** (1 + self.difficulty_slope * (difficulty - 1))
        gold = _norm(task.answer)
        # whole-token match: a gold "4" must not be found inside "42"
        found = re.compile(rf"(?<![\w.]){re.escape(gold)}(?![\w]|\.\d)") if gold else None
        if found and any(found.search(_norm(t)) for t in list(ctx.documents) + list(ctx.code_outputs)):
            p = p + (1 - p) * self.context_boost
        return p

    def correct_draw(self, ctx: ToolContext, purpose: str, key: tuple) -> float:
        """The uniform number the expert is right below: its own draw, or with correlation a Gaussian copula of
        the task's hardness (shared by every expert), the family's share (by the experts of `family`) and its own
        noise. The marginal stays uniform, so each expert's accuracy is its p_correct whatever the correlation."""
        u = unit_draw("correct", *key)
        if not self.rho_task and not self.rho_family:
            return u
        from statistics import NormalDist

        nd = NormalDist()

        def z(*parts: Any) -> float:
            return nd.inv_cdf(min(max(unit_draw(*parts), 1e-12), 1 - 1e-12))

        shared = (self.seed, ctx.task.id, purpose)  # not the attempt: a retry meets the same hard question
        mix = (math.sqrt(self.rho_task) * z("hard", *shared) + math.sqrt(self.rho_family) * z("family", self.family,
               *shared) + math.sqrt(1 - self.rho_task - self.rho_family) * z("correct", *key))
        return nd.cdf(mix)

    def wrong_key(self, ctx: ToolContext, purpose: str, key: tuple) -> tuple:
        """The key a wrong reply is drawn from: the task's (one wrong answer every expert may give), with chance
        `shared_distractor`, else the expert's own."""
        if self.shared_distractor and unit_draw("shared", *key) < self.shared_distractor:
            return ("shared", self.seed, ctx.task.id, purpose)
        return key

    def _jitter(self, value: float, *key: Any) -> float:
        return value * (1 + self.jitter * (2 * unit_draw(*key) - 1))

    def served_text(self, purpose: str, ctx: ToolContext) -> tuple[str, str | None, str | None]:
        """(text, answer, answer_from) for a question without a gold answer (see the module docstring)."""
        if purpose == "code":
            from tools.calculator import arithmetic_in  # sympy: loaded only when a served question needs it

            expression = arithmetic_in(ctx.task.problem)
            code = (f"print({expression})" if expression else
                    "print('a simulated expert cannot derive this: the question is not plain arithmetic')")
            return f"Simulated expert code (no gold answer to simulate):\n```python\n{code}\n```", None, None
        outputs = [t for t in ctx.code_outputs if t.strip()]
        docs = [t for t in ctx.documents if t.strip()]
        if not outputs and not docs:
            answer = "unknown (a simulated expert knows no answer to a served question, and no tool output was given)"
            return f"(simulated {self.name}) {answer}", answer, None
        source, output = ("code_output", outputs[-1]) if outputs else ("document", docs[-1])
        lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
        answer = lines[-1][:300] if source == "code_output" else " ".join(output.split())[:300]
        return (f"(simulated {self.name}) No gold answer to simulate: repeating the latest {source.replace('_', ' ')}."
                f" The answer is \\boxed{{{answer}}}", answer, source)

    def _text(self, purpose: str, correct: bool, ctx: ToolContext, key: tuple) -> tuple[str, str | None]:
        task = ctx.task
        if purpose == "query":
            problem = " ".join(task.problem.split())
            if correct:
                return f"<query>{problem}</query>", None
            words = problem.split()  # a vaguer query: the opening words only
            return f"<query>{' '.join(words[:max(2, len(words) // 3)])}</query>", None
        if purpose == "code":
            code = task.meta.get("code")
            if correct:
                code = code or f"print({task.answer!r})  # simulated derivation"
            elif code:
                code = perturb_code(code, *key)
            else:
                code = f"print({wrong_answer(task.answer, task.meta.get('distractors'), *key)!r})"
            return f"Simulated expert code:\n```python\n{code}\n```", None
        answer = task.answer if correct else wrong_answer(task.answer, task.meta.get("distractors"), *key)
        return f"(simulated {self.name}) The answer is \\boxed{{{answer}}}", str(answer)

    async def complete(self, messages: list[Any], max_tokens: int | None = None, ctx: ToolContext | None = None,
                       *, purpose: str = "answer") -> ExpertReply:
        if ctx is None:
            return ExpertReply("", error=f"simulated expert {self.name} needs the task context",
                               meta={"model": self.name, "simulated": True})
        key = (self.seed, ctx.task.id, self.name, ctx.attempt, purpose)
        p = self.p_correct(ctx)
        correct = self.correct_draw(ctx, purpose, key) < p
        served = not ctx.task.answer and purpose in ("code", "answer")
        if served:
            text, answer, answer_from = self.served_text(purpose, ctx)
        else:
            text, answer = self._text(purpose, correct, ctx, key if correct else self.wrong_key(ctx, purpose, key))
        cap = int(max_tokens or self.max_tokens)
        t_out = min(cap, max(1, round(self._jitter(self.tokens_out, "tokens", *key))))
        t_in = estimate_tokens(messages)
        latency = max(self._jitter(self.latency_s, "latency", *key), 0.0)
        if self.sleep:
            await asyncio.sleep(latency)
        meta = {"model": self.name, "simulated": True, "sim_correct": correct, "p_correct": p}
        if served:
            meta = {"model": self.name, "simulated": True, "served": True}
            if answer_from:
                meta["answer_from"] = answer_from
        if answer is not None:
            meta["answer"] = answer
        return ExpertReply(text, tokens_in=t_in, tokens_out=t_out, latency_s=latency,
                           cost_usd=self.cost(t_in, t_out), meta=meta)
