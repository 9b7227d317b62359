"""ReplayExpert: replays recorded real outcomes of real models (no model runs; the outputs are real, recorded).

Sources (see ../shared/data/SOURCES.md):
- MMLU-Pro eval outputs (`*.zip` or `*.json`: one JSON list of rows `{question_id, question, options, answer,
  pred, model_outputs | generated_text, ...}`); correct iff `pred == answer`; question ids normalised with str().
  These files record no tokens or cost: tokens are estimated from text length (question + options in,
  the recorded output out) and priced at the model's real price, with meta["estimated"] = True.
- RouterArena cached results (`*.jsonl` rows `{global_index, generated_answer, token_usage, evaluation_result
  {extracted_answer, score, inference_cost}}`): tokens and $ as recorded; correct iff score >= 0.5 (score is
  0/1 except METEOR rows). A row whose `generated_answer` is null (a verdicts-only routing log,
  cluster/routing_log.py) answers with the marker text NO_RESPONSE and meta["response_recorded"] = False; the
  `recorded` judge (reward/judges.py) scores it by its recorded verdict, and its output tokens count as 0.
For a known question (task.meta["question_id"], else task.id) `complete` returns the recorded text, the
recorded answer in meta["answer"] and meta["recorded_correct"]. An unknown question is an error reply.
Files are parsed on first use and cached per process (about 15 MB of JSON each).
Latency is not recorded in either source: the configured typical latency is reported (virtual).
"""

from __future__ import annotations

import functools
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.config import ConfigError
from orchestra.jsonl import JSONLError, iter_jsonl
from orchestra.types import ToolContext
from tools.experts.base import ExpertReply, PricedExpert, estimate_tokens
from tools.pricing import PriceTable

_REPO = Path(__file__).resolve().parents[2]
NO_RESPONSE = "(no response recorded: the log gives only this model's verdict on the question)"


def shared_data_dir() -> Path:
    return Path(os.environ.get("ORCHESTRA_SHARED_DATA", _REPO.parent / "shared" / "data"))


def resolve_data_path(path: str) -> Path:
    """Absolute paths as given; relative ones against the cwd, the repo, then the shared data directory."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    for base in (Path.cwd(), _REPO, shared_data_dir()):
        if (base / p).exists():
            return base / p
    return shared_data_dir() / p


@dataclass(frozen=True)
class ReplayRecord:
    text: str
    pred: str | None
    correct: bool
    prompt_chars: int
    score: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    text_recorded: bool = True  # False: the source has no text for this answer (`text` is NO_RESPONSE)


def _mmlu_pro_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith(".json")]
            if len(names) != 1:
                raise ConfigError(f"{path}: expected one .json file in the zip, found {names}")
            return json.loads(z.read(names[0]))
    return json.loads(path.read_text(encoding="utf-8"))


def _mmlu_pro(path: Path) -> dict[str, ReplayRecord]:
    out = {}
    for row in _mmlu_pro_rows(path):
        text = row.get("model_outputs") or row.get("generated_text") or ""
        pred = row.get("pred")
        options = row.get("options") or []
        prompt_chars = len(row.get("question", "")) + sum(len(str(o)) + 4 for o in options)
        out[str(row["question_id"])] = ReplayRecord(text=str(text), pred=None if pred is None else str(pred),
                                                    correct=pred is not None and pred == row.get("answer"),
                                                    prompt_chars=prompt_chars)
    return out


def _router_arena(path: Path) -> dict[str, ReplayRecord]:
    """RouterArena rows (and what cluster/routing_log.py writes); a bad row is a ConfigError naming file, line, field."""
    out = {}
    try:
        for n, row in iter_jsonl(path):
            if not isinstance(row, dict) or row.get("global_index") in (None, ""):
                raise ConfigError(f"replay file {path}: line {n}: field 'global_index' (the question id) is missing")
            if str(row["global_index"]) in out:
                raise ConfigError(f"replay file {path}: line {n}: field 'global_index': {row['global_index']!r} "
                                  "is recorded twice")
            ev = row.get("evaluation_result") or {}
            usage = row.get("token_usage") or {}
            score = ev.get("score")
            score = float(score) if isinstance(score, (int, float)) else 0.0
            pred, text = ev.get("extracted_answer"), row.get("generated_answer")
            out[str(row["global_index"])] = ReplayRecord(
                text=NO_RESPONSE if text is None else str(text), pred=None if pred is None else str(pred),
                correct=score >= 0.5, prompt_chars=len(row.get("question", "")), score=score,
                tokens_in=usage.get("input_tokens"), tokens_out=usage.get("output_tokens"),
                cost_usd=ev.get("inference_cost"), text_recorded=text is not None)
    except JSONLError as e:
        raise ConfigError(f"replay file {path}: line {e.lineno}: malformed JSON ({e.msg})") from None
    return out


@functools.lru_cache(maxsize=16)
def load_replay(path: str) -> dict[str, ReplayRecord]:
    """Parse a recorded-outputs file once per process: question id -> ReplayRecord."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"replay file {p} does not exist")
    return _router_arena(p) if p.suffix == ".jsonl" else _mmlu_pro(p)


class ReplayExpert(PricedExpert):
    """Replays one real model's recorded answers; priced at that model's real price."""

    def __init__(self, name: str, model: str, prices: PriceTable, *, path: str, latency_s: float = 2.0,
                 max_tokens: int = 1024):
        super().__init__(name, model, prices, max_tokens, latency_s)
        if not path:
            raise ConfigError(f"zoo.experts.{name}: replay experts need replay_path")
        resolved = resolve_data_path(path)
        if not resolved.is_file():
            raise ConfigError(f"zoo.experts.{name}: replay_path {path!r} not found (looked for {resolved})")
        self.path = str(resolved)

    def records(self) -> dict[str, ReplayRecord]:
        return load_replay(self.path)

    async def complete(self, messages: list[Any], max_tokens: int | None = None, ctx: ToolContext | None = None,
                       *, purpose: str = "answer") -> ExpertReply:
        meta: dict[str, Any] = {"model": self.name, "replay": True}
        if ctx is None:
            return ExpertReply("", error=f"replay expert {self.name} needs the task context", meta=meta)
        if purpose != "answer":
            return ExpertReply("", error=f"replay expert {self.name} only has recorded answers, not {purpose}s",
                               meta=meta)
        qid = str(ctx.task.meta.get("question_id", ctx.task.id))
        rec = self.records().get(qid)
        if rec is None:
            return ExpertReply("", error=f"replay expert {self.name} has no recorded output for question {qid!r}",
                               meta=meta)
        meta.update(recorded_correct=rec.correct, answer=rec.pred or ("" if rec.text_recorded else NO_RESPONSE),
                    latency_estimated=True)
        if not rec.text_recorded:
            meta["response_recorded"] = False
        if rec.score is not None:
            meta["recorded_score"] = rec.score
        t_in, t_out, cost, estimated = self.priced(rec)
        meta["estimated"] = estimated
        return ExpertReply(rec.text, tokens_in=t_in, tokens_out=t_out, latency_s=self.latency_s,
                           cost_usd=cost, meta=meta)

    def priced(self, rec: ReplayRecord) -> tuple[int, int, float, bool]:
        """(tokens in, tokens out, $, estimated?) of one recorded answer: as recorded where the file has
        them, else estimated from text length and priced at this model's price."""
        if rec.tokens_in is not None and rec.tokens_out is not None:
            t_in, t_out = int(rec.tokens_in), int(rec.tokens_out)
            cost = float(rec.cost_usd) if rec.cost_usd is not None else self.cost(t_in, t_out)
            return t_in, max(t_out, 0), cost, rec.cost_usd is None
        t_in = rec.prompt_chars // 4 + 1
        t_out = max(estimate_tokens(rec.text) - 5, 0) if rec.text_recorded else 0  # the marker is not output
        return t_in, t_out, self.cost(t_in, t_out), True
