"""Preference vectors P: named presets (evaluation, serving) and the per-task training sampler.

A preference is a plain dict over `accuracy`, `cost`, `latency` and `tool:<id>` (`Preference` below, checked by
`check_preference`; orchestra.types re-exports both). This module imports nothing of the core: it is the ground
floor the configuration, the contracts and the prompt all read.
What the weights *mean* is the reward's business (reward/rubric.py); this module only chooses them.

Presets (weights are relative; the toolorchestra rubric min-max normalises every feature over a group):
- accuracy-first {accuracy 1, cost 0.05, latency 0}: correctness dominates, cost only breaks ties.
- balanced       {accuracy 1, cost 0.5, latency 0.2}: a cheaper correct answer is clearly preferred,
                  a faster one somewhat; the default for evaluation and `heldout_reward_gain`.
- cost-first     {accuracy 1, cost 2, latency 0.2}: the cheapest correct route wins.
- latency-first  {accuracy 1, cost 0.3, latency 2}: the fastest correct route wins.
Accuracy stays at 1 everywhere: an incorrect episode scores 0 under toolorchestra whatever P is, so the
presets trade off only *among correct* routes; the cost weight rises accuracy-first < balanced < cost-first,
which is what the `quality_monotone` benchmark checks.

Training scheme (after ToolOrchestra §3: each training instance carries its own preference vector so the
policy learns to read P from the prompt rather than one fixed trade-off). Our choice, per task:
- with probability `preset_prob` (0.25) one of the presets, so the named points are well covered;
- otherwise accuracy ~ U[0.5, 1] (always positive: being right always matters), cost and latency each
  ~ U[0, 1], but each is zeroed with probability 0.25 so "don't care" is seen too;
- with probability `tool_prob` (0.3) one or two tool ids get a weight in ±U[0.2, 0.6]: a user who likes
  (+) or avoids (-) a tool, as the paper's preference-aware reward counts tool use per id.
Weights are rounded to 2 decimals so prompts stay short and stable.

The expected-value teacher can instead draw vectors over a range (`sample_range`: accuracy 1, the cost weight
log-uniform, latency zero or log-uniform), which it labels for any vector; a small policy reads such vectors in
bins (orchestra/agent/prompt.py `preference_text`). The adherence sweep (`SWEEP_COSTS`, scored by
orchestra/eval/adherence.py) is defined here too, so that training can keep clear of it: `check_disjoint` raises
when a training vector is a sweep vector, and `sample_range` redraws any draw that lands on one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

Preference = dict[str, float]
BASE_FEATURES = ("accuracy", "cost", "latency")


def check_preference(pref: dict[str, Any]) -> Preference:
    """Return P as floats; raise ValueError naming the bad feature (unknown name, non-number, NaN)."""
    out: Preference = {}
    for key, value in pref.items():
        if key not in BASE_FEATURES and not (isinstance(key, str) and key.startswith("tool:") and len(key) > 5):
            raise ValueError(f"preference feature {key!r} is unknown; use {BASE_FEATURES} or 'tool:<id>'")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"preference feature {key!r} must be a finite number, got {value!r}")
        out[key] = float(value)
    return out


PRESETS: dict[str, Preference] = {
    "accuracy-first": {"accuracy": 1.0, "cost": 0.05, "latency": 0.0},
    "balanced": {"accuracy": 1.0, "cost": 0.5, "latency": 0.2},
    "cost-first": {"accuracy": 1.0, "cost": 2.0, "latency": 0.2},
    "latency-first": {"accuracy": 1.0, "cost": 0.3, "latency": 2.0},
}
# Ordered by rising cost weight; `quality_monotone` expects $ to fall along this order.
COST_ORDER = ("accuracy-first", "balanced", "cost-first")


def preset(name: str) -> Preference:
    """A copy of the named preset; unknown names raise ValueError listing the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown preference preset {name!r}; choose one of {sorted(PRESETS)}")
    return dict(PRESETS[name])


def parse_preference(spec: str | dict) -> Preference:
    """A preset name, or `accuracy=1,cost=0.5,tool:search=-0.3`, or a dict -> validated Preference."""
    if isinstance(spec, dict):
        return check_preference(spec)
    spec = spec.strip()
    if spec in PRESETS:
        return preset(spec)
    if "=" not in spec:
        raise ValueError(f"unknown preference preset {spec!r}; choose one of {sorted(PRESETS)} "
                         "or write weights as 'accuracy=1,cost=0.5'")
    out: dict[str, float] = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"preference weight {part!r} is not key=number") from None
    return check_preference(out)


def sample_preference(rng: random.Random, tool_ids: Sequence[str] = (), preset_prob: float = 0.25,
                      tool_prob: float = 0.3) -> Preference:
    """One training preference vector (scheme in the module docstring); deterministic given `rng`."""
    if rng.random() < preset_prob:
        pref = preset(rng.choice(sorted(PRESETS)))
    else:
        pref = {"accuracy": round(rng.uniform(0.5, 1.0), 2)}
        for feature in ("cost", "latency"):
            pref[feature] = 0.0 if rng.random() < 0.25 else round(rng.uniform(0.0, 1.0), 2)
    if tool_ids and rng.random() < tool_prob:
        for tool in rng.sample(sorted(tool_ids), k=min(len(tool_ids), rng.choice((1, 2)))):
            pref[f"tool:{tool}"] = round(rng.choice((-1, 1)) * rng.uniform(0.2, 0.6), 2)
    return check_preference(pref)


# The adherence sweep: accuracy 1, latency 0, the cost weight per half decade (where the expected-value labels'
# mean $ roughly halves per point on the simulated zoo). No preset is on it; sampled training vectors avoid it.
SWEEP_COSTS = (0.03, 0.1, 0.3, 1.0, 3.0)
SWEEP_PREFIX = "sweep:cost="
# SFT's check of the policy on *training* tasks (cluster/sft_check.train_check, sft.until_follows) walks its own cost
# ladder, one point in each of the sweep's bins but never one of its weights: whether $ falls along the bin words
# is decided on training tasks, and the held-out sweep stays a test on tasks and weights SFT never saw. Each rung reads
# a tenth of a level above its sweep point (level 4.6 where the sweep shows 4.5; 3.5e-1 where it shows 3.0e-1): the
# same bin at nearly the same spot, on its cheaper side, so the check asks on training tasks what the verdict asks
# on held-out ones. The rungs sat at each bin's dear end before (0.02, 0.07, 0.2, 0.6, 2), where the router spends
# the most of the bin, and a policy spending one $ over three bins passed there by spending no more than its router
# (docs/recipe.md)
CHECK_COSTS = (0.035, 0.11, 0.35, 1.1, 3.5)


def sweep_vectors(weights: Sequence[float] = SWEEP_COSTS) -> dict[str, Preference]:
    """Named vectors of the sweep (the names carry the weight: `sweep:cost=0.03`, ...)."""
    return {f"{SWEEP_PREFIX}{w:g}": {"accuracy": 1.0, "cost": float(w), "latency": 0.0} for w in weights}


def _key(pref: Preference) -> tuple[tuple[str, float], ...]:
    """A vector as a comparable key: features at weight 0 and absent ones are the same, weights to 1e-9."""
    return tuple(sorted((k, round(float(v), 9)) for k, v in pref.items() if round(float(v), 9) != 0))


def is_among(pref: Preference, vectors: Iterable[Preference]) -> bool:
    """Whether `pref` is one of `vectors` (absent features count as 0)."""
    return _key(pref) in {_key(v) for v in vectors}


def check_disjoint(sweep: Iterable[Preference], training: Iterable[Preference], what: str = "training") -> None:
    """Raise ValueError naming the first sweep vector that is also a `what` vector: a figure over the sweep must
    measure vectors the policy was never trained on."""
    seen = {_key(p) for p in training}
    for p in sweep:
        if _key(p) in seen:
            raise ValueError(f"the adherence sweep's vector {dict(p)} is also a {what} vector; the sweep must hold "
                             "only vectors no training used")


# A weight as a level (agent.number_format "level"): 2 per decade, 5.5 at weight 1, one decimal, so each whole level
# is one half decade, the bins' (0.03 reads 2.5, 0.1 3.5, 0.3 4.5, 1 5.5, 3 6.5), and a tenth a 12 % step. The tiny
# tokenizer reads " 2", ".", "5": one token names the bin, the next the step within it, each seen in training with
# every other, while the few levels kept out of training (the sweep's) are pairs of seen tokens. Whole levels on 20
# a decade ("cost 25") were one merged token each, those kept out never seen, and one-decimal ones ("24.5") made
# the bin a lookup over sixty tokens (docs/recipe.md). Nonzero weights read 0.1-9.9 (clamped: below 0.002 reads
# 0.1, above 158 reads 9.9), 0 as "0", a negative weight with "-".
LEVEL_PER_DECADE, LEVEL_AT_ONE, LEVEL_MIN, LEVEL_MAX = 2.0, 5.5, 0.1, 9.9


def level_of(x: float) -> str:
    """The level `x` reads as: "2.5" for 0.03, "-3.5" for -0.1, "0" for 0."""
    if x == 0:
        return "0"
    lv = min(LEVEL_MAX, max(LEVEL_MIN, LEVEL_PER_DECADE * math.log10(abs(x)) + LEVEL_AT_ONE))
    return ("-" if x < 0 else "") + f"{lv:.1f}"


def weight_of_level(text: str) -> float:
    """The weight a level stands for (the inverse of `level_of` up to its rounding): "2.5" -> 0.0316."""
    lv = float(text)
    if lv == 0:
        return 0.0
    return math.copysign(10 ** ((abs(lv) - LEVEL_AT_ONE) / LEVEL_PER_DECADE), lv)


def readings(x: float) -> set[str]:
    """How a weight per unit of accuracy can read in a prompt with numbers: two significant digits (sci, plain)
    and its level."""
    return {f"{x:.1e}", "L" + level_of(x)}


def _sig(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}")


def sample_range(rng: random.Random, cost: Sequence[float], latency: Sequence[float], latency_zero: float = 0.5,
                 avoid: Iterable[Preference] = ()) -> Preference:
    """One vector over a range: accuracy 1, cost log-uniform in [cost[0], cost[1]], latency 0 with probability
    `latency_zero` else log-uniform in [latency[0], latency[1]] (3 significant digits). A draw whose cost weight
    reads as that of a vector of `avoid` (the adherence sweep), whatever its latency, to two significant digits or as
    a level (`readings`), is drawn again: the sweep stays unseen in training, and so does each of its cost weights as
    a number the prompt shows (agent.preference_numbers, in any number format)."""
    avoid = list(avoid)
    costs = set().union(*(readings(float(v.get("cost", 0.0))) for v in avoid))
    for _ in range(100):
        pref = {"accuracy": 1.0, "cost": _sig(math.exp(rng.uniform(math.log(cost[0]), math.log(cost[1])))),
                "latency": 0.0 if rng.random() < latency_zero else
                _sig(math.exp(rng.uniform(math.log(latency[0]), math.log(latency[1]))))}
        if not is_among(pref, avoid) and not readings(pref["cost"]) & costs:
            return pref
    raise ValueError(f"sampling cost in {list(cost)}, latency in {list(latency)} hit the avoided vectors 100 times")


def parse_pairs(spec: str) -> tuple[int, list[Preference]]:
    """`data.preference_pairs` -> (K sampled per task, fixed vectors). `sampled:K` gives (K, []), `A|B|...`
    gives (0, [A, B, ...]); at least two vectors either way (one is plain GRPO, not a pairing)."""
    spec = spec.strip()
    if spec.startswith("sampled:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"{spec!r}: K in sampled:K must be an integer") from None
        if k < 2:
            raise ValueError(f"{spec!r}: pairing needs K >= 2 vectors per task")
        return k, []
    vectors = [parse_preference(part) for part in spec.split("|")]
    if len(vectors) < 2:
        raise ValueError(f"{spec!r}: pairing needs at least two vectors (`A|B`)")
    return 0, vectors


def paired_preferences(spec: str, task_id: str, step: int, seed: int, tool_ids: Sequence[str] = ()
                       ) -> list[Preference]:
    """The vectors one training task is rolled out under in one step (see `parse_pairs`). Sampled vectors
    are drawn from a stream seeded by (seed, step, task id): a resumed run draws the same ones."""
    k, fixed = parse_pairs(spec)
    if fixed:
        return [dict(p) for p in fixed]
    rng = random.Random(f"pairs:{seed}:{step}:{task_id}")
    return [sample_preference(rng, tool_ids) for _ in range(k)]
