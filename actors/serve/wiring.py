"""Production wiring of the Serve app: experiment config (or a checkpoint's own) -> policy + engine (HF in-process,
vLLM in-process on a GPU, or a remote vLLM server) + the zoo's tools (in the replica, or behind shared tool-server
actors with one spend ledger) + the estimator router -> an OrchestraService.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.serve.api import ServeSettings
from actors.serve.service import OrchestraService
from orchestra.agent.loop import AgentLoop

log = logging.getLogger("orchestra.serve")


def resolve_checkpoint(path: str) -> str:
    """A policy dir for load_policy: an HF id (not a directory) as is, else orchestra.rundir.checkpoint.model_dir."""
    from orchestra.rundir.checkpoint import model_dir

    return str(model_dir(path)) if Path(path).expanduser().is_dir() else path


def build_service(settings: ServeSettings) -> OrchestraService:
    """Production wiring: experiment config -> policy + engine + zoo tools (+ tool-server actors) -> service."""
    from orchestra.agent.prompt import Prompter
    from orchestra.config import load_config, task_tiers
    from orchestra.engine import eos_token_ids
    from orchestra.policy.models import load_policy

    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    if settings.experts:  # the run's experts served by live endpoints; refuses an unbound trained tier
        from actors.serve.binding import bind_experts

        cfg = bind_experts(cfg, settings.experts)
    m = cfg.model
    name = resolve_checkpoint(settings.checkpoint) if settings.checkpoint else m.name
    if cfg.engine.kind == "vllm":  # the gpu extra: vLLM loads the weights itself from a saved dir
        from orchestra.engine.vllm import VLLMEngine
        from orchestra.policy.models import config_tokenizer, smollm2_dir

        if name == "tiny":
            raise ValueError("engine.kind=vllm needs a saved checkpoint: pass checkpoint=<run or HF dir>")
        tok = config_tokenizer(m, name)
        from orchestra.rundir.checkpoint import servable_dir

        # vLLM loads every *.safetensors of a dir: a learner checkpoint's reference weights would be mixed in
        path = str(smollm2_dir(m.cache_dir)) if name == "smollm2" else (
            str(servable_dir(name)) if Path(name).is_dir() else name)
        engine: Any = VLLMEngine(path, dtype=m.dtype, max_model_len=cfg.engine.max_model_len,
                                 gpu_memory_utilization=cfg.engine.gpu_memory_utilization, seed=cfg.seed)
    elif cfg.engine.kind == "remote":  # a running vLLM server holds the weights (python -m cluster.vllm_server)
        from orchestra.engine.remote import RemoteEngine
        from orchestra.policy.models import config_tokenizer

        tok = config_tokenizer(m, name)
        engine = RemoteEngine(**cfg.engine.remote_kwargs())
    else:
        from orchestra.engine.hf import HFEngine

        model, tok = load_policy(name, tiny=m.tiny, dtype=m.dtype, device=m.device,
                                 attn_implementation=m.attn_implementation, cache_dir=m.cache_dir,
                                 chat_template=m.chat_template, seed=cfg.seed)
        engine = HFEngine.from_model(model, tok, device=str(model.device), **cfg.engine.hf_kwargs())
    eos = eos_token_ids(tok)
    a = cfg.agent
    prompter = Prompter(tok, **a.prompter_kwargs())
    loop = AgentLoop.from_config(a, engine, _tool_client(settings, cfg), prompter, eos_token_ids=eos)
    s = cfg.sampling
    # the tiers the policy was trained with (data.tiers when the experiment sets them, as cpu_tiny does): the
    # zoo's full list would show it a catalogue it never saw and map its tier ids to other experts
    return OrchestraService(loop, list(cfg.zoo.tools), task_tiers(cfg), model_id=settings.model_id,
                            max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                            max_tokens_limit=settings.max_tokens_limit,
                            router=router_engine(settings, tok, eos, task_tiers(cfg), list(cfg.zoo.tools)),
                            # only the model reads hints: router policies would embed each request twice
                            annotate=hint_attacher(settings) if a.route_hints and settings.policy == "model" else None)


def hint_attacher(settings: ServeSettings) -> Any:
    """agent.route_hints: the served policy was trained reading its run's estimator router's suggestion
    (orchestra/routing/hints.py attaches them), so every request's task gets that router's estimates (one embedding)."""
    from orchestra.routing.router import EstimatorRouter, find_router
    from tools.retrieval.dense import embed_texts

    where = settings.router or settings.checkpoint
    found = find_router(where) if where else None
    if found is None:
        raise ValueError(f"agent.route_hints=true: the policy reads its run's estimator router, and there is none "
                         f"under {where or '(no checkpoint given)'}; set router=<run dir>")
    return EstimatorRouter.load(found, embed_texts).attach_hints


def router_engine(settings: ServeSettings, tok: Any, eos: list[int], tiers: dict[str, str] | None = None,
                  tools: Sequence[str] = ()) -> Any:
    """The served routing policy (orchestra/routing/registry.py, where=serve) as task -> engine; None for the model.
    policy=estimator: a scripted engine playing the route the estimator router (saved by an expected-value warm
    start in `<run dir>/router/`) picks under the request's preference; policy=router: one `answer` call of the
    tier it picks, or, where the served `tools` include consult and submit and the router was fitted with adaptive
    plans, one of those when it rates higher (EstimatorRouter.single_caller). `tiers`: the served tier -> expert
    mapping."""
    from orchestra.routing import registry

    policy = registry.get(settings.policy, "serve")
    if policy.kind == "model":
        return None
    from orchestra.agent.scripted import script_engine
    from tools.retrieval.dense import embed_texts

    where = settings.router or settings.checkpoint
    found = registry.find_saved(where, [policy]) if where else None
    if found is None:
        raise ValueError(f"policy={settings.policy}: no estimator router under "
                         f"{where or '(no checkpoint or router given)'}; train with sft.teacher=expected_value "
                         "(make train does) or set router=<run dir>")
    router = registry.load_saved(found, embed_texts, [policy])[policy.name]
    return policy.serve(router, registry.Serving(lambda script: script_engine(tok, script, eos[0]), tok, eos[0],
                                                 tiers, tools, settings.router_tiers, settings.router_threshold))


def _tool_client(settings: ServeSettings, cfg: Any) -> Any:
    if settings.tools == "local":
        from tools.base import LocalToolClient

        if cfg.zoo.spend_cap_usd is not None:  # a cap per replica would multiply it by the replica count
            raise ValueError("zoo.spend_cap_usd is enforced by one spend ledger shared by every replica: serve with "
                             "tools=actors (conf/serve.yaml, or `tools=actors` in make serve's ARGS)")
        from tools.registry import build_tools

        return LocalToolClient(build_tools(cfg.zoo, list(cfg.zoo.tools)))
    from actors.tool_client import RayToolClient

    return RayToolClient(tool_server_handles(cfg.zoo, list(cfg.zoo.tools)), timeout_s=settings.tool_timeout_s)


TOOL_NAMESPACE = "orchestra-serve"


def tool_server_handles(zoo: Any, names: list[str]) -> dict[str, Any]:
    """Handles of the shared tool-server actors for `zoo`, started if absent. Named by tool and a hash of the
    zoo config, so every replica (and cluster/serve.py, which starts them first so they outlive any replica)
    finds the same actors, and a different zoo never reuses them."""
    import hashlib

    import ray

    from actors.spend_ledger import make_spend_ledger
    from actors.tool_server import make_tool_server
    from tools.registry import zoo_dict

    zd = zoo_dict(zoo)
    tag = hashlib.sha256(json.dumps(zd, sort_keys=True, default=str).encode()).hexdigest()[:10]
    srv = zd.get("server") or {}

    def get_or_make(actor: str, make: Any) -> Any:
        for _ in range(3):  # two replicas may race to create the same actor: the loser looks it up
            try:
                return ray.get_actor(actor, namespace=TOOL_NAMESPACE)
            except ValueError:
                pass
            try:
                return make()
            except ValueError:
                continue
        raise RuntimeError(f"could not create or find actor {actor}")

    # zoo.spend_cap_usd: one ledger for the deployment (every replica's tool servers reserve and settle in it)
    ledger = None if zd.get("spend_cap_usd") is None else get_or_make(
        f"serve-spend-ledger:{tag}", lambda: make_spend_ledger(zd["spend_cap_usd"], name=f"serve-spend-ledger:{tag}",
                                                               namespace=TOOL_NAMESPACE))
    return {name: get_or_make(f"serve-tool:{name}:{tag}", lambda name=name: make_tool_server(
        name, zd, num_cpus=srv.get("num_cpus", 0.05), max_concurrency=srv.get("max_concurrency", 64),
        max_restarts=srv.get("max_restarts", 3), namespace=TOOL_NAMESPACE, actor_name=f"serve-tool:{name}:{tag}",
        timeout_s=srv.get("timeout_s", 60.0), retries=srv.get("retries", 2), backoff_s=srv.get("backoff_s", 0.2),
        rate_limit_per_s=srv.get("rate_limit_per_s", 0.0), cache_size=srv.get("cache_size", 0), ledger=ledger))
        for name in names}
