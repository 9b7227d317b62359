"""Tasks: task-set files and sources (tasks.py), benchmark loaders (loaders.py), synthesis (synth/)."""
