"""Template synthesis of the QA families (orchestra/data/synth/template.py) and task-set I/O (orchestra/data/tasks.py)."""

import ast
import contextlib
import io
import json
from types import SimpleNamespace

import pytest

from orchestra.data.sources import build_task_set
from orchestra.data.synth.template import FAMILIES, generate_tasks, split_of
from orchestra.data.tasks import load_tasks, save_tasks, save_verl_parquet, task_from_verl_row, to_verl_rows
from orchestra.types import Task

TIERS = {"answer-1": "gpt-5", "answer-2": "qwen3-32b", "search-1": "gpt-5-mini"}


@pytest.fixture(scope="module")
def train():
    return generate_tasks(120, seed=3, mapping=TIERS)


@pytest.fixture(scope="module")
def heldout():
    return generate_tasks(40, seed=3, split="heldout", mapping=TIERS)


def _run(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # our own generated snippets, not user input
    return out.getvalue().strip()


def test_deterministic_by_seed(train):
    again = generate_tasks(120, seed=3, mapping=TIERS)
    assert [t.to_dict() for t in again.tasks] == [t.to_dict() for t in train.tasks]
    assert again.corpus == train.corpus
    other = generate_tasks(120, seed=4, mapping=TIERS)
    assert [t.problem for t in other.tasks] != [t.problem for t in train.tasks]


def test_fields_and_families(train):
    ids = [t.id for t in train.tasks]
    assert len(set(ids)) == len(ids) == 120
    assert {t.meta["family"] for t in train.tasks} == set(FAMILIES)
    for t in train.tasks:
        fam = t.meta["family"]
        assert t.data_source == f"synthetic/{fam}" and t.category == "qa"
        assert t.meta["difficulty"] in (1, 2, 3)
        assert t.tools == ["search", "enhance_reasoning", "answer", "consult", "submit"]
        assert t.model_mapping == TIERS
        assert 0 < len(t.problem) < 200 and t.answer
        assert t.meta["distractors"] and t.answer not in t.meta["distractors"]
        assert t.pref["accuracy"] > 0
    assert len({str(t.pref) for t in train.tasks}) > 30  # sampled per task


def test_code_snippets_print_the_answer(train):
    coded = [t for t in train.tasks if t.meta["family"] in ("arith", "code")]
    assert len(coded) == 60
    for t in coded:
        assert _run(t.meta["code"]) == t.answer, t.problem


def test_lookup_answers_sit_in_gold_passages(train):
    corpus = {p["id"]: p for p in train.corpus}
    lookups = [t for t in train.tasks if t.meta["family"] == "lookup"]
    for t in lookups:
        docs = [corpus[d]["text"] for d in t.meta["doc_ids"]]
        assert len(docs) == t.meta["difficulty"]  # one passage per hop
        assert any(t.answer in d for d in docs), t.problem


def test_surface_forms_distinguish_families(train):
    from tools.calculator import arithmetic_in

    def guess(problem: str) -> str:
        if problem.startswith("Puzzle:"):
            return "reasoning"
        if problem.startswith("Code:"):
            return "code"
        return "arith" if " boxes of " in problem or arithmetic_in(problem) else "lookup"
    assert all(guess(t.problem) == t.meta["family"] for t in train.tasks)


def test_bare_expressions_are_asked_many_ways_and_the_calculator_agrees():
    """Half the arith problems are bare expressions in EXPR_FORMS' phrasings (issue 48: a policy that only saw word
    problems sent "What is 17 * 23?" to search); each is one the calculator reads, with the gold as its value, and
    difficulty is the number of operations."""
    from orchestra.data.synth.families import EXPR_FORMS
    from tools.calculator import arithmetic_in, evaluate

    tasks = generate_tasks(400, seed=0, families=["arith"], mapping=TIERS).tasks
    exprs = [t for t in tasks if t.meta["kind"].startswith("expr")]
    assert 0.4 < len(exprs) / len(tasks) < 0.6
    forms = set()
    for t in exprs:
        expression = arithmetic_in(t.problem)
        assert expression is not None, t.problem
        assert evaluate(expression)[0] == t.answer and _run(t.meta["code"]) == t.answer, t.problem
        ops = sum(isinstance(node, ast.BinOp) for node in ast.walk(ast.parse(expression, mode="eval")))
        assert ops == t.meta["difficulty"] == int(t.meta["kind"][-1]), t.problem
        forms.add(next(f for f in EXPR_FORMS if _matches(f, t.problem, expression)))
    assert len(forms) >= len(EXPR_FORMS) - 2  # nearly every phrasing drawn in 200 problems
    assert not any(arithmetic_in(t.problem) for t in tasks if t not in exprs)  # word problems stay word problems


def _matches(form: str, problem: str, expression: str) -> bool:
    """Whether `problem` is `form` around the expression (as the calculator read it: spaces kept, × as *)."""
    return form.format(e=expression) == problem.replace("×", "*")


def test_heldout_disjoint(train, heldout):
    assert not {t.problem for t in train.tasks} & {t.problem for t in heldout.tasks}
    assert not {t.id for t in train.tasks} & {t.id for t in heldout.tasks}
    assert all(split_of(t.problem) == "heldout" for t in heldout.tasks)
    assert heldout.corpus == train.corpus  # one world per seed


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown task families"):
        generate_tasks(2, 0, families=["poetry"], mapping=TIERS)
    with pytest.raises(ValueError, match="split"):
        generate_tasks(2, 0, split="test", mapping=TIERS)


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_save_load_roundtrip(train, tmp_path, ext):
    path = save_tasks(train.tasks, tmp_path / f"tasks.{ext}")
    assert [t.to_dict() for t in load_tasks(path)] == [t.to_dict() for t in train.tasks]


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match=".jsonl or .parquet"):
        load_tasks(tmp_path / "x.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "p", "answer": "1"}\n{not json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_tasks(bad)


def test_verl_rows(train, tmp_path):
    rows = to_verl_rows(train.tasks[:5], agent_name="orchestra")
    r = rows[1]
    assert r["prompt"][0]["content"] == train.tasks[1].problem
    assert r["reward_model"]["ground_truth"] == train.tasks[1].answer
    assert r["extra_info"]["pref"] == train.tasks[1].pref and r["agent_name"] == "orchestra"
    assert set(r["extra_info"]["tools_kwargs"]) == set(train.tasks[1].tools)
    assert task_from_verl_row(r).to_dict() == train.tasks[1].to_dict()
    import pyarrow.parquet as pq
    path = save_verl_parquet(train.tasks[:5], tmp_path / "verl.parquet")
    back = pq.read_table(path).to_pylist()
    assert [task_from_verl_row(b).to_dict() for b in back] == [t.to_dict() for t in train.tasks[:5]]


def test_build_task_set_sources(train, tmp_path):
    cfg = SimpleNamespace(source="template", n_train=16, n_heldout=8, families=["arith", "lookup"], seed=1)
    tr, he, corpus = build_task_set(cfg, TIERS)
    assert len(tr) == 16 and len(he) == 8 and corpus
    assert {t.meta["family"] for t in tr} == {"arith", "lookup"}
    path = save_tasks(train.tasks, tmp_path / "set.jsonl")
    cfg = SimpleNamespace(source=str(path), n_train=50, n_heldout=20, families=[], seed=0)
    tr, he, _ = build_task_set(cfg, TIERS)
    assert len(tr) == 50 and len(he) == 20 and not {t.id for t in tr} & {t.id for t in he}


def test_data_preference_fixes_training_vectors_only(train, tmp_path):
    """data.preference=<preset>: every training task carries it; held-out tasks keep their own vectors."""
    from orchestra.preferences import preset

    base = dict(source="template", n_train=16, n_heldout=8, families=[], seed=1)
    sampled_tr, sampled_he, _ = build_task_set(SimpleNamespace(**base, preference="sampled"), TIERS)
    assert len({json.dumps(t.pref, sort_keys=True) for t in sampled_tr}) > 1  # drawn per task
    tr, he, _ = build_task_set(SimpleNamespace(**base, preference="cost-first"), TIERS)
    assert all(t.pref == preset("cost-first") for t in tr)
    assert [t.pref for t in he] == [t.pref for t in sampled_he]
    path = save_tasks(train.tasks, tmp_path / "set.jsonl")
    tr, _, _ = build_task_set(SimpleNamespace(source=str(path), n_train=10, n_heldout=5, families=[], seed=0,
                                              preference="accuracy=1,cost=0.25"), TIERS)
    assert all(t.pref == {"accuracy": 1.0, "cost": 0.25} for t in tr)
    bare = [Task.from_dict({**t.to_dict(), "pref": {}}) for t in train.tasks]  # as benchmark loaders leave them
    path = save_tasks(bare, tmp_path / "bare.jsonl")
    cfg = SimpleNamespace(source=str(path), n_train=10, n_heldout=5, families=[], seed=0, preference="sampled")
    tr, _, _ = build_task_set(cfg, TIERS)
    again, _, _ = build_task_set(cfg, TIERS)
    assert all(t.pref.get("accuracy", 0) > 0 for t in tr) and [t.pref for t in tr] == [t.pref for t in again]


def test_data_preference_mixture_draws_one_listed_vector_per_task():
    """data.preference=A|B|C: each training task carries one of the listed vectors, stable across builds,
    and on 40 tasks every one of the three appears."""
    from orchestra.preferences import preset

    names = ("accuracy-first", "balanced", "cost-first")
    cfg = SimpleNamespace(source="template", n_train=40, n_heldout=4, families=[], seed=3, preference="|".join(names))
    tr, _, _ = build_task_set(cfg, TIERS)
    again, _, _ = build_task_set(cfg, TIERS)
    drawn = [next(n for n in names if t.pref == preset(n)) for t in tr]  # StopIteration: a vector not listed
    assert set(drawn) == set(names)
    assert [t.pref for t in tr] == [t.pref for t in again]
