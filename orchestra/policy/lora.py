"""LoRA adapters (the `peft` library) for the policy: attach them, the adapter-only weight payload the learner
sends to rollout engines, and how an engine folds that payload into plain weights.

Why adapters: a pretrained policy (SmolLM2-135M) is what can read a question and a preference line, and on a
2-core CPU it cannot afford full fine-tuning (AdamW state for 135M weights, weight gradients everywhere).
The learner trains low-rank A/B matrices on a frozen base, optionally in the top `layers` blocks only, so
back-propagation stops there. Rollout engines keep a plain model: generation pays nothing for the adapter,
and a weight sync moves only the A/B matrices (`adapter_payload`, kilobytes to a few MB). The engine merges
W = W0 + scaling * B @ A from base weights it keeps (`AdapterMerger`); a full sync sends the base weights
with the payload beside them (never merged weights, which would make the next merge count an adapter twice).

After SFT the learner merges its adapter into the base and starts a fresh one (actors/learner.py
`reset_reference`): the base is then the warm-started policy and also the KL reference (adapter disabled),
so no reference copy is kept. A full sync (merged weights) follows that merge; later syncs are adapter-only.
Left to others: when to sync (cluster/trainer.py), checkpoint layout (actors/learner.py).
"""

from __future__ import annotations

from typing import Any

LORA_KEY = "__lora__"  # marks a weight payload as adapter-only (vs a full state dict)


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def attach(model: Any, r: int, alpha: float, dropout: float = 0.0, target_modules: list[str] | None = None,
           top_layers: int = 0) -> Any:
    """`model` wrapped by peft with fresh LoRA adapters (B = 0: the wrapped model computes what `model` did).
    `top_layers` > 0 puts adapters on the last that many decoder blocks only; every base weight is frozen."""
    from peft import LoraConfig, get_peft_model

    if r < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {r}")
    n_layers = int(getattr(model.config.get_text_config(), "num_hidden_layers", 0) or 0)
    layers = None
    if top_layers > 0:
        if n_layers and top_layers > n_layers:
            raise ValueError(f"model.lora.layers={top_layers} but the model has {n_layers} layers")
        layers = list(range(n_layers - top_layers, n_layers))
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none", task_type="CAUSAL_LM",
                     target_modules=list(target_modules or ["q_proj", "k_proj", "v_proj", "o_proj"]),
                     layers_to_transform=layers)
    return get_peft_model(model, cfg)


def plain_key(name: str) -> str:
    """A peft parameter name -> the plain model's state-dict key of the weight it adapts / wraps.
    `base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight` -> `model.layers.0.self_attn.q_proj.weight`."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    for marker in (".lora_A.", ".lora_B."):
        if marker in name:
            return name.split(marker)[0] + ".weight"
    return name.replace(".base_layer.", ".")


def adapter_payload(model: Any) -> dict[str, Any]:
    """{LORA_KEY: {plain weight key: (A, B, scaling)}} as detached CPU copies: everything an engine needs to
    rebuild the adapted weights from its base."""
    out: dict[str, tuple[Any, Any, float]] = {}
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if lora_a is None or "default" not in lora_a:
            continue
        a = module.lora_A["default"].weight.detach().to("cpu", copy=True)
        b = module.lora_B["default"].weight.detach().to("cpu", copy=True)
        out[plain_key(f"{name}.weight")] = (a, b, float(module.scaling["default"]))
    return {LORA_KEY: out}


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The plain model's state dict with the adapters folded in (W0 + scaling * B @ A), CPU copies; the peft
    model is left as it is. Tied weights (lm_head = embeddings) appear once, as save_pretrained writes them."""
    base = model.get_base_model() if is_peft(model) else model
    sd: dict[str, Any] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        sd[plain_key(name)] = tensor.detach().to("cpu", copy=True)
    if is_peft(model):
        for key, (a, b, scaling) in adapter_payload(model)[LORA_KEY].items():
            sd[key] = (sd[key].float() + scaling * (b.float() @ a.float())).to(sd[key].dtype)
    if getattr(base.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    return sd


class AdapterMerger:
    """Engine side: keeps the base weights an adapter applies to, and turns adapter payloads into partial
    state dicts of merged weights. The base is the last full state dict loaded (or the initial weights):
    it is captured from the model at the first adapter after a full load, before anything is merged, so a
    full load must be of base weights (Learner.get_weights gives those), not of merged ones."""

    def __init__(self) -> None:
        self.base: dict[str, Any] | None = None

    def full_loaded(self) -> None:
        self.base = None

    def merge(self, model: Any, payload: dict[str, Any]) -> dict[str, Any]:
        modules = payload[LORA_KEY]
        if self.base is None:
            current = model.state_dict()
            missing = [k for k in modules if k not in current]
            if missing:
                raise ValueError(f"adapter payload names weights the engine's model lacks: {missing[:3]}")
            self.base = {k: current[k].detach().to("cpu", copy=True) for k in modules}
        out = {}
        for key, (a, b, scaling) in modules.items():
            w0 = self.base.get(key)
            if w0 is None:
                raise ValueError(f"adapter payload adds weight {key!r} not adapted before; sync full weights first")
            out[key] = (w0.float() + scaling * (b.float() @ a.float())).to(w0.dtype)
        return out


def base_state_dict(model: Any) -> dict[str, Any]:
    """The frozen base's weights under plain keys (no adapter folded in): what a checkpoint needs to rebuild
    the peft model, since the merged weights cannot be split back into base and adapter."""
    sd = {plain_key(k): v.detach().to("cpu", copy=True) for k, v in model.get_base_model().state_dict().items()
          if ".lora_" not in k}
    if getattr(model.get_base_model().config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    return sd


def load_base(model: Any, sd: dict[str, Any]) -> None:
    """Copy plain-keyed base weights into a peft model's frozen base, in place. Every base weight must be
    given, except a tied lm_head."""
    import torch

    tied = getattr(model.get_base_model().config, "tie_word_embeddings", False)
    with torch.no_grad():
        for name, tensor in model.get_base_model().state_dict(keep_vars=True).items():
            if ".lora_" in name:
                continue
            key = plain_key(name)
            if key not in sd:
                if tied and key == "lm_head.weight":
                    continue
                raise ValueError(f"base weights lack {key!r}")
            tensor.copy_(sd[key].to(tensor.device, tensor.dtype))


def reattach(model: Any) -> Any:
    """Fold the adapter into the base weights and attach a fresh adapter of the same configuration: the
    policy is unchanged, the base becomes it (the KL reference after SFT), and new A/B start from B = 0."""
    import copy

    from peft import get_peft_model

    cfg = copy.deepcopy(model.peft_config["default"])
    return get_peft_model(model.merge_and_unload(), cfg)
