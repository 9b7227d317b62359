"""Our agent loop inside verl 0.9.1's trainer: an `AgentLoopBase` registered as "orchestra".

verl instantiates this class once per episode (rollout session) in its AgentLoopWorker processes (found through
the agent-loop yaml that cluster/verl/stage.py writes: `_target_: actors.verl_plugins.agent_loop.OrchestraAgentLoop`).
`run` plays one episode with orchestra.agent.loop.AgentLoop:
- engine: `ServerEngine`, an adapter over verl's token-in/token-out `LLMServerClient.generate(request_id,
  prompt_ids=..., sampling_params=...)` (one sticky request id per episode, so vLLM's prefix cache hits);
- prompts: our Prompter over the tokenizer verl hands us; the task comes from the row's `extra_info.task`;
- tools: our tool-server actors (named Ray actors `tool:<name>`, reached through actors.tool_server's
  RayToolClient); every call runs under `tool_timeout_s` and observations are cut to `max_tool_response_chars`
  characters (`BoundedToolClient`), so a stuck tool cannot stall a training step.
Outputs (`episode_outputs`): `reprompt` -> one AgentLoopOutput per turn (verl 0.9.1's V1 trainer accepts a list:
trainer/ppo/v1/agent_loop_tq.py stores them as `{uid}_{session}_{i}`, copies the final output's reward_score to the
others, and v1/utils.compute_advantage_for_multi_trajectories computes GRPO on each session's final output and
broadcasts it to every turn); `transcript` -> one output, response_mask 1 on model tokens, 0 on tool tokens.
Per-call costs/latencies and the episode's accounting go into `extra_fields` (they reach the reward function's
`extra_info` as verl's `tool_extra_fields`).

Reward, by rubric:
- `toolorchestra` (group reward): the loop awaits our RewardActor (named actor "reward"; `submit(traj_dict,
  task_dict, group_size)`), which answers once all G episodes of the prompt (same verl `uid`) have arrived, and
  sets `reward_score` = the episode's advantage A = clip((R - mean)/(std + 1e-6), -3, 3). verl must then not
  normalise again: the launcher sets `algorithm.adv_estimator=grpo` with `algorithm.norm_adv_by_std_in_grpo=False`,
  so verl computes A - mean_G(A), which is A itself (our A has zero group mean; only where the ±3 clip bit does
  verl re-centre it), and `algorithm.use_kl_in_reward=False` (KL is a loss term, so rm_scores stay untouched).
  Validation rows (extra_info.split != "train") use group size `val_kwargs.n` and report the rubric value R.
- `scalar`: no reward_score here; verl's reward loop calls actors/verl_plugins/reward.compute_score (custom_reward_function)
  and its GRPO centres the scalar rewards per group, dividing by the group's std only with
  reward.norm_adv_by_std=true (norm_adv_by_std_in_grpo), as the local backend does.
Needs the V1 trainer (`trainer.use_v1=True`, set by the launcher): the legacy AgentLoopWorker takes one output per
episode, not a list. If V1's staleness filter evicts some sessions of a group, verl's mean runs over the rest.
Barrier liveness, checked in verl 0.9.1's source: in V1, AgentLoopWorkerTQ._run_prompt starts the n sessions of
one prompt as concurrent asyncio tasks in the same worker (no session waits for another), so a group completes
without its deadline; in the legacy AgentLoopWorker all rows of a batch (repeated n times) also run under one
asyncio.gather per worker. The RewardActor's group deadline remains the backstop for a crashed session.

Left to others: tool behaviour (tools/, actors/tool_server.py), scoring (reward/, actors/reward_actor.py), the
named actors and verl's config (cluster/verl/job.py).
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from typing import Any

from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from orchestra.agent.loop import AgentLoop, episode_samples
from orchestra.agent.prompt import Prompter
from orchestra.engine import Generation, Sampling
from orchestra.types import Task, ToolCall, ToolContext, ToolResult, TrainSample, Trajectory
from reward.rubric import rubric_of

AGENT_NAME = "orchestra"


class ServerEngine:
    """orchestra Engine over verl's LLMServerClient: token ids in, token ids + logprobs out."""

    def __init__(self, server: Any, request_id: str, sampling_params: dict[str, Any]):
        self.server, self.request_id = server, request_id
        self.base = dict(sampling_params)  # temperature/top_p/top_k/logprobs chosen by verl (train or val)
        self.global_steps: list[int] = []  # policy versions that produced this episode (staleness tags)

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        params = {**self.base, "max_tokens": int(sampling.max_tokens)}
        if sampling.stop_token_ids:
            params["stop_token_ids"] = list(sampling.stop_token_ids)
        out = await self.server.generate(request_id=self.request_id, prompt_ids=list(prompt_ids),
                                         sampling_params=params)
        ids = [int(t) for t in out.token_ids]
        logprobs = [float(x) for x in out.log_probs] if out.log_probs is not None else [0.0] * len(ids)
        for key in ("min_global_steps", "max_global_steps", "global_steps"):
            step = (getattr(out, "extra_fields", None) or {}).get(key)
            if step is not None:
                self.global_steps.append(int(step))
        finish = "length" if len(ids) >= sampling.max_tokens else "stop"
        return Generation(token_ids=ids, logprobs=logprobs[: len(ids)], finish_reason=finish)


class BoundedToolClient:
    """Wraps any ToolClient: each call under a timeout, tool text cut to `max_chars` characters (verl counts
    `max_tool_response_length` in characters too), failures returned as results, never raised."""

    def __init__(self, inner: Any, timeout_s: float, max_chars: int):
        self.inner, self.timeout_s, self.max_chars = inner, float(timeout_s), int(max_chars)

    def schemas(self, task: Task) -> list[dict[str, Any]]:
        return self.inner.schemas(task)

    async def warm(self, task: Task) -> None:
        """Fill a remote client's schema cache without blocking the event loop (verl runs many episodes on it)."""
        aschemas = getattr(self.inner, "aschemas", None)
        if aschemas is not None:
            await aschemas(task)

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.inner.call(call, ctx), self.timeout_s)
        except asyncio.TimeoutError:
            return ToolResult.failure(f"{call.name} timed out after {self.timeout_s:g}s",
                                      latency_s=time.perf_counter() - start, meta={"timeout": True})
        except Exception as e:  # a dead actor or transport error is an observation, not a crash
            return ToolResult.failure(f"{call.name} failed: {type(e).__name__}: {e}",
                                      latency_s=time.perf_counter() - start)
        if len(result.text) > self.max_chars:
            cut = "...(truncated)"
            result.text = result.text[: max(self.max_chars - len(cut), 0)] + cut
        return result


class ActorReward:
    """The RewardActor's `submit` through a Ray handle (tests pass the plain class instead)."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def submit(self, traj: dict[str, Any], task: dict[str, Any], group_size: int) -> dict[str, Any]:
        return await self.handle.submit.remote(traj, task, group_size)


@functools.lru_cache(maxsize=8)
def load_experiment(overrides: tuple[str, ...]) -> Any:
    """The ExperimentConfig, once per worker process (verl builds a new loop object per episode)."""
    from orchestra.config import load_config

    return load_config(list(overrides))


@functools.lru_cache(maxsize=8)
def ray_clients(tool_names: tuple[str, ...], timeout_s: float, namespace: str | None = None,
                grouped: bool = True) -> tuple[Any, Any]:
    """(tool client, reward client or None) over the named actors that cluster/verl/job.py started (`tool:<name>`,
    and `reward` for grouped rubrics only: the scalar rubric scores in verl's reward function, and no `reward`
    actor exists then); the job's namespace unless one is given. Cached: the tool client's schema cache is shared."""
    import ray

    from actors.tool_client import RayToolClient

    handles = {name: ray.get_actor(f"tool:{name}", namespace=namespace) for name in tool_names}
    reward = ActorReward(ray.get_actor("reward", namespace=namespace)) if grouped else None
    return RayToolClient(handles, timeout_s), reward


def _output(prompt: list[int], response: list[int], mask: list[int], logprobs: list[float], num_turns: int,
            extra: dict[str, Any], metrics: AgentLoopMetrics, prompt_len: int, response_len: int) -> AgentLoopOutput:
    # verl pads to rollout.prompt_length / response_length: keep the prompt's tail and the response's head.
    prompt = prompt[-prompt_len:]
    return AgentLoopOutput(prompt_ids=prompt, response_ids=response[:response_len], response_mask=mask[:response_len],
                           response_logprobs=logprobs[:response_len], num_turns=num_turns, metrics=metrics,
                           extra_fields=dict(extra))


def episode_extra(traj: Trajectory, cost_usd: float, latency_s: float, global_steps: list[int],
                  row_step: int) -> dict[str, Any]:
    """Episode facts every output carries (verl's reward function reads them as extra_info). The policy versions
    that generated it (min/max_global_steps) fall back to the row's own step when no generation returned: verl's
    V1 trainer casts every output's tags with `np.array(..., dtype=int)` (v1/trainer_base.py:1897), where one None
    (an episode whose first generate failed) would crash the whole step."""
    recs = traj.tool_records
    steps = global_steps or [int(row_step)]
    return {"episode_id": traj.episode_id, "task_id": traj.task_id, "termination": traj.termination,
            "answer": traj.answer or "", "context_mode": traj.context_mode, "num_model_turns": len(traj.turns),
            "cost_usd": float(cost_usd), "latency_s": float(latency_s), "gen_latency_s": traj.gen_latency_s,
            "tool_counts": dict(traj.tool_counts), "tool_names": [r.name for r in recs],
            "tool_ids": [r.tool_id for r in recs], "tool_turns": [r.turn for r in recs],
            "tool_costs": [float(r.result.cost_usd) for r in recs],
            "tool_latencies": [float(r.result.latency_s) for r in recs],
            "tool_errors": [r.result.error or "" for r in recs], "error": traj.error or "",
            "min_global_steps": min(steps), "max_global_steps": max(steps)}


def episode_outputs(traj: Trajectory, extra: dict[str, Any], *, prompt_len: int, response_len: int,
                    fallback_prompt: list[int], pad_id: int, reward_score: float | None = None,
                    reward_info: dict[str, float] | None = None) -> list[AgentLoopOutput]:
    """reprompt: one output per turn; transcript: one output with tool tokens masked (0).
    An episode with no turn (engine failed at once) still yields one fully-masked output, so its session
    exists in verl's batch and its group keeps G members."""
    samples: list[TrainSample] = episode_samples(traj)
    tool_s = sum(r.result.latency_s for r in traj.tool_records)
    calls = len(traj.tool_records)
    if not samples:
        samples = [TrainSample(list(fallback_prompt), [pad_id], [0], [0.0], turn=0)]
    outs = []
    for i, s in enumerate(samples):
        metrics = AgentLoopMetrics(generate_sequences=traj.gen_latency_s if i == len(samples) - 1 else 0.0,
                                   tool_calls=tool_s if i == len(samples) - 1 else 0.0)
        turns = 1 + (s.turn + 1) * 2 if traj.context_mode == "reprompt" else 1 + len(traj.turns) + calls
        fields = {**extra, "turn": s.turn, "num_outputs": len(samples)}
        if reward_info is not None:
            fields["reward_extra_info"] = dict(reward_info)
        out = _output(s.prompt_ids, s.response_ids, s.response_mask, s.logprobs, turns, fields, metrics,
                      prompt_len, response_len)
        out.reward_score = reward_score
        outs.append(out)
    return outs


class OrchestraAgentLoop(AgentLoopBase):
    """verl AgentLoopBase running orchestra's AgentLoop. Extra constructor arguments come from the agent-loop
    yaml (cluster/verl/stage.py): `orchestra_overrides` (our config), and for tests `tool_client` /
    `reward_client` (objects with the ToolClient protocol / an async `submit`); `actor_namespace` names the Ray
    namespace of the `tool:<name>` / `reward` actors when it is not the job's own."""

    def __init__(self, *args: Any, orchestra_overrides: Any = (), actor_namespace: str | None = None,
                 tool_client: Any = None, reward_client: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cfg = load_experiment(tuple(str(o) for o in orchestra_overrides))
        self.namespace = actor_namespace or None
        self.tool_client, self.reward_client = tool_client, reward_client
        self.prompt_len = int(self.rollout_config.prompt_length)
        self.response_len = int(self.rollout_config.response_length)

    def _clients(self) -> tuple[Any, Any]:
        v = self.cfg.verl
        grouped = rubric_of(self.cfg.reward.rubric).grouped
        if self.tool_client is None or (self.reward_client is None and grouped):
            tools, reward = ray_clients(tuple(self.cfg.zoo.tools), float(v.tool_timeout_s), self.namespace, grouped)
            self.tool_client = self.tool_client or tools
            self.reward_client = self.reward_client or reward
        return BoundedToolClient(self.tool_client, v.tool_timeout_s, v.max_tool_response_chars), self.reward_client

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        convert = getattr(self.tokenizer, "convert_tokens_to_ids", None)
        if convert is not None:
            end = convert("<|im_end|>")
            if isinstance(end, int) and end >= 0 and end != getattr(self.tokenizer, "unk_token_id", None):
                ids.add(end)
        return sorted(i for i in ids if isinstance(i, int))

    def _group_size(self, split: str) -> int:
        r = self.rollout_config
        return int(r.n if split == "train" else r.val_kwargs.n)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        from orchestra.data.tasks import task_from_verl_row
        from reward.cost import episode_cost, episode_latency

        cfg, a = self.cfg, self.cfg.agent
        task = task_from_verl_row(kwargs)
        extra_info = kwargs.get("extra_info") or {}
        split = str(extra_info.get("split", "train"))
        uid = str(kwargs.get("uid", "") or f"{task.id}-{kwargs.get('global_steps', 0)}")
        session = kwargs.get("session_id", uuid.uuid4().hex[:6])
        tools, reward = self._clients()
        await tools.warm(task)
        engine = ServerEngine(self.server_manager, f"{uid}-{session}-{uuid.uuid4().hex[:6]}", sampling_params)
        prompter = Prompter(self.tokenizer, **{**a.prompter_kwargs(), "max_observation_chars": min(
            a.max_observation_chars, cfg.verl.max_tool_response_chars)})
        # The episode's budget per sequence: agent.max_context_tokens, within prompt_length (the launcher sets it to
        # that budget capped at the model's positions: cluster/verl/config.context_lengths). So a reprompt turn's
        # prompt always fits prompt_length and `_output` never cuts its head (the system turn) off.
        ctx_tokens = min(a.max_context_tokens, self.prompt_len)
        loop = AgentLoop.from_config(a, engine, tools, prompter, eos_token_ids=self._eos_ids(),
                                     max_context_tokens=ctx_tokens)
        sampling = Sampling(max_tokens=min(cfg.sampling.max_tokens, self.response_len))
        row_step = int(kwargs.get("global_steps", 0) or 0)
        traj = await loop.run(task, sampling, uid=uid, episode_id=f"{uid}_{session}", policy_version=row_step)
        self.trajectory = traj  # kept for traces and tests; verl drops this object after the episode
        try:
            cost = episode_cost(traj, cfg.model.price_in_per_mtok, cfg.model.price_out_per_mtok).total_usd
        except ValueError:  # a tool charged an invalid cost: the reward side marks the episode failed
            cost = 0.0
        latency = episode_latency(traj, cfg.reward.count_generation_latency)
        extra = episode_extra(traj, cost, latency, engine.global_steps, row_step)
        extra["pref"] = dict(task.pref)
        score, info = None, None
        if rubric_of(cfg.reward.rubric).grouped:
            scored = await reward.submit(traj.to_dict(), task.to_dict(), self._group_size(split))
            score = float(scored["reward"] if split != "train" else scored["advantage"])
            info = {"orch_reward": float(scored["reward"]), "orch_advantage": float(scored["advantage"]),
                    "acc": float(bool(scored["correct"])), "dropped": float(bool(scored["dropped"])),
                    "cost_usd": float(cost), "latency_s": float(latency),
                    # the barrier's backstop at work: scored by its group deadline, or arrived after it
                    "group_deadline": float(bool(scored.get("by_deadline"))),
                    "late": float(scored.get("status") == "late")}
            extra["correct"] = bool(scored["correct"])
        fallback = prompter.encode([prompter.system(task), prompter.reprompt_user(task, [], [], [])],
                                   tools.schemas(task)) if not traj.turns else []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self._eos_ids()[0]
        return episode_outputs(traj, extra, prompt_len=self.prompt_len, response_len=self.response_len,
                               fallback_prompt=fallback, pad_id=pad, reward_score=score, reward_info=info)


def register_loop() -> None:
    """Register the loop under AGENT_NAME unless an entry is already there. verl's own `@register` would replace
    it, and the entry the job's agent-loop yaml put there carries `orchestra_overrides` (the run's config):
    AgentLoopWorker loads that yaml first and imports this module on the first episode's instantiate, so a
    decorator here swapped the yaml's entry for a bare one and every later episode ran with the default
    experiment's config (its tools, turns, rubric), not the job's; a job whose zoo lacked cpu_tiny's `search`
    crashed on looking up `tool:search`."""
    verl_agent_loop._agent_loop_registry.setdefault(
        AGENT_NAME, {"_target_": f"{OrchestraAgentLoop.__module__}.{OrchestraAgentLoop.__qualname__}"})


register_loop()
