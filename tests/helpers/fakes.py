"""Test doubles, for tests and benchmarks only: a byte tokenizer with the project's chat template, a scripted
engine (replies chosen by a script, near-zero generation cost), and fake tools with fixed cost and latency.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.engine import Generation, Sampling
from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult

TEMPLATE = Path(__file__).resolve().parents[2] / "orchestra" / "policy" / "templates" / "chatml_tools.jinja"
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>", "<think>", "</think>"]


class ByteTokenizer:
    """Bytes 0..255 plus the chat special tokens as single ids; renders the project's ChatML template."""

    def __init__(self):
        import jinja2

        self.special = {tok: 256 + i for i, tok in enumerate(SPECIALS)}
        self.inverse = {v: k for k, v in self.special.items()}
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x: json.dumps(x)
        self.template = env.from_string(TEMPLATE.read_text())
        self.eos_token_id = self.special["<|im_end|>"]
        self.pad_token_id = self.special["<|endoftext|>"]
        self.vocab_size = 256 + len(SPECIALS)

    def apply_chat_template(self, conversation, tools=None, tokenize=False, add_generation_prompt=False, **_):
        text = self.template.render(messages=conversation, tools=tools, add_generation_prompt=add_generation_prompt)
        return self.encode(text) if tokenize else text

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        i = 0
        while i < len(text):
            for tok, tid in self.special.items():
                if text.startswith(tok, i):
                    ids.append(tid)
                    i += len(tok)
                    break
            else:
                ids.extend(text[i].encode("utf-8"))
                i += 1
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        out, buf = [], bytearray()
        for t in ids:
            if t in self.inverse:
                out.append(buf.decode("utf-8", "replace"))
                buf = bytearray()
                if not skip_special_tokens:
                    out.append(self.inverse[t])
            elif 0 <= t < 256:
                buf.append(t)
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)


Script = list[str] | Callable[[str], str]


class ScriptedEngine:
    """Replies from a script: a list consumed per call (last repeated) or a function of the prompt text.
    Each reply ends with <|im_end|> unless cut by max_tokens (finish_reason 'length')."""

    def __init__(self, tokenizer: ByteTokenizer, script: Script, delay_s: float = 0.0, logprob: float = -0.5):
        self.tok, self.script, self.delay_s, self.logprob = tokenizer, script, delay_s, logprob
        self.calls = 0
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        self.prompts.append(list(prompt_ids))
        if callable(self.script):
            reply = self.script(self.tok.decode(prompt_ids))
        else:
            reply = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        ids = self.tok.encode(reply) + [self.tok.eos_token_id]
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        return Generation(token_ids=ids, logprobs=[self.logprob] * len(ids), finish_reason=finish)


def call_text(name: str, **arguments: Any) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


class FakeTool:
    """A tool with fixed cost and latency. `answers=True` makes it end the episode with `reply`; `code_output` and
    `meta` are returned as given (a stand-in for enhance_reasoning's sandbox output, a simulated expert's labels)."""

    def __init__(self, name: str, cost_usd: float = 0.0, latency_s: float = 0.0, reply: str = "ok",
                 answers: bool = False, sleep: bool = False, documents: list[str] | None = None,
                 parameters: dict[str, Any] | None = None, fail: bool = False, code_output: str | None = None,
                 meta: dict[str, Any] | None = None):
        self.name, self.cost, self.latency, self.reply = name, cost_usd, latency_s, reply
        self.answers, self.sleep, self.documents, self.fail = answers, sleep, documents, fail
        self.code_output, self.meta = code_output, dict(meta or {})
        self.description = f"fake tool {name} (${cost_usd} per call, ~{latency_s}s)"
        self.parameters = parameters or {"type": "object", "properties": {"model": {"type": "string"},
                                                                          "query": {"type": "string"}}}
        self.calls: list[tuple[dict[str, Any], ToolContext]] = []

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return self.cost

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.calls.append((args, ctx))
        if self.sleep and self.latency:
            await asyncio.sleep(self.latency)
        if self.fail:
            raise RuntimeError("fake failure")
        return ToolResult(text=self.reply, cost_usd=self.cost, latency_s=self.latency, tokens_in=10,
                          tokens_out=5, answer=self.reply if self.answers else None,
                          documents=list(self.documents) if self.documents else None, code_output=self.code_output,
                          meta=dict(self.meta))


def make_task(i: int = 0, **kw: Any) -> Task:
    base = dict(id=f"t{i}", problem=f"What is {i} + {i}?", answer=str(2 * i), tools=[],
                pref={"accuracy": 1.0, "cost": 0.5, "latency": 0.0}, meta={"family": "arith", "difficulty": 1})
    base.update(kw)
    return Task(**base)


def close(a: float, b: float, tol: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
