"""Tests of actors/."""
