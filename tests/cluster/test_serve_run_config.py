"""`make serve ARGS="checkpoint=..."` serves a checkpoint as the config it was trained with (the run's own
config.yaml, or a verl export's orchestra_config.yaml): prompt, tiers, turns and tools; a contradicting override is
refused with one line; a GPU config gets a GPU per replica. On 2bd8f65 a GPU checkpoint was served under
cpu_tiny's 6 tiers, 4 turns and 400-character documents, in fp32 on a num_gpus=0 replica, without a word."""

from __future__ import annotations

import pytest

from cluster.serve import adopt_run_config, plan
from orchestra.config import load_config, to_yaml
from orchestra.rundir import checkpoint


def fake_run(root, *overrides):
    def write(d):
        (d / "learner").mkdir()
        (d / "learner" / "config.json").write_text("{}")

    run = root / "run"
    checkpoint.save(run, 1, write, {"summary": {}})
    (run / "config.yaml").write_text(to_yaml(load_config(list(overrides))))
    return run


def test_a_checkpoint_is_served_as_the_config_it_was_trained_with(tmp_path):
    run = fake_run(tmp_path, "experiment=cpu_tiny", "agent.max_turns=6", "agent.doc_chars=800")
    p = plan([f"checkpoint={run}"])
    adopt_run_config(p.args, False, p.deployment_options)
    served = load_config([f"experiment={p.args['experiment']}", *p.args["overrides"]])
    assert (served.agent.max_turns, served.agent.doc_chars) == (6, 800)
    assert not p.deployment_options["ray_actor_options"].get("num_gpus")  # a CPU config stays on the CPU


def test_a_contradicting_override_or_experiment_is_refused_with_one_line(tmp_path):
    run = fake_run(tmp_path, "experiment=cpu_tiny", "agent.max_turns=6")
    p = plan([f"checkpoint={run}", "agent.max_turns=9"])
    with pytest.raises(ValueError) as e:
        adopt_run_config(p.args, False, p.deployment_options)
    assert "agent.max_turns=9" in str(e.value) and ": 6)" in str(e.value) and "\n" not in str(e.value)
    p = plan([f"checkpoint={run}", "experiment=cpu_tiny"])  # cpu_tiny's 4 turns, not the trained 6
    with pytest.raises(ValueError, match="agent.max_turns=4"):
        adopt_run_config(p.args, True, p.deployment_options)
    p = plan([f"checkpoint={run}", "model.dtype=bfloat16"])  # not part of what the policy reads: allowed
    adopt_run_config(p.args, False, p.deployment_options)


def test_a_gpu_config_gets_a_gpu_per_replica(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "hf" / "orchestra_config.yaml").write_text(to_yaml(load_config(["experiment=h100_2x8"])))
    p = plan([f"checkpoint={tmp_path / 'hf'}"])
    adopt_run_config(p.args, False, p.deployment_options)
    assert p.deployment_options["ray_actor_options"]["num_gpus"] == 1.0
    served = load_config([f"experiment={p.args['experiment']}"])
    assert (served.engine.kind, served.model.dtype, served.agent.max_turns) == ("vllm", "bfloat16", 30)


def test_replicas_on_nodes_of_their_own_behind_one_proxy():
    """Serve across the nodes of a cluster (bench/serve_nodes.py): replicas pinned to the worker nodes, one per
    node, one HTTP proxy on the head (several nodes on one machine cannot all bind one port)."""
    p = plan(["replicas=2", "max_replicas_per_node=1", "resources={orchestra_workers: 0.001}",
              "proxy_location=HeadOnly"])
    assert p.deployment_options["num_replicas"] == 2 and p.deployment_options["max_replicas_per_node"] == 1
    assert p.deployment_options["ray_actor_options"]["resources"] == {"orchestra_workers": 0.001}
    assert p.proxy_location == "HeadOnly" and plan([]).proxy_location == "EveryNode"
    with pytest.raises(ValueError, match="proxy_location"):
        plan(["proxy_location=Somewhere"])
    with pytest.raises(ValueError, match="resources=3"):
        plan(["resources=3"])
