"""`python -m tools.mcp [config overrides]`: print the MCP tools a config's servers offer, to name in zoo.tools
(skipped tools are logged with the reason)."""

from __future__ import annotations

import logging
import sys

from orchestra.config import load_config
from tools.mcp.catalogue import MCPCatalogue


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    for name in MCPCatalogue(load_config(argv).zoo.mcp_servers).names():
        print(name)


if __name__ == "__main__":
    main(sys.argv[1:])
