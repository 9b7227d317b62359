"""The learned policies an evaluation runs, and the check that it measured anything: what the task evaluation
(cluster/evaluate.py) and τ² (cluster/tau2_eval.py) share.

`policy_tokenizer` and `policy_engines` load the evaluated checkpoint (`checkpoint=`) and the untrained base
(`base=true`) as in-process HF engines; `run_routers` loads the learned routing policies a run saved (the estimator
router; orchestra/routing/registry.py names them all), policies of their own; `all_failed` is the message to stop
with when every episode ended in an error (a report of zeros would read as a bad policy). The fixed baselines are
orchestra/eval/baselines.py's.
"""

from __future__ import annotations

from typing import Any

from cluster.runs import checkpoint_model_dir


def all_failed(records: list[dict[str, Any]], hint: str = "") -> str | None:
    """The message to stop with when every episode ended in an error (nothing was measured), else None."""
    if not records or not all(r.get("error") for r in records):
        return None
    first = str(records[0]["error"])
    return (f"evaluation failed: every episode ({len(records)}) ended in an error, so there is nothing to report; "
            f"the first: {first}{hint if first.startswith('user simulator') else ''}")


def policy_tokenizer(cfg: Any, own: dict[str, str]) -> Any:
    """The checkpoint's own tokenizer when one is evaluated: the tiny tokenizer is trained on the project's text
    and cached by its hash, so the config's tokenizer can differ from the one the policy was trained with."""
    from orchestra.policy.models import config_tokenizer, load_tokenizer

    m = cfg.model
    if own.get("checkpoint"):
        return load_tokenizer(str(checkpoint_model_dir(own["checkpoint"])), chat_template=m.chat_template)
    return config_tokenizer(m)


def policy_engines(cfg: Any, own: dict[str, str], tok: Any) -> dict[str, Any]:
    """HF engines of the learned policies asked for: `orchestrator` (checkpoint=) and `base` (base=true)."""
    engines: dict[str, Any] = {}
    if not (own.get("checkpoint") or own.get("base", "false").lower() == "true"):
        return engines
    from transformers import AutoModelForCausalLM

    from orchestra.engine.hf import HFEngine
    from orchestra.policy.models import load_policy, resolve_device

    m = cfg.model

    def engine(model):
        return HFEngine.from_model(model.to(resolve_device(m.device)).eval(), tok, **cfg.engine.hf_kwargs())
    if own.get("checkpoint"):
        engines["orchestrator"] = engine(AutoModelForCausalLM.from_pretrained(checkpoint_model_dir(own["checkpoint"])))
    if own.get("base", "false").lower() == "true":
        engines["base"] = engine(load_policy(m.name, tiny=m.tiny, dtype=m.dtype, device="cpu", cache_dir=m.cache_dir,
                                             chat_template=m.chat_template, seed=cfg.seed)[0])
    return engines


def run_routers(own: dict[str, str]) -> dict[str, Any]:
    """name -> router of the learned policies evaluation offers (orchestra/routing/registry.py: the estimator router)
    saved in own `estimator` (a run dir; an error when it holds none) or else in the evaluated checkpoint's run
    (`<run_dir>/router/`, written by an expected-value warm start); {} when neither holds one."""
    from orchestra.routing import registry
    from tools.retrieval.dense import embed_texts

    learned = registry.among("eval", "learned")
    spec = own.get("estimator")
    if spec:
        loaded = registry.load_saved(spec, embed_texts, learned)
        if not loaded:
            raise SystemExit(f"estimator={spec}: no estimator router there (expected {spec}/router/estimator.json)")
        return loaded
    found = registry.find_saved(own["checkpoint"], learned) if own.get("checkpoint") else None
    return registry.load_saved(found, embed_texts, learned) if found else {}
