"""Tests of orchestra/config/."""
