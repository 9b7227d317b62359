"""Settings of the adaptive work are checked at load, each mistake named by its key: the cascade teacher
(sft.teacher: cascade, the positive-control preset) and the simulated zoo's correlated mistakes."""

from __future__ import annotations

import pytest

from orchestra.config import ConfigError, load_config


def test_the_control_preset_loads():
    cfg = load_config(["experiment=adaptive_control"])
    assert (cfg.sft.teacher, cfg.sft.cascade, list(cfg.zoo.tools)) == (
        "cascade", "answer-4&answer-3>answer-1", ["consult", "answer", "submit"])


@pytest.mark.parametrize("override, key", [
    ("sft.cascade=answer-2", "sft.cascade"),  # not a cascade name
    ("sft.cascade=answer-2?>answer-1", "sft.cascade"),  # a no-answer cascade: the teacher demonstrates pairs
    ("sft.escalate_share=1.5", "sft.escalate_share"),
    ("zoo.tools=[answer]", "zoo.tools"),
    ("zoo.error_correlation.task=0.9", "zoo.error_correlation"),  # with family 0.15 (the sim zoo's): sum >= 1
    ("zoo.shared_distractor=-0.1", "zoo.shared_distractor"),
])
def test_mistakes_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(["experiment=adaptive_control" if override.startswith(("sft", "zoo.tools")) else
                     "experiment=cpu_tiny", override])
