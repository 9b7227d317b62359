"""Near-ties: whether a replayed token that differs from the recorded one is explained by last-bit differences.

A batched forward pass and a batch-of-one pass need not give bit-identical logits: matrix kernels pick their
blocking, and so their reduction order, by shape (on some CPUs the difference is 0, on others ~1e-6; on GPUs
batch-variant kernels are the rule). A seeded episode replayed alone therefore sees logits a few ulps away from
the ones it was sampled under, and where its draw fell within that distance of a token boundary the replayed
token flips. That says nothing about the code. The rule here separates it from a real divergence:

- **sampled rows** (temperature > 0; orchestra/engine/sampling.py draws one uniform u per token and inverts the
  CDF of the filtered probabilities): the flip is a near-tie when moving u by at most `tol` of the probability
  mass would have drawn the recorded token (its interval lies within `tol` of u), and the recorded token has
  non-zero probability under the replayed filter;
- **greedy rows**: when the recorded token's log-prob is within `tol` of the replayed argmax's;
- in both cases, when the record has the token's log-prob (records written since this rule), the replayed
  log-prob of the recorded token must also lie within `tol` of it: the model computed the same distribution.

A perturbation of the logits by at most d moves every CDF point by at most ~2d, so `tol` = 1e-3 covers kernel
noise (measured ~5e-6 on a 2-core CPU) with room, while a changed weight, prompt or sampler moves log-probs by far
more and stays a divergence. `Follower` is the HF engine's sampler during replay (cluster/replay.py): it draws as
`sample_rows` does and, at a near-tie, keeps the recorded token (so the episode's later turns, tool calls and
reward can still be compared) and notes the tie; at a real divergence it stops following the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TIE_TOL = 1e-3


@dataclass(frozen=True)
class Tie:
    """One recorded token kept at a near-tie: where, which two tokens, and by how much."""

    turn: int
    index: int
    recorded: int
    replayed: int
    margin: float  # probability mass (sampled) or log-prob gap (greedy) between the draw and the recorded token


def judge(logp: Any, recorded: int, replayed: int, *, probs: Any = None, u: float | None = None,
          recorded_logprob: float | None = None, tol: float = TIE_TOL) -> tuple[bool, float, str]:
    """(near-tie?, margin, why not) for one position whose replayed token differs from the recorded one.
    `logp`: the replayed tempered log-probs over the vocabulary (one row); `probs` and `u`: the filtered
    probabilities and the uniform drawn (None for a greedy row)."""
    lp = float(logp[recorded])
    if recorded_logprob is not None and abs(lp - recorded_logprob) > tol:
        return False, abs(lp - recorded_logprob), (f"the recorded token's log-prob is {lp:.6g} now, "
                                                   f"{recorded_logprob:.6g} in the record")
    if probs is None or u is None:  # greedy: the two best log-probs must be level within tol
        gap = float(logp[replayed]) - lp
        return gap <= tol, gap, f"greedy: the replayed argmax leads the recorded token by {gap:.3g} in log-prob"
    p = probs.double()
    if float(p[recorded]) <= 0.0:
        return False, 1.0, "the recorded token is outside the replayed top-k / top-p set"
    total = float(p.sum())
    hi = float(p[: recorded + 1].sum())
    lo = hi - float(p[recorded])
    x = u * total
    margin = (lo - x if x < lo else x - hi) / total
    return margin <= tol, margin, f"the draw lies {margin:.3g} of the probability mass from the recorded token"


@dataclass
class Follower:
    """The HF engine's sampler during replay, at batch size 1: `expect(turn, ids, logprobs)` before each generate
    call (ids None: nothing to follow, e.g. the prompt already differs), then the engine calls it per token."""

    tol: float = TIE_TOL
    ties: list[Tie] = field(default_factory=list)
    divergence: str = ""  # the first real divergence, described; "" while none
    max_logprob_diff: float = 0.0  # over followed tokens whose log-prob the record holds
    worst: str = ""  # where that largest difference sits
    _turn: int = 0
    _ids: list[int] | None = None
    _lps: list[float] | None = None
    _pos: int = 0

    def expect(self, turn: int, ids: list[int] | None, logprobs: list[float] | None = None) -> None:
        self._turn, self._ids, self._lps, self._pos = turn, ids, logprobs, 0

    def __call__(self, logits: Any, rows: list[Any]) -> tuple[Any, Any]:
        from orchestra.engine.sampling import draw_rows

        if len(rows) != 1:
            raise RuntimeError(f"Follower replays one episode at a time, got a batch of {len(rows)}")
        d = draw_rows(logits, rows)
        k, self._pos = self._pos, self._pos + 1
        if self._ids is None or k >= len(self._ids):
            return d.tokens, d.token_logprobs()
        want, got = self._ids[k], int(d.tokens[0])
        rec_lp = self._lps[k] if self._lps is not None and k < len(self._lps) else None
        if rec_lp is not None:
            diff = abs(float(d.logp[0, want]) - rec_lp)
            if diff > self.max_logprob_diff:
                self.max_logprob_diff, self.worst = diff, f"turn {self._turn} token {k}"
        if got == want:
            return d.tokens, d.token_logprobs()
        sampled = bool(d.sampled)
        tie, margin, why = judge(d.logp[0], want, got, probs=d.probs[0] if sampled else None,
                                 u=float(d.u[0, 0]) if sampled else None, recorded_logprob=rec_lp, tol=self.tol)
        if not tie:  # a real divergence: from here on the replay runs free and is compared as it comes
            self.divergence = self.divergence or f"turn {self._turn} token {k}: not a near-tie ({why})"
            self._ids = None
            return d.tokens, d.token_logprobs()
        self.ties.append(Tie(self._turn, k, want, got, margin))
        d.tokens[0] = want
        return d.tokens, d.token_logprobs()


def compare_runs(a: Any, b: Any, tol: float = TIE_TOL) -> tuple[str, str]:
    """Two Generations of one seeded request (e.g. alone and in a batch, on an engine whose draws are not visible,
    such as vLLM): ("same" | "near-tie" | "diverged", where and why). Without the draw, a differing token counts
    as a near-tie when every log-prob before it agrees within `tol` — the engine computed the same distributions,
    so only the side of a token boundary the draw fell on can differ — and as diverged otherwise."""
    if list(a.token_ids) == list(b.token_ids):
        lp = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0)
        return ("same", "") if lp <= tol else ("diverged", f"same tokens, log-probs {lp:.3g} apart")
    j = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
             min(len(a.token_ids), len(b.token_ids)))
    lp = max((abs(x - y) for x, y in zip(a.logprobs[:j], b.logprobs[:j])), default=0.0)
    if lp > tol:
        return "diverged", f"token {j} differs after log-probs {lp:.3g} apart"
    return "near-tie", f"token {j} differs; the {j} tokens before it agree within {lp:.2g} in log-prob"
