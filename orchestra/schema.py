"""Tool schemas as data: the OpenAI function-schema shape and the JSON-schema check of call arguments.

Core, because more than tools/ needs them: the synthesis pipeline validates generated tool specs with the same
check as real tools (orchestra/data/synth/validation.py), and τ²'s call_expert builds its schema the same way.
Calling tools (budget checks, error capture) is tools/base.py's business.
"""

from __future__ import annotations

from typing import Any

# The tiered orchestrator tools and the prefix of their tier ids (`answer-4`, `search-2`), in the order charts draw
# them: a naming contract shared by the tools (tools/orchestra_tools.py), evaluation's tool mix and the scripts.
TIER_PREFIXES: dict[str, tuple[str, ...]] = {"search": ("search-",), "enhance_reasoning": ("reasoner-",),
                                              "answer": ("answer-",)}

def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def check_arguments(parameters: dict[str, Any], args: Any) -> str | None:
    """Validate `args` against a JSON schema; return None or a message naming the offending field."""
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {type(args).__name__}"
    import jsonschema  # lazy: only tool callers need it

    validator = jsonschema.Draft202012Validator(parameters)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "required":
        return f"missing required field: {err.message.split(' ')[0]}"
    if err.validator == "additionalProperties":
        return f"unexpected field: {err.message}"
    return f"field {where or '(root)'!r}: {err.message}"
