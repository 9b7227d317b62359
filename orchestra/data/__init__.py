"""Tasks (floor 5 of the core, beside policy/ and eval/): task-set files and sources (tasks.py, sources.py),
benchmark loaders (loaders.py), SFT demonstrations played through the agent loop (demos.py), routing logs
(routing_log.py and its log_* helpers), synthesis (synth/)."""
