"""Loading a configuration: conf/*.yaml and CLI dotlists merged onto the typed schema (orchestra/config/schema.py).

Composition (a small Hydra-like scheme on OmegaConf structured configs):
  1. start from the dataclass defaults;
  2. `conf/experiment/<name>.yaml` names its group presets in `defaults:` (model, zoo, reward, backend);
     each group file `conf/<group>/<preset>.yaml` is merged into its section (backend files at top level);
     `defaults: {experiment: <other>}` builds on another experiment: its groups and keys first;
  3. the experiment file's own keys are merged (a base experiment's first);
  4. CLI `key=value` dotlists are merged last; `model=smollm2` (a bare preset name for a group) swaps that
     group's file in before step 3.
A preset may also be a path to a YAML file anywhere (`experiment=runs/data/mylog/experiment.yaml`,
`zoo=/data/zoo.yaml`): a value ending in `.yaml` / `.yml` is a file, read relative to the working directory on
the command line and relative to the experiment file's own directory in its `defaults:`. So a preset made
outside the checkout (cluster/routing_log.py writes one) composes like the shipped ones, and needs no other
preset's files.
Any unknown key or wrong type raises ConfigError naming the key and the file (or "command line"); range checks
that need several fields (group size 1, zero tasks) run last (orchestra/config/checks.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestra.config.checks import validate
from orchestra.config.schema import ConfigError, ExperimentConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "zoo", "reward", "backend")


def _merge(base: DictConfig, other: Any, source: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"{source}: bad key {key!r}: {getattr(e, 'msg', str(e)).splitlines()[0]}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # YAML syntax errors
        raise ConfigError(f"{path}: cannot parse YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def is_preset_path(value: str) -> bool:
    """A preset given as a file (`.yaml` / `.yml`) rather than a name under conf/<group>/."""
    return value.endswith((".yaml", ".yml"))


def _group_file(group: str, preset: str, conf_dir: Path, base: Path | None = None) -> Path:
    """conf/<group>/<preset>.yaml, or the file `preset` names (relative to `base`, default the cwd)."""
    if is_preset_path(preset):
        path = Path(preset).expanduser()
        path = path if path.is_absolute() else (base or Path.cwd()) / path
        if not path.is_file():
            raise ConfigError(f"{group}={preset}: no such file ({path})")
        return path.resolve()
    path = conf_dir / group / f"{preset}.yaml"
    if not path.is_file():
        choices = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
        raise ConfigError(f"{group}={preset}: no such preset; choose one of {choices}")
    return path


def _experiment_layers(experiment: str, conf_dir: Path, base: Path | None = None,
                       seen: tuple[Path, ...] = ()) -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(file, keys, group presets) of an experiment and of the experiment it builds on, base first. An experiment
    may name another in its `defaults:` (`experiment: verl_cpu_tiny`): that one's groups and keys come first, its
    own on top (a preset that varies one thing says only that thing)."""
    path = _group_file("experiment", experiment, conf_dir, base)
    if path in seen:
        raise ConfigError(f"{path}: 'defaults.experiment' builds on itself ({' -> '.join(str(p) for p in seen)})")
    body = _read_yaml(path)
    # a preset's runs under its own name: else runs/cpu_tiny would collect every path preset's runs, and a preset
    # built on another would write into that one's run dir
    body.setdefault("name", path.stem)
    defaults = body.pop("defaults", {}) or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{path}: 'defaults' must be a mapping of group -> preset")
    for group in defaults:
        if group not in (*GROUPS, "experiment"):
            raise ConfigError(f"{path}: bad key 'defaults.{group}': groups are {GROUPS} (and experiment)")
    parent = defaults.pop("experiment", None)
    # a group path in a file's `defaults:` is relative to that file
    defaults = {g: str((path.parent / v).resolve()) if is_preset_path(str(v)) and not Path(str(v)).is_absolute()
                else v for g, v in defaults.items()}
    below = _experiment_layers(str(parent), conf_dir, path.parent, (*seen, path)) if parent else []
    return [*below, (path, body, defaults)]


def load_config(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> ExperimentConfig:
    """Compose an ExperimentConfig from conf/ and `key=value` overrides (see module docstring)."""
    overrides = list(overrides or [])
    experiment = "cpu_tiny"
    chosen: dict[str, str] = {}
    dotlist: list[str] = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"command line: override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        if key == "experiment":
            experiment = value
        elif key in GROUPS and (is_preset_path(value) or ("." not in value and not value.startswith("{"))):
            chosen[key] = value
        else:
            dotlist.append(item)

    layers = _experiment_layers(experiment, conf_dir)
    exp_path = layers[-1][0]
    defaults: dict[str, Any] = {}
    for _, _, layer_defaults in layers:
        defaults.update(layer_defaults)
    defaults = {**defaults, **chosen}

    cfg = OmegaConf.structured(ExperimentConfig)
    for group in GROUPS:
        if group not in defaults:
            continue
        # a path in the file's own `defaults:` is relative to that file; one from the command line to the cwd
        base = exp_path.parent if group not in chosen else None
        path = _group_file(group, str(defaults[group]), conf_dir, base)
        data = _read_yaml(path)
        cfg = _merge(cfg, data if group == "backend" else {group: data}, str(path))
    for path, body, _ in layers:  # the base experiment first, its own keys then this one's
        cfg = _merge(cfg, body, str(path))
    if dotlist:
        try:
            cli = OmegaConf.from_dotlist(dotlist)
        except Exception as e:
            raise ConfigError(f"command line: cannot parse overrides {dotlist}: {e}") from None
        cfg = _merge(cfg, cli, "command line")
    try:
        obj: ExperimentConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise ConfigError(f"{exp_path}: {e}") from None
    if not obj.run_dir:
        obj.run_dir = f"runs/{obj.name}"
    validate(obj)
    return obj


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two plain config trees (dicts / lists / scalars)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [k for key in sorted(set(old) | set(new), key=str)
                for k in changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")]
    return [] if old == new else [prefix.rstrip(".") or "<root>"]


def save_config(run_dir: str | Path, cfg: ExperimentConfig) -> str | None:
    """Write `<run_dir>/config.yaml` (atomically). A resumed run started with a different config keeps the saved
    one as `config.<k>.yaml` (k = 1, 2, ... the first free) instead of losing what the first steps were trained
    under; returns a message naming the changed keys, None when nothing changed."""
    path = Path(run_dir) / "config.yaml"
    text, note = to_yaml(cfg), None
    if path.is_file() and (old := path.read_text()) != text:
        keys = changed_keys(OmegaConf.to_container(OmegaConf.create(old)),
                            OmegaConf.to_container(OmegaConf.create(text)))
        k = next(i for i in range(1, 10_000) if not (path.parent / f"config.{i}.yaml").exists())
        path.replace(path.parent / f"config.{k}.yaml")
        shown = ", ".join(keys[:12]) + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")
        note = (f"this run resumes under a config that differs from its saved one in {shown or 'formatting'}: "
                f"the saved one is kept as {path.parent / f'config.{k}.yaml'}")
    tmp = path.with_name("config.yaml.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return note
