"""The REST front's part in access control: credentials forwarded as metadata (never logged), and
`Retry-After` from a `google.rpc.RetryInfo` detail."""

from __future__ import annotations

import logging

from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from libs.rest.metadata import MAX_CREDENTIAL_CHARS, request_metadata
from libs.rest.status import status_response


def _pairs(headers):
    return [pair for pair in request_metadata(headers, None, None)
            if not pair[0].startswith("x-forwarded")]


def test_credentials_are_forwarded_as_metadata():
    assert _pairs([("X-API-Key", "mmk_abc")]) == [("x-api-key", "mmk_abc")]
    assert _pairs([("authorization", "Bearer mmk_abc")]) == [
        ("authorization", "Bearer mmk_abc"), ("grpcgateway-authorization", "Bearer mmk_abc")]


def test_credentials_metadata_cannot_carry_go_as_binary_without_a_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    accented = "clé".encode().decode("latin-1")  # how an ASGI server hands over UTF-8 bytes
    assert _pairs([("x-api-key", accented)]) == [("x-api-key-bin", "clé".encode())]
    assert _pairs([("Authorization", "Bearer " + accented)]) == [
        ("authorization-bin", ("Bearer " + accented).encode("latin-1"))]
    huge = "A" * 10_000
    assert _pairs([("x-api-key", huge)]) == [("x-api-key-bin",
                                              b"A" * MAX_CREDENTIAL_CHARS)]
    assert caplog.records == []


def _status(seconds: float | None) -> status_pb2.Status:
    status = status_pb2.Status(code=8, message="slow down")
    if seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(seconds * 1e9))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def test_retry_after_comes_from_retry_info_in_whole_seconds_rounded_up():
    assert status_response(_status(0.2)).headers["retry-after"] == "1"
    assert status_response(_status(1.5)).headers["retry-after"] == "2"
    assert status_response(_status(60.0)).headers["retry-after"] == "60"
    response = status_response(_status(None))
    assert response.status_code == 429 and "retry-after" not in response.headers
