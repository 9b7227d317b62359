"""The KubeRay preflight (cluster/k8s_preflight.py) on known inputs: each missing precondition one line naming it,
what it cannot see said as such, nothing off Kubernetes; the manifests and docs state the same numbers; the tool
server runs it on its own node and the launcher prints its lines once per pod, errors only where the sandbox
refuses."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from cluster import k8s_preflight as kp
from tests.cluster.test_manifests import CLUSTER, KUBERAY, header

K8S_ENV = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
USERNS_MAP = "         0    1234567      65536\n"  # a pod with its own user namespace (hostUsers: false)


@pytest.mark.parametrize(("release", "missing"), [("5.15.0-1051-aws", True), ("6.2.16", True), ("6.3.0", False),
                                                  ("6.8.0-1015-aws", False), ("7.0.1", False)])
def test_kernel(release, missing):
    line = kp.kernel_line(release)
    assert (line is not None) == missing
    if missing:
        assert release in line and "Linux >= 6.3" in line


@pytest.mark.parametrize(("version", "missing"), [("v1.32.3-eks-4f8a1c2", True), ("v1.33.0", False),
                                                  ("v1.36.1+k3s1", False), ("v1.9.0", True)])
def test_kubernetes_version(version, missing):
    line = kp.kubernetes_line(version)
    assert (line is not None) == missing
    if missing:
        assert version in line and ">= 1.33" in line


@pytest.mark.parametrize(("labels", "missing"), [
    ({}, False), ({kp.ENFORCE: "privileged"}, False), ({kp.ENFORCE: "baseline"}, True),
    ({kp.ENFORCE: "restricted", "pod-security.kubernetes.io/warn": "restricted"}, True),
    ({"pod-security.kubernetes.io/warn": "baseline"}, False)])  # only `enforce` rejects pods
def test_pod_security_label(labels, missing):
    line = kp.pod_security_line("ml", labels)
    assert (line is not None) == missing
    if missing:
        assert "'ml'" in line and labels[kp.ENFORCE] in line and f"{kp.ENFORCE}=privileged" in line


def test_user_namespace():
    assert "hostUsers: false did not take effect" in kp.user_namespace_line("0 0 4294967295\n")
    assert kp.user_namespace_line(USERNS_MAP) is None


def fake_api(version: str | None = "v1.34.2", labels: dict | None = None, namespaces_status: int = 200):
    """The Kubernetes API as a pod sees it: /version readable by all, namespaces only when allowed."""
    def get(path: str, sa_dir: Path, env: dict) -> dict:
        if path == "/version":
            if version is None:
                raise urllib.error.URLError("connection refused")
            return {"gitVersion": version}
        assert path == "/api/v1/namespaces/ml", path
        if namespaces_status != 200:
            raise urllib.error.HTTPError(path, namespaces_status, "Forbidden", {}, None)
        return {"metadata": {"name": "ml", "labels": labels or {}}}
    return get


def reader(uid_map: str = USERNS_MAP, namespace: str | None = "ml"):
    def read(path: Path) -> str:
        if path.name == "uid_map":
            return uid_map
        if namespace is None:
            raise FileNotFoundError(path)
        return namespace + "\n"
    return read


def test_a_good_pod_has_nothing_missing():
    facts = kp.gather(K8S_ENV, release="6.8.0-1015-aws", read=reader(),
                      get=fake_api(labels={kp.ENFORCE: "privileged"}))
    assert kp.problems(facts) == []


def test_each_missing_precondition_is_one_line():
    facts = kp.gather(K8S_ENV, release="5.15.0-1051-aws", read=reader(uid_map="0 0 4294967295"),
                      get=fake_api(version="v1.31.0", labels={kp.ENFORCE: "baseline"}))
    lines = kp.problems(facts)
    assert len(lines) == 4
    assert ["Linux 5.15.0" in lines[0], "did not take effect" in lines[1], "Kubernetes v1.31.0" in lines[2],
            "'baseline'" in lines[3]] == [True] * 4


def test_what_it_cannot_see_it_says():
    """Most service accounts may not get namespaces (a cluster-scoped read): the line says so and how to look."""
    facts = kp.gather(K8S_ENV, release="6.8.0", read=reader(), get=fake_api(version=None, namespaces_status=403))
    lines = kp.problems(facts)
    assert len(lines) == 2
    assert lines[0].startswith("cannot see the Kubernetes version") and "kubectl version" in lines[0]
    assert lines[1].startswith("cannot see the namespace's Pod Security label") and "HTTP 403" in lines[1]
    assert "kubectl get ns ml --show-labels" in lines[1]
    no_token = kp.gather(K8S_ENV, release="6.8.0", read=reader(namespace=None), get=fake_api())
    assert [line for line in kp.problems(no_token) if "no service account namespace" in line]


def test_off_kubernetes_it_checks_nothing():
    assert kp.gather({}, release="5.4.0") is None
    assert kp.gather({"PATH": "/usr/bin"}) is None


@pytest.mark.parametrize("name", KUBERAY)
def test_manifests_and_docs_state_what_the_preflight_checks(name):
    """On bd00958 neither manifest said that baseline Pod Security rejects its pods, nor Linux >= 6.3 and runc >= 1.2
    or crun >= 1.9 for the user-namespaced pod."""
    docs = (CLUSTER.parent / "docs" / "cluster.md").read_text()
    kernel, kube = ".".join(map(str, kp.MIN_KERNEL)), ".".join(map(str, kp.MIN_KUBERNETES))
    for text in (header(name), docs):
        for needle in (f"Linux >= {kernel}", f"Kubernetes >= {kube}", kp.RUNTIMES, "`privileged` or unset",
                       "`baseline` rejects every pod"):
            assert needle in text.replace("\n# ", " ").replace("\n", " "), (name, needle)


def test_the_tool_server_runs_the_pod_checks_where_it_runs():
    """The checks travel to the code tool's server and run in its process; a tool without code runs none."""
    from actors.tool_server import ToolServer

    zoo = {"tools": ["python", "answer"], "sandbox": {}}
    ran = []
    verdict = ToolServer(zoo, "python").sandbox_verdict(lambda: ran.append(1) or ["missing X"])
    assert verdict["pod"] == ["missing X"] and ran == [1]
    assert ToolServer(zoo, "python").sandbox_verdict()["pod"] == []
    assert ToolServer(zoo, "answer").sandbox_verdict(lambda: ["never"]) is None


class FakeMethod:
    def __init__(self, verdict):
        self.verdict, self.args = verdict, None

    def remote(self, *args):
        self.args = args
        return self.verdict


class FakeHandle:
    def __init__(self, verdict):
        self.sandbox_verdict = FakeMethod(verdict)


def test_the_launcher_prints_a_pods_lines_once_as_errors_only_where_the_sandbox_refuses(monkeypatch):
    from cluster import launch
    from orchestra.config import load_config

    monkeypatch.setattr(launch, "wait_ready", lambda cfg, refs, what: refs)
    cfg = load_config(["experiment=verl_cpu_tiny"])
    refused = {"host": "tools-0", "shortfall": "cannot mount /proc", "allow_unconfined": False,
               "pod": ["the node runs Linux 5.15.0"]}
    handles = {"python": FakeHandle(refused), "enhance_reasoning": FakeHandle(dict(refused))}
    lines = launch.sandbox_preflight_servers(cfg, handles)
    assert handles["python"].sandbox_verdict.args == (kp.check,)  # the checks run on the server's node
    assert [line.split(":")[0] for line in lines] == ["error", "error", "error"]
    assert lines[0].startswith("error: the code sandbox of tool server 'python' on tools-0")  # what the job raises
    assert lines[1] == "error: pod tools-0: the node runs Linux 5.15.0"  # once for the pod, after its first server
    assert "'enhance_reasoning'" in lines[2]
    fine = {"host": "tools-1", "shortfall": None, "allow_unconfined": False, "pod": ["cannot see the label: 403"]}
    assert launch.sandbox_preflight_servers(cfg, {"python": FakeHandle(fine)}) == \
        ["warning: pod tools-1: cannot see the label: 403"]
