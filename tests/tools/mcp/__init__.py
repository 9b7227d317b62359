"""Tests of tools/mcp/."""
