"""HTTP headers <-> gRPC metadata and deadline, as grpc-gateway v2's `runtime.AnnotateContext` and
`DefaultHeaderMatcher` map them.

Incoming: `Grpc-Metadata-<Key>` becomes metadata `<key>` (a `-Bin` key's value is base64-decoded),
IANA permanent request headers become `grpcgateway-<header>`, `Authorization` is also passed as
`authorization` and `X-Api-Key` as `x-api-key` (the orchestrator's access control reads both; a
value that metadata cannot carry, not printable ASCII or over 1 KiB, goes as `authorization-bin` /
`x-api-key-bin`, which access control refuses as an invalid key, and is never logged), and
`x-forwarded-host` / `x-forwarded-for` are added (the client address appended to an incoming
X-Forwarded-For). `Grpc-Timeout` ("<digits><H|M|S|m|u|n>") sets the deadline; without
it the front's default deadline applies (grpc-gateway has none by default; every call in the mesh
carries one), and a longer one is capped at the front's maximum. Outgoing: response header metadata
becomes `Grpc-Metadata-<key>` headers.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re

from libs.errors import InvalidArgument

log = logging.getLogger(__name__)

METADATA_HEADER_PREFIX = "Grpc-Metadata-"
METADATA_PREFIX = "grpcgateway-"
_PERMANENT_HEADERS = frozenset({
    "Accept", "Accept-Charset", "Accept-Language", "Accept-Ranges", "Authorization",
    "Cache-Control", "Content-Type", "Cookie", "Date", "Expect", "From", "Host", "If-Match",
    "If-Modified-Since", "If-None-Match", "If-Schedule-Tag-Match", "If-Unmodified-Since",
    "Max-Forwards", "Origin", "Pragma", "Referer", "User-Agent", "Via", "Warning",
})
_TIMEOUT = re.compile(r"(\d{1,8})([HMSmun])\Z")  # the gRPC spec: at most 8 digits
_UNIT_SECONDS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_VALID_KEY = re.compile(r"[0-9a-z_.\-]+\Z")
_CREDENTIAL_HEADERS = {"Authorization": "authorization", "X-Api-Key": "x-api-key"}
MAX_CREDENTIAL_CHARS = 1024


def canonical_header(key: str) -> str:
    """Go's `textproto.CanonicalMIMEHeaderKey`: "grpc-metadata-x-user" -> "Grpc-Metadata-X-User"."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in key.split("-"))


def timeout_seconds(value: str) -> float:
    """Seconds of a `Grpc-Timeout` header value such as "500m" or "2S" (up to "99999999H", about
    11,400 years: the caller caps it).

    Raises:
        InvalidArgument: the value is not 1 to 8 digits followed by one of H M S m u n.
    """
    match = _TIMEOUT.match(value.strip())
    if match is None:
        raise InvalidArgument("Grpc-Timeout", f"invalid grpc-timeout: {value}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def request_metadata(
    headers: list[tuple[str, str]], host: str | None, client_ip: str | None,
) -> list[tuple[str, str | bytes]]:
    """gRPC metadata for an HTTP request's headers (see the module docstring).

    Args:
        headers: (name, value) pairs as received, any case, repeated names kept.
        host: the request's Host, used for x-forwarded-host when X-Forwarded-Host is absent.
        client_ip: the peer's address, appended to x-forwarded-for.
    Raises:
        InvalidArgument: a `-Bin` header whose value is not base64.
    """
    pairs: list[tuple[str, str | bytes]] = []
    forwarded_host = forwarded_for = None
    for raw_key, value in headers:
        key = canonical_header(raw_key)
        if key == "X-Forwarded-Host" and forwarded_host is None:
            forwarded_host = value
        if key == "X-Forwarded-For" and forwarded_for is None:
            forwarded_for = value
        if key in _CREDENTIAL_HEADERS:
            pair = _credential_pair(key, value)
            pairs.append(pair)
            if pair[0].endswith("-bin"):
                continue
        if key in _PERMANENT_HEADERS:
            name = (METADATA_PREFIX + key).lower()
        elif key.startswith(METADATA_HEADER_PREFIX):
            name = key[len(METADATA_HEADER_PREFIX):].lower()
        else:
            continue
        if not _VALID_KEY.match(name) or name.startswith("grpc-"):
            log.warning("dropping HTTP header %s: not a valid gRPC metadata key", raw_key)
            continue
        if name.endswith("-bin"):
            pairs.append((name, _decode_binary(key, value)))
        elif value.isascii() and value.isprintable():
            pairs.append((name, value))
        else:
            log.warning("dropping HTTP header %s: value is not printable ASCII", raw_key)
    if forwarded_host:
        pairs.append(("x-forwarded-host", forwarded_host))
    elif host:
        pairs.append(("x-forwarded-host", host))
    if client_ip:
        chain = f"{forwarded_for}, {client_ip}" if forwarded_for else client_ip
        pairs.append(("x-forwarded-for", chain))
    return pairs


def credential_metadata(headers: list[tuple[str, str]]) -> list[tuple[str, str | bytes]]:
    """The metadata entries `request_metadata` makes of the credential headers (Authorization,
    X-Api-Key) alone: what access control reads, for the REST front's check of the key before it
    looks at anything else of the request. Linear in the number of headers."""
    pairs: list[tuple[str, str | bytes]] = []
    for raw_key, value in headers:
        lowered = raw_key.lower()
        if lowered in ("authorization", "x-api-key"):
            pairs.append(_credential_pair(canonical_header(lowered), value))
    return pairs


def _credential_pair(key: str, value: str) -> tuple[str, str | bytes]:
    name = _CREDENTIAL_HEADERS[key]
    if len(value) <= MAX_CREDENTIAL_CHARS and value.isascii() and value.isprintable():
        return name, value
    return name + "-bin", value[:MAX_CREDENTIAL_CHARS].encode("latin-1", "replace")


def _decode_binary(key: str, value: str) -> bytes:
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(key, f"invalid binary header {key}: not base64") from None


def response_headers(metadata: object) -> dict[str, str]:
    """`Grpc-Metadata-<key>` headers for the server's header metadata (binary values in base64)."""
    out: dict[str, str] = {}
    for key, value in metadata or ():
        text = base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
        name = METADATA_HEADER_PREFIX + key
        out[name] = f"{out[name]}, {text}" if name in out else text
    return out
