"""Group advantages from episode rewards: one normalisation per rubric, never two.

- toolorchestra: `group_advantages` — A = clip((R − mean)/(std + 1e-6), −clip, clip) with the SAMPLE std
  (ddof=1); a group whose std <= min_std carries no learning signal and is dropped (all advantages 0).
- scalar: `scalar_advantages` — verl 0.9.1's own `compute_grpo_outcome_advantage` (mean/std per group id,
  torch.std is the sample std; a group of one gets mean 0, std 1, i.e. A = R, as verl does). verl is imported
  lazily: it is heavy and pulls in ray, which `import reward` must not. `scalar_group_advantages` then applies
  the toolorchestra path's guard to these too: groups with std <= min_std dropped, the rest clipped.
Each rubric's advantage function (reward/rubric.py RUBRICS) takes every group's rewards at once and returns,
per group, (advantages, dropped).
The learner applies these per episode (every turn sample of an episode shares its episode's advantage).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

EPSILON = 1e-6


def group_advantages(rewards: Sequence[float], min_std: float = 0.1,
                     clip: float = 3.0) -> tuple[list[float], bool]:
    """(advantages, dropped) for one group. Fewer than two rewards can not be normalised: dropped."""
    values = [float(r) for r in rewards]
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"rewards must be finite, got {values}")
    if clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    n = len(values)
    if n < 2:
        return [0.0] * n, True
    mean, std = sum(values) / n, group_std(values)
    if std <= min_std:
        return [0.0] * n, True
    return [max(-clip, min(clip, (v - mean) / (std + EPSILON))) for v in values], False


def group_std(values: Sequence[float]) -> float:
    """Sample std (ddof=1, as torch.std in verl); 0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def scalar_advantages(rewards: Sequence[float], group_ids: Sequence[Hashable],
                      epsilon: float = EPSILON, norm_by_std: bool = True) -> list[float]:
    """GRPO outcome advantages through verl's `compute_grpo_outcome_advantage` (one reward per episode);
    `norm_by_std=False`: mean-centred only (verl's norm_adv_by_std_in_grpo=False, as Dr. GRPO)."""
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    if not rewards:
        return []
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    # verl takes token-level rewards (bs, L) and sums them; one column holding the outcome is exactly that.
    token_rewards = torch.tensor([[float(r)] for r in rewards], dtype=torch.float32)
    mask = torch.ones_like(token_rewards)
    index = np.array([str(g) for g in group_ids], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(token_rewards, mask, index, epsilon=epsilon,
                                            norm_adv_by_std_in_grpo=norm_by_std)
    return [float(a) for a in adv[:, 0]]


def import_verl_math() -> None:
    """Import what `scalar_advantages` needs now (torch and verl: ~7 s of one core on this project's CPU machine).
    The reward actor runs it in a thread as it starts: otherwise the import lands inside its first group's scoring,
    where every rollout of the first RL step waits on it."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: F401


GroupAdvantages = list[tuple[list[float], bool]]


def toolorchestra_advantages(groups: Sequence[Sequence[float]], min_std: float = 0.1,
                             clip: float = 3.0, norm_by_std: bool = True) -> GroupAdvantages:
    """`group_advantages` of each group (always std-normalised: the rubric's features are already min-max
    scaled per group; reward.norm_adv_by_std=false is refused for it by the config checks)."""
    return [group_advantages(g, min_std, clip) for g in groups]


def scalar_group_advantages(groups: Sequence[Sequence[float]], min_std: float = 0.1,
                            clip: float = 3.0, norm_by_std: bool = True) -> GroupAdvantages:
    """verl's GRPO advantages over all groups, then the same guard as toolorchestra. verl divides by the
    group's std however small: a group that differs only by noise (all wrong, a few tenths of a cent apart)
    would get advantages of +-1 and push the policy at random. So groups (of two or more) with sample std
    <= min_std are dropped, the rest clipped to +-clip. `norm_by_std=False` keeps the rewards' own scale
    (R − group mean): a group whose routes differ only by a few cents then moves the policy by a few cents'
    worth, instead of as much as a group where one route is right and another wrong."""
    flat = [float(v) for g in groups for v in g]
    adv = scalar_advantages(flat, [i for i, g in enumerate(groups) for _ in g], norm_by_std=norm_by_std)
    out: GroupAdvantages = []
    start = 0
    for g in groups:
        mine, start = adv[start:start + len(g)], start + len(g)
        dropped = len(g) > 1 and group_std(list(g)) <= min_std
        out.append(([0.0 if dropped else max(-clip, min(clip, a)) for a in mine], dropped))
    return out


def balance_by_key(advantages: Sequence[float], keys: Sequence[Hashable]) -> list[float]:
    """Rescale advantages so that every key (a preference vector of a paired step) carries the same total |A|:
    the mean of the keys' totals. Keys whose advantages are all 0 (every group dropped) stay 0; the sign and
    the within-key proportions never change. Why: a cost-heavy vector's groups are informative far more often
    than an accuracy-first one's, and would otherwise decide where the shared weights move."""
    if len(advantages) != len(keys):
        raise ValueError(f"{len(advantages)} advantages but {len(keys)} keys")
    totals: dict[Hashable, float] = {}
    for a, k in zip(advantages, keys, strict=True):
        totals[k] = totals.get(k, 0.0) + abs(float(a))
    live = [t for t in totals.values() if t > 0]
    if not live:
        return [float(a) for a in advantages]
    target = sum(live) / len(live)
    return [float(a) * (target / totals[k] if totals[k] > 0 else 0.0) for a, k in zip(advantages, keys, strict=True)]
