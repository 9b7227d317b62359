"""Routing logs, one command (cluster/routing_log.py over orchestra/data/routing_log.py): the shipped example and the
real RouterArena log (../shared/data) become tasks + a replay zoo + presets outside conf/ that load, replay the
recorded answers, tokens and $ exactly, and evaluate; every kind of bad input is one line naming file, row and
field, and leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cluster.routing_log import main
from orchestra.config import load_config
from orchestra.data.sources import build_task_set
from orchestra.types import Task, ToolContext
from tools.registry import build_experts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "routing_log.csv"


def _convert(log: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main([str(log), "--out", str(out), *extra])
    return rc, stdout.getvalue(), stderr.getvalue()


def test_the_shipped_example_trains_and_evaluates_from_a_preset_outside_conf(tmp_path):
    rc, out, err = _convert(EXAMPLE, tmp_path / "ex")
    assert rc == 0, err
    assert "gpt-4o: accuracy 0.958" in out and "gpt-4o-mini: accuracy 0.667" in out and "oracle" in out
    assert sorted(p.name for p in (tmp_path / "ex").iterdir()) == ["experiment.yaml", "experts.yaml", "replay",
                                                                 "tasks.jsonl", "zoo.yaml"]
    cfg = load_config([f"experiment={tmp_path / 'ex' / 'experiment.yaml'}"])
    assert cfg.name == "ex" and cfg.zoo.tiers == {"answer-1": "gpt-4o", "answer-2": "gpt-4o-mini"}
    assert cfg.reward.judges["routing_log"] == "recorded" and (cfg.data.n_train, cfg.data.n_heldout) == (20, 4)
    train, held, _ = build_task_set(cfg.data, cfg.zoo.tiers)
    assert len(train) == 20 and len(held) == 4 and not {t.id for t in train} & {t.id for t in held}
    assert all(t.model_mapping == cfg.zoo.tiers for t in train)

    from cluster.evaluate import main as evaluate

    assert evaluate([f"experiment={tmp_path / 'ex' / 'experiment.yaml'}", "checkpoint=", f"out={tmp_path / 'eval'}",
                     "baselines=strongest,cheapest,oracle"]) == 0
    assert (tmp_path / "eval" / "report.json").is_file()
    records = [json.loads(x) for x in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    by_policy = {p: [r for r in records if r["policy"] == p] for p in ("strongest", "oracle")}
    assert all(r["correct"] for r in by_policy["oracle"]) and len(by_policy["oracle"]) == 4
    # the held-out answers are judged by the log's verdicts: strongest is right where gpt-4o was recorded right
    log = {r["id"]: r for r in _csv_rows(EXAMPLE)}
    for r in by_policy["strongest"]:
        assert r["correct"] == (log[r["task_id"]]["gpt-4o|correct"] == "true")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _router_arena_long(shared_data: Path, path: Path) -> dict[str, Path]:
    """The two RouterArena files as one long-layout JSONL log (our field names)."""
    files = {p.stem: p for p in sorted((shared_data / "routing" / "routerarena").glob("*.jsonl"))}
    with path.open("w") as f:
        for model, p in files.items():
            for line in p.read_text().splitlines():
                r = json.loads(line)
                ev, usage = r["evaluation_result"], r["token_usage"]
                f.write(json.dumps({"id": r["global_index"], "prompt": r["question"], "answer": ev["ground_truth"],
                                    "category": r["global_index"].rsplit("_", 1)[0], "model": model,
                                    # RouterArena's METEOR scores dip below 0 (-0.033 once), which the converter
                                    # refuses (scores are in [0, 1]): pass the verdict, as ReplayExpert reads it
                                    "response": r["generated_answer"], "correct": ev["score"] >= 0.5,
                                    "model_answer": ev["extracted_answer"], "tokens_in": usage["input_tokens"],
                                    "tokens_out": usage["output_tokens"], "cost_usd": ev["inference_cost"]}) + "\n")
    return files


def test_a_real_routing_log_replays_exactly_what_was_recorded(tmp_path, shared_data):
    log = tmp_path / "routerarena.jsonl"
    originals = _router_arena_long(shared_data, log)
    rc, out, err = _convert(log, tmp_path / "ra", "--heldout", "200")
    assert rc == 0, err
    assert "809 questions x 2 models" in out
    cfg = load_config([f"experiment={tmp_path / 'ra' / 'experiment.yaml'}"])
    assert cfg.zoo.tiers == {"answer-1": "claude-3-haiku-20240307", "answer-2": "gemini-2.0-flash-001"}
    experts = build_experts(cfg.zoo)  # priced by genai-prices under the log's own model names
    converted = {m: experts[m] for m in originals}

    from tools.experts.replay import load_replay

    tasks = {t.id: t for t in (lambda s: s[0] + s[1])(build_task_set(cfg.data, cfg.zoo.tiers)[:2])}
    assert len(tasks) == 809
    for model, original in originals.items():
        recorded = load_replay(str(original))
        assert set(recorded) == set(tasks)  # every task id is a replay key
        for qid in list(tasks)[:60]:
            reply = asyncio.run(converted[model].complete([], ctx=ToolContext(task=tasks[qid])))
            rec = recorded[qid]
            assert reply.meta["recorded_correct"] == rec.correct and reply.text == rec.text
            assert (reply.tokens_in, reply.tokens_out) == (rec.tokens_in, rec.tokens_out)
            assert reply.cost_usd == pytest.approx(rec.cost_usd) and reply.meta["estimated"] is False


BAD = {  # name -> (log text, extra args, what the one line must say)
    "missing column": ("id,answer,a|response,a|correct,b|response,b|correct\n1,x,y,true,z,false\n", (),
                       ["row 1 (line 2)", "'prompt'"]),
    "malformed JSON": ('{"prompt": "p", "model": "gpt-4o", "response": "r", "correct": 1}\n{"prompt": \n', (),
                       ["row 2 (line 2)", "malformed JSON"]),
    "bad verdict": ("prompt,gpt-4o|response,gpt-4o|correct,gpt-4o-mini|response,gpt-4o-mini|correct\n"
                    "p,r,maybe,r,true\n", (), ["row 1 (line 2)", "'gpt-4o|correct'", "'maybe'"]),
    "negative tokens": ("prompt,gpt-4o|response,gpt-4o|tokens_in,gpt-4o-mini|response\np,r,-3,r\n",
                        ("--judge", "exact"), ["row 1 (line 2)", "'gpt-4o|tokens_in'"]),
    "no gold, no verdict": ("prompt,gpt-4o|response,gpt-4o-mini|response\np,r,s\n", (),
                            ["row 1 (line 2)", "'answer'", "correct"]),
    "id with two prompts": ("id,prompt,answer,model,response\n1,p,a,gpt-4o,r\n1,q,a,gpt-4o-mini,r\n", (),
                            ["row 2 (line 3)", "'prompt'", "question id '1'", "row 1 (line 2)"]),
    "unanswered question": ("id,prompt,answer,model,response\n1,p,a,gpt-4o,r\n1,p,a,gpt-4o-mini,r\n"
                            "2,q,b,gpt-4o,r\n", (), ["row 3 (line 4)", "'2'", "'gpt-4o-mini'", "--drop-incomplete"]),
    "model without a price": ("prompt,answer,my-local-llm|response,gpt-4o|response\np,a,a,b\n", (),
                              ["row 1 (line 2)", "'my-local-llm'", "no price", "--price my-local-llm=IN,OUT"]),
    "price for an unknown model": ("prompt,answer,gpt-4o|response,gpt-4o-mini|response\np,a,a,b\n",
                                   ("--price", "gpt-5=1,2"), ["--price gpt-5", "no model 'gpt-5'"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_file_row_and_field_and_writes_nothing(tmp_path, case):
    text, extra, needles = BAD[case]
    log = tmp_path / ("log.jsonl" if text.startswith("{") else "log.csv")
    log.write_text(text)
    rc, out, err = _convert(log, tmp_path / "out", *extra)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: "), err
    if not case.startswith("price for"):
        assert str(log) in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == [log.name]  # no output dir, no temporary left


def test_layouts_gold_judging_incomplete_logs_and_replacing_output(tmp_path):
    """Long and wide layouts give the same files; a gold-only log is judged (`--judge`); --drop-incomplete keeps the
    questions every model answered; an existing output is replaced only with --force, atomically."""
    wide = tmp_path / "wide.csv"
    wide.write_text("question,gold,gpt-4o|response,gpt-4o-mini|response\nWhat is 2+2?,4,4,5\nCapital of France?,"
                    "Paris,paris,Paris\nBlank?,x,x,\n")
    long_ = tmp_path / "long.jsonl"
    long_.write_text("".join(json.dumps({"question": q, "gold": g, "model": m, "response": r}) + "\n"
                             for q, g, m, r in [("What is 2+2?", "4", "gpt-4o", "4"), ("What is 2+2?", "4", "gpt-4o-mini", "5"),
                                                ("Capital of France?", "Paris", "gpt-4o", "paris"),
                                                ("Capital of France?", "Paris", "gpt-4o-mini", "Paris"),
                                                ("Blank?", "x", "gpt-4o", "x")]))
    cols = ("--columns", "prompt=question,answer=gold", "--drop-incomplete", "--heldout", "1")
    for log, out in ((wide, tmp_path / "w"), (long_, tmp_path / "l")):
        rc, text, err = _convert(log, out, *cols)
        assert rc == 0, err
        assert "2 questions x 2 models (1 dropped" in text and "4 verdicts judged by `exact`" in text
    for f in ("tasks.jsonl", "replay/gpt-4o.jsonl", "replay/gpt-4o-mini.jsonl"):
        a = (tmp_path / "w" / f).read_text().replace("routing_log/w", "routing_log/l")
        assert a == (tmp_path / "l" / f).read_text()
    mini = [json.loads(x) for x in (tmp_path / "w" / "replay" / "gpt-4o-mini.jsonl").read_text().splitlines()]
    assert [r["evaluation_result"]["score"] for r in mini] == [0.0, 1.0]
    ids = [Task.from_dict(json.loads(x)).id for x in (tmp_path / "w" / "tasks.jsonl").read_text().splitlines()]
    assert all(i.startswith("q") and len(i) == 13 for i in ids)  # stable ids from the prompt's hash
    rc, _, err = _convert(wide, tmp_path / "w", *cols)
    assert rc == 2 and "exists (pass --force" in err
    (tmp_path / "w" / "tasks.jsonl").write_text("stale")
    assert _convert(wide, tmp_path / "w", *cols, "--force")[0] == 0
    assert (tmp_path / "w" / "tasks.jsonl").read_text() != "stale"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l", "long.jsonl", "w", "wide.csv"]
