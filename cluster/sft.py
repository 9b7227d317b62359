"""`python -m cluster.sft [key=value ...]`: the SFT warm start alone — the training driver with `algo.steps=0`:
it warm-starts the policy on random-choice demonstrations (orchestra/data/demos.py), evaluates on the held-out
split and writes a checkpoint.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from cluster.train import main as train_main

    argv = list(sys.argv[1:] if argv is None else argv)
    return train_main([*argv, "algo.steps=0"])


if __name__ == "__main__":
    sys.exit(main())
