"""The cluster kit parses and carries what a run needs: `ray up` config, KubeRay RayJob / RayService, runtime_env.

Where Ray has its own validation, the manifests go through it: the cluster config through the autoscaler's schema,
the RayJob's runtime env and entrypoint through the checks `ray job submit` runs, serveConfigV2 through Ray
Serve's ServeDeploySchema. The rest pins what the GPU path needs and Ray cannot check: the code sandbox's
container options, secrets only as node environment, an absolute output dir on storage every pod shares."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestra.config import load_config

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
PROJECT = "/home/ray/orchestra"  # where the image and `ray up` put the code
RUNS_MOUNT = "/mnt/orchestra-runs"  # shared storage for verl.output_dir on every node
KUBERAY = ["kuberay/rayjob.yaml", "kuberay/rayservice.yaml"]
SECRET_NAME = re.compile(r"(_KEY|_KEYS|_TOKEN|_SECRET|PASSWORD)$")
SECRET_ASSIGNMENT = re.compile(r"\b[A-Z0-9_]*(_KEY|_KEYS|_TOKEN|_SECRET|PASSWORD)\s*[:=]\s*\S")


def load(name: str) -> dict:
    data = yaml.safe_load((CLUSTER / name).read_text())
    assert isinstance(data, dict), name
    return data


def header(name: str) -> str:
    """The comment block a manifest opens with."""
    lines = (CLUSTER / name).read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, s in enumerate(lines) if not s.startswith("#"))])


def ray_cluster(manifest: dict) -> dict:
    return manifest["spec"].get("rayClusterSpec") or manifest["spec"]["rayClusterConfig"]


def pod_specs(manifest: dict) -> list[dict]:
    """The pod spec of the head group and of every worker group."""
    rc = ray_cluster(manifest)
    return [rc["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in rc["workerGroupSpecs"])]


def runtime_envs(manifest: dict) -> list[dict]:
    """The Ray runtime envs a manifest gives: the job's, or each Serve application's."""
    spec = manifest["spec"]
    if "runtimeEnvYAML" in spec:
        return [yaml.safe_load(spec["runtimeEnvYAML"])]
    return [app.get("runtime_env") or {} for app in yaml.safe_load(spec["serveConfigV2"])["applications"]]


def mount_claims(pod: dict) -> dict[str, str]:
    """mountPath -> the PersistentVolumeClaim behind it, for every container of the pod."""
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
              if "persistentVolumeClaim" in v}
    return {m["mountPath"]: claims[m["name"]] for c in pod["containers"] for m in c.get("volumeMounts", [])
            if m["name"] in claims}


def groups(manifest: dict) -> list[dict]:
    """The head group and every worker group (each with rayStartParams and a pod template)."""
    rc = ray_cluster(manifest)
    return [rc["headGroupSpec"], *rc["workerGroupSpecs"]]


def offers_cpus(group: dict) -> bool:
    """Whether Ray may place CPU work on the group's pods (`num-cpus: "0"` keeps everything that asks for CPUs off)."""
    return str(group.get("rayStartParams", {}).get("num-cpus", "")) != "0"


def assert_on_shared_storage(manifest: dict, path: str) -> None:
    """`path` is absolute and lies under one mount that every pod has where Ray places CPU work (verl's workers, the
    driver), backed by the same claim."""
    assert os.path.isabs(path) and ".." not in Path(path).parts, path
    per_pod = [{mp: claim for mp, claim in mount_claims(g["template"]["spec"]).items() if Path(path).is_relative_to(mp)}
               for g in groups(manifest) if offers_cpus(g)]
    assert all(per_pod), f"{path} is not on a claim mounted in every pod: {per_pod}"
    assert len({tuple(sorted(p.items())) for p in per_pod}) == 1, per_pod


def test_ray_up_config():
    c = load("ray-cluster.yaml")
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(c))  # Ray's own cluster-config schema, as `ray up` applies it
    assert c["head_node_type"] in c["available_node_types"]
    workers = [v for k, v in c["available_node_types"].items() if k != c["head_node_type"]]
    h100 = load_config(["experiment=h100_2x8"]).verl
    assert sum(w["min_workers"] for w in workers) == h100.nnodes
    venv_python = h100.python
    assert all(venv_python.replace("/python", "/ray") in cmd
               for cmd in c["head_start_ray_commands"] + c["worker_start_ray_commands"] if "ray start" in cmd)
    assert "2.60" in c["docker"]["image"]
    starts = [cmd for cmd in c["head_start_ray_commands"] + c["worker_start_ray_commands"] if "ray start" in cmd]
    assert all("RAY_AUTH_MODE=token" in cmd for cmd in starts)  # token auth kept on, one shared token
    assert any(dst.endswith("/.ray/auth_token") for dst in c["file_mounts"])


def node_setup(kind: str) -> list[str]:
    """The commands `ray up` runs on a node of this kind: setup_commands, then head_/worker_setup_commands."""
    c = load("ray-cluster.yaml")
    return list(c.get("setup_commands") or []) + list(c.get(f"{kind}_setup_commands") or [])


def test_ray_up_installs_verls_vllm_set_then_flash_attn_cupy_project():
    def at(setup: list[str], *needles: str) -> int:
        hits = [i for i, s in enumerate(setup) if all(n in s for n in needles)]
        assert len(hits) == 1, (needles, hits)
        return hits[0]

    for kind in ("head", "worker"):
        setup = node_setup(kind)
        # verl 0.9.1's vllm extra, in one pip command, so one resolve sees the whole set
        pins = at(setup, "torch==2.11.0", "torchvision==0.26.0", "vllm==0.24.0", "transformers==5.9.0")
        cupy = at(setup, "cupy-cuda")
        project = at(setup, "pip install -q -e ")
        assert pins < cupy < project, kind
        assert not [s for i, s in enumerate(setup) if i != pins and re.search(r"\btorch==", s)]  # no second torch
    worker = node_setup("worker")
    flash = at(worker, "flash-attn==2.8.3")
    assert "--no-build-isolation" in worker[flash]  # compiled against the torch installed just before
    assert at(worker, "torch==2.11.0") < flash < at(worker, "-e '.[gpu]'")
    # cupy, the image and torch 2.11.0's PyPI wheel (CUDA 13.0) share one CUDA major
    image_cuda = re.search(r"-cu(\d+?)\d$", load("ray-cluster.yaml")["docker"]["image"])
    cupy_cuda = re.search(r"cupy-cuda(\d+)x", worker[at(worker, "cupy-cuda")])
    assert image_cuda and cupy_cuda and image_cuda.group(1) == cupy_cuda.group(1) == "13"


def test_ray_up_builds_flash_attn_on_gpu_workers_only_with_max_jobs():
    """On 64e2e69 every node, the CPU head included, compiled flash-attn (as a setup command and again through the
    gpu extra), with ninja's one nvcc job per core: hours, or out of memory."""
    head, worker = node_setup("head"), node_setup("worker")
    assert not [s for s in head if "flash-attn" in s or "[gpu" in s]  # neither directly nor through the extra
    (build,) = [s for s in worker if "flash-attn==" in s]
    setting, install = re.fullmatch(r"(export MAX_JOBS=\$\(.*?/proc/meminfo\)); (.*)", build.strip()).groups()
    assert "flash-attn==2.8.3" in install and "export MAX_JOBS" not in install
    got = subprocess.run(["bash", "-c", setting + "; echo $MAX_JOBS"], capture_output=True, text=True, timeout=10)
    assert 1 <= int(got.stdout.strip()) <= os.cpu_count(), got  # one job per 8 GiB of RAM, at most one per core


def fake_venv(tmp_path: Path, pip: int, python: int) -> Path:
    """A venv whose pip and python exit with the given codes."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for tool, code in (("pip", pip), ("python", python)):
        (venv / "bin" / tool).write_text(f"#!/bin/sh\nexit {code}\n")
        (venv / "bin" / tool).chmod(0o755)
    return venv


def test_ray_up_names_a_flash_attn_that_fails_to_build_or_import(tmp_path):
    """flash-attn 2.8.3 against torch 2.11.0+cu130 and nvcc 13.0 is unconfirmed upstream. On bd00958 a failed build
    showed as pip's compiler output only, and a built flash-attn that did not import surfaced minutes later in verl's
    actors: now the worker's setup stops at once with a line naming flash-attn and the documented way out."""
    worker = node_setup("worker")
    steps = [s for s in worker if "flash-attn==" in s or "import flash_attn" in s]
    assert len(steps) == 2 and worker.index(steps[0]) + 1 == worker.index(steps[1])  # build, then import

    def run(pip: int, python: int) -> subprocess.CompletedProcess:
        venv = fake_venv(tmp_path, pip, python)
        script = "\n".join(s.replace(f"{PROJECT}/.venv", str(venv)) for s in steps)
        return subprocess.run(["bash", "-ec", script], capture_output=True, text=True, timeout=30)

    got = run(pip=1, python=0)
    assert got.returncode == 1 and "orchestra: flash-attn 2.8.3 failed to build" in got.stderr, got
    got = run(pip=0, python=1)
    assert got.returncode == 1 and "orchestra: flash-attn 2.8.3 was built but does not import" in got.stderr, got
    assert run(pip=0, python=0).returncode == 0
    assert "docs/cluster.md, 'flash-attn'" in got.stderr and "## flash-attn" in (CLUSTER.parent / "docs" / "cluster.md").read_text()


def test_the_documented_way_out_of_flash_attn_trains_with_sdpa():
    """docs/cluster.md's flash-attn way out, composed with verl's own config: the warm start's learner and verl's
    actor on sdpa, and verl's remove-padding (flash-attn's varlen kernels) off."""
    from cluster.verl.config import compose, verl_overrides

    docs = (CLUSTER.parent / "docs" / "cluster.md").read_text()
    section = docs.split("## flash-attn", 1)[1].split("\n## ", 1)[0]
    (line,) = [s for s in re.findall(r"`([^`]*)`", section) if "model.attn_implementation=sdpa" in s]
    overrides = ["experiment=h100_2x8", *shlex.split(line)]
    cfg = load_config(overrides)
    assert cfg.model.attn_implementation == "sdpa"
    model = compose(verl_overrides(cfg, overrides)).actor_rollout_ref.model
    assert model.use_remove_padding is False and model.override_config.attn_implementation == "sdpa"
    assert compose(verl_overrides(load_config(["experiment=h100_2x8"]), [])).actor_rollout_ref.model.use_remove_padding


PROVIDER_PACKAGES = {"aws": "boto3", "gcp": "google-api-python-client", "azure": "azure-identity"}


def test_ray_up_head_venv_can_build_the_node_provider():
    """The autoscaler monitor runs with the python of the venv that ran `ray start --head` and imports the
    provider's SDK (ray/autoscaler/_private/providers.py _import_aws: boto3). On 64e2e69 that venv had none: the
    GPU workers were never launched and the job waited on its CPU head, silently."""
    c = load("ray-cluster.yaml")
    (start,) = [cmd for cmd in c["head_start_ray_commands"] if "ray start --head" in cmd]
    venv = re.search(r"(\S+)/bin/ray start --head", start).group(1)
    package = PROVIDER_PACKAGES[c["provider"]["type"]]
    installs = [s for s in node_setup("head") if f"{venv}/bin/pip install" in s and package in s]
    assert installs, f"nothing installs {package} into {venv}, the venv whose python runs the autoscaler"
    from ray.autoscaler._private.providers import _NODE_PROVIDERS

    assert c["provider"]["type"] in _NODE_PROVIDERS


def test_ray_up_container_allows_the_code_sandbox():
    opts = load("ray-cluster.yaml")["docker"]["run_options"]
    # bubblewrap's user namespaces (seccomp), its mounts (AppArmor), its fresh /proc (unmasked system paths)
    for opt in ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]:
        assert f"--security-opt {opt}" in opts, opt


def fake_ray(tmp_path: Path) -> Path:
    ray = tmp_path / "bin" / "ray"
    ray.parent.mkdir()
    ray.write_text(f"#!/bin/sh\nenv > {tmp_path / 'ray-env.txt'}\n")
    ray.chmod(0o755)
    return ray


@pytest.mark.parametrize("which", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_ray_up_keys_reach_ray_as_node_environment(tmp_path, which):
    """The user's env file is mounted on every node and exported before `ray start`, with or without keys."""
    c = load("ray-cluster.yaml")
    mounts = {dst: src for dst, src in c["file_mounts"].items() if dst.endswith("/.orchestra.env")}
    assert mounts == {"/home/ray/.orchestra.env": "~/.orchestra.env"}  # ~ is /home/ray in the container
    (start,) = [cmd for cmd in c[which] if "ray start" in cmd]
    home = tmp_path / "home"
    home.mkdir()
    cmd = start.replace(f"{PROJECT}/.venv/bin/ray", str(fake_ray(tmp_path)))
    run_env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    (home / ".orchestra.env").write_text("ORCHESTRA_TEST_KEY='a b'\nOTHER_TOKEN=t\n")
    subprocess.run(["bash", "-c", cmd], env=run_env, check=True, capture_output=True, timeout=30)
    seen = (tmp_path / "ray-env.txt").read_text().splitlines()
    assert {"ORCHESTRA_TEST_KEY=a b", "OTHER_TOKEN=t", "RAY_AUTH_MODE=token"} <= set(seen)
    (home / ".orchestra.env").unlink()  # no file: Ray still starts
    (tmp_path / "ray-env.txt").unlink()
    subprocess.run(["bash", "-c", cmd], env=run_env, check=True, capture_output=True, timeout=30)
    assert "RAY_AUTH_MODE=token" in (tmp_path / "ray-env.txt").read_text().splitlines()


def test_ray_up_carries_no_secret_values():
    text = (CLUSTER / "ray-cluster.yaml").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert not SECRET_ASSIGNMENT.search(code)


def test_ray_up_shared_storage_and_sync():
    c = load("ray-cluster.yaml")
    assert "runs/" in c["rsync_exclude"]  # local runs are never uploaded, wholesale
    # every host mounts the shared file system and every container sees it at the same path
    assert any("mount" in cmd and RUNS_MOUNT in cmd for cmd in c["initialization_commands"])
    assert f"-v {RUNS_MOUNT}:{RUNS_MOUNT}" in c["docker"]["run_options"]
    assert f"verl.output_dir={RUNS_MOUNT}/" in header("ray-cluster.yaml")


def test_rayjob():
    j = load("kuberay/rayjob.yaml")
    assert j["apiVersion"] == "ray.io/v1" and j["kind"] == "RayJob"
    spec = j["spec"]
    v = load_config(["experiment=h100_2x8"]).verl
    argv = shlex.split(spec["entrypoint"].split("&&")[-1])
    assert argv[:4] == [v.python, "-m", "cluster.verl.job", "experiment=h100_2x8"] and argv[-1] == "--here"
    rc = spec["rayClusterSpec"]
    assert rc["authOptions"]["mode"] == "token" and rc["rayVersion"].startswith("2.60")
    (group,) = [g for g in rc["workerGroupSpecs"]
                if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]
    gpus = int(group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    assert group["replicas"] * gpus == v.nnodes * v.gpus_per_node


def test_rayjob_runtime_env_passes_rays_job_submission_checks():
    """What `ray job submit` (ray/dashboard/modules/job/sdk.py submit_job) does to the runtime env, in order."""
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed
    from ray.dashboard.modules.job.common import JobSubmitRequest
    from ray.runtime_env import RuntimeEnv
    from ray.runtime_env.runtime_env import _validate_no_local_paths

    spec = load("kuberay/rayjob.yaml")["spec"]
    env = yaml.safe_load(spec["runtimeEnvYAML"])
    # the code baked into the image, used in place on every node: nothing to upload
    assert env["working_dir"] == f"local://{PROJECT}"

    def no_upload(*args, **kwargs):
        raise AssertionError("a local:// working_dir is never uploaded")

    env = upload_working_dir_if_needed(env, include_gitignore=True, upload_fn=no_upload)
    checked = RuntimeEnv(**env)
    _validate_no_local_paths(checked)
    JobSubmitRequest(entrypoint=spec["entrypoint"], runtime_env=checked.to_dict())


def test_rayjob_output_dir_is_absolute_on_the_claim_every_pod_mounts():
    j = load("kuberay/rayjob.yaml")
    argv = shlex.split(j["spec"]["entrypoint"].split("&&")[-1])
    (out,) = [a.split("=", 1)[1] for a in argv if a.startswith("verl.output_dir=")]
    assert out == f"{RUNS_MOUNT}/h100_2x8"
    assert load_config(argv[3:-1]).verl.output_dir == out  # the entrypoint's overrides load as given
    assert_on_shared_storage(j, out)
    assert "ReadWriteMany" in header("kuberay/rayjob.yaml")  # the claim must be: every rank writes shards


def start_resources(params: dict) -> dict[str, float]:
    """The custom resources a KubeRay group's `ray start` offers (rayStartParams.resources: a quoted JSON string)."""
    import json

    raw = params.get("resources")
    return json.loads(raw.strip().strip('"').replace('\\"', '"')) if raw else {}


def test_rayjob_tool_servers_run_on_pods_whose_sandbox_can_mount_proc():
    """On 64e2e69 no pod had procMount Unmasked (the sandbox's fresh /proc): the job's preflight refused at start,
    and it probed only the driver's pod while tool servers could land on any."""
    rc = load("kuberay/rayjob.yaml")["spec"]["rayClusterSpec"]
    wanted = load_config(["experiment=h100_2x8"]).cluster.tool_resources
    assert wanted, "h100_2x8 pins its tool servers (cluster.tool_resources)"
    groups = [g for g in rc["workerGroupSpecs"] if set(wanted) & set(start_resources(g["rayStartParams"]))]
    assert [g["groupName"] for g in groups] == ["tools"]
    assert not set(wanted) & set(start_resources(rc["headGroupSpec"]["rayStartParams"]))
    (tools,) = groups
    assert all(start_resources(tools["rayStartParams"])[k] >= v * 100 for k, v in wanted.items())
    pod = tools["template"]["spec"]
    assert pod["hostUsers"] is False  # procMount Unmasked needs the pod's own user namespace
    assert all(c["securityContext"]["procMount"] == "Unmasked" for c in pod["containers"])


def test_ray_up_tool_servers_have_a_node():
    c = load("ray-cluster.yaml")
    wanted = load_config(["experiment=h100_2x8"]).cluster.tool_resources
    offered = c["available_node_types"][c["head_node_type"]]["resources"]
    assert all(offered.get(k, 0) >= v * 100 for k, v in wanted.items()), offered


@pytest.mark.parametrize("name", KUBERAY)
def test_kuberay_containers_allow_the_code_sandbox(name):
    for pod in pod_specs(load(name)):
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["seccompProfile"] == {"type": "Unconfined"}, container["name"]
            assert sc["appArmorProfile"] == {"type": "Unconfined"}, container["name"]


@pytest.mark.parametrize("name", KUBERAY)
def test_kuberay_secrets_only_from_the_secret(name):
    """Keys reach pods as node environment from the Secret, never through a runtime env, which Ray shows."""
    m = load(name)
    for pod in pod_specs(m):
        for container in pod["containers"]:
            assert container["envFrom"][0]["secretRef"]["name"] == "orchestra-secrets"
            assert "env" not in container  # no literal values in the manifest
    for env in runtime_envs(m):
        assert not [k for k in env.get("env_vars", {}) if SECRET_NAME.search(k)]
    spec = m["spec"]
    assert not SECRET_ASSIGNMENT.search(spec.get("runtimeEnvYAML", "") + spec.get("serveConfigV2", ""))


def test_rayservice():
    s = load("kuberay/rayservice.yaml")
    assert s["kind"] == "RayService" and s["spec"]["rayClusterConfig"]["authOptions"]["mode"] == "token"
    serve = yaml.safe_load(s["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    assert app["import_path"] == "actors.serve.app:build_app"
    from actors.serve.api import settings_from_dict

    settings = settings_from_dict(app["args"])  # the args are valid ServeSettings
    assert settings.api_keys == [] and settings.api_keys_env == "ORCHESTRA_API_KEYS"
    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    assert_on_shared_storage(s, settings.checkpoint)  # the merged model, on the claim the job wrote
    # real experts (on 64e2e69 h100_2x8's simulated zoo answered users): every trained tier bound to an endpoint
    from actors.serve.binding import bind_experts

    assert settings.experts.startswith(f"{PROJECT}/")  # the file the image carries
    served = bind_experts(cfg, CLUSTER.parent / settings.experts.removeprefix(f"{PROJECT}/"))
    assert cfg.zoo.name == "sim" and {e.kind for e in served.zoo.experts.values()} == {"openai"}
    assert "REAL experts" in header("kuberay/rayservice.yaml")


def test_rayservice_passes_ray_serves_schema():
    from ray.runtime_env import RuntimeEnv
    from ray.serve.schema import ServeDeploySchema

    serve = yaml.safe_load(load("kuberay/rayservice.yaml")["spec"]["serveConfigV2"])
    schema = ServeDeploySchema.model_validate(serve)  # what the Serve controller accepts or rejects
    (app,) = schema.applications
    # the code baked into the image, in place: replicas run in it and import actors.serve.app from it
    assert app.runtime_env["working_dir"] == f"local://{PROJECT}"
    RuntimeEnv(**app.runtime_env)
    (deployment,) = app.deployments
    assert deployment.ray_actor_options.num_gpus == 1


def test_runtime_env_file():
    env = load("runtime_env.yaml")
    assert "working_dir" not in env  # given on the command line; never /tmp
    assert {".git/", ".venv/"} <= set(env["excludes"])
    assert not [k for k in env["env_vars"] if k.endswith(("_KEY", "_TOKEN"))]  # secrets never live in the file
    assert "OPENAI_API_KEY" in env["secret_env_vars"] and "OPENAI_API_KEY" not in env["env_vars"]


# AWS's public SSM parameters for the Deep Learning Base OSS Nvidia Driver GPU AMIs (x86_64: the p5 nodes)
DLAMI_PARAMETER = re.compile(r"^resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
                             r"base-oss-nvidia-driver-gpu-ubuntu-(22|24)\.04/latest/ami-id$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")


def provider_files() -> list[str]:
    """Every `ray up` cluster config in cluster/ (a YAML with a provider and node types)."""
    found = []
    for path in sorted(CLUSTER.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "provider" in data and "available_node_types" in data:
            found.append(path.name)
    return found


def rays_default_amis() -> tuple[dict[str, str], list[str]]:
    """Ray's AWS default AMIs and the ImageId values `ray up` replaces by them (ray/autoscaler/_private/aws/config.py:
    DEFAULT_AMI, `_check_ami`), read from the installed source: importing it needs boto3, which only the cluster's
    head venv has."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec("ray.autoscaler").submodule_search_locations[0]) / "_private/aws/config.py"
    tree = ast.parse(source.read_text())
    (table,) = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "DEFAULT_AMI" for t in n.targets)]
    (check,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_check_ami"]
    replaced = [ast.literal_eval(c.comparators[0]) for c in ast.walk(check) if isinstance(c, ast.Compare)
                and isinstance(c.ops[0], ast.In) and isinstance(c.comparators[0], ast.List)]
    assert replaced == [["", "latest_dlami"]] and len(table) > 10, (replaced, len(table))
    return table, replaced[0]


def test_every_node_boots_a_named_gpu_image_not_rays_default():
    """On f4067d9 neither node type set an ImageId: Ray's AWS provider then boots its own default, the 2023 "Deep
    Learning AMI (Ubuntu 18.04) V71.0" with CUDA 11.2, whose driver cannot start the CUDA 13 container: the H100
    workers never joined. `ray up` applies `_check_ami` to every node type: it must find an image it keeps."""
    DEFAULT_AMI, replaced = rays_default_amis()
    files = provider_files()
    assert "ray-cluster.yaml" in files
    for name in files:
        c = load(name)
        assert c["provider"]["type"] == "aws", f"{name}: add the image check for provider {c['provider']['type']!r}"
        for kind, node in c["available_node_types"].items():
            image = node["node_config"].get("ImageId", "")
            assert image, f"{name}: node type {kind!r} has no ImageId (Ray would boot its CUDA 11.2 default)"
            assert image.lower() not in replaced and image not in DEFAULT_AMI.values(), (name, kind, image)
            # a current NVIDIA-driver image, by AWS's public parameter, or a pinned id (docs/cluster.md)
            assert DLAMI_PARAMETER.match(image) or AMI_ID.match(image), (name, kind, image)
        # the GPU workers and the head boot the same image: one place to change it
        assert len({n["node_config"]["ImageId"] for n in c["available_node_types"].values()}) == 1, name
    assert "The nodes' image" in (CLUSTER.parent / "docs" / "cluster.md").read_text()


@pytest.mark.parametrize("name", KUBERAY)
def test_no_user_namespaced_pod_mounts_a_claim(name):
    """A `hostUsers: false` pod mounts its volumes idmapped, which NFS, EFS and Filestore (the RWX classes the
    RayJob's header recommends) do not support: on f4067d9 the `tools` pod mounted the claim and never started, and
    the RayJob waited for it until its 72-hour deadline."""
    for pod in pod_specs(load(name)):
        if pod.get("hostUsers") is False:
            assert not [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v or "ephemeral" in v], pod
            assert not mount_claims(pod)


def test_the_claimless_tools_pod_runs_only_the_tool_servers():
    """Nothing that reads the staged files may land on the claimless `tools` pod. verl 0.9.1 spreads its agent-loop
    and reward-loop workers round-robin over every node offering CPUs (experimental/agent_loop/agent_loop.py,
    reward_loop.py: `Resources.CPU > 0`) and TransferQueue its storage units over every alive node (hard affinity,
    transfer_queue/utils/common.py) unless a resource is required: the pod offers no CPUs, h100_2x8's tool servers ask
    for none, and the job requires CPUs of the storage units' nodes."""
    from cluster.verl.config import verl_overrides

    j = load("kuberay/rayjob.yaml")
    (tools,) = [g for g in groups(j) if g["template"]["spec"].get("hostUsers") is False]
    assert not offers_cpus(tools) and [g for g in groups(j) if offers_cpus(g)]
    cfg = load_config(["experiment=h100_2x8"])
    assert set(cfg.cluster.tool_resources) <= set(start_resources(tools["rayStartParams"]))
    assert cfg.zoo.server.num_cpus == 0  # or no tool server could be placed there
    assert "+transfer_queue.backend.SimpleStorage.required_node_resource=CPU" in verl_overrides(cfg, [])


def with_efa(name: str) -> dict:
    """The manifest with its EFA opt-in enabled, as docs/cluster.md says: `sed -i 's/#efa //' <file>`."""
    text = (CLUSTER / name).read_text()
    return yaml.safe_load(text.replace("#efa ", ""))


def test_efa_is_an_opt_in_of_both_manifests():
    """On f4067d9 no EFA device reached the containers, and nothing said how to pass one: HSDP's cross-node gradient
    all-reduce (~4 GB fp32 per rank per micro-batch) ran over TCP sockets. Off by default (the instance, its launch
    template and the image must carry EFA); enabled, each manifest passes the devices where the GPUs are."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    assert "infiniband" not in str(load("ray-cluster.yaml"))  # off unless enabled
    assert "vpc.amazonaws.com/efa" not in str(load("kuberay/rayjob.yaml")) and "FI_PROVIDER" not in str(
        yaml.safe_load(load("kuberay/rayjob.yaml")["spec"]["runtimeEnvYAML"]))
    c = with_efa("ray-cluster.yaml")
    validate_config(prepare_config(c))  # still a cluster config `ray up` accepts
    opts = c["docker"]["worker_run_options"]  # the GPU workers only: the CPU head has no EFA device
    assert {"--device=/dev/infiniband", "--cap-add=IPC_LOCK", "--ulimit memlock=-1:-1"} <= set(opts)
    assert "head_run_options" not in c["docker"] and not [o for o in c["docker"]["run_options"] if "infiniband" in o]
    assert c["available_node_types"]["h100"]["node_config"]["LaunchTemplate"]["LaunchTemplateName"]
    assert "LaunchTemplate" not in c["available_node_types"]["head"]["node_config"]
    assert [s for s in c["worker_setup_commands"] if "/opt/amazon/ofi-nccl/lib" in s and "ldconfig" in s]
    j = with_efa("kuberay/rayjob.yaml")
    (gpu,) = [g for g in j["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "h100"]
    res = gpu["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["vpc.amazonaws.com/efa"] == res["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert yaml.safe_load(j["spec"]["runtimeEnvYAML"])["env_vars"]["FI_PROVIDER"] == "efa"
    others = [g for g in groups(j) if g is not gpu]
    assert not [g for g in others if "efa" in str(g["template"]["spec"]["containers"][0].get("resources", {}))]
    assert "## EFA" in (CLUSTER.parent / "docs" / "cluster.md").read_text()
