"""The pure parts of the OpenAI-compatible routes: a chat body checked and mapped to an
AnswerQueryRequest, conversations composed into the query, parameters named in errors, and stop
sequences cut across streamed deltas."""

from __future__ import annotations

import json

import pytest
from google.rpc import error_details_pb2, status_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.api.openai_errors import ChatParamError, status_error
from services.orchestrator.api.openai_request import answer_request, compose_query, parse_chat
from services.orchestrator.api.openai_stream import StopScanner, apply_stops


def _parse(**body):
    return parse_chat(json.dumps({"model": "mesh", "messages": [
        {"role": "user", "content": "Why?"}], **body}).encode())


def test_a_request_maps_to_answer_query_fields():
    request, model = _parse(model="mesh-step-search", temperature=0.5, max_tokens=64,
                            mesh={"collection": "docs", "top_k": 3, "token_budget": 900,
                                  "search_mode": "sparse", "fusion": "rrf",
                                  "mcts_iterations": 8})
    message = answer_request(request, model)
    assert isinstance(message, pb.AnswerQueryRequest)
    assert (message.query, message.collection, message.top_k) == ("Why?", "docs", 3)
    assert message.role == pb.TEXT_ROLE_SEARCH and message.mcts_iterations == 8
    assert message.temperature == 0.5 and message.max_answer_tokens == 64
    assert message.max_tokens == 900
    assert message.search_mode == common_pb2.SEARCH_MODE_SPARSE
    assert message.fusion == common_pb2.FUSION_METHOD_RRF
    streamed = answer_request(*_parse(model="mesh-draft", max_completion_tokens=9),
                              pb.StreamAnswerQueryRequest)
    assert streamed.sample_count == 1 and streamed.max_answer_tokens == 9


@pytest.mark.parametrize(("mesh", "param"), [
    ({"top_k": 10**12}, "mesh.top_k"), ({"token_budget": 10**20}, "mesh.token_budget"),
])
def test_integers_over_the_proto_range_name_their_param(mesh, param):
    with pytest.raises(ChatParamError) as refused:
        answer_request(*_parse(mesh=mesh))
    assert refused.value.field == param


def test_the_conversation_becomes_the_query():
    messages = _parse(messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Why?"}])[0].messages
    assert compose_query(messages) == ("Instructions:\nBe brief.\n\nConversation so far:\n"
                                       "user: Hi\nassistant: Hello.\n\nQuestion:\nWhy?")
    with pytest.raises(ChatParamError) as too_long:
        compose_query(_parse(messages=[{"role": "user", "content": "x" * 10_001}])[0].messages)
    assert too_long.value.http_status == 413 and too_long.value.field == "messages"


@pytest.mark.parametrize(("body", "param"), [
    (b"not json", "body"),
    (b"[]", "body"),
    (b'{"model": "mesh", "messages": [{"role": "user", "content": 1}]}',
     "messages[0].content"),
    (b'{"model": "mesh", "messages": [{"role": "user", "content": "x"}], "stop": [1]}',
     "stop"),
    (b'{"model": "mesh", "messages": [{"role": "user", "content": "x"}], "logprobs": true}',
     "logprobs"),
    (b'{"model": "mesh", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
     "temperature"),
    (b'{"model": "mesh", "messages": [{"role": "user", "content": "x"}], '
     b'"mesh": {"max_cost_usd": Infinity}}', "mesh.max_cost_usd"),
])
def test_malformed_bodies_name_their_param(body, param):
    with pytest.raises(ChatParamError) as refused:
        parse_chat(body)
    assert refused.value.field.startswith(param)


def test_a_mesh_field_violation_is_named_as_the_chat_parameter():
    status = status_pb2.Status(code=3, message="top_k: must be in 1..20")
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field="top_k", description="1..20")]))
    error = status_error(status, 400)["error"]
    assert error == {"message": "mesh.top_k: must be in 1..20", "type": "invalid_request_error",
                     "param": "mesh.top_k", "code": "invalid_value"}
    status.details[0].Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field="query", description="too long")]))
    assert status_error(status, 400)["error"]["param"] == "messages"


def test_stop_sequences_cut_text_split_across_deltas():
    assert apply_stops("Four chambers.", ["cham", "x"]) == ("Four ", True)
    scanner = StopScanner(["END!"])
    sent = "".join(scanner.feed(delta) for delta in ["The ans", "wer E", "N", "D! more"])
    assert sent == "The answer " and scanner.stopped
    assert scanner.feed("ignored") == "" and scanner.raw.endswith("ignored")
    open_ended = StopScanner(["END!"])
    sent = "".join(open_ended.feed(delta) for delta in ["no stop E", "N"])
    assert sent + open_ended.flush() == "no stop EN" and not open_ended.stopped


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
_KEYS = ["model", "messages", "temperature", "max_tokens", "max_completion_tokens", "n", "stop",
         "stream", "stream_options", "mesh", "tools", "logprobs", "response_format"]
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "x"]),
                                  "content": _JSON | st.text(max_size=30)})
_MESH = st.dictionaries(st.sampled_from(["collection", "top_k", "sample_count", "token_budget",
                                         "max_cost_usd", "search_mode", "fusion", "thread_id",
                                         "mcts_iterations", "other"]), _JSON, max_size=4)


@given(st.fixed_dictionaries(
    {"model": st.sampled_from(["mesh", "mesh-refine", "nope"]) | _JSON,
     "messages": st.lists(_MESSAGE, max_size=3) | _JSON},
    optional={key: _JSON for key in _KEYS[2:]} | {"mesh": _MESH}))
@settings(max_examples=300, deadline=None)
def test_any_body_is_answered_or_refused_naming_a_param(body):
    try:
        request, model = parse_chat(json.dumps(body).encode())
        answer_request(request, model)
    except ChatParamError as refused:
        assert refused.field and refused.http_status in (400, 413)
