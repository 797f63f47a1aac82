"""The web console's routes on the REST front: `/console/` serves the static files of
`services/orchestrator/console` (HTML, ES modules, CSS; package data, nothing fetched from
elsewhere), and `/console/config.json` what the page needs to know of the server (the Jaeger UI
address its trace links use).

Loading the pages needs no key: they hold nothing secret, and every API call they make carries the
key the user enters (kept in the browser's session storage). Each response carries a
Content-Security-Policy that lets the page load and call only its own origin, so a script
injected into a shown answer could neither run nor send anything elsewhere; the page itself
writes text into the document, never HTML. Only GET and HEAD are served (405 otherwise); a
missing file is 404; both as a `google.rpc.Status`, like every other error of the front.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.rest.middleware import GetOnly

CONSOLE_PATH = "/console"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Headers of every console response (no-cache: a browser revalidates, so an upgraded mesh serves
its new console at once; the ETag keeps that cheap)."""


def console_directory() -> Path:
    """The folder of the console's static files (inside the installed package)."""
    return Path(str(resources.files("services.orchestrator") / "console"))


def console_routes(jaeger_ui_url: str = "") -> tuple[BaseRoute, ...]:
    """The console's routes, to serve before the front's API routes (`Extras.pages`).

    Args:
        jaeger_ui_url: the Jaeger UI's address (no trailing slash) the console links traces to;
            empty: trace ids are shown without a link.
    """
    config = json.dumps({"jaeger_ui_url": jaeger_ui_url}).encode()

    async def redirect(_: Request) -> Response:
        return RedirectResponse(f"{CONSOLE_PATH}/", status_code=308, headers=SECURITY_HEADERS)

    async def config_json(_: Request) -> Response:
        return Response(config, media_type="application/json", headers=SECURITY_HEADERS)

    files = StaticFiles(directory=console_directory(), html=True)
    return (Route(CONSOLE_PATH, GetOnly(redirect)),
            Route(f"{CONSOLE_PATH}/config.json", GetOnly(config_json)),
            Mount(CONSOLE_PATH, app=_WithHeaders(files)))


class _WithHeaders:
    """An ASGI app that adds `SECURITY_HEADERS` to each response of `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._headers = [(name.lower().encode(), value.encode())
                         for name, value in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in self._headers}
                kept = [(name, value) for name, value in message.get("headers", [])
                        if name.lower() not in names]
                message = {**message, "headers": kept + self._headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)
