"""What a run directory holds (floor 2 of the core: it reads only jsonl.py): checkpoints (checkpoint.py), metrics
(tracking.py), episode records (records.py)."""
