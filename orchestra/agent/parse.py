"""Parse the orchestrator's text into tool calls, a final answer, or a parse error it reads next turn.

Format: hermes / Qwen3 style, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of
them, optionally after a `<think>...</think>` block. `parse` never raises, whatever the input: malformed
output becomes a `Parsed` with `error` set to a message written for the model.

`answer_mode="tool"` (ToolOrchestra): an episode ends only through the `answer` tool, so text without a
tool call is a format error. `answer_mode="text"`: text without a tool call is the final answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from orchestra.types import ToolCall

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CLOSE) + r"|$)", re.S)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S)
_SPECIALS = re.compile(r"<\|(?:im_end|endoftext|im_start|eot_id)\|>")
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
MAX_ERROR_SNIPPET = 80


@dataclass
class Parsed:
    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    content: str = ""  # visible text outside tool calls and think blocks

    @property
    def ok(self) -> bool:
        return self.error is None


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_SNIPPET else text[:MAX_ERROR_SNIPPET] + "..."


def _decode_call(raw: str) -> ToolCall | str:
    """One `<tool_call>` body -> ToolCall, or an error message for the model."""
    body = raw.strip()
    if not body:
        return "empty <tool_call>; write a JSON object with 'name' and 'arguments'"
    try:
        obj: Any = json.loads(body)
    except (ValueError, RecursionError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        return f"invalid JSON in <tool_call> ({msg}): {_snippet(body)}"
    if not isinstance(obj, dict):
        return f"<tool_call> must hold a JSON object, got {type(obj).__name__}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return "<tool_call> needs a string 'name'"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return f"'arguments' of {name!r} is a string that is not valid JSON: {_snippet(args)}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"'arguments' of {name!r} must be a JSON object, got {type(args).__name__}"
    return ToolCall(name=name.strip(), arguments=args)


def parse(text: str, answer_mode: str = "tool") -> Parsed:
    """Text -> tool calls | final answer | parse error. Never raises."""
    try:
        return _parse(text if isinstance(text, str) else str(text), answer_mode)
    except Exception as e:  # defensive: the contract is "never raises"
        return Parsed(error=f"could not parse output ({type(e).__name__})")


def _parse(text: str, answer_mode: str) -> Parsed:
    clean = _SPECIALS.sub("", text)
    visible = _THINK.sub("", clean)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, match in enumerate(_BLOCK.finditer(visible)):
        decoded = _decode_call(match.group(1))
        if isinstance(decoded, ToolCall):
            decoded.id = f"call_{i}"
            calls.append(decoded)
        else:
            errors.append(decoded)
    content = _BLOCK.sub("", visible).strip()
    if errors and not calls:
        return Parsed(error=errors[0], content=content)
    if calls:
        # Valid calls are executed even when a sibling block was malformed; the model hears about it.
        return Parsed(calls=calls, content=content, error=None)
    if TOOL_CLOSE in visible:
        return Parsed(error="found </tool_call> without <tool_call>", content=content)
    if answer_mode == "text":
        tagged = _ANSWER_TAG.search(content)
        answer = (tagged.group(1) if tagged else content).strip()
        if answer:
            return Parsed(answer=answer, content=content)
        return Parsed(error="empty reply: answer the question or call a tool", content=content)
    hint = f" (got: {_snippet(content)})" if content else ""
    return Parsed(error="no tool call found; call a tool with <tool_call>{\"name\": ..., \"arguments\": "
                        "{...}}</tool_call>, and give your final answer through the answer tool" + hint,
                  content=content)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """The text of one tool call, as `parse` reads it (scripted policies and demonstrations emit it)."""
    return TOOL_OPEN + json.dumps({"name": name, "arguments": arguments}) + TOOL_CLOSE


def tiers_of(schema: dict[str, Any]) -> list[str]:
    """The `model` tier ids a tool schema offers (its enum), or [] for tools without tiers."""
    params = schema.get("function", schema).get("parameters", {})
    model = params.get("properties", {}).get("model", {})
    return list(model.get("enum", []))
