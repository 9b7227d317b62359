"""Orchestra's core: config, contracts, tasks, prompt, parser, agent loop, engines and models.

Importing it pulls in neither Ray nor an LLM SDK; heavy modules import lazily.
"""

__version__ = "0.1.0"
