"""Routing by expected value (the core's top floor, 6: it plays episodes through orchestra/eval and reads data/,
agent/ and config/; nothing of the core imports it): plans (the routes a one- or two-call orchestrator can take),
exploration (every plan played on training tasks), the estimator router (per-plan P(correct), $ and seconds from
the task text; the route of highest expected reward under the request's preference, by orchestra/value.py), cascades
(adaptive plans), route hints (the estimates each task carries) and the expected-value teacher (its cross-fitted
choices as SFT demonstrations). Sentence embeddings come in through the caller (cluster/), not from tools/."""
