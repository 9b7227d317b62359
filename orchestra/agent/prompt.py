"""Render what the orchestrator sees, through the model's own chat template, as token ids.

Two context modes (DESIGN.md "Contracts"):
- reprompt (ToolOrchestra): each turn re-renders system + one user message holding the Problem, the
  Documents retrieved so far, the code outputs and earlier attempts, each cut to its character budget
  (newest kept first) so the prompt stays bounded however long the episode runs, and the answers consulted
  experts gave ("Expert answers (they differ):", one short line per tier; `answers_heading`).
- transcript: one conversation; after each turn only the *delta* (tool responses + the next assistant
  header) is tokenized and appended, so the model's own tokens are never re-tokenized.

The user message ends with the user's preference vector, because the policy must condition on it: last, next
to where the policy starts writing (easy to attend to for a small policy), and out of the system turn, so
the system turn + tool catalogue is one token prefix shared by every task and preference (cached here,
prefilled once per batch by the HF engine).
Tool schemas (with each tier's price and latency in the descriptions) come from the ToolClient; `tool_catalogue`
renders them whole ("full"), as each tool's name, arguments and first sentence ("brief": no tier list, so the tier
ids a route hint names appear nowhere else in the prompt), or not at all ("none").
`prompt_format` other than "orchestra" renders another model's trained layout instead: "toolorchestra*" is NVIDIA's
Orchestrator-8B's (orchestra/agent/toolorchestra_format.py: its system line, its reprompt context cut in tokens,
its exact tool schemas, no preference text: that model was never shown one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from orchestra.agent import toolorchestra_format
from orchestra.agent.consults import agree
from orchestra.agent.hints import hint_text
from orchestra.config.agent import CATALOGUES, LEVEL_WORDS, NUMBER_FORMATS
from orchestra.preferences import level_of, weight_of_level
from orchestra.types import Preference, Task

DEFAULT_SYSTEM = (
    "You are an orchestrator: solve the problem with tools and expert models. Stronger experts are more "
    "accurate but cost more and are slower. Call one tool per turn; the answer tool gives the final answer."
)


_SPECIAL_END = re.compile(r"<\|[a-z_]+\|>")


def _special_boundary(head: str) -> int | None:
    """Index just after the last `<|...|>` special token in the rendered system turn (None if there is none)."""
    last = None
    for match in _SPECIAL_END.finditer(head):
        last = match.end()
    return last


class ChatTokenizer(Protocol):
    """The slice of a HF tokenizer the prompt needs."""

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


# A weight relative to accuracy's, in one word (the ratio's upper bounds): five levels, so the cost weights a
# user is likely to try (0.05, 0.2, 0.5, 1, 2 with accuracy 1) each read differently. `agent.preference_levels`
# moves the four bounds (the words stay); cpu_tiny puts them at half decades (0.056, 0.178, 0.56, 1.78) so that
# each point of the adherence sweep (0.03 ... 3) reads as its own word.
LEVELS = ((0.0, "none"), (0.1, "minimal"), (0.35, "low"), (0.75, "medium"), (1.5, "high"))


def level(weight: float, accuracy: float, bounds: Sequence[float] = (), words: Sequence[str] = ()) -> str:
    """The weight's bin word: `none` at 0, then one of `words` (default LEVEL_WORDS) by the ratio weight ÷ accuracy
    against the four upper `bounds` (default: LEVELS')."""
    r = weight / accuracy if accuracy > 0 else weight
    if r <= 0:
        return "none"
    bounds = tuple(bounds) or tuple(b for b, _ in LEVELS[1:])
    words = tuple(words) or LEVEL_WORDS
    return next((word for bound, word in zip(bounds, words, strict=False) if r < bound), words[-1])


def preference_words(pref: Preference, bounds: Sequence[float] = (), latency_words: Sequence[str] = ()) -> str:
    """"Priorities: cost high, latency low, avoids answer-1." — the vector as words (cost and latency relative to
    accuracy, tool likes and dislikes by sign; `latency_words`: the latency's five bin words where they are not the
    cost's, agent.latency_words)."""
    acc = pref.get("accuracy", 0.0)
    parts = [f"cost {level(pref.get('cost', 0.0), acc, bounds)}",
             f"latency {level(pref.get('latency', 0.0), acc, bounds, latency_words)}"]
    parts += [f"{'likes' if v > 0 else 'avoids'} {k[5:]}" for k, v in sorted(pref.items())
              if k.startswith("tool:") and v != 0]
    return "Priorities: " + ", ".join(parts) + "."


SCI_HEAD = "Preference weights per unit of accuracy: "
LEVEL_HEAD = "Preference levels (2 a decade, 5.5 = 1 per unit of accuracy): "


def sci(x: float) -> str:
    """A weight in scientific notation with two significant digits, "3.0e-2", "-1.2e+0" ("0" for zero): every
    character is a token of the tiny tokenizer, so one digit, one sign and one exponent are what a policy reads, in
    the same places for every weight (plain "0.0347" and "0.347" split into merged pieces that differ per number)."""
    return "0" if x == 0 else f"{x:.1e}".replace("e-0", "e-").replace("e+0", "e+")


def preference_text(pref: Preference, words: bool = False, numbers: bool = True, bounds: Sequence[float] = (),
                    number_format: str = "plain", latency_words: Sequence[str] = ()) -> str:
    """The preference as the policy reads it, the one rendering for training, evaluation and Serve (Prompter):
    the weights as numbers, then (`words`) in bin words. Without `numbers` only the words are shown, so every
    vector in a bin reads alike. `number_format` "sci" shows each weight divided by accuracy's (the trade-off the
    reward makes) in `sci` notation, "Preference weights per unit of accuracy: cost 3.0e-2, latency 0.": what the
    tiny policy reads in cpu_tiny, turning it into its bin words itself (`preference_note`; docs/recipe.md)."""
    if not pref:
        return "User preference: accuracy first."
    if not numbers:
        return preference_words(pref, bounds, latency_words)
    if number_format in ("sci", "level"):
        acc = pref.get("accuracy", 0.0)
        scale = acc if acc > 0 else 1.0
        show, head = (sci, SCI_HEAD) if number_format == "sci" else (level_of, LEVEL_HEAD)
        text = head + ", ".join(f"{k} {show(v / scale)}" for k, v in sorted(pref.items()) if k != "accuracy") + "."
    else:
        parts = [f"{k} {v:g}" for k, v in sorted(pref.items())]
        # Weights: higher = matters more; a negative tool weight = avoid that tool.
        text = "Preference weights: " + ", ".join(parts) + "."
    return f"{text} {preference_words(pref, bounds, latency_words)}" if words else text



def catalogue(schemas: list[dict[str, Any]] | None, mode: str) -> list[dict[str, Any]] | None:
    """The tool schemas as the prompt shows them (`mode`, one of CATALOGUES). "brief" keeps each tool's name and
    arguments and cuts its description to the first sentence; "none" shows no catalogue. A tiny policy trained on
    one zoo learns the tiers' prices from rewards, not from the text, and the full catalogue, listing every tier id,
    was measured to drown a route hint naming one of them (docs/quality.md, "Per-question routing by the policy")."""
    if mode == "full" or not schemas:
        return schemas
    if mode == "none":
        return None
    out = []
    for schema in schemas:
        fn = dict(schema.get("function", schema))
        text = str(fn.get("description", ""))
        cut = text.find(". ")
        fn["description"] = text if cut < 0 else text[:cut + 1]
        out.append({**schema, "function": fn} if "function" in schema else fn)
    return out


def _fit(items: list[str], budget: int, label: str) -> str:
    """Newest items first until `budget` characters; older ones are dropped, the oldest kept one is cut."""
    if not items or budget <= 0:
        return ""
    kept: list[str] = []
    left = budget
    for item in reversed(items):
        if left <= 0:
            break
        piece = item if len(item) <= left else item[: max(left - 3, 0)] + "..."
        kept.append(piece)
        left -= len(piece)
    body = "\n".join(f"[{label} {len(items) - i}] {p}" for i, p in enumerate(kept))
    dropped = len(items) - len(kept)
    note = f"({dropped} older {label.lower()}s omitted)\n" if dropped else ""
    return note + "\n".join(reversed(body.split("\n")))


VERDICTS = ("they agree", "they differ")  # the answers heading's two verdicts (`answers_heading`, `restatement`)


def answers_heading(answers: Sequence[dict[str, str]]) -> str:
    """"Expert answers:", and with two or more whether they all agree (orchestra/agent/consults.py `agree`): a
    1M-parameter policy compares two multi-token answers poorly, and agreement is what an adaptive plan acts on."""
    if len(answers) < 2:
        return "Expert answers:"
    same = all(agree(answers[0]["answer"], a["answer"]) for a in answers[1:])
    return f"Expert answers ({VERDICTS[0] if same else VERDICTS[1]}):"


def restatement(prompt: str, tool: str) -> str:
    """The note a policy may write before acting on two or more answers: the last answers heading's verdict and the
    tool it calls next, "<think>they differ answer</think>" ("" when the prompt shows fewer than two answers). The
    cascade teacher's demonstrations open their decision turn with it (sft.restate): a 1M-parameter policy does not
    grow attention from its decision to a heading deep in its prompt under RL's signal (docs/quality.md, RL's
    positive control), but the word after "differ" is the next token of a position holding "differ" itself."""
    at = prompt.rfind("Expert answers (")
    if at < 0:
        return ""
    verdict = prompt[at + len("Expert answers ("):].split(")", 1)[0]
    return f"<think>{verdict} {tool}</think>" if verdict in VERDICTS else ""


WEIGHTS_HEAD = "Preference weights: "
# the line's body ends at the first period that no digit follows ("cost 0.2." ends it, "0.2" does not)
# each weights line a prompt can show: (head, its body's pattern, how a value reads back as a weight)
_LINES = tuple((head, re.compile(re.escape(head) + r"(.*?)\.(?:\s|<|$)"), read) for head, read in
               ((WEIGHTS_HEAD, float), (SCI_HEAD, float), (LEVEL_HEAD, weight_of_level)))


def _last_line_at(text: str) -> int:
    """Where the last weights line of `text` starts (-1: none)."""
    return max(text.rfind(head) for head, _, _ in _LINES)


def _shown(line: str) -> tuple[str, Callable[[str], float], dict[str, str]]:
    """The last weights line of `line`: its head, its reader of a shown value and each weight as the line writes it
    ({"cost": "4.5", ...}); ("", float, {}) when `line` holds none."""
    at = _last_line_at(line)
    if at < 0:
        return "", float, {}
    head, pattern, read = next(entry for entry in _LINES if line.startswith(entry[0], at))
    found = pattern.findall(line[at:])
    return (head, read, dict(part.rpartition(" ")[::2] for part in found[-1].split(", "))) if found else ("", float, {})


def parse_weights(line: str) -> Preference:
    """The vector a "Preference weights: accuracy 1, cost 0.3, latency 0." line shows (`preference_text` with
    numbers; "Preference weights per unit of accuracy: cost 3.0e-1, latency 0." and the levels line, "... cost 4.5,
    latency 0.", read as accuracy 1, a level as the weight it stands for), read back from the last such line; {}
    when `line` holds none."""
    head, read, shown = _shown(line)
    if not shown:
        return {}
    return ({} if head == WEIGHTS_HEAD else {"accuracy": 1.0}) | {key: read(value) for key, value in shown.items()}


def preference_note(prompt: str, bounds: Sequence[float] = (), latency_words: Sequence[str] = (),
                    numbers: bool = False) -> str:
    """The note a policy writes before each call once SFT taught it to (sft.restate_preference): the prompt's
    priorities in bin words, and the router line's suggestion where one follows it (agent.route_hints), in a think
    block: "<think>cost top, latency medium</think>", "<think>cost minimal, latency none; answer answer-1</think>"
    ("" when the prompt shows no preference). With words in the prompt the note copies its last priorities line;
    with numbers only (agent.preference_numbers without preference_words) it *reads* them: the words are the weights'
    bins (`bounds`: agent.preference_levels; `latency_words`: agent.latency_words), so the policy learns to turn
    numbers it may never have seen into a word and then acts on its own word. With `numbers` (sft.note_numbers) it
    first copies each weight as the prompt shows it, opening with the prompt's own " cost" token: "<think> cost 2.9
    low, latency 0 none</think>". A 1M-parameter policy must tie a decision some 20 tokens into its reply to one
    bin word (or one tier id) at the end of its prompt; it learns that late, at a step that moves with the seed and
    the device's arithmetic, and on some seeds not at all (docs/warm_start.md). Restated, the word is a target the
    policy is trained on directly (a wrong one costs its whole loss), and the decision then reads the note's own words
    a few tokens back; copied, the number the word is read from was written just before it."""
    at = prompt.rfind("Priorities: ")
    copied = False
    if at >= 0:
        note = prompt[at + len("Priorities: "):].split(".", 1)[0]
    else:
        at = _last_line_at(prompt)
        if at < 0:
            return ""
        note = preference_words(parse_weights(prompt[at:]), bounds, latency_words)[len("Priorities: "):].rstrip(".")
        if numbers:
            shown = _shown(prompt[at:])[2]
            note = ", ".join(f"{k} {shown[k]} {w}" if k in shown else part
                             for part in note.split(", ") for k, _, w in [part.partition(" ")])
            copied = True
    router = prompt.find("Router (", at)
    if router >= 0 and "): " in prompt[router:]:
        note += "; " + prompt[router:].split("): ", 1)[1].split(".", 1)[0]
    return f"<think>{' ' if copied else ''}{note}</think>"


class Prompter:
    def __init__(self, tokenizer: ChatTokenizer, system_prompt: str = "", doc_chars: int = 1200,
                 code_chars: int = 600, attempt_chars: int = 600, max_observation_chars: int = 1500,
                 preference_words: bool = False, prompt_format: str = "orchestra", preference_numbers: bool = True,
                 preference_levels: Sequence[float] = (), route_hints: bool = False, tool_catalogue: str = "full",
                 number_format: str = "plain", latency_words: Sequence[str] = ()):
        self.tok = tokenizer
        # another model's trained layout (None: ours); the budgets above are ours and unused by it
        self.format = None if prompt_format == "orchestra" else toolorchestra_format.variant(prompt_format)
        self.system_prompt = system_prompt or DEFAULT_SYSTEM
        self.doc_chars, self.code_chars, self.attempt_chars = doc_chars, code_chars, attempt_chars
        self.max_observation_chars = max_observation_chars
        self.preference_words = preference_words
        self.preference_numbers, self.preference_levels = preference_numbers, tuple(preference_levels)
        if number_format not in NUMBER_FORMATS:
            raise ValueError(f"number_format must be one of {NUMBER_FORMATS}, got {number_format!r}")
        self.number_format = number_format
        self.latency_words = tuple(latency_words)
        # the estimator router's suggestion under the task's preference, after the preference (agent/hints.py)
        self.route_hints = bool(route_hints)
        if tool_catalogue not in CATALOGUES:
            raise ValueError(f"tool_catalogue must be one of {CATALOGUES}, got {tool_catalogue!r}")
        self.tool_catalogue = tool_catalogue
        self._prefix_cache: dict[tuple[str, str], tuple[str, list[int]]] = {}

    # ------------------------------------------------------------ messages
    def system(self, task: Task) -> dict[str, Any]:
        return {"role": "system", "content": self.format.system if self.format else self.system_prompt}

    def reprompt_user(self, task: Task, documents: list[str], code_outputs: list[str],
                      attempts: list[str], answers: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
        """The reprompt user turn. `answers`: what consulted experts answered (orchestra/agent/consults.py), each
        {tier, model, answer}: our layout lists them by tier; Orchestrator-8B's as its attempts by model."""
        if self.format:
            seen = [*attempts, *({"model": a["model"], "answer": a["answer"]} for a in answers)]
            return {"role": "user", "content": toolorchestra_format.user_content(
                self.format, self.tok, task.problem, documents, code_outputs, seen, task.model_mapping)}
        sections = [f"Problem: {task.problem}"]
        for title, items, budget in (("Documents", documents, self.doc_chars),
                                     ("Code outputs", code_outputs, self.code_chars),
                                     ("Previous attempts", attempts, self.attempt_chars)):
            body = _fit(items, budget, title.split()[-1].rstrip("s").capitalize())
            if body:
                sections.append(f"{title}:\n{body}")
        if answers:  # short extracted answers (a letter, a number), one line each: the whole list, never cut
            sections.append(answers_heading(answers) + "\n" + "\n".join(f"{a['tier']}: {a['answer'][:80]}"
                                                                        for a in answers))
        sections.append(self.preference(task))
        return {"role": "user", "content": "\n\n".join(sections)}

    def preference(self, task: Task) -> str:
        text = preference_text(task.pref, self.preference_words, self.preference_numbers, self.preference_levels,
                               self.number_format, self.latency_words)
        hint = hint_text(task) if self.route_hints else ""
        return f"{text}\n{hint}" if hint else text

    def first_messages(self, task: Task) -> list[dict[str, Any]]:
        if self.format:  # its first turn, the same in either context mode
            return [self.system(task), self.reprompt_user(task, [], [], [])]
        return [self.system(task), {"role": "user", "content": f"{task.problem}\n\n{self.preference(task)}"}]

    def observation(self, text: str) -> str:
        cap = self.max_observation_chars
        return text if len(text) <= cap else text[: cap - 3] + "..."

    # ------------------------------------------------------------ tokens
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               generation_prompt: bool = True) -> str:
        if self.format:
            tools = toolorchestra_format.catalogue(tools)
        else:
            tools = catalogue(tools, self.tool_catalogue)
        return self.tok.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                            add_generation_prompt=generation_prompt)

    def encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Token ids of the rendered conversation. The system turn (instructions + tool catalogue, most of a
        reprompt prompt and the same on every turn of a task) is tokenized once and cached; the cut is made
        right after a special token, where tokenizers split text anyway, so the ids equal a one-piece encode."""
        text = self.render(messages, tools)
        if not messages or messages[0].get("role") != "system":
            return list(self.tok.encode(text, add_special_tokens=False))
        key = (messages[0].get("content", ""), json.dumps(tools, sort_keys=True) if tools else "")
        cached = self._prefix_cache.get(key)
        if cached is None:
            head = self.render(messages[:1], tools, generation_prompt=False)
            cut = _special_boundary(head)
            if cut is None or not text.startswith(head[:cut]):
                return list(self.tok.encode(text, add_special_tokens=False))
            cached = (head[:cut], list(self.tok.encode(head[:cut], add_special_tokens=False)))
            if len(self._prefix_cache) >= 256:
                self._prefix_cache.pop(next(iter(self._prefix_cache)))
            self._prefix_cache[key] = cached
        prefix, ids = cached
        if not text.startswith(prefix):
            return list(self.tok.encode(text, add_special_tokens=False))
        return ids + list(self.tok.encode(text[len(prefix):], add_special_tokens=False))

    def delta_ids(self, messages: list[dict[str, Any]], new: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, emitted_end: str) -> list[int]:
        """Token ids that follow the model's last response: the rest of its end-of-turn text (all of it if
        the response was cut, what follows the stop token `emitted_end` otherwise), the rendered `new`
        messages, and the next assistant header. Computed as a string diff of two template renders."""
        before = self.render(messages, tools, generation_prompt=False)
        after = self.render(messages + new, tools, generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("chat template is not prefix-stable; use context_mode=reprompt with this model")
        end = self._turn_end(messages, tools)
        if emitted_end and end.startswith(emitted_end):
            end = end[len(emitted_end):]
        return list(self.tok.encode(end + after[len(before):], add_special_tokens=False))

    def _turn_end(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The text the template puts after an assistant message's content (e.g. '<|im_end|>\\n')."""
        probe = messages[:-1] + [{"role": "assistant", "content": "\x00"}]
        text = self.render(probe, tools, generation_prompt=False)
        return text.split("\x00", 1)[1] if "\x00" in text else ""

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)
