"""The one rate limiter: per-identity buckets answering at once (Serve's 429) and waiting in turn (tool servers)."""

from __future__ import annotations

import asyncio

import pytest

from actors.rate_limit import RateLimiter


def test_take_spends_a_burst_then_says_how_long_to_wait_per_identity():
    now = [0.0]
    rl = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    assert [rl.take("a"), rl.take("a")] == [0.0, 0.0]
    assert rl.take("a") == pytest.approx(0.5) and rl.take("b") == 0.0  # b has its own bucket
    now[0] = 0.5
    assert rl.take("a") == 0.0


def test_acquire_waits_in_arrival_order_and_reports_the_wait():
    rl = RateLimiter(rate=50.0, burst=1)

    async def main() -> list[float]:
        return list(await asyncio.gather(*[rl.acquire() for _ in range(4)]))

    waits = asyncio.run(main())
    assert waits[0] < 0.01 and sorted(waits) == waits and waits[-1] >= 3 / 50 * 0.9


def test_a_zero_rate_never_limits():
    rl = RateLimiter(rate=0)
    assert rl.take() == 0.0 and asyncio.run(rl.acquire()) == 0.0
