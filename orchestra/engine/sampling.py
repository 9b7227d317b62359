"""Token sampling for the HF engine: one token per batch row under that row's own settings.

Temperature, top-k and top-p apply per row; a row whose request carries a seed draws from its own generator, so
its tokens do not depend on which batch it ran in. Logprobs are log_softmax(logits / temperature) at the drawn
token, before top-k / top-p filtering: the quantity the learner recomputes. `draw_rows` also returns what each row
drew from, for replay's near-tie rule (orchestra/engine/ties.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestra.engine import Sampling


@dataclass
class Draws:
    """One decode step's draws for a batch: the tokens, every row's tempered log-probs (B, V), and for the rows that
    sample (`sampled`, temperature > 0) their filtered probabilities and the uniform each drew (what a replay needs
    to tell a near-tie from a real divergence, orchestra/engine/ties.py)."""

    tokens: Any
    logp: Any
    sampled: list[int]
    probs: Any = None
    u: Any = None

    def token_logprobs(self) -> Any:
        return self.logp.gather(1, self.tokens[:, None]).squeeze(1)


def sample_rows(logits: Any, rows: list[Any]) -> tuple[Any, Any]:
    """One token per row under that row's `sampling` (and `generator`, when seeded); returns (token ids, their
    logprobs)."""
    d = draw_rows(logits, rows)
    return d.tokens, d.token_logprobs()


def draw_rows(logits: Any, rows: list[Any]) -> Draws:
    """`sample_rows` with what it drew from: see `Draws`."""
    import torch

    temps = [r.sampling.temperature for r in rows]
    temp = torch.tensor([t if t > 0 else 1.0 for t in temps], device=logits.device, dtype=logits.dtype)
    scaled = logits / temp[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, t in enumerate(temps) if t > 0]
    if not sampled:
        return Draws(tokens, logp, sampled)
    every = len(sampled) == len(rows)  # the usual case: no row copies
    filtered = filter_top_k_top_p(scaled if every else scaled[sampled], [rows[i].sampling for i in sampled])
    probs = torch.softmax(filtered, dim=-1)
    # One uniform per row, not torch.multinomial's one exponential per vocabulary entry (a tenth of a CPU
    # decode step); a seeded request draws its uniform from its own stream, whatever its batch.
    u = torch.rand(len(sampled), 1, dtype=torch.float64, device=logits.device)
    for j, i in enumerate(sampled):
        if rows[i].generator is not None:
            u[j] = torch.rand(1, dtype=torch.float64, device=logits.device, generator=rows[i].generator)
    draws = inverse_cdf(probs, u)
    if every:
        tokens = draws
    else:
        tokens[sampled] = draws
    return Draws(tokens, logp, sampled, probs, u)


def inverse_cdf(probs: Any, u: Any) -> Any:
    """The first token whose cumulative probability exceeds u * total, per row: never a zero-probability token
    (the clamp covers u * total rounding up to the total)."""
    import torch

    cdf = probs.double().cumsum(-1)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(-1)
    return torch.minimum(idx, last)


def filter_top_k_top_p(scaled: Any, samplings: list[Sampling]) -> Any:
    """Top-k then top-p (nucleus) masking of tempered logits, per row."""
    import torch

    vocab = scaled.shape[-1]
    ks = [s.top_k if 0 < s.top_k < vocab else 0 for s in samplings]
    ps = [s.top_p for s in samplings]
    if not any(ks) and all(p >= 1.0 for p in ps):
        return scaled
    sorted_vals, sorted_idx = scaled.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=scaled.device)[None, :]
    k = torch.tensor([k or vocab for k in ks], device=scaled.device)[:, None]
    drop = rank >= k
    probs = torch.softmax(sorted_vals.masked_fill(drop, float("-inf")), dim=-1)
    before = probs.cumsum(-1) - probs  # mass strictly above each token: keep while it is below top_p
    drop |= before >= torch.tensor(ps, device=scaled.device, dtype=scaled.dtype)[:, None]
    drop[:, 0] = False
    return scaled.scatter(1, sorted_idx, sorted_vals.masked_fill(drop, float("-inf")))
