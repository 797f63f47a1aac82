"""libs.server: health follows readiness and then the service's probe, a taken port is named,
domain errors become statuses with details, the server keeps serving after a bad request, and
unexpected errors become INTERNAL without a stack trace."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import InvalidArgument
from libs.server import LIVENESS, BindError, Servicer, start_server
from libs.settings import ServiceSettings


class _Echo(llm_service_pb2_grpc.LlmServiceServicer):
    async def Generate(self, request, context):
        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        if request.prompt == "boom":
            raise RuntimeError("secret internals")
        return llm_service_pb2.GenerateResponse(text=request.prompt, provider="echo")


@pytest.fixture
async def server_and_gate():
    gate = asyncio.Event()

    async def ready():
        await gate.wait()

    task = asyncio.create_task(start_server(
        "echo", ServiceSettings(port=0),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, _Echo(),
                  "mesh.llm.v1.LlmService")],
        ready=ready,
    ))
    yield task, gate
    gate.set()
    running = await task
    await running.stop(0)


async def test_health_is_serving_only_after_ready(server_and_gate):
    task, gate = server_and_gate
    await asyncio.sleep(0.2)
    assert not task.done(), "start_server returned before ready() finished"
    gate.set()
    running = await task
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service="mesh.llm.v1.LlmService"),
                                   timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await running.stop(0)


async def test_errors_map_to_status_with_details_and_server_keeps_serving(server_and_gate):
    task, gate = server_and_gate
    gate.set()
    running = await task
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = llm_service_pb2_grpc.LlmServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(llm_service_pb2.GenerateRequest(prompt=""), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        status = rpc_status.from_call(caught.value)
        bad = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad)
        assert bad.field_violations[0].field == "prompt"

        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(llm_service_pb2.GenerateRequest(prompt="boom"), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert "secret internals" not in caught.value.details()
        assert "Traceback" not in caught.value.details()

        reply = await stub.Generate(llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5)
        assert reply.text == "hi"


async def _status(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5)
        return reply.status


async def _wait_status(port: int, service: str, wanted: int, within_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while (status := await _status(port, service)) != wanted:
        assert asyncio.get_running_loop().time() < deadline, \
            f"{service!r} stayed {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
        await asyncio.sleep(0.05)


def _echo_servicer() -> list[Servicer]:
    return [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, _Echo(),
                     "mesh.llm.v1.LlmService")]


async def test_health_follows_the_probe_while_the_service_runs():
    reason: list[str | None] = ["store closed"]
    calls = 0

    async def probe() -> str | None:
        nonlocal calls
        calls += 1
        return reason[0]

    running = await start_server(
        "echo", ServiceSettings(port=0, health_interval_s=0.05, health_timeout_s=1.0),
        _echo_servicer(), probe=probe)
    try:
        not_serving, serving = (health_pb2.HealthCheckResponse.NOT_SERVING,
                                health_pb2.HealthCheckResponse.SERVING)
        for service in ("", "mesh.llm.v1.LlmService"):
            assert await _status(running.port, service) == not_serving
        # Liveness says only that the process answers: SERVING whatever the readiness.
        assert await _status(running.port, LIVENESS) == serving
        reason[0] = None
        await _wait_status(running.port, "", serving)
        await _wait_status(running.port, "mesh.llm.v1.LlmService", serving)
        reason[0] = "every provider's circuit is open"
        await _wait_status(running.port, "mesh.llm.v1.LlmService", not_serving)
        assert running.readiness.reason == "every provider's circuit is open"
        assert calls >= 3
    finally:
        await running.stop(0)


async def test_a_probe_that_hangs_or_raises_means_not_serving():
    behaviour = ["ok"]
    release = asyncio.Event()
    started = 0

    async def probe() -> str | None:
        nonlocal started
        started += 1
        if behaviour[0] == "hang":
            await release.wait()
        if behaviour[0] == "raise":
            raise OSError("connection refused")
        return None

    running = await start_server(
        "echo", ServiceSettings(port=0, health_interval_s=0.05, health_timeout_s=0.1),
        _echo_servicer(), probe=probe)
    try:
        assert await _status(running.port, "") == health_pb2.HealthCheckResponse.SERVING
        behaviour[0] = "hang"
        await _wait_status(running.port, "", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert "no answer in 0.1 s" in running.readiness.reason
        hung_at = started
        await asyncio.sleep(0.5)
        assert started == hung_at, "a new probe started while one was still running"
        behaviour[0] = "raise"
        release.set()
        await _wait_status(running.port, "", health_pb2.HealthCheckResponse.NOT_SERVING)
        await asyncio.sleep(0.3)
        assert running.readiness.reason == "readiness probe failed: OSError: connection refused"
        behaviour[0] = "ok"
        await _wait_status(running.port, "", health_pb2.HealthCheckResponse.SERVING)
    finally:
        await running.stop(0)


class _Recorder:
    """A stand-in for the servicer context of `HealthServicer.Watch`, called in-process: it keeps
    every status the watch writes. (Over the wire, Watch fails: the error-mapping interceptor
    iterates what the health servicer's Watch returns, a coroutine, not a stream.)"""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.changed = asyncio.Event()

    async def write(self, reply: health_pb2.HealthCheckResponse) -> None:
        self.statuses.append(reply.status)
        self.changed.set()


class _Holding(llm_service_pb2_grpc.LlmServiceServicer):
    """Generate holds its call until the server cancels it: an in-flight call that keeps a
    stopping server draining for its whole grace period."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def Generate(self, request, context):
        self.entered.set()
        await asyncio.Event().wait()


async def test_health_goes_not_serving_on_stop_even_with_a_probe():
    """Health's watch sees SERVING, then NOT_SERVING as the stop begins, and nothing else while
    an in-flight call keeps the server draining for the 0.5 s grace period: the probe loop (every
    0.05 s, so about 10 rounds) never turns it back to SERVING, and Check says NOT_SERVING after."""
    async def probe() -> str | None:
        return None

    holding = _Holding()
    running = await start_server(
        "echo", ServiceSettings(port=0, health_interval_s=0.05),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, holding,
                  "mesh.llm.v1.LlmService")], probe=probe)
    recorder = _Recorder()
    watch = asyncio.create_task(
        running.health.Watch(health_pb2.HealthCheckRequest(service=""), recorder))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        held = asyncio.ensure_future(llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
            llm_service_pb2.GenerateRequest(prompt="hold"), timeout=30))
        await holding.entered.wait()
        await recorder.changed.wait()
        assert recorder.statuses == [health_pb2.HealthCheckResponse.SERVING]
        await running.stop(0.5)
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await held
        assert cut.value.code() != grpc.StatusCode.DEADLINE_EXCEEDED  # the stop ended it
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    assert recorder.statuses == [health_pb2.HealthCheckResponse.SERVING,
                                 health_pb2.HealthCheckResponse.NOT_SERVING]
    reply = await running.health.Check(health_pb2.HealthCheckRequest(service=""), recorder)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_taken_port_is_named_with_the_reason():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(BindError) as caught:
            await start_server("mcts", ServiceSettings(port=port), _echo_servicer())
    assert str(caught.value) == f"mcts: cannot bind 127.0.0.1:{port}: address already in use"
