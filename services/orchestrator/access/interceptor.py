"""The gRPC side of access control: a server interceptor that runs `AccessControl.enter` before
every call of the orchestrator's API, answers a refusal itself, charges the call's budgets with
what its response says it used, and ends every call at the server's maximum deadline.

Refusals, as `google.rpc.Status` with an `ErrorInfo` detail (its reason below):
- UNAUTHENTICATED: API_KEY_MISSING, API_KEY_INVALID;
- PERMISSION_DENIED (HTTP 403): SCOPE_NOT_GRANTED (metadata `scope`: the scope the method needs),
  COLLECTION_NOT_ALLOWED (metadata `collection`; each message of a stream is checked);
- RESOURCE_EXHAUSTED (HTTP 429), with a `RetryInfo`: RATE_LIMIT_EXCEEDED,
  TOO_MANY_REQUESTS_IN_FLIGHT (the orchestrator's cap), KEY_TOO_MANY_REQUESTS_IN_FLIGHT (the
  key's), BUDGET_EXCEEDED (with a `QuotaFailure` naming each budget used up);
- UNAVAILABLE (HTTP 503), with a `RetryInfo`: LIMITS_STORE_UNAVAILABLE (Redis unreachable and
  that limit fails closed).
The REST front turns the RetryInfo into `Retry-After`. Refusals are not logged (a flood of bad
keys must not flood the log); they are counted by the metrics and the server span's status.

Maximum deadline: a call runs at most `max_deadline_s` seconds, whatever deadline its caller set
(none included); past it the handler is cancelled (and with it its calls to other services) and
the call ends DEADLINE_EXCEEDED. The servicer sees the capped deadline in `time_remaining()`. A
stream's cap covers the handler's work between messages; a response stream whose client stops
reading waits on gRPC's flow control instead, and ends at the cap with its next message.

Health (`grpc.health.v1`) and reflection stay open: probes and tools carry no key.
"""

from __future__ import annotations

import asyncio
import math

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from libs.errors import ERROR_DOMAIN
from services.orchestrator.access.control import (
    INVALID_KEY,
    MISSING_KEY,
    AccessControl,
    Admitted,
    Rejection,
    credential_from_metadata,
)

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_REASONS = {
    "missing_key": (grpc.StatusCode.UNAUTHENTICATED, "API_KEY_MISSING"),
    "invalid_key": (grpc.StatusCode.UNAUTHENTICATED, "API_KEY_INVALID"),
    "rate_limit": (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMIT_EXCEEDED"),
    "admission": (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS_IN_FLIGHT"),
    "key_in_flight": (grpc.StatusCode.RESOURCE_EXHAUSTED, "KEY_TOO_MANY_REQUESTS_IN_FLIGHT"),
    "budget": (grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED"),
    "scope": (grpc.StatusCode.PERMISSION_DENIED, "SCOPE_NOT_GRANTED"),
    "collection": (grpc.StatusCode.PERMISSION_DENIED, "COLLECTION_NOT_ALLOWED"),
    "store_unavailable": (grpc.StatusCode.UNAVAILABLE, "LIMITS_STORE_UNAVAILABLE"),
}


def rejection_status(rejection: Rejection, service: str = "orchestrator") -> status_pb2.Status:
    """The `google.rpc.Status` of a refusal: ErrorInfo, QuotaFailure when it names budgets, and
    RetryInfo when it says when to retry."""
    code, reason = _REASONS[rejection.reason]
    status = status_pb2.Status(code=code.value[0], message=rejection.message)
    status.details.add().Pack(error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN, metadata={"service": service,
                                                      **dict(rejection.metadata)}))
    if rejection.violations:
        status.details.add().Pack(error_details_pb2.QuotaFailure(violations=[
            error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)
            for subject, description in rejection.violations]))
    if rejection.retry_after_s > 0:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(rejection.retry_after_s * 1e9))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


class _CappedContext:
    """The servicer's view of its context: `time_remaining()` no later than the server's maximum
    deadline (None still when the caller set none: the servicer's own defaults, each within the
    cap, apply); everything else is the call's context."""

    def __init__(self, context: grpc.aio.ServicerContext, deadline: float) -> None:
        self._context = context
        self._deadline = deadline

    def time_remaining(self) -> float | None:
        remaining = self._context.time_remaining()
        if remaining is None:
            return None
        return max(0.0, min(remaining, self._deadline - asyncio.get_running_loop().time()))

    def __getattr__(self, name: str):
        return getattr(self._context, name)


class _Denied(Exception):
    """A stream's message named a collection its key may not use."""


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every method but health and reflection: enter, run within the maximum deadline,
    charge, leave.

    The wrapped handler of a method is built once and cached, so a call costs the credential
    check, the scope check, the admission counters, and (for a key with them) one rate-limit and
    one budget check.

    Args:
        control: the decisions.
        service: the service name the ErrorInfo details carry.
        max_deadline_s: the longest a call may run, in seconds; None: no cap.
    """

    def __init__(self, control: AccessControl, service: str = "orchestrator",
                 max_deadline_s: float | None = None) -> None:
        self._control = control
        self._service = service
        self._max_deadline_s = max_deadline_s if max_deadline_s is not None else math.inf
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
        wrapped = self._wrap(handler, method)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        codec = {"request_deserializer": handler.request_deserializer,
                 "response_serializer": handler.response_serializer}
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method, False), **codec)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method, True), **codec)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, method, False), **codec)
        return grpc.stream_stream_rpc_method_handler(
            self._stream(handler.stream_stream, method, True), **codec)

    async def _abort(self, context: grpc.aio.ServicerContext, rejection: Rejection) -> None:
        status = self._constant.get(rejection.reason)
        if status is None:
            status = rpc_status.to_status(rejection_status(rejection, self._service))
        await context.abort_with_status(status)

    async def _enter(self, context: grpc.aio.ServicerContext, method: str,
                     request: object) -> Admitted:
        admitted = await self._control.enter(
            credential_from_metadata(context.invocation_metadata() or ()), method, request)
        if isinstance(admitted, Rejection):
            await self._abort(context, admitted)
        return admitted

    def _checked(self, admitted: Admitted, requests, denied: list[Rejection]):
        """The request stream, each message's collection checked; a denied one ends it."""
        async def checked():
            async for request in requests:
                rejection = self._control.check_request(admitted, request)
                if rejection is not None:
                    denied.append(rejection)
                    raise _Denied(rejection.message)
                yield request

        return checked()

    async def _deadline_passed(self, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"the call ran for {self._max_deadline_s:g} s, the server's maximum "
                            "deadline (ORCHESTRATOR_MAX_DEADLINE_S)")

    def _unary(self, behaviour, method: str, streaming: bool):
        async def wrapped(request, context):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._max_deadline_s
            admitted = await self._enter(context, method, None if streaming else request)
            denied: list[Rejection] = []
            if streaming:
                request = self._checked(admitted, request, denied)
            timeout = asyncio.timeout_at(deadline if math.isfinite(deadline) else None)
            try:
                async with timeout:
                    response = await behaviour(request, _CappedContext(context, deadline))
            except Exception:
                if denied:
                    await self._abort(context, denied[0])
                if timeout.expired():
                    await self._deadline_passed(context)
                raise
            else:
                await self._control.charge(admitted, response)
                return response
            finally:
                self._control.leave(admitted)

        return wrapped

    def _stream(self, behaviour, method: str, streaming: bool):
        async def wrapped(request, context):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._max_deadline_s
            admitted = await self._enter(context, method, None if streaming else request)
            denied: list[Rejection] = []
            if streaming:
                request = self._checked(admitted, request, denied)
            responses = behaviour(request, _CappedContext(context, deadline))
            try:
                while True:
                    timeout = asyncio.timeout_at(deadline if math.isfinite(deadline) else None)
                    try:
                        async with timeout:
                            response = await anext(responses)
                    except StopAsyncIteration:
                        return
                    except Exception:
                        if denied:
                            await self._abort(context, denied[0])
                        if timeout.expired():
                            await self._deadline_passed(context)
                        raise
                    await self._control.charge(admitted, response)
                    yield response
            finally:
                await responses.aclose()
                self._control.leave(admitted)

        return wrapped
