"""Health and supervision of the whole mesh, run as a user runs it: `mcts-mesh up` (supervising,
port base 0, so concrete free ports are chosen up front) with every service a real process.

- A frozen mcts (SIGSTOP): the orchestrator's health reports "mesh.mcts.v1.MctsService" UNKNOWN
  within a few seconds while its own status stays SERVING, and /ready answers 200 listing mcts as
  UNKNOWN; mcts's own "liveness" check times out (what restarts it in Kubernetes); after SIGCONT
  it is SERVING again and was not restarted.
- A killed mcts (SIGKILL): reported NOT_SERVING, restarted by `up` on the same port, reported
  SERVING again, and a solve through the orchestrator uses mcts again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

MCTS = "mesh.mcts.v1.MctsService"
ORCHESTRATOR = "mesh.orchestrator.v1.OrchestratorService"
DEPENDENCIES = {"mcts": MCTS, "neural": "mesh.neural.v1.NeuralService",
                "retrieval": "mesh.retrieval.v1.RetrievalService",
                "llm": "mesh.llm.v1.LlmService"}
STATUS = health_pb2.HealthCheckResponse


class UpProcess:
    """`mcts-mesh up` in a child process: its ports (from its "mesh up" line) and its services'
    process ids (its children, by command line)."""

    def __init__(self, process: subprocess.Popen, ports: dict[str, int], rest_port: int,
                 log: Path) -> None:
        self.process = process
        self.ports = ports
        self.rest_port = rest_port
        self.log = log

    def pid_of(self, service: str) -> int:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        for pid in children.read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"serve" in cmdline and service.encode() in cmdline:
                return int(pid)
        raise AssertionError(f"no running {service} under `up`")


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    data = tmp_path_factory.mktemp("mesh-health")
    log = data / "up.log"
    env = {**os.environ, "RETRIEVAL_DATA_DIR": str(data / "retrieval"),
           "LLM_FALLBACK_ORDER": '["offline"]',
           "ORCHESTRATOR_HEALTH_INTERVAL_S": "0.5", "ORCHESTRATOR_HEALTH_TIMEOUT_S": "1.0"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "up", "--port-base", "0", "--rest-port", "0",
             "--log-dir", str(data / "logs"), "--restart-backoff", "0.2"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    line = None
    while line is None:
        assert process.poll() is None, f"`up` exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the mesh did not come up:\n{log.read_text()}"
        line = next((x for x in log.read_text().splitlines() if x.startswith("mesh up in")), None)
        time.sleep(0.2)
    ports = {name: int(port) for name, port in re.findall(r"(\w+) :(\d+)", line)}
    running = UpProcess(process, ports, ports.pop("REST"), log)
    yield running
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def orchestrator_status(up: UpProcess, service: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{up.ports['orchestrator']}") as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5).status


def wait_for(up: UpProcess, service: str, wanted: set[int], within_s: float) -> float:
    """Seconds until the orchestrator reports `service` in one of `wanted`."""
    started = time.monotonic()
    while (status := orchestrator_status(up, service)) not in wanted:
        assert time.monotonic() - started < within_s, \
            f"{service} still {STATUS.ServingStatus.Name(status)} after {within_s} s"
        time.sleep(0.1)
    return time.monotonic() - started


def ready(up: UpProcess) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{up.rest_port}/ready", timeout=10)


def states(response: httpx.Response) -> dict[str, str]:
    return {d["name"]: d["state"] for d in response.json()["dependencies"]}


def test_every_dependency_is_reported_under_its_service_name(up):
    for service in DEPENDENCIES.values():
        wait_for(up, service, {STATUS.SERVING}, within_s=30)
    reply = ready(up)
    assert reply.status_code == 200
    assert reply.json()["status"] == "SERVING"
    # The four backends under their service names, and the durable runs' store.
    assert states(reply) == dict.fromkeys([*DEPENDENCIES, "run_store"], "SERVING")
    assert {d["service"] for d in reply.json()["dependencies"]} == \
        {*DEPENDENCIES.values(), "run_store"}


def test_a_frozen_dependency_is_unknown_within_seconds_and_the_front_stays_ready(up):
    wait_for(up, MCTS, {STATUS.SERVING}, within_s=30)
    pid = up.pid_of("mcts")
    os.kill(pid, signal.SIGSTOP)
    try:
        # Checked every 0.5 s with a 1 s deadline: a frozen peer shows within a few seconds.
        wait_for(up, MCTS, {STATUS.UNKNOWN}, within_s=10)
        assert orchestrator_status(up, "") == STATUS.SERVING
        assert orchestrator_status(up, ORCHESTRATOR) == STATUS.SERVING
        reply = ready(up)
        assert reply.status_code == 200
        assert states(reply)["mcts"] == "UNKNOWN"
        assert states(reply)["neural"] == "SERVING"
        mcts = next(d for d in reply.json()["dependencies"] if d["name"] == "mcts")
        assert mcts["detail"] == "no answer within 1.0 s"
        # What a Kubernetes liveness probe on the "liveness" name sees of a wedged process.
        with grpc.insecure_channel(f"127.0.0.1:{up.ports['mcts']}") as channel:
            with pytest.raises(grpc.RpcError) as caught:
                health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service="liveness"), timeout=1)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(up, MCTS, {STATUS.SERVING}, within_s=10)
    assert up.pid_of("mcts") == pid, "a frozen service must not be restarted by `up`"


def test_a_killed_dependency_is_restarted_on_its_port_and_used_again(up):
    wait_for(up, MCTS, {STATUS.SERVING}, within_s=30)
    pid = up.pid_of("mcts")
    os.kill(pid, signal.SIGKILL)
    wait_for(up, MCTS, {STATUS.NOT_SERVING, STATUS.UNKNOWN}, within_s=10)
    assert ready(up).status_code == 200
    wait_for(up, MCTS, {STATUS.SERVING}, within_s=300)
    assert up.pid_of("mcts") != pid
    assert "restarting mcts (restart 1 in a row, 1 in all) on port " \
           f"{up.ports['mcts']}" in up.log.read_text()
    # The supervisor logs "back" when its own poll sees SERVING, which can be a moment after ours.
    back = f"mcts is back: SERVING on port {up.ports['mcts']}"
    deadline = time.monotonic() + 30
    while back not in up.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert back in up.log.read_text()

    with grpc.insecure_channel(f"127.0.0.1:{up.ports['orchestrator']}") as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        response = stub.SolveProblem(pb.SolveProblemRequest(
            connect_four=common_pb2.ConnectFourPosition(moves="4453"),
            agents=[pb.AGENT_MCTS], simulations=2000, seed=1), timeout=60)
    assert pb.AGENT_MCTS in response.agents
    assert any(vote.agent == pb.AGENT_MCTS for vote in response.votes)
    assert response.search_statistics.simulations > 0
    assert states(ready(up)) == dict.fromkeys([*DEPENDENCIES, "run_store"], "SERVING")
