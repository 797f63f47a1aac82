"""The REST front's Host and Origin allow-list and its request-head limits, against a real grpc.aio
server and a real uvicorn on loopback, port 0: a DNS-rebinding Host is refused on a loopback bind,
a cross-site Origin is refused and never executed, both can be allowed by settings, and oversized
heads are answered by the HTTP protocol with a google.rpc.Status body."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.api.rest import build_rest_app

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
SOLVE = {"connectFour": {"moves": "4"}}


class _Orchestrator(pb_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def SolveProblem(self, request, context):
        self.calls += 1
        return pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=4))


class _Front:
    def __init__(self, client: httpx.AsyncClient, port: int, servicer: _Orchestrator) -> None:
        self.client, self.port, self.servicer = client, port, servicer


@pytest.fixture
async def front_factory():
    """`await front_factory(**rest_settings)`: a front served on 127.0.0.1 whatever `host` the
    settings name (the allow-list's default follows the settings' host)."""
    started = []

    async def start(**settings) -> _Front:
        servicer = _Orchestrator()
        grpc_server = await start_server(
            "orchestrator", ServiceSettings(port=0),
            [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)])
        rest_settings = RestSettings(**{"port": 0, "default_deadline_s": 5.0, **settings})
        rest = await serve_rest(build_rest_app(grpc_server.in_process, rest_settings),
                                "127.0.0.1", 0)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}", timeout=15)
        started.append((client, rest, grpc_server))
        return _Front(client, rest.port, servicer)

    yield start
    for client, rest, grpc_server in started:
        await client.aclose()
        await rest.stop()
        await grpc_server.stop(0)


def _status(reply: httpx.Response, http_status: int, code: int) -> dict:
    assert reply.status_code == http_status, reply.text
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code
    return body


async def test_a_rebinding_host_is_refused_on_a_loopback_bind(front_factory):
    front = await front_factory()  # RestSettings' host: 127.0.0.1
    for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", "", "[::1"):
        for method, path in (("POST", "/v1/problems:solve"), ("GET", "/metrics"),
                             ("GET", "/openapi.json"), ("GET", "/ready")):
            reply = await front.client.request(method, path, json=SOLVE, headers={"Host": host})
            body = _status(reply, 421, 3)
            assert body["details"][0]["fieldViolations"][0]["field"] == "Host", body
    assert front.servicer.calls == 0
    for host in ("localhost", "localhost:8080", "LOCALHOST.", "127.0.0.1", "127.0.0.1:1",
                 "[::1]", "[::1]:8080"):
        reply = await front.client.post("/v1/problems:solve", json=SOLVE, headers={"Host": host})
        assert reply.status_code == 200, (host, reply.text)
    assert front.servicer.calls == 7


async def test_allowed_hosts_can_be_configured(front_factory):
    front = await front_factory(allowed_hosts=("api.example", "*.mesh.example"))
    for host, status in (("api.example", 200), ("API.example:443", 200), ("a.mesh.example", 200),
                         ("mesh.example", 421), ("evil.example", 421), ("127.0.0.1", 421)):
        reply = await front.client.post("/v1/problems:solve", json=SOLVE, headers={"Host": host})
        assert reply.status_code == status, (host, reply.text)
    anything = await front_factory(allowed_hosts=("*",))
    reply = await anything.client.post("/v1/problems:solve", json=SOLVE,
                                       headers={"Host": "evil.example"})
    assert reply.status_code == 200


async def test_any_host_is_answered_by_default_on_another_interface(front_factory):
    # a front configured for 0.0.0.0 (served here on loopback): behind a load balancer or in a
    # pod, the Host is whatever name the clients use
    front = await front_factory(host="0.0.0.0")
    reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                    headers={"Host": "orchestrator.mesh.svc:8080"})
    assert reply.status_code == 200


async def test_a_cross_site_request_is_refused_and_not_executed(front_factory):
    front = await front_factory()
    for origin in ("https://evil.example", "http://127.0.0.1:1", "null",
                   "http://localhost.evil.example"):
        for method in ("GET", "POST"):
            reply = await front.client.request(method, "/v1/problems:solve", json=SOLVE,
                                               headers={"Origin": origin})
            body = _status(reply, 403, 7)
            assert body["details"][0]["reason"] == "ORIGIN_NOT_ALLOWED"
            assert "access-control-allow-origin" not in reply.headers
    assert front.servicer.calls == 0
    # the request's own origin (a same-origin page) and no Origin at all are served
    own = f"http://127.0.0.1:{front.port}"
    for headers in ({"Origin": own}, {"Origin": own.upper()}, {}):
        reply = await front.client.post("/v1/problems:solve", json=SOLVE, headers=headers)
        assert reply.status_code == 200, (headers, reply.text)


async def test_allowed_and_cors_origins_are_served(front_factory):
    front = await front_factory(allowed_origins=("http://localhost:3000",),
                                cors_allowed_origins=("https://app.example",))
    for origin in ("http://localhost:3000", "https://app.example"):
        reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                        headers={"Origin": origin})
        assert reply.status_code == 200, (origin, reply.text)
    reply = await front.client.post("/v1/problems:solve", json=SOLVE,
                                    headers={"Origin": "https://evil.example"})
    _status(reply, 403, 7)
    anyone = await front_factory(cors_allowed_origins=("*",))
    reply = await anyone.client.post("/v1/problems:solve", json=SOLVE,
                                     headers={"Origin": "https://evil.example"})
    assert reply.status_code == 200


async def _raw(port: int, request: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers["content-length"]))
    writer.close()
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    return int(lines[0].split()[1]), json.loads(body)


async def test_request_heads_over_the_limits_are_refused_by_the_protocol(front_factory):
    front = await front_factory(max_head_bytes=4096, max_headers=20)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(20))
    status, body = await _raw(front.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many +
                              b"\r\n")
    assert status == 431 and body["code"] == 3
    assert "more than 20 headers" in body["message"]
    status, body = await _raw(front.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"X-Big: " + b"a" * 5000 + b"\r\n\r\n")
    assert status == 431 and "4,096 bytes" in body["message"]
    # a target sent in many small pieces is assembled in linear time, and refused past the limit
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(b"GET /health?")
    for _ in range(50):
        writer.write(b"a" * 100)
        await writer.drain()
    writer.write(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    assert head.startswith(b"HTTP/1.1 414 ")
    writer.close()
    # under the limits, the same connection is answered as usual
    reply = await front.client.get("/health", headers={f"X-H{i}": "v" for i in range(10)})
    assert reply.status_code == 200


async def test_a_head_that_never_ends_is_408_and_a_silent_connection_is_closed(front_factory):
    front = await front_factory(head_timeout_s=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")  # no blank line
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    assert head.startswith(b"HTTP/1.1 408 ")
    body = json.loads(await asyncio.wait_for(reader.read(), timeout=10))
    assert body["code"] == 4 and "0.5 s" in body["message"]
    writer.close()
    silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", front.port)
    assert await asyncio.wait_for(silent_reader.read(), timeout=10) == b""  # closed, no answer
    silent_writer.close()
    # a complete head on a fresh connection is answered as usual
    assert (await front.client.get("/health")).status_code == 200
