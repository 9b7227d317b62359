"""The configuration's training sections: the reward, GRPO, the warm start (SFT), the router, data, evaluation and the
run's own verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

# router.select_by's values: the criteria the per-run cross-validation scores candidates by (orchestra/routing/select.py)
CRITERIA = ("log_loss", "routing")


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
    # RL that cannot harm: this share of the training tasks (the last ones) is never sampled by RL; after RL the
    # policy is played on them beside its warm start and kept as `keep_rl` says (paired 95 % interval;
    # cluster/rl_gate.py), else the warm start is (0: off, RL always kept)
    val_share: float = 0.0
    # better: kept only where significantly better than the warm start | not_worse: unless significantly worse
    keep_rl: str = "not_worse"
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
KEEP_RL = ("better", "not_worse")  # algo.keep_rl (cluster/rl_gate.py)


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
    # the same chunks until the policy's $ follows the eval presets and a cost ladder on training tasks as the run's
    # verdict asks of it on held-out ones, against the run's router on the same tasks (cluster/sft_check.py): a warm
    # start that gives every preference one route is not handed to RL (needs max_steps; docs/recipe.md)
    until_follows: bool = False
    # how SFT's check (until_follows) judges each fall of $ against its goal: `interval`, as the verdict does (a fall
    # whose paired 95% interval reaches its goal passes); `estimate`, only a fall whose estimate reaches it. The check
    # decides whether to train on, not whether a run failed: a start that reaches its goal only within its 64-task
    # interval on training tasks is a coin toss on held-out ones. A rise is judged by its interval either way (a 1 %
    # rise where the router is flat ran a routing log's SFT to its cap: docs/recipe.md)
    check_falls: str = "interval"
    max_steps: int = 0
    # with a check (until_follows / until_agreement): a start whose first check (at `steps`) fails is dropped and
    # SFT begins again from a fresh policy (another init seed and batch order), up to this many starts; the last
    # one goes on in chunks to max_steps (without a check: one start). Whether a start learns to read its preference
    # is a draw (docs/warm_start.md): of 16 cpu_tiny runs, the 7 that passed at `steps` followed on held-out tasks,
    # 4 of the other 9 did not
    starts: int = 1
    # expected_value teacher: a demonstration whose plan makes up a share f < this of the labels is repeated
    # round(sqrt(this / f)) times per epoch (repeat-factor sampling, orchestra/data/demos.label_repeats), so a plan
    # the teacher rarely picks is learned too (0: off)
    label_balance: float = 0.0
    # the same repeat-factor sampling over the labels' priorities (their bin words, shown or noted): a (cost, latency) bin
    # the fixed vectors never give, which only the sampled ones fill, is repeated too, so the policy reads every bin
    # (docs/warm_start.md; 0: off)
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
    # expected_value and cascade teachers: every demonstrated call opens with the prompt's priorities in bin words in a
    # think block ("<think>cost top, latency medium</think>", orchestra/agent/prompt.preference_note; read from the
    # numbers where the prompt shows no words), so the policy reads its preference into words it is trained on, and
    # decides after them (docs/warm_start.md)
    restate_preference: bool = False
    # the loss weight of each demonstrated call's note (the tokens inside its think block; 1: every model token alike).
    # A note's bin word is one token of some thirty in a call: weighted alike, the tiny policy of seeds 0 and 7 wrote it
    # from the presets' whole strings and the latency, never from the cost number; weighted 8x it read the number,
    # yet neither run followed its preference (docs/warm_start.md)
    note_weight: float = 1.0
    # with restate_preference and numbers in the prompt, the note first copies each weight as the prompt shows it, then
    # its word ("<think> cost 2.9 minimal, latency 0 none</think>", opening with the prompt's own " cost" token): the
    # word is read off the whole part two tokens back, and finding the number after "cost" in the prompt is a copy the
    # policy is trained on directly, where a word looked up in the prompt was learned by a draw (docs/warm_start.md)
    note_numbers: bool = False
    # write the demonstrations (the TrainSamples SFT steps on) to <run_dir>/sft_samples.pkl, for bench/sft_lab.py
    save_samples: bool = False
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
    # which draw of held-out tasks the run is scored on: None, the draw `seed` gives (the one every run before issue
    # 69 used); an int, another draw (template tasks: other problems from the same world; a loaded set: the first
    # n_heldout of the order this seed shuffles, training tasks keeping `seed`'s order without them). The presets'
    # value is one no development run looked at (docs/recipe.md, "Held-out draws")
    heldout_seed: int | None = None
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
    min_pref_spread: float = 3.0  # accuracy-first $ / cost-first $, at least (where the run's router spreads as far)
    # at every step of the presets and of the unseen sweep, the policy's $ falls on the log scale by at least this
    # share of its estimator router's fall over the same tasks and step (orchestra/eval/verdict.py)
    min_router_share: float = 1 / 3
    # without router figures to judge the sweep's steps by: −Spearman(cost weight, $) under the sweep, at least
    min_unseen_adherence: float = 0.9
