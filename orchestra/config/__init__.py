"""Typed configuration (floor 3 of the core: it imports only the preference and cascade-name grammars below it):
dataclasses are the schema (schema.py joins the sections: model.py, agent.py, zoo.py, training.py, run.py,
verl_backend.py), conf/*.yaml gives values and CLI dotlists override them (load.py), plain data checks run before
any actor starts (checks.py). Import the public names from here."""

from orchestra.config.checks import check_mcp_servers, validate
from orchestra.config.load import CONF_DIR, GROUPS, load_config, save_config, to_yaml
from orchestra.config.schema import (
    AgentConfig,
    AlgoConfig,
    BudgetConfig,
    CheckpointConfig,
    ClusterConfig,
    ConfigError,
    DataConfig,
    EngineConfig,
    EvalConfig,
    ExperimentConfig,
    ExpertConfig,
    LogConfig,
    LoraConfig,
    MCPServerConfig,
    MCPToolConfig,
    ModelConfig,
    RetrieverConfig,
    RewardConfig,
    SamplingConfig,
    SandboxConfig,
    SFTConfig,
    Tau2Config,
    TinyModelConfig,
    ToolServerConfig,
    TrainConfig,
    VerlConfig,
    WebSearchConfig,
    ZooConfig,
    task_tiers,
)

__all__ = [
    "AgentConfig", "AlgoConfig", "BudgetConfig", "CONF_DIR", "CheckpointConfig", "ClusterConfig",
    "ConfigError", "DataConfig", "EngineConfig", "EvalConfig", "ExperimentConfig", "ExpertConfig",
    "GROUPS", "LogConfig", "LoraConfig", "MCPServerConfig", "MCPToolConfig", "ModelConfig",
    "RetrieverConfig", "RewardConfig", "SFTConfig", "SamplingConfig", "SandboxConfig", "Tau2Config",
    "TinyModelConfig", "ToolServerConfig", "TrainConfig", "VerlConfig", "WebSearchConfig", "ZooConfig",
    "check_mcp_servers", "load_config", "save_config", "task_tiers", "to_yaml", "validate"
]
