"""Adaptive plans against one-shot routing on real recordings (issue 51): MMLU-Pro, six models, no episodes played.

Usage: python bench/cascades.py [seeds=2] [train=2000] [heldout=2000] [routers=true] [plot=PATH] [cache=NPZ]

The MMLU-Pro replay zoo's six models' recorded answers (conf/zoo/replay_mmlu_pro.yaml; the questions all six have
a record for: 12,002), split per seed into `train` questions to fit on and `heldout` to judge on (disjoint, drawn
by seed). On the held-out questions, each figure from the recorded answers alone (orchestra/routing/cascade.py
`evaluate`: a cascade's outcome is what its consulted experts were recorded answering):
  fixed        every model alone;
  hand         every hand cascade (orchestra/routing/cascade.py `hand_cascades`: each ordered cheap pair escalating to
               each other model on disagreement, each model escalating to each pricier one when it gives no answer);
  oracle       the cheapest model that was right, per question (an upper bound no router reaches);
  estimator    the one-shot estimator router (orchestra/routing/estimator.py; the one runs fit), fitted on `train`,
               under the three presets and a sweep of the cost weight (its accuracy-vs-$ curve);
  family       the per-subject router (the best model per MMLU-Pro category on `train`), the same sweep;
  cascade      the cascade router: the same estimator over the one-shot plans plus the hand cascades that lie on the
               training questions' accuracy-vs-$ frontier (<= 8), each fitted as a plan (its P(correct), $ and
               seconds per question), picking per question under the preset; a chosen cascade then runs its rule.
Printed per seed (INFO) and as means over seeds (RESULT): APGR on $ (every call's $, normalised between the cheapest
and the priciest model) and RouteLLM's APGR on the priciest model's share of calls, of each router's sweep; the best
hand cascade at accuracy-first and its $ as a
share of the priciest model's; per preset the cascade router's accuracy and $ and its gap to the best baseline
(every fixed model, every hand cascade, every point of the one-shot estimator's sweep) at no more than its $, with a
paired bootstrap 95 % interval over held-out questions (RESULT cascade_router_gap_<preset>, _ci_low; the per-subject
router's sweep counts among the baselines too); its escalation
rates (P(escalate | the first two answers disagree), P(escalate | they agree)) over the questions it ran a pair
cascade on. `plot=PATH` draws the first seed's frontier. `routers=false` skips the routers (no embedding: seconds).
Question embeddings are cached in `cache` (default runs/bench/mmlu_pro_embeddings.npz): the first run embeds them.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PRESETS = ("accuracy-first", "balanced", "cost-first")


def load() -> dict:
    """Tasks, per-tier answer codes, correctness, $ and seconds for every question all six models answered."""
    from orchestra.config import load_config, task_tiers
    from orchestra.data.loaders import load as load_tasks
    from orchestra.routing.cascade import answer_codes
    from tools.registry import build_experts

    cfg = load_config(["experiment=mmlu_pro_replay"])
    experts = build_experts(cfg.zoo)
    tiers = {t: e for t, e in sorted(task_tiers(cfg).items()) if t.startswith("answer")}
    recs = {t: experts[e].records() for t, e in tiers.items()}
    def qid(task) -> str:
        return str(task.meta.get("question_id", task.id))

    tasks = [t for t in load_tasks("mmlu_pro", "routing/mmlu_pro").tasks if all(qid(t) in r for r in recs.values())]
    got = [[recs[t][qid(task)] for t in tiers] for task in tasks]
    return {"cfg": cfg, "tasks": tasks, "tiers": list(tiers), "names": tiers,
            "codes": answer_codes([[x.pred for x in g] for g in got]),
            "correct": np.array([[float(x.correct) for x in g] for g in got]),
            "cost": np.array([[experts[tiers[t]].priced(x)[2] for t, x in zip(tiers, g, strict=True)] for g in got]),
            "latency": np.tile([float(cfg.zoo.experts[e].latency_s) for e in tiers.values()], (len(tasks), 1))}


def cached_embedder(path: Path):
    """The routers' question embedder (MiniLM at the runs' precision) through a file cache: embedding 12,002
    MMLU-Pro questions takes tens of minutes on 2 cores, and every split and rerun needs the same vectors."""
    from orchestra.config.schema import RouterConfig
    from tools.retrieval.dense import Embedder

    cache: dict[str, np.ndarray] = {}
    if path.is_file():
        with np.load(path) as z:
            cache = dict(zip(z["texts"].tolist(), z["vectors"], strict=True))
    model = None

    def embed(texts: list[str]) -> np.ndarray:
        nonlocal model
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        if todo:
            model = model or Embedder(dtype=RouterConfig().embed_dtype)
            print(f"INFO embedding {len(todo)} questions (cached in {path} for the next run)", flush=True)
            cache.update(zip(todo, model.encode(todo), strict=True))
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, texts=np.array(list(cache)), vectors=np.stack(list(cache.values())))
        return np.stack([cache[t] for t in texts])

    return embed


def frontier(d: dict, rows: np.ndarray, k: int = 8) -> list:
    """The hand cascades on the accuracy-vs-$ frontier of `rows` (orchestra/routing/cascade.py, as runs pick them),
    from one-shot outcomes whose answers are the recorded ones' agreement codes."""
    from orchestra.routing.cascade import frontier_cascades
    from orchestra.routing.plans import Outcome

    outs = [Outcome(d["tasks"][i].id, t, bool(d["correct"][i, j]), float(d["cost"][i, j]),
                    float(d["latency"][i, j]), 0, None if d["codes"][i, j] < 0 else str(d["codes"][i, j]))
            for i in rows for j, t in enumerate(d["tiers"])]
    return frontier_cascades(outs, k)


def outcomes_of(d: dict, rows: np.ndarray, plans: list) -> list:
    """Outcome rows of every plan (one-shot tiers and cascades) on `rows`, from the recorded arrays."""
    from orchestra.routing.cascade import evaluate, parse
    from orchestra.routing.plans import Outcome

    col = {t: j for j, t in enumerate(d["tiers"])}
    out = []
    for p in plans:
        if p.name in col:
            j = col[p.name]
            r = {"correct": d["correct"][rows, j], "cost": d["cost"][rows, j], "latency": d["latency"][rows, j]}
        else:
            r = evaluate(parse(p.name), col, d["codes"][rows], d["correct"][rows], d["cost"][rows],
                         d["latency"][rows])
        out += [Outcome(d["tasks"][i].id, p.name, bool(r["correct"][n]), float(r["cost"][n]),
                        float(r["latency"][n])) for n, i in enumerate(rows)]
    return out


def run_plan_choice(d: dict, rows: np.ndarray, plans: list, choice: np.ndarray) -> dict:
    """Per held-out question, what the chosen plan does (correct, $, escalated, agreed, whether a pair ran)."""
    from orchestra.routing.cascade import evaluate, parse

    col = {t: j for j, t in enumerate(d["tiers"])}
    n = len(rows)
    strong = d["tiers"][int(np.argmax(d["cost"][rows].mean(0)))]  # the priciest model: RouteLLM's "strong"
    res = {"correct": np.zeros(n), "cost": np.zeros(n), "escalated": np.zeros(n, bool), "agreed": np.zeros(n, bool),
           "pair": np.zeros(n, bool), "strong": np.zeros(n, bool)}
    for k, p in enumerate(plans):
        sel = choice == k
        if not sel.any():
            continue
        sub = rows[sel]
        if p.name in col:
            res["correct"][sel], res["cost"][sel] = d["correct"][sub, col[p.name]], d["cost"][sub, col[p.name]]
            res["strong"][sel] = p.name == strong
            continue
        c = parse(p.name)
        r = evaluate(c, col, d["codes"][sub], d["correct"][sub], d["cost"][sub], d["latency"][sub])
        for key in ("correct", "cost", "escalated", "agreed"):
            res[key][sel] = r[key]
        res["pair"][sel] = c.kind != "no_answer"
        res["strong"][sel] = (r["escalated"] & (c.final == strong)) | (strong in c.consult)
    return res


def apgrs(d: dict, rows: np.ndarray, sweep: list[dict]) -> tuple[float, float]:
    """(APGR on $, RouteLLM's APGR on the strong model's share of calls) of a router's sweep on `rows`
    (orchestra/eval/yardstick.py): the first counts every call's $, the second only whether the priciest model
    was called, which flatters cascades (their cheap calls cost nothing there)."""
    from orchestra.eval.yardstick import points_curve, usd_curve

    mean_cost, acc = d["cost"][rows].mean(0), d["correct"][rows].mean(0)
    s, c = int(np.argmax(mean_cost)), int(np.argmin(mean_cost))
    usd = usd_curve([(r["cost"].mean(), r["correct"].mean()) for r in sweep], (mean_cost[c], acc[c]),
                    (mean_cost[s], acc[s]))
    share = points_curve([(r["strong"].mean(), r["correct"].mean()) for r in sweep], acc[c], acc[s])
    return usd.apgr, share.apgr


def split(seed: int, n: int, train: int, heldout: int) -> tuple[np.ndarray, np.ndarray]:
    order = list(range(n))
    random.Random(f"cascades:{seed}").shuffle(order)
    return np.array(sorted(order[:train])), np.array(sorted(order[train:train + heldout]))


def one_split(d: dict, seed: int, train: int, heldout: int, routers: bool, embed) -> dict:
    from orchestra.eval.stats import paired_bootstrap_diff
    from orchestra.preferences import preset
    from orchestra.routing.cascade import as_plan, evaluate, hand_cascades
    from orchestra.routing.estimator import RouteEstimator, TaskFeatures, expected_reward
    from orchestra.routing.family import FamilyRouter
    from orchestra.routing.holdout import USD_SWEEP
    from orchestra.routing.plans import Plan

    tr, te = split(seed, len(d["tasks"]), train, heldout)
    col = {t: j for j, t in enumerate(d["tiers"])}
    mean_cost = d["cost"][tr].mean(0)
    hand = hand_cascades(d["tiers"], dict(zip(d["tiers"], mean_cost, strict=True)))
    base: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name -> per-question (correct, $) on the held-out rows
    for t, j in col.items():
        base[f"fixed:{d['names'][t]}"] = (d["correct"][te, j], d["cost"][te, j])
    for c in hand:
        r = evaluate(c, col, d["codes"][te], d["correct"][te], d["cost"][te], d["latency"][te])
        base[f"hand:{c.name}"] = (r["correct"], r["cost"])
    priciest = max(d["cost"][te].mean(0))
    best_hand = max((k for k in base if k.startswith("hand:")), key=lambda k: base[k][0].mean())
    out = {"best_hand": best_hand, "best_hand_acc": base[best_hand][0].mean(),
           "best_hand_cost_ratio": base[best_hand][1].mean() / priciest,
           "oracle_acc": d["correct"][te].max(1).mean(), "points": {}}
    for k, (a, u) in base.items():
        out["points"][k] = (u.mean(), a.mean())
    if not routers:
        return out
    cfg = d["cfg"]
    cs, ls = float(cfg.reward.cost_scale), float(cfg.reward.latency_scale)
    feats = TaskFeatures(embed, list(cfg.router.meta_keys)).fit_vocab([d["tasks"][i] for i in tr])
    X = feats([d["tasks"][i] for i in np.concatenate([tr, te])])
    Xtr, Xte = X[:len(tr)], X[len(tr):]
    ids = [d["tasks"][i].id for i in tr]
    single = [Plan(t, (("answer", t),)) for t in d["tiers"]]
    both = single + [as_plan(c) for c in frontier(d, tr)]
    fitted = {}
    for name, plans in (("estimator", single), ("cascade", both)):
        est = RouteEstimator(plans, seed=seed).fit(Xtr, ids, outcomes_of(d, tr, plans), feats.n_meta, feats.n_stats)
        fitted[name] = (est.expected(Xte), plans)
    fam = FamilyRouter(single).fit([d["tasks"][i] for i in tr], outcomes_of(d, tr, single))
    fitted["family"] = (fam.expected([d["tasks"][i] for i in te]), single)
    for name, (exp, plans) in fitted.items():  # each router's curve over the cost weight; all but ours are baselines
        sweep = [run_plan_choice(d, te, plans, expected_reward(exp, plans, {"accuracy": 1.0, "cost": w}, cs,
                                                               ls).argmax(1)) for w in USD_SWEEP]
        out[f"apgr_usd_{name}"], out[f"apgr_share_{name}"] = apgrs(d, te, sweep)
        for w, r in zip(USD_SWEEP, sweep, strict=True):
            if name != "cascade":
                base[f"{name}:cost={w:.3g}"] = (r["correct"], r["cost"])
            out["points"][f"{name}:cost={w:.3g}"] = (r["cost"].mean(), r["correct"].mean())
    for pname in PRESETS:
        for name, (exp, plans) in fitted.items():
            if name == "family":
                continue
            r = run_plan_choice(d, te, plans, expected_reward(exp, plans, preset(pname), cs, ls).argmax(1))
            out["points"][f"{name}:{pname}"] = (r["cost"].mean(), r["correct"].mean())
            if name != "cascade":
                continue
            cheap = [k for k, (_, u) in base.items() if u.mean() <= r["cost"].mean() + 1e-12]
            rival = max(cheap, key=lambda k: base[k][0].mean()) if cheap else None
            gap = (paired_bootstrap_diff(r["correct"], base[rival][0]) if rival else
                   {"diff": float("nan"), "lo": float("nan")})
            pair = r["pair"]
            dis, agr = pair & ~r["agreed"], pair & r["agreed"]
            out[pname] = {"acc": r["correct"].mean(), "cost_ratio": r["cost"].mean() / priciest, "rival": rival,
                          "gap": gap["diff"], "gap_lo": gap["lo"], "share_cascade": pair.mean(),
                          "esc_disagree": r["escalated"][dis].mean() if dis.any() else float("nan"),
                          "esc_agree": r["escalated"][agr].mean() if agr.any() else float("nan")}
    return out


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    styles = {"fixed": ("s", "tab:gray", "one model"), "hand": (".", "tab:blue", "hand cascade"),
              "family": ("x", "tab:green", "per-subject router (sweep)"),
              "estimator": ("+", "tab:orange", "one-shot estimator (presets, sweep)"),
              "cascade": ("*", "tab:red", "cascade router (presets, sweep)")}
    for kind, (marker, color, label) in styles.items():
        pts = [v for k, v in res["points"].items() if k.split(":")[0] == kind]
        ax.scatter([c * 100 for c, _ in pts], [a for _, a in pts], marker=marker, color=color, label=label,
                   s=90 if kind == "cascade" else 30, alpha=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("US cents per question (all calls)")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title("MMLU-Pro, six recorded models: one-shot routing vs cascades")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> None:
    args = dict(a.split("=", 1) for a in argv)
    seeds, train, heldout = int(args.get("seeds", 2)), int(args.get("train", 2000)), int(args.get("heldout", 2000))
    routers = args.get("routers", "true").lower() == "true"
    d = load()
    print(f"INFO cascades: {len(d['tasks'])} questions every model answered; tiers {d['names']}")
    embed = cached_embedder(Path(args.get("cache", ROOT / "runs" / "bench" / "mmlu_pro_embeddings.npz"))) if routers \
        else None
    runs = [one_split(d, s, train, heldout, routers, embed) for s in range(seeds)]
    for s, r in enumerate(runs):
        print(f"INFO seed {s}: best hand cascade {r['best_hand']} acc {r['best_hand_acc']:.4f} at "
              f"{r['best_hand_cost_ratio']:.3f} of the priciest model's $; oracle {r['oracle_acc']:.4f}")
        for k in sorted(r["points"]):
            if k.split(":")[0] in ("fixed", "estimator", "cascade") and "cost=" not in k:
                c, a = r["points"][k]
                print(f"INFO seed {s}: {k:36s} acc {a:.4f}  {c * 100:.5f} c")
        for p in PRESETS if routers else ():
            x = r[p]
            print(f"INFO seed {s}: cascade router {p}: acc {x['acc']:.4f} at {x['cost_ratio']:.3f} of the priciest $; "
                  f"vs {x['rival']}: {x['gap']:+.4f} [{x['gap_lo']:+.4f}, ...]; cascades on {x['share_cascade']:.2f}; "
                  f"P(esc|disagree) {x['esc_disagree']:.3f}, P(esc|agree) {x['esc_agree']:.3f}")
    if "plot" in args:
        plot(runs[0], args["plot"])
        print(f"INFO frontier plot: {args['plot']}")

    def mean(f) -> float:
        return float(np.nanmean([f(r) for r in runs]))

    print(f"RESULT cascade_best_hand_acc={mean(lambda r: r['best_hand_acc']):.4f}")
    print(f"RESULT cascade_best_hand_cost_ratio={mean(lambda r: r['best_hand_cost_ratio']):.4f}")
    print(f"RESULT cascade_oracle_acc={mean(lambda r: r['oracle_acc']):.4f}")
    if routers:
        def at(preset: str, key: str) -> float:
            return float(np.nanmean([r[preset][key] for r in runs]))

        for p in PRESETS:
            key = p.replace("-", "_")
            print(f"RESULT cascade_router_acc_{key}={at(p, 'acc'):.4f}")
            print(f"RESULT cascade_router_cost_ratio_{key}={at(p, 'cost_ratio'):.4f}")
            print(f"RESULT cascade_router_gap_{key}={at(p, 'gap'):.4f}")
            print(f"RESULT cascade_router_gap_{key}_ci_low={min(r[p]['gap_lo'] for r in runs):.4f}")
            print(f"RESULT cascade_router_escalation_disagree_{key}={at(p, 'esc_disagree'):.3f}")
            print(f"RESULT cascade_router_escalation_agree_{key}={at(p, 'esc_agree'):.3f}")
        print(f"RESULT cascade_router_gap_min={min(at(p, 'gap') for p in PRESETS):.4f}")
        for name in ("cascade", "estimator", "family"):
            for kind in ("usd", "share"):
                print(f"RESULT apgr_{kind}_{name}={float(np.mean([r[f'apgr_{kind}_{name}'] for r in runs])):.4f}")

if __name__ == "__main__":
    main(sys.argv[1:])
