"""The registry of SFT teachers (cluster/teachers/): the names orchestra.config.schema.TEACHERS registers are exactly
the modules of cluster/teachers/, each resolves to its `demonstrations`, the warm start reads its teacher through
the registry, and the config check of `sft.teacher` accepts exactly the registered names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cluster.teachers as teachers
from orchestra.config import ConfigError, load_config
from orchestra.config.schema import TEACHERS


def test_every_registered_teacher_is_one_module_and_every_module_is_registered():
    here = Path(teachers.__file__).parent
    assert sorted(p.stem for p in here.glob("*.py") if p.stem != "__init__") == sorted(TEACHERS)
    assert TEACHERS == ("random", "expected_value", "cascade")
    for name in TEACHERS:
        assert teachers.teacher(name).__module__ == f"cluster.teachers.{name}"
    with pytest.raises(ValueError, match="unknown sft.teacher 'oracle'; choose one of random, expected_value, cascade"):
        teachers.teacher("oracle")


def test_the_config_check_accepts_exactly_the_registered_teachers():
    with pytest.raises(ConfigError, match="sft.teacher") as e:
        load_config(["sft.teacher=oracle"])
    listed = re.search(r"must be one of (.*), got", str(e.value)).group(1)
    assert listed.split(", ") == list(TEACHERS)


def test_the_warm_start_makes_its_demonstrations_with_the_configured_teacher(monkeypatch):
    """cluster/warm_start.py resolves sft.teacher through the registry and hands the teacher a Teaching."""
    from cluster import warm_start

    seen = {}

    class Learner:  # the two learner calls the warm start makes, as Ray handles would take them
        class sft_update:  # noqa: N801
            @staticmethod
            def remote(batch, lr):
                return {"sft_loss": 1.0}

        class reset_reference:  # noqa: N801
            @staticmethod
            def remote():
                return None

    def fake(teaching):
        seen["teaching"] = teaching
        return ["s1", "s2"], {"teacher_report": 1}

    def pick(name):
        seen["name"] = name
        return fake

    cfg = load_config(["sft.steps=2", "sft.batch_size=1"])
    monkeypatch.setattr(warm_start, "teacher", pick)
    monkeypatch.setattr(warm_start.ray, "get", lambda x: x)

    class Bars:
        def add(self, *_a):
            return 0

        def advance(self, *_a):
            pass

        def remove(self, *_a):
            pass

    tools = object()  # the ToolClient the demonstrations are played through, handed on as it is
    out = warm_start.warm_start(cfg, Learner, tools, [], Bars(), type("C", (), {"print": print})())
    assert seen["name"] == cfg.sft.teacher and seen["teaching"].tools is tools
    assert out["sft_samples"] == 2 and out["teacher_report"] == 1 and out["sft_steps_done"] == 2
