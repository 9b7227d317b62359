"""Finding trained runs on disk: the newest run beside run_dir, and a run's (or checkpoint's) model directory.

`newest_run` is what `make eval` (cluster/evaluate.py) and `make serve` (cluster/serve.py) fall back on when no
checkpoint is named; `checkpoint_model_dir` turns a run dir, checkpoint dir or HF model dir into the directory a
model loads from, as a CLI error (SystemExit) when there is none. Which checkpoint is good is
orchestra/rundir/checkpoint.py's.
"""

from __future__ import annotations

from pathlib import Path


def newest_run(run_dir: str) -> tuple[Path, str | None] | None:
    """The run dir beside `run_dir` with the newest good checkpoint, and the experiment it was trained in
    (what `make eval` / `make serve` use when no checkpoint is named): its preset name when conf/ has that
    preset, else the run's own saved config.yaml (a preset given as a path outside conf/ has no name to look up)."""
    import yaml

    from orchestra.config.load import CONF_DIR
    from orchestra.rundir.checkpoint import latest_run

    run = latest_run(Path(run_dir).parent)
    if run is None:
        return None
    saved = run / "config.yaml"
    if not saved.is_file():
        return run, None
    name = (yaml.safe_load(saved.read_text()) or {}).get("name")
    return run, name if name and (CONF_DIR / "experiment" / f"{name}.yaml").is_file() else str(saved)


def checkpoint_model_dir(path: str) -> Path:
    """A run dir / checkpoint dir / HF model dir -> the model directory (orchestra.rundir.checkpoint.model_dir)."""
    from orchestra.rundir import checkpoint

    try:
        return checkpoint.model_dir(path)
    except ValueError as e:
        raise SystemExit(str(e)) from None
