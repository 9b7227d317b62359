"""Tests of tools/retrieval/."""
