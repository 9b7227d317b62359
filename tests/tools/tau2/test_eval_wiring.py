"""`python -m cluster.evaluate dataset=tau2:...` end to end: the `strongest` and `cheapest` baselines hand every
turn to call_expert; the experts are OpenAI-kind zoo experts served by fake OpenAI servers on 127.0.0.1 (one
that does the mock task right, one that writes the wrong title), tau2's user simulator talks to a third fake
server, and the official evaluator scores every trial: pass^k, $ and latency come out per policy."""

from __future__ import annotations

import json

from cluster.evaluate import main
from cluster.tau2_eval import tau2_spec
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.fakes import call_text


def _expert(title):
    """An expert in call_expert's output convention: create the task, then tell the user it is done."""
    def reply(messages):
        if any(str(m.get("content", "")).startswith("<tool_response>") for m in messages):
            return "<think>it worked</think><message>Done: the task is created.</message>"
        return call_text("create_task", user_id="user_1", title=title)
    return reply


def _user(messages):
    last = messages[-1]["content"] if messages else ""
    return "Thanks! ###STOP###" if "created" in last else "Please create a task 'Important Meeting' for user_1."


def test_tau2_spec_fills_from_config():
    from orchestra.config import load_config

    cfg = load_config(["experiment=tau2_airline", "tau2.task_version=current", "tau2.tasks_path=/x/tasks.json"])
    # the preset's own source: its held-out split (data.splits=train,test); another dataset: all its tasks
    assert tau2_spec(cfg, "tau2:airline") == {"domain": "airline", "version": "current", "path": "/x/tasks.json",
                                              "split": "test"}
    assert tau2_spec(cfg, "tau2")["domain"] == "airline"
    assert tau2_spec(cfg, "tau2:mock:v0.2.0:/y.json") == {"domain": "mock", "version": "v0.2.0", "path": "/y.json"}


def test_evaluate_tau2_baselines_report_pass_k_cost_latency(mock_domain, tmp_path):
    task = next(t for t in mock_domain.tasks("v0.2.0") if t.id == "create_task_1")
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps([task.model_dump(mode="json")]))
    with FakeOpenAI(_expert("Important Meeting")) as good, FakeOpenAI(_expert("Unimportant Meeting")) as bad, \
            FakeOpenAI(_user) as user:
        rc = main([f"dataset=tau2:mock:v0.2.0:{tasks_file}", "seeds=2", "n=1", f"out={tmp_path / 'eval'}",
                   "experiment=tau2_airline", "agent.max_turns=6", "agent.max_context_tokens=60000",
                   "sampling.max_tokens=200", "tau2.user_model=openai/fake-user", f"tau2.user_api_base={user.base_url}",
                   "tau2.user_num_retries=0", "tau2.concurrency=2",
                   "zoo.experts.gpt-5.kind=openai", f"zoo.experts.gpt-5.base_url={good.base_url}",
                   "zoo.experts.gpt-5-mini.kind=openai", f"zoo.experts.gpt-5-mini.base_url={bad.base_url}",
                   "zoo.experts.qwen3-32b.kind=openai", f"zoo.experts.qwen3-32b.base_url={bad.base_url}"])
        assert rc == 0
        assert {r["model"] for r in good.requests} == {"gpt-5"} and len(good.requests) == 4  # 2 trials x 2 calls
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    strong, cheap = report["policies"]["strongest"], report["policies"]["cheapest"]
    assert report["trials"] == 2 and strong["episodes"] == cheap["episodes"] == 2
    assert strong["pass^1"] == 1.0 and strong["pass^2"] == 1.0 and strong["terminations"] == {"user_stop": 2}
    assert cheap["pass^1"] == 0.0 and cheap["terminations"] == {"user_stop": 2}  # wrong DB: stopped but failed
    # $ is the experts' tokens at their prices (fake usage: 50 in / 10 out per call, 2 calls an episode)
    assert strong["mean_cost_usd"] > cheap["mean_cost_usd"] > 0 and strong["mean_latency_s"] > 0
    rows = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["tool_counts"] == {r["tool_counts"] and next(iter(r["tool_counts"])): 2}
                                  for r in rows)
    assert "| strongest | 1 | 1 |" in (tmp_path / "eval" / "report.md").read_text()


def test_evaluate_tau2_with_no_reachable_user_exits_nonzero_with_the_cause(mock_domain, tmp_path):
    """Every episode fails (the user simulator's endpoint refuses connections): no report of zeros, a non-zero
    exit whose message is the first episode's real error. num_retries=1 takes litellm's retry path, which imports
    tenacity: without it the error read "tenacity import failed" for every episode."""
    import socket

    import pytest

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    task = next(t for t in mock_domain.tasks("v0.2.0") if t.id == "create_task_1")
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps([task.model_dump(mode="json")]))
    with FakeOpenAI(_expert("Important Meeting")) as good, pytest.raises(SystemExit) as stop:
        main([f"dataset=tau2:mock:v0.2.0:{tasks_file}", "seeds=2", "n=1", f"out={tmp_path / 'eval'}",
              "experiment=tau2_airline", "baselines=cheapest", "agent.max_turns=2", "tau2.user_model=openai/fake-user",
              f"tau2.user_api_base={dead}", "tau2.user_num_retries=1", "tau2.user_timeout_s=5",
              *[f"zoo.experts.{e}.{k}" for e in ("gpt-5", "gpt-5-mini", "qwen3-32b")
                for k in ("kind=openai", f"base_url={good.base_url}")]])
    message = str(stop.value.code)
    assert message.startswith("evaluation failed: every episode (2) ended in an error"), message
    assert "Connection error" in message and "tenacity" not in message, message
    assert f"tau2.user_api_base={dead}" in message  # where to look
    assert not (tmp_path / "eval" / "report.json").exists()
    rows = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["termination"] == "user_error" for r in rows)


def test_all_failed_only_when_every_episode_errored():
    from cluster.eval_policies import all_failed

    assert all_failed([]) is None
    assert all_failed([{"error": None}, {"error": "boom"}]) is None  # a partial failure is still a result
    msg = all_failed([{"error": "EngineError: out of memory"}, {"error": "later"}], hint=" (user hint)")
    assert msg.endswith("the first: EngineError: out of memory")  # the hint is for user-simulator errors only
    assert all_failed([{"error": "user simulator failed: x"}], hint=" (user hint)").endswith("x (user hint)")
