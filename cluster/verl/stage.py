"""The files of a verl job on its shared output dir (`verl.output_dir`; the paths are cluster/verl/config.py's).

`stage` writes what verl's workers read before the trainer starts: train/val parquet, the corpus `search` serves,
the agent-loop yaml, the reward-function shim, the run's config, and the policy as an HF dir for the embedded
models; `warm_start_stage` writes the warm-started policy there instead (`verl.warm_start=true`, the job's first
stage); `export_hf` merges the newest checkpoint into a plain HF dir afterwards. Submitting and running the job
are cluster/verl/job.py's.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from cluster.verl.config import agent_loop_entries, newest_checkpoint_step, output_dir, stage_dir
from orchestra.config import ExperimentConfig, task_tiers

REWARD_SHIM = "# verl loads its custom reward function from a file: ours lives in the installed project.\n" \
              "from actors.verl_plugins.reward import compute_score  # noqa: F401\n"


def stage(cfg: ExperimentConfig, orchestra_overrides: list[str]) -> Path:
    """Write what verl's workers read under <output_dir>/verl (absolute): train/val parquet, the corpus `search`
    serves, the agent-loop yaml, the reward-function file, the run's config, and the policy as an HF dir when it
    is one of the embedded models (verl loads a path)."""
    from cluster.rollouts import run_order
    from orchestra.config import to_yaml
    from orchestra.data.sources import build_task_set
    from orchestra.data.tasks import save_corpus, save_verl_parquet
    from tools.tau2 import wiring as _tau2_wiring  # noqa: F401  registers the tau2: task source

    out = Path(stage_dir(cfg))
    out.mkdir(parents=True, exist_ok=True)
    train, heldout, corpus = build_task_set(cfg.data, task_tiers(cfg))
    # the whole run's rows in the local trainer's order (verl reads them unshuffled): step s = the local step s's
    # tasks, each once per paired vector, adjacent (one GRPO group per (task, vector))
    rows = run_order(train, cfg.algo.prompts_per_step, max(cfg.algo.steps, 1), cfg.data.preference_pairs, cfg.seed)
    save_verl_parquet(rows, out / "train.parquet", split="train", agent_name="orchestra")
    save_verl_parquet(heldout or train[:1], out / "val.parquet", split="heldout", agent_name="orchestra")
    save_corpus(corpus or [], out / "corpus.jsonl")
    (out / "agent_loop.yaml").write_text(yaml.safe_dump(agent_loop_entries(orchestra_overrides), sort_keys=False))
    (out / "reward_fn.py").write_text(REWARD_SHIM)
    (out / "config.yaml").write_text(to_yaml(cfg))
    if cfg.model.name in ("tiny", "smollm2") and not cfg.verl.warm_start and not (out / "policy" / "config.json").is_file():
        from orchestra.policy.models import load_policy_from_config

        model, tok = load_policy_from_config(replace(cfg.model, device="cpu"), seed=cfg.seed)
        model.save_pretrained(out / "policy")
        tok.save_pretrained(out / "policy")
    return out


def export_hf(cfg: ExperimentConfig) -> Path | None:
    """The newest checkpoint's FSDP shards merged (verl's own model_merger) into <output_dir>/hf, a plain HF dir
    `make serve ARGS="checkpoint=..."` loads, with the run's config beside it. Written to a temp dir, then renamed."""
    import shutil

    ckpts, step = newest_checkpoint_step(cfg)
    if step is None:
        print(f"no checkpoint under {ckpts} (checkpoint.every_steps=0?): nothing to export", file=sys.stderr)
        return None
    actor = ckpts / f"global_step_{step}" / "actor"
    target, tmp = Path(output_dir(cfg)) / "hf", Path(output_dir(cfg)) / ".hf.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
           "--target_dir", str(tmp)]
    if subprocess.call(cmd, stdout=subprocess.DEVNULL) != 0:
        raise RuntimeError(f"model_merger failed on {actor} (its error above); the checkpoint is intact: merge by "
                           f"hand with {shlex.join(cmd)}, or submit again (verl resumes past its last step and "
                           "merges)")
    shutil.copy(Path(stage_dir(cfg)) / "config.yaml", tmp / "orchestra_config.yaml")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    print(f"merged {actor} -> {target} (serve it: make serve ARGS=\"checkpoint={target} experiment={cfg.name}\")")
    return target


def warm_start_stage(cfg: ExperimentConfig, tool_handles: dict[str, Any]) -> None:
    """Stage 1 (`verl.warm_start=true`): the project's warm start writes <stage>/policy, verl's model path. Done
    once: a rerun (verl resuming from its checkpoint) keeps the policy and reference it started from."""
    from rich.console import Console

    from cluster.warm_start import warm_start_policy
    from orchestra.data.sources import build_task_set

    policy, done = Path(stage_dir(cfg)) / "policy", Path(stage_dir(cfg)) / "warm_start.json"
    if done.is_file() and (policy / "config.json").is_file():
        print(f"warm start: kept {policy} ({done.name} from an earlier run)")
        return
    train, _, _ = build_task_set(cfg.data, task_tiers(cfg))
    report = warm_start_policy(replace(cfg, run_dir=output_dir(cfg)), tool_handles, train, policy, Console())
    done.write_text(json.dumps(report, default=str))
