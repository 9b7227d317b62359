"""Tests of orchestra/."""
