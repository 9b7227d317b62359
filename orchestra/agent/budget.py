"""An episode's hard caps on $ and seconds, checked the same way by every episode runner (the agent loop and
τ²'s driver): `exceeded` after each call ($ is enforced before each paid call, through `usd_left` in the tool's
context; this catches a tool that charged beyond its bound), `usd_left` for the next call's refusal check.
Turn caps are the runners' own loop bounds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeBudget:
    usd: float | None = None  # None: uncapped
    seconds: float | None = None

    def exceeded(self, cost_usd: float, seconds: float) -> bool:
        if self.usd is not None and cost_usd > self.usd + 1e-12:
            return True
        return self.seconds is not None and seconds >= self.seconds

    def usd_left(self, cost_usd: float) -> float | None:
        return None if self.usd is None else self.usd - cost_usd
