"""The one rate limiter: token buckets per identity, `rate` per second sustained and `burst` at once.

Used by the Serve API (per API key: `take` answers at once, the wait becomes a 429's Retry-After) and by tool-server
actors (one bucket for a rate-limited provider: `acquire` waits its turn, first come first served). rate <= 0
disables it. The clock is injectable so tests need no sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class RateLimiter:
    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic,
                 max_identities: int = 10_000):
        self.rate, self.clock = float(rate), clock
        self.burst = max(float(burst if burst is not None else max(1.0, self.rate)), 1.0)
        self.max_identities = max_identities
        self._buckets: dict[str, tuple[float, float]] = {}  # identity -> (tokens, last time)
        self._lock: asyncio.Lock | None = None  # made on first acquire, inside the running loop

    def take(self, identity: str = "") -> float:
        """0.0 and a token spent if a call may go now, else the seconds until one may (nothing spent)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, last = self._buckets.get(identity, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_identities and identity not in self._buckets:
            self._buckets.clear()  # bounded memory against identity churn (open servers keyed by address)
        if tokens >= 1.0:
            self._buckets[identity] = (tokens - 1.0, now)
            return 0.0
        self._buckets[identity] = (tokens, now)
        return (1.0 - tokens) / self.rate

    async def acquire(self, identity: str = "") -> float:
        """Wait for a token; the seconds waited. Waiters are served in arrival order (one lock)."""
        if self.rate <= 0:
            return 0.0
        if self._lock is None:
            self._lock = asyncio.Lock()
        start = self.clock()
        async with self._lock:
            while (wait := self.take(identity)) > 0:
                await asyncio.sleep(wait)
        return self.clock() - start
