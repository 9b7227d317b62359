"""Serve entry point: `python -m cluster.serve [key=value ...] [--check]` (what `make serve` runs).

Reads conf/serve.yaml (a Ray Serve config; `config=PATH` picks another), applies command-line overrides,
starts a local Ray cluster (or attaches to $RAY_ADDRESS), runs the app and prints the URL and how to call it,
then serves until Ctrl-C. Overrides:
  host=127.0.0.1 port=8000           HTTP address (http_options)
  replicas=N num_cpus=X num_gpus=Y   the deployment's replicas and per-replica resources
  resources={name: amount}           custom Ray resources per replica (which nodes may host one)
  max_replicas_per_node=1            every replica on a node of its own
  proxy_location=HeadOnly            one HTTP proxy, on the head (EveryNode: conf/serve.yaml's)
  checkpoint=... experiment=... ...   any actors.serve.api.ServeSettings field (the application args)
  experts=FILE                        the run's experts bound to live OpenAI-compatible endpoints
                                      (actors/serve/binding.py); checked here, before Ray starts
  model.dtype=bfloat16 ...            any other dotted key: an override of the experiment config
`--check` validates everything and prints the resolved plan without starting Ray.
The app itself is actors/serve/ (service.py: the agent loop per request; http.py: routes, auth; wiring.py: the build); this file only knows resources and addresses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from actors.serve.api import ServeSettings, settings_from_dict

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "serve.yaml"
SETTINGS_KEYS = {f.name for f in dataclasses.fields(ServeSettings)}
PROXY_LOCATIONS = ("EveryNode", "HeadOnly", "Disabled")


@dataclasses.dataclass
class ServePlan:
    app_name: str
    route_prefix: str
    args: dict[str, Any]
    http_options: dict[str, Any]
    deployment_options: dict[str, Any]
    # EveryNode: an HTTP proxy on every node (conf/serve.yaml); HeadOnly: one, on the head (several nodes on one
    # machine cannot all bind the same host and port)
    proxy_location: str = "EveryNode"


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text) if text else ""  # YAML scalars: 8000 -> int, true -> bool
    except yaml.YAMLError:
        return text


def plan(argv: list[str]) -> ServePlan:
    """conf/serve.yaml + overrides -> what to run; raises ValueError naming a bad key or value."""
    import yaml

    items = [a for a in argv if a != "--check"]
    config = DEFAULT_CONFIG
    for item in items:
        if item.startswith("config="):
            config = Path(item.split("=", 1)[1])
    if not config.is_file():
        raise ValueError(f"serve config {config} does not exist")
    doc = yaml.safe_load(config.read_text()) or {}
    apps = doc.get("applications") or []
    if not apps:
        raise ValueError(f"{config}: no applications")
    app = apps[0]
    args = dict(app.get("args") or {})
    args["overrides"] = list(args.get("overrides") or [])
    deployments = app.get("deployments") or [{}]
    dep = {k: v for k, v in deployments[0].items() if k != "name"}
    dep["ray_actor_options"] = dict(dep.get("ray_actor_options") or {})
    http = dict(doc.get("http_options") or {})
    doc_proxy = doc.get("proxy_location", "EveryNode")
    for item in items:
        if item.startswith("config="):
            continue
        if "=" not in item:
            raise ValueError(f"argument {item!r} is not key=value (or --check)")
        key, raw = item.split("=", 1)
        value = _parse_value(raw)
        if key in ("host", "port"):
            http[key] = value
        elif key == "replicas":
            dep.pop("autoscaling_config", None)
            dep["num_replicas"] = int(value)
        elif key in ("num_cpus", "num_gpus"):
            dep["ray_actor_options"][key] = float(value)
        elif key == "resources":  # custom Ray resources per replica: which nodes may host one
            if not isinstance(value, dict):
                raise ValueError(f"resources={raw}: a mapping such as {{orchestra_workers: 0.001}}")
            dep["ray_actor_options"]["resources"] = {str(k): float(v) for k, v in value.items()}
        elif key == "max_replicas_per_node":  # 1: every replica on a node of its own (a lost node takes one)
            dep["max_replicas_per_node"] = int(value)
        elif key == "proxy_location":
            if value not in PROXY_LOCATIONS:
                raise ValueError(f"proxy_location={value!r}: one of {', '.join(PROXY_LOCATIONS)}")
            doc_proxy = value
        elif key in SETTINGS_KEYS:
            args[key] = value
        elif "." in key:
            args["overrides"].append(item)
        else:
            raise ValueError(f"unknown key {key!r}; use host, port, replicas, num_cpus, num_gpus, resources, "
                             "max_replicas_per_node, proxy_location, config, "
                             f"{', '.join(sorted(SETTINGS_KEYS))}, or a dotted experiment key")
    settings_from_dict(args)  # names a bad application arg before anything starts
    return ServePlan(app.get("name", "orchestra"), app.get("route_prefix", "/"), args, http, dep, doc_proxy)


def pick_checkpoint(args: dict[str, Any], explicit: bool) -> None:
    """No checkpoint named anywhere: serve the newest trained run (as the experiment it was trained in); a named
    one must hold a model. Raises ValueError with what to do."""
    from actors.serve.wiring import resolve_checkpoint
    from cluster.runs import newest_run
    from orchestra.config import load_config

    if args.get("checkpoint"):
        path = str(args["checkpoint"])
        if path.startswith(("/", ".", "~", "runs/")) and not Path(path).expanduser().exists():
            raise ValueError(f"checkpoint={path} does not exist; run `make train` first or name another run")
        try:
            resolve_checkpoint(path)  # anything else that is not a directory is a model name for load_policy
        except ValueError as e:
            raise ValueError(f"checkpoint={path}: {e}; run `make train` first or name another run") from e
        return
    if explicit:
        return  # `checkpoint=`: the experiment's untrained model, on purpose
    cfg = load_config([f"experiment={args.get('experiment', 'cpu_tiny')}", *args["overrides"]])
    found = newest_run(cfg.run_dir)
    if found is None:
        print(f"no trained run under {Path(cfg.run_dir).parent}/: serving the untrained {cfg.name} policy "
              "(run `make train` first, or pass checkpoint=PATH)", file=sys.stderr)
        return
    try:
        resolve_checkpoint(str(found[0]))
    except ValueError as e:
        raise ValueError(f"the newest trained run cannot be served: {e}; name another with checkpoint=PATH") from e
    args["checkpoint"] = str(found[0])
    if found[1] and found[1] != args.get("experiment"):
        args["experiment"] = found[1]
    print(f"serving the newest trained run, {found[0]}; checkpoint=PATH picks another", file=sys.stderr)


# What a policy was trained to read and call: served under other values it meets a prompt, a catalogue or tier
# ids it never saw (review A5.3: a GPU checkpoint served under cpu_tiny's 6 tiers, 4 turns and 400-char documents).
TRAINED_KEYS = ("agent.context_mode", "agent.answer_mode", "agent.max_turns", "agent.max_context_tokens",
                "agent.doc_chars", "agent.code_chars", "agent.attempt_chars", "agent.preference_words",
                "agent.preference_numbers", "agent.preference_levels", "agent.latency_words", "agent.number_format",
                "agent.prompt_format", "data.tiers", "zoo.tools")


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def adopt_run_config(args: dict[str, Any], explicit_experiment: bool, deployment: dict[str, Any]) -> None:
    """A checkpoint that carries the config it was trained with (<run>/config.yaml; a verl export's
    orchestra_config.yaml) is served as that config: prompt, tiers, turns, tools, dtype, device and engine. An
    experiment= or override that contradicts one of TRAINED_KEYS is refused with one line. A config that runs
    on a GPU (engine vllm or model.device cuda) gets a GPU per replica when none was asked for."""
    from actors.serve.binding import run_config
    from orchestra.config import load_config

    saved = run_config(str(args["checkpoint"])) if args.get("checkpoint") else None
    if saved is None:
        return
    saved = saved.resolve()
    trained = load_config([f"experiment={saved}"])
    if not explicit_experiment:
        args["experiment"] = str(saved)
    served = load_config([f"experiment={args.get('experiment', 'cpu_tiny')}", *args["overrides"]])
    for key in TRAINED_KEYS:
        if _get(served, key) != _get(trained, key):
            raise ValueError(f"{key}={_get(served, key)!r} contradicts the checkpoint's training config "
                             f"({saved}: {_get(trained, key)!r}); drop the override, or leave experiment= out")
    options = deployment.setdefault("ray_actor_options", {})
    if (served.engine.kind == "vllm" or served.model.device == "cuda") and not options.get("num_gpus"):
        options["num_gpus"] = 1.0
        print(f"the checkpoint's config runs on a GPU (engine {served.engine.kind}, {served.model.dtype}): one GPU "
              "per replica (num_gpus=... picks another)", file=sys.stderr)


def check_experts(args: dict[str, Any]) -> None:
    """experts=FILE: refuse, naming the expert and tier, a binding that leaves a trained tier unbound (the served
    config is the checkpoint's own by now: adopt_run_config). Raises ValueError (ConfigError) with one line."""
    from actors.serve.binding import bind_experts
    from orchestra.config import load_config

    path = Path(str(args["experts"])).expanduser()
    if not path.is_file():
        raise ValueError(f"experts={args['experts']}: no such file")
    args["experts"] = str(path.resolve())  # replicas may start in another directory
    bind_experts(load_config([f"experiment={args.get('experiment', 'cpu_tiny')}", *args["overrides"]]), path)


def port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ensure_api_key(env: str) -> None:
    """The endpoint never runs open: with no key in $env, one is generated once, kept in runs/serve_api_key
    (mode 0600; `make demo` reads it) and handed to the local cluster through the environment. Never printed."""
    import secrets

    if os.environ.get(env, "").strip():
        return
    from cluster.demo import KEY_FILE

    if not KEY_FILE.is_file():
        KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        tmp = KEY_FILE.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        os.replace(tmp, KEY_FILE)
    os.environ[env] = KEY_FILE.read_text().strip()
    print(f"no ${env} set: the API key is in {KEY_FILE} (clients: export ORCHESTRA_API_KEY=$(cat {KEY_FILE}); "
          "`make demo` reads it)", file=sys.stderr)


def usage_text(url: str, model_id: str) -> str:
    key = "$ORCHESTRA_API_KEY"
    return (f"Orchestra is serving at {url}  (model id {model_id!r})\n"
            f"  curl {url}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\\n"
            f"    -d '{{\"model\": \"{model_id}\", \"messages\": [{{\"role\": \"user\", \"content\": \"What is 17 * 23?\"}}],"
            f" \"preference\": \"cost-first\", \"budget\": {{\"usd\": 0.05}}}}'\n"
            f"  python: openai.OpenAI(base_url='{url}/v1', api_key=...).chat.completions.create(model='{model_id}', ...)\n"
            "Ctrl-C stops it.")


def stop_on_signals() -> None:
    """SIGINT (Ctrl-C) and SIGTERM raise KeyboardInterrupt in the main thread, wherever main() is (starting Serve
    or serving), so its `finally` shuts Serve and Ray down and it exits 0. Set explicitly for both: Ray's own SIGTERM
    handler exits without Serve's shutdown, and a process started in the background by a non-interactive shell
    (`make serve &`) inherits SIGINT *ignored*, so Python never raises KeyboardInterrupt and `kill -INT` did
    nothing. A second signal during the shutdown exits at once."""
    import signal

    def again(signum: int, frame: Any) -> None:
        print("stopping now, without waiting for Serve and Ray", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    def first(signum: int, frame: Any) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, again)
        print(f"{signal.Signals(signum).name}: stopping Serve and Ray (again to stop at once)", file=sys.stderr,
              flush=True)
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, first)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        p = plan(argv)
        pick_checkpoint(p.args, explicit=any(a.startswith("checkpoint=") for a in argv))
        adopt_run_config(p.args, any(a.startswith("experiment=") for a in argv), p.deployment_options)
        if p.args.get("experts"):
            check_experts(p.args)
    except ValueError as e:
        print(f"serve config error: {e}", file=sys.stderr)
        return 2
    if "--check" in argv:
        shown = dataclasses.asdict(p)
        shown["args"]["api_keys"] = ["***"] * len(shown["args"].get("api_keys") or [])  # keys never printed
        print(json.dumps(shown, indent=2))
        return 0
    address = os.environ.get("RAY_ADDRESS", "")
    host, port = p.http_options.get("host", "127.0.0.1"), int(p.http_options.get("port", 8000))
    if not address:  # a local cluster: the port and the key are this machine's business
        if not port_free(host, port):
            print(f"port {port} on {host} is in use (another `make serve`?): stop it or pass port={port + 1}",
                  file=sys.stderr)
            return 2
        ensure_api_key(str(p.args.get("api_keys_env", "ORCHESTRA_API_KEYS")))
    import ray
    from ray import serve

    from actors.serve.app import deployment

    if address:
        ray.init(address=address)
    else:  # a cluster of its own even when `ray start` left one running here (RAY_ADDRESS attaches to one)
        ray.init(address="local", include_dashboard=False)
    stop_on_signals()  # after ray.init, which installs a SIGTERM handler of its own
    try:
        if p.args.get("tools") == "actors":  # started by the driver so they outlive any one replica
            from actors.serve.wiring import tool_server_handles
            from orchestra.config import load_config

            cfg = load_config([f"experiment={p.args.get('experiment', 'cpu_tiny')}", *p.args["overrides"]])
            if p.args.get("experts"):  # the replicas' zoo, bound: the same actors (named by a hash of it)
                from actors.serve.binding import bind_experts

                cfg = bind_experts(cfg, p.args["experts"])
            tool_server_handles(cfg.zoo, list(cfg.zoo.tools))
        serve.start(http_options=p.http_options, proxy_location=p.proxy_location)
        serve.run(deployment(**p.deployment_options).bind(p.args), name=p.app_name, route_prefix=p.route_prefix)
        host = p.http_options.get("host", "127.0.0.1")
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{p.http_options.get('port', 8000)}"
        print(usage_text(url.rstrip("/") + p.route_prefix.rstrip("/"), p.args.get("model_id", "orchestra")), flush=True)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
