"""Tests of orchestra/data/synth/."""
