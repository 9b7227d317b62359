"""Tools: plain classes (no Ray) that an orchestrator can call. See tools/base.py for the protocol."""
