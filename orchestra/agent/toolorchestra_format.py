"""NVIDIA's Orchestrator-8B prompt format (ToolOrchestra, arXiv 2511.21689): its interface facts as data, and
the renderer that lays our agent loop's lists out in it.

Orchestrator-8B (a Qwen3-8B fine-tune) learned one layout: a one-line system turn, the tool catalogue rendered
by the Qwen3 chat template, and one user turn re-rendered every turn,
  "Problem: <problem>\\n\\n<context>\\n\\nChoose an appropriate tool."
where <context> is "Documents:\\n" + the documents found so far, then the code run so far with its output, then
earlier answer attempts, cut from the left to a budget of *tokens*. The strings below (tool names, descriptions
with their typos, JSON parameters, prompt lines, tier ids) are kept exactly as the model saw them; they were read
from NVlabs/ToolOrchestra (file paths in docs/orchestrator8b.md). The renderer is our own code.

Three variants, because the repository's three harnesses differ in small ways:
  toolorchestra         the RL rollout (training/lead_agent/llm_agent/generation_quick3.py): what the weights learned
  toolorchestra_hle     evaluation/eval_hle.py (HLE)
  toolorchestra_frames  evaluation/eval_frames.py (FRAMES)
orchestra/agent/prompt.py's Prompter calls this when `agent.prompt_format` names one. Left to others: which tools
exist and what they do (the zoo; ours take the same `model` tier argument), tier -> expert (task.model_mapping),
the experts' own prompts, and the τ² system prompt (tools/tau2/).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# ---------------------------------------------------------------- interface facts (evaluation/tools.json,
# identical to training/tools.json): order and wording kept, typos included ("intermidiate", "$$0.2")
_TABLE = "Model | price per million input tokens | price per million output tokens | average latency\n"


def _tool(name: str, description: str, model_description: str) -> dict[str, Any]:
    """One of their tool schemas: a function whose only (required) argument is the tier, `model`."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"properties": {"model": {"description": model_description, "type": "string"}},
                       "required": ["model"], "title": "parameters", "type": "object"}}}


TOOLS: list[dict[str, Any]] = [
    _tool("enhance_reasoning", "tool to enhance answer model reasoning. analyze the problem, write code, execute it and "
          "return intermidiate results that will help solve the problem",
          "The model used to reason. Choices: ['reasoner-1', 'reasoner-2', 'reasoner-3']. "
          "reasoner-1 demonstrates strong understanding and reasoning capabilities, which usually "
          "provides reliable insights. reasoner-2 can analyze some problems, but could hallucinate "
          "and make mistakes in difficult scenarios. reasoner-3 can reason over the context and "
          "reveal the logic. \n" + _TABLE
          + "reasoner-1 | $1.25 | $10 | 31s\nreasoner-2 | $0.25 | $2 | 25s\nreasoner-3 | $0.8 | $0.8 | 9s"),
    _tool("answer", "give the final answer. Not allowed to call if documents is empty.",
          "The model used to answer. Choices: ['answer-1', 'answer-2', 'answer-3', 'answer-4', "
          "'answer-math-1', 'answer-math-2']. answer-1 exhibits strong functional calling abilities "
          "and performs excellent in most domains (math, physics, social science, etc.). answer-2 "
          "presents reasonable solutions in some tasks, but could get stuck in complex reasoning "
          "and specific domain knowledge. answer-3 could solve easy to medium tasks, but is not "
          "capable of tackling tasks with strong expertise and long-horizon planning. answer-4 "
          "demonstrates basic capability: it can understand basic instructions, do simple steps, "
          "yet it sometimes misreads details, mixes concepts. answer-math-1 can solve moderate "
          "(middle school) math problem, though it becomes incapable in more difficult tasks. "
          "answer-math-2 can follow simple instructions and perform easy (primary-level) math "
          "problems, but struggle in more complex logic. The table below shows the pricing and "
          "latency of each model:\n" + _TABLE
          + "answer-1 | $1.25 | $10 | 96s\nanswer-2 | $0.25 | $2 | 27s\nanswer-3 | $0.9 | $0.9 | 15s\n"
          "answer-4 | $0.8 | $0.8 | 11s\nanswer-math-1 | $0.9 | $0.9 | 13s\n"
          "answer-math-2 | $$0.2 | $0.2 | 9s"),
    _tool("search", "Search for missing information",
          "The model used to search for missing information. Choices: ['search-1', 'search-2', "
          "'search-3']. search-1 usually identifies the missing information and can write concise "
          "queries for effective search. search-2 can reason over the context and write queries to "
          "find the missing content for answering questions. search-3 can also write queries to "
          "find information. The table below shows the pricing and latency:\n" + _TABLE
          + "search-1 | $1.25 | $10 | 22s\nsearch-2 | $0.25 | $2 | 16s\nsearch-3 | $0.8 | $0.8 | 8s"),
]

# τ²-bench (evaluation/tau2-bench/tau2/utils/llm_utils.py `extra_tool`): appended after the domain's tools, which
# lose `transfer_to_human_agents`.
CALL_EXPERT: dict[str, Any] = {"type": "function", "function": {
    "name": "call_expert",
    "description": "Call the expert such that the user request can be better solved compared to existing functions",
    "parameters": {"properties": {"expert": {
        "description": "The expert. Choices: ['expert-1', 'expert-2', 'expert-3']. expert-1 exhibits strong "
                       "functional calling abilities and performs excellent in most domains (math, physics, social "
                       "science, etc.), but could lack domain knowledge in some cases. expert-2 presents reasonable "
                       "solutions in most tasks, but could get stuck in complex reasoning and specific domain "
                       "knowledge. expert-3 demonstrates moderate performance: it can parse complex prompts, performs "
                       "some mathematical derivations, call functions, yet it sometimes misreads details, mixes "
                       "concepts. The table below shows the pricing and latency of each model:\n" + _TABLE
                       + "expert-1 | $1.25 | $10 | 96s\nexpert-2 | $0.25 | $2 | 27s\nexpert-3 | $0.8 | $0.8 | 11s",
        "title": "Expression", "type": "string"}},
        "required": ["expert"], "title": "parameters", "type": "object"}}}

# The valid tiers per tool (ALL_TOOLS in eval_hle.py and generation_quick3.py) and the models behind them in
# evaluation (MODEL_MAPPING in eval_hle.py; τ²'s expert-1..3 in llm_utils.py). conf/experiment/orchestrator8b.yaml
# binds the same tiers to the same models.
TIERS: dict[str, list[str]] = {
    "enhance_reasoning": ["reasoner-1", "reasoner-2", "reasoner-3"],
    "answer": ["answer-math-1", "answer-math-2", "answer-1", "answer-2", "answer-3", "answer-4"],
    "search": ["search-1", "search-2", "search-3"],
    "call_expert": ["expert-1", "expert-2", "expert-3"],
}
TIER_MODELS: dict[str, str] = {
    "search-1": "gpt-5", "search-2": "gpt-5-mini", "search-3": "Qwen/Qwen3-32B",
    "reasoner-1": "gpt-5", "reasoner-2": "gpt-5-mini", "reasoner-3": "Qwen/Qwen2.5-Coder-32B-Instruct",
    "answer-math-1": "Qwen/Qwen2.5-Math-72B-Instruct", "answer-math-2": "Qwen/Qwen2.5-Math-7B-Instruct",
    "answer-1": "gpt-5", "answer-2": "gpt-5-mini", "answer-3": "meta-llama/Llama-3.3-70B-Instruct",
    "answer-4": "Qwen/Qwen3-32B",
    "expert-1": "gpt-5", "expert-2": "gpt-5-mini", "expert-3": "Qwen/Qwen3-32B",
}

_EXACT = {t["function"]["name"]: t for t in [*TOOLS, CALL_EXPERT]}
_QA_ORDER = [t["function"]["name"] for t in TOOLS]


@dataclass(frozen=True)
class Variant:
    system: str
    closing: str  # the user turn's last line
    doc_chars: int  # each document cut to its first N characters ...
    doc_tail: str  # ... and followed by this
    code_attempt_tokens: int  # code blocks + attempts: their last N tokens
    context_tokens: int  # the whole context: its last N tokens
    minus_problem: bool  # HLE: the context budget is context_tokens minus the problem's tokens
    code_heading: str  # written between documents and code
    heading_always: bool  # FRAMES writes the heading even when there is no code


ATTEMPT_TOKENS = 8000  # the attempts alone: their last N tokens (all three harnesses)
_HEADING = "\npython code and execution outputs:\n"
VARIANTS: dict[str, Variant] = {
    # generation_quick3.py: the system line ends with a space and "approriate" is misspelt, as in training
    "toolorchestra": Variant("You are good at using tools. ", "Choose an approriate tool.", 4000, "", 16000, 24000,
                             False, "", False),
    # eval_hle.py: the closing line ends with a stray quote in the original
    "toolorchestra_hle": Variant("You are good at using tools.", "Choose an appropriate tool.'", 1200, " ...",
                                 12000, 27000, True, _HEADING, False),
    "toolorchestra_frames": Variant("You are good at using tools.", "Choose an appropriate tool.", 4000, "",
                                    12000, 24000, False, _HEADING, True),
}


def variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"agent.prompt_format {name!r}: use orchestra or one of {', '.join(VARIANTS)}")
    return VARIANTS[name]


# ---------------------------------------------------------------- rendering
def cut_tail(tok: Any, text: str, limit: int) -> tuple[str, int]:
    """ToolOrchestra's `cut_seq`: (the text's last `limit` tokens, the text's whole token count). Each kept token
    is decoded on its own without special tokens and the pieces joined, as their `batch_decode` over single ids
    does; so a character split across tokens comes out as U+FFFD, as in what the model was trained on. Python's
    slice `ids[-limit:]` is kept as is, edge cases included (a limit <= 0 keeps all but the first -limit)."""
    if not text:
        return "", 0
    ids = list(tok.encode(text, add_special_tokens=False))
    kept = [[i] for i in ids[-limit:]]
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and getattr(tok, "clean_up_tokenization_spaces", True) is False:
        # what an HF fast tokenizer's decode does without its clean-up step (Qwen's has it off), batched in
        # Rust: ~20x faster than per-id Python calls, which would block the event loop for ~0.3 s a turn
        pieces = backend.decode_batch(kept, skip_special_tokens=True)
    elif hasattr(tok, "batch_decode"):
        pieces = tok.batch_decode(kept, skip_special_tokens=True)
    else:
        pieces = [tok.decode(k, skip_special_tokens=True) for k in kept]
    return "".join(pieces), len(ids)


def _unique(items: Iterable[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(str(item), None)  # their harness never adds a document it already holds
    return list(seen)


def _code_block(item: Any) -> str:
    """A {"code", "output"} pair as their harness writes it; our loop keeps only the printed output (a string),
    which gets the output block alone."""
    if isinstance(item, dict):
        return f"```python\n{item.get('code', '')}\n```\n\n```output\n{item.get('output', '')}\n```\n\n"
    return f"```output\n{item}\n```\n\n"


def _output(item: Any) -> str:
    return str(item.get("output", "")) if isinstance(item, dict) else str(item)


# Our loop's note for a failed call: "turn 3: answer(answer-1) -> <text>". Their attempts are answer-tool results
# only, so only failed answer calls become attempts; format errors, failed searches and repeats leave no trace
# there (their harness just asks again with the same context), so they are not shown.
_ANSWER_NOTE = re.compile(r"turn \d+: answer\((?P<tier>[^)]*)\) -> (?P<text>.*)", re.S)


def _attempts(items: Iterable[Any], mapping: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        if isinstance(item, dict) and "answer" in item:
            out.append((str(item.get("model", "")), str(item["answer"])))
        elif isinstance(item, str) and (m := _ANSWER_NOTE.fullmatch(item)):
            # their line names the model behind the tier (e.g. gpt-5), not the tier
            out.append((mapping.get(m["tier"], m["tier"]), m["text"]))
    return out


def context(v: Variant, tok: Any, problem: str, documents: Iterable[Any], code_outputs: Iterable[Any],
            attempts: Iterable[Any], mapping: dict[str, str] | None = None) -> str:
    """The context block: documents, then code and attempts, cut in tokens as the variant's harness cuts them."""
    doc_str = "".join(f"Doc {i}: {d[: v.doc_chars]}{v.doc_tail}\n\n" for i, d in enumerate(_unique(documents), 1))
    code_str = "".join(_code_block(c) for c in code_outputs if _output(c).strip())  # empty runs are not kept
    attempt_str = "".join(f"Attempt{i} answer by {m}: {a}\n"
                          for i, (m, a) in enumerate(_attempts(attempts, mapping or {}), 1))
    attempt_str, _ = cut_tail(tok, attempt_str, ATTEMPT_TOKENS)
    if attempt_str and not attempt_str.startswith("Attempt"):
        attempt_str = "Attempt answer: " + attempt_str  # a cut list still reads as attempts
    code_attempt, n = cut_tail(tok, code_str + attempt_str, v.code_attempt_tokens)
    if code_attempt and not code_attempt.startswith("```"):
        code_attempt = "```\n" + code_attempt  # a cut code block still opens as one
    budget = v.context_tokens - (len(tok.encode(problem, add_special_tokens=False)) if v.minus_problem else 0)
    if n >= budget:  # code and attempts alone fill the budget: documents are dropped
        return code_attempt
    heading = v.code_heading if (code_attempt or v.heading_always) else ""
    body, _ = cut_tail(tok, doc_str + heading + code_attempt, budget)
    return "Documents:\n" + body if doc_str else body


def user_content(v: Variant, tok: Any, problem: str, documents: Iterable[Any], code_outputs: Iterable[Any],
                 attempts: Iterable[Any], mapping: dict[str, str] | None = None) -> str:
    ctx = context(v, tok, problem, documents, code_outputs, attempts, mapping)
    return f"Problem: {problem}\n\n{ctx}\n\n{v.closing}"


def catalogue(schemas: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The tool list the model was trained with: ToolOrchestra's exact schema for each tool it knows, in its
    order (tools.json's; call_expert after the τ² domain tools), other tools as given. Not copied: do not mutate."""
    if not schemas:
        return schemas
    names = [(s.get("function") or s).get("name") for s in schemas]
    head = [_EXACT[n] for n in _QA_ORDER if n in names]
    rest = [s for s, n in zip(schemas, names) if n not in _EXACT]
    return head + rest + ([CALL_EXPERT] if "call_expert" in names else [])
