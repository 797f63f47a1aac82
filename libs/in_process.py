"""A server's methods called from its own process, through the same interceptors as its gRPC calls:
grpc-gateway's `RegisterXHandlerServer` (the gateway calls the server's implementation directly,
with no loopback connection) for a front that lives beside a `grpc.aio` server.

`libs.server.start_server` records what it serves (the generic handlers of every servicer and of
health) and the interceptor chain it built (tracing and metrics, error mapping, the service's own,
such as the orchestrator's access control) in an `InProcessServer`. A call made through it finds
the method's handler through that chain, as the gRPC server does for a call arriving on its port,
and runs it with an `InProcessContext`: the request's metadata, a deadline (the handler is
cancelled when it passes: DEADLINE_EXCEEDED), `abort` / `abort_with_status` (the call fails with
the `google.rpc.Status` the handler gave), header metadata, and cancellation (the caller's
`cancel()`: CANCELLED). So a call made in-process is authenticated, admitted, rate-limited, traced,
counted and mapped to a status by the same code as one that came over the network.

What the transport would have checked is checked here too: the request and each response at most
`max_message_bytes` serialized (RESOURCE_EXHAUSTED, as a gRPC server's message limits), the
request metadata at most `max_metadata_bytes` (INVALID_ARGUMENT naming "metadata": the caller's
mistake). Messages are passed as objects, never serialized.

Why: the orchestrator's REST front forwarded each request over a loopback gRPC channel, which cost
its process about 1.9 ms of CPU per request on the load bench's Connect Four workload (4.27 against
2.38 ms for the same request over gRPC); `docs/architecture.md` ("REST front") has the figures
with in-process calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

import grpc
from google.protobuf.message import Message
from google.rpc import status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
METADATA_ENTRY_OVERHEAD = 32
"""Bytes counted per metadata entry besides its key and value (HPACK's entry size, RFC 7541
section 4.1), as gRPC counts metadata against its limit."""

Metadata = Sequence[tuple[str, str | bytes]]
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class CallFailed(Exception):
    """An in-process call ended with a status other than OK.

    Attributes:
        status: the `google.rpc.Status` a gRPC client would have received (with the handler's
            details when it aborted with them).
        initial_metadata: header metadata the handler sent before it failed.
    """

    def __init__(self, status: status_pb2.Status, initial_metadata: Metadata = ()) -> None:
        code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
        super().__init__(f"{code.name}: {status.message}")
        self.status = status
        self.initial_metadata = tuple(initial_metadata)


def _status(code: grpc.StatusCode, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code.value[0], message=message)


class _HandlerCallDetails(NamedTuple):
    """`grpc.HandlerCallDetails`: what interceptors and generic handlers see of a call."""

    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...]


class InProcessContext(grpc.aio.ServicerContext):
    """The `grpc.aio.ServicerContext` of an in-process call.

    Args:
        metadata: the request's metadata, (key, value) pairs; a "-bin" key's value is bytes.
        timeout_s: seconds from now to the call's deadline (> 0).
        peer: the caller in gRPC's form ("ipv4:10.0.0.1:51234"); "" when unknown.
    """

    def __init__(self, metadata: Metadata, timeout_s: float, peer: str = "") -> None:
        self._metadata = tuple((key, value) for key, value in metadata)
        self._deadline = time.monotonic() + timeout_s
        self._peer = peer
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._initial: tuple[tuple[str, str | bytes], ...] | None = None
        self._cancelled = False
        self._done = False
        self._callbacks: list[Callable[[Any], None]] = []
        self.stream: asyncio.Queue[object] | None = None
        """Where `write()` puts a server-streaming call's messages; None for a unary call."""

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def time_remaining(self) -> float:
        """Seconds left before the deadline (0 once it has passed)."""
        return max(0.0, self._deadline - time.monotonic())

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> Iterable[bytes] | None:
        return None  # like an insecure call's: no authenticated peer

    def peer_identity_key(self) -> str | None:
        return None

    def auth_context(self) -> dict[str, Iterable[bytes]]:
        return {}

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Calls `callback(self)` when the call ends (at once if it has ended)."""
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def send_initial_metadata(self, initial_metadata: Metadata) -> None:
        """Header metadata; once per call.

        Raises:
            grpc.aio.UsageError: it was already sent.
        """
        if self._initial is not None:
            raise grpc.aio.UsageError("initial metadata was already sent")
        self._initial = tuple((key, value) for key, value in initial_metadata)

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None:
        self._trailing = tuple((key, value) for key, value in trailing_metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Metadata = ()) -> None:
        """Ends the call with `code`: raises `grpc.aio.AbortError`, as a server's context does.

        Raises:
            grpc.aio.AbortError: always (what ends the handler).
            grpc.aio.UsageError: `code` is OK.
        """
        if code is grpc.StatusCode.OK:
            raise grpc.aio.UsageError("abort() needs a code other than OK")
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple((key, value) for key, value in trailing_metadata)
        raise grpc.aio.AbortError(f"aborted with {code.name}")

    async def abort_with_status(self, status: grpc.Status) -> None:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_compression(self, compression: grpc.Compression) -> None:
        """Nothing to do: an in-process call has no wire to compress."""

    def disable_next_message_compression(self) -> None:
        """Nothing to do: an in-process call has no wire to compress."""

    async def read(self) -> object:
        """Raises: grpc.aio.UsageError: an in-process call's one request is passed as an object."""
        raise grpc.aio.UsageError("an in-process call has no request stream to read")

    async def write(self, message: object) -> None:
        """Sends one message of a server-streaming call (as yielding it does).

        Raises:
            grpc.aio.UsageError: the call is unary.
        """
        if self.stream is None:
            raise grpc.aio.UsageError("write() is for server-streaming calls")
        await self.stream.put(message)

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The header metadata the handler sent (empty when it sent none)."""
        return self._initial or ()

    def failed(self) -> bool:
        """Whether a code other than OK was set or aborted with."""
        return self._code is not None and self._code is not grpc.StatusCode.OK

    def status(self, fallback: grpc.StatusCode, message: str) -> status_pb2.Status:
        """The `google.rpc.Status` of a call that failed: the one in its trailing metadata
        (`abort_with_status`), else the code and details set, else `fallback` and `message`."""
        for key, value in self._trailing:
            if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
                status = status_pb2.Status.FromString(value)
                if self._code is None or status.code == self._code.value[0]:
                    return status
        if self.failed():
            return status_pb2.Status(code=self._code.value[0],  # type: ignore[union-attr]
                                     message=self._details or "")
        return _status(fallback, message)

    def finish(self, cancelled: bool = False) -> None:
        """Marks the call ended and runs the done callbacks."""
        self._cancelled = self._cancelled or cancelled
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


def _failure(error: BaseException, context: InProcessContext) -> CallFailed:
    """The `CallFailed` for a handler that raised: the deadline (DEADLINE_EXCEEDED), an abort or a
    code set (that status), or an exception no interceptor mapped (UNKNOWN, as a gRPC server
    answers one)."""
    if isinstance(error, TimeoutError) and context.time_remaining() <= 0:
        status = _status(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    else:
        status = context.status(grpc.StatusCode.UNKNOWN,
                                f"Unexpected error in the handler: {type(error).__name__}")
    return CallFailed(status, context.initial_metadata())


class InProcessUnaryCall:
    """A unary call running in its own task: `await call` gives the response or raises
    `CallFailed`; `cancel()` cancels the handler (its status: CANCELLED); `initial_metadata()` is
    the header metadata the handler sent."""

    def __init__(self, run: Awaitable[Message], context: InProcessContext) -> None:
        self._context = context
        self._task = asyncio.ensure_future(run)

    def __await__(self):
        return self._task.__await__()

    def cancel(self) -> bool:
        return self._task.cancel()

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._context.initial_metadata()


class InProcessStreamCall:
    """A server-streaming call whose handler runs in its own task and hands its messages over one
    at a time (it waits while one is unread, as flow control would hold it).

    `await read()` gives the next message, `grpc.aio.EOF` after the last, or raises `CallFailed`;
    `cancel()` cancels the handler (CANCELLED)."""

    def __init__(self, messages: AsyncIterator[Message], context: InProcessContext,
                 timeout_s: float, max_message_bytes: int) -> None:
        self._context = context
        self._max_message_bytes = max_message_bytes
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1)
        context.stream = self._queue
        self._ended = False
        self._task = asyncio.ensure_future(self._pump(messages, timeout_s))

    async def _pump(self, messages: AsyncIterator[Message], timeout_s: float) -> None:
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    async for message in messages:
                        _check_size(message, "response", self._max_message_bytes)
                        await self._queue.put(message)
            finally:
                await _close(messages)
            outcome: object = grpc.aio.EOF
        except asyncio.CancelledError:
            self._context.finish(cancelled=True)
            raise
        except BaseException as error:  # noqa: BLE001 - every ending becomes a status
            outcome = error if isinstance(error, CallFailed) else _failure(error, self._context)
        self._context.finish()
        await self._queue.put(outcome)

    async def read(self) -> object:
        """The next message, or `grpc.aio.EOF` once the stream has ended.

        Raises:
            CallFailed: the handler failed (with its status).
        """
        if self._ended:
            return grpc.aio.EOF
        item = await self._queue.get()
        if isinstance(item, CallFailed):
            self._ended = True
            raise item
        self._ended = item is grpc.aio.EOF
        return item

    def cancel(self) -> bool:
        return self._task.cancel()

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._context.initial_metadata()


async def _close(messages: AsyncIterator[Message]) -> None:
    """Ends a handler's generator still suspended at a `yield` (the deadline passed or the caller
    left while a message waited to be read): CancelledError raised at the outermost interceptor's
    `yield`, so its span and metrics record the call as cancelled (or past its deadline); the
    generators inside it are closed as abandoned ones are (GeneratorExit)."""
    if getattr(messages, "ag_frame", None) is None:
        return  # finished, or never started
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await messages.athrow(asyncio.CancelledError())  # type: ignore[attr-defined]
    await messages.aclose()  # type: ignore[attr-defined]


def _check_size(message: Message, what: str, limit: int) -> None:
    """Raises: CallFailed (RESOURCE_EXHAUSTED): `message` is over `limit` bytes serialized."""
    size = message.ByteSize()
    if size > limit:
        raise CallFailed(_status(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"{what} is {size} bytes, over the limit of {limit} bytes"))


class InProcessServer:
    """Calls the methods a `grpc.aio` server serves from its own process (see the module
    docstring).

    Args:
        handlers: the generic handlers the server was given (`add_generic_rpc_handlers`).
        interceptors: the server's interceptors, outermost first (as `grpc.aio.server` takes them).
        max_message_bytes: largest request and response, serialized (the server's limits).
        max_metadata_bytes: largest request metadata (keys + values + 32 bytes per entry).
    """

    def __init__(self, handlers: Sequence[grpc.GenericRpcHandler],
                 interceptors: Sequence[grpc.aio.ServerInterceptor], max_message_bytes: int,
                 max_metadata_bytes: int) -> None:
        self._handlers = list(handlers)
        self._interceptors = list(interceptors)
        self._max_message_bytes = max_message_bytes
        self._max_metadata_bytes = max_metadata_bytes

    def unary_unary(self, method: str, request: Message, timeout_s: float,
                    metadata: Metadata = (), peer: str = "") -> InProcessUnaryCall:
        """Starts a unary call of `method` ("/package.Service/Method") whose deadline is
        `timeout_s` seconds from now; await the returned call for the response.

        Raises (when awaited):
            CallFailed: the call's status was not OK: UNIMPLEMENTED (a method not served),
                INVALID_ARGUMENT (metadata over the limit), RESOURCE_EXHAUSTED (a message over
                it), DEADLINE_EXCEEDED, or whatever the handler aborted with.
        """
        context = InProcessContext(metadata, timeout_s, peer)
        return InProcessUnaryCall(self._unary(method, request, context), context)

    async def _unary(self, method: str, request: Message, context: InProcessContext) -> Message:
        handler = await self._handler(method, request, context)
        if handler.unary_unary is None:
            raise CallFailed(_status(grpc.StatusCode.UNIMPLEMENTED,
                                     f"{method} is not a unary method"))
        try:
            async with asyncio.timeout(context.time_remaining()):
                reply = await handler.unary_unary(request, context)
        except asyncio.CancelledError:
            context.finish(cancelled=True)
            raise
        except BaseException as error:  # noqa: BLE001 - every ending becomes a status
            context.finish()
            raise _failure(error, context) from None
        context.finish()
        if context.failed():  # a code set without an abort
            raise CallFailed(context.status(grpc.StatusCode.UNKNOWN, ""),
                             context.initial_metadata())
        _check_size(reply, "response", self._max_message_bytes)
        return reply

    async def unary_stream(self, method: str, request: Message, timeout_s: float,
                           metadata: Metadata = (), peer: str = "") -> InProcessStreamCall:
        """Starts a server-streaming call of `method`; read its messages from the returned call.

        Raises:
            CallFailed: the method is not served or not server-streaming, the request or the
                metadata is over its limit, or access control refused the call (the handler's
                own failures come from `read()`).
        """
        context = InProcessContext(metadata, timeout_s, peer)
        handler = await self._handler(method, request, context)
        if handler.unary_stream is None:
            raise CallFailed(_status(grpc.StatusCode.UNIMPLEMENTED,
                                     f"{method} is not a server-streaming method"))
        return InProcessStreamCall(handler.unary_stream(request, context), context,
                                   context.time_remaining(), self._max_message_bytes)

    async def _handler(self, method: str, request: Message,
                       context: InProcessContext) -> grpc.RpcMethodHandler:
        """The method's handler as the interceptors wrap it.

        Raises:
            CallFailed: the metadata or the request over its limit, or the method not served.
        """
        size = sum(len(key) + len(value) + METADATA_ENTRY_OVERHEAD
                   for key, value in context.invocation_metadata())
        if size > self._max_metadata_bytes:
            raise CallFailed(_status(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata: the request's metadata (its headers) is {size} bytes, over the limit "
                f"of {self._max_metadata_bytes} bytes"))
        _check_size(request, "request", self._max_message_bytes)
        handler = await self._intercepted(0, _HandlerCallDetails(method,
                                                                 context.invocation_metadata()))
        if handler is None:
            raise CallFailed(_status(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {method}"))
        return handler

    async def _intercepted(self, index: int,
                           details: _HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The handler interceptor `index` and those inside it return for the call."""
        if index == len(self._interceptors):
            return self._find(details)

        async def continuation(next_details: _HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            return await self._intercepted(index + 1, next_details)

        return await self._interceptors[index].intercept_service(continuation, details)

    def _find(self, details: _HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        for handler in self._handlers:
            found = handler.service(details)
            if found is not None:
                return found
        return None


class RecordingServer:
    """Stands in for a `grpc.aio.Server` while servicers are added: passes every registration on
    to `server` and keeps the generic handlers for an `InProcessServer`."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str,
                                       method_handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._server.add_registered_method_handlers(service_name, method_handlers)
