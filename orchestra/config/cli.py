"""The one command-line grammar of the project's jobs: `key=value` items and a few `--flags`.

`python -m cluster.train`, `cluster.evaluate`, `cluster.serve`, `cluster.demo`, `cluster.synth`, `cluster.verl.job`
and `cluster.vllm_server` (and so every `make` target's ARGS) split their arguments here: keys an entry point owns
(`checkpoint=`, `n=`, `port=` ...) go to it, every other `key=value` is a config override for load_config (dotted
keys, group presets, `experiment=`), and anything else is an error naming the argument and what is accepted. The
data converters (`cluster.routing_log`, `tools.retrieval`) take file paths and `--flags` through argparse: they
read files, not experiment configs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from orchestra.config.schema import ConfigError


@dataclass
class Cli:
    own: dict[str, str] = field(default_factory=dict)  # the entry point's own keys
    overrides: list[str] = field(default_factory=list)  # config overrides, in order
    flags: set[str] = field(default_factory=set)


def parse_cli(argv: list[str], prog: str, *, own: Collection[str] = (), flags: Collection[str] = (),
              overrides: bool = True) -> Cli:
    """Split `argv`; ConfigError naming the bad argument (an unknown flag, an item that is not key=value, or, when
    the entry point takes no config overrides, a key it does not know)."""
    out = Cli()
    for item in argv:
        if item.startswith("--"):
            if item not in flags:
                known = ", ".join(sorted(flags)) or "none"
                raise ConfigError(f"{prog}: unknown flag {item!r} (flags: {known})")
            out.flags.add(item)
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{prog}: argument {item!r} is not key=value")
        if key in own:
            out.own[key] = value
        elif overrides:
            out.overrides.append(item)
        else:
            raise ConfigError(f"{prog}: unknown key {key!r} (keys: {', '.join(sorted(own))})")
    return out
