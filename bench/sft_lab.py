"""The SFT lab: a run's warm start replayed outside Ray, on the CPU and (where a GPU is present) on CUDA in fp32 and in
TF32, scoring as it goes whether the policy reads its preference. It is the measurement behind docs/warm_start.md's
cause of seed-dependent warm starts (reading the preference is a late phase change whose timing moves with the
device's arithmetic) and behind the fix (sft.restate_preference).

Usage: python bench/sft_lab.py [run=runs/sft_lab/cpu_tiny] [experiment=cpu_tiny] [steps=360] [every=40] [inits=0]
       [tasks=64] [devices=cpu,cuda,cuda-tf32] [KEY=VALUE ...]
1. Demonstrations: <run>/sft_samples.pkl, the exact TrainSamples a run's SFT stepped on (`sft.save_samples=true`).
   When absent, one is made: cluster.train with the KEY=VALUE overrides, sft.save_samples=true and one SFT step, no
   SFT check, no RL (exploration and the teacher: ~3 minutes on 2 cores). `sft.restate_preference=false` gives the
   demonstrations before the fix.
2. For each device and each initial seed in `inits`: the policy built from the run's config with that seed, the
   project's own Learner (AdamW, masked cross-entropy, clipping) and SFT schedule (orchestra/data/demos.py:
   sft_batches, sft_lr over `steps`), and every `every` steps, greedily on the first `tasks` labelled training tasks:
   - label agreement per preset: the share whose first call (tool and tier) is the teacher's under that preset;
   - contrast: the share of tasks whose calls are the teacher's under accuracy-first, balanced and cost-first at
     once (only a policy that reads its preference gets it; the presets' labels differ on most tasks);
   - sampled: agreement under the vectors sampled per task (sft.vectors_sampled, 32 tasks: weights as numbers);
   - reads (sft.restate_preference with numbers shown): the share of notes naming the bin of a cost weight of the
     unseen sweep (16 tasks' prompts re-rendered at each sweep weight, latency 0 and 0.3): whether the policy reads
     a number no demonstration showed into its word.
   CUDA devices without a GPU are skipped with a line saying so.
Prints INFO per check and `RESULT sft_lab_<device>_i<init>_agree_<preset>` / `_contrast` / `_agree_sampled` /
`_reads` at the last step.

`python bench/sft_lab.py notes=RUN_DIR [weights=0.02,0.03,...]` instead reads what a trained run's kept policy (its
newest checkpoint) writes in its note for each cost weight at accuracy 1 and latency 0, greedily on 16 of its
held-out tasks: how it reads numbers into its bin words (`RESULT sft_lab_notes_right`: the share of notes naming the
weight's own bin).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OWN = ("run", "experiment", "steps", "every", "inits", "tasks", "devices", "notes", "weights")
WEIGHTS = "0.02,0.03,0.04,0.07,0.1,0.12,0.15,0.2,0.3,0.5,0.6,0.9,1,1.1,1.5,2,3,5"
PRESETS = ("accuracy-first", "balanced", "cost-first")


def demonstrations(run: Path, experiment: str, overrides: list[str]) -> Path:
    """<run>/sft_samples.pkl, trained for when absent (the run's config.yaml beside it)."""
    from cluster.warm_start import SAMPLES_FILE

    path = run / SAMPLES_FILE
    if not path.is_file():
        cmd = [sys.executable, "-m", "cluster.train", f"experiment={experiment}", f"run_dir={run}", *overrides,
               "sft.save_samples=true", "sft.steps=1", "sft.until_follows=false", "sft.until_agreement=0",
               "sft.max_steps=0", "algo.steps=0", "algo.val_share=0", "eval.sweep=false", "eval.n_tasks=1"]
        print(f"INFO sft_lab: {' '.join(cmd[2:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return path


def first_calls(samples: list[Any], cfg: Any, tok: Any, n_tasks: int, n_sampled: int = 0
                ) -> dict[tuple[int, str], tuple[list[int], str]]:
    """(task index, preset) -> (the first turn's prompt ids, the teacher's call "tool tier") for the first `n_tasks`
    labelled tasks, and (task index, "s<k>") for the vectors sampled per task (sft.vectors_sampled: weights as numbers)
    on the first `n_sampled`. A demonstration's uid is `sft-<label index>` and the teacher labels each task under
    sft.vectors in order, then its sampled vectors (cluster/teachers/expected_value.py)."""
    per_task = len(cfg.sft.vectors) + cfg.sft.vectors_sampled
    out = {}
    for s in samples:
        task, k = divmod(int(s.uid.split("-")[-1]), per_task)
        if s.turn:
            continue
        if k >= len(cfg.sft.vectors):
            key = (task, f"s{k}") if task < n_sampled else None
        else:
            key = (task, cfg.sft.vectors[k]) if task < n_tasks and cfg.sft.vectors[k] in PRESETS else None
        if key:
            out[key] = (list(s.prompt_ids), call_of(tok.decode(s.response_ids)))
    return out


def call_of(text: str) -> str:
    """A reply's first tool call as "tool tier" ("" when it makes none)."""
    from orchestra.agent.parse import parse

    calls = parse(text).calls
    return f"{calls[0].name} {calls[0].arguments.get('model', '')}".strip() if calls else ""


def greedy(model: Any, tok: Any, prompts: list[list[int]], max_tokens: int, device: str) -> list[str]:
    """Each prompt's greedy reply, decoded, in batches of 32 left-padded rows."""
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    replies: list[str] = []
    for start in range(0, len(prompts), 32):
        batch = prompts[start:start + 32]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
                                 pad_token_id=pad)
        replies += [tok.decode(row) for row in out[:, width:].tolist()]
    return replies


def score(model: Any, tok: Any, labels: dict[tuple[int, str], tuple[list[int], str]], max_tokens: int,
          device: str) -> dict[str, float]:
    """Greedy first calls against the teacher's: agreement per preset (and over the sampled vectors) and contrast."""
    keys = sorted(labels)
    replies = greedy(model, tok, [labels[k][0] for k in keys], max_tokens, device)
    hits = {k: call_of(text) == labels[k][1] for k, text in zip(keys, replies, strict=True)}
    tasks = sorted({t for t, _ in keys})
    figures = {p: sum(hits[(t, p)] for t in tasks if (t, p) in hits) / max(1, sum((t, p) in hits for t in tasks))
               for p in PRESETS}
    sampled = [k for k in keys if k[1] not in PRESETS]
    if sampled:
        figures["sampled"] = sum(hits[k] for k in sampled) / len(sampled)
    whole = [t for t in tasks if all((t, p) in hits for p in PRESETS)]
    figures["contrast"] = sum(all(hits[(t, p)] for p in PRESETS) for t in whole) / max(1, len(whole))
    return figures


READ_COSTS = (0.03, 0.1, 0.3, 1.0, 3.0)  # the adherence sweep's weights: never shown in training
READ_LATENCIES = (0.0, 0.3)


def reading_prompts(cfg: Any, tok: Any, labels: dict[tuple[int, str], tuple[list[int], str]], n_tasks: int = 16
                    ) -> list[tuple[list[int], str]]:
    """(prompt ids, the bin word the note should name for cost) for the first `n_tasks` labelled training tasks,
    their accuracy-first prompt re-rendered under each READ_COSTS x READ_LATENCIES vector: whether the policy reads a
    number it was never trained on into its bin word (the note of sft.restate_preference), on training tasks."""
    from orchestra.agent.prompt import level, preference_text
    from orchestra.preferences import PRESETS

    a = cfg.agent
    render = lambda p: preference_text(p, a.preference_words, a.preference_numbers, a.preference_levels,  # noqa: E731
                                       a.number_format, a.latency_words)
    old = render(PRESETS["accuracy-first"])
    out = []
    for (task, preset), (ids, _) in sorted(labels.items()):
        if preset != "accuracy-first" or task >= n_tasks:
            continue
        text = tok.decode(ids)
        for cost in READ_COSTS:
            for lat in READ_LATENCIES:
                new = render({"accuracy": 1.0, "cost": cost, "latency": lat})
                out.append((tok.encode(text.replace(old, new), add_special_tokens=False),
                            level(cost, 1.0, a.preference_levels)))
    return out


def reading(model: Any, tok: Any, prompts: list[tuple[list[int], str]], device: str) -> float:
    """The share of `reading_prompts` whose greedy note names the cost weight's bin ("<think>cost low, ...")."""
    replies = greedy(model, tok, [p for p, _ in prompts], 12, device)
    right = sum(cost_word(text) == want for text, (_, want) in zip(replies, prompts, strict=True))
    return right / max(1, len(prompts))


def cost_word(text: str) -> str:
    """The cost's bin word in a note, "<think>cost low, ..." or, copying the number (sft.note_numbers),
    "<think> cost 2.9 low, ..." ("" when the text opens with no note)."""
    head = text.split("</think>")[0]
    if not head.startswith("<think>"):
        return ""
    part = head[len("<think>"):].strip().split(",")[0].split()
    return part[-1] if len(part) >= 2 and part[0] == "cost" else ""


def train_one(cfg: Any, samples: list[Any], labels: dict, device: str, init: int, steps: int, every: int
              ) -> dict[str, float]:
    """SFT from init seed `init` on `device` ("cpu", "cuda", "cuda-tf32"), scored every `every` steps."""
    from dataclasses import replace

    import torch

    from actors.learner import Learner
    from orchestra.data.demos import sft_batches, sft_lr
    from orchestra.policy.models import load_policy_from_config

    dev = "cuda" if device.startswith("cuda") else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = device == "cuda-tf32"
    torch.backends.cudnn.allow_tf32 = device == "cuda-tf32"
    model, tok = load_policy_from_config(replace(cfg.model, device=dev), seed=init)
    learner = Learner.from_config(replace(cfg, model=replace(cfg.model, device=dev)), model, tokenizer=tok)
    sc = replace(cfg.sft, steps=steps)
    figures: dict[str, float] = {}
    read = reading_prompts(cfg, tok, labels) if cfg.sft.restate_preference and cfg.agent.preference_numbers else []
    t0 = time.perf_counter()
    for i, batch in enumerate(sft_batches(samples, steps, sc.batch_size, init)):
        loss = learner.sft_update(batch, lr=sft_lr(sc, i, steps))["sft_loss"]
        if (i + 1) % every == 0 or i + 1 == steps:
            learner.model.eval()
            figures = score(learner.model, tok, labels, cfg.sampling.max_tokens, dev)
            if read:
                figures["reads"] = reading(learner.model, tok, read, dev)
            print(f"INFO sft_lab {device} init {init} step {i + 1}: loss {loss:.3f}, agreement "
                  + ", ".join(f"{p} {figures[p]:.2f}" for p in PRESETS) + f", contrast {figures['contrast']:.3f}"
                  + (f", sampled vectors {figures['sampled']:.2f}" if "sampled" in figures else "")
                  + (f", reads unseen weights {figures['reads']:.2f}" if read else "") + " "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
    return figures


def notes(run: Path, weights: list[float]) -> float:
    """The note the run's kept policy writes for each cost weight (latency 0), greedily on 16 held-out tasks; the share
    of notes that name the weight's own bin."""
    import json
    from collections import Counter

    import torch
    from transformers import AutoModelForCausalLM

    from orchestra.agent.prompt import Prompter, level
    from orchestra.config import load_config
    from orchestra.data.tasks import load_tasks
    from orchestra.policy.models import config_tokenizer
    from orchestra.rundir.checkpoint import latest_good

    cfg = load_config([f"experiment={run / 'config.yaml'}"])
    tok = config_tokenizer(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(str(latest_good(run) / "learner")).eval()
    prompter = Prompter(tok, **cfg.agent.prompter_kwargs())
    schemas = next(iter(json.loads((run / "episodes" / "schemas.json").read_text()).values()))
    tasks = load_tasks(run / "data" / "heldout.jsonl")[:16]
    right = total = 0
    for w in weights:
        seen: Counter = Counter()
        for t in tasks:
            t.pref = {"accuracy": 1.0, "cost": w, "latency": 0.0}
            ids = tok.encode(prompter.render(prompter.first_messages(t), schemas), add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False,
                                     pad_token_id=tok.pad_token_id or 0)
            seen[tok.decode(out[0, len(ids):]).split("</think>")[0] + "</think>"] += 1
        want = level(w, 1.0, cfg.agent.preference_levels)
        right += sum(k for note, k in seen.items() if cost_word(note) == want and note.endswith(" none</think>"))
        total += sum(seen.values())
        print(f"INFO sft_lab notes: cost {w:g} (bin: cost {want}, latency none): "
              + ", ".join(f"{k!r} x{v}" for k, v in seen.items()))
    return right / max(1, total)


def main(argv: list[str]) -> int:
    import torch

    from orchestra.config import load_config
    from orchestra.policy.models import config_tokenizer, set_torch_threads

    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in OWN)
    overrides = [a for a in argv if a.split("=", 1)[0] not in OWN]
    if "notes" in args:
        share = notes(Path(args["notes"]), [float(w) for w in args.get("weights", WEIGHTS).split(",")])
        print(f"RESULT sft_lab_notes_right={share:.4f}")
        return 0
    experiment = args.get("experiment", "cpu_tiny")
    run = Path(args.get("run", ROOT / "runs" / "sft_lab" / Path(experiment).stem)).resolve()
    steps, every, n_tasks = int(args.get("steps", 360)), int(args.get("every", 40)), int(args.get("tasks", 64))
    inits = [int(x) for x in args.get("inits", "0").split(",")]
    devices = args.get("devices", "cpu,cuda,cuda-tf32").split(",")
    path = demonstrations(run, experiment, overrides)
    if not (run / "config.yaml").is_file():
        raise SystemExit(f"{run}/config.yaml is missing: the demonstrations' run config is needed to read them")
    cfg = load_config([f"experiment={run / 'config.yaml'}"])  # the run's own config, as Serve adopts it
    set_torch_threads(cfg.cluster.torch_threads)
    samples = pickle.loads(path.read_bytes())
    tok = config_tokenizer(cfg.model)
    labels = first_calls(samples, cfg, tok, n_tasks, n_sampled=n_tasks)
    print(f"INFO sft_lab: {len(samples)} demonstrations from {path}; {len(labels)} first calls of "
          f"{len({t for t, _ in labels})} tasks scored (restated preference: {cfg.sft.restate_preference})")
    for device in devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"INFO sft_lab {device}: skipped (no CUDA device here)")
            continue
        for init in inits:
            figures = train_one(cfg, samples, labels, device, init, steps, every)
            tag = f"sft_lab_{device.replace('-', '_')}_i{init}"
            for p in PRESETS:
                print(f"RESULT {tag}_agree_{p.replace('-', '_')}={figures[p]:.4f}")
            print(f"RESULT {tag}_contrast={figures['contrast']:.4f}")
            if "sampled" in figures:
                print(f"RESULT {tag}_agree_sampled={figures['sampled']:.4f}")
            if "reads" in figures:
                print(f"RESULT {tag}_reads={figures['reads']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
