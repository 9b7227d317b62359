"""Tests of actors/verl_plugins/."""
