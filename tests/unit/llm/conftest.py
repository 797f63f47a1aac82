"""Fixtures: the fake provider server of `llm_wire`, one per module, reset for every test."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest
from llm_wire import ProviderWire, Reply, handler


@pytest.fixture(scope="module")
def _wire_server():
    wire = ProviderWire()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(wire))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    wire.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield wire
    server.shutdown()
    server.server_close()


@pytest.fixture
def wire(_wire_server: ProviderWire) -> ProviderWire:
    """The module's fake provider server, with an empty script and no recorded requests."""
    _wire_server.script.clear()
    _wire_server.requests.clear()
    _wire_server.default = Reply()
    _wire_server.respond = None
    return _wire_server
