"""The tools a served request is offered: the zoo's catalogue less the tools that cannot work where the server runs.

A policy trained on lookup tasks learned to `search`, but in training its search ran on the task set's own corpus;
a served question has none, so `search` falls back to web search (tools/registry.Build.search_backend), and with
no API key every such call is an error the policy pays a turn for. So the production service (OrchestraServer's
default builder, actors/serve/wiring.py) offers:
- `search` when it has a backend that works here: a served corpus (`zoo.retriever.corpus`: the retriever) or the
  web search key (the env var `zoo.web_search.api_key_env`, TAVILY_API_KEY by default);
- `web_search` only with that key; `retrieve` only with a corpus or a built index (`zoo.retriever.index_dir`);
- every other tool as configured.
What is left out, and why, is logged once when the replica starts. Building and calling the tools stays with
tools/registry.py; a builder injected by tests or benchmarks keeps the catalogue it chose.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("orchestra.serve")


def left_out(zoo: Any, names: list[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """{tool name: why it cannot work here} for the tools of `names` that need what this host lacks."""
    env = os.environ if env is None else env
    key_env = zoo.web_search.api_key_env
    has_key = bool(env.get(key_env, "").strip())
    corpus = bool(zoo.retriever.corpus)
    no_key = f"${key_env} is not set"
    why: dict[str, str] = {}
    for name in names:
        if name == "search" and not (corpus or has_key):
            why[name] = (f"with no served corpus (zoo.retriever.corpus) it searches the web, and {no_key}; "
                         f"set {key_env}, or serve a corpus with zoo.retriever.corpus=PATH")
        elif name == "web_search" and not has_key:
            why[name] = f"{no_key}; set it to offer web search"
        elif name == "retrieve" and not (corpus or zoo.retriever.index_dir):
            why[name] = "no corpus to retrieve from; serve one with zoo.retriever.corpus=PATH"
    return why


def working_tools(zoo: Any, names: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    """`names` less what `left_out` names (order kept), each omission logged with its reason."""
    why = left_out(zoo, names, env)
    for name, reason in why.items():
        log.warning("served tool catalogue: left out %r: %s", name, reason)
    return [n for n in names if n not in why]


def restrict_to_working_tools(service: Any, settings: Any) -> None:
    """Narrow a built OrchestraService's catalogue (the tools each request's task offers) to the working tools
    of the experiment's zoo, read as the service was built (experiment preset + overrides)."""
    from orchestra.config import load_config

    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    service.catalogue = working_tools(cfg.zoo, list(service.catalogue))
