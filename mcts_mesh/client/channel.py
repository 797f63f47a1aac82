"""The `mcts-mesh` client commands' channel to the orchestrator: a blocking gRPC channel that adds
the API key (`--api-key` or `MCTS_MESH_API_KEY`) to every call as `x-api-key` metadata, with the
options of every channel a client opens to the orchestrator (`client_options`, which the MCP
server's channel has too)."""

from __future__ import annotations

import collections

import grpc

API_KEY_ENV = "MCTS_MESH_API_KEY"


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                         "compression")), grpc.ClientCallDetails):
    pass


class ApiKeyInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                        grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `("x-api-key", key)` to the metadata of every call."""

    def __init__(self, api_key: str) -> None:
        self._pair = ("x-api-key", api_key)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(details.method, details.timeout,
                            [*(details.metadata or ()), self._pair], details.credentials,
                            details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def client_options(extra_options: list[tuple[str, object]] | None = None
                   ) -> list[tuple[str, object]]:
    """Options of a client's channel to the orchestrator: the mesh's message limits (4 MiB) and
    HTTP/2 keepalive (`libs.channels.Keepalive`'s defaults: a call to an orchestrator that froze,
    or whose connection went away without a word, fails UNAVAILABLE within 3 s instead of at its
    deadline), then `extra_options` (gRPC channel arguments)."""
    from libs.channels import Keepalive, message_limit_options

    return [*message_limit_options(), *Keepalive().options(), *(extra_options or [])]


def open_channel(target: str, api_key: str | None = None,
                 extra_options: list[tuple[str, object]] | None = None) -> grpc.Channel:
    """An insecure channel to `target` ("host:port"; `client_options(extra_options)`) that
    sends `api_key` with every call (none when empty). Close it with `channel.close()`."""
    channel = grpc.insecure_channel(target, options=client_options(extra_options))
    return grpc.intercept_channel(channel, ApiKeyInterceptor(api_key)) if api_key else channel
