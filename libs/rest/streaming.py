"""Server streaming over REST as grpc-gateway serves it: newline-delimited JSON, one
`{"result": <message>}` line per message as it arrives, a last `{"error": <google.rpc.Status>}` line
for a failure after the first message; and the watch that cancels a call when its HTTP client goes
away."""

from __future__ import annotations

import asyncio

import grpc
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from starlette.types import Receive, Scope, Send

from libs.in_process import CallFailed, InProcessStreamCall, InProcessUnaryCall
from libs.rest.status import status_json
from libs.rest.transcoding import response_json

NDJSON = "application/x-ndjson"


class NdjsonStream:
    """The ASGI response of a server-streaming call: 200, then one `{"result": ...}` line per
    message as it arrives (`first` already read), and `{"error": <google.rpc.Status>}` if the call
    fails. A client that disconnects cancels the call; the REST span ends with the stream."""

    status_code = 200

    def __init__(self, call: InProcessStreamCall, first: object, response_body: str,
                 headers: dict[str, str]) -> None:
        self._call = call
        self._first = first
        self._response_body = response_body
        self._headers = headers
        self.span: trace.Span | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", NDJSON.encode()), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")]
        headers += [(key.lower().encode("latin-1"), value.encode("latin-1"))
                    for key, value in self._headers.items()]
        disconnect = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            item = self._first
            while item is not grpc.aio.EOF:
                line = b'{"result":' + response_json(item, self._response_body) + b"}\n"
                await send({"type": "http.response.body", "body": line, "more_body": True})
                read = asyncio.ensure_future(self._call.read())
                await asyncio.wait({read, disconnect}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.cancel()
                    self._call.cancel()
                    self._end_span("the HTTP client went away")
                    return
                try:
                    item = read.result()
                except CallFailed as error:
                    line = b'{"error":' + status_json(error.status) + b"}\n"
                    await send({"type": "http.response.body", "body": line, "more_body": True})
                    self._end_span(str(error))
                    break
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnect.cancel()
            self._call.cancel()  # no-op once the call has ended
            self._end_span()

    def _end_span(self, error: str | None = None) -> None:
        if self.span is None:
            return
        if error is not None:
            self.span.set_status(StatusCode.ERROR, error)
        self.span.end()
        self.span = None


def cancel_on_disconnect(call: InProcessUnaryCall | InProcessStreamCall,
                         receive: Receive) -> asyncio.Task[None]:
    """A task that cancels `call` if the HTTP client disconnects (the caller cancels the task once
    it has what it waited for; a done task means the client went away)."""

    async def watch() -> None:
        await wait_for_disconnect(receive)
        call.cancel()

    return asyncio.ensure_future(watch())


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the ASGI `receive` says the HTTP client disconnected."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
