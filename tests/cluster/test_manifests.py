"""The cluster kit parses and carries what a run needs: `ray up` config, KubeRay RayJob / RayService, runtime_env."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestra.config import load_config

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"


def load(name: str) -> dict:
    data = yaml.safe_load((CLUSTER / name).read_text())
    assert isinstance(data, dict), name
    return data


def test_ray_up_config():
    c = load("ray-cluster.yaml")
    assert c["head_node_type"] in c["available_node_types"]
    workers = [v for k, v in c["available_node_types"].items() if k != c["head_node_type"]]
    h100 = load_config(["experiment=h100_2x8"]).verl
    assert sum(w["min_workers"] for w in workers) == h100.nnodes
    setup = c["setup_commands"]
    torch_at = next(i for i, s in enumerate(setup) if "torch==" in s)
    gpu_at = next(i for i, s in enumerate(setup) if "[gpu]" in s)
    assert torch_at < gpu_at  # torch first, then the gpu extra
    venv_python = h100.python
    assert all(venv_python.replace("/python", "/ray") in cmd
               for cmd in c["head_start_ray_commands"] + c["worker_start_ray_commands"] if "ray start" in cmd)
    assert "2.60" in c["docker"]["image"]
    starts = [cmd for cmd in c["head_start_ray_commands"] + c["worker_start_ray_commands"] if "ray start" in cmd]
    assert all("RAY_AUTH_MODE=token" in cmd for cmd in starts)  # token auth kept on, one shared token
    assert any(dst.endswith("/.ray/auth_token") for dst in c["file_mounts"])


def test_rayjob():
    j = load("kuberay/rayjob.yaml")
    assert j["apiVersion"] == "ray.io/v1" and j["kind"] == "RayJob"
    spec = j["spec"]
    assert "-m cluster.verl_job experiment=h100_2x8 --here" in spec["entrypoint"]
    assert load_config(["experiment=h100_2x8"]).verl.python in spec["entrypoint"]
    assert isinstance(yaml.safe_load(spec["runtimeEnvYAML"]), dict)
    rc = spec["rayClusterSpec"]
    assert rc["authOptions"]["mode"] == "token" and rc["rayVersion"].startswith("2.60")
    (group,) = rc["workerGroupSpecs"]
    gpus = int(group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    v = load_config(["experiment=h100_2x8"]).verl
    assert group["replicas"] * gpus == v.nnodes * v.gpus_per_node
    # secrets only through a Secret reference, never literal values in the manifest
    for pod in [rc["headGroupSpec"]["template"], group["template"]]:
        (container,) = pod["spec"]["containers"]
        assert container["envFrom"][0]["secretRef"]["name"] == "orchestra-secrets"
        assert "env" not in container
        assert any(m["mountPath"].endswith("/runs") for m in container["volumeMounts"])


def test_rayservice():
    s = load("kuberay/rayservice.yaml")
    assert s["kind"] == "RayService" and s["spec"]["rayClusterConfig"]["authOptions"]["mode"] == "token"
    serve = yaml.safe_load(s["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    assert app["import_path"] == "actors.serve.app:build_app"
    from actors.serve.api import settings_from_dict

    settings = settings_from_dict(app["args"])  # the args are valid ServeSettings
    assert settings.api_keys == [] and settings.api_keys_env == "ORCHESTRA_API_KEYS"
    load_config([f"experiment={settings.experiment}", *settings.overrides])


def test_runtime_env_file():
    env = load("runtime_env.yaml")
    assert "working_dir" not in env  # given on the command line; never /tmp
    assert {".git/", ".venv/"} <= set(env["excludes"])
    assert not [k for k in env["env_vars"] if k.endswith(("_KEY", "_TOKEN"))]  # secrets never live in the file
    assert "OPENAI_API_KEY" in env["secret_env_vars"] and "OPENAI_API_KEY" not in env["env_vars"]
