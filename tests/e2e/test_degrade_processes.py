"""Degrade, don't hang, with real processes on loopback (`mcts-mesh serve` children on free ports):

- a Connect Four request whose mcts and neural services are down (one refuses connections, the
  other accepts them and never speaks: a frozen process as a new connection sees it) costs about
  the connect timeout, not its deadline, and is answered by the checker, naming both failures;
- with the LLM gateway frozen (SIGSTOP) a text query answers with the retrieved passages, flagged
  `passages_only`, before its deadline, and answers normally again once the gateway resumes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses SIGSTOP and /proc")

# A late Pons position (Test_L3_R1, first line) that the checker solves in a few nodes.
LATE = "2252576253462244111563365343671351441"


class Service:
    """One `mcts-mesh serve NAME` child process."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path) -> None:
        self.name = name
        self.port_file = tmp / f"{name}.json"
        self.log = tmp / f"{name}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mcts_mesh.cli", "serve", name,
                 "--port-file", str(self.port_file)],
                env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def wait_ready(self, timeout_s: float = 300) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
            if self.port_file.exists() and self.port_file.stat().st_size:
                return int(json.loads(self.port_file.read_text())["grpc"])
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready in {timeout_s} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def services(tmp_path):
    started: list[Service] = []

    def start(name: str, env: dict[str, str]) -> tuple[Service, int]:
        service = Service(name, env, tmp_path)
        started.append(service)
        return service, service.wait_ready()

    yield start
    for service in reversed(started):
        service.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_downstreams_that_are_down_cost_a_connect_timeout_not_the_deadline(services):
    silent = socket.socket()  # accepts TCP connections, never answers the HTTP/2 handshake
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        _, port = services("orchestrator", {
            "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "-1",
            "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{silent.getsockname()[1]}",
            "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{_free_port()}",
            "ORCHESTRATOR_CONNECT_TIMEOUT_S": "0.5"})
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
            request = pb.SolveProblemRequest(
                connect_four=common_pb2.ConnectFourPosition(moves=LATE))
            started = time.monotonic()
            response = stub.SolveProblem(request, timeout=30)
            elapsed = time.monotonic() - started
            # The 0.5 s connect timeout, its retries and reconnect backoff, not the 30 s deadline.
            assert elapsed < 10, elapsed
            assert response.answered_by == pb.AGENT_CHECKER
            assert {f.agent: f.code for f in response.failures} == {
                pb.AGENT_MCTS: "UNAVAILABLE", pb.AGENT_NEURAL: "UNAVAILABLE"}
            for failure in response.failures:
                assert "127.0.0.1" not in failure.message and "ipv4" not in failure.message
            # Nothing but the down services left to answer an early position: UNAVAILABLE,
            # naming the service, not its address.
            with pytest.raises(grpc.RpcError) as caught:
                stub.SolveProblem(pb.SolveProblemRequest(
                    connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                    agents=[pb.AGENT_MCTS]), timeout=30)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert caught.value.details().startswith("mcts failed: UNAVAILABLE")
            assert "127.0.0.1" not in caught.value.details()
    finally:
        silent.close()


def test_a_frozen_llm_gives_the_passages_before_the_deadline(services, tmp_path):
    retrieval, retrieval_port = services("retrieval", {
        "RETRIEVAL_PORT": "0", "RETRIEVAL_DATA_DIR": str(tmp_path / "retrieval")})
    gateway, gateway_port = services("llm", {
        "LLM_PORT": "0", "LLM_FALLBACK_ORDER": '["offline"]'})
    _, port = services("orchestrator", {
        "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "-1",
        "ORCHESTRATOR_RETRIEVAL_TARGET": f"127.0.0.1:{retrieval_port}",
        "ORCHESTRATOR_LLM_TARGET": f"127.0.0.1:{gateway_port}",
        "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{_free_port()}",
        "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{_free_port()}"})
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        stub.IngestDocuments(pb.IngestDocumentsRequest(collection="facts", documents=[
            common_pb2.Document(id="tides", title="Tides",
                                text="Tides are caused by the gravity of the Moon and the Sun."),
            common_pb2.Document(id="bread", title="Bread",
                                text="Bread rises because yeast makes carbon dioxide.")]),
            timeout=300)
        query = pb.AnswerQueryRequest(query="What causes tides?", collection="facts", top_k=2)
        normal = stub.AnswerQuery(query, timeout=60)
        assert normal.answer and not normal.passages_only and not normal.failures

        gateway.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            frozen = stub.AnswerQuery(query, timeout=3)
            assert time.monotonic() - started < 3
            assert frozen.passages_only and frozen.answer == ""
            assert frozen.sources[0].document_id == "tides"
            assert [(f.agent, f.code) for f in frozen.failures] == [
                (pb.AGENT_LLM, "DEADLINE_EXCEEDED")]
        finally:
            gateway.process.send_signal(signal.SIGCONT)
        again = stub.AnswerQuery(query, timeout=60)
        assert again.answer and not again.passages_only
    assert retrieval.process.poll() is None
