"""Tests of actors/serve/."""
