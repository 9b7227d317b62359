"""Teacher mode: an LLM behind any OpenAI-compatible endpoint writes each ToolScale stage.

Stages and their prompt files (conf/synth/<stage>.txt, str.format fields in braces):
domain -> schema -> records -> tools -> tasks -> evolve. Every reply must be JSON (a ```json fence is
allowed) and pass its validator (orchestra/data/synth/validation.py); a failing reply is rejected with a logged
reason, recorded in `Domain.rejected`, and the stage is retried up to `retries` times. A domain whose
schema, records or tools never validate yields no tasks. The API key is read from the env var *named* by
`api_key_env` and never logged. Turning the Domain into Task rows is stages.to_tasks; files are cluster/synth.py's.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from orchestra.data.synth import validation as V
from orchestra.data.synth.stages import Domain

log = logging.getLogger("orchestra.data.synth")
PROMPT_DIR = Path(__file__).resolve().parents[3] / "conf" / "synth"
STAGES = ("domain", "schema", "records", "tools", "tasks", "evolve")


class Teacher:
    def __init__(self, base_url: str, model: str, api_key_env: str = "", prompt_dir: str | Path = PROMPT_DIR,
                 temperature: float = 0.7, max_tokens: int = 4096, timeout_s: float = 60.0, retries: int = 1):
        from openai import OpenAI  # lazy: `import orchestra` pulls in no LLM SDK

        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.client = OpenAI(base_url=base_url, api_key=key or "unused", timeout=timeout_s, max_retries=0)
        self.model, self.temperature, self.max_tokens, self.retries = model, temperature, max_tokens, retries
        self.prompts = {}
        for stage in STAGES:
            path = Path(prompt_dir) / f"{stage}.txt"
            if not path.is_file():
                raise FileNotFoundError(f"teacher prompt {path} is missing")
            self.prompts[stage] = path.read_text()

    def _ask(self, stage: str, **fields: Any) -> str:
        prompt = self.prompts[stage].format(**{k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})
        reply = self.client.chat.completions.create(model=self.model, temperature=self.temperature,
                                                    max_tokens=self.max_tokens,
                                                    messages=[{"role": "user", "content": prompt}])
        return reply.choices[0].message.content or ""

    def _stage(self, d: Domain, stage: str, check, **fields: Any) -> Any:
        """Ask, parse, validate; None after `retries` + 1 failures (each logged and recorded)."""
        for attempt in range(self.retries + 1):
            try:
                text = self._ask(stage, **fields)
            except Exception as e:  # endpoint down / timeout: a rejection like any other
                reason = f"request failed: {type(e).__name__}: {str(e)[:200]}"
            else:
                value, reason = V.parse_json(text)
                if reason is None:
                    reason = check(value)
                if reason is None:
                    return value
            log.warning("synth %s/%s rejected (attempt %d): %s", d.name, stage, attempt + 1, reason)
            d.rejected.append((stage, reason))
        return None

    def build_domain(self, topic: str, n_records: int = 8, n_tasks: int = 8, evolve: bool = True) -> Domain:
        d = Domain(name=topic, subjects=[], schema={}, db={}, tools=[])

        def check_domain(v):
            ok = isinstance(v, dict) and V._NAME.match(str(v.get("name", ""))) and isinstance(v.get("subjects"), list)
            return None if ok and v["subjects"] else "domain needs a snake_case 'name' and a non-empty 'subjects' list"

        got = self._stage(d, "domain", check_domain, topic=topic)
        if got is None:
            return d
        d.name, d.subjects = got["name"], [str(s) for s in got["subjects"]]
        schema = self._stage(d, "schema", V.check_schema, domain=d.name, subjects=d.subjects)
        if schema is None:
            return d
        d.schema = schema
        rows = self._stage(d, "records", lambda v: V.check_records(schema, v), schema=schema, n_records=n_records)
        if rows is None:
            return d
        d.db = V.index_db(schema, rows)

        def check_tools(v):
            if not isinstance(v, list) or not v:
                return "tools must be a non-empty list"
            reasons = [r for r in (V.check_tool_spec(t, schema) or V.try_tool(t, schema, d.db) for t in v) if r]
            return reasons[0] if reasons else None

        tools = self._stage(d, "tools", check_tools, schema=schema)
        if tools is None:
            return d
        d.tools = tools
        ctx = {"domain": d.name, "schema": schema, "tools": tools, "db": d.db}
        tasks = self._stage(d, "tasks", lambda v: None if isinstance(v, list) and v else "tasks must be a non-empty list",
                            n_tasks=n_tasks, **ctx)
        for t in tasks or []:
            reason = V.check_task(t, d.db, schema, tools)
            if reason:
                log.warning("synth %s/tasks rejected: %s", d.name, reason)
                d.rejected.append(("tasks", reason))
                continue
            d.tasks.append(t)
            if evolve:
                harder = self._stage(d, "evolve", lambda v: V.check_task(v, d.db, schema, tools), task=t, **ctx)
                if harder is not None:
                    d.tasks.append(harder)
        return d
