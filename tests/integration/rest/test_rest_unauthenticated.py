"""What an anonymous caller can make the REST front do when keys are required: nothing heavier than
a bounded look at the request head before the key is checked (issue 29, finding 1).

A real grpc.aio server with the orchestrator's access interceptor and the REST front on port 0, in
this process, on the test's event loop: the server's loop is the one a parse on the loop would
block. The hostile requests go over raw sockets from threads and the probes (gRPC Health/Check and
another key's SolveProblem) from another thread on a blocking channel, so neither adds work to the
loop. The measured windows run with the objects made so far frozen (`gc.freeze`): a full collection
of this process (pytest's objects and the server's, about 60,000-110,000) pauses every thread for
40-100 ms on a loaded 2-core machine, whatever the requests, and would be measured instead of the
front.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from services.orchestrator.access import open_access
from services.orchestrator.access.control import MISSING_KEY
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.access.keys import FileKeyStore
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.settings import OrchestratorSettings

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
SOLVE = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="44"))
BOUND_S = 0.050
"""The issue's bound on a health check or another key's call while anonymous requests are
refused."""
KEYED_BOUND_S = 0.250
"""The bound while a keyed 4 MB body is decoded: the issue sets none. Its decode on the loop took
1.2-1.5 s; off the loop, what is left on it is parsing the serialized message the worker sends
back (12-25 ms for this body), during a window of seconds in which a loaded 2-core machine's
scheduler alone was seen to delay a call by 50-70 ms."""


class _Orchestrator(pb_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def SolveProblem(self, request, context):
        self.calls += 1
        return pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=4))

    async def IngestDocuments(self, request, context):
        self.calls += 1
        return pb.IngestDocumentsResponse(document_count=len(request.documents))


class _Front:
    """`key` (alice's) sends the requests under test; `other_key` (bob's) the probes."""

    def __init__(self, grpc_port: int, rest_port: int, key: str, other_key: str,
                 servicer: _Orchestrator) -> None:
        self.grpc_port, self.rest_port, self.servicer = grpc_port, rest_port, servicer
        self.key, self.other_key = key, other_key


@pytest.fixture
async def front(tmp_path):
    """An orchestrator stand-in with keys required (alice's and bob's) and its REST front."""
    keys = FileKeyStore(tmp_path / "api-keys.json")
    key, other_key = await keys.create("alice"), await keys.create("bob")
    settings = OrchestratorSettings(port=0, rest_port=0, require_api_key=True,
                                    api_keys_file=str(keys.path))
    control = await open_access(settings)
    servicer = _Orchestrator()
    grpc_server = await start_server(
        "orchestrator", settings,
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)],
        interceptors=[AccessInterceptor(control)])
    app = build_rest_app(grpc_server.in_process, RestSettings(port=0, default_deadline_s=10.0),
                         access=control)
    rest = await serve_rest(app, "127.0.0.1", 0)
    yield _Front(grpc_server.port, rest.port, key, other_key, servicer)
    await rest.stop()
    await grpc_server.stop(0)
    await control.aclose()


def _read_status(sock: socket.socket) -> tuple[int, bytes]:
    """The HTTP status and what was read of the response (until the server closes, or 64 KiB)."""
    data = b""
    with_body = False
    while len(data) < 65536:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if _:
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            with_body = length is not None and len(body) >= length
            if with_body:
                break
    return int(data.split(b" ", 2)[1]), data


def _request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Sends `head` and `body` (the body from another thread: the server may answer, and close,
    before reading it) and returns the answer's status."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)

        def send_body() -> None:
            try:
                sock.sendall(body)
            except OSError:  # the server answered and closed without reading it all: fine
                pass

        sender = threading.Thread(target=send_body)
        sender.start()
        try:
            return _read_status(sock)
        finally:
            with contextlib.suppress(OSError):  # already closed by the server
                sock.shutdown(socket.SHUT_RDWR)
            sender.join()


def _bracket_get(port: int) -> tuple[int, bytes]:
    # the review's 65 KB key of "[" (httptools refuses a request target of 64 KiB or more)
    query = b"[" * 65_000 + b"=x"
    return _request(port, b"GET /v1/problems:solve?" + query + b" HTTP/1.1\r\n"
                    b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")


def _big_ingest_body() -> bytes:
    """About 4 MB of valid JSON: many small documents (costly to decode and map onto messages)."""
    document = json.dumps({"id": "d", "text": "t"}).encode()
    count = 4_000_000 // (len(document) + 1)
    return b'{"documents": [' + b",".join([document] * count) + b"]}"


def _big_post(port: int, body: bytes, key: str | None = None) -> tuple[int, bytes]:
    auth = b"" if key is None else b"X-Api-Key: " + key.encode() + b"\r\n"
    return _request(port, b"POST /v1/collections/c/documents:ingest HTTP/1.1\r\n"
                    b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n" + auth +
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n", body)


@contextlib.contextmanager
def _frozen_gc():
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _Probes(threading.Thread):
    """Health/Check and another key's SolveProblem, alternately, until `stop` is set; each call's
    latency in seconds is kept in `latencies` as (method, seconds)."""

    def __init__(self, port: int, key: str) -> None:
        super().__init__()
        self.stop = threading.Event()
        self.warm = threading.Event()
        self.latencies: list[tuple[str, float]] = []
        self.error: BaseException | None = None
        self._port, self._key = port, key

    def run(self) -> None:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{self._port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                stub = pb_grpc.OrchestratorServiceStub(channel)
                calls = [("health", lambda: health.Check(
                             health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)),
                         ("solve", lambda: stub.SolveProblem(
                             SOLVE, metadata=(("x-api-key", self._key),), timeout=10))]
                for _, call in calls:  # connect and warm up outside the measured window
                    call()
                self.warm.set()
                while not self.stop.is_set():
                    for name, call in calls:
                        started = time.perf_counter()
                        try:
                            call()
                        except grpc.RpcError as error:  # a timeout: recorded, and fails the test
                            name = f"{name} ({error.code().name})"
                        self.latencies.append((name, time.perf_counter() - started))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
            self.warm.set()


async def test_anonymous_hostile_requests_never_stall_health_or_other_keys(front):
    body = _big_ingest_body()
    assert 3_900_000 < len(body) <= 4 * 1024 * 1024
    def attack() -> list[int]:
        statuses = []
        for _ in range(3):
            statuses.append(_bracket_get(front.rest_port)[0])
            statuses.append(_big_post(front.rest_port, body)[0])
        return statuses

    with _frozen_gc():
        probes = _Probes(front.grpc_port, front.other_key)
        probes.start()
        try:
            await asyncio.to_thread(probes.warm.wait)
            statuses = await asyncio.to_thread(attack)
        finally:
            probes.stop.set()
            await asyncio.to_thread(probes.join)
    assert probes.error is None, probes.error
    assert statuses == [401] * 6
    assert front.servicer.calls == len([1 for name, _ in probes.latencies if name == "solve"]) + 1
    assert len(probes.latencies) >= 2
    slow = [(name, round(seconds * 1000, 1)) for name, seconds in probes.latencies
            if seconds > BOUND_S]
    assert slow == [], f"calls slower than {BOUND_S * 1000:.0f} ms (method, ms): {slow}"


async def test_the_same_body_with_the_key_is_parsed_off_the_loop(front):
    # the 4 MB body is decoded in a worker process: health and the other calls keep answering
    body = _big_ingest_body()
    with _frozen_gc():
        probes = _Probes(front.grpc_port, front.other_key)
        probes.start()
        try:
            await asyncio.to_thread(probes.warm.wait)
            status, reply = await asyncio.to_thread(_big_post, front.rest_port, body, front.key)
        finally:
            probes.stop.set()
            await asyncio.to_thread(probes.join)
    assert probes.error is None, probes.error
    assert status == 200, reply[:300]
    assert b'"documentCount":' in reply and front.servicer.calls > 1
    assert len(probes.latencies) >= 2
    slow = [(name, round(seconds * 1000, 1)) for name, seconds in probes.latencies
            if seconds > KEYED_BOUND_S]
    assert slow == [], f"calls slower than {KEYED_BOUND_S * 1000:.0f} ms (method, ms): {slow}"


async def _http(port: int, raw: bytes) -> tuple[int, dict]:
    status, data = await asyncio.to_thread(_request, port, raw)
    return status, json.loads(data.partition(b"\r\n\r\n")[2] or b"{}")


@pytest.mark.parametrize("key", [None, "mmk_not-a-key"])
async def test_garbage_without_a_valid_key_is_401_not_400(front, key):
    auth = b"" if key is None else b"X-Api-Key: " + key.encode() + b"\r\n"
    reason = "API_KEY_MISSING" if key is None else "API_KEY_INVALID"
    garbage = [
        b"POST /v1/problems:solve HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
        b"Content-Type: application/json\r\nContent-Length: 9\r\n\r\n{not json",
        b"POST /v1/problems:solve HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
        b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
        b"GET /v1/problems:solve?agents=NOT_AN_AGENT HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
        b"\r\n",
        b"GET /v1/problems:solve?" + b"&".join([b"a=1"] * 5000) + b" HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\n" + auth + b"Grpc-Timeout: forever\r\n\r\n",
    ]
    message = "invalid API key" if key else MISSING_KEY.message
    for raw in garbage:
        status, body = await _http(front.rest_port, raw)
        assert status == 401, (raw[:60], body)
        # the body the access interceptor answers over gRPC and REST alike
        assert body == {"code": 16, "message": message, "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
             "domain": "mcts-mesh", "metadata": {"service": "orchestrator"}}]}
    assert front.servicer.calls == 0


async def test_the_same_garbage_with_the_key_is_400_naming_what_is_wrong(front):
    auth = b"X-Api-Key: " + front.key.encode() + b"\r\n"
    cases = [
        (b"POST /v1/problems:solve HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
         b"Content-Type: application/json\r\nContent-Length: 9\r\n\r\n{not json", 400, None),
        (b"GET /v1/problems:solve?agents=NOT_AN_AGENT HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
         b"\r\n", 400, "agents"),
        (b"GET /v1/problems:solve?" + b"&".join([b"a=1"] * 65) + b" HTTP/1.1\r\n"
         b"Host: 127.0.0.1\r\n" + auth + b"\r\n", 400, "query"),
        (b"GET /v1/problems:solve?" + b"[" * 8193 + b" HTTP/1.1\r\n"
         b"Host: 127.0.0.1\r\n" + auth + b"\r\n", 414, "query"),
    ]
    for raw, status, field in cases:
        got, body = await _http(front.rest_port, raw)
        assert got == status, (raw[:60], body)
        assert body["code"] == 3
        if field is not None:
            assert body["details"][0]["fieldViolations"][0]["field"] == field, body
    assert front.servicer.calls == 0
