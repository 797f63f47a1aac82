"""Fuzzing the running mesh (five real processes on free ports): hypothesis-generated messages
against every gRPC method of every service, and schemathesis against the OpenAPI document the REST
front serves (`/openapi.json`, every route).

A client's mistake must never get a 5xx other than the UNAVAILABLE and DEADLINE_EXCEEDED mappings
(so never UNKNOWN, INTERNAL, DATA_LOSS, nor UNIMPLEMENTED except where the API documents it), must
not crash a service, and must not put an ERROR-level line or a traceback in the service's log.
Raw bytes go through generic `unary_unary` / `stream_stream` callables with no serializers, so
the servers get exactly the fuzzed wire bytes.

Cases: `MCTS_MESH_FUZZ_EXAMPLES` per gRPC method (default 50 well-typed, a third as many
malformed) and `MCTS_MESH_FUZZ_REST_EXAMPLES` per REST route (default 80 positive, half as many
negative); `bench/fuzz.py` raises them. Every case tried is counted and the counts are printed
at the end of the run.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from mesh.llm.v1 import llm_service_pb2
from mesh.mcts.v1 import mcts_service_pb2
from mesh.neural.v1 import neural_service_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2
from mesh.retrieval.v1 import retrieval_service_pb2
from proto_strategies import malformed, messages, tag, varint

from libs.mesh_auth import with_token
from mcts_mesh.launcher import start_mesh

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

EXAMPLES = int(os.environ.get("MCTS_MESH_FUZZ_EXAMPLES", "50"))
MALFORMED_EXAMPLES = max(10, EXAMPLES // 3)
CALL_DEADLINE_S = 3.0
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
SERVICES = {
    "mcts": mcts_service_pb2.DESCRIPTOR.services_by_name["MctsService"],
    "neural": neural_service_pb2.DESCRIPTOR.services_by_name["NeuralService"],
    "retrieval": retrieval_service_pb2.DESCRIPTOR.services_by_name["RetrievalService"],
    "llm": llm_service_pb2.DESCRIPTOR.services_by_name["LlmService"],
    "orchestrator": orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"],
}
METHODS = [(name, method) for name, service in SERVICES.items() for method in service.methods]
# Methods whose requests make work proportional to the text they carry (embedding): their fuzzed
# strings stay short so the run's time stays bounded; their size limits have their own tests.
EMBEDDING_METHODS = {"mesh.retrieval.v1.RetrievalService.IngestDocuments",
                     "mesh.orchestrator.v1.OrchestratorService.IngestDocuments"}
# 5xx codes that are fine: the server, or something behind it, is down or out of time.
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS,
             grpc.StatusCode.UNIMPLEMENTED}
ERROR_LINE = re.compile(r"(\bERROR\b|\bCRITICAL\b|\"level\":\s*\"(error|critical)\"|"
                        r"Traceback \(most recent call last\))")

CASES: Counter = Counter()


def method_id(param) -> str:
    if isinstance(param, MethodDescriptor):
        return param.name
    return str(param)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-mesh")
    running = start_mesh(port_base=0, rest_port=0, log_dir=tmp / "logs", ready_timeout_s=600,
                         env={"RETRIEVAL_DATA_DIR": str(tmp / "retrieval"),
                              "LLM_FALLBACK_ORDER": '["offline"]'})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channels(mesh):
    opened = {name: with_token(grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024)]), mesh.token)
        for name, port in mesh.ports.items()}
    yield opened
    for channel in opened.values():
        channel.close()


class LogWatch:
    """Lines a service wrote to its log since the watch began."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new_error_lines(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
        return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def _allowed(method: MethodDescriptor, code: grpc.StatusCode, details: str) -> bool:
    # Every method is built (AnswerQuery's mcts_iterations included), so UNIMPLEMENTED is a fault.
    return code not in FORBIDDEN


def call_raw(channel: grpc.Channel, method: MethodDescriptor, payloads: list[bytes]
             ) -> tuple[grpc.StatusCode, str]:
    """Sends wire bytes to `method` (all of `payloads` on a stream, the first otherwise)."""
    try:
        if method.client_streaming or method.server_streaming:
            call = channel.stream_stream(_path(method))
            for _ in call(iter(payloads), timeout=CALL_DEADLINE_S):
                pass
        else:
            channel.unary_unary(_path(method))(payloads[0], timeout=CALL_DEADLINE_S)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def check(channel, method, payloads: list[bytes], category: str) -> None:
    CASES[category] += 1
    code, details = call_raw(channel, method, payloads)
    assert _allowed(method, code, details), (
        f"{_path(method)} answered {code.name} ({details!r}) to {category} input "
        f"{payloads[0][:200]!r}{'...' if len(payloads[0]) > 200 else ''} "
        f"({len(payloads[0])} bytes)")


def assert_mesh_alive(mesh) -> None:
    dead = {name: p.returncode for name, p in mesh.processes.items() if p.poll() is not None}
    assert not dead, f"services crashed: {dead}"


def _fuzz_settings(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


@pytest.mark.parametrize(("service", "method"), METHODS, ids=method_id)
def test_well_typed_hostile_messages_get_a_clear_status(mesh, channels, service, method):
    channel = channels[service]
    watches = {name: LogWatch(mesh.logs[name]) for name in mesh.logs}
    text_max = 300 if method.full_name in EMBEDDING_METHODS else 20_000
    one = messages(method.input_type, text_max=text_max)

    @_fuzz_settings(EXAMPLES)
    @given(payload=one)
    def fuzz(payload: bytes) -> None:
        check(channel, method, [payload] * (2 if method.client_streaming else 1), "well-typed")

    fuzz()
    assert_mesh_alive(mesh)
    errors = {name: watch.new_error_lines() for name, watch in watches.items()}
    errors = {name: lines[:3] for name, lines in errors.items() if lines}
    assert not errors, f"ERROR lines logged while fuzzing {_path(method)}: {errors}"


@pytest.mark.parametrize(("service", "method"), METHODS, ids=method_id)
def test_malformed_bytes_get_invalid_argument_and_no_traceback(mesh, channels, service, method):
    channel = channels[service]
    watches = {name: LogWatch(mesh.logs[name]) for name in mesh.logs}

    @_fuzz_settings(MALFORMED_EXAMPLES)
    @given(payload=malformed(method.input_type))
    def fuzz(payload: bytes) -> None:
        check(channel, method, [payload], "malformed")

    try:
        fuzz()
    finally:
        assert_mesh_alive(mesh)
    errors = {name: watch.new_error_lines() for name, watch in watches.items()}
    errors = {name: lines[:3] for name, lines in errors.items() if lines}
    assert not errors, f"ERROR lines logged for malformed bytes to {_path(method)}: {errors}"


def _with_string_of(method: MethodDescriptor, size: int) -> bytes:
    """A valid request of about `size` bytes: its first top-level string field that long (an
    unknown length-delimited field, number 1000, when it has none)."""
    strings = [f.number for f in method.input_type.fields
               if f.type == f.TYPE_STRING and not f.is_repeated]
    number = strings[0] if strings else 1000
    payload = b"x" * size
    return tag(number, 2) + varint(size) + payload


@pytest.mark.parametrize(("service", "method"), METHODS, ids=method_id)
def test_maximum_size_messages_are_refused_cleanly(mesh, channels, service, method):
    channel = channels[service]
    for size in (MAX_MESSAGE_BYTES - 64, MAX_MESSAGE_BYTES + 1024):
        check(channel, method, [_with_string_of(method, size)], "maximum-size")
    assert_mesh_alive(mesh)


def _violation_field(error: grpc.RpcError) -> str:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    bad = error_details_pb2.BadRequest()
    for detail in rpc_status.from_call(error).details:
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    return ""


def test_found_by_fuzzing_an_unknown_game_number_is_invalid_argument(channels):
    """Was INTERNAL: the error message asked the Game enum for the name of -1 (ValueError)."""
    from mesh.common.v1 import common_pb2

    stub = channels["mcts"].unary_unary(
        "/mesh.mcts.v1.MctsService/Search",
        request_serializer=mcts_service_pb2.SearchRequest.SerializeToString,
        response_deserializer=mcts_service_pb2.SearchResponse.FromString)
    for game in (-1, 7, 2**31 - 1):
        with pytest.raises(grpc.RpcError) as caught:
            stub(mcts_service_pb2.SearchRequest(
                game=game, connect_four=common_pb2.ConnectFourPosition(moves="44"),
                simulations=10), timeout=CALL_DEADLINE_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _violation_field(caught.value) == "game" and str(game) in caught.value.details()


def test_found_by_fuzzing_a_model_name_too_long_for_a_file_name_is_invalid_argument(channels):
    """Was INTERNAL: a 4 MB name passed the pattern and the file system refused it
    (ENAMETOOLONG)."""
    stub = channels["neural"].unary_unary(
        "/mesh.neural.v1.NeuralService/ReloadModel",
        request_serializer=neural_service_pb2.ReloadModelRequest.SerializeToString,
        response_deserializer=neural_service_pb2.ReloadModelResponse.FromString)
    for length in (101, 300, 1_000_000):
        with pytest.raises(grpc.RpcError) as caught:
            stub(neural_service_pb2.ReloadModelRequest(name="x" * length),
                 timeout=CALL_DEADLINE_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _violation_field(caught.value) == "name"
        assert len(caught.value.details()) < 400


# --- REST ------------------------------------------------------------------------------------

REST_EXAMPLES = int(os.environ.get("MCTS_MESH_FUZZ_REST_EXAMPLES", "80"))
REST_DEADLINE = "3S"
REST_FINE_5XX = {503, 504}  # UNAVAILABLE, DEADLINE_EXCEEDED


@pytest.fixture(scope="module")
def rest_url(mesh) -> str:
    return f"http://127.0.0.1:{mesh.rest_port}"


@pytest.fixture(scope="module")
def openapi_operations(rest_url):
    import schemathesis

    document = httpx.get(f"{rest_url}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(document)
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_schemathesis_every_rest_route_gets_no_server_error(mesh, rest_url, openapi_operations,
                                                            mode):
    import requests
    from schemathesis import GenerationMode

    assert len(openapi_operations) >= 6, [op.label for op in openapi_operations]
    watches = {name: LogWatch(mesh.logs[name]) for name in mesh.logs}
    session = requests.Session()
    for operation in openapi_operations:
        strategy = operation.as_strategy(generation_mode=GenerationMode(mode))

        @_fuzz_settings(REST_EXAMPLES // 2 if mode == "negative" else REST_EXAMPLES)
        @given(case=strategy)
        def fuzz(case) -> None:
            CASES[f"rest-{mode}"] += 1
            response = case.call(base_url=rest_url, session=session,
                                 headers={"Grpc-Timeout": REST_DEADLINE}, timeout=30)
            assert response.status_code < 500 or response.status_code in REST_FINE_5XX, (
                f"{case.operation.label} answered {response.status_code} "
                f"{response.text[:300]!r} to "
                f"{case.method} {case.path} path={case.path_parameters} query={case.query} "
                f"body={str(case.body)[:300]}")

        try:
            fuzz()
        except Unsatisfiable:
            # Negative mode finds nothing to break in an operation whose only input is one
            # string path parameter (GET/DELETE of a document, DELETE of a collection): any
            # string is a valid value there, and positive mode covers the route.
            if mode != "negative":
                raise
            CASES[f"rest-{mode}-nothing-to-negate"] += 1
    session.close()
    assert_mesh_alive(mesh)
    errors = {name: watch.new_error_lines() for name, watch in watches.items()}
    errors = {name: lines[:3] for name, lines in errors.items() if lines}
    assert not errors, f"ERROR lines logged while fuzzing the REST front: {errors}"


# Bodies a JSON client gets wrong: each is a client's mistake, answered 400 naming nothing secret.
HOSTILE_BODIES = {
    "moves as a number": b'{"connectFour": {"moves": 4453}}',
    "position as a string": b'{"connectFour": "4453"}',
    "int64 overflow": b'{"connectFour": {"moves": "4453"}, "simulations": "99999999999999999999"}',
    "int32 overflow": b'{"connectFour": {"moves": "4453"}, "maxIterations": 2147483648}',
    "float for an integer": b'{"connectFour": {"moves": "4453"}, "simulations": 2.5}',
    "1e400": b'{"connectFour": {"moves": "4453"}, "simulations": 1e400}',
    "negative uint64": b'{"connectFour": {"moves": "4453"}, "seed": -1}',
    "unknown enum name": b'{"connectFour": {"moves": "4453"}, "agents": ["AGENT_NOPE"]}',
    "enum as an object": b'{"connectFour": {"moves": "4453"}, "agents": [{}]}',
    "array body": b'[1, 2, 3]',
    "null body": b"null",
    "not JSON": b"{connectFour: 4453",
    "invalid UTF-8": b'{"connectFour": {"moves": "44\xff\xfe53"}}',
    "unknown field": b'{"connectFour": {"moves": "4453"}, "bogus": 1}',
    "two problems": b'{"connectFour": {"moves": "4453"}, "sudoku": {"puzzle": "1"}}',
    "huge string": b'{"connectFour": {"moves": "' + b"4" * 2_000_000 + b'"}}',
}


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_hostile_json_bodies_are_400(rest_url, name):
    CASES["rest-hostile"] += 1
    reply = httpx.post(f"{rest_url}/v1/problems:solve", content=HOSTILE_BODIES[name],
                       headers={"content-type": "application/json",
                                "grpc-timeout": REST_DEADLINE}, timeout=30)
    assert reply.status_code == 400, (reply.status_code, reply.text[:300])
    body = reply.json()
    assert body["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0] and body["message"]


INGEST_BODIES = {
    # Found by schemathesis: was 500 (TypeError in the REST front while it located the bad field).
    "a document that is false": b'{"documents": [false]}',
    "a document that is a string": b'{"documents": ["text"]}',
    "documents as an object": b'{"documents": {"id": "a"}}',
    "a document id that is an object": b'{"documents": [{"id": {}, "text": "t"}]}',
}


@pytest.mark.parametrize("name", list(INGEST_BODIES))
def test_hostile_ingest_bodies_are_400_naming_the_field(rest_url, name):
    CASES["rest-hostile"] += 1
    reply = httpx.post(f"{rest_url}/v1/collections/fuzz/documents:ingest",
                       content=INGEST_BODIES[name],
                       headers={"content-type": "application/json",
                                "grpc-timeout": REST_DEADLINE}, timeout=30)
    assert reply.status_code == 400, (reply.status_code, reply.text[:300])
    violations = [v["field"] for d in reply.json().get("details", [])
                  for v in d.get("fieldViolations", [])]
    assert any(field.startswith("documents") for field in violations), reply.text[:300]


def test_a_deeply_nested_body_is_400(rest_url):
    CASES["rest-hostile"] += 1
    depth = 100_000
    body = b'{"connectFour": {"moves": "4453"}, "bogus": ' + b"[" * depth + b"]" * depth + b"}"
    reply = httpx.post(f"{rest_url}/v1/problems:solve", content=body,
                       headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == 400, (reply.status_code, reply.text[:300])


def test_every_service_still_serves_after_the_fuzzing(mesh):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    assert_mesh_alive(mesh)
    for name, port in mesh.ports.items():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                              timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
