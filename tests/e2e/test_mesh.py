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
    """An OTLP/gRPC trace receiver that keeps (trace id, service name, span name) of every span in
    `spans`, and every span with its service in `records` (OTLP `Span` protos)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str]] = []
        self.records: list[tuple[str, object]] = []

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append((span.trace_id.hex(), service, span.name))
                    self.records.append((service, span))
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


def _backend_calls():
    """One cheap call per backend: (service word, call(channel) -> reply)."""
    from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
    from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc
    from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc
    from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc

    return [
        ("mcts", lambda channel: mcts_service_pb2_grpc.MctsServiceStub(channel).Search(
            mcts_service_pb2.SearchRequest(
                game=mcts_service_pb2.GAME_CONNECT_FOUR,
                connect_four=common_pb2.ConnectFourPosition(moves="44"), simulations=64),
            timeout=30)),
        ("neural", lambda channel: neural_service_pb2_grpc.NeuralServiceStub(channel).ListModels(
            neural_service_pb2.ListModelsRequest(), timeout=30)),
        ("retrieval", lambda channel: retrieval_service_pb2_grpc.RetrievalServiceStub(
            channel).ListCollections(retrieval_service_pb2.ListCollectionsRequest(), timeout=30)),
        ("llm", lambda channel: llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
            llm_service_pb2.GenerateRequest(prompt="Say hello."), timeout=30)),
    ]


def test_every_backend_refuses_a_call_without_the_mesh_token_and_health_stays_open(mesh):
    """Issue 29: mcts, neural, retrieval and the LLM service answer only the mesh (`mcts-mesh up`
    gave them this run's token); health needs no token."""
    from libs.mesh_auth import with_token

    assert mesh.token and mesh.token_file.read_text() == mesh.token
    assert mesh.token_file.stat().st_mode & 0o777 == 0o600
    for name, call in _backend_calls():
        with grpc.insecure_channel(f"127.0.0.1:{mesh.ports[name]}") as channel:
            with pytest.raises(grpc.RpcError) as caught:
                call(channel)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
            with pytest.raises(grpc.RpcError) as caught:
                call(with_token(channel, "a-wrong-token-of-the-right-length"))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
            call(with_token(channel, mesh.token))  # answered


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
    expected = {"orchestrator", "retrieval", "llm"}
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


# --- Metrics, traces and logs of the running mesh (issue 17 items 2, 4, 5) ---

METRICS_MODULES = {
    "mcts": "services.mcts.metrics",
    "neural": "services.neural.metrics",
    "retrieval": "services.retrieval.metrics",
    "llm": "services.llm.metrics",
    "orchestrator": "services.orchestrator.metrics",
}


def _declared(module_name: str) -> set[str]:
    """The family names of every metric a module declares (a Counter's without `_total`)."""
    import importlib

    from prometheus_client.metrics import MetricWrapperBase

    module = importlib.import_module(module_name)
    return {metric.describe()[0].name for metric in vars(module).values()
            if isinstance(metric, MetricWrapperBase)}


def _scrape(port: int, path: str = "/metrics") -> dict[str, object]:
    from prometheus_client.parser import text_string_to_metric_families

    reply = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(reply.text)}


def _total(families: dict, sample_name: str, **labels: str) -> float:
    family_name = sample_name.removesuffix("_total").removesuffix("_count")
    family = families.get(family_name)
    if family is None:
        return 0.0
    return sum(sample.value for sample in family.samples if sample.name == sample_name
               and all(sample.labels.get(k) == v for k, v in labels.items()))


def _mesh_requests(target: str) -> None:
    """A Connect Four solve with mcts and neural, a Sudoku solve, an ingest and a text query."""
    with grpc.insecure_channel(target) as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        stub.SolveProblem(pb.SolveProblemRequest(
            connect_four=common_pb2.ConnectFourPosition(moves="4453"), simulations=2000,
            agents=[pb.AGENT_MCTS, pb.AGENT_NEURAL]), timeout=120)
        stub.SolveProblem(pb.SolveProblemRequest(sudoku=pb.SudokuProblem(
            puzzle=SUDOKU)), timeout=120)
        stub.IngestDocuments(pb.IngestDocumentsRequest(collection="metrics", documents=[
            common_pb2.Document(id="m1", text="Prometheus scrapes metrics over HTTP.")]),
            timeout=120)
        stub.AnswerQuery(pb.AnswerQueryRequest(query="How does Prometheus get metrics?",
                                               collection="metrics"), timeout=60)


SUDOKU = "4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......"


def test_every_service_exports_every_declared_metric_and_the_counters_move(mesh):
    assert set(mesh.metrics_ports) == set(METRICS_MODULES)
    before = {name: _scrape(port) for name, port in mesh.metrics_ports.items()}
    _mesh_requests(mesh.target)
    after = {name: _scrape(port) for name, port in mesh.metrics_ports.items()}
    shared = _declared("libs.metrics")
    for name, module in METRICS_MODULES.items():
        missing = (shared | _declared(module)) - set(after[name])
        assert not missing, f"{name} does not export {sorted(missing)}"
        assert _total(after[name], "grpc_server_handled_total", grpc_code="OK") > \
            _total(before[name], "grpc_server_handled_total", grpc_code="OK"), name
        assert _total(after[name], "grpc_server_handling_seconds_count") > \
            _total(before[name], "grpc_server_handling_seconds_count"), name

    def moved(service: str, sample: str, **labels: str) -> bool:
        return _total(after[service], sample, **labels) > _total(before[service], sample, **labels)

    assert moved("mcts", "mesh_mcts_simulations_total")
    assert moved("mcts", "mesh_mcts_tree_nodes_count")
    assert moved("mcts", "mesh_mcts_search_simulations_per_second_count")
    assert _total(after["mcts"], "mesh_mcts_searches_running") == 0
    assert moved("neural", "mesh_neural_batch_size_count", model="connect4-pv")
    assert moved("neural", "mesh_neural_queue_wait_seconds_count", model="connect4-pv")
    assert _total(after["neural"], "mesh_neural_model_load_seconds", model="connect4-pv") > 0
    assert moved("retrieval", "mesh_retrieval_query_seconds_count", collection="metrics")
    assert _total(after["retrieval"], "mesh_retrieval_collection_points",
                  collection="metrics") >= 1
    assert moved("llm", "mesh_llm_calls_total", provider="offline", outcome="ok")
    assert moved("llm", "mesh_llm_tokens_total", provider="offline")
    assert _total(after["llm"], "mesh_llm_circuit_state", provider="offline",
                  state="closed") == 1
    for kind in ("connect_four", "sudoku", "text_query"):
        assert moved("orchestrator", "mesh_orchestrator_consensus_iterations_count", kind=kind)
    for agent in ("mcts", "neural", "solver", "checker", "retrieval", "llm"):
        assert moved("orchestrator", "mesh_orchestrator_agent_outcomes_total", agent=agent), agent
    # The REST front serves the orchestrator's registry too.
    rest = _scrape(mesh.rest_port)
    assert {"grpc_server_handled", "mesh_orchestrator_consensus_iterations",
            "mesh_orchestrator_rate_limit_rejections"} <= set(rest)


def _spans_of(receiver, trace_id: str, wanted: set[str], timeout_s: float = 30) -> list:
    """The trace's spans as (service, span) once spans of every `wanted` service arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = [(service, span) for service, span in list(receiver.records)
                 if span.trace_id.hex() == trace_id]
        if wanted <= {service for service, _ in spans} or time.monotonic() > deadline:
            time.sleep(1.0)  # the batch with the last spans of a service may trail by 0.5 s
            return [(service, span) for service, span in list(receiver.records)
                    if span.trace_id.hex() == trace_id]
        time.sleep(0.2)


def _attributes(span) -> dict[str, object]:
    out: dict[str, object] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        out[attribute.key] = ([v.string_value for v in value.array_value.values]
                              if kind == "array_value" else getattr(value, kind))
    return out


SERVER = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR


def _server_span(spans, service: str):
    found = [span for svc, span in spans if svc == service and span.kind == SERVER]
    assert found, f"no SERVER span of {service}"
    return found[0]


async def _traced(mesh, request_name: str, call) -> str:
    from libs.channels import open_channel

    provider = TracerProvider()
    channel = open_channel(mesh.target, tracer_provider=provider)
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    with provider.get_tracer("e2e").start_as_current_span(request_name) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        try:
            await call(stub)
        finally:
            await channel.close()
    return trace_id


async def test_traces_show_the_work_the_loop_steps_and_the_real_status(mesh, collector):
    receiver, _ = collector

    async def connect_four(stub):
        await stub.SolveProblem(pb.SolveProblemRequest(
            connect_four=common_pb2.ConnectFourPosition(moves="4453"), simulations=3000,
            agents=[pb.AGENT_MCTS, pb.AGENT_NEURAL]), timeout=120)

    async def sudoku(stub):
        await stub.SolveProblem(pb.SolveProblemRequest(
            sudoku=pb.SudokuProblem(puzzle=SUDOKU)), timeout=120)

    async def text(stub):
        await stub.IngestDocuments(pb.IngestDocumentsRequest(collection="traced", documents=[
            common_pb2.Document(id="t1", text="Jaeger shows traces of requests.")]), timeout=120)
        await stub.AnswerQuery(pb.AnswerQueryRequest(query="What does Jaeger show?",
                                                     collection="traced", top_k=3), timeout=60)

    async def invalid(stub):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SolveProblem(pb.SolveProblemRequest(
                connect_four=common_pb2.ConnectFourPosition(moves="4489")), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    c4 = _spans_of(receiver, await _traced(mesh, "c4", connect_four),
                   {"orchestrator", "mcts", "neural"})
    orchestrator = _attributes(_server_span(c4, "orchestrator"))
    assert orchestrator["mesh.problem.kind"] == "connect_four"
    assert set(orchestrator["mesh.agents"]) == {"mcts", "neural"}
    assert orchestrator["mesh.consensus.iterations"] >= 1
    mcts = _attributes(_server_span(c4, "mcts"))
    assert mcts["mesh.mcts.simulations"] >= 1 and mcts["mesh.mcts.simulations_per_second"] > 0
    neural = _attributes(_server_span(c4, "neural"))
    assert neural["mesh.neural.model"] == "connect4-pv" and neural["mesh.neural.batch_size"] >= 1
    by_id = {span.span_id: (service, span) for service, span in c4}
    names = {span.name for _, span in c4}
    assert {"consensus route", "consensus agents", "consensus aggregate", "agent mcts",
            "agent neural"} <= names, names
    for service, span in c4:
        assert span.status.code != STATUS_ERROR, (service, span.name, span.status.message)
        if service == "mcts" and span.kind == SERVER:
            # mcts's SERVER span sits under the orchestrator's "agent mcts" span (via the client).
            ancestors = []
            parent = span.parent_span_id
            while parent in by_id:
                ancestors.append(by_id[parent][1].name)
                parent = by_id[parent][1].parent_span_id
            assert "agent mcts" in ancestors and "consensus agents" in ancestors, ancestors

    puzzle = _spans_of(receiver, await _traced(mesh, "sudoku", sudoku), {"orchestrator"})
    orchestrator = _attributes(_server_span(puzzle, "orchestrator"))
    assert orchestrator["mesh.problem.kind"] == "sudoku"
    assert "solver" in orchestrator["mesh.agents"]
    assert {"consensus route", "consensus verify", "consensus aggregate", "agent solver",
            "agent checker"} <= {span.name for _, span in puzzle}

    query = _spans_of(receiver, await _traced(mesh, "text", text),
                      {"orchestrator", "retrieval", "llm"})
    retrieval = _attributes([span for service, span in query if service == "retrieval"
                             and span.kind == SERVER and span.name.endswith("SearchDocuments")][0])
    assert retrieval["mesh.retrieval.collection"] == "traced"
    assert retrieval["mesh.retrieval.top_k"] == 3
    llm = _attributes(_server_span(query, "llm"))
    assert llm["mesh.llm.provider"] == "offline" and llm["mesh.llm.model"]
    assert llm["mesh.llm.prompt_tokens"] > 0 and llm["mesh.llm.completion_tokens"] > 0
    answer = [span for service, span in query if service == "orchestrator" and span.kind == SERVER
              and span.name.endswith("AnswerQuery")][0]
    assert _attributes(answer)["mesh.problem.kind"] == "text_query"

    bad_trace = await _traced(mesh, "bad", invalid)
    bad = _spans_of(receiver, bad_trace, {"orchestrator"})
    server = _server_span(bad, "orchestrator")
    assert server.status.code == STATUS_ERROR
    assert server.status.message.startswith("INVALID_ARGUMENT")
    assert "connect_four.moves" in server.status.message
    assert _attributes(server)["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert _attributes(server)["mesh.problem.kind"] == "connect_four"

    # Health checks (the launcher's, the tests') and reflection never make a span.
    assert not [span.name for _, span in receiver.records
                if span.name.startswith(("grpc.health.v1.Health/", "grpc.reflection."))]

    # Every service's log is JSON lines; the bad request's line carries its trace id.
    for service, path in mesh.logs.items():
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert lines and all({"time", "level", "service", "logger", "message", "trace_id",
                              "span_id"} <= set(line) for line in lines), service
        assert all(line["service"] == service for line in lines)
    lines = [json.loads(line) for line in mesh.logs["orchestrator"].read_text().splitlines()]
    logged = [line for line in lines if line["trace_id"] == bad_trace]
    assert logged and "INVALID_ARGUMENT" in logged[0]["message"], logged
    assert logged[0]["span_id"] == server.span_id.hex()
