"""Where a verl job's actors ran, said at its end: verl's ranks (its FSDP worker groups) and rollout, our tool servers
and reward actor, each with its node's IP, read from Ray's state API (dead actors included: verl's workers have
ended by then). The evidence that a job of `verl.nnodes` > 1 trained on that many nodes and that the tool servers ran
where `cluster.tool_resources` pinned them."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from orchestra.config import ExperimentConfig

# verl names its colocated worker actors <prefix>WorkerDict_<placement group>:<local rank> (single_controller/ray/
# base.py), one placement group per node of the pool: the global rank is group x GPUs per node + local rank
RANK = re.compile(r"WorkerDict_(\d+):(\d+)$")


def job_actors() -> list[Any]:
    """This job's actors, alive or dead, from the state API (the cluster's dashboard)."""
    import ray
    from ray.util.state import list_actors

    job = ray.get_runtime_context().get_job_id()
    return list_actors(filters=[("job_id", "=", job)], limit=10_000, detail=True, raise_on_missing_output=False)


def placement(actors: list[Any], ips: dict[str, str], per_node: int) -> dict[str, dict[str, list[str]]]:
    """{role: {node IP: [actor]}} for the roles a verl job has: `ranks` (verl's worker groups, by rank), `tools`
    (our tool servers), `reward`, `verl` (its other actors: task runner, agent loop, reward loop, storage)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for a in actors:
        name, cls = getattr(a, "name", "") or "", getattr(a, "class_name", "") or ""
        ip = ips.get(getattr(a, "node_id", "") or "", "?")
        rank = RANK.search(name)
        if rank:
            out["ranks"][ip].append(f"rank {int(rank.group(1)) * per_node + int(rank.group(2))}")
        elif name.startswith("tool:") or cls == "ToolServer":
            out["tools"][ip].append(name or cls)
        elif name == "reward":
            out["reward"][ip].append(name)
        else:
            out["verl"][ip].append(cls)
    return out


def lines(cfg: ExperimentConfig, where: dict[str, dict[str, list[str]]], offers: dict[str, set[str]]) -> list[str]:
    ranks = where.get("ranks", {})
    out = [f"placement: verl's ranks on {len(ranks)} node(s): "
           + "; ".join(f"{ip}: {', '.join(sorted(r))}" for ip, r in sorted(ranks.items()))]
    tools = where.get("tools", {})
    wanted = set(cfg.cluster.tool_resources)
    pinned = all(wanted <= offers.get(ip, set()) for ip in tools) if wanted else True
    out.append(f"placement: tool servers on {', '.join(sorted(tools)) or 'no node'}"
               + (f" ({'every one on' if pinned else 'NOT all on'} a node offering {sorted(wanted)})" if wanted else ""))
    if where.get("reward"):
        out.append("placement: the reward actor on " + ", ".join(sorted(where["reward"])))
    if where.get("verl"):  # verl's own: its task runner, agent-loop and reward-loop workers, storage, rollout servers
        out.append("placement: verl's other actors on " + "; ".join(
            f"{ip}: " + ", ".join(f"{n} {c}" if n > 1 else c for c, n in sorted(Counter(v).items()))
            for ip, v in sorted(where["verl"].items())))
    return out


def print_placement(cfg: ExperimentConfig) -> None:
    """The placement lines; a state API that cannot answer is said, never a reason to fail a finished job."""
    import ray

    try:
        nodes = ray.nodes()
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in nodes}
        offers: dict[str, set[str]] = defaultdict(set)
        for n in nodes:
            offers[n["NodeManagerAddress"]] |= set(n.get("Resources", {}))
        for line in lines(cfg, placement(job_actors(), ips, cfg.verl.gpus_per_node), offers):
            print(line, flush=True)
    except Exception as e:  # the job trained: its placement is a report, not a result
        print(f"placement: the state API did not answer ({type(e).__name__}: {e})", flush=True)
