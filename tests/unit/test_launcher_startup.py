"""How `start_mesh` brings the mesh up: all five services at once (the orchestrator does not wait
for its backends), then it waits for each one's port file and for the orchestrator to report every
backend SERVING (a real gRPC health server stands in for the orchestrator)."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.services import BACKENDS, NAMES
from mcts_mesh import launcher, startup
from mcts_mesh.launcher import LaunchError, Mesh


def test_start_mesh_starts_all_five_before_waiting_for_any(monkeypatch, tmp_path):
    events: list[tuple] = []
    monkeypatch.setattr(Mesh, "launch", lambda self, name, append_log=False:
                        events.append(("launch", name)))
    monkeypatch.setattr(launcher, "wait_until_ready",
                        lambda mesh, names, timeout_s: events.append(("ready", tuple(names))))
    monkeypatch.setattr(launcher, "wait_until_backends_seen",
                        lambda mesh, deadline: events.append(("seen",)))
    launcher.start_mesh(port_base=0, rest_port=None, log_dir=tmp_path)
    assert events == [*(("launch", name) for name in NAMES), ("ready", tuple(NAMES)), ("seen",)]


@pytest.fixture
def orchestrator_health():
    """A gRPC health service on a free loopback port, every backend NOT_SERVING at first."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    for backend in BACKENDS:
        servicer.set(backend.grpc_service, health_pb2.HealthCheckResponse.NOT_SERVING)
    yield port, servicer
    server.stop(0)


def _mesh(port: int, tmp_path) -> Mesh:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    mesh = Mesh(ports={"orchestrator": port}, run_dir=tmp_path,
                processes={"orchestrator": process}, logs={"orchestrator": tmp_path / "o.log"})
    return mesh


def test_the_wait_ends_once_the_orchestrator_sees_every_backend(orchestrator_health, tmp_path):
    port, servicer = orchestrator_health
    mesh = _mesh(port, tmp_path)
    try:
        with grpc.insecure_channel(mesh.target) as channel:
            unseen = startup.backends_not_seen(health_pb2_grpc.HealthStub(channel))
        assert unseen == {backend.name: "NOT_SERVING" for backend in BACKENDS}
        for backend in BACKENDS:
            servicer.set(backend.grpc_service, health_pb2.HealthCheckResponse.SERVING)
        startup.wait_until_backends_seen(mesh, time.monotonic() + 60)
    finally:
        mesh.processes["orchestrator"].kill()
        mesh.processes["orchestrator"].wait()


def test_a_backend_the_orchestrator_never_sees_is_named(orchestrator_health, tmp_path):
    port, servicer = orchestrator_health
    for backend in BACKENDS[:-1]:
        servicer.set(backend.grpc_service, health_pb2.HealthCheckResponse.SERVING)
    mesh = _mesh(port, tmp_path)
    try:
        with pytest.raises(LaunchError, match=f"does not see {BACKENDS[-1].name} "
                                              r"\(NOT_SERVING\)"):
            startup.wait_until_backends_seen(mesh, time.monotonic() + 0.5)
    finally:
        mesh.processes["orchestrator"].kill()
        mesh.processes["orchestrator"].wait()
