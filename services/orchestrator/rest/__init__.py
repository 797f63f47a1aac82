"""The orchestrator's REST front, generated from the `google.api.http` annotations of its proto with
grpc-gateway v2's semantics. Entry points: `build_rest_app`, `serve_rest`, `RestSettings`."""

from services.orchestrator.rest.app import RestSettings, RunningRest, build_rest_app, serve_rest

__all__ = ["RestSettings", "RunningRest", "build_rest_app", "serve_rest"]
