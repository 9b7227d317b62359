"""Tests of orchestra/data/."""
