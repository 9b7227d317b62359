"""The configuration schema: typed dataclasses, one per section of an experiment (values come from conf/*.yaml,
composed by orchestra/config/load.py; checks of values across fields are orchestra/config/checks.py).

The sections live in files by role, each under 300 lines: model.py (model, engine, sampling), agent.py (the loop and
its prompt), zoo.py (tools and experts), training.py (reward, GRPO, SFT, router, data, eval, the run's verdict),
run.py (cluster, logs, checkpoints, τ²) and verl_backend.py. This file joins them into ExperimentConfig and
re-exports every section, so the schema's names stay in one place. Resources (CPUs, GPUs) are values here but only
cluster/ reads them. config/ imports nothing of the core but the preference grammar (orchestra/preferences.py) and
the cascade-name grammar (orchestra/cascade_names.py), which its checks read: it is the core's foundation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestra.config.agent import AgentConfig, BudgetConfig  # noqa: F401  re-exported
from orchestra.config.model import (  # noqa: F401  re-exported
    EngineConfig,
    LoraConfig,
    ModelConfig,
    SamplingConfig,
    TinyModelConfig,
)
from orchestra.config.run import CheckpointConfig, ClusterConfig, LogConfig, Tau2Config  # noqa: F401  re-exported
from orchestra.config.training import (  # noqa: F401  re-exported
    TEACHERS,
    AlgoConfig,
    DataConfig,
    EvalConfig,
    RewardConfig,
    RouterConfig,
    SFTConfig,
    TrainConfig,
)
from orchestra.config.verl_backend import VerlConfig  # noqa: F401  the verl backend's section
from orchestra.config.zoo import (  # noqa: F401  re-exported: the schema's names in one place
    ExpertConfig,
    MCPServerConfig,
    MCPToolConfig,
    RetrieverConfig,
    SandboxConfig,
    ToolServerConfig,
    WebSearchConfig,
    ZooConfig,
)


class ConfigError(ValueError):
    """A malformed or out-of-range configuration; the message names the key and its source."""


@dataclass
class ExperimentConfig:
    name: str = "cpu_tiny"
    seed: int = 0
    backend: str = "local"  # local | verl
    run_dir: str = ""  # empty: runs/<name>
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    zoo: ZooConfig = field(default_factory=ZooConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    verl: VerlConfig = field(default_factory=VerlConfig)
    tau2: Tau2Config = field(default_factory=Tau2Config)


def task_tiers(cfg: ExperimentConfig) -> dict[str, str]:
    """The tier -> expert mapping tasks are built with: data.tiers when set, else the zoo's own tiers.
    Training, evaluation and the verl job must agree, or the policy meets a catalogue it never saw."""
    return dict(cfg.data.tiers or cfg.zoo.tiers)
