"""Transcoding HTTP requests to messages and messages to JSON, as grpc-gateway v2 does for unary
calls: body mapping, path variables, query parameters, and the proto3 JSON of responses."""

from __future__ import annotations

import json

import pytest
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.rpc import error_details_pb2, status_pb2
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument
from libs.rest.bindings import AnnotationError, service_bindings
from libs.rest.metadata import request_metadata, timeout_seconds
from libs.rest.status import http_status, status_json
from libs.rest.transcoding import MalformedBody, apply_query, build_request, response_json

SERVICE = pb.DESCRIPTOR.services_by_name["OrchestratorService"]
BINDINGS = {(b.method.name, b.index): b for b in service_bindings(SERVICE)}
SOLVE_GET = BINDINGS[("SolveProblem", 1)]
SOLVE_THREAD = BINDINGS[("SolveProblem", 2)]


def test_query_parameters_fill_nested_repeated_enum_and_integer_fields():
    request = build_request(
        SOLVE_GET, pb.SolveProblemRequest, b"", {},
        "connectFour.moves=44&agents=AGENT_MCTS&agents=3&simulations=1000&max_iterations=2"
        "&seed=18446744073709551615&threadId=t%2D1")
    assert request.connect_four.moves == "44"
    assert list(request.agents) == [pb.AGENT_MCTS, pb.AGENT_CHECKER]
    assert request.HasField("simulations") and request.simulations == 1000
    assert request.max_iterations == 2
    assert request.seed == 2**64 - 1
    assert request.thread_id == "t-1"


def test_unknown_query_keys_are_ignored():
    request = build_request(SOLVE_GET, pb.SolveProblemRequest, b"", {},
                            "access_token=abc&connect_four.moves=4")
    assert request.connect_four.moves == "4"


@pytest.mark.parametrize("query, field", [
    ("simulations=lots", "simulations"),
    ("simulations=1&simulations=2", "simulations"),
    ("max_iterations=2147483648", "max_iterations"),
    ("seed=-1", "seed"),
    ("agents=AGENT_SOMETHING", "agents"),
    ("agents=99", "agents"),
    ("connectFour.moves.first=4", "connect_four.moves"),
])
def test_bad_query_values_name_the_field(query, field):
    with pytest.raises(InvalidArgument) as error:
        build_request(SOLVE_GET, pb.SolveProblemRequest, b"", {}, query)
    assert error.value.field == field


def test_bools_take_go_spellings_and_maps_take_brackets():
    info = error_details_pb2.ErrorInfo()
    apply_query(info, "metadata[service]=mcts&metadata[zone]=eu&reason=R", skip=[])
    assert dict(info.metadata) == {"service": "mcts", "zone": "eu"}
    assert info.reason == "R"
    stats = common_pb2.SearchStatistics()
    apply_query(stats, "tree_full=T&threads=4&rootValue=-0.5", skip=[])
    assert stats.tree_full is True and stats.threads == 4 and stats.root_value == -0.5
    with pytest.raises(InvalidArgument):
        apply_query(common_pb2.SearchStatistics(), "treeFull=yes", skip=[])


def test_query_keys_under_path_variables_are_skipped():
    request = pb.SolveProblemRequest()
    apply_query(request, "thread_id=from-query&threadId=also&seed=3", skip=[("thread_id",)])
    assert request.thread_id == "" and request.seed == 3


def test_body_star_ignores_query_and_path_wins_over_body():
    request = build_request(SOLVE_THREAD, pb.SolveProblemRequest,
                            b'{"threadId": "body", "connect_four": {"moves": "1"}}',
                            {"thread_id": "path"}, "seed=5")
    assert request.thread_id == "path"
    assert request.connect_four.moves == "1"
    assert request.seed == 0


def test_empty_body_is_an_empty_message():
    assert build_request(SOLVE_THREAD, pb.SolveProblemRequest, b"  \n", {"thread_id": "t"}, "") \
        == pb.SolveProblemRequest(thread_id="t")


@pytest.mark.parametrize("body, field", [
    (b'{"connectFour": {"moves": 4}}', "connect_four.moves"),
    (b'{"connectFour": {"move": "4"}}', "connect_four.move"),
    (b'{"nope": true}', "nope"),
    (b'{"agents": ["AGENT_MCTS", "BAD"]}', "agents"),
])
def test_body_errors_name_the_field(body, field):
    with pytest.raises(InvalidArgument) as error:
        build_request(SOLVE_THREAD, pb.SolveProblemRequest, body, {"thread_id": "t"}, "")
    assert error.value.field == field


@pytest.mark.parametrize("body, field", [(b'{"agents": ["mcts"]}', "agents"),
                                         (b'{"agents": "mcts"}', "agents"),
                                         (b'{"searchMode": "fast"}', "search_mode")])
def test_a_bad_enum_value_lists_the_valid_ones(body, field):
    kind = pb.AnswerQueryRequest if b"search" in body else pb.SolveProblemRequest
    binding = BINDINGS[("AnswerQuery", 0)] if b"search" in body else SOLVE_THREAD
    with pytest.raises(InvalidArgument) as error:
        build_request(binding, kind, body, {"thread_id": "t"}, "")
    assert error.value.field == field
    enum = kind.DESCRIPTOR.fields_by_name[field].enum_type
    assert all(value.name in error.value.description for value in enum.values)


def test_errors_inside_repeated_messages_carry_the_index():
    ingest = BINDINGS[("IngestDocuments", 0)]
    with pytest.raises(InvalidArgument) as error:
        build_request(ingest, pb.IngestDocumentsRequest,
                      b'{"documents": [{"id": "a"}, {"id": "b", "txt": "x"}]}',
                      {"collection": "c"}, "")
    assert error.value.field == "documents[1].txt"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"'])
def test_non_object_bodies_are_malformed(body):
    with pytest.raises(MalformedBody):
        build_request(SOLVE_THREAD, pb.SolveProblemRequest, body, {"thread_id": "t"}, "")


_FIELD = descriptor_pb2.FieldDescriptorProto


def _add_file(file: descriptor_pb2.FileDescriptorProto):
    """Adds a test-only proto file to the default pool once; returns its descriptor."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(file.name)
    except KeyError:
        pool.Add(file)
        return pool.FindFileByName(file.name)


def _service_with_field_body():
    """A service whose rule maps the body onto one field and the rest from the query."""
    file = descriptor_pb2.FileDescriptorProto(
        name="rest_test/field_body.proto", package="rest_test", syntax="proto3",
        dependency=["google/api/annotations.proto", "mesh/common/v1/common.proto"])
    request = file.message_type.add(name="PlayRequest")
    request.field.add(name="game_id", number=1, type=_FIELD.TYPE_STRING,
                      label=_FIELD.LABEL_OPTIONAL)
    request.field.add(name="position", number=2, type=_FIELD.TYPE_MESSAGE,
                      type_name=".mesh.common.v1.ConnectFourPosition", label=_FIELD.LABEL_OPTIONAL)
    request.field.add(name="depth", number=3, type=_FIELD.TYPE_INT32, label=_FIELD.LABEL_OPTIONAL)
    method = file.service.add(name="GameService").method.add(
        name="Play", input_type=".rest_test.PlayRequest", output_type=".rest_test.PlayRequest")
    rule = http_pb2.HttpRule(post="/v1/games/{game_id}:play", body="position")
    method.options.Extensions[annotations_pb2.http].CopyFrom(rule)
    built = _add_file(file)
    return built.services_by_name["GameService"], built.message_types_by_name["PlayRequest"]


def test_body_field_binding_maps_body_to_that_field_and_the_rest_to_the_query():
    service, message = _service_with_field_body()
    [binding] = service_bindings(service)
    request_class = message_factory.GetMessageClass(message)
    request = build_request(binding, request_class, b'{"moves": "4455"}', {"game_id": "g1"},
                            "depth=3&position.moves=1")
    assert request.game_id == "g1"
    assert request.position.moves == "4455"  # query keys under the body field are skipped
    assert request.depth == 3


def test_get_binding_with_a_body_is_rejected():
    file = descriptor_pb2.FileDescriptorProto(
        name="rest_test/bad_get.proto", package="rest_test_bad", syntax="proto3",
        dependency=["google/api/annotations.proto", "mesh/common/v1/common.proto"])
    method = file.service.add(name="Bad").method.add(
        name="Get", input_type=".mesh.common.v1.ConnectFourPosition",
        output_type=".mesh.common.v1.ConnectFourPosition")
    method.options.Extensions[annotations_pb2.http].CopyFrom(
        http_pb2.HttpRule(get="/v1/positions/{moves}", body="*"))
    built = _add_file(file)
    with pytest.raises(AnnotationError):
        service_bindings(built.services_by_name["Bad"])


def test_response_json_is_protojson_with_emit_unpopulated():
    body = json.loads(response_json(pb.SolveProblemResponse(
        connect_four=pb.ConnectFourAnswer(column=4), agents=[pb.AGENT_MCTS])))
    assert body["connectFour"] == {"column": 4, "value": 0.0, "outcome": "OUTCOME_UNSPECIFIED",
                                   "score": 0}
    assert body["agents"] == ["AGENT_MCTS"]
    assert body["votes"] == [] and body["threadId"] == "" and body["consensusReached"] is False
    assert body["searchStatistics"] is None  # unset singular message: null, as protojson
    with_stats = json.loads(response_json(pb.SolveProblemResponse(
        search_statistics=common_pb2.SearchStatistics(simulations=7))))
    assert with_stats["searchStatistics"]["simulations"] == "7"
    assert "connectFour" not in with_stats  # unset oneof members are not emitted


def test_status_table_and_body():
    assert [http_status(code) for code in range(17)] == [
        200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401]
    assert http_status(99) == 500
    status = status_pb2.Status(code=3, message="bad")
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field="query", description="empty")]))
    unknown = status.details.add()
    unknown.type_url, unknown.value = "type.googleapis.com/not.a.Known", b"\x08\x01"
    body = json.loads(status_json(status))
    assert body["code"] == 3 and body["message"] == "bad"
    [detail] = body["details"]  # the undecodable detail is dropped, the rest kept
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == "query"
    assert detail["fieldViolations"][0]["description"] == "empty"


def test_headers_become_metadata_as_grpc_gateway_maps_them():
    pairs = request_metadata(
        [("grpc-metadata-x-user", "alice"), ("authorization", "Bearer t"),
         ("user-agent", "curl/8"), ("x-custom", "dropped"), ("grpc-metadata-blob-bin", "AAE"),
         ("x-forwarded-for", "10.0.0.1")],
        host="api.local:8080", client_ip="127.0.0.1")
    assert ("x-user", "alice") in pairs
    assert ("authorization", "Bearer t") in pairs
    assert ("grpcgateway-authorization", "Bearer t") in pairs
    assert ("grpcgateway-user-agent", "curl/8") in pairs
    assert ("blob-bin", b"\x00\x01") in pairs
    assert ("x-forwarded-host", "api.local:8080") in pairs
    assert ("x-forwarded-for", "10.0.0.1, 127.0.0.1") in pairs
    assert all(key != "x-custom" for key, _ in pairs)


def test_grpc_timeout_units():
    assert timeout_seconds("2S") == 2.0
    assert timeout_seconds("250m") == pytest.approx(0.25)
    assert timeout_seconds("1M") == 60.0
    assert timeout_seconds("5u") == pytest.approx(5e-6)
    for bad in ("", "5", "S", "1.5S", "10s"):
        with pytest.raises(InvalidArgument):
            timeout_seconds(bad)
