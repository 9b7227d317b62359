"""Evaluation of policies and fixed routers over task sets (an integration: it may use tools/ and reward/)."""
