"""Tests of tools/tau2/."""
