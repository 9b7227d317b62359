"""Tests of orchestra/policy/."""
