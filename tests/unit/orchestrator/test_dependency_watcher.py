"""DependencyWatcher against real grpc.aio servers on loopback: a serving dependency, one whose
probe says not ready, one that stops (connection refused), and a socket that accepts but never
answers (what a frozen process looks like from the outside)."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2
from mesh.llm.v1 import llm_service_pb2_grpc

from libs.channels import channel_options
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.dependencies import Dependency, DependencyWatcher

SERVICE = "mesh.llm.v1.LlmService"


async def _start(reason: list[str | None]):
    async def probe() -> str | None:
        return reason[0]

    return await start_server(
        "llm", ServiceSettings(port=0, health_interval_s=0.05),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server,
                  llm_service_pb2_grpc.LlmServiceServicer(), SERVICE)], probe=probe)


@pytest.fixture
def black_hole():
    """A listening socket that never accepts a gRPC conversation: connects, then silence."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


async def test_states_follow_the_dependency_and_changes_are_reported(black_hole):
    reason: list[str | None] = [None]
    running = await _start(reason)
    changes: list[tuple[str, int]] = []

    async def on_change(service: str, status: int) -> None:
        changes.append((service, status))

    live = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    frozen = grpc.aio.insecure_channel(black_hole)
    watcher = DependencyWatcher(
        [Dependency("llm", SERVICE, live), Dependency("mcts", "mesh.mcts.v1.MctsService",
                                                              frozen)],
        interval_s=0.05, timeout_s=0.3, on_change=on_change)
    try:
        assert [s.state for s in watcher.states()] == ["UNKNOWN", "UNKNOWN"]
        await watcher.check_all()
        llm, mcts = watcher.states()
        assert (llm.state, mcts.state) == ("SERVING", "UNKNOWN")
        assert mcts.detail == "no answer within 0.3 s"
        assert changes == [(SERVICE, health_pb2.HealthCheckResponse.SERVING),
                           ("mesh.mcts.v1.MctsService", health_pb2.HealthCheckResponse.UNKNOWN)]

        await watcher.check_all()
        assert len(changes) == 2, "an unchanged state is not reported again"

        reason[0] = "every circuit is open"
        await running.readiness.apply(await running.readiness.evaluate())
        await watcher.check_all()
        assert watcher.states()[0].state == "NOT_SERVING"
        assert watcher.states()[0].detail == "answered NOT_SERVING"

        await running.stop(0)
        await watcher.check_all()
        assert watcher.states()[0].state == "NOT_SERVING"
        assert watcher.states()[0].detail == "unreachable (UNAVAILABLE)"
        report = watcher.report()
        assert report[0]["name"] == "llm" and report[0]["service"] == SERVICE
        assert report[0]["state"] == "NOT_SERVING" and report[0]["for_s"] >= 0
        assert changes[-1] == (SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    finally:
        await watcher.stop()
        await live.close()
        await frozen.close()
        await running.stop(0)


async def test_the_periodic_loop_picks_up_a_change():
    reason: list[str | None] = [None]
    running = await _start(reason)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    watcher = DependencyWatcher([Dependency("llm", SERVICE, channel)], interval_s=0.05,
                                timeout_s=1.0)
    watcher.start()
    try:
        for wanted in ("SERVING", "NOT_SERVING"):
            if wanted == "NOT_SERVING":
                reason[0] = "store closed"
            for _ in range(100):
                if watcher.states()[0].state == wanted:
                    break
                await asyncio.sleep(0.05)
            assert watcher.states()[0].state == wanted
    finally:
        await watcher.stop()
        await channel.close()
        await running.stop(0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_dependency_that_starts_after_the_watcher_is_seen_without_waiting_an_interval():
    """The whole mesh starts at once: a backend listens (and becomes ready) after the orchestrator
    first found nothing there. Over a mesh channel (its reconnection backoff), with a one-minute
    interval, the watcher still sees it SERVING within seconds (re-checks while it is not)."""
    port = _free_port()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=channel_options())
    watcher = DependencyWatcher([Dependency("llm", SERVICE, channel)], interval_s=60.0,
                                timeout_s=1.0)
    watcher.start()
    running = None
    try:
        for _ in range(200):  # the first check finds nothing listening
            if watcher.states()[0].detail == "unreachable (UNAVAILABLE)":
                break
            await asyncio.sleep(0.05)
        assert watcher.states()[0].state == "NOT_SERVING"
        running = await start_server(
            "llm", ServiceSettings(port=port, health_interval_s=0.05),
            [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server,
                      llm_service_pb2_grpc.LlmServiceServicer(), SERVICE)])
        for _ in range(200):
            if watcher.states()[0].state == "SERVING":
                break
            await asyncio.sleep(0.05)
        assert watcher.states()[0].state == "SERVING"
    finally:
        await watcher.stop()
        await channel.close()
        if running is not None:
            await running.stop(0)
