"""τ² domains by path (tools/tau2/domain_files.py) and the gold-replay command (cluster/tau2_gold.py): the
shipped example domain (examples/tau2/library: made up, with its own tools.py) replays 4/4 and trains from its own
split; a directory named after a shipped domain borrows what it lacks; dual-control tasks are refused for episodes
but replayed by the command; τ²'s own gold-action warnings are counted, not printed; bad domains are one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestra.config import ConfigError, load_config

LIBRARY = Path(__file__).resolve().parents[3] / "examples" / "tau2" / "library"


def _gold(capsys, *args: str) -> tuple[int, str, str]:
    from cluster.tau2_gold import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_example_domain_replays_every_gold_action_from_its_directory(capsys):
    rc, out, err = _gold(capsys, LIBRARY)
    assert rc == 0, out + err
    assert f"tools {LIBRARY / 'tools.py'}" in out
    assert "library: gold actions pass 4/4 tasks" in out and "without each task's last write, 3/3 score 0" in out


def test_a_domain_directory_trains_from_its_own_split(tmp_path):
    import tools.tau2.wiring  # noqa: F401 - registers the tau2: source
    from orchestra.data.sources import build_task_set
    from tools.tau2.domain import tau2_task_of

    cfg = load_config(["experiment=tau2_mock", f"data.source=tau2:{LIBRARY}", "data.splits=train,test",
                       "data.n_train=5", "data.n_heldout=5"])
    train, held, corpus = build_task_set(cfg.data, cfg.zoo.tiers)
    assert [t.meta["tau2_task_id"] for t in train] == ["0", "1"]
    assert [t.meta["tau2_task_id"] for t in held] == ["2", "3"]
    assert {t.data_source for t in train + held} == {"tau2/library"} and corpus == []
    assert held[0].meta["tau2_domain"] == str(LIBRARY) and held[0].model_mapping == cfg.zoo.tiers
    assert tau2_task_of(held[1]).evaluation_criteria.communicate_info == ["0"]
    with pytest.raises(ValueError, match="data.splits='train,test': the source 'template' has no named splits"):
        build_task_set(load_config(["data.splits=train,test"]).data)
    with pytest.raises(ValueError, match="no split 'dev'"):
        build_task_set(load_config(["experiment=tau2_mock", f"data.source=tau2:{LIBRARY}",
                                    "data.splits=train,dev"]).data)
    with pytest.raises(ConfigError, match="data.splits"):
        load_config(["data.splits=train"])


def test_the_shipped_presets_use_each_domains_own_split():
    import tools.tau2.wiring  # noqa: F401
    from orchestra.data.sources import build_task_set

    for name, sizes in (("tau2_retail", (74, 40)), ("tau2_airline", (30, 20)), ("tau2_mock", (6, 3))):
        cfg = load_config([f"experiment={name}"])
        train, held, _ = build_task_set(cfg.data, cfg.zoo.tiers)
        assert (len(train), len(held)) == sizes and not {t.id for t in train} & {t.id for t in held}, name


def test_a_directory_named_after_a_shipped_domain_borrows_what_it_lacks(tmp_path, mock_domain):
    """mock/ with only its own db.json and policy.md: τ²'s mock tools and tasks, our DB and policy."""
    from tools.tau2.domain import get_domain

    d = tmp_path / "mock"
    d.mkdir()
    db = {"tasks": {}, "users": {"user_9": {"user_id": "user_9", "name": "Nine", "tasks": []}}}
    (d / "db.json").write_text(json.dumps(db))
    (d / "policy.md").write_text("# Our own mock policy\n")
    domain = get_domain(str(d))
    assert domain.name == "mock" and domain.files.tools is None and domain.files.db == d / "db.json"
    assert domain.policy == "# Our own mock policy\n" and set(domain.new_env().tools.db.users) == {"user_9"}
    assert domain.tool_schemas.keys() == mock_domain.tool_schemas.keys()
    assert [t.id for t in domain.tasks()] == [t.id for t in mock_domain.tasks()]
    assert get_domain(str(d)) is domain  # one build per process, whatever path spelling


def test_dual_control_tasks_are_refused_for_episodes_and_replayed_by_the_command(capsys):
    from tools.tau2.domain import domain_tasks

    with pytest.raises(ValueError, match=r"telecom: (\d+) of \1 tasks .* need user-side tools"):
        domain_tasks("telecom")
    rc, out, _ = _gold(capsys, "telecom", "--limit", "3")  # user actions go to the user's own tools
    assert rc == 0 and "telecom: gold actions pass 3/3 tasks" in out


def test_tau2_gold_action_warnings_are_counted_not_printed(tmp_path, capsys):
    """A gold action that fails by design (lending a book with no copy) makes τ²'s evaluator log a warning on
    every scoring; the command prints one count instead."""
    d = tmp_path / "library"
    shutil.copytree(LIBRARY, d)
    tasks = json.loads((d / "tasks.json").read_text())
    tasks[2]["evaluation_criteria"]["actions"].append(
        {"action_id": "2_2", "name": "borrow_book", "arguments": {"member_id": "m2", "book_id": "b2"}})
    (d / "tasks.json").write_text(json.dumps(tasks))
    rc, out, err = _gold(capsys, d)
    assert rc == 0 and "gold actions pass 4/4" in out
    assert "Error in golden actions" not in out + err and "τ² logged 2 warnings on 1 tasks" in out


BAD_DOMAINS = {  # file -> (new content or None to delete, what the one line must say)
    "tools.py": (None, "no tools.py"),
    "tasks.json": ('[{"id": "0",\n', "tasks.json: line 2: malformed JSON"),
    "db.json": ('{"books": {}, "members": {}, "loans": {"l": {"loan_id": "l"}}}',
                "db.json: not a valid LibraryDB: field loans.l.member_id"),
    "policy.md": (None, "no policy.md"),
}


@pytest.mark.parametrize("name", list(BAD_DOMAINS))
def test_a_broken_domain_directory_is_one_line_naming_file_and_field(tmp_path, capsys, name):
    d = tmp_path / "shop"
    shutil.copytree(LIBRARY, d)
    content, needle = BAD_DOMAINS[name]
    if content is None:
        (d / name).unlink()
    else:
        (d / name).write_text(content)
    rc, out, err = _gold(capsys, d)
    assert rc == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_a_task_with_a_bad_field_names_the_task_and_field(tmp_path, capsys):
    d = tmp_path / "shop"
    shutil.copytree(LIBRARY, d)
    tasks = json.loads((d / "tasks.json").read_text())
    tasks[1]["evaluation_criteria"]["actions"][0]["arguments"] = "not a dict"
    (d / "tasks.json").write_text(json.dumps(tasks))
    rc, _, err = _gold(capsys, d)
    assert rc == 2 and "tasks.json: task 2 (id '1'): field evaluation_criteria.actions.0.arguments" in err
    rc, _, err = _gold(capsys, tmp_path / "nowhere")
    assert rc == 2 and "neither a shipped domain" in err
