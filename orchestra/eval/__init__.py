"""Evaluation of policies and fixed routers over task sets (floor 5 of the core, beside policy/ and data/): episodes
run through the agent loop and scored by a scorer the caller passes in (runner.py; tools/ and reward/ are the
caller's, from cluster/), baselines, statistics, reports and plots, and the run's verdict (verdict.py). It imports
nothing of routing/, which stands above it and evaluates routers with it."""
