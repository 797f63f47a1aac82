"""The REST front's middleware (the Host/Origin guard, CORS with google.rpc.Status refusals), the
GET-only wrapper of its own endpoints, and its exception handlers: every error the front makes
itself is a `google.rpc.Status` body."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from libs.rest.bindings import Routable
from libs.rest.origins import HostOriginGuard, default_allowed_hosts
from libs.rest.settings import RestSettings
from libs.rest.status import code_status, status_response

log = logging.getLogger(__name__)


def middleware(settings: RestSettings, bindings: list[Routable]) -> list[Middleware]:
    """The Host/Origin guard, outermost, then CORS when origins are configured."""
    allowed_hosts = settings.allowed_hosts
    if allowed_hosts is None:
        allowed_hosts = default_allowed_hosts(settings.host)
    middleware = [Middleware(HostOriginGuard, allowed_hosts=allowed_hosts,
                             allowed_origins=settings.allowed_origins
                             + settings.cors_allowed_origins,
                             error_service=settings.error_service)]
    if settings.cors_allowed_origins:
        middleware.append(Middleware(
            _StatusCorsMiddleware, allow_origins=list(settings.cors_allowed_origins),
            allow_methods=sorted({b.http_method for b in bindings} | {"GET"}),
            allow_headers=list(CORS_ALLOWED_HEADERS), expose_headers=list(CORS_EXPOSED_HEADERS),
            max_age=settings.cors_max_age_s))
    return middleware


class GetOnly:
    """An ASGI app serving `endpoint` for GET and HEAD; 405 with `Allow` and a google.rpc.Status
    body for any other method (a Starlette route limited to GET would let other methods fall
    through to the gateway's catch-all, a 404)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self._endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method in ("GET", "HEAD"):
            response = await self._endpoint(request)
        else:
            response = status_response(
                code_status(grpc.StatusCode.UNIMPLEMENTED, "Method Not Allowed"),
                {"Allow": "GET, HEAD"}, status_code=405)
        await response(scope, receive, send)


CORS_ALLOWED_HEADERS = ("Content-Type", "Authorization", "X-Api-Key", "Grpc-Timeout",
                        "Traceparent", "Tracestate")
"""Request headers a browser may send cross-site (when CORS is on)."""
CORS_EXPOSED_HEADERS = ("Retry-After", "Grpc-Metadata-X-Served-By")
"""Response headers a cross-site script may read besides the CORS-safelisted ones."""


class _StatusCorsMiddleware(CORSMiddleware):
    """Starlette's CORSMiddleware, whose refused preflight (a plain-text 400) becomes a 403 with a
    `google.rpc.Status` body (PERMISSION_DENIED) like every other error of the front."""

    def preflight_response(self, request_headers) -> Response:  # type: ignore[no-untyped-def]
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {key: value for key, value in response.headers.items()
                   if key.lower() not in ("content-length", "content-type")}
        reason = bytes(response.body).decode("utf-8", "replace")
        return status_response(
            code_status(grpc.StatusCode.PERMISSION_DENIED, f"CORS preflight refused: {reason}"),
            headers, status_code=403)


async def http_exception(_: Request, error: Exception) -> Response:
    """Starlette's own HTTP errors (405 on /health, /ready, /openapi.json) as google.rpc.Status.

    Raises:
        TypeError: `error` is not an HTTPException (the handler is registered for that type only).
    """
    if not isinstance(error, HTTPException):
        raise TypeError(f"the HTTPException handler got a {type(error).__name__}")
    codes = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED}
    code = codes.get(error.status_code, grpc.StatusCode.INVALID_ARGUMENT)
    return status_response(code_status(code, str(error.detail)), dict(error.headers or {}),
                           status_code=error.status_code)


async def unexpected_exception(request: Request, error: Exception) -> Response:
    """A bug: logged with its traceback, answered 500 INTERNAL without it."""
    log.error("REST %s %s failed", request.method, request.url.path, exc_info=error)
    return status_response(code_status(grpc.StatusCode.INTERNAL,
                                       "internal error in the REST front"))
