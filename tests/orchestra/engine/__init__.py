"""Tests of orchestra/engine/."""
