"""Routing by expected value (an integration: it plays episodes through orchestra/eval and embeds with tools/):
plans (the routes a one- or two-call orchestrator can take), exploration (every plan played on training
tasks), the estimator router (per-plan P(correct), $ and seconds from the task text; the route of highest
expected reward under the request's preference) and the expected-value teacher (its cross-fitted choices as
SFT demonstrations)."""
