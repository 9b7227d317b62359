"""Range checks of a composed ExperimentConfig (the schema is orchestra/config/schema.py, loading load.py): every
failure raises ConfigError naming the key, before any actor starts.

Plain data checks: the value lists are the schema's own (config/agent.py, config/training.py), and the grammars of
preference vectors and cascade names are the core's ground floor (orchestra/preferences.py,
orchestra/cascade_names.py), so config/ reaches nothing above the contracts."""

from __future__ import annotations

from orchestra.cascade_names import parse as parse_cascade
from orchestra.config.agent import CATALOGUES, LEVEL_WORDS, NUMBER_FORMATS
from orchestra.config.schema import ConfigError, ExperimentConfig, MCPServerConfig
from orchestra.config.training import CRITERIA, KEEP_RL, TEACHERS
from orchestra.preferences import (
    COST_ORDER,
    PRESETS,
    check_disjoint,
    parse_pairs,
    parse_preference,
    sweep_vectors,
)


def validate(cfg: ExperimentConfig) -> None:
    """Range checks across fields; raise ConfigError before any actor starts."""
    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {msg}")

    need(cfg.backend in ("local", "verl"), "backend", f"must be local or verl, got {cfg.backend!r}")
    need(cfg.algo.group_size >= 2, "algo.group_size", "GRPO needs at least 2 episodes per group")
    need(cfg.algo.prompts_per_step >= 1, "algo.prompts_per_step", "must be >= 1")
    need(cfg.algo.steps >= 0, "algo.steps", "must be >= 0")
    need(cfg.algo.lr > 0, "algo.lr", "must be > 0")
    need(cfg.algo.micro_batch_size >= 1, "algo.micro_batch_size", "must be >= 1")
    need(cfg.algo.logit_chunk_tokens >= 0, "algo.logit_chunk_tokens", "must be >= 0 (0: all response tokens at once)")
    need(cfg.algo.micro_batch_tokens >= 0, "algo.micro_batch_tokens", "must be >= 0 (0: micro_batch_size rows only)")
    need(0.0 <= cfg.sft.min_lr_ratio <= 1.0, "sft.min_lr_ratio", "must be in [0, 1]")
    need(cfg.data.n_train >= 1, "data.n_train", "zero training tasks")
    need(cfg.data.n_heldout >= 0, "data.n_heldout", "must be >= 0")
    need(cfg.agent.context_mode in ("reprompt", "transcript"), "agent.context_mode",
         f"must be reprompt or transcript, got {cfg.agent.context_mode!r}")
    need(cfg.agent.answer_mode in ("tool", "text"), "agent.answer_mode", "must be tool or text")
    need(cfg.agent.max_turns >= 1, "agent.max_turns", "must be >= 1")
    need(cfg.engine.kind in ("hf", "vllm", "remote") or ":" in cfg.engine.kind, "engine.kind",
         f"must be hf, vllm, remote or package.module:factory, got {cfg.engine.kind!r}")
    need(cfg.engine.kind != "remote" or cfg.engine.base_url.startswith(("http://", "https://")), "engine.base_url",
         "engine.kind=remote needs the vLLM server's URL, e.g. http://127.0.0.1:8123/v1 (python -m cluster.vllm_server)")
    need(cfg.engine.prefix_cache_mb >= 0, "engine.prefix_cache_mb", "must be >= 0 (0: no KV kept between turns)")
    need(cfg.engine.join_every >= 0, "engine.join_every", "must be >= 0 (0: static batching)")
    need(cfg.engine.prefill_chunk_tokens >= 0, "engine.prefill_chunk_tokens", "must be >= 0 (0: one forward)")
    need(cfg.zoo.sandbox.max_parallel >= 0, "zoo.sandbox.max_parallel", "must be >= 0 (0: one per CPU)")
    need(cfg.reward.unanswered_penalty >= 0, "reward.unanswered_penalty", "must be >= 0 (it is subtracted)")
    need(cfg.reward.unanswered_penalty == 0 or cfg.reward.rubric == "scalar", "reward.unanswered_penalty",
         "is a term of the scalar rubric only; set reward=scalar or leave it 0")
    need(cfg.reward.norm_adv_by_std or cfg.reward.rubric == "scalar", "reward.norm_adv_by_std",
         "false is for the scalar rubric (toolorchestra's features are min-max scaled per group already)")
    need(cfg.reward.rubric in ("toolorchestra", "scalar"), "reward.rubric",
         f"must be toolorchestra or scalar, got {cfg.reward.rubric!r}")
    need(cfg.model.lora.r >= 0, "model.lora.r", "must be >= 0 (0: no adapters, full fine-tuning)")
    need(cfg.model.lora.layers >= 0, "model.lora.layers", "must be >= 0 (0: every layer)")
    need(bool(cfg.model.lora.target_modules), "model.lora.target_modules",
         "must name at least one module (e.g. q_proj)")
    need(cfg.sampling.max_tokens >= 1, "sampling.max_tokens", "must be >= 1")
    need(cfg.cluster.num_rollout_workers >= 1, "cluster.num_rollout_workers", "must be >= 1")
    rho = cfg.zoo.error_correlation
    need(set(rho) <= {"task", "family"}, "zoo.error_correlation", f"keys are task and family, got {sorted(rho)}")
    need(all(v >= 0 for v in rho.values()) and sum(rho.values()) < 1, "zoo.error_correlation",
         f"shares must be >= 0 and sum below 1, got {dict(rho)}")
    need(0.0 <= cfg.zoo.shared_distractor <= 1.0, "zoo.shared_distractor", "must be in [0, 1]")
    need(cfg.router.cascades >= 0, "router.cascades", "must be >= 0 (0: one-shot plans only)")
    need(cfg.zoo.latency in ("modelled", "measured"), "zoo.latency", f"must be modelled or measured, got "
         f"{cfg.zoo.latency!r}")
    need(all(v >= 0 for v in cfg.zoo.tool_latency_s.values()), "zoo.tool_latency_s", "seconds must be >= 0")
    need(cfg.sft.candidates >= 1, "sft.candidates", "must be >= 1 (1: plain random demonstrations)")
    need(cfg.sft.teacher in TEACHERS, "sft.teacher", f"must be one of {', '.join(TEACHERS)}, got {cfg.sft.teacher!r}")
    if cfg.sft.teacher == "cascade":
        try:
            kind = parse_cascade(cfg.sft.cascade).kind
        except ValueError as e:
            raise ConfigError(f"sft.cascade: {e}") from None
        need(kind == "pair", "sft.cascade", f"the cascade teacher demonstrates pair cascades (a&b>c), got {kind}")
        need(0.0 <= cfg.sft.escalate_share <= 1.0, "sft.escalate_share", "must be in [0, 1]")
        need(cfg.sft.escalate_on in ("random", "disagree"), "sft.escalate_on",
             f"must be random or disagree, got {cfg.sft.escalate_on!r}")
        for spec in cfg.sft.escalate_under:
            try:
                parse_preference(spec)
            except ValueError as e:
                raise ConfigError(f"sft.escalate_under: {spec!r}: {e}") from None
        need({"consult", "submit", "answer"} <= set(cfg.zoo.tools), "zoo.tools",
             f"the cascade teacher needs consult, submit and answer, got {list(cfg.zoo.tools)}")
    need(cfg.sft.teacher == "random" or cfg.sft.candidates == 1, "sft.candidates",
         "best-of-k applies to random demonstrations only (sft.teacher=random)")
    need(cfg.sft.vectors_sampled >= 0, "sft.vectors_sampled", "must be >= 0")
    need(cfg.sft.teacher != "expected_value" or bool(cfg.sft.vectors) or cfg.sft.vectors_sampled > 0, "sft.vectors",
         "the expected-value teacher needs at least one vector (sft.vectors or sft.vectors_sampled)")
    for spec in cfg.sft.vectors:
        try:
            parse_preference(spec)
        except ValueError as e:
            raise ConfigError(f"sft.vectors: {e}") from None
    need(not cfg.sft.restate_preference or cfg.sft.teacher in ("expected_value", "cascade"), "sft.restate_preference",
         f"restates the preference in scripted demonstrations: needs sft.teacher expected_value or cascade, not "
         f"{cfg.sft.teacher!r} (add sft.restate_preference=false)")
    need(cfg.sft.note_weight > 0, "sft.note_weight", f"must be > 0 (1: the note weighs as any token), got "
         f"{cfg.sft.note_weight!r}")
    need(0.0 <= cfg.sft.until_agreement <= 1.0, "sft.until_agreement", "must be in [0, 1] (0: off)")
    need(0.0 <= cfg.sft.label_balance <= 1.0, "sft.label_balance", "must be in [0, 1] (0: off)")
    need(0.0 <= cfg.sft.pref_balance <= 1.0, "sft.pref_balance", "must be in [0, 1] (0: off)")
    runs_on = cfg.sft.until_agreement or cfg.sft.until_follows
    need(cfg.sft.max_steps >= cfg.sft.steps if runs_on else cfg.sft.max_steps == 0, "sft.max_steps",
         f"must be >= sft.steps ({cfg.sft.steps}) with sft.until_agreement or sft.until_follows, else 0")
    need(cfg.sft.check_falls in ("interval", "estimate"), "sft.check_falls",
         f"must be interval or estimate, got {cfg.sft.check_falls!r}")
    need(cfg.sft.starts >= 1, "sft.starts", f"must be >= 1 (1: one start), got {cfg.sft.starts!r}")
    # the verl job's warm start (cluster/warm_start.warm_start_policy) has no rollout workers to check the policy
    # with: it runs sft.steps and stops, so a goal there would be silently ignored
    need(cfg.backend == "local" or not cfg.sft.until_follows, "sft.until_follows",
         "the verl backend's warm start checks nothing (it runs sft.steps): set sft.until_follows=false sft.max_steps=0")
    need(cfg.backend == "local" or not cfg.algo.val_share, "algo.val_share",
         "the verl backend keeps its RL policy whatever it does (no validation gate): set algo.val_share=0")
    need(not cfg.sft.until_follows or set(COST_ORDER) <= set(cfg.eval.presets), "sft.until_follows",
         f"checks $ over the cost-ordered presets: eval.presets must hold {list(COST_ORDER)}")
    need(cfg.router.explore_tasks >= 0, "router.explore_tasks", "must be >= 0 (0: every training task)")
    need(cfg.router.extra_tasks >= 0, "router.extra_tasks", "must be >= 0")
    need(cfg.router.extra_tasks == 0 or cfg.sft.teacher == "expected_value", "router.extra_tasks",
         "only the expected-value teacher explores and fits a router: needs sft.teacher=expected_value")
    need(cfg.router.C > 0 and cfg.router.alpha > 0, "router.C", "router.C and router.alpha must be > 0")
    need(cfg.router.folds >= 2, "router.folds", "cross-fitting needs at least 2 folds")
    need(cfg.router.embed_dtype in ("float32", "bfloat16"), "router.embed_dtype", "must be float32 or bfloat16")
    need(cfg.router.select_by in CRITERIA, "router.select_by",
         f"must be one of {', '.join(CRITERIA)}, got {cfg.router.select_by!r}")
    need(cfg.train.min_pref_spread >= 1.0, "train.min_pref_spread", "must be >= 1 (accuracy-first $ / cost-first $)")
    need(-1.0 <= cfg.train.min_unseen_adherence <= 1.0, "train.min_unseen_adherence", "must be in [-1, 1] (a Spearman)")
    need(0.0 <= cfg.algo.val_share < 1.0, "algo.val_share", "must be in [0, 1) (0: RL always kept)")
    need(cfg.algo.keep_rl in KEEP_RL, "algo.keep_rl", f"must be one of {KEEP_RL}, got {cfg.algo.keep_rl!r}")
    need(0.0 <= cfg.train.min_router_share <= 1.0, "train.min_router_share", "must be in [0, 1] (a share of the "
         "router's fall of $ per step)")
    for name in cfg.eval.presets:
        need(name in PRESETS, "eval.presets", f"{name!r} is not a preset; choose from {sorted(PRESETS)}")
    need(not cfg.sft.paired or bool(cfg.data.preference_pairs), "sft.paired",
         "needs data.preference_pairs (the vectors each demonstrated task is played under)")
    need(cfg.zoo.server.max_concurrency >= 1, "zoo.server.max_concurrency", "must be >= 1")
    need(cfg.zoo.server.client_max_in_flight >= 0, "zoo.server.client_max_in_flight", "must be >= 0 (0: no cap)")
    need(cfg.zoo.server.client_replay >= 0, "zoo.server.client_replay", "must be >= 0 (0: every call made)")
    check_mcp_servers(cfg.zoo.mcp_servers)
    need(cfg.zoo.retriever.kind in ("hybrid", "hybrid_2hop", "dense", "bm25"), "zoo.retriever.kind",
         f"must be hybrid, hybrid_2hop, dense or bm25, got {cfg.zoo.retriever.kind!r}")
    need(cfg.zoo.retriever.index_type in ("auto", "flat", "hnsw", "ivf"), "zoo.retriever.index_type",
         f"must be auto, flat, hnsw or ivf, got {cfg.zoo.retriever.index_type!r}")
    need(cfg.tau2.max_errors >= 1, "tau2.max_errors", "must be >= 1")
    need(cfg.tau2.task_version in ("v0.2.0", "current"), "tau2.task_version",
         f"must be v0.2.0 or current, got {cfg.tau2.task_version!r}")
    if cfg.data.splits:
        names = cfg.data.splits.split(",")
        need(len(names) == 2 and all(n.strip() for n in names) and names[0] != names[1], "data.splits",
             f"must be empty or `train,heldout` (two split names), got {cfg.data.splits!r}")
    if cfg.data.preference != "sampled":
        try:
            for part in cfg.data.preference.split("|"):
                parse_preference(part)
        except ValueError as e:
            need(False, "data.preference", f"must be `sampled`, a preset, weights or `A|B|...` of those: {e}")
    if cfg.data.preference_pairs:
        try:
            parse_pairs(cfg.data.preference_pairs)
        except ValueError as e:
            need(False, "data.preference_pairs", f"must be empty, `sampled:K` (K >= 2) or `A|B|...`: {e}")
    for tier, expert in cfg.zoo.tiers.items():
        need(expert in cfg.zoo.experts, f"zoo.tiers.{tier}", f"names unknown expert {expert!r}")
    for tier, expert in (cfg.data.tiers or {}).items():
        need(expert in cfg.zoo.experts, f"data.tiers.{tier}", f"names unknown expert {expert!r} of zoo "
             f"{cfg.zoo.name!r} (data.tiers=null offers the zoo's own tiers)")
    check_preference_sampling(cfg, need)


def check_preference_sampling(cfg: ExperimentConfig, need) -> None:
    """The teacher's sampled range, the preference's rendering in bins, and that no fixed training vector is one
    of the adherence sweep's (figures over the sweep measure vectors no training used)."""
    s, a = cfg.sft, cfg.agent
    need(not s.sample_cost or (len(s.sample_cost) == 2 and 0 < s.sample_cost[0] <= s.sample_cost[1]), "sft.sample_cost",
         f"must be empty (the training sampler) or [lo, hi] with 0 < lo <= hi, got {list(s.sample_cost)}")
    need(len(s.sample_latency) == 2 and 0 < s.sample_latency[0] <= s.sample_latency[1], "sft.sample_latency",
         f"must be [lo, hi] with 0 < lo <= hi, got {list(s.sample_latency)}")
    need(0.0 <= s.sample_latency_zero <= 1.0, "sft.sample_latency_zero", "must be in [0, 1]")
    levels = list(a.preference_levels)
    need(not levels or (len(levels) == 4 and levels[0] > 0 and all(x < y for x, y in zip(levels, levels[1:]))),
         "agent.preference_levels", f"must be empty or four rising bounds > 0 (minimal, low, medium, high), got {levels}")
    words = list(a.latency_words)
    need(not words or (len(words) == 5 and len(set(words)) == 5 and all(w.isalpha() for w in words)
                       and not set(words) & {*LEVEL_WORDS, "none"}), "agent.latency_words",
         f"must be empty (the cost's words) or five distinct words of letters, none of {', '.join(LEVEL_WORDS)} or "
         f"none, got {words}")
    need(a.number_format in NUMBER_FORMATS, "agent.number_format",
         f"must be one of {', '.join(NUMBER_FORMATS)}, got {a.number_format!r}")
    need(a.preference_numbers or a.preference_words, "agent.preference_numbers",
         "false shows the preference only in words: set agent.preference_words=true too")
    need(a.tool_catalogue in CATALOGUES, "agent.tool_catalogue",
         f"must be one of {', '.join(CATALOGUES)}, got {a.tool_catalogue!r}")
    if a.route_hints:
        need(s.teacher == "expected_value", "agent.route_hints", "the hints are the estimator router's: needs "
             "sft.teacher=expected_value")
        need(cfg.backend == "local", "agent.route_hints", "the verl backend does not attach route hints yet")
        need(a.prompt_format == "orchestra", "agent.route_hints", "only our prompt layout (agent.prompt_format="
             "orchestra) shows them")
    fixed = {"sft.vectors": [parse_preference(v) for v in s.vectors]}
    if cfg.data.preference_pairs:
        fixed["data.preference_pairs"] = parse_pairs(cfg.data.preference_pairs)[1]
    if cfg.data.preference != "sampled":
        fixed["data.preference"] = [parse_preference(v) for v in cfg.data.preference.split("|")]
    for key, vectors in fixed.items():
        try:
            check_disjoint(sweep_vectors().values(), vectors, what=key)
        except ValueError as e:
            raise ConfigError(f"{key}: {e}") from None


def check_mcp_servers(servers: list[MCPServerConfig]) -> None:
    """Range checks of zoo.mcp_servers (the registry runs them too: tool-server actors get plain dicts)."""
    import re

    seen: set[str] = set()
    for i, s in enumerate(servers):
        key = f"zoo.mcp_servers[{i}]"
        if not re.fullmatch(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*", s.name or ""):
            raise ConfigError(f"{key}.name: {s.name!r} must be letters, digits and single - or _ (tools are "
                              "named <name>__<tool>)")
        if s.name in seen:
            raise ConfigError(f"{key}.name: {s.name!r} is used by an earlier server")
        seen.add(s.name)
        checks = [(s.transport in ("stdio", "http"), "transport", f"must be stdio or http, got {s.transport!r}"),
                  (s.transport != "stdio" or bool(s.command), "command", "is required for transport stdio"),
                  (s.transport != "http" or s.url.startswith(("http://", "https://")), "url",
                   "is required for transport http (http:// or https://)"),
                  (s.price_usd >= 0, "price_usd", "must be >= 0"), (s.latency_s >= 0, "latency_s", "must be >= 0"),
                  (s.timeout_s > 0, "timeout_s", "must be > 0"),
                  (s.connect_timeout_s > 0, "connect_timeout_s", "must be > 0"),
                  (s.max_output_chars > 0, "max_output_chars", "must be > 0")]
        for n, t in s.tools.items():
            checks += [(t.price_usd is None or t.price_usd >= 0, f"tools.{n}.price_usd", "must be >= 0"),
                       (t.latency_s is None or t.latency_s >= 0, f"tools.{n}.latency_s", "must be >= 0")]
        for ok, field_name, msg in checks:
            if not ok:
                raise ConfigError(f"{key}.{field_name}: {msg} (server {s.name!r})")
