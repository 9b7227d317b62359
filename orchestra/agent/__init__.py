"""The episode: the agent loop (loop.py), what the policy sees (prompt.py) and how its text is read (parse.py)."""
