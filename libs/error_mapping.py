"""Errors become statuses once, at every service's edge: `ErrorMappingInterceptor` maps
`MeshError` to its status code with `google.rpc` details, turns any other exception into INTERNAL
with the trace id (the stack trace goes to the log only), and answers request bytes that do not
parse with INVALID_ARGUMENT on "request". `libs.server.start_server` installs it on every server.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_status import rpc_status

from libs.channels import set_caller_deadline
from libs.errors import InvalidArgument, MeshError, to_status
from libs.interceptors import WrapOnce
from libs.telemetry import current_trace_id

log = logging.getLogger(__name__)


class _Malformed:
    """What `_tolerant` returns for request bytes that do not parse; the wrapped handler answers
    INVALID_ARGUMENT instead of letting grpc log a traceback and answer UNKNOWN."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserializer):
    if deserializer is None:
        return None

    def deserialize(data: bytes):
        try:
            return deserializer(data)
        except Exception as error:  # noqa: BLE001 - DecodeError, or whatever a parser raises
            return _Malformed(error)

    return deserialize


def _check_parsed(request) -> None:
    if isinstance(request, _Malformed):
        raise InvalidArgument("request", f"not a valid protobuf message of this method's "
                                         f"request type ({type(request.error).__name__})")


async def _checked_stream(requests):
    async for request in requests:
        _check_parsed(request)
        yield request


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Maps `MeshError` to its status code with `google.rpc` details; any other exception becomes
    INTERNAL with the trace id and no stack trace (the stack trace goes to the service's log).
    Request bytes that do not parse are INVALID_ARGUMENT on "request". It also records each
    call's deadline for the mesh channels (`libs.channels.set_caller_deadline`)."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._handlers = WrapOnce(self._wrap)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self._handlers.wrapped(handler, handler_call_details.method)

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        deserializer = _tolerant(handler.request_deserializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary(handler.stream_unary, method, streaming=True),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream(handler.stream_stream, method, streaming=True),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )

    async def _abort(self, context: grpc.aio.ServicerContext, error: Exception, method: str):
        if isinstance(error, MeshError):
            status = to_status(error, self._service)
            log.info("%s -> %s: %s", method, error.code.name, error.message)
        else:
            trace_id = current_trace_id()
            log.exception("%s failed (trace %s)", method, trace_id)
            status = to_status(
                MeshError(f"internal error in {self._service}; trace id {trace_id or 'none'}"),
                self._service,
            )
        await context.abort_with_status(rpc_status.to_status(status))

    def _wrap_unary(self, behaviour, method: str, streaming: bool = False):
        async def wrapped(request, context):
            set_caller_deadline(context.time_remaining())
            try:
                if streaming:
                    request = _checked_stream(request)
                else:
                    _check_parsed(request)
                return await behaviour(request, context)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:  # noqa: BLE001 - the one place errors become statuses
                await self._abort(context, error, method)

        return wrapped

    def _wrap_stream(self, behaviour, method: str, streaming: bool = False):
        """An async generator around a streaming handler, whatever the handler is: an async
        generator function, a plain function that returns an async iterator (mcts's
        SearchExternal), or a coroutine that writes with `context.write` and returns None
        (grpcio-health-checking's Watch: awaited, nothing yielded). Always a generator, so the
        interceptors outside (tracing) can iterate it."""

        async def wrapped(request, context):
            set_caller_deadline(context.time_remaining())
            try:
                if streaming:
                    request = _checked_stream(request)
                else:
                    _check_parsed(request)
                responses = behaviour(request, context)
                if hasattr(responses, "__aiter__"):
                    async for response in responses:
                        yield response
                else:
                    await responses
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:  # noqa: BLE001
                await self._abort(context, error, method)

        return wrapped
