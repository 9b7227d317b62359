"""The OpenAI-compatible Serve endpoint: its wire format (api.py) and the app and replica (app.py)."""
