"""Tests of orchestra/rundir/."""
