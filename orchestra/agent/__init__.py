"""The episode (floor 4 of the core): the agent loop (loop.py), what the policy sees (prompt.py, hints.py for the
router line, toolorchestra_format.py for Orchestrator-8B's layout), how its text is read (parse.py), consults and
the agreement rule (consults.py), budgets (budget.py), fixed routers played as engines (scripted.py) and the tool
calls those scripted plays share (call_cache.py). It reads config/ and engine/ below it; routing/ writes what
hints.py reads, never the other way."""
