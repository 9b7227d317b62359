"""`python -m tools.mcp [config overrides]`: print the MCP tools a config's servers offer."""

import sys

from tools.mcp.catalogue import main

main(sys.argv[1:])
