"""Serving a REST front's app on uvicorn, embedded in a process that owns its signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import uvicorn
from starlette.applications import Starlette

from libs.rest.protocol import bounded_protocol
from libs.rest.settings import RestSettings

log = logging.getLogger(__name__)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the process that embeds it owns SIGTERM/SIGINT."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class RunningRest:
    """A started REST server: `port` is the bound port, `stop()` drains and stops it."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], port: int,
                 closing: asyncio.Event | None = None) -> None:
        self.port = port
        self._server = server
        self._task = task
        self._closing = closing

    def connection_sockets(self) -> list[socket.socket]:
        """The sockets of the connections open now (their options can be read; for tests and
        diagnostics)."""
        sockets = []
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                sockets.append(sock)
        return sockets

    async def stop(self) -> None:
        """Stops accepting and lets in-flight requests finish; open watches (SSE) end at once,
        their clients resuming with Last-Event-ID."""
        if self._closing is not None:
            self._closing.set()
        self._server.should_exit = True
        await self._task


async def serve_rest(app: Starlette, host: str, port: int, drain_grace_s: float = 5.0
                     ) -> RunningRest:
    """Starts `app` on uvicorn at host:port (0 binds a free port) and returns once it listens.

    `RunningRest.stop()` gives in-flight requests `drain_grace_s` seconds before cancelling them.

    Raises:
        RuntimeError: the server did not start (port taken, app start-up failed).
    """
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when their protocol
    # says TCP (accepted sockets inherit the listening socket's), see `libs.rest.app`'s docstring.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise RuntimeError(f"REST: could not bind {host}:{port}: {error}") from error
    bound_port = sock.getsockname()[1]
    # log_config=None: uvicorn's records propagate to the root handler (the service's JSON lines).
    settings = getattr(app.state, "rest_settings", None) or RestSettings()
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                            log_config=None,
                            http=bounded_protocol(settings.max_head_bytes, settings.max_headers,
                                                  settings.head_timeout_s,
                                                  settings.error_service),
                            timeout_graceful_shutdown=drain_grace_s)
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            error = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"REST: server on {host}:{bound_port} failed to start") from error
        await asyncio.sleep(0.01)
    log.info("REST front listening on http://%s:%d", host, bound_port)
    return RunningRest(server, task, bound_port, getattr(app.state, "rest_closing", None))
