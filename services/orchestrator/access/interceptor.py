"""The gRPC side of access control: a server interceptor that runs `AccessControl.admit` before
every call of the orchestrator's API and answers a refusal itself.

Refusals: UNAUTHENTICATED (missing or invalid key) and RESOURCE_EXHAUSTED (rate limit, admission),
as `google.rpc.Status` with an `ErrorInfo` detail (reason API_KEY_MISSING, API_KEY_INVALID,
RATE_LIMIT_EXCEEDED or TOO_MANY_REQUESTS_IN_FLIGHT) and, for RESOURCE_EXHAUSTED, a `RetryInfo`
detail; the REST front turns the RetryInfo into `Retry-After`. Refusals are not logged (a flood of
bad keys must not flood the log); they are counted by the metrics and the server span's status.

Health (`grpc.health.v1`) and reflection stay open: probes and tools carry no key.
"""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from libs.errors import ERROR_DOMAIN
from services.orchestrator.access.control import (
    INVALID_KEY,
    MISSING_KEY,
    AccessControl,
    Rejection,
    credential_from_metadata,
)

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_REASONS = {
    "missing_key": (grpc.StatusCode.UNAUTHENTICATED, "API_KEY_MISSING"),
    "invalid_key": (grpc.StatusCode.UNAUTHENTICATED, "API_KEY_INVALID"),
    "rate_limit": (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMIT_EXCEEDED"),
    "admission": (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS_IN_FLIGHT"),
}


def rejection_status(rejection: Rejection, service: str = "orchestrator") -> status_pb2.Status:
    """The `google.rpc.Status` of a refusal: ErrorInfo, and RetryInfo when it says when to retry."""
    code, reason = _REASONS[rejection.reason]
    status = status_pb2.Status(code=code.value[0], message=rejection.message)
    status.details.add().Pack(error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN, metadata={"service": service}))
    if rejection.retry_after_s > 0:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(rejection.retry_after_s * 1e9))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every method but health and reflection: admit, run, release.

    The wrapped handler of a method is built once and cached, so a call costs the credential
    check, the admission counter and (for a key with limits) one rate-limit check."""

    def __init__(self, control: AccessControl, service: str = "orchestrator") -> None:
        self._control = control
        self._service = service
        self._constant = {rejection.reason: rpc_status.to_status(rejection_status(rejection,
                                                                                  service))
                          for rejection in (MISSING_KEY, INVALID_KEY)}
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        codec = {"request_deserializer": handler.request_deserializer,
                 "response_serializer": handler.response_serializer}
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary), **codec)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(self._unary(handler.stream_unary), **codec)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(self._stream(handler.unary_stream),
                                                        **codec)
        return grpc.stream_stream_rpc_method_handler(self._stream(handler.stream_stream), **codec)

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        rejection = await self._control.admit(
            credential_from_metadata(context.invocation_metadata() or ()))
        if rejection is not None:
            status = self._constant.get(rejection.reason)
            if status is None:
                status = rpc_status.to_status(rejection_status(rejection, self._service))
            await context.abort_with_status(status)

    def _unary(self, behaviour):
        async def wrapped(request, context):
            await self._admit(context)
            try:
                return await behaviour(request, context)
            finally:
                self._control.release()

        return wrapped

    def _stream(self, behaviour):
        async def wrapped(request, context):
            await self._admit(context)
            try:
                async for response in behaviour(request, context):
                    yield response
            finally:
                self._control.release()

        return wrapped
