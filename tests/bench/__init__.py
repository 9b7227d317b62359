"""Tests of bench/ scripts that other checks rely on."""
