"""The REST front's JSON Lines upload decoding (on the loop and in a worker process), the naming of
an item's error by its line, and the SSE pieces: Last-Event-ID and the events' wire form."""

from __future__ import annotations

import json

import pytest
from google.rpc import error_details_pb2, status_pb2
from mesh.orchestrator.v1 import run_service_pb2 as pb

from libs.errors import InvalidArgument
from libs.rest.jsonl import (
    InvalidLine,
    LinesUpload,
    TooManyItems,
    decode_lines,
    is_json_lines,
    name_lines,
)
from libs.rest.offload import BodyDecoder
from libs.rest.sse import SseWatch, apply_last_event_id, error_event, message_event

UPLOAD = LinesUpload("items", max_items=3, max_bytes=10_000, items_limit="BATCH_MAX_ITEMS")


def test_each_non_blank_line_is_one_item_numbered_as_in_the_file():
    body = b'{"solve": {"connectFour": {"moves": "4"}}}\r\n\n  \n{"answer": {"query": "q"}}'
    request = pb.CreateBatchRequest()
    assert decode_lines(request, UPLOAD, body, max_depth=64) == [1, 4]
    assert request.items[0].solve.connect_four.moves == "4"
    assert request.items[1].answer.query == "q"


def test_too_many_items_are_refused_before_any_line_is_parsed():
    body = b'{"answer": {}}\n' * 3 + b"not json\n"
    with pytest.raises(TooManyItems) as refused:
        decode_lines(pb.CreateBatchRequest(), UPLOAD, body, max_depth=64)
    assert "4 items" in refused.value.message and "BATCH_MAX_ITEMS" in refused.value.message


@pytest.mark.parametrize(("line", "field", "what"), [
    (b'{"solve": {"connectFour": {"moves": 4}}}', "items[1].solve.connect_four.moves", ""),
    (b'{"solve": {"connectFour": {"mvoes": "4"}}}', "items[1].solve.connect_four.mvoes",
     "unknown field"),
    (b"[" * 70 + b"]" * 70, "items[1]", "the line nests"),
    (b"{", "items[1]", "the line is not JSON"),
])
def test_a_bad_line_names_its_number_and_field(line, field, what):
    body = b'{"answer": {"query": "q"}}\n' + line + b"\n"
    with pytest.raises(InvalidLine) as refused:
        decode_lines(pb.CreateBatchRequest(), UPLOAD, body, max_depth=64)
    assert refused.value.line == 2 and refused.value.field == field
    assert refused.value.message.startswith(f"line 2: {field}: {what}")
    assert isinstance(refused.value, InvalidArgument)


async def test_a_large_upload_is_decoded_in_a_worker_with_the_same_result():
    lines = [json.dumps({"solve": {"connectFour": {"moves": "4" * (index % 6)}}})
             for index in range(300)]
    body = "\n".join(lines).encode()
    upload = LinesUpload("items", max_items=301, max_bytes=len(body))
    decoder = BodyDecoder(min_bytes=1024, max_depth=64, workers=1)
    try:
        request, numbers = await decoder.decode_lines(pb.CreateBatchRequest(), upload, body)
        on_loop = pb.CreateBatchRequest()
        assert numbers == decode_lines(on_loop, upload, body, 64) == list(range(1, 301))
        assert request == on_loop
        bad = body + b'\n{"answer": {"query": 7}}'
        with pytest.raises(InvalidLine) as refused:
            await decoder.decode_lines(pb.CreateBatchRequest(), upload, bad)
        assert refused.value.line == 301 and refused.value.field == "items[300].answer.query"
        with pytest.raises(TooManyItems):
            await decoder.decode_lines(pb.CreateBatchRequest(), upload, bad + b"\n{}")
    finally:
        decoder.close()


def test_an_items_error_from_the_service_is_told_with_its_line():
    status = status_pb2.Status(code=3, message="items[1].solve.connect_four.moves: bad")
    violation = error_details_pb2.BadRequest.FieldViolation(
        field="items[1].solve.connect_four.moves", description="bad")
    bad = error_details_pb2.BadRequest(field_violations=[violation])
    status.details.add().Pack(bad)
    named = name_lines(status, "items", [2, 5])
    assert named.message == "line 5: items[1].solve.connect_four.moves: bad"
    unpacked = error_details_pb2.BadRequest()
    named.details[0].Unpack(unpacked)
    assert unpacked.field_violations[0].description == "line 5: bad"
    other = status_pb2.Status(code=3, message="request_id: not a UUID")
    assert name_lines(other, "items", [1]) == other


@pytest.mark.parametrize("content_type",
                         ["application/x-ndjson", "Application/JSONL; charset=utf-8"])
def test_json_lines_media_types(content_type):
    assert is_json_lines(content_type)
    assert not is_json_lines("application/json") and not is_json_lines(None)


def test_last_event_id_sets_the_resume_field_over_the_query():
    request = pb.WatchRunRequest(name="runs/r", after_sequence=1)
    apply_last_event_id(request, SseWatch(), {"last-event-id": " 42 "})
    assert request.after_sequence == 42
    apply_last_event_id(request, SseWatch(), {})
    assert request.after_sequence == 42


@pytest.mark.parametrize("value", ["-1", "4.5", "x", "1" * 20, "٣"])
def test_a_malformed_last_event_id_is_invalid_argument_naming_it(value):
    with pytest.raises(InvalidArgument) as refused:
        apply_last_event_id(pb.WatchRunRequest(), SseWatch(), {"last-event-id": value})
    assert refused.value.field == "Last-Event-ID"


def test_an_event_is_its_sequence_as_id_and_its_json_on_one_data_line():
    event = pb.RunEvent(sequence=7, run="runs/r", state_changed=pb.StateChanged(
        state=pb.Run.STATE_SUCCEEDED))
    wire = message_event(event, SseWatch()).encode().decode()
    lines = wire.split("\n")
    assert lines[0] == "id: 7" and lines[1].startswith("data: {") and lines[2:] == ["", ""]
    assert json.loads(lines[1][6:])["stateChanged"]["state"] == "STATE_SUCCEEDED"
    assert "id:" not in message_event(pb.RunEvent(), SseWatch()).encode().decode()
    failed = error_event(status_pb2.Status(code=4, message="deadline")).encode().decode()
    assert failed.startswith("event: error\ndata: {") and '"code":4' in failed
