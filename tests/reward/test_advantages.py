"""Advantages: the toolorchestra group normalisation by hand, and the scalar path through verl's GRPO."""

from __future__ import annotations

import math

import pytest

from reward.advantages import balance_by_key, group_advantages, scalar_advantages, scalar_group_advantages


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


def test_mean_centred_advantages_keep_the_rewards_scale():
    """norm_by_std=False (reward.norm_adv_by_std=false): R − group mean; a group that differs by cents weighs
    cents, where the std-scaled form blows it up to the same ±0.7 as a right-vs-wrong group."""
    cents, right_wrong = [0.50, 0.52, 0.54], [0.0, 0.0, 1.0]
    scaled = scalar_group_advantages([cents, right_wrong], min_std=0.0)
    centred = scalar_group_advantages([cents, right_wrong], min_std=0.0, norm_by_std=False)
    assert [round(a, 4) for a in centred[0][0]] == [-0.02, 0.0, 0.02]
    assert [round(a, 4) for a in centred[1][0]] == [-0.3333, -0.3333, 0.6667]
    assert abs(scaled[0][0][2]) > 0.9 and abs(scaled[0][0][2] - scaled[1][0][2]) < 0.3


def test_balance_by_key_equalises_each_vectors_total_weight():
    adv = [1.0, -1.0, 0.1, -0.1, 0.0, 0.0]
    keys = ["0", "0", "1", "1", "2", "2"]
    out = balance_by_key(adv, keys)
    totals = {k: sum(abs(a) for a, kk in zip(out, keys) if kk == k) for k in "012"}
    assert totals["0"] == pytest.approx(1.1) and totals["1"] == pytest.approx(1.1) and totals["2"] == 0.0
    assert out[0] > 0 > out[1] and out[2] > 0 > out[3]  # signs kept
    assert balance_by_key([0.0, 0.0], ["a", "b"]) == [0.0, 0.0]
    with pytest.raises(ValueError):
        balance_by_key([1.0], ["a", "b"])
