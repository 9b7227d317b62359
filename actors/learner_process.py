"""The learner actor's body (cluster/launch.py makes it the `learner` actor): builds its policy from config inside its
own process (a model is never pickled from the driver), wraps it in a Learner (actors/learner.py) and takes
TrainSamples from the object store; `restart` swaps in a fresh policy for SFT's next start (sft.starts)."""

from __future__ import annotations

from typing import Any

from actors.learner import Learner
from orchestra.types import TrainSample


class LearnerProcess:
    def __init__(self, cfg: Any):
        from orchestra.policy.models import set_torch_threads

        set_torch_threads(cfg.cluster.torch_threads)
        self.cfg = cfg
        self.learner = self._build(cfg.seed)

    def _build(self, seed: int) -> Learner:
        from orchestra.policy.models import load_policy_from_config

        model, tokenizer = load_policy_from_config(self.cfg.model, seed=seed)
        lo = self.cfg.model.lora
        if lo.r > 0:  # LoRA: the learner trains adapters on a frozen base; workers keep plain weights
            from orchestra.policy.lora import attach

            model = attach(model, lo.r, lo.alpha, lo.dropout, lo.target_modules, lo.layers)
        return Learner.from_config(self.cfg, model, tokenizer=tokenizer)

    def restart(self, seed: int) -> int:
        """SFT's next start: a fresh policy built as the first was but from init seed `seed`, with a new optimizer.
        Its version follows the old one's, so no worker takes the fresh weights for ones it holds."""
        version = self.learner.version
        self.learner = self._build(seed)
        self.learner.version = version + 1
        return self.learner.version

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        return self.learner.update(samples)

    def sft_update(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]:
        return self.learner.sft_update(samples, lr=lr)

    def get_weights(self, adapter_only: bool = False) -> tuple[int, dict[str, Any]]:
        return self.learner.get_weights(adapter_only=adapter_only)

    def version(self) -> int:
        return self.learner.version

    def reset_reference(self) -> None:
        """Make the frozen reference the current policy (after SFT, so KL anchors RL to the warm start)."""
        self.learner.reset_reference()

    def save(self, directory: str) -> None:
        self.learner.save(directory)

    def load(self, directory: str) -> None:
        self.learner.load(directory)
