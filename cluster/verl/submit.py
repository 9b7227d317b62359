"""Submitting a verl job: `python -m cluster.verl.job ...` without --here (what `make submit` runs) and --dry-run.

`submit` runs `ray job submit` to $RAY_ADDRESS (RAY_AUTH_MODE=token: Ray 2.60 keeps token auth on and its CLI needs
it), working dir = this project without `runs/` (cluster/runtime_env.yaml's excludes; never /tmp: Ray's /tmp/ray would
shadow it), the entrypoint being cluster/verl/job.py with `--here` run by the cluster venv's python (`verl.python`).
The job needs `verl.output_dir`, an absolute directory every node shares; for a cluster on this machine
(`make cluster-up`) `this_machine` fills it and `verl.python` in, and finds the cluster's token. Secrets never travel
in the job's runtime_env (Ray's job table shows it to every token holder): nodes get them from their own environment,
and the launcher only names the ones set here that will not be sent. `dry_run` prints verl's resolved config and the
submit command and touches no cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from cluster.verl.config import ROOT, agent_loop_entries, output_dir, stage_dir, validate_verl_config
from cluster.verl.plan import checkpoint_line, updates_line
from orchestra.config import ExperimentConfig, load_config

RUNTIME_ENV = ROOT / "cluster" / "runtime_env.yaml"


def load_runtime_env(path: Path = RUNTIME_ENV, environ: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(Ray runtime_env, names of secrets set here that the job will NOT carry). `secret_env_vars` (ours, not
    Ray's) names the keys nodes must hold in their own environment."""
    environ = os.environ if environ is None else environ
    env = yaml.safe_load(path.read_text()) or {}
    names = env.pop("secret_env_vars", []) or []
    env["env_vars"] = {str(k): str(v) for k, v in (env.get("env_vars") or {}).items()}
    return env, [n for n in names if environ.get(n)]


def submission_id(cfg: ExperimentConfig) -> str:
    return f"orchestra-{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def submit_command(cfg: ExperimentConfig, orchestra_overrides: list[str], runtime_env_file: str,
                   job_id: str) -> list[str]:
    entry = [cfg.verl.python, "-m", "cluster.verl.job", *orchestra_overrides, "--here"]
    return ["ray", "job", "submit", "--address", os.environ.get("RAY_ADDRESS", "$RAY_ADDRESS"),
            "--working-dir", ".", "--runtime-env", runtime_env_file, "--submission-id", job_id, "--no-wait",
            "--", *entry]


def submit_env() -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token"}  # token auth stays on; Ray 2.60's CLI needs the mode named


def dry_run(cfg: ExperimentConfig, overrides: list[str], verl_cfg: Any) -> int:
    from omegaconf import OmegaConf

    env, secrets = load_runtime_env()
    print(OmegaConf.to_yaml(verl_cfg, resolve=True))
    validate_verl_config(verl_cfg)
    print("# agent-loop yaml (" + stage_dir(cfg) + "/agent_loop.yaml):")
    print(yaml.safe_dump(agent_loop_entries(overrides), sort_keys=False))
    print("# " + updates_line(cfg))
    print("# " + checkpoint_line(cfg))
    print(f"# runtime_env: env_vars {sorted(env['env_vars'])}; excludes {env.get('excludes', [])}")
    if secrets:
        print(f"# not sent with the job (set them on the nodes: docs/cluster.md): {secrets}")
    prefix = " ".join(f"{k}={v}" for k, v in submit_env().items())
    cmd = shlex.join(submit_command(cfg, overrides, "RUNTIME_ENV_JSON", submission_id(cfg)))
    cmd = cmd.replace("'$RAY_ADDRESS'", "$RAY_ADDRESS").replace("RUNTIME_ENV_JSON", "$RUNTIME_ENV_JSON")
    print("# submit ($RUNTIME_ENV_JSON: cluster/runtime_env.yaml, a temp file the launcher writes and deletes):\n"
          + prefix + " " + cmd)
    return 0


def this_machine(cfg: ExperimentConfig, address: str) -> tuple[list[str], dict[str, str]]:
    """For a cluster on this machine (RAY_ADDRESS on 127.0.0.0/8, e.g. `make cluster-up`'s): the overrides that fill
    an empty `verl.output_dir` (this checkout's run dir) and `verl.python` (this interpreter), which its nodes share
    with this process, and the token of the cluster `make cluster-up` recorded at that address when none is set.
    Each is said; elsewhere nothing is filled in."""
    host = urlparse(address if "://" in address else f"http://{address}").hostname or ""
    if not host.startswith("127."):
        return [], {}
    extra = []
    if not cfg.verl.output_dir:
        extra.append(f"verl.output_dir={output_dir(cfg)}")
    if not cfg.verl.python:
        extra.append(f"verl.python={sys.executable}")
    token = {}
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        from cluster.nodes import token_for

        path = token_for(address)
        if path:
            token = {"RAY_AUTH_TOKEN_PATH": path}
    said = [*extra, *([f"its token {token['RAY_AUTH_TOKEN_PATH']} (make cluster-up)"] if token else [])]
    if said:
        print(f"note: {address} is a cluster on this machine: {', '.join(said)}", file=sys.stderr)
    return extra, token


def submit(cfg: ExperimentConfig, overrides: list[str]) -> int:
    if not os.environ.get("RAY_ADDRESS"):
        print("RAY_ADDRESS is not set: point it at the cluster's dashboard (http://HEAD:8265), or use --here / "
              "--dry-run", file=sys.stderr)
        return 2
    extra, token = this_machine(cfg, os.environ["RAY_ADDRESS"])
    if extra:
        overrides = [*overrides, *extra]
        cfg = load_config(overrides)
    if not cfg.verl.output_dir:
        print("config error: verl.output_dir: a submitted job needs an absolute directory every node shares "
              "(checkpoints, logs, staged tasks), e.g. verl.output_dir=/mnt/orchestra-runs/" + cfg.name, file=sys.stderr)
        return 2
    if not cfg.verl.python:
        print("config error: verl.python: the interpreter of the project's venv on the cluster's nodes, e.g. "
              "/home/ray/orchestra/.venv/bin/python (cluster/ray-cluster.yaml)", file=sys.stderr)
        return 2
    env, secrets = load_runtime_env()
    if secrets:
        print(f"note: {secrets} are set here but not sent with the job (Ray shows a job's runtime_env to every "
              "token holder): the nodes need them in their own environment", file=sys.stderr)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(env, f)
    job_id = submission_id(cfg)
    cmd = submit_command(cfg, overrides, f.name, job_id)
    ray_cli = Path(sys.executable).parent / "ray"  # this venv's Ray CLI (same version as the cluster's)
    if ray_cli.is_file():
        cmd[0] = str(ray_cli)
    try:
        rc = subprocess.call(cmd, cwd=ROOT, env={**os.environ, **token, **submit_env()})
    finally:
        os.unlink(f.name)
    if rc == 0:
        print(f"submitted {job_id}; checkpoints and logs go to {output_dir(cfg)}; follow it with:\n"
              f"  RAY_AUTH_MODE=token ray job logs --address $RAY_ADDRESS -f {job_id}\n"
              "  (rollouts, actors and GPU use: the Ray dashboard at $RAY_ADDRESS)")
    return rc
