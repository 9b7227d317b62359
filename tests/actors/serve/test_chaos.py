"""Chaos for the Serve endpoint (issue 16; opt-in, `pytest -m chaos`): the only replica is SIGKILLed while 20
requests are in flight. Every client gets an answer or an HTTP error — none waits past its timeout — and Serve's
controller starts a new replica that answers again. The policy is the scripted test double of test_serve.py
(always routes to `answer`), slowed to 1 s a generate call so the requests are still running at the kill.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time

import httpx
import pytest

KEY = "sk-test-chaos-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
CLIENT_TIMEOUT_S = 60.0  # a request not answered by then is a hang
ARGS = {"api_keys": [KEY], "max_request_bytes": 65536, "max_tokens_limit": 512, "rate_limit_per_s": 1000,
        "rate_limit_burst": 1000, "overrides": ["agent.max_turns=2", "zoo.tools=[answer]"]}

pytestmark = pytest.mark.chaos


def slow_answer_service(settings):
    """Replica-side builder (pickled by value): a scripted policy that answers via `answer-4` after 1 s."""
    from actors.serve.service import OrchestraService
    from actors.serve.wiring import _tool_client
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.config import load_config
    from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text

    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    tok = ByteTokenizer()
    settings.tools = "local"
    engine = ScriptedEngine(tok, lambda prompt: call_text("answer", model="answer-4"), delay_s=1.0)
    loop = AgentLoop.from_config(cfg.agent, engine, _tool_client(settings, cfg), Prompter(tok),
                                 eos_token_ids=[tok.eos_token_id])
    return OrchestraService(loop, list(cfg.zoo.tools), dict(cfg.zoo.tiers), model_id=settings.model_id,
                            max_tokens=400, max_tokens_limit=settings.max_tokens_limit)


@pytest.fixture(scope="module")
def base_url(ray_cluster):
    from ray import cloudpickle, serve

    from actors.serve.app import deployment

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    dep = deployment(name="ChaosServer", ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
    try:
        serve.run(dep.bind(ARGS, slow_answer_service), name="chaos", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def replica_pid() -> int:
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::chaos")]
    assert len(names) == 1, names
    handle = ray.get_actor(names[0], namespace="serve")
    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=30)


BODY = {"model": "orchestra", "messages": [{"role": "user", "content": "what is 2 + 2?"}]}


async def one(client: httpx.AsyncClient) -> str:
    """'ok', 'error <status or exception>' or 'hang'."""
    try:
        r = await client.post("/v1/chat/completions", json=BODY, headers=AUTH)
    except httpx.TimeoutException:
        return "hang"
    except httpx.HTTPError as e:  # the connection dropped: an error the client sees at once
        return f"error {type(e).__name__}"
    return "ok" if r.status_code == 200 else f"error {r.status_code}"


def test_replica_killed_under_20_concurrent_requests(base_url, chaos_record):
    with httpx.Client(base_url=base_url, timeout=CLIENT_TIMEOUT_S) as c:
        assert c.post("/v1/chat/completions", json=BODY, headers=AUTH).status_code == 200  # warm
    pid = replica_pid()

    async def storm() -> tuple[list[str], float, float]:
        async with httpx.AsyncClient(base_url=base_url, timeout=CLIENT_TIMEOUT_S) as client:
            inflight = [asyncio.create_task(one(client)) for _ in range(20)]
            await asyncio.sleep(0.5)  # all 20 are inside the agent loop (1 s a generate call)
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            outcomes = await asyncio.gather(*inflight)
            answered = time.monotonic() - killed
            while True:  # the replica comes back: a fresh request is answered
                if await one(client) == "ok":
                    return outcomes, answered, time.monotonic() - killed
                assert time.monotonic() - killed < 120, "replica did not come back"
                await asyncio.sleep(0.2)

    outcomes, answered_s, recover_s = asyncio.run(storm())
    hangs = outcomes.count("hang")
    new_pid = replica_pid()
    chaos_record("serve_replica", survived=new_pid != pid, hang=hangs, recover_s=recover_s)
    print(f"serve replica kill: outcomes {sorted(set(outcomes))}, all answered {answered_s:.1f}s after the kill")
    assert len(outcomes) == 20 and hangs == 0, outcomes
    assert new_pid != pid
