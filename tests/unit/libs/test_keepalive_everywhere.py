"""Every long-lived channel the project opens has the mesh's HTTP/2 keepalive (libs.channels.
Keepalive), not only the channels between services: the `mcts-mesh` client commands' channel, the
MCP server's, and the training workloads'.
A channel without it waits for its deadline when the peer freezes on an open connection (a
SIGSTOPped process, a node gone without a word); with it, the call fails UNAVAILABLE within
keepalive time + timeout (3 s by default)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import time
from pathlib import Path

import grpc
import pytest
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.channels import Keepalive
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from mcts_mesh.client import client_options, open_channel
from mcts_mesh.mcp_server import _Orchestrator

REPO = Path(__file__).resolve().parents[3]
HELPERS = {"channel_options", "client_options"}
"""The functions whose options a channel of the project must have (both include
`Keepalive.options()`)."""


def test_every_channel_in_the_code_takes_the_options_of_a_helper():
    """A static check over services/, libs/ and mcts_mesh/: each `insecure_channel(...)` or
    `secure_channel(...)` call passes `options=` built by `channel_options` or `client_options`."""
    calls = 0
    for folder in ("services", "libs", "mcts_mesh"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "stubs" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("insecure_channel", "secure_channel")):
                    continue
                calls += 1
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                options = next((k.value for k in node.keywords if k.arg == "options"), None)
                assert isinstance(options, ast.Call), f"{where}: a channel without options"
                name = getattr(options.func, "id", getattr(options.func, "attr", None))
                assert name in HELPERS, f"{where}: options from {name}, not {HELPERS}"
    assert calls >= 3  # libs.channels, the client commands, the MCP server


def test_client_channels_have_the_mesh_keepalive_and_message_limits():
    options = client_options([("grpc.http2.bdp_probe", 0)])
    assert set(Keepalive().options()) <= set(options)
    assert ("grpc.max_receive_message_length", 4 * 1024 * 1024) in options
    assert options[-1] == ("grpc.http2.bdp_probe", 0)


class _Slow(llm_service_pb2_grpc.LlmServiceServicer):
    """Answers after `prompt` seconds; `started` is set when a call arrives."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def Generate(self, request, context):
        self.started.set()
        await asyncio.sleep(float(request.prompt))
        return llm_service_pb2.GenerateResponse(text=request.prompt)


class _Relay:
    """A TCP relay to `upstream` that can freeze: the connections stay open and nothing more
    passes either way (a peer that froze, as SIGSTOP leaves it)."""

    def __init__(self, upstream: int) -> None:
        self._upstream = upstream
        self._open = asyncio.Event()
        self._open.set()
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._open.clear()

    async def _accept(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)

    async def _pipe(self, source, sink) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                await self._open.wait()
                sink.write(data)
                await sink.drain()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for writer in self._writers:
            writer.close()
        if self.server is not None:
            self.server.close()


@contextlib.asynccontextmanager
async def _frozen_mid_call():
    """(relay target, servicer) of a slow LlmService behind a relay, and a coroutine function
    that waits for a call to arrive, then freezes the relay and returns the time it did."""
    servicer = _Slow()
    server = await start_server("llm", ServiceSettings(port=0), [Servicer(
        llm_service_pb2_grpc.add_LlmServiceServicer_to_server, servicer,
        "mesh.llm.v1.LlmService")])
    relay = _Relay(server.port)
    port = await relay.start()

    async def freeze_when_called() -> float:
        await servicer.started.wait()
        relay.freeze()
        return time.monotonic()

    try:
        yield f"127.0.0.1:{port}", freeze_when_called
    finally:
        await relay.close()
        await server.stop(0)


DEADLINE_S = 30.0
FOUND_WITHIN_S = 10.0
"""Seconds after the freeze by which the call must have failed: keepalive time + timeout (3 s)
and slack for a loaded 2-core machine, a third of the call's deadline."""


@pytest.mark.slow
async def test_the_client_commands_channel_finds_a_frozen_orchestrator():
    async with _frozen_mid_call() as (target, freeze_when_called):
        channel = open_channel(target)
        stub = llm_service_pb2_grpc.LlmServiceStub(channel)
        call = asyncio.create_task(asyncio.to_thread(
            stub.Generate, llm_service_pb2.GenerateRequest(prompt="60"), timeout=DEADLINE_S))
        frozen_at = await freeze_when_called()
        with pytest.raises(grpc.RpcError) as failed:
            await call
        channel.close()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value
    assert time.monotonic() - frozen_at < FOUND_WITHIN_S


@pytest.mark.slow
async def test_the_mcp_servers_channel_finds_a_frozen_orchestrator():
    async with _frozen_mid_call() as (target, freeze_when_called):
        channel = _Orchestrator(target, DEADLINE_S).channel()
        call = llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
            llm_service_pb2.GenerateRequest(prompt="60"), timeout=DEADLINE_S)
        frozen_at = await freeze_when_called()
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call
        await channel.close()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value
    assert time.monotonic() - frozen_at < FOUND_WITHIN_S
