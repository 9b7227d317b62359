"""Serve entry point: `python -m cluster.serve [key=value ...] [--check]` (what `make serve` runs).

Reads conf/serve.yaml (a Ray Serve config; `config=PATH` picks another), applies command-line overrides,
starts a local Ray cluster (or attaches to $RAY_ADDRESS), runs the app and prints the URL and how to call it,
then serves until Ctrl-C. Overrides:
  host=127.0.0.1 port=8000           HTTP address (http_options)
  replicas=N num_cpus=X num_gpus=Y   the deployment's replicas and per-replica resources
  checkpoint=... experiment=... ...   any actors.serve.api.ServeSettings field (the application args)
  model.dtype=bfloat16 ...            any other dotted key: an override of the experiment config
`--check` validates everything and prints the resolved plan without starting Ray.
The app itself (routes, auth, agent loop) is actors/serve/app.py; this file only knows resources and addresses.
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


@dataclasses.dataclass
class ServePlan:
    app_name: str
    route_prefix: str
    args: dict[str, Any]
    http_options: dict[str, Any]
    deployment_options: dict[str, Any]


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
        elif key in SETTINGS_KEYS:
            args[key] = value
        elif "." in key:
            args["overrides"].append(item)
        else:
            raise ValueError(f"unknown key {key!r}; use host, port, replicas, num_cpus, num_gpus, config, "
                             f"{', '.join(sorted(SETTINGS_KEYS))}, or a dotted experiment key")
    settings_from_dict(args)  # names a bad application arg before anything starts
    return ServePlan(app.get("name", "orchestra"), app.get("route_prefix", "/"), args, http, dep)


def pick_checkpoint(args: dict[str, Any], explicit: bool) -> None:
    """No checkpoint named anywhere: serve the newest trained run (as the experiment it was trained in); a named
    one must hold a model. Raises ValueError with what to do."""
    from actors.serve.app import resolve_checkpoint
    from cluster.evaluate import newest_run
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        p = plan(argv)
        pick_checkpoint(p.args, explicit=any(a.startswith("checkpoint=") for a in argv))
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
    try:
        if p.args.get("tools") == "actors":  # started by the driver so they outlive any one replica
            from actors.serve.app import tool_server_handles
            from orchestra.config import load_config

            cfg = load_config([f"experiment={p.args.get('experiment', 'cpu_tiny')}", *p.args["overrides"]])
            tool_server_handles(cfg.zoo, list(cfg.zoo.tools))
        serve.start(http_options=p.http_options)
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
