"""What the REST front checks before it parses a request: the query string's length (414) and
parameter count (400), the body's media type (415), its size (413, enforced while reading, so an
oversized body is never held whole), and how deep its JSON nests (400, checked on the raw bytes
before any JSON parser recurses into it).

Each failure is a `MeshError` carrying its HTTP status (`http_status`) and a `google.rpc` reason;
`status.error_response` turns it into a `google.rpc.Status` body.
"""

from __future__ import annotations

import grpc
import numpy as np
from starlette.requests import Request

from libs.errors import InvalidArgument, MeshError

JSON_MEDIA_TYPE = "application/json"
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


class RequestRefused(MeshError):
    """A request the front refuses before reading or parsing its body; `http_status` is the HTTP
    status of the answer, `code` the gRPC code in its `google.rpc.Status`. `close` asks the server
    to close the connection after answering (the body was not read to its end)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    http_status = 400
    close = False


class UnsupportedMediaType(RequestRefused):
    """HTTP 415: a body-carrying binding without `Content-Type: application/json`."""

    reason = "UNSUPPORTED_MEDIA_TYPE"
    http_status = 415
    close = True


class BodyTooLarge(RequestRefused):
    """HTTP 413: the body (by Content-Length, or as read so far) is over the limit."""

    reason = "BODY_TOO_LARGE"
    http_status = 413
    close = True


class BodyTooDeep(RequestRefused):
    """HTTP 400: the JSON body nests arrays and objects deeper than the limit."""

    reason = "BODY_TOO_DEEP"


class BadContentLength(RequestRefused):
    """HTTP 400: a Content-Length that is not a non-negative integer."""

    reason = "BAD_CONTENT_LENGTH"
    close = True


class QueryTooLong(InvalidArgument):
    """HTTP 414: the query string is longer than the limit (not parsed)."""

    http_status = 414

    def __init__(self, description: str) -> None:
        super().__init__("query", description)


class TooManyQueryParameters(InvalidArgument):
    """HTTP 400: the query string has more parameters than the limit (not parsed)."""

    def __init__(self, description: str) -> None:
        super().__init__("query", description)


def check_query(query: bytes, max_bytes: int, max_parameters: int) -> None:
    """Refuses a raw query string over `max_bytes` bytes or with more than `max_parameters`
    `&`-separated parameters, before it is decoded or parsed (two linear scans in C).

    Raises:
        QueryTooLong: more than `max_bytes` bytes.
        TooManyQueryParameters: more than `max_parameters` parameters.
    """
    if len(query) > max_bytes:
        raise QueryTooLong(f"the query string is {len(query):,} bytes; at most {max_bytes:,} "
                           "are accepted")
    parameters = query.count(b"&") + 1 if query else 0
    if parameters > max_parameters:
        raise TooManyQueryParameters(f"the query string has {parameters:,} parameters; at most "
                                     f"{max_parameters} are accepted")


def check_media_type(content_type: str | None) -> None:
    """Accepts `application/json` with any parameters (`; charset=utf-8`), in any case.

    A browser sends a cross-site POST without a CORS preflight only with `text/plain`,
    `application/x-www-form-urlencoded` or `multipart/form-data`; refusing everything but JSON
    means such a request is never executed.

    Raises:
        UnsupportedMediaType: no Content-Type, or another media type.
    """
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        shown = repr(content_type) if content_type else "none"
        raise UnsupportedMediaType(
            f"the request body must be JSON: send Content-Type: {JSON_MEDIA_TYPE} "
            f"(got {shown})")


async def read_body(request: Request, max_bytes: int, limit: str = "") -> bytes:
    """The request body, read chunk by chunk and abandoned as soon as it passes `max_bytes`
    (`limit`, when given, names that limit in the refusal, e.g. a setting's variable).

    Raises:
        BodyTooLarge: Content-Length or the bytes received exceed `max_bytes` (nothing more is
            read; the caller answers and closes the connection).
        BadContentLength: Content-Length is not a non-negative integer.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise BadContentLength(f"Content-Length {declared!r} is not a byte count")
        if int(declared) > max_bytes:
            raise BodyTooLarge(_too_large(f"is {int(declared):,} bytes", max_bytes, limit))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(_too_large(f"passed {max_bytes:,} bytes", max_bytes, limit))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(what: str, max_bytes: int, limit: str = "") -> str:
    named = f" ({limit})" if limit else ""
    return f"the request body {what}; at most {max_bytes:,} bytes are accepted{named}"


def json_depth(body: bytes) -> int:
    """How deep arrays and objects nest in the JSON text `body` (0 for a scalar, 1 for `{}`),
    counting only brackets outside strings; malformed text gets a best-effort count (the parser
    rejects it afterwards anyway).

    Linear time in numpy, no recursion: a quote counts as a string delimiter unless an odd number
    of backslashes precedes it; brackets between an opening and a closing quote are skipped.
    """
    data = np.frombuffer(body, dtype=np.uint8)
    if data.size == 0:
        return 0
    positions = np.arange(data.size)
    is_backslash = data == _BACKSLASH
    # index of the last character that is not a backslash, at or before each position
    last_plain = np.maximum.accumulate(np.where(is_backslash, -1, positions))
    quotes = np.flatnonzero(data == _QUOTE)
    before = quotes - 1
    run = np.where(before >= 0, before - last_plain[np.maximum(before, 0)], 0)
    delimiters = np.zeros(data.size, dtype=np.int32)
    delimiters[quotes[run % 2 == 0]] = 1
    outside = np.cumsum(delimiters) % 2 == 0  # closing quotes count as outside; harmless
    step = (np.isin(data, _OPEN).astype(np.int32) - np.isin(data, _CLOSE)) * outside
    return max(0, int(np.cumsum(step).max()))


def check_json_depth(body: bytes, max_depth: int) -> None:
    """Raises BodyTooDeep when the JSON `body` nests deeper than `max_depth` (a cheap count of
    opening brackets skips the scan for the usual shallow body)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return
    depth = json_depth(body)
    if depth > max_depth:
        raise BodyTooDeep(f"the request body nests JSON arrays and objects {depth} levels deep; "
                          f"at most {max_depth} are accepted")
