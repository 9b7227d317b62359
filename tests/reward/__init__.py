"""Tests of reward/."""
