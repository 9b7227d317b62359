"""The tool "python": run the model's code in the code sandbox (tools/sandbox.py) and return what it printed.

`PythonTool` checks the arguments, runs `{"code": ...}` through a `Sandbox`, and turns the `SandboxRun` into a
ToolResult: stdout (plus stderr) as the observation, the isolation and exit status in `meta`, cost = wall
seconds x the sandbox's price_per_second (never above `cost_bound`). A sandbox that refused or failed to start
is an error result; the code's own traceback is a normal observation. How the code is isolated is the
sandbox's; retries and queueing are the tool server's (actors/tool_server.py).
"""

from __future__ import annotations

from typing import Any

from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult
from tools.sandbox import Sandbox


class PythonTool:
    """Tool "python": run code in the sandbox; stdout/stderr are the observation."""

    name = "python"
    description = ("Run a Python 3 program in an isolated sandbox (no network, no files outside /tmp, "
                   "limited CPU time, memory and processes; numpy and sympy are available) and return what it "
                   "prints. Print every value you want to see.")
    parameters = {"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}},
                  "required": ["code"], "additionalProperties": False}

    def __init__(self, sandbox: Sandbox | None = None, **sandbox_kwargs):
        """Either a ready Sandbox or the Sandbox's flat keyword arguments."""
        self.sandbox = sandbox if sandbox is not None else Sandbox(**sandbox_kwargs)

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return self.sandbox.wall_timeout_s * self.sandbox.price_per_second

    def example_args(self) -> dict[str, Any]:
        return {"code": "print(sum(i * i for i in range(10)))"}

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        code = args.get("code") if isinstance(args, dict) else None
        if not isinstance(code, str) or not code.strip():
            return ToolResult.failure("python: `code` must be a non-empty string", meta={"invalid_arguments": True})
        run = await self.sandbox.run(code)
        billed = min(run.wall_s, self.sandbox.wall_timeout_s)  # never above cost_bound
        output = run.stdout + (("\n[stderr]\n" + run.stderr) if run.stderr.strip() else "")
        meta = {"isolation": run.isolation, "seccomp": run.seccomp, "exit_code": run.exit_code,
                "timed_out": run.timed_out, "truncated": run.truncated, "wall_s": run.wall_s,
                "sandbox_queue_s": run.queue_s, "code_output": output}
        cost = billed * self.sandbox.price_per_second
        if run.error:
            return ToolResult.failure(f"python: {run.error}", latency_s=run.wall_s, meta=meta)
        if run.timed_out:
            return ToolResult.failure(f"python: timed out after {self.sandbox.wall_timeout_s:g} s\n{output}".rstrip(),
                                      cost_usd=cost, latency_s=run.wall_s, meta=meta)
        # A traceback is a normal observation (the tool worked; the code did not).
        text = output if output.strip() else f"(no output; exit code {run.exit_code})"
        if run.exit_code and run.exit_code < 0:
            text += f"\n[killed by signal {-run.exit_code}: a resource limit was hit]"
        return ToolResult(text=text, cost_usd=cost, latency_s=run.wall_s, meta=meta)
