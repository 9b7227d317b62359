"""Dashboard metrics: the series Orchestra exports through `ray.util.metrics`.

Ray ships every series to its node's Prometheus export port (`ray.nodes()[i]["MetricsExportPort"]`), where the
Ray dashboard's Prometheus/Grafana integration scrapes it under the name `ray_orchestra_<name>`;
cluster/grafana/orchestra_dashboard.json charts them. Who records what:

- tool-server actors: calls (by tool, tier, status), latency, $ and calls waiting/running per tool;
- rollout workers: episodes finished (by preset and termination) and the policy version each worker holds;
- the training driver: reward, accuracy and $ per step, seconds per phase, the learner's update time,
  the weight-version lag of the episodes it learned from, held-out scores;
- the Serve app: requests by HTTP status, latency and budget-stopped episodes.

`SERIES` is the one list of names (the test and the dashboard JSON are checked against it). Recording is a no-op
outside a Ray process (unit tests build the actors' classes directly) and a metric that fails never fails the
call it measures. Tags are small closed sets (tool, tier id, preset, phase, status), so series stay few.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from orchestra.preferences import PRESETS

log = logging.getLogger("orchestra.metrics")

PREFIX = "orchestra_"
SECONDS = [0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]

# name -> (kind, description, tag keys)
SERIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tool_calls_total": ("counter", "tool calls served, by tool, tier and status", ("tool", "tier", "status")),
    "tool_latency_seconds": ("histogram", "tool call latency as the caller sees it (queue + service)",
                             ("tool", "tier")),
    "tool_cost_usd_total": ("counter", "dollars charged by tool calls", ("tool", "tier")),
    "tool_in_flight": ("gauge", "calls at a tool server, waiting for a slot or running", ("tool", "state")),
    "episodes_total": ("counter", "episodes finished by rollout workers, by preset and termination",
                       ("preset", "termination")),
    "policy_version": ("gauge", "policy version held by each rollout worker", ("worker",)),
    "step_reward": ("gauge", "mean reward of the last RL step's episodes", ()),
    "step_accuracy": ("gauge", "accuracy of the last RL step's episodes", ()),
    "step_cost_usd": ("gauge", "mean $ per episode in the last RL step", ()),
    "step": ("gauge", "the RL step the driver last finished", ()),
    "phase_seconds": ("gauge", "seconds the last RL step spent per phase", ("phase",)),
    "learner_update_seconds": ("histogram", "seconds per learner update (all micro-batches and epochs)", ()),
    "weight_version_lag": ("gauge", "learner version minus the oldest policy version in the step's episodes", ()),
    "heldout_score": ("gauge", "held-out mean score at each evaluation", ("stage",)),
    "serve_requests_total": ("counter", "Serve chat requests by HTTP status", ("code",)),
    "serve_latency_seconds": ("histogram", "Serve chat latency to the response (first byte when streaming)",
                              ("code",)),
    "serve_budget_stops_total": ("counter", "served episodes stopped by their $/seconds/turns budget", ()),
    # the group barrier's backstop (both backends; the verl path has no driver that reads step_report())
    "reward_barrier_total": ("counter", "reward groups scored by their deadline, and members arriving after it",
                             ("event",)),
}


@functools.cache
def _metric(name: str) -> Any:
    from ray.util import metrics

    kind, description, tags = SERIES[name]
    full = PREFIX + name
    if kind == "counter":
        return metrics.Counter(full, description=description, tag_keys=tags)
    if kind == "gauge":
        return metrics.Gauge(full, description=description, tag_keys=tags)
    return metrics.Histogram(full, description=description, boundaries=SECONDS, tag_keys=tags)


def record(name: str, value: float = 1.0, **tags: Any) -> None:
    """Add to a counter, set a gauge or observe a histogram value (by the series' kind); never raises."""
    try:
        import ray

        if not ray.is_initialized():
            return
        kind = SERIES[name][0]
        if kind == "counter" and value <= 0:
            return  # counters only go up; a free call adds nothing to the $ counter
        metric = _metric(name)
        str_tags = {k: str(v) for k, v in tags.items()}
        if kind == "counter":
            metric.inc(float(value), tags=str_tags)
        elif kind == "gauge":
            metric.set(float(value), tags=str_tags)
        else:
            metric.observe(float(value), tags=str_tags)
    except Exception as e:  # the dashboard is a view: losing a point must not cost an episode
        log.debug("metric %s not recorded: %s", name, e)


def preset_of(pref: dict[str, float]) -> str:
    """The preset name of a preference vector, or 'custom' (a sampled vector): a closed tag set."""
    for name, vec in PRESETS.items():
        if dict(vec) == dict(pref):
            return name
    return "custom"


def tier_of(args: Any, ok: bool, tiers: dict[str, str]) -> str:
    """The tier id a call names ('' for none) when the call resolved it (it succeeded, or the task maps it);
    anything else a model wrote there is 'other', so malformed output cannot multiply the series."""
    tier = args.get("model", "") if isinstance(args, dict) else ""
    return tier if tier == "" or (isinstance(tier, str) and (ok or tier in tiers)) else "other"


def tool_status(meta: dict[str, Any], ok: bool) -> str:
    if meta.get("cached"):
        return "cached"
    if meta.get("budget_refused"):
        return "refused"
    if meta.get("timeout"):
        return "timeout"
    return "ok" if ok else "error"


def record_step(step: int, metrics: dict[str, Any]) -> None:
    """The driver's per-step series (metrics as cluster/trainer.py's `step` returns them, with phase_s)."""
    record("step", step)
    for key, series in (("reward", "step_reward"), ("accuracy", "step_accuracy"), ("cost_usd", "step_cost_usd"),
                        ("version_lag", "weight_version_lag")):
        if key in metrics:
            record(series, metrics[key])
    for phase, seconds in (metrics.get("phase_s") or {}).items():
        record("phase_seconds", seconds, phase=phase)
    learner = metrics.get("learner") or {}
    if "time_s" in learner:
        record("learner_update_seconds", learner["time_s"])


def exported(timeout_s: float = 5.0) -> tuple[str, dict[str, int]]:
    """(this node's export URL, {series name: labelled series}) of Orchestra's series as Prometheus scrapes them
    now; ('', {}) when Ray or the port is not there. For the end-of-run line that says what the dashboard has."""
    import urllib.request

    try:
        import ray

        node = next(n for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort"))
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        text = urllib.request.urlopen(url, timeout=timeout_s).read().decode()
    except Exception as e:
        log.debug("metrics export port not read: %s", e)
        return "", {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0].removeprefix("ray_" + PREFIX)
        if not line.startswith("ray_" + PREFIX) or name.endswith(("_bucket", "_sum")):
            continue  # a histogram is one series per tag set: counted once, by its _count line
        name = name.removesuffix("_count") if name.removesuffix("_count") in SERIES else name
        counts[name] = counts.get(name, 0) + 1
    return url, counts
