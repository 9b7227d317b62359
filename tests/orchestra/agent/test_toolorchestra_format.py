"""Orchestrator-8B's prompt format (orchestra/agent/toolorchestra_format.py): a golden rendering of a fixed task
(problem + a document + a code output + an attempt) through a Qwen3-style tool template, the token cuts, the
three harness variants, the exact catalogue, the preset, and our parser on the tool calls the model writes.
Regenerate the golden with UPDATE_GOLDEN=1."""

from __future__ import annotations

import asyncio
import json
import re

import jinja2
import pytest

from orchestra.agent import toolorchestra_format as tof
from orchestra.agent.parse import parse
from orchestra.agent.prompt import Prompter
from orchestra.config.schema import AgentConfig
from tests.helpers.fakes import ByteTokenizer, FakeTool, make_task
from tests.orchestra.agent.test_prompt import check_golden

# The Qwen3 chat template's tool section as Orchestrator-8B sees it (the checkpoint's own template renders it on a
# GPU node; this stand-in writes the same text for system + user turns): the system line, a blank line, the tools
# one JSON object a line (key order kept, as transformers' tojson does), the call instruction.
QWEN3_STYLE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if not (m.role == 'system' and loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def qwen3_style_tokenizer() -> ByteTokenizer:
    tok = ByteTokenizer()
    env = jinja2.Environment()
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    tok.template = env.from_string(QWEN3_STYLE)
    return tok


TOK = qwen3_style_tokenizer()
BYTES = ByteTokenizer()
OUR_SCHEMAS = [FakeTool(n).schema() for n in ("search", "enhance_reasoning", "answer")]  # as a ToolClient gives them
MAPPING = {"answer-4": "qwen3-32b", "search-1": "gpt-5"}


def fixed_task():
    return make_task(79, problem="Which element has atomic number 79, and what is its melting point in kelvin?",
                     answer="gold, 1337.33 K", model_mapping=dict(MAPPING))


def fixed_lists():
    docs = ["Gold is a chemical element; it has symbol Au and atomic number 79."]
    code = ["1337.33"]
    attempts = ["turn 1: format error: no tool call found",  # ToolOrchestra's harness keeps no trace of these
                "turn 2: search(search-1) -> search: timed out",
                "turn 3: answer(answer-4) -> 1064 C"]
    return docs, code, attempts


def test_golden_rendering_of_a_fixed_task():
    p = Prompter(TOK, **AgentConfig(prompt_format="toolorchestra").prompter_kwargs())
    task = fixed_task()
    msgs = [p.system(task), p.reprompt_user(task, *fixed_lists())]
    text = p.render(msgs, OUR_SCHEMAS)
    check_golden("prompt_toolorchestra.txt", text)
    assert TOK.decode(p.encode(msgs, OUR_SCHEMAS)) == text  # the cached system prefix changes nothing
    user = msgs[1]["content"]
    assert user == ("Problem: Which element has atomic number 79, and what is its melting point in kelvin?\n\n"
                    "Documents:\nDoc 1: Gold is a chemical element; it has symbol Au and atomic number 79.\n\n"
                    "```output\n1337.33\n```\n\nAttempt1 answer by qwen3-32b: 1064 C\n\n\nChoose an approriate tool.")
    assert "Preference" not in text and "accuracy" not in text  # the model was never shown a preference
    # the tools are ToolOrchestra's, in tools.json's order, whatever the ToolClient handed over
    lines = [ln for ln in text.splitlines() if ln.startswith('{"type": "function"')]
    assert [json.loads(ln)["function"]["name"] for ln in lines] == ["enhance_reasoning", "answer", "search"]
    assert [json.loads(ln) for ln in lines] == tof.TOOLS


def test_first_turn_and_empty_context():
    p = Prompter(TOK, prompt_format="toolorchestra")
    first = p.first_messages(fixed_task())
    assert first[0] == {"role": "system", "content": "You are good at using tools. "}
    assert first[1]["content"] == (f"Problem: {fixed_task().problem}\n\n\n\nChoose an approriate tool.")
    assert first == [p.system(fixed_task()), p.reprompt_user(fixed_task(), [], [], [])]


def test_the_harness_variants_differ_as_their_scripts_do():
    task = fixed_task()
    hle = Prompter(BYTES, prompt_format="toolorchestra_hle")
    frames = Prompter(BYTES, prompt_format="toolorchestra_frames")
    assert hle.system(task)["content"] == frames.system(task)["content"] == "You are good at using tools."
    long_doc = "x" * 5000
    h = hle.reprompt_user(task, [long_doc], ["42"], [])["content"]
    assert h.endswith("\n\nChoose an appropriate tool.'")  # the stray quote of eval_hle.py
    assert f"Doc 1: {'x' * 1200} ...\n\n\npython code and execution outputs:\n```output\n42\n```" in h
    f = frames.reprompt_user(task, [long_doc], [], [])["content"]
    assert f"Doc 1: {'x' * 4000}\n\n\npython code and execution outputs:\n\n\nChoose an appropriate tool." in f
    assert "python code" not in hle.reprompt_user(task, ["d"], [], [])["content"]  # HLE: heading only with code
    with pytest.raises(ValueError, match="prompt_format"):
        Prompter(BYTES, prompt_format="toolorchestra_gaia")


def test_context_is_cut_from_the_left_in_tokens():
    v = tof.VARIANTS["toolorchestra"]
    docs = [f"document {i:02d} " + "y" * 3990 for i in range(12)]  # 12 x 4000 chars: twice the 24000-token budget
    ctx = tof.context(v, BYTES, "q", docs, [], [])
    assert ctx.startswith("Documents:\n") and len(ctx) == len("Documents:\n") + v.context_tokens  # 1 byte = 1 token
    assert ctx.endswith("Doc 12: document 11 " + "y" * 3988 + "\n\n") and "Doc 1: " not in ctx  # each doc: 4000 chars
    # code + attempts beyond their own budget: a cut block is reopened with a fence
    code = ["z" * 20000]
    ctx = tof.context(v, BYTES, "q", [], code, [])
    assert ctx.startswith("```\n") and len(ctx) == 4 + v.code_attempt_tokens
    # HLE: the budget is 27000 tokens less the problem's
    hle = tof.VARIANTS["toolorchestra_hle"]
    ctx = tof.context(hle, BYTES, "p" * 1000, [f"{i:02d}" + "w" * 1100 for i in range(30)], [], [])
    assert len(ctx) == len("Documents:\n") + 27000 - 1000
    # documents already held are not repeated; empty code runs are not kept
    assert tof.context(v, BYTES, "q", ["a", "b", "a"], ["", "  "], []) == "Documents:\nDoc 1: a\n\nDoc 2: b\n\n"


def test_tokens_are_decoded_one_by_one_as_in_training():
    """cut_seq decodes each kept token alone: a character split across byte tokens comes out as U+FFFD."""
    text, n = tof.cut_tail(BYTES, "héllo", 100)
    assert n == 6 and text == "h\ufffd\ufffdllo"
    assert tof.cut_tail(BYTES, "<|im_end|>abc", 2) == ("bc", 4)  # special tokens are skipped


def test_catalogue_keeps_order_and_unknown_tools():
    calc = FakeTool("calculator").schema()
    expert = {"type": "function", "function": {"name": "call_expert", "parameters": {}}}
    domain = FakeTool("book_flight").schema()
    out = tof.catalogue([expert, calc, OUR_SCHEMAS[2], domain, OUR_SCHEMAS[0]])
    assert [t["function"]["name"] for t in out] == ["answer", "search", "calculator", "book_flight", "call_expert"]
    assert out[-1] is tof.CALL_EXPERT and out[2] is calc
    assert tof.catalogue(None) is None and tof.catalogue([]) == []


def test_tiers_named_in_the_descriptions_are_the_valid_ones():
    for tool in [*tof.TOOLS, tof.CALL_EXPERT]:
        f = tool["function"]
        (arg,) = f["parameters"]["properties"].values()
        choices = re.search(r"Choices: (\[.*?\])", arg["description"])[1]
        assert sorted(json.loads(choices.replace("'", '"'))) == sorted(tof.TIERS[f["name"]])
        assert set(tof.TIERS[f["name"]]) <= set(tof.TIER_MODELS)


def test_preset_binds_their_tiers_to_their_models():
    from orchestra.config import load_config, task_tiers

    cfg = load_config(["experiment=orchestrator8b", "model.name=/models/Orchestrator-8B"])
    assert (cfg.model.name, cfg.model.dtype, cfg.engine.kind) == ("/models/Orchestrator-8B", "bfloat16", "vllm")
    assert cfg.agent.prompt_format == "toolorchestra" and cfg.agent.context_mode == "reprompt"
    assert cfg.agent.max_turns == 50 and cfg.zoo.name == "openai"
    assert list(cfg.zoo.tools) == ["search", "enhance_reasoning", "answer"]
    tiers = task_tiers(cfg)
    qa_tiers = [t for name in ("search", "enhance_reasoning", "answer") for t in tof.TIERS[name]]
    assert sorted(tiers) == sorted(qa_tiers)
    for tier, expert in tiers.items():  # each tier reaches the very model ToolOrchestra's evaluation called
        assert cfg.zoo.experts[expert].model == tof.TIER_MODELS[tier], tier


# What Orchestrator-8B writes (a Qwen3 fine-tune; served by vLLM's `hermes` tool parser in ToolOrchestra's scripts,
# parsed in training by splitting on the tags and json-loading {"name", "arguments"}): thinking, then a call.
EMITTED = ("<think>\nThe melting point of gold is a lookup; the documents do not have it yet. A cheap searcher "
           "should do.\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"model\": \"search-3\"}}\n"
           "</tool_call><|im_end|>")


def test_parser_reads_the_calls_orchestrator8b_writes():
    parsed = parse(EMITTED)
    assert parsed.ok and len(parsed.calls) == 1
    call = parsed.calls[0]
    assert (call.name, call.arguments, call.tool_id) == ("search", {"model": "search-3"}, "search-3")
    two = parse("<think>\nok\n</think>\n\n<tool_call>\n{\"name\": \"enhance_reasoning\", \"arguments\": "
                "{\"model\": \"reasoner-1\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"answer\", \"arguments\": "
                "{\"model\": \"answer-math-1\"}}\n</tool_call>")
    # their harness runs the first valid call of a turn; ours keeps order, and the preset runs one call a turn
    assert [(c.name, c.tool_id) for c in two.calls] == [("enhance_reasoning", "reasoner-1"), ("answer", "answer-math-1")]


def test_an_episode_in_the_format_end_to_end():
    """The loop with the format on: the model's calls run, and the next prompt holds what they returned."""
    from orchestra.agent.loop import AgentLoop
    from orchestra.engine import Sampling
    from tests.helpers.fakes import ScriptedEngine
    from tools.base import LocalToolClient

    def call(name, tier):
        return f'<think>\nnext\n</think>\n\n<tool_call>\n{{"name": "{name}", "arguments": {{"model": "{tier}"}}}}\n</tool_call>'

    tools = {"search": FakeTool("search", documents=["Gold melts at 1337.33 K."]),
             "enhance_reasoning": FakeTool("enhance_reasoning", code_output="1337.33"),
             "answer": FakeTool("answer", reply="1337.33 K", answers=True)}
    engine = ScriptedEngine(TOK, [call("search", "search-1"), call("enhance_reasoning", "reasoner-2"),
                                  call("answer", "answer-1")])
    loop = AgentLoop(engine, LocalToolClient(tools), Prompter(TOK, prompt_format="toolorchestra"),
                     eos_token_ids=[TOK.eos_token_id], max_turns=5, max_context_tokens=20000)
    traj = asyncio.run(loop.run(fixed_task(), Sampling(max_tokens=400)))
    assert traj.termination == "answered" and traj.answer == "1337.33 K"
    prompts = [TOK.decode(ids) for ids in engine.prompts]
    assert "Documents:" not in prompts[0] and "Doc 1: Gold melts at 1337.33 K.\n\n" in prompts[1]
    assert prompts[2].endswith("Doc 1: Gold melts at 1337.33 K.\n\n```output\n1337.33\n```\n\n\n\n"
                               "Choose an approriate tool.<|im_end|>\n<|im_start|>assistant\n")


def test_fast_decode_path_equals_decoding_each_id():
    """An HF fast tokenizer takes a batched Rust path; it must give what per-id `decode` calls give."""
    from orchestra.policy.models import load_tokenizer

    tok = load_tokenizer("tiny")
    text = "Gold (Au) melts at 1337.33 K — 1064 °C; 金 is gold.<|im_end|> " * 50
    ids = tok.encode(text, add_special_tokens=False)
    slow = "".join(tok.decode([i], skip_special_tokens=True) for i in ids[-300:])
    assert tof.cut_tail(tok, text, 300) == (slow, len(ids))
