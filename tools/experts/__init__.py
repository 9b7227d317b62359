"""LLMs as tools: the Expert protocol and its priced base (base.py), simulated (sim.py) and replayed (replay.py) experts."""
