"""The whole mesh on loopback: five services as child processes on free ports, exactly as
`mcts-mesh up` starts them, exporting traces over OTLP to a collector this test runs.

Checks health, one Connect Four solve, one text query, one REST call with a bad field, and that the
solve's trace covers every service it touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent import futures

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

from mcts_mesh.launcher import start_mesh


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps (trace id, service name, span name) of every span."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str]] = []

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append((span.trace_id.hex(), service, span.name))
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture(scope="module")
def collector():
    receiver = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    server.stop(0)


@pytest.fixture(scope="module")
def mesh(collector, tmp_path_factory):
    _, collector_port = collector
    data = tmp_path_factory.mktemp("mesh-data")
    running = start_mesh(
        port_base=0, rest_port=0,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
            "RETRIEVAL_DATA_DIR": str(data / "retrieval"),
            "LLM_FALLBACK_ORDER": '["offline"]',
        },
        log_dir=data / "logs", ready_timeout_s=600,
    )
    yield running
    running.stop()


def test_every_service_reports_serving(mesh):
    for name, port in mesh.ports.items():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


async def test_connect_four_solve_is_one_trace_across_the_services_it_touched(mesh, collector):
    from libs.channels import open_channel

    receiver, _ = collector
    provider = TracerProvider()
    tracer = provider.get_tracer("e2e")
    channel = open_channel(mesh.target, tracer_provider=provider)
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    with tracer.start_as_current_span("e2e-solve") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        # A middle-game position: the checker cannot finish it cheaply, so mcts and neural both run.
        response = await stub.SolveProblem(pb.SolveProblemRequest(
            connect_four=common_pb2.ConnectFourPosition(moves="4453"), simulations=5000),
            timeout=120)
    await channel.close()
    assert 1 <= response.connect_four.column <= 7
    assert response.votes and response.agents
    assert response.search_statistics.simulations > 0

    touched = {pb.Agent.Name(a) for a in response.agents}
    expected = {"orchestrator"}
    expected |= {"mcts"} if "AGENT_MCTS" in touched else set()
    expected |= {"neural"} if "AGENT_NEURAL" in touched else set()
    assert expected >= {"orchestrator", "mcts"}
    deadline = time.monotonic() + 30
    services: set[str] = set()
    while time.monotonic() < deadline and not expected <= services:
        services = {service for tid, service, _ in receiver.spans if tid == trace_id}
        time.sleep(0.2)
    assert expected <= services, f"trace {trace_id} has spans from {services}, wanted {expected}"


def test_text_query_answers_with_sources(mesh):
    with grpc.insecure_channel(mesh.target) as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        stub.IngestDocuments(pb.IngestDocumentsRequest(collection="e2e", documents=[
            common_pb2.Document(id="heart", title="Hearts",
                                text="The human heart has four chambers that pump blood.",
                                source="test"),
            common_pb2.Document(id="moon", title="The Moon",
                                text="The Moon orbits the Earth about every 27 days.",
                                source="test"),
        ]), timeout=120)
        response = stub.AnswerQuery(pb.AnswerQueryRequest(
            query="How many chambers does the human heart have?", collection="e2e"), timeout=60)
    assert response.sources[0].document_id == "heart"
    assert "four chambers" in response.answer
    assert response.offline and response.provider


def test_rest_bad_field_is_400_naming_the_field(mesh):
    reply = httpx.post(f"http://127.0.0.1:{mesh.rest_port}/v1/problems:solve",
                       json={"connectFour": {"moves": "4489"}}, timeout=30)
    assert reply.status_code == 400
    body = reply.json()
    assert body["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    violations = [v for d in body["details"] for v in d.get("fieldViolations", [])]
    assert any(v["field"] == "connect_four.moves" for v in violations), body
    # The service keeps serving after the bad request.
    # An end-game position of Test_L3_R1 (score -1): the checker solves it exactly.
    ok = httpx.get(f"http://127.0.0.1:{mesh.rest_port}/v1/problems:solve",
                   params={"connectFour.moves": "2252576253462244111563365343671351441",
                           "agents": "AGENT_CHECKER"}, timeout=60)
    assert ok.status_code == 200, ok.text
    answer = ok.json()["connectFour"]
    assert 1 <= answer["column"] <= 7
    assert answer["outcome"] == "OUTCOME_LOSS" and answer["score"] == -1


async def test_text_query_is_one_trace_across_orchestrator_retrieval_and_gateway(mesh, collector):
    from libs.channels import open_channel

    receiver, _ = collector
    provider = TracerProvider()
    channel = open_channel(mesh.target, tracer_provider=provider)
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    with provider.get_tracer("e2e").start_as_current_span("e2e-query") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        await stub.IngestDocuments(pb.IngestDocumentsRequest(collection="trace", documents=[
            common_pb2.Document(id="d1", text="Qdrant stores vectors with payloads.")]),
            timeout=120)
        await stub.AnswerQuery(pb.AnswerQueryRequest(query="What does Qdrant store?",
                                                     collection="trace"), timeout=60)
    await channel.close()
    expected = {"orchestrator", "retrieval", "llm_gateway"}
    deadline = time.monotonic() + 30
    services: set[str] = set()
    while time.monotonic() < deadline and not expected <= services:
        services = {service for tid, service, _ in receiver.spans if tid == trace_id}
        time.sleep(0.2)
    assert expected <= services, f"trace {trace_id} has spans from {services}, wanted {expected}"


def _cli(mesh, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "--target", mesh.target, *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_solve_and_eval_speak_to_the_orchestrator(mesh, data_dir):
    solved = _cli(mesh, "solve", "connect4", "4453", "--agents", "mcts", "--simulations", "2000",
                  "--json")
    assert solved.returncode == 0, solved.stderr
    record = json.loads(solved.stdout)
    assert 1 <= record["move"] <= 7 and record["agents"] == ["mcts"]
    assert record["simulations"] == 2000 and record["latency_ms"] > 0

    evaluated = _cli(mesh, "eval", "connect4", str(data_dir / "connect4-pons" / "Test_L3_R1"),
                     "--limit", "3", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    lines = [json.loads(line) for line in evaluated.stdout.splitlines()]
    assert len(lines) == 4 and lines[-1]["summary"] and lines[-1]["positions"] == 3
    for line in lines[:3]:
        assert {"moves", "move", "value", "agents", "simulations", "latency_ms",
                "keeps_outcome"} <= set(line)
    # A column outside 1-7 is refused with the field named, and the CLI exits non-zero.
    bad = _cli(mesh, "solve", "connect4", "4458")
    assert bad.returncode == 2 and "connect_four.moves" in bad.stderr


def test_cli_ingest_and_query(mesh, tmp_path):
    doc = tmp_path / "notes.md"
    doc.write_text("# Tides\nTides are caused mainly by the gravitational pull of the Moon.\n")
    ingested = _cli(mesh, "ingest", str(doc), "--collection", "cli", "--quiet")
    assert ingested.returncode == 0, ingested.stderr
    answered = _cli(mesh, "query", "What causes tides?", "--collection", "cli", "--json")
    assert answered.returncode == 0, answered.stderr
    reply = json.loads(answered.stdout)
    assert reply["offline"] is True
    assert reply["sources"][0]["source"].endswith("notes.md")
    assert "gravitational pull of the Moon" in reply["answer"]


def test_cli_solve_and_eval_sudoku(mesh, data_dir, tmp_path):
    puzzle = "4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......"
    solved = _cli(mesh, "solve", "sudoku", puzzle, "--json")
    assert solved.returncode == 0, solved.stderr
    record = json.loads(solved.stdout)
    assert record["valid"] and record["answered_by"] == "solver"
    assert all(given in (".", cell) for given, cell in zip(puzzle, record["solution"], strict=True))

    evaluated = _cli(mesh, "eval", "sudoku",
                     str(data_dir / "sudoku-norvig" / "py_sudoku-hardest.txt"), "--limit", "3",
                     "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    lines = [json.loads(line) for line in evaluated.stdout.splitlines()]
    assert lines[-1]["summary"] and lines[-1]["valid"] == 3
    assert {"puzzle", "solution", "valid", "agents", "latency_ms"} <= set(lines[0])
