"""Our pieces inside verl's trainer: the agent loop (agent_loop.py) and the reward function (reward.py)."""
