"""The Serve replica: `OrchestraServer` builds the service once (the model load, actors/serve/wiring.py) and serves
the HTTP app (actors/serve/http.py) over it; `deployment(...)` and `build_app(args)`, the builder that
`serve run conf/serve.yaml` imports. Replicas, autoscaling and resources come from conf/serve.yaml; starting Ray
and Serve is cluster/serve.py's job. The domain service is actors/serve/service.py, the wire format api.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from actors.serve import api
from actors.serve.api import ServeSettings
from actors.serve.http import create_api
from actors.serve.service import OrchestraService
from actors.serve.wiring import build_service

log = logging.getLogger("orchestra.serve")


class OrchestraServer:
    """The Serve replica: builds the service once (the model load), then serves `create_api` over it."""

    def __init__(self, settings: dict[str, Any] | None = None,
                 builder: Callable[[ServeSettings], OrchestraService] | None = None):
        self.settings = api.settings_from_dict(settings)
        if not api.api_keys(self.settings):  # the deployed endpoint always requires a key
            raise ValueError(f"no API keys: set {self.settings.api_keys_env or 'ORCHESTRA_API_KEYS'} (comma-separated) "
                             "or `api_keys` in conf/serve.yaml; the Serve endpoint does not run open")
        self.service = (builder or build_service)(self.settings)
        if builder is None:  # production: offer only the tools that can work on this host
            from actors.serve.catalogue import restrict_to_working_tools

            restrict_to_working_tools(self.service, self.settings)

    def __serve_build_asgi_app__(self) -> Any:
        s = self.settings
        return create_api(self.service, api_keys=api.api_keys(s), max_request_bytes=s.max_request_bytes,
                          rate_limit_per_s=s.rate_limit_per_s, rate_limit_burst=s.rate_limit_burst)


def deployment(name: str = "OrchestraServer", **options: Any) -> Any:
    """The Serve deployment of OrchestraServer; `options` are Serve's (num_replicas, autoscaling_config,
    ray_actor_options, max_ongoing_requests ...), normally read from conf/serve.yaml."""
    from ray import serve

    return serve.deployment(serve.ingress()(OrchestraServer), name=name).options(**options)


def build_app(args: dict[str, Any] | None = None) -> Any:
    """Application builder for `serve run conf/serve.yaml` (import_path: actors.serve.app:build_app)."""
    args = dict(args or {})
    api.settings_from_dict(args)  # fail in the driver, naming the key, before any replica starts
    return deployment().bind(args)
