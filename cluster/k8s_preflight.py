"""What a KubeRay pod needs from its cluster, checked from inside the pod before a job trains.

The RayJob's `tools` pod (cluster/kuberay/rayjob.yaml) runs the code sandbox in a user namespace of its own
(`hostUsers: false`, `procMount: Unmasked`). That takes, on the cluster's side: Kubernetes >= 1.33 (whose defaults
turn on UserNamespacesSupport and ProcMountType), Linux >= 6.3 on the node (idmapped tmpfs: KubeRay gives every pod
a memory emptyDir at /dev/shm), containerd >= 2.0 with runc >= 1.2 or crun >= 1.9, and a namespace whose Pod
Security level is `privileged` or unset (`baseline` rejects every pod of both manifests).

`check()` runs inside each code tool's server (cluster/launch.py sandbox_preflight_servers hands it to the tool
server's `sandbox_verdict`) and returns one line per thing it sees missing or cannot see:
  - the node's kernel (platform.release(): a container shares its node's kernel);
  - whether the pod has a user namespace of its own (/proc/self/uid_map): the container runtime's version is
    invisible from a pod, and a runtime that ignores `hostUsers: false` shows here;
  - the API server's version (GET /version, which Kubernetes lets every pod read);
  - the namespace's `pod-security.kubernetes.io/enforce` label (GET /api/v1/namespaces/<ns> with the pod's service
    account token: most service accounts may not read namespaces, and then the line says so). A pod that runs was
    admitted, so a rejecting label here was set after it started: any pod restarted or replaced now is refused.
Off Kubernetes (`ray up`, a laptop) it checks nothing. Everything but `gather`'s reads is pure and tested offline.
"""

from __future__ import annotations

import json
import os
import platform
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_KERNEL = (6, 3)
MIN_KUBERNETES = (1, 33)
RUNTIMES = "containerd >= 2.0 with runc >= 1.2 or crun >= 1.9"
ENFORCE = "pod-security.kubernetes.io/enforce"
ADMITTING = ("", "privileged")  # the Pod Security levels that admit the manifests' pods (unset: privileged)
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API_TIMEOUT_S = 3.0
# /proc/self/uid_map of a process in the node's own user namespace: every uid maps to itself
HOST_UID_MAP = [["0", "0", "4294967295"]]


def major_minor(text: str) -> tuple[int, int] | None:
    """(major, minor) from a version string: "6.8.0-1015-aws" -> (6, 8), "v1.33.2-eks-1" -> (1, 33)."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def kernel_line(release: str) -> str | None:
    """What is missing for the kernel `release` (platform.release()), or None."""
    got = major_minor(release)
    if got is None:
        return f"cannot read the node's kernel version from {release!r}: the user-namespaced `tools` pod needs " \
               f"Linux >= {MIN_KERNEL[0]}.{MIN_KERNEL[1]}"
    if got < MIN_KERNEL:
        return f"the node runs Linux {release}: a user-namespaced pod (hostUsers: false) needs Linux >= " \
               f"{MIN_KERNEL[0]}.{MIN_KERNEL[1]} for idmapped tmpfs (KubeRay's /dev/shm, the service account " \
               "token); schedule the `tools` pod on newer nodes"
    return None


def kubernetes_line(git_version: str) -> str | None:
    """What is missing for the API server's `gitVersion` (GET /version), or None."""
    got = major_minor(git_version)
    want = f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}"
    if got is None:
        return f"cannot read the Kubernetes version from {git_version!r}: the `tools` pod needs >= {want}"
    if got < MIN_KUBERNETES:
        return f"Kubernetes {git_version}: the `tools` pod's hostUsers: false and procMount: Unmasked need " \
               f">= {want} (UserNamespacesSupport and ProcMountType on by default), or both feature gates on"
    return None


def user_namespace_line(uid_map: str) -> str | None:
    """Whether the pod lacks a user namespace of its own, from /proc/self/uid_map's text."""
    rows = [line.split() for line in uid_map.splitlines() if line.strip()]
    if rows == HOST_UID_MAP:
        return "this pod shares the node's user namespace (/proc/self/uid_map maps every uid to itself): " \
               f"hostUsers: false did not take effect; the node needs {RUNTIMES} (containerd 1.x ignores it) " \
               "and Kubernetes' UserNamespacesSupport"
    return None


def pod_security_line(namespace: str, labels: Mapping[str, str]) -> str | None:
    """What the namespace's Pod Security `enforce` label rejects, or None when it admits the manifests' pods."""
    level = labels.get(ENFORCE, "")
    if level in ADMITTING:
        return None
    return f"namespace {namespace!r} enforces Pod Security {level!r} ({ENFORCE}): it rejects every pod of " \
           "cluster/kuberay/rayjob.yaml and rayservice.yaml (seccomp and AppArmor Unconfined), so a pod restarted " \
           f"or replaced now never starts; `kubectl label --overwrite ns {namespace} {ENFORCE}=privileged`"


@dataclass
class PodFacts:
    """What a pod can read about its cluster; None where it could not, with the reason in `unseen`."""

    kernel: str
    uid_map: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    git_version: str | None = None
    unseen: dict[str, str] = field(default_factory=dict)  # fact -> why it could not be read


def problems(facts: PodFacts) -> list[str]:
    """One line per precondition the facts show missing, then one per precondition that could not be checked."""
    lines = [kernel_line(facts.kernel)]
    if facts.uid_map is not None:
        lines.append(user_namespace_line(facts.uid_map))
    if facts.git_version is not None:
        lines.append(kubernetes_line(facts.git_version))
    if facts.labels is not None:
        lines.append(pod_security_line(facts.namespace or "?", facts.labels))
    lines += [f"cannot see {what}: {why}" for what, why in facts.unseen.items()]
    return [line for line in lines if line]


def api_get(path: str, sa_dir: Path, env: Mapping[str, str]) -> Any:
    """GET the Kubernetes API at `path` as the pod's service account (its token and CA), JSON decoded."""
    host, port = env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host  # an IPv6 service address
    context = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
    token = (sa_dir / "token").read_text().strip()
    request = urllib.request.Request(f"https://{host}:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=API_TIMEOUT_S, context=context) as response:
        return json.load(response)


def _why(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError) and error.code in (401, 403):
        return f"HTTP {error.code}: the pod's service account may not read it"
    return f"{type(error).__name__}: {error}"


def gather(env: Mapping[str, str] | None = None, sa_dir: Path = SA_DIR, release: str | None = None,
           read: Callable[[Path], str] = lambda p: p.read_text(),
           get: Callable[[str, Path, Mapping[str, str]], Any] = api_get) -> PodFacts | None:
    """The facts this pod can read; None off Kubernetes (every pod has KUBERNETES_SERVICE_HOST in its env)."""
    env = os.environ if env is None else env
    if not env.get("KUBERNETES_SERVICE_HOST"):
        return None
    facts = PodFacts(kernel=release if release is not None else platform.release())
    try:
        facts.uid_map = read(Path("/proc/self/uid_map"))
    except OSError as e:
        facts.unseen["this pod's user namespace"] = _why(e)
    try:
        facts.git_version = str(get("/version", sa_dir, env)["gitVersion"])
    except Exception as e:  # any failure is a fact we could not see, never a crash of the preflight
        facts.unseen["the Kubernetes version"] = f"{_why(e)}; `kubectl version` shows it"
    try:
        facts.namespace = read(sa_dir / "namespace").strip()
    except OSError as e:
        facts.unseen["the namespace's Pod Security label"] = f"no service account namespace ({_why(e)}); " \
                                                           "`kubectl get ns <namespace> --show-labels` shows it"
        return facts
    try:
        facts.labels = dict(get(f"/api/v1/namespaces/{facts.namespace}", sa_dir, env)["metadata"].get("labels") or {})
    except Exception as e:
        facts.unseen["the namespace's Pod Security label"] = \
            f"{_why(e)}; `kubectl get ns {facts.namespace} --show-labels` shows it ({ENFORCE} must be privileged or unset)"
    return facts


def check() -> list[str]:
    """This pod's missing preconditions, one line each ([] off Kubernetes or when nothing is missing)."""
    facts = gather()
    return problems(facts) if facts is not None else []
