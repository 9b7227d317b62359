"""The configuration's agent section: the multi-turn loop, its prompt and its budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# agent.tool_catalogue's values, in the order of what the system turn shows (orchestra/agent/prompt.py renders each)
CATALOGUES = ("full", "brief", "none")
NUMBER_FORMATS = ("plain", "sci", "level")  # agent.number_format
# a weight's bin words above 0 ("none"), rising (orchestra.agent.prompt.level): one BPE token each in the tiny tokenizer
LEVEL_WORDS = ("minimal", "low", "medium", "high", "top")


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
    # can read one (docs/recipe.md)
    preference_numbers: bool = True
    # the four upper bounds of weight ÷ accuracy for the words minimal, low, medium, high (above: top; 0: none);
    # empty: orchestra.agent.prompt.LEVELS'
    preference_levels: list[float] = field(default_factory=list)
    # the latency weight's five bin words (minimal ... top; 0 stays "none") where they are not the cost's: a small
    # policy that reads "cost medium, latency medium" must tell the two words apart by where they stand; with words of
    # their own a word's token says which weight it is (cpu_tiny: slow, wait, time, seconds, milliseconds, one token
    # each in the tiny tokenizer). Empty: the cost's words
    latency_words: list[str] = field(default_factory=list)
    # how the numbers read: plain (the weights as given, "cost 0.347") | sci (each weight per unit of accuracy in
    # scientific notation with two significant digits, "cost 3.5e-1": one character a token, so a tiny policy reads
    # one digit, one sign and one exponent in the same places for every weight; orchestra.agent.prompt.sci) | level
    # (each weight per unit of accuracy as a level, 2 a decade, 5.5 at 1, one decimal: "cost 4.5" for 0.3, whose whole
    # part is the weight's half decade, one token of the tiny tokenizer; orchestra.preferences.level_of)
    number_format: str = "plain"
    # the estimator router's suggested plan under the task's preference, shown after the preference
    # ("Router (odds high): answer answer-2.", orchestra/agent/hints.py): per-question routing a tiny policy
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
                "number_format": self.number_format, "latency_words": list(self.latency_words),
                "route_hints": self.route_hints, "tool_catalogue": self.tool_catalogue}

    def loop_kwargs(self) -> dict[str, Any]:
        """orchestra.agent.loop.AgentLoop's settings: the one mapping the trainer's rollout workers, evaluation,
        the warm start, replay, Serve and the verl plugin all build their loop from."""
        b = self.budget
        return {"context_mode": self.context_mode, "answer_mode": self.answer_mode, "max_turns": self.max_turns,
                "max_calls_per_turn": self.max_calls_per_turn, "max_context_tokens": self.max_context_tokens,
                "budget_usd": b.usd, "budget_seconds": b.seconds, "budget_turns": b.turns,
                "count_generation_latency": self.count_generation_latency, "repeat_guard": self.repeat_guard}
