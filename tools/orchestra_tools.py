"""ToolOrchestra's tool set: `search(model)`, `enhance_reasoning(model)`, `answer(model)`; and `consult(model)`,
`submit(model)` for orchestrators that read what their experts answer.

Each tool takes one argument, `model`: a tier id (search-1..3, reasoner-1..3, answer-1..4, answer-math-1..2)
that the task's `model_mapping` (falling back to the zoo's `tiers`) maps to an expert. The expert is reached
through the Expert protocol (tools/experts/: real, simulated or replayed), so the tools never know which.
- search: the expert writes a query (`<query>...</query>`), the search backend (retriever or web search, a
  Tool taking {"query"}) runs it; the result's `documents` holds the passages. cost = expert + backend fee.
- enhance_reasoning: the expert writes Python (a fenced block), the sandbox (a Tool taking {"code"}) runs it
  for real; the result's `code_output` holds what it printed.
- answer: the expert answers with the problem, documents and code outputs as context; the result's `answer` is the
  extracted answer (\\boxed{}, <answer>, or the last line), which ends the episode.
- consult: the same expert call on the answer tiers, but the extracted answer comes back as `candidate` and is
  shown to the orchestrator ("answer-2 answered: B"); the episode goes on. `submit(model)` then ends it with the
  answer a consulted tier gave, at no cost (the agent loop carries it out; only its schema is here).
schema(task) renders each tier's price ($/Mtok, after task.pricing overrides) and typical latency, as
ToolOrchestra does, so the orchestrator can trade accuracy for cost. Prompt wording and extractors are
`ToolPrompts` (config; ToolOrchestra-like defaults in our own words). Budgets and retries are the caller's.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from orchestra.schema import TIER_PREFIXES, function_schema
from orchestra.types import Task, ToolContext, ToolResult
from tools.base import Tool, guarded_call
from tools.experts.base import Expert, ExpertReply, bound_tokens
from tools.pricing import MTOK


@dataclass
class ToolPrompts:
    """Prompt templates ({problem}, {context} are filled in) and extraction patterns."""

    query: str = ("Write one search query that would find the information needed to solve the problem below. "
                  "Put the query between <query> and </query>.\n\nProblem: {problem}\n{context}")
    code: str = ("Write a short Python program that computes the answer to the problem below and prints it. "
                 "Put the program in one ```python fenced block.\n\nProblem: {problem}\n{context}")
    answer: str = ("Solve the problem below. Use the context if it helps. Think briefly, then give only the "
                   "final answer inside \\boxed{{}}.\n\nProblem: {problem}\n{context}")
    query_pattern: str = r"<query>(.*?)</query>"
    code_pattern: str = r"```(?:python|py)?[ \t]*\n(.*?)```"
    answer_extractors: list[str] = field(default_factory=lambda: ["boxed", "answer_tag", "last_line"])
    doc_chars: int = 4000  # context budget handed to the expert
    code_chars: int = 2000

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ToolPrompts:
        names = {f.name for f in dataclasses.fields(cls)}
        bad = set(data or {}) - names
        if bad:
            raise ValueError(f"zoo.prompts: unknown key(s) {sorted(bad)}; valid keys are {sorted(names)}")
        return cls(**(data or {}))


def _boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_answer(text: str, extractors: list[str]) -> str:
    """The first extractor that finds something wins; the last line is the fallback of last resort."""
    for name in extractors:
        if name == "boxed":
            found = _boxed(text)
        elif name == "answer_tag":
            tags = re.findall(r"<answer>(.*?)</answer>", text, re.S)
            found = tags[-1].strip() if tags else None
        elif name == "last_line":
            lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
            found = lines[-1] if lines else None
        else:
            raise ValueError(f"unknown answer extractor {name!r}; use boxed, answer_tag, last_line")
        if found:
            return found
    return text.strip()


def _tier_key(tier: str) -> tuple[str, int]:
    head, _, num = tier.rpartition("-")
    return (head, int(num)) if num.isdigit() else (tier, 0)


class TieredExpertTool:
    """Shared plumbing: tier -> expert resolution, prices in the schema, the cost bound, the context text."""

    name = ""
    summary = ""
    prefixes: tuple[str, ...] = ()
    purpose = "answer"

    def __init__(self, experts: dict[str, Expert], tiers: dict[str, str], prompts: ToolPrompts | None = None,
                 *, backend: Tool | None = None):
        self.experts, self.tiers = dict(experts), dict(tiers)
        self.prompts = prompts or ToolPrompts()
        self.backend = backend  # search: retriever / web search; enhance_reasoning: sandbox
        self.description = self.summary
        # The enum is per task (schema(task)); statically any string passes, and resolve() names valid tiers.
        self.parameters = {"type": "object", "properties": {"model": {"type": "string", "description":
                           "tier id of the expert model to use"}}, "required": ["model"],
                           "additionalProperties": False}

    # ---- tiers and prices
    def tier_ids(self, task: Task | None) -> list[str]:
        mapping = (task.model_mapping if task is not None and task.model_mapping else None) or self.tiers
        return sorted((t for t in mapping if t.startswith(self.prefixes)), key=_tier_key)

    def resolve(self, args: dict[str, Any], task: Task | None) -> tuple[str, Expert]:
        tier = args.get("model")
        valid = self.tier_ids(task)
        if tier not in valid:
            raise ValueError(f"model {tier!r} is not a tier of {self.name}; choose one of {valid}")
        mapping = (task.model_mapping if task is not None and task.model_mapping else None) or self.tiers
        expert = self.experts.get(mapping[tier])
        if expert is None:
            raise ValueError(f"tier {tier} maps to expert {mapping[tier]!r}, which this zoo does not have")
        return tier, expert

    def price(self, expert: Expert, task: Task | None) -> tuple[float, float]:
        override = (task.pricing or {}).get(expert.name) if task is not None else None
        if override:
            return float(override.get("input", 0.0)), float(override.get("output", 0.0))
        return expert.price()

    def _cost(self, expert: Expert, reply: ExpertReply, task: Task) -> float:
        if (task.pricing or {}).get(expert.name):
            p_in, p_out = self.price(expert, task)
            return (reply.tokens_in * p_in + reply.tokens_out * p_out) / MTOK
        return reply.cost_usd

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        tiers = self.tier_ids(task)
        lines = []
        for tier in tiers:
            try:
                _, expert = self.resolve({"model": tier}, task)
                p_in, p_out = self.price(expert, task)
                lines.append(f"{tier} ${p_in:g}/${p_out:g} ~{expert.latency_s:g}s")
            except Exception as e:  # an unmapped tier: still listed, with why it is unusable
                lines.append(f"{tier}: unavailable ({e})")
        params = {**self.parameters, "properties": {"model": {"type": "string", "enum": tiers,
                                                              "description": "tier id of the expert model"}}}
        # Compact on purpose: every prompt carries these lines, and prompt tokens dominate a small policy's cost.
        return function_schema(self.name, self.summary + " Tiers ($/M tokens in/out, latency): "
                               + "; ".join(lines) + ".", params)

    def example_args(self) -> dict[str, Any]:
        tiers = self.tier_ids(None)
        return {"model": tiers[0]} if tiers else {"model": ""}

    # ---- prompts
    def context_text(self, ctx: ToolContext) -> str:
        parts = []
        if ctx.documents:
            parts.append("Documents:\n" + "\n".join(f"- {d}" for d in ctx.documents)[: self.prompts.doc_chars])
        if ctx.code_outputs:
            parts.append("Code outputs:\n" + "\n".join(ctx.code_outputs)[: self.prompts.code_chars])
        return "\n".join(parts)

    def messages(self, ctx: ToolContext) -> list[dict[str, str]]:
        values = {"problem": ctx.task.problem, "context": self.context_text(ctx)}

        def fill(m: re.Match) -> str:  # one pass, so braces inside the problem text are left alone
            return {"{{": "{", "}}": "}"}.get(m.group(0)) or values.get(m.group(1) or "", m.group(0))

        text = re.sub(r"\{\{|\}\}|\{(\w+)\}", fill, getattr(self.prompts, self.purpose))
        return [{"role": "user", "content": text}]

    def backend_bound(self, ctx: ToolContext) -> float:
        if self.backend is None or not hasattr(self.backend, "cost_bound"):
            return 0.0
        return float(self.backend.cost_bound(self.backend_example(), ctx))

    def backend_example(self) -> dict[str, Any]:
        return {}

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        _, expert = self.resolve(args, ctx.task)
        msgs = self.messages(ctx)
        p_in, p_out = self.price(expert, ctx.task)
        if (ctx.task.pricing or {}).get(expert.name):
            bound = (bound_tokens(msgs) * p_in + expert.max_tokens * p_out) / MTOK
        else:
            bound = expert.cost_bound(bound_tokens(msgs), expert.max_tokens)
        return bound + self.backend_bound(ctx)

    # ---- the call
    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            tier, expert = self.resolve(args, ctx.task)
        except ValueError as e:
            return ToolResult.failure(f"{self.name}: {e}", meta={"invalid_arguments": True})
        reply = await expert.complete(self.messages(ctx), expert.max_tokens, ctx, purpose=self.purpose)
        cost = self._cost(expert, reply, ctx.task)
        base = dict(cost_usd=cost, latency_s=reply.latency_s, tokens_in=reply.tokens_in,
                    tokens_out=reply.tokens_out)
        meta = {"model": expert.name, "tier": tier,
                # not "retryable": the expert already retried; a second layer of retries would multiply them
                **{k: v for k, v in reply.meta.items() if k in ("simulated", "estimated", "replay", "answer_from")}}
        if not reply.ok:
            return ToolResult.failure(f"{self.name}: {reply.error}", meta=meta, **base)
        return await self.finish(reply, ctx, base, meta)

    async def finish(self, reply: ExpertReply, ctx: ToolContext, base: dict[str, Any],
                     meta: dict[str, Any]) -> ToolResult:
        raise NotImplementedError

    async def run_backend(self, args: dict[str, Any], ctx: ToolContext, base: dict[str, Any]) -> ToolResult:
        """Call the backend (retriever / web search / sandbox) and add its $ and seconds to `base`."""
        if self.backend is None:
            return ToolResult.failure(f"{self.name}: no backend configured")
        # the backend's fee is already inside this tool's cost bound: no second budget check
        res = await guarded_call(self.backend, args, dataclasses.replace(ctx, budget_usd_left=None))
        base["cost_usd"] += res.cost_usd
        base["latency_s"] += res.latency_s
        return res


class SearchTool(TieredExpertTool):
    name = "search"
    summary = "Search: an expert writes a query; retrieved passages come back."
    prefixes = TIER_PREFIXES["search"]
    purpose = "query"

    def backend_example(self) -> dict[str, Any]:
        return {"query": "example"}

    async def finish(self, reply, ctx, base, meta):
        found = re.findall(self.prompts.query_pattern, reply.text, re.S)
        lines = [ln.strip() for ln in reply.text.splitlines() if ln.strip()]
        query = (found[-1].strip() if found else (lines[-1] if lines else "")) or ctx.task.problem
        res = await self.run_backend({"query": query}, ctx, base)
        docs = [str(d) for d in (res.documents or [])]
        meta.update(query=query, backend_cost_usd=res.cost_usd)
        if not res.ok:
            return ToolResult.failure(f"search for {query!r} failed: {res.error}", meta=meta, documents=docs, **base)
        body = "\n".join(f"[{i + 1}] {d}" for i, d in enumerate(docs)) or "(no results)"
        return ToolResult(f"Query: {query}\n{body}", meta=meta, documents=docs, **base)


class EnhanceReasoningTool(TieredExpertTool):
    name = "enhance_reasoning"
    summary = "Code: an expert writes Python; the sandbox runs it."
    prefixes = TIER_PREFIXES["enhance_reasoning"]
    purpose = "code"

    def backend_example(self) -> dict[str, Any]:
        return {"code": "print(1)"}

    async def finish(self, reply, ctx, base, meta):
        blocks = re.findall(self.prompts.code_pattern, reply.text, re.S)
        if not blocks:
            return ToolResult.failure("enhance_reasoning: the expert wrote no Python code", meta=meta, **base)
        code = blocks[-1].strip()
        res = await self.run_backend({"code": code}, ctx, base)
        output = str(res.code_output) if res.code_output is not None else res.text
        meta["code"] = code
        if not res.ok:  # a timeout keeps its partial output; a sandbox that could not run gives none
            partial = output if output.strip() and output != res.text else None
            return ToolResult.failure(f"enhance_reasoning: {res.error}", meta=meta, code_output=partial, **base)
        return ToolResult(f"Code:\n{code}\nOutput:\n{output}", meta=meta, code_output=output, **base)


NO_ANSWER = "(no answer recorded)"  # a consulted expert whose answer the source does not hold


def expert_answer(reply: ExpertReply, meta: dict[str, Any], extractors: list[str]) -> str:
    """The reply's final answer (the expert's own extraction, else ours), with the evaluation-only verdicts copied
    into `meta` (never shown to the orchestrator: the judges of replay zoos read them)."""
    answer = reply.meta.get("answer")
    if answer is None:
        answer = extract_answer(reply.text, extractors)
    for key in ("sim_correct", "recorded_correct", "response_recorded"):
        if key in reply.meta:
            meta[key] = reply.meta[key]
    return str(answer)


class AnswerTool(TieredExpertTool):
    name = "answer"
    summary = "Answer: an expert gives the final answer (ends the episode)."
    prefixes = TIER_PREFIXES["answer"]
    purpose = "answer"

    async def finish(self, reply, ctx, base, meta):
        answer = expert_answer(reply, meta, self.prompts.answer_extractors)
        return ToolResult(f"Answer: {answer}", meta=meta, answer=answer, **base)


class ConsultTool(TieredExpertTool):
    """An answer tier's expert answers, and the orchestrator sees its extracted answer (`candidate`) instead of
    the episode ending: it may consult another tier, escalate with `answer`, or `submit` an answer it has seen."""

    name = "consult"
    summary = ("Consult: an expert answers and you see its answer; then consult another, answer, or submit an "
               "answer you have seen.")
    prefixes = TIER_PREFIXES["answer"]
    purpose = "answer"

    async def finish(self, reply, ctx, base, meta):
        answer = expert_answer(reply, meta, self.prompts.answer_extractors)
        if meta.get("response_recorded") is False:  # a verdicts-only log: there is no answer to show
            return ToolResult(f"{meta['tier']} answered, but the log records only its verdict, not its answer",
                              meta=meta, candidate=NO_ANSWER, **base)
        return ToolResult(f"{meta['tier']} answered: {answer}", meta=meta, candidate=answer, **base)


class SubmitTool:
    """`submit(model)`: end the episode with the answer that tier gave earlier in it (a `consult`), at no cost.
    Only its schema lives here: what a tier answered is the episode's state, so the agent loop carries the call
    out (orchestra/agent/loop.py) and it never reaches a tool server."""

    name = "submit"
    summary = "Submit: end with the answer an expert already gave you (free; consult it first)."

    def __init__(self, tiers: dict[str, str]):
        self.tiers = dict(tiers)
        self.description = self.summary
        self.parameters = {"type": "object", "properties": {"model": {"type": "string", "description":
                           "tier id of a consulted expert"}}, "required": ["model"], "additionalProperties": False}

    def tier_ids(self, task: Task | None) -> list[str]:
        mapping = (task.model_mapping if task is not None and task.model_mapping else None) or self.tiers
        return sorted((t for t in mapping if t.startswith(TIER_PREFIXES["answer"])), key=_tier_key)

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        params = {**self.parameters, "properties": {"model": {"type": "string", "enum": self.tier_ids(task),
                                                              "description": "tier id of a consulted expert"}}}
        return function_schema(self.name, self.summary, params)

    def example_args(self) -> dict[str, Any]:
        tiers = self.tier_ids(None)
        return {"model": tiers[0]} if tiers else {"model": ""}

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return 0.0

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.failure("submit is carried out by the agent loop (the answers it adopts are the episode's)",
                                  meta={"invalid_arguments": True})


ORCHESTRA_TOOLS = {cls.name: cls for cls in (SearchTool, EnhanceReasoningTool, AnswerTool, ConsultTool)}
