"""Tests of orchestra/eval/."""
