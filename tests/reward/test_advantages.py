"""Advantages: the toolorchestra group normalisation by hand, and the scalar path through verl's GRPO."""

from __future__ import annotations

import math

import pytest

from reward.advantages import group_advantages, scalar_advantages


def test_group_advantages_by_hand():
    # [1, 0, 0, 0]: mean 1/4, sample std sqrt((9/16 + 3/16)/3) = 1/2 -> A = [1.5, -0.5, -0.5, -0.5]
    adv, dropped = group_advantages([1.0, 0.0, 0.0, 0.0])
    assert not dropped and adv == pytest.approx([1.5, -0.5, -0.5, -0.5], rel=1e-5)


def test_clip_and_drop():
    # one winner among 19 zeros: (1 - 1/20) / (sqrt(1/20) ≈ 0.2236) = 4.25 -> clipped to 3
    adv, dropped = group_advantages([1.0] + [0.0] * 19)
    assert not dropped and adv[0] == 3.0 and adv[1] == pytest.approx(-0.05 / math.sqrt(0.05), rel=1e-4)
    assert group_advantages([0.5, 0.55, 0.6]) == ([0.0, 0.0, 0.0], True)  # std 0.05 <= 0.1
    assert group_advantages([0.0, 0.0]) == ([0.0, 0.0], True)
    assert group_advantages([1.0]) == ([0.0], True)
    assert group_advantages([0.5, 0.55, 0.6], min_std=0.01)[1] is False
    with pytest.raises(ValueError):
        group_advantages([float("nan"), 1.0])


def test_scalar_advantages_through_verl():
    # group a: [1, 0, 0.5] mean 0.5, sample std 0.5 -> [0.5, -0.5, 0] / (0.5 + eps); group b alone: verl's
    # mean 0, std 1 -> A = R
    got = scalar_advantages([1.0, 2.0, 0.0, 0.5], ["a", "b", "a", "a"])
    assert got == pytest.approx([0.5 / (0.5 + 1e-6), 2 / (1 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0], rel=1e-5)
    assert scalar_advantages([], []) == []
    with pytest.raises(ValueError):
        scalar_advantages([1.0], ["a", "b"])
