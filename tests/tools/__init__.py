"""Tests of tools/."""
