"""The one CLI grammar (orchestra/config/cli.py): own keys, config overrides, flags, and errors naming the item."""

from __future__ import annotations

import pytest

from orchestra.config import ConfigError
from orchestra.config.cli import parse_cli


def test_own_keys_overrides_and_flags_are_split_in_order():
    cli = parse_cli(["n=8", "algo.lr=1e-4", "--print-config", "model=smollm2", "checkpoint=runs/x=y"], "prog",
                    own=("n", "checkpoint"), flags=("--print-config",))
    assert cli.own == {"n": "8", "checkpoint": "runs/x=y"}  # a value may hold '='
    assert cli.overrides == ["algo.lr=1e-4", "model=smollm2"] and cli.flags == {"--print-config"}


@pytest.mark.parametrize(("argv", "message"), [
    (["--bogus"], "prog: unknown flag '--bogus' (flags: --dry-run)"),
    (["algo"], "prog: argument 'algo' is not key=value"),
    (["=1"], "prog: argument '=1' is not key=value"),
])
def test_bad_items_name_themselves(argv, message):
    with pytest.raises(ConfigError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        parse_cli(argv, "prog", flags=("--dry-run",))


def test_an_entry_point_without_overrides_refuses_unknown_keys():
    with pytest.raises(ConfigError, match="unknown key 'url2' \\(keys: presets, url\\)"):
        parse_cli(["url2=x"], "demo", own=("url", "presets"), overrides=False)
