"""The mesh authenticates its own hops: the gRPC side of `libs.settings.MeshAuth`.

A backend (mcts, neural, retrieval, llm) answers only callers that hold the mesh's
credential; the orchestrator's public API is not a backend (its callers hold API keys instead).

- Mutual TLS (`server_credentials`, `channel_credentials`): the server requires a client
  certificate signed by the mesh CA (`require_client_auth=True`); a client without one does not
  get past the TLS handshake, health checks included.
- The mesh token (`MeshTokenInterceptor`, `token_metadata`): every call but health carries
  `x-mesh-token`; the server compares it in constant time when the call arrives, before the request
  is parsed or any servicer code runs, and answers UNAUTHENTICATED without it. Health
  (`grpc.health.v1`) stays open for probes (kubelet's gRPC probe sends no metadata); reflection
  needs the token like any other method (`grpcurl -H "x-mesh-token: ..."`).

`backend_auth` decides what a backend requires from its settings (`libs.server.start_server` calls
it): TLS, the token, or neither, which only a loopback address (or an explicit setting) allows.

Refusals are not logged one by one (a flood must not flood the log): the first one, then at most
one line a minute, says how many calls were refused and from where; every one is counted in
`mesh_unauthenticated_calls_total`.
"""

from __future__ import annotations

import collections
import hmac
import ipaddress
import logging
import time

import grpc
from prometheus_client import Counter

from libs.settings import MeshAuth, MeshTls, ServiceSettings

log = logging.getLogger(__name__)

TOKEN_METADATA_KEY = "x-mesh-token"
"""The metadata key of the mesh token."""
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods a backend answers without the mesh token (probes carry none)."""
REFUSAL_LOG_INTERVAL_S = 60.0
"""Seconds between two log lines about refused calls."""

UNAUTHENTICATED_CALLS = Counter(
    "mesh_unauthenticated_calls_total",
    "Calls a backend refused because they carried no valid mesh token, by service.", ["service"])

_REFUSAL = "this service answers only mesh services: the call has no valid mesh token"


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata pair that carries `token` (empty when None), to add to a call's metadata."""
    return () if token is None else ((TOKEN_METADATA_KEY, token),)


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                         "compression")), grpc.ClientCallDetails):
    pass


class _TokenClientInterceptor(grpc.UnaryUnaryClientInterceptor,
                              grpc.UnaryStreamClientInterceptor,
                              grpc.StreamUnaryClientInterceptor,
                              grpc.StreamStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._pair = (TOKEN_METADATA_KEY, token)

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        return _CallDetails(details.method, details.timeout,
                            (*(details.metadata or ()), self._pair), details.credentials,
                            details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


def with_token(channel: grpc.Channel, token: str | None) -> grpc.Channel:
    """A blocking channel whose every call carries `token` (unchanged when None): for tools and
    tests that call a backend directly, e.g. `with_token(grpc.insecure_channel(target),
    mesh.token)`. (Mesh services use `libs.channels.open_channel`.)"""
    return channel if token is None else grpc.intercept_channel(channel,
                                                                _TokenClientInterceptor(token))


def server_credentials(tls: MeshTls) -> grpc.ServerCredentials:
    """TLS server credentials that require a client certificate signed by the mesh CA."""
    return grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca,
                                       require_client_auth=True)


def channel_credentials(tls: MeshTls) -> grpc.ChannelCredentials:
    """TLS channel credentials that check the server against the mesh CA and present this
    service's certificate as the client certificate."""
    return grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key,
                                        certificate_chain=tls.cert)


def tls_channel_options(tls: MeshTls | None) -> list[tuple[str, str]]:
    """The channel option that makes a client expect `tls.server_name` in the server's
    certificate, when one is set."""
    if tls is None or not tls.server_name:
        return []
    return [("grpc.ssl_target_name_override", tls.server_name)]


def _reject_unary():
    async def reject(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)

    return reject


def _reject_stream():
    async def reject(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
        yield  # pragma: no cover - makes this an async generator, as a streaming handler is

    return reject


def _rejecting(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that refuses the call without parsing its request
    (no deserializer: the bytes are never looked at)."""
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(_reject_unary())
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(_reject_unary())
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(_reject_stream())
    return grpc.stream_stream_rpc_method_handler(_reject_stream())


class MeshTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call but health whose `x-mesh-token` is not `token` (UNAUTHENTICATED).

    The check looks at the call's metadata when the call arrives (a bounded scan of at most
    `libs.server.MAX_METADATA_BYTES`) and compares with `hmac.compare_digest`; an accepted call
    costs that and nothing else (its handler is the server's own).

    Args:
        token: the mesh token (at least 16 characters).
        service: the service's word, for the log and the metric.
    """

    def __init__(self, token: str, service: str) -> None:
        self._token = token.encode()
        self._service = service
        self._refusals = UNAUTHENTICATED_CALLS.labels(service)
        self._rejecting: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._last_log = float("-inf")
        self._unlogged = 0

    def _holds_token(self, metadata) -> bool:
        for key, value in metadata or ():
            if key == TOKEN_METADATA_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(given, self._token)
        return False

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(OPEN_METHOD_PREFIXES) or \
                self._holds_token(handler_call_details.invocation_metadata):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:  # no such method: UNIMPLEMENTED, as for anyone
            return None
        self._note_refusal(method)
        cached = self._rejecting.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._rejecting[method] = (handler, _rejecting(handler))
        return cached[1]

    def _note_refusal(self, method: str) -> None:
        self._refusals.inc()
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_INTERVAL_S:
            log.warning("%s: refused %d call(s) without a valid mesh token (the last: %s); "
                        "further refusals are counted in mesh_unauthenticated_calls_total",
                        self._service, self._unlogged, method)
            self._last_log = now
            self._unlogged = 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def backend_auth(name: str, settings: ServiceSettings) -> MeshAuth:
    """The mesh credentials a backend requires of its callers (`settings.mesh_auth()`).

    Raises:
        ValueError: neither token nor TLS is configured and the service binds a non-loopback
            address without `mesh_allow_unauthenticated`, or a credential file cannot be read.
    """
    auth = settings.mesh_auth()
    if auth.enabled or settings.mesh_allow_unauthenticated:
        return auth
    prefix = settings.model_config.get("env_prefix", "")
    if not _is_loopback(settings.host):
        raise ValueError(
            f"{name}: refusing to serve {settings.host} without mesh authentication: set "
            f"{prefix}MESH_TOKEN (or {prefix}MESH_TLS_CA_FILE, _CERT_FILE and _KEY_FILE), or "
            f"{prefix}MESH_ALLOW_UNAUTHENTICATED=true for a network nothing else can reach")
    log.warning("%s: no mesh token or TLS configured (%sMESH_TOKEN): any local process may call "
                "it", name, prefix)
    return auth
