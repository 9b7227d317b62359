"""Tests of tools/experts/."""
