"""MCP servers' tools as ordinary tools: the catalogue (catalogue.py) over one connection per server (client.py)."""
