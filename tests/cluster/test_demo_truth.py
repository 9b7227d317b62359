"""`make demo`'s answer checked for truth on a trained fixture (issue 48).

The fixture is a tiny policy trained here through the project's own path: template tasks (arith word problems and
bare expressions, lookups over the task set's corpus), each played with the route `make train`'s expected-value
teacher picks for its family under accuracy-first and cost-first (arith: reasoner-1 then answer-4, the sandbox
route; lookup: search-1 then answer-2) by orchestra/data/demos.scripted_samples through the real tools, learned by
actors/learner.Learner.sft_update, saved as cluster/trainer.py saves a run (checkpoint + config.yaml). It is served
from that run dir by the production wiring (actors/serve/wiring.build_service: the simulated zoo, the sandbox, the
served corpus; BM25 retrieval to keep the test short) over HTTP, and cluster/demo.py asks it. "What is 17 * 23?"
was never a training problem (template.split_of puts it in the held-out split); the policy must read it as
arithmetic and route it through the sandbox under both presets, and the demo must say the answer is true, checked
by the calculator, and made by the sandbox. A lookup question is routed to search; its answer is shown as the
retrieved passage it is, and left unchecked.

Training the fixture takes most of a minute on 2 cores: the tests that ask the trained run are `e2e` (make test-e2e);
the checks' own rules below, and the demo over HTTP with a scripted policy (tests/cluster/test_newcomer.py), run in
`make test`.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.helpers.local_server import serving

ROUTES = {"arith": [("enhance_reasoning", "reasoner-1"), ("answer", "answer-4")],
          "lookup": [("search", "search-1"), ("answer", "answer-2")]}
N_TASKS, SFT_STEPS = 32, 160


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    import torch

    from actors.learner import Learner
    from orchestra.agent.scripted import call_text
    from orchestra.config import load_config, task_tiers
    from orchestra.config.load import save_config
    from orchestra.data.demos import scripted_samples, sft_batches, sft_lr
    from orchestra.data.synth.template import generate_tasks, split_of
    from orchestra.engine import eos_token_ids
    from orchestra.policy.models import load_policy_from_config
    from orchestra.preferences import preset
    from orchestra.rundir import checkpoint
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 1M-parameter model: more threads only contend with the rest of the suite
    run = tmp_path_factory.mktemp("trained") / "run"
    run.mkdir()
    cfg = load_config(["experiment=cpu_tiny", f"run_dir={run}", f"zoo.retriever.corpus={run / 'corpus.jsonl'}",
                       "zoo.retriever.kind=bm25"])
    # the catalogue the run serves (cfg.zoo.tools), as the trainer builds its tasks
    task_set = generate_tasks(N_TASKS, seed=0, families=["arith", "lookup"], mapping=task_tiers(cfg),
                              tools=list(cfg.zoo.tools))
    assert "What is 17 * 23?" not in {t.problem for t in task_set.tasks} and split_of("What is 17 * 23?") == "heldout"
    (run / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in task_set.corpus))
    tools = LocalToolClient(build_tools(cfg.zoo, list(cfg.zoo.tools)))
    model, tok = load_policy_from_config(cfg.model, seed=cfg.seed)
    episodes = [(dataclasses.replace(t, pref=preset(p)),
                 [call_text(tool, {"model": tier}) for tool, tier in ROUTES[t.meta["family"]]])
                for t in task_set.tasks for p in ("accuracy-first", "cost-first")]
    samples = scripted_samples(episodes, tools, tok, cfg.agent.prompter_kwargs(), cfg.agent.loop_kwargs(),
                               eos_token_ids(tok), max_tokens=cfg.sampling.max_tokens)
    learner = Learner(model, pad_token_id=tok.pad_token_id, tokenizer=tok, lr=cfg.sft.lr, kl_coef=0.0,
                      micro_batch_size=cfg.sft.batch_size, seed=cfg.seed)
    for step, batch in enumerate(sft_batches(samples, SFT_STEPS, cfg.sft.batch_size, cfg.seed)):
        learner.sft_update(batch, lr=sft_lr(cfg.sft, step, SFT_STEPS))
    checkpoint.save(run, 1, lambda d: learner.save(d / "learner"), {"summary": {}})
    save_config(run, cfg)
    torch.set_num_threads(threads)
    return run, task_set


@pytest.fixture(scope="module")
def served(trained_run):
    """The run behind the real HTTP app (key `k`), as `make serve` would serve it, minus Ray."""
    from actors.serve.api import ServeSettings
    from actors.serve.http import create_api
    from actors.serve.wiring import build_service

    run, _ = trained_run
    service = build_service(ServeSettings(experiment=str(run / "config.yaml"), checkpoint=str(run), tools="local"))
    app = create_api(service, api_keys=["k"])
    with serving(app, start_timeout_s=30) as url:
        yield url


@pytest.mark.e2e
def test_the_demo_answers_arithmetic_truly_through_the_sandbox(served, monkeypatch, capsys):
    from cluster.demo import main

    monkeypatch.setenv("ORCHESTRA_API_KEY", "k")
    monkeypatch.setenv("COLUMNS", "160")
    assert main([f"url={served}"]) == 0  # the default question, both default presets
    out = capsys.readouterr().out
    assert out.startswith("Q: What is 17 * 23?\n")
    assert "routes are the same under every preset: enhance_reasoning/reasoner-1 -> answer/answer-4" in out
    answer = next(line for line in out.splitlines() if line.startswith("answer  "))
    assert answer.split() == ["answer", "391", "391"]
    for preset in ("accuracy-first", "cost-first"):
        assert (f"check ({preset}): true: the calculator computes 17 * 23 = 391; made by the sandbox") in out
        assert f"answer ({preset}): from the sandbox's output running `print(17 * 23)`" in out


@pytest.mark.e2e
@pytest.mark.parametrize("question, expression, value", [
    ("Compute 45 + 12 * 3.", "45 + 12 * 3", "81"),
    ("how much is 128 / 4 - 7", "128 / 4 - 7", "25"),
])
def test_other_phrasings_are_answered_truly(served, monkeypatch, capsys, question, expression, value):
    from cluster.demo import main

    monkeypatch.setenv("ORCHESTRA_API_KEY", "k")
    assert main([f"url={served}", f"question={question}"]) == 0
    out = capsys.readouterr().out
    for preset in ("accuracy-first", "cost-first"):
        assert f"check ({preset}): true: the calculator computes {expression} = {value}; made by the sandbox" in out


@pytest.mark.e2e
def test_a_lookup_is_searched_and_never_passed_off_as_checked(served, trained_run, monkeypatch, capsys):
    """A lookup goes to search. Whether the simulated query writer writes a usable query is its draw (keyed by the
    request's id, so it varies per request); either way the demo says what made the answer: a passage is shown as
    a passage, made by retrieval, or the answer is said to be no real one. Neither is marked checked."""
    from cluster.demo import main

    _, task_set = trained_run
    lookup = next(t for t in task_set.tasks if t.meta["family"] == "lookup" and t.meta["difficulty"] == 1)
    monkeypatch.setenv("ORCHESTRA_API_KEY", "k")
    monkeypatch.setenv("COLUMNS", "160")  # each answer cell on one line
    assert main([f"url={served}", f"question={lookup.problem}"]) == 0
    out = capsys.readouterr().out
    assert "routes are the same under every preset: search/search-1 -> answer/answer-2" in out
    for preset in ("accuracy-first", "cost-first"):
        check = next(line for line in out.splitlines() if line.startswith(f"check ({preset}): "))
        source = next(line for line in out.splitlines() if line.startswith(f"answer ({preset}): "))
        assert check.startswith(f"check ({preset}): not checked (the demo checks plain arithmetic, by the calculator)")
        if check.endswith("made by retrieval over the served corpus"):
            assert "from a retrieved passage, repeated by the simulated gpt-5-mini" in source
            assert "(a retrieved passage, not an answer)" in out
        else:
            assert check.endswith("made by no real component")
            assert "which knows no answer to a served question" in source
            assert "(no real answer: a simulated expert alone answered)" in out


def _result(answer: str, *calls: dict) -> dict:
    return {"preset": "p", "answer": answer, "termination": "answered", "trace": list(calls)}


CODER = {"turn": 0, "tool": "enhance_reasoning", "tier": "reasoner-1", "expert": "coder", "code": "print(17 * 23)",
         "simulated": True}


def _answer(turn: int = 1, tool: str = "answer", **kw) -> dict:
    return {"turn": turn, "tool": tool, "tier": "answer-4", "expert": "math-7b", "simulated": True, **kw}


def test_the_check_computes_the_question_and_names_what_made_the_answer():
    from cluster.demo import check, component

    sandbox = _result("391", CODER, _answer(answer_from="code_output"))
    assert check("What is 17 * 23?", sandbox) == (True, "true: the calculator computes 17 * 23 = 391")
    assert component(sandbox) == "the sandbox"
    wrong = _result("390", CODER, _answer(answer_from="code_output"))
    assert check("What is 17 * 23?", wrong) == (False, "false: the calculator computes 17 * 23 = 391, not 390")
    passage = _result("The Trafen opera: The Trafen opera is a opera composed by Ostvin Velyat.",
                      {"turn": 0, "tool": "search", "tier": "search-1", "simulated": True}, _answer(answer_from="document"))
    assert component(passage) == "retrieval over the served corpus"
    assert check("What is 17 * 23?", passage) == (
        False, "false: the answer holds no number; the calculator computes 17 * 23 = 391")
    alone = _result("391", _answer())  # a simulated expert alone: never true, whatever it says
    assert component(alone) is None and check("What is 17 * 23?", alone)[0] is False
    real = _result("3.5", {**_answer(turn=0), "simulated": False, "expert": "gpt-5"})
    assert check("what is 7/2", real) == (True, "true: the calculator computes 7/2 = 7/2")
    assert component(real) == "gpt-5 (a real expert)"
    assert check("Who composed The Trafen opera?", passage)[0] is None
    assert check("What is 17 * 23?", {**sandbox, "termination": "max_turns"})[0] is False


def test_a_submitted_answer_is_the_consulted_experts():
    from cluster.demo import component, shown_answer, source

    consult = _answer(turn=1, tool="consult", answer_from="code_output")
    submitted = _result("391", CODER, consult, {"turn": 2, "tool": "submit", "tier": "answer-4", "simulated": True})
    assert component(submitted) == "the sandbox" and shown_answer(submitted) == "391"
    assert source(submitted).startswith("the sandbox's output running `print(17 * 23)`")
    bare = _result("unknown", _answer(turn=0, tool="consult"), {"turn": 1, "tool": "submit", "tier": "answer-4"})
    assert component(bare) is None
    assert shown_answer(bare) == "(no real answer: a simulated expert alone answered)"
    assert source(bare) == ("submitted from a consult of a simulated expert (math-7b), which knows no answer to a "
                            "served question")
