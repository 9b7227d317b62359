"""τ²-bench as orchestration tasks (issue 9): domains and tasks (domain), per-episode environments and tools
(adapter), call_expert, the user simulator (user), the three-party episode driver (episode), the official
evaluator as reward (reward) and the evaluation hook (evaluation). Needs the optional `tau2` extra; nothing
here is imported by `import orchestra`, and tau2 itself is imported lazily.
"""
