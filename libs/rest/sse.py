"""Server-streaming watches over REST as Server-Sent Events (the WHATWG HTML standard's
`text/event-stream`), resumable with `Last-Event-ID`.

A server-streaming method named in `Extras.watches` is served as SSE instead of newline-delimited
JSON. Each streamed message is one event: `id: <the message's sequence field>` (omitted when 0) and
`data: <the message as proto3 JSON, on one line>`, with no `event:` field (so a browser's
`EventSource.onmessage` sees it). A reconnecting client sends the last id it saw as
`Last-Event-ID` (browsers do so by themselves); the front puts it into the request's resume field
(`after_sequence`), over any value of the query, so the service sends only later events. Comment
lines (`: ping - <time>`) are sent every `sse_heartbeat_s` seconds of silence, so proxies keep the
connection open and a client can tell a quiet watch from a dead one. When the call ends normally
the stream's last event is `event: end` (no id, empty data object): the watched resource is
finished and a client should not reconnect. A failure after the stream started is a last
`event: error` whose data is the `google.rpc.Status` (a `DEADLINE_EXCEEDED` there means the
connection's deadline passed: reconnect with `Last-Event-ID`). A failure before the first event
(unknown resource, bad request, refused key) is an ordinary error response with its HTTP status.

The stream is sse-starlette's `EventSourceResponse` (heartbeats, disconnect detection). A client
that goes away cancels the call; a front that stops (`closing` set) ends its streams at once
without `event: end`, so their clients resume elsewhere or after the restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from sse_starlette import EventSourceResponse, ServerSentEvent

from libs.errors import InvalidArgument
from libs.in_process import CallFailed, InProcessStreamCall
from libs.rest.status import status_json
from libs.rest.transcoding import response_json

EVENT_STREAM = "text/event-stream"
LAST_EVENT_ID = "last-event-id"
END_EVENT = "end"
ERROR_EVENT = "error"
_MAX_ID_DIGITS = 19  # an int64 sequence


@dataclass(frozen=True)
class SseWatch:
    """How one server-streaming method is served as SSE.

    Attributes:
        id_field: the streamed message's integer field that is each event's id (its sequence).
        resume_field: the request's integer field that `Last-Event-ID` sets (the service sends
            only messages with a larger `id_field`).
    """

    id_field: str = "sequence"
    resume_field: str = "after_sequence"


def apply_last_event_id(request: Message, watch: SseWatch, headers: Mapping[str, str]) -> None:
    """Sets `request`'s resume field from a `Last-Event-ID` header, when there is one (it wins over
    the query's value: it is what the client saw last).

    Raises:
        InvalidArgument: the header is not a non-negative integer (names `Last-Event-ID`).
    """
    value = headers.get(LAST_EVENT_ID)
    if value is None:
        return
    value = value.strip()
    if not value.isdigit() or not value.isascii() or len(value) > _MAX_ID_DIGITS:
        raise InvalidArgument("Last-Event-ID", f"must be the sequence number of an event "
                                               f"(a non-negative integer), got {value[:40]!r}")
    setattr(request, watch.resume_field, int(value))


def message_event(message: Message, watch: SseWatch) -> ServerSentEvent:
    """The SSE event of one streamed message: its sequence as the id, its proto3 JSON as data."""
    sequence = getattr(message, watch.id_field)
    return ServerSentEvent(data=response_json(message).decode("utf-8"),
                           id=str(sequence) if sequence else None, sep="\n")


def error_event(status: object) -> ServerSentEvent:
    """The last event of a stream whose call failed: `event: error`, the google.rpc.Status."""
    return ServerSentEvent(data=status_json(status).decode("utf-8"),  # type: ignore[arg-type]
                           event=ERROR_EVENT, sep="\n")


class SseStream(EventSourceResponse):
    """The SSE response of one watch call (see the module docstring); `first` is the read of
    the call's first message, already started. `span` (set by the gateway) ends with the
    stream."""

    def __init__(self, call: InProcessStreamCall, first: asyncio.Future, watch: SseWatch,
                 headers: dict[str, str], heartbeat_s: float, closing: asyncio.Event) -> None:
        self._call = call
        self._watch = watch
        self._closing = closing
        self.span: trace.Span | None = None
        super().__init__(self._events(first), headers=headers, ping=heartbeat_s, sep="\n")

    async def _events(self, first: asyncio.Future) -> AsyncIterator[ServerSentEvent]:
        read: asyncio.Future = first
        closing = asyncio.ensure_future(self._closing.wait())
        error: str | None = None
        try:
            while True:
                await asyncio.wait({read, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    error = "the REST front is stopping"
                    return
                try:
                    message = read.result()
                except CallFailed as failure:
                    error = str(failure)
                    yield error_event(failure.status)
                    return
                if message is grpc.aio.EOF:
                    yield ServerSentEvent(data="{}", event=END_EVENT, sep="\n")
                    return
                yield message_event(message, self._watch)
                read = asyncio.ensure_future(self._call.read())
        except asyncio.CancelledError:
            error = "the HTTP client went away"
            raise
        finally:
            closing.cancel()
            read.cancel()
            self._call.cancel()  # no-op once the call has ended
            self._end_span(error)

    def _end_span(self, error: str | None) -> None:
        if self.span is None:
            return
        if error is not None:
            self.span.set_status(StatusCode.ERROR, error)
        self.span.end()
        self.span = None


async def first_read(call: InProcessStreamCall, wait_s: float) -> asyncio.Future:
    """Starts reading the call's first message and waits up to `wait_s` seconds for it, so that a
    call failing at once (unknown resource, bad request) is answered with its HTTP status rather
    than inside a started stream. Returns the read (done or still pending).

    Raises:
        CallFailed: the call failed before its first message, within `wait_s`.
    """
    read = asyncio.ensure_future(call.read())
    try:
        await asyncio.wait({read}, timeout=wait_s)
    except asyncio.CancelledError:
        read.cancel()
        raise
    if read.done() and read.exception() is not None:
        raise read.exception()  # type: ignore[misc]
    return read
