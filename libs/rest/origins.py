"""Which Host and Origin headers the REST front answers: a DNS-rebinding page (Host
`evil.example`, resolving to 127.0.0.1) and a cross-site script (Origin `https://evil.example`)
must not reach an API that loopback alone protects, keys or no keys.

Host: refused 421 (INVALID_ARGUMENT naming `Host`) unless its name, port ignored, is allowed. The
allowed names are the configured ones (an exact name, `*.example.com` for its subdomains, `*` for
any), or by default the loopback names (localhost, 127.0.0.1, [::1] and the bound address) when the
front binds a loopback address, and any name when it binds another interface.

Origin: a request carrying one is refused 403 (PERMISSION_DENIED) unless the origin is the
request's own (scheme, host and port of the Host header, as a same-origin page sends), one of the
configured allowed origins, or a CORS allowed origin (`*` there allows any). Requests without
Origin (curl, SDKs, servers) are not affected.

Both checks look at two headers only, in time linear in their length, before anything else runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import grpc
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from libs.errors import InvalidArgument, MeshError
from libs.rest.status import error_response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


class HostNotAllowed(InvalidArgument):
    """HTTP 421 Misdirected Request: the Host header names a host this front does not serve."""

    http_status = 421

    def __init__(self, description: str) -> None:
        super().__init__("Host", description)


class OriginNotAllowed(MeshError):
    """HTTP 403: a cross-site request from an origin that is not allowed."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "ORIGIN_NOT_ALLOWED"


def is_loopback(bind_host: str) -> bool:
    """Whether binding `bind_host` ("127.0.0.1", "::1", "localhost", "0.0.0.0") serves loopback
    only."""
    if bind_host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind_host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind_host: str) -> tuple[str, ...]:
    """The loopback names and the bound address when `bind_host` is loopback; ("*",) otherwise."""
    if not is_loopback(bind_host):
        return ("*",)
    bound = bind_host.strip("[]").lower()
    bound = f"[{bound}]" if ":" in bound else bound
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, bound)))


def split_host(value: str) -> tuple[str, str] | None:
    """A Host header ("api.example:8080", "[::1]:8080", "localhost") as (lowercase name with IPv6
    brackets and without a trailing dot, port or ""); None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (end + 1 < len(value) and value[end + 1] != ":"):
            return None
        name, port = value[:end + 1], value[end + 2:]
    else:
        name, _, port = value.partition(":")
    name = name.rstrip(".")
    if not name or (port and not port.isdigit()) or any(c in name for c in " /\\@?#"):
        return None
    return name, port


class HostOriginGuard:
    """ASGI middleware applying the Host and Origin rules of the module docstring.

    Args:
        app: the application behind it.
        allowed_hosts: host names ("*" any, "*.example.com" its subdomains); see
            `default_allowed_hosts` for the usual value.
        allowed_origins: origins ("https://app.example"; "*" any) allowed besides same-origin
            requests; CORS allowed origins belong here too.
        error_service: names the front in the ErrorInfo of its refusals.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str],
                 allowed_origins: Iterable[str] = (), error_service: str = "rest") -> None:
        self._app = app
        self._error_service = error_service
        hosts = {_normal_host(host) for host in allowed_hosts}
        self._any_host = "*" in hosts
        self._hosts = {host for host in hosts if not host.startswith("*.")}
        self._suffixes = tuple(host[1:] for host in hosts if host.startswith("*."))
        origins = {origin.strip().rstrip("/").lower() for origin in allowed_origins}
        self._any_origin = "*" in origins
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.check(headers.get("host"), headers.get("origin"))
        if refusal is not None:
            await error_response(refusal, self._error_service)(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def check(self, host: str | None, origin: str | None) -> MeshError | None:
        """Why a request with these Host and Origin headers is refused; None when it is not."""
        parts = split_host(host) if host else None
        if not self._any_host and (parts is None or not self._host_allowed(parts[0])):
            shown = repr(host[:100]) if host else "none"
            return HostNotAllowed(f"this server does not answer for host {shown}: set "
                                  "ORCHESTRATOR_REST_ALLOWED_HOSTS to serve it")
        if origin is None or self._any_origin:
            return None
        normal = origin.strip().rstrip("/").lower()
        if normal in self._origins or (parts is not None and _same_origin(normal, parts)):
            return None
        return OriginNotAllowed(f"cross-site requests from origin {origin[:100]!r} are not "
                                "allowed: set ORCHESTRATOR_REST_ALLOWED_ORIGINS or "
                                "ORCHESTRATOR_REST_CORS_ALLOWED_ORIGINS to allow it")

    def _host_allowed(self, name: str) -> bool:
        return name in self._hosts or name.endswith(self._suffixes)


def _normal_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if ":" in host and not host.startswith("["):  # a bare IPv6 address
        host = f"[{host}]"
    return host


def _same_origin(origin: str, host_parts: tuple[str, str]) -> bool:
    """Whether `origin` ("http://127.0.0.1:8080", lowercase) names the request's own host and
    port (a Host without a port means the origin scheme's default port)."""
    scheme, separator, rest = origin.partition("://")
    if not separator or scheme not in _DEFAULT_PORTS:
        return False
    parts = split_host(rest)
    if parts is None:
        return False
    name, port = parts
    host_name, host_port = host_parts
    default = _DEFAULT_PORTS[scheme]
    return name == host_name and (port or default) == (host_port or default)
