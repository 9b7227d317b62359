"""The newcomer path: `make eval` / `make serve` find the newest trained run, `make serve` never runs open and
names a busy port, `make demo` prints the routes of one question under two presets side by side (and where each
answer came from) from a live endpoint, and each failure on the way is one line saying what to do."""

from __future__ import annotations

import os
import re
import socket
import stat
import time
from pathlib import Path

import pytest

from orchestra.rundir import checkpoint
from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text
from tests.helpers.local_server import serving


def fake_run(root: Path, name: str, experiment: str = "cpu_tiny") -> Path:
    """A run dir laid out as cluster/trainer.py writes it (the model in <checkpoint>/learner/)."""
    def write(d: Path) -> None:
        (d / "learner").mkdir()
        (d / "learner" / "config.json").write_text("{}")

    run = root / name
    checkpoint.save(run, 1, write, {"summary": {}})
    (run / "config.yaml").write_text(f"name: {experiment}\nrun_dir: {run}\n")
    return run


def test_latest_run_is_the_one_checkpointed_last(tmp_path):
    assert checkpoint.latest_run(tmp_path / "missing") is None
    (tmp_path / "empty").mkdir()
    assert checkpoint.latest_run(tmp_path) is None  # a dir without checkpoints is not a run
    old, new = fake_run(tmp_path, "a"), fake_run(tmp_path, "b")
    os.utime(checkpoint.latest_good(old), (time.time() + 60, time.time() + 60))
    assert checkpoint.latest_run(tmp_path) == old
    os.utime(checkpoint.latest_good(new), (time.time() + 120, time.time() + 120))
    assert checkpoint.latest_run(tmp_path) == new


def test_eval_without_a_run_says_what_to_do(tmp_path, capsys):
    from cluster.evaluate import main
    from cluster.runs import newest_run

    assert main([f"run_dir={tmp_path / 'cpu_tiny'}"]) == 2
    assert "run `make train` first" in capsys.readouterr().err
    fake_run(tmp_path, "smol", experiment="cpu_smollm2")
    run, name = newest_run(str(tmp_path / "cpu_tiny"))
    assert run == tmp_path / "smol" and name == "cpu_smollm2"  # evaluated as the experiment it was trained in


def test_serve_picks_the_newest_run_and_rejects_a_missing_one(tmp_path, capsys):
    from cluster.serve import pick_checkpoint

    args = {"experiment": "cpu_tiny", "overrides": [f"run_dir={tmp_path / 'cpu_tiny'}"], "checkpoint": ""}
    pick_checkpoint(args, explicit=False)
    assert args["checkpoint"] == "" and "serving the untrained" in capsys.readouterr().err
    pick_checkpoint(args, explicit=True)  # `checkpoint=`: the untrained model on purpose, silently
    assert args["checkpoint"] == ""
    run = fake_run(tmp_path, "cpu_tiny")
    pick_checkpoint(args, explicit=False)
    assert args["checkpoint"] == str(run) and "serving the newest trained run" in capsys.readouterr().err
    from actors.serve.wiring import resolve_checkpoint

    assert resolve_checkpoint(str(run)) == str(checkpoint.latest_good(run) / "learner")  # what the replica loads
    with pytest.raises(ValueError, match="make train"):
        pick_checkpoint({**args, "checkpoint": str(tmp_path / "nope")}, explicit=True)
    (tmp_path / "notrun").mkdir()
    with pytest.raises(ValueError, match="no valid checkpoint|neither"):
        pick_checkpoint({**args, "checkpoint": str(tmp_path / "notrun")}, explicit=True)


def test_serve_names_a_busy_port_and_makes_a_private_key(tmp_path, monkeypatch, capsys):
    from cluster.serve import ensure_api_key, main, port_free

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        assert main([f"port={port}", "checkpoint="]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    assert port_free("127.0.0.1", port)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEST_KEYS", raising=False)
    ensure_api_key("TEST_KEYS")
    key_file = tmp_path / "runs" / "serve_api_key"
    key = key_file.read_text().strip()
    assert len(key) >= 32 and os.environ["TEST_KEYS"] == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key not in capsys.readouterr().err  # the key is never printed
    monkeypatch.delenv("TEST_KEYS")
    ensure_api_key("TEST_KEYS")  # the same key next time: clients keep working across restarts
    assert os.environ["TEST_KEYS"] == key


@pytest.fixture
def live_app():
    """The real FastAPI app (scripted policy, fake tools) under uvicorn on 127.0.0.1, with key `k`. The policy reads
    the cost weight in its prompt: under a low one it runs code first (a stand-in for enhance_reasoning: a simulated
    coder's program and what the sandbox printed), then answers with what the code printed; under a high one it
    answers at once."""
    from actors.serve.http import create_api
    from actors.serve.service import OrchestraService
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from tools.base import LocalToolClient

    tok = ByteTokenizer()

    def policy(prompt: str) -> str:
        if float(re.search(r"cost (-?[\d.]+)", prompt).group(1)) >= 1 or "Code outputs:" in prompt:
            return call_text("answer", model="answer-1")
        return call_text("enhance_reasoning", model="reasoner-1")

    tools = {"enhance_reasoning": FakeTool("enhance_reasoning", cost_usd=0.01, latency_s=0.5, reply="Output: 391",
                                           code_output="391\n", meta={"model": "coder", "simulated": True,
                                                                       "code": "print(17 * 23)"}),
             "answer": FakeTool("answer", cost_usd=0.02, reply="391", answers=True)}
    loop = AgentLoop(ScriptedEngine(tok, policy), LocalToolClient(tools), Prompter(tok), eos_token_ids=[tok.eos_token_id])
    app = create_api(OrchestraService(loop, ["enhance_reasoning", "answer"],
                                      {"reasoner-1": "coder", "answer-1": "gpt-5"}, max_tokens=200), api_keys=["k"])
    with serving(app, start_timeout_s=20) as url:
        yield url


def test_demo_prints_two_routes_side_by_side(live_app, monkeypatch, capsys):
    from cluster.demo import main

    monkeypatch.setenv("ORCHESTRA_API_KEY", "k")
    monkeypatch.setenv("COLUMNS", "160")
    assert main([f"url={live_app}", "question=What is 17 * 23?"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Q: What is 17 * 23?" and "routed by the served model, greedily (temperature 0)" in lines[1]
    header = next(ln for ln in lines if "accuracy-first" in ln)
    assert header.index("accuracy-first") < header.index("cost-first")  # one column per preset
    turn0 = lines.index(next(ln for ln in lines if ln.startswith("turn 0")))
    assert lines[turn0].split() == ["turn", "0", "enhance_reasoning", "reasoner-1", "answer", "answer-1"]
    assert lines[turn0 + 1].split() == ["coder", "(simulated)", "gpt-5"]
    assert lines[turn0 + 2].split() == ["$0.010000,", "0.50", "s", "$0.020000,", "0.00", "s"]
    assert lines[turn0 + 3].strip() == "ran print(17 * 23) -> 391"  # what the sandbox printed, in its column
    answer = next(ln for ln in lines if ln.startswith("answer  "))
    assert answer.split() == ["answer", "391", "391"]
    total = lines.index(next(ln for ln in lines if ln.startswith("total")))
    assert lines[total].split() == ["total", "answered", "after", "2", "turns", "answered", "after", "1", "turn"]
    assert lines[total + 1].split() == ["$0.030000,", "0.50", "s", "of", "tools", "$0.020000,", "0.00", "s", "of",
                                        "tools"]
    assert ("routes differ: accuracy-first: enhance_reasoning/reasoner-1 -> answer/answer-1; "
            "cost-first: answer/answer-1") in out
    assert "answer (cost-first): from answered by gpt-5 (not simulated)" in out
    assert "note: the embedded zoo's experts are simulated" in out  # the coder was
    assert main([f"url={live_app}", "presets=cost-first,cost-first"]) == 0
    assert "routes are the same under every preset: answer/answer-1" in capsys.readouterr().out
    monkeypatch.setenv("ORCHESTRA_API_KEY", "wrong")
    assert main([f"url={live_app}"]) == 1 and "refused the API key" in capsys.readouterr().err


def test_demo_says_where_each_answer_came_from():
    from cluster.demo import source

    coder = {"turn": 0, "tool": "enhance_reasoning", "tier": "reasoner-1", "code": "print(17 * 23)", "simulated": True}

    def answered(**call):
        return {"termination": "answered",
                "trace": [coder, {"turn": 1, "tool": "answer", "tier": "answer-4", "expert": "qwen2.5-math-7b",
                                  "simulated": True, **call}]}

    assert source(answered(answer_from="code_output")) == (
        "the sandbox's output running `print(17 * 23)` (the code was written by a simulated expert), repeated by "
        "the simulated qwen2.5-math-7b")
    assert source(answered(answer_from="document")).startswith("a retrieved passage")
    assert source(answered()) == "a simulated expert (qwen2.5-math-7b), which knows no answer to a served question"
    assert source({"termination": "max_turns", "trace": [coder]}) == "no answer (max_turns)"


def test_demo_without_a_server_or_key_says_what_to_do(tmp_path, monkeypatch, capsys):
    from cluster.demo import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCHESTRA_API_KEY", raising=False)
    assert main([]) == 2 and "no API key" in capsys.readouterr().err
    monkeypatch.setenv("ORCHESTRA_API_KEY", "k")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    assert main([f"url=http://127.0.0.1:{port}"]) == 1
    assert "run `make serve` in another terminal first" in capsys.readouterr().err
    assert main(["bogus=1"]) == 2
