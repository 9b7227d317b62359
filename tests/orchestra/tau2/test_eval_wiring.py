"""`python -m cluster.evaluate dataset=tau2:...` end to end: the `strongest` and `cheapest` baselines hand every
turn to call_expert; the experts are OpenAI-kind zoo experts served by fake OpenAI servers on 127.0.0.1 (one
that does the mock task right, one that writes the wrong title), tau2's user simulator talks to a third fake
server, and the official evaluator scores every trial: pass^k, $ and latency come out per policy."""

from __future__ import annotations

import json

from cluster.evaluate import main, tau2_spec
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
    assert tau2_spec(cfg, "tau2:airline") == {"domain": "airline", "version": "current", "path": "/x/tasks.json"}
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
