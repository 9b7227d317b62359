"""What a run directory holds: checkpoints (checkpoint.py), metrics (tracking.py), episode records (records.py)."""
