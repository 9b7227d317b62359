"""The run-wide spend ledger: one Ray actor that keeps paid tool calls under the run's $ cap (zoo.spend_cap_usd).

Tool servers (actors/tool_server.py) reserve a call's cost bound before the call and settle its actual cost
after; a refused reservation becomes a "budget exhausted" error result there. `SpendLedger` is the plain class
(one method at a time, so reserve/settle are atomic); `make_spend_ledger` starts it as a named actor with the
resources its caller (cluster/) gives.
"""

from __future__ import annotations

import time
from typing import Any

import ray


class SpendLedger:
    """Run-wide $ cap. Methods are synchronous and the actor runs one at a time, so reserve/settle are atomic:
    a reservation succeeds only if spent + reserved + bound <= cap, hence spent never exceeds the cap.
    A reservation never settled within `ttl_s` (its tool server died mid-call) is settled at its bound:
    what that call cost is unknown, and charging the bound keeps the cap safe without leaking capacity."""

    def __init__(self, cap_usd: float | None, ttl_s: float = 900.0):
        self.cap = None if cap_usd is None else float(cap_usd)
        self.ttl_s = float(ttl_s)
        self.spent = self.reserved = 0.0
        self.open: dict[str, tuple[float, float]] = {}  # token -> (bound, time reserved); insertion-ordered
        self.counter = 0
        self.refused = self.settled = self.expired = 0

    def _expire(self) -> None:
        now = time.monotonic()
        while self.open:
            token, (bound, stamp) = next(iter(self.open.items()))
            if now - stamp < self.ttl_s:
                break
            self.expired += 1
            self.settle(token, bound)

    def reserve(self, bound: float) -> dict[str, Any]:
        self._expire()
        bound = max(float(bound), 0.0)
        if self.cap is not None and self.spent + self.reserved + bound > self.cap + 1e-12:
            self.refused += 1
            return {"ok": False, "cap": self.cap, "spent": self.spent, "reserved": self.reserved, "bound": bound}
        self.counter += 1
        token = f"r{self.counter}"
        self.open[token] = (bound, time.monotonic())
        self.reserved += bound
        return {"ok": True, "token": token}

    def settle(self, token: str, actual: float) -> float:
        """Release the reservation and record the actual cost; returns the total spent."""
        entry = self.open.pop(token, None)
        if entry is None:  # already expired (charged at its bound) or never made
            return self.spent
        self.reserved = self.reserved - entry[0] if self.open else 0.0  # no float dust once all are settled
        self.spent += max(float(actual), 0.0)
        self.settled += 1
        return self.spent

    def state(self) -> dict[str, Any]:
        return {"cap": self.cap, "spent": self.spent, "reserved": self.reserved, "open": len(self.open),
                "refused": self.refused, "settled": self.settled, "expired": self.expired}


def make_spend_ledger(cap_usd: float | None, *, name: str = "spend_ledger", namespace: str | None = None,
                      num_cpus: float = 0.0) -> Any:
    opts: dict[str, Any] = dict(name=name, num_cpus=num_cpus, max_restarts=0, max_concurrency=1)
    if namespace:
        opts["namespace"] = namespace
    return ray.remote(SpendLedger).options(**opts).remote(cap_usd)
