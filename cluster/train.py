"""Training driver: `python -m cluster.train [experiment=NAME] [key=value ...] [--print-config]`.

Reads the composed config (orchestra/config.py), then runs the backend's training job. `--print-config`
prints the resolved config and exits, touching no cluster.
"""

from __future__ import annotations

import sys

from orchestra.config import ConfigError, load_config, to_yaml


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print_only = "--print-config" in argv
    overrides = [a for a in argv if a != "--print-config"]
    try:
        cfg = load_config(overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if print_only:
        print(to_yaml(cfg))
        return 0
    raise SystemExit("the training driver lands with the [train] issue")


if __name__ == "__main__":
    sys.exit(main())
