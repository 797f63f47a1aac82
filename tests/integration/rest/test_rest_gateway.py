"""The REST front against a real grpc.aio server on port 0 and a real uvicorn on port 0, over HTTP.

The servicer below is a test double of OrchestratorService whose answers are obvious functions of
the request (it echoes fields and raises the domain errors the real orchestrator raises), so each
test checks the transcoding, the forwarding and the error mapping, not the consensus loop.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from libs.errors import InvalidArgument, NotFound, ResourceExhausted, Unimplemented
from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.api.rest import build_rest_app

SERVICE = "mesh.orchestrator.v1.OrchestratorService"


class _EchoOrchestrator(pb_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def SolveProblem(self, request, context):
        if not request.HasField("connect_four"):
            raise InvalidArgument("connect_four", "a problem is required")
        moves = request.connect_four.moves
        if any(move not in "1234567" for move in moves):
            raise InvalidArgument("connect_four.moves", f"columns are 1-7, got {moves!r}")
        metadata = dict(context.invocation_metadata())
        await context.send_initial_metadata((("x-served-by", "echo"),))
        votes = [pb.AgentVote(agent=agent, proposal=moves[-1:], iteration=1,
                              rationale=f"user={metadata.get('x-user', '')} "
                                        f"ua={metadata.get('grpcgateway-user-agent', '')}")
                 for agent in request.agents]
        return pb.SolveProblemResponse(
            connect_four=pb.ConnectFourAnswer(column=int(moves[-1]) if moves else 4),
            votes=votes, agents=request.agents,
            search_statistics=common_pb2.SearchStatistics(simulations=request.simulations,
                                                          seed=request.seed),
            iterations=request.max_iterations, thread_id=request.thread_id,
        )

    async def AnswerQuery(self, request, context):
        if request.query == "slow":
            try:
                await asyncio.wait_for(self.release.wait(), timeout=10)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        errors = {"missing": NotFound("no such thread"), "busy": ResourceExhausted("queue full"),
                  "search": Unimplemented("mcts over reasoning steps")}
        if request.query in errors:
            raise errors[request.query]
        if request.query == "boom":
            raise RuntimeError("secret internals")
        return pb.AnswerQueryResponse(answer=request.query.upper(), thread_id=request.thread_id,
                                      iterations=request.top_k)

    async def IngestDocuments(self, request, context):
        return pb.IngestDocumentsResponse(
            document_count=len(request.documents),
            chunk_count=sum(len(document.text.split()) for document in request.documents))


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
async def mesh(spans):
    provider, _ = spans
    servicer = _EchoOrchestrator()
    grpc_server = await start_server(
        "orchestrator", ServiceSettings(port=0),
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)],
        tracer_provider=provider)
    app = build_rest_app(grpc_server.in_process,
                         RestSettings(port=0, default_deadline_s=5.0, ready_timeout_s=2.0),
                         tracer_provider=provider)
    rest = await serve_rest(app, "127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}", timeout=15) as client:
        yield client, grpc_server, servicer
    servicer.release.set()
    await rest.stop()
    await grpc_server.stop(0)


async def test_post_body_maps_onto_the_request(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/problems:solve", json={
        "connectFour": {"moves": "4453"}, "agents": ["AGENT_MCTS", 3],
        "simulations": "2000", "max_iterations": 2, "seed": 11})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["connectFour"] == {"column": 3, "value": 0.0, "outcome": "OUTCOME_UNSPECIFIED",
                                   "score": 0}
    assert body["agents"] == ["AGENT_MCTS", "AGENT_CHECKER"]
    assert body["searchStatistics"]["simulations"] == "2000"  # int64 as a string
    assert body["searchStatistics"]["seed"] == "11"
    assert body["iterations"] == 2
    assert body["consensusReached"] is False  # unpopulated fields are emitted
    assert body["threadId"] == ""


async def test_get_binding_takes_query_parameters(mesh):
    client, _, _ = mesh
    reply = await client.get(
        "/v1/problems:solve?connectFour.moves=44&agents=AGENT_MCTS&agents=AGENT_CHECKER"
        "&simulations=1000&thread_id=t-1&ignored_key=5")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["connectFour"]["column"] == 4
    assert body["agents"] == ["AGENT_MCTS", "AGENT_CHECKER"]
    assert body["searchStatistics"]["simulations"] == "1000"
    assert body["threadId"] == "t-1"


async def test_path_variable_sets_the_field_over_the_body(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/threads/thread_42/queries:answer",
                              json={"query": "why", "threadId": "from-body", "topK": 3})
    assert reply.status_code == 200, reply.text
    assert reply.json()["threadId"] == "thread_42"
    assert reply.json()["answer"] == "WHY"
    assert reply.json()["iterations"] == 3


async def test_repeated_messages_in_the_body(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/collections/scifact/documents:ingest", json={
        "documents": [{"id": "1", "text": "one two"}, {"id": "2", "text": "three"}]})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"documentCount": 2, "chunkCount": 3, "skippedDocumentCount": 0,
                            "updatedDocumentCount": 0}


async def test_domain_error_is_400_with_the_field_named(mesh):
    client, grpc_server, _ = mesh
    reply = await client.post("/v1/problems:solve", json={"connectFour": {"moves": "48"}})
    assert reply.status_code == 400
    status = reply.json()
    assert status["code"] == 3
    assert "connect_four.moves" in status["message"]
    [detail] = status["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == "connect_four.moves"
    # the server keeps serving
    again = await client.post("/v1/problems:solve", json={"connectFour": {"moves": "4"}})
    assert again.status_code == 200


@pytest.mark.parametrize("body, field", [
    ({"connectFour": {"moves": "4"}, "simulation": 5}, "simulation"),
    ({"connectFour": {"moves": "4", "colour": "red"}}, "connect_four.colour"),
    ({"connectFour": {"moves": "4"}, "simulations": "many"}, "simulations"),
    ({"agents": ["AGENT_NOPE"]}, "agents"),
])
async def test_bad_json_field_is_400_naming_it(mesh, body, field):
    client, _, _ = mesh
    reply = await client.post("/v1/problems:solve", json=body)
    assert reply.status_code == 400
    status = reply.json()
    assert status["code"] == 3
    violation = status["details"][0]["fieldViolations"][0]
    assert violation["field"] == field


async def test_bad_query_value_is_400_naming_the_field(mesh):
    client, _, _ = mesh
    reply = await client.get("/v1/problems:solve?connectFour.moves=4&agents=AGENT_NOPE")
    assert reply.status_code == 400
    assert reply.json()["details"][0]["fieldViolations"][0]["field"] == "agents"


async def test_body_that_is_not_json_is_400(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/problems:solve", content=b"{not json",
                              headers={"content-type": "application/json"})
    assert reply.status_code == 400
    status = reply.json()
    assert status["code"] == 3
    assert status["details"][0]["reason"] == "MALFORMED_BODY"


async def test_routing_errors(mesh):
    client, _, _ = mesh
    missing = await client.post("/v1/problems:unknown", json={})
    assert missing.status_code == 404
    assert missing.json() == {"code": 5, "message": "Not Found", "details": []}
    # a known path with another method: 405 with Allow (grpc-gateway's default says 501)
    wrong_method = await client.delete("/v1/problems:solve")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "GET, POST"
    assert wrong_method.json()["code"] == 12
    assert wrong_method.json()["message"] == "Method Not Allowed"


@pytest.mark.parametrize("query, http_status, code", [
    ("missing", 404, 5), ("busy", 429, 8), ("search", 501, 12), ("boom", 500, 13),
])
async def test_grpc_codes_map_to_http_statuses(mesh, query, http_status, code):
    client, _, _ = mesh
    reply = await client.post("/v1/queries:answer", json={"query": query})
    assert reply.status_code == http_status
    assert reply.json()["code"] == code
    assert "secret internals" not in reply.text


async def test_grpc_timeout_header_sets_the_deadline(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/queries:answer", json={"query": "slow"},
                              headers={"Grpc-Timeout": "200m"})
    assert reply.status_code == 504
    assert reply.json()["code"] == 4


async def test_invalid_grpc_timeout_is_400(mesh):
    client, _, _ = mesh
    reply = await client.post("/v1/queries:answer", json={"query": "x"},
                              headers={"Grpc-Timeout": "soon"})
    assert reply.status_code == 400
    assert "invalid grpc-timeout" in reply.json()["message"]


async def test_default_deadline_applies_without_a_header(spans):
    provider, _ = spans
    servicer = _EchoOrchestrator()
    grpc_server = await start_server(
        "orchestrator", ServiceSettings(port=0),
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)],
        tracer_provider=provider)
    app = build_rest_app(grpc_server.in_process,
                         RestSettings(port=0, default_deadline_s=0.2), tracer_provider=provider)
    rest = await serve_rest(app, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}") as client:
            reply = await client.post("/v1/queries:answer", json={"query": "slow"})
        assert reply.status_code == 504
    finally:
        servicer.release.set()
        await rest.stop()
        await grpc_server.stop(0)


async def test_headers_map_to_metadata_and_back(mesh):
    client, _, _ = mesh
    reply = await client.post(
        "/v1/problems:solve", json={"connectFour": {"moves": "4"}, "agents": ["AGENT_MCTS"]},
        headers={"Grpc-Metadata-X-User": "alice", "User-Agent": "probe/1.0",
                 "X-Not-Forwarded": "secret"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["votes"][0]["rationale"] == "user=alice ua=probe/1.0"
    assert reply.headers["grpc-metadata-x-served-by"] == "echo"


async def test_traceparent_joins_the_callers_trace(mesh, spans):
    client, _, _ = mesh
    _, exporter = spans
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    reply = await client.post("/v1/queries:answer", json={"query": "hello"},
                              headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert reply.status_code == 200
    finished = exporter.get_finished_spans()
    server_spans = [span for span in finished
                    if span.name == f"{SERVICE}/AnswerQuery" and span.kind.name == "SERVER"]
    assert server_spans, [span.name for span in finished]
    assert {format(span.context.trace_id, "032x") for span in server_spans} == {trace_id}
    rest_spans = [span for span in finished if span.name == "POST /v1/queries:answer"]
    assert format(rest_spans[0].parent.span_id, "016x") == "00f067aa0ba902b7"


async def test_client_disconnect_cancels_the_grpc_call(mesh):
    client, _, servicer = mesh
    with pytest.raises(httpx.ReadTimeout):
        await client.post("/v1/queries:answer", json={"query": "slow"}, timeout=0.3)
    await asyncio.wait_for(servicer.cancelled.wait(), timeout=2)


async def test_health_and_ready_follow_the_servers_health(mesh):
    client, grpc_server, _ = mesh
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/ready")).json() == {"status": "SERVING"}

    await grpc_server.set_serving(False)
    not_ready = await client.get("/ready")
    assert not_ready.status_code == 503
    assert not_ready.json()["code"] == 14
    assert "NOT_SERVING" in not_ready.json()["message"]
    await grpc_server.set_serving(True)
    assert (await client.get("/ready")).status_code == 200

    await grpc_server.stop(0)  # a drained server's health says NOT_SERVING for every name
    gone = await client.get("/ready")
    assert gone.status_code == 503
    assert gone.json()["status"] == "NOT_SERVING"
    assert (await client.get("/health")).status_code == 200


async def test_openapi_lists_every_binding(mesh):
    client, _, _ = mesh
    document = (await client.get("/openapi.json")).json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    assert set(paths) == {
        "/v1/problems:solve", "/v1/threads/{thread_id}/problems:solve", "/v1/queries:answer",
        "/v1/threads/{thread_id}/queries:answer", "/v1/collections/{collection}/documents:ingest",
        "/v1/problems:streamSolve", "/v1/collections/{collection}/documents",
        # {name=collections/*/documents/**} and {name=collections/*}: written out, not "/v1/{name}"
        "/v1/collections/{collection}/documents/{document}", "/v1/collections/{collection}",
        # RunService, served by the same front, and its results download
        "/v1/runs", "/v1/runs/{run}", "/v1/runs/{run}:cancel", "/v1/runs/{run}:watch",
        "/v1/batches", "/v1/batches/{batch}", "/v1/batches/{batch}:cancel",
        "/v1/batches/{batch}:watch", "/v1/batches/{batch}/results",
        "/v1/queries:streamAnswer",
        # OpenAI's chat completions and models, routes of the front's own
        "/v1/chat/completions", "/v1/models", "/v1/models/{model}",
    }
    assert set(paths["/v1/collections/{collection}/documents/{document}"]) == {"get", "delete"}
    assert set(paths["/v1/collections/{collection}"]) == {"delete"}
    assert set(paths["/v1/problems:solve"]) == {"get", "post"}
    get = paths["/v1/problems:solve"]["get"]
    names = {parameter["name"] for parameter in get["parameters"]}
    assert {"connectFour.moves", "agents", "simulations", "threadId"} <= names
    threaded = paths["/v1/threads/{thread_id}/queries:answer"]["post"]
    assert threaded["parameters"][0] == {"name": "thread_id", "in": "path", "required": True,
                                         "schema": {"type": "string"}}
    body = threaded["requestBody"]["content"]["application/json"]["schema"]
    assert "threadId" not in body["properties"] and "query" in body["properties"]
    schemas = document["components"]["schemas"]
    assert schemas["mesh.orchestrator.v1.Agent"]["enum"][1] == "AGENT_MCTS"
    assert "google.rpc.Status" in schemas
