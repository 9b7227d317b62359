"""Tests of orchestra/agent/."""
