"""uvicorn's httptools protocol with a bounded request head.

uvicorn keeps every header of a request in a Python list and grows the request target with `bytes`
concatenation, with no limit on either: a client could make one connection hold any amount of
memory, and a target sent in many small pieces costs quadratic time to assemble. This protocol
counts the request target and header bytes as the parser delivers them, keeps the target in a
bytearray, and answers a head over `max_head_bytes` (431, or 414 when the target alone is over) or
with more than `max_headers` headers (431) itself, with a `google.rpc.Status` body, closing the
connection without reading on. httptools itself refuses a target of 64 KiB or more (400).

uvicorn also waits for a head without limit (its keep-alive timeout runs only between requests):
a head not complete `head_timeout_s` after its first byte, or after the connection opened, is
answered 408 (DEADLINE_EXCEEDED), and a connection that sent nothing by then is closed.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import grpc
import httptools
from google.rpc import status_pb2
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from libs.errors import InvalidArgument, to_status
from libs.rest.status import code_status, status_json


class HeadTooLarge(InvalidArgument):
    """The request head is over a limit; `http_status` is 414 or 431."""

    def __init__(self, http_status: int, field: str, description: str) -> None:
        super().__init__(field, description)
        self.http_status = http_status


class _GuardedParser:
    """The httptools parser, whose callback errors for an oversized head become an answer."""

    def __init__(self, parser: httptools.HttpRequestParser, protocol: BoundedHttpToolsProtocol
                 ) -> None:
        self._parser = parser
        self._protocol = protocol

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if not isinstance(error.__context__, HeadTooLarge):
                raise
            refusal = error.__context__
            self._protocol.refuse(refusal.http_status,
                                  to_status(refusal, self._protocol.error_service))

    def __getattr__(self, name: str) -> object:
        return getattr(self._parser, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with `max_head_bytes`, `max_headers` and `head_timeout_s` (set by
    `bounded_protocol`)."""

    max_head_bytes = 128 * 1024
    max_headers = 100
    head_timeout_s = 10.0
    error_service = "rest"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.parser = _GuardedParser(self.parser, self)  # type: ignore[assignment]
        self._target = bytearray()
        self._head_bytes = 0
        self._refused = False
        self._in_head = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._target = bytearray()
        self._head_bytes = 0
        self._in_head = True
        if self._head_timer is None:
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._target += url
        self._count(len(url), "request target")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value), "headers")
        if len(self.headers) >= self.max_headers:
            raise HeadTooLarge(431, "headers", f"more than {self.max_headers} headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        self.url = bytes(self._target)
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        self._head_timer = asyncio.get_running_loop().call_later(self.head_timeout_s,
                                                                 self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._refused or self.transport.is_closing():
            return
        if not self._in_head:
            self.transport.close()  # nothing sent since the connection opened
            return
        self.refuse(408, code_status(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"the request head did not arrive within {self.head_timeout_s:g} s"))

    def _count(self, size: int, what: str) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            status = 414 if what == "request target" else 431
            raise HeadTooLarge(status, what, "the request target and headers pass "
                               f"{self.max_head_bytes:,} bytes")

    def refuse(self, http_status: int, status: status_pb2.Status) -> None:
        """Answers `status` with `http_status` and closes the connection; the rest of what the
        client sends is ignored."""
        self._refused = True
        self._cancel_head_timer()
        body = status_json(status)
        phrase = HTTPStatus(http_status).phrase
        self.transport.write(
            f"HTTP/1.1 {http_status} {phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode("ascii") + body)
        self.transport.close()


def bounded_protocol(max_head_bytes: int, max_headers: int, head_timeout_s: float = 10.0,
                     error_service: str = "rest") -> type[BoundedHttpToolsProtocol]:
    """A BoundedHttpToolsProtocol class with these limits, for `uvicorn.Config(http=...)`;
    `error_service` names the front in the ErrorInfo of its refusals."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,),
                {"max_head_bytes": max_head_bytes, "max_headers": max_headers,
                 "head_timeout_s": head_timeout_s, "error_service": error_service})
