"""The user-simulator Ray actor against a fake OpenAI server on 127.0.0.1 (slow: the actor's process
imports tau2's user simulator and litellm, ~5-20 s depending on machine load)."""

from __future__ import annotations

import pytest

from tests.helpers.fake_openai import FakeOpenAI


@pytest.mark.slow
async def test_actor_drives_tau2_user_and_detects_stops(ray_cluster, mock_domain):
    from actors.user_simulator import RayUserClient, make_user_simulator

    def reply(messages):
        return "I want to leave. ###TRANSFER###" if len(messages) > 2 else "Please create my task."

    task = mock_domain.tasks("v0.2.0")[0]
    with FakeOpenAI(reply) as server:
        actor = make_user_simulator(model="openai/fake-user", api_base=server.base_url, timeout_s=10,
                                    num_retries=0)
        user = RayUserClient(actor, timeout_s=120)
        await user.open("e1", task.model_dump(mode="json"))
        first = await user.reply("e1", "Hi! How can I help you today?")
        assert first["text"] == "Please create my task." and first["stop"] is None and first["error"] is None
        second = await user.reply("e1", "Which title?")
        assert second["stop"] == "transfer"
        await user.close("e1")
        missing = await user.reply("e1", "anyone?")
        assert missing["error"] and "no open user conversation" in missing["error"]
        # the scenario reached the LLM as tau2 writes it (guidelines + <scenario>)
        assert "<scenario>" in server.requests[0]["messages"][0]["content"]
        ray_cluster.kill(actor)
