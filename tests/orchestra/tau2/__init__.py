"""Tests of orchestra/tau2/."""
