"""A REST front for a gRPC service, generated from the `google.api.http` annotations of its proto
with grpc-gateway v2's semantics, parameterised by the service's descriptor (the orchestrator
passes its own, `services.orchestrator.api.rest`). Entry points: `build_rest_app`, `serve_rest`,
`RestSettings`.

They are imported on first use (PEP 562), so a process that needs one submodule only (the body
decoder's worker processes, see `offload`) does not load the web server."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from libs.rest.app import build_rest_app
    from libs.rest.serving import RunningRest, serve_rest
    from libs.rest.settings import RestSettings

_HOMES = {"RestSettings": "settings", "RunningRest": "serving", "serve_rest": "serving",
          "build_rest_app": "app"}
__all__ = ["RestSettings", "RunningRest", "build_rest_app", "serve_rest"]


def __getattr__(name: str) -> object:
    if name in _HOMES:
        return getattr(importlib.import_module(f"libs.rest.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
