"""The REST front as browsers and proxies meet it, against a real grpc.aio server and a real
uvicorn, both on port 0: TCP_NODELAY on the accepted socket, JSON only (415), the body-size limit
(413, enforced while reading), the nesting limit (400), CORS (off by default, preflights answered
when on), google.rpc.Status bodies for every error, Grpc-Timeout edge cases, and server streaming
as newline-delimited JSON read off a raw socket as curl would."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from libs.errors import InvalidArgument, Unavailable
from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.api.rest import build_rest_app

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
LIMIT = 4096


class _Orchestrator(pb_grpc.OrchestratorServiceServicer):
    """SolveProblem echoes the moves; StreamSolveProblem streams events chosen by the moves:
    "1" -> two events and the answer, "2" -> one event then waits for `release`, "3" -> one event
    then UNAVAILABLE, "9" -> INVALID_ARGUMENT before any event."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def SolveProblem(self, request, context):
        self.calls += 1
        return pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=4),
                                       thread_id=request.thread_id)

    async def StreamSolveProblem(self, request, context):
        self.calls += 1
        moves = request.connect_four.moves
        if moves == "9":
            raise InvalidArgument("connect_four.moves", "not a position")
        yield pb.StreamSolveProblemResponse(
            iteration=1, iteration_started=pb.IterationStarted(agents=[pb.AGENT_CHECKER]))
        if moves == "2":
            try:
                await asyncio.wait_for(self.release.wait(), timeout=10)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if moves == "3":
            raise Unavailable("mcts: down")
        yield pb.StreamSolveProblemResponse(
            iteration=1, agent_started=pb.AgentStarted(agent=pb.AGENT_CHECKER))
        yield pb.StreamSolveProblemResponse(
            iteration=1, response=pb.SolveProblemResponse(
                connect_four=pb.ConnectFourAnswer(column=4), iterations=1))

    async def AnswerQuery(self, request, context):
        return pb.AnswerQueryResponse(answer=request.query)

    async def IngestDocuments(self, request, context):
        return pb.IngestDocumentsResponse(document_count=len(request.documents))


class _Front:
    def __init__(self, client: httpx.AsyncClient, rest, servicer: _Orchestrator) -> None:
        self.client, self.rest, self.servicer = client, rest, servicer


@pytest.fixture
async def front_factory():
    started = []

    async def start(**settings) -> _Front:
        servicer = _Orchestrator()
        grpc_server = await start_server(
            "orchestrator", ServiceSettings(port=0),
            [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)])
        options = dict(port=0, default_deadline_s=5.0, max_body_bytes=LIMIT, max_json_depth=32)
        options.update(settings)
        app = build_rest_app(grpc_server.in_process, RestSettings(**options))
        rest = await serve_rest(app, "127.0.0.1", 0)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}", timeout=15)
        started.append((client, rest, grpc_server, servicer))
        return _Front(client, rest, servicer)

    yield start
    for client, rest, grpc_server, servicer in started:
        servicer.release.set()
        await client.aclose()
        await rest.stop()
        await grpc_server.stop(0)


@pytest.fixture
async def front(front_factory):
    return await front_factory()


SOLVE = {"connectFour": {"moves": "4"}}


def _assert_status(reply: httpx.Response, http_status: int, code: int) -> dict:
    assert reply.status_code == http_status, reply.text
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code
    return body


def _reason(body: dict) -> str:
    return next(d["reason"] for d in body["details"] if d["@type"].endswith("ErrorInfo"))


async def test_accepted_connections_have_tcp_nodelay(front):
    reply = await front.client.post("/v1/problems:solve", json=SOLVE)  # kept alive afterwards
    assert reply.status_code == 200
    sockets = front.rest.connection_sockets()
    assert sockets
    for sock in sockets:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
async def test_a_body_that_is_not_declared_json_is_415_and_not_executed(front, content_type):
    # (a cross-site one never gets this far: its Origin is refused 403, see test_rest_origins)
    headers = {}
    if content_type:
        headers["Content-Type"] = content_type
    reply = await front.client.post("/v1/problems:solve", content=json.dumps(SOLVE),
                                    headers=headers)
    body = _assert_status(reply, 415, 3)
    assert _reason(body) == "UNSUPPORTED_MEDIA_TYPE"
    assert "application/json" in body["message"]
    assert front.servicer.calls == 0


async def test_json_with_a_charset_is_accepted(front):
    reply = await front.client.post("/v1/problems:solve", content=json.dumps(SOLVE),
                                    headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert reply.status_code == 200, reply.text


async def test_a_body_over_the_limit_is_413(front):
    reply = await front.client.post("/v1/problems:solve", json={"threadId": "x" * LIMIT})
    body = _assert_status(reply, 413, 3)
    assert _reason(body) == "BODY_TOO_LARGE" and f"{LIMIT:,}" in body["message"]
    assert reply.headers["connection"] == "close"
    assert front.servicer.calls == 0


async def _raw_response_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def test_a_huge_declared_body_is_refused_before_it_is_sent(front):
    # 80 MiB announced, 64 KiB sent: the answer comes without the rest ever being read
    reader, writer = await asyncio.open_connection("127.0.0.1", front.rest.port)
    writer.write(b"POST /v1/problems:solve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 83886080\r\n\r\n")
    writer.write(b"[" * 65536)
    await writer.drain()
    status, headers = await asyncio.wait_for(_raw_response_head(reader), timeout=5)
    assert status == 413 and headers["connection"] == "close"
    body = json.loads(await reader.read(int(headers["content-length"])))
    assert body["code"] == 3 and "83,886,080 bytes" in body["message"]
    writer.close()
    assert front.servicer.calls == 0


async def test_a_chunked_body_is_cut_off_at_the_limit_while_reading(front):
    # no Content-Length: the limit is enforced on the bytes read; the body never ends here
    reader, writer = await asyncio.open_connection("127.0.0.1", front.rest.port)
    writer.write(b"POST /v1/problems:solve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(3):
        writer.write(b"800\r\n" + b" " * 0x800 + b"\r\n")  # 3 x 2 KiB > 4 KiB
    await writer.drain()
    status, _ = await asyncio.wait_for(_raw_response_head(reader), timeout=5)
    assert status == 413
    writer.close()


async def test_deep_json_is_400_before_parsing(front):
    deep = "[" * 1000 + "]" * 1000
    reply = await front.client.post("/v1/problems:solve", content='{"agents": ' + deep + "}",
                                    headers={"Content-Type": "application/json"})
    body = _assert_status(reply, 400, 3)
    assert _reason(body) == "BODY_TOO_DEEP"
    assert "1001 levels deep" in body["message"] and "at most 32" in body["message"]
    # brackets inside strings do not count, and a shallow body goes through
    shallow = await front.client.post("/v1/problems:solve",
                                      json={**SOLVE, "threadId": "[" * 100})
    assert shallow.status_code == 200


async def test_cors_is_off_by_default(front):
    # a foreign origin's preflight and request are refused, with no CORS headers
    preflight = await front.client.options("/v1/problems:solve", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
    body = _assert_status(preflight, 403, 7)
    assert _reason(body) == "ORIGIN_NOT_ALLOWED"
    assert "access-control-allow-origin" not in preflight.headers
    reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                    headers={"Origin": "https://app.example"})
    _assert_status(reply, 403, 7)
    assert "access-control-allow-origin" not in reply.headers
    assert front.servicer.calls == 0
    # without an Origin, OPTIONS is a method like any other: 405
    options = await front.client.options("/v1/problems:solve")
    body = _assert_status(options, 405, 12)
    assert body["message"] == "Method Not Allowed"
    assert options.headers["allow"] == "GET, POST"


async def test_cors_preflights_are_answered_for_the_allowed_origins(front_factory):
    front = await front_factory(cors_allowed_origins=("https://app.example",))
    preflight = await front.client.options("/v1/problems:solve", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, grpc-timeout"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-max-age"] == "600"
    refused = await front.client.options("/v1/problems:solve", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    body = _assert_status(refused, 403, 7)
    assert "origin" in body["message"].lower()
    reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                    headers={"Origin": "https://app.example"})
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "https://app.example"
    assert front.servicer.calls == 1


@pytest.mark.parametrize("method, path, http_status, code", [
    ("POST", "/health", 405, 12), ("DELETE", "/ready", 405, 12),
    ("PUT", "/openapi.json", 405, 12), ("GET", "/v2/nothing", 404, 5),
    ("PATCH", "/v1/problems:solve", 405, 12),
])
async def test_every_error_body_is_a_google_rpc_status(front, method, path, http_status, code):
    reply = await front.client.request(method, path)
    _assert_status(reply, http_status, code)


async def test_a_valid_huge_grpc_timeout_is_capped_not_expired(front):
    reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                    headers={"Grpc-Timeout": "99999999H"})
    assert reply.status_code == 200, reply.text
    too_long = await front.client.post("/v1/problems:solve", json=SOLVE,
                                       headers={"Grpc-Timeout": "123456789S"})
    body = _assert_status(too_long, 400, 3)
    assert "invalid grpc-timeout" in body["message"]


async def _open_stream(port: int, moves: str):
    """POSTs a StreamSolveProblem request on a raw socket (what `curl -N` does) and returns the
    reader after the response head, with the status and headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"connectFour": {"moves": moves}}).encode()
    writer.write(b"POST /v1/problems:streamSolve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    status, headers = await asyncio.wait_for(_raw_response_head(reader), timeout=5)
    return reader, writer, status, headers


async def _next_chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await asyncio.wait_for(reader.readline(), timeout=5)).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def _lines_until_end(reader: asyncio.StreamReader) -> list[dict]:
    text = b""
    while chunk := await _next_chunk(reader):
        text += chunk
    return [json.loads(line) for line in text.splitlines()]


def _event(line: dict) -> str:
    (event,) = line["result"].keys() - {"iteration", "elapsedMs"}
    return event


async def test_a_stream_arrives_line_by_line_as_it_happens(front):
    reader, writer, status, headers = await _open_stream(front.rest.port, "2")
    assert status == 200
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["transfer-encoding"] == "chunked"
    # the first event is on the wire while the call still waits
    first = json.loads(await _next_chunk(reader))
    assert first == {"result": {"iteration": 1, "elapsedMs": 0.0, "iterationStarted": {
        "agents": ["AGENT_CHECKER"], "simulations": "0", "reason": ""}}}
    front.servicer.release.set()
    rest = await _lines_until_end(reader)
    assert [_event(line) for line in rest] == ["agentStarted", "response"]
    assert rest[-1]["result"]["response"]["connectFour"]["column"] == 4
    writer.close()


async def test_an_error_after_the_first_message_is_an_error_line(front):
    reader, writer, status, _ = await _open_stream(front.rest.port, "3")
    assert status == 200
    lines = await _lines_until_end(reader)
    assert "result" in lines[0]
    assert set(lines[-1]) == {"error"}
    error = lines[-1]["error"]
    assert error["code"] == 14 and error["message"] == "mcts: down"
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    writer.close()


async def test_an_error_before_the_first_message_is_an_ordinary_error(front):
    reply = await front.client.post("/v1/problems:streamSolve",
                                    json={"connectFour": {"moves": "9"}})
    body = _assert_status(reply, 400, 3)
    assert body["details"][0]["fieldViolations"][0]["field"] == "connect_four.moves"


async def test_a_client_that_leaves_a_stream_cancels_the_call(front):
    reader, writer, status, _ = await _open_stream(front.rest.port, "2")
    assert status == 200
    await _next_chunk(reader)
    writer.close()
    await asyncio.wait_for(front.servicer.cancelled.wait(), timeout=5)


async def test_httpx_reads_the_stream_too(front):
    async with front.client.stream("POST", "/v1/problems:streamSolve",
                                   json={"connectFour": {"moves": "1"}}) as reply:
        lines = [json.loads(line) async for line in reply.aiter_lines() if line]
    assert [_event(line) for line in lines] == ["iterationStarted", "agentStarted", "response"]


async def test_openapi_describes_the_stream(front):
    document = (await front.client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/problems:streamSolve"]["post"]
    assert operation["operationId"] == "OrchestratorService_StreamSolveProblem"
    content = operation["responses"]["200"]["content"]
    envelope = content["application/x-ndjson"]["schema"]
    assert envelope["properties"]["result"] == {
        "$ref": "#/components/schemas/mesh.orchestrator.v1.StreamSolveProblemResponse"}
    assert envelope["properties"]["error"] == {"$ref": "#/components/schemas/google.rpc.Status"}
    assert "mesh.orchestrator.v1.AgentFinished" in document["components"]["schemas"]


def test_stream_request_mirrors_the_unary_request():
    """StreamSolveProblemRequest is SolveProblemRequest field for field (names, numbers, types,
    labels), which is what lets the servicer reuse SolveProblem's validation byte for byte."""
    def shape(descriptor):
        return [(f.name, f.number, f.type, f.is_repeated,
                 f.message_type and f.message_type.full_name, f.enum_type and f.enum_type.full_name,
                 f.containing_oneof and f.containing_oneof.name) for f in descriptor.fields]

    assert shape(pb.StreamSolveProblemRequest.DESCRIPTOR) == shape(
        pb.SolveProblemRequest.DESCRIPTOR)
    request = pb.StreamSolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves="44"), simulations=5, seed=3)
    assert pb.SolveProblemRequest.FromString(request.SerializeToString()).simulations == 5
