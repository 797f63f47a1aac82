"""The REST front's bounded look at a request before the key is checked and before parsing: the
`field[key]` split in one scan (the backtracking `^(.*)\\[(.*)\\]$` took 9 s on 65 KB of "["),
the query string's caps, the credential read from the headers alone, and the Host/Origin rules."""

from __future__ import annotations

import itertools
import re

import pytest
from google.rpc import error_details_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import to_status
from libs.rest.limits import QueryTooLong, TooManyQueryParameters, check_query
from libs.rest.metadata import credential_metadata
from libs.rest.origins import HostOriginGuard, default_allowed_hosts, is_loopback, split_host
from libs.rest.transcoding import apply_query, split_map_key
from services.orchestrator.access.control import MALFORMED, Credential, credential_from_metadata

GRPC_GATEWAY_MAP_KEY = re.compile(r"^(.*)\[(.*)\]$")  # grpc-gateway's pattern (Go's RE2 there)


def test_the_split_agrees_with_grpc_gateways_pattern_on_every_short_key():
    # every key of up to 6 characters over the alphabet that matters
    for length in range(7):
        for chars in itertools.product("a[].", repeat=length):
            key = "".join(chars)
            match = GRPC_GATEWAY_MAP_KEY.match(key)
            assert split_map_key(key) == (match.groups() if match else None), key


def test_a_line_break_never_makes_a_map_key():
    # Go's "." does not match "\n" and its "$" is the end of the text
    assert split_map_key("a[b]\n") is None
    assert split_map_key("a\n[b]") is None


def test_a_megabyte_of_brackets_is_one_scan():
    # the regex took quadratic time (hours for 1 MB); the scan is linear, and nothing is set
    request = pb.SolveProblemRequest()
    for key in ("[" * 1_000_000, "[" * 1_000_000 + "]", "x" + "[" * 999_999 + "]]"):
        apply_query(request, key + "=x", skip=[])
    assert request == pb.SolveProblemRequest()


def test_maps_still_take_brackets_after_the_change():
    from google.rpc import error_details_pb2 as details

    info = details.ErrorInfo()
    # "metadata[a[b]" is the field "metadata[a" (none: ignored), as with the pattern
    apply_query(info, "metadata[a[b]=1&metadata[]=2&metadata[c]]=3&metadata[d]=4", skip=[])
    assert dict(info.metadata) == {"": "2", "c]": "3", "d": "4"}


def test_query_caps():
    check_query(b"", 10, 1)
    check_query(b"a=1", 3, 1)
    check_query(b"a=1&b=2", 7, 2)
    with pytest.raises(QueryTooLong) as too_long:
        check_query(b"a=12", 3, 1)
    assert too_long.value.http_status == 414 and too_long.value.field == "query"
    with pytest.raises(TooManyQueryParameters) as too_many:
        check_query(b"a&b&c", 100, 2)
    assert too_many.value.field == "query" and "3 parameters" in too_many.value.message
    detail = error_details_pb2.BadRequest()
    assert to_status(too_many.value, "rest").details[0].Unpack(detail)
    assert detail.field_violations[0].field == "query"


@pytest.mark.parametrize(("headers", "credential"), [
    ([], Credential()),
    ([("X-Api-Key", "mmk_abc")], Credential("mmk_abc")),
    ([("authorization", "Bearer mmk_abc")], Credential("mmk_abc")),
    ([("Authorization", "Basic dXNlcjpwYXNz")], MALFORMED),
    ([("x-api-key", "k" * 2000)], MALFORMED),
    ([("x-api-key", "clé")], MALFORMED),
    ([("Content-Type", "application/json"), ("Grpc-Metadata-X-Api-Key", "mmk_abc")],
     Credential()),
])
def test_the_credential_is_read_from_its_headers_alone(headers, credential):
    assert credential_from_metadata(credential_metadata(headers)) == credential


@pytest.mark.parametrize(("value", "parts"), [
    ("api.example", ("api.example", "")), ("API.Example:8080", ("api.example", "8080")),
    ("[::1]:80", ("[::1]", "80")), ("[::1]", ("[::1]", "")), ("localhost.", ("localhost", "")),
    ("", None), ("[::1", None), ("[::1]x", None), ("a:b", None), ("a b", None),
    ("user@host", None), ("::1", None),
])
def test_host_headers_are_split_or_refused(value, parts):
    assert split_host(value) == parts


def test_the_default_hosts_follow_the_bound_address():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert default_allowed_hosts("127.0.0.1") == ("localhost", "127.0.0.1", "[::1]")
    assert default_allowed_hosts("127.0.0.2") == ("localhost", "127.0.0.1", "[::1]", "127.0.0.2")
    assert default_allowed_hosts("::1") == ("localhost", "127.0.0.1", "[::1]")
    assert default_allowed_hosts("0.0.0.0") == ("*",)


def test_origin_rules():
    guard = HostOriginGuard(None, ("localhost", "127.0.0.1", "[::1]"),
                            ("https://app.example/",))
    assert guard.check("127.0.0.1:8080", None) is None
    assert guard.check("127.0.0.1:8080", "http://127.0.0.1:8080") is None
    assert guard.check("localhost", "http://localhost:80") is None
    assert guard.check("localhost", "https://app.example") is None
    for origin in ("http://127.0.0.1:8081", "https://127.0.0.1", "null", "http://evil.example",
                   "file://", "http://localhost"):
        refusal = guard.check("127.0.0.1:8080", origin)
        assert refusal is not None and refusal.reason == "ORIGIN_NOT_ALLOWED", origin
    assert guard.check("evil.example", None).http_status == 421
    assert guard.check(None, None).http_status == 421
