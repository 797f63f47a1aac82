"""Resource names, list filters (an AIP-160 subset) and page tokens (AIP-158) of runs and batches.

Page tokens are opaque to clients: URL-safe base64 of JSON holding the position after the page
(the last row's id) and a fingerprint of the list's owner and filter, so that a token is refused
(INVALID_ARGUMENT "page_token") when it is malformed or used with another filter or key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass

from libs.errors import InvalidArgument
from services.orchestrator.runs.model import RunState

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_NAME = {"runs": re.compile(rf"^runs/({_ID})$"), "batches": re.compile(rf"^batches/({_ID})$")}
_TERM = re.compile(r'^\s*([a-z_]+)\s*=\s*(?:"([^"\\]*)"|([A-Za-z0-9_/-]+))\s*$')


def new_id() -> str:
    """A new resource id (a random UUID, lower-case hex with dashes)."""
    return str(uuid.uuid4())


def parse_name(name: str, collection: str, field: str = "name") -> str:
    """The id of `name` ("runs/{id}" or "batches/{id}" for collection "runs" or "batches").

    Raises InvalidArgument(field) when the name is not of that form."""
    match = _NAME[collection].match(name or "")
    if match is None:
        raise InvalidArgument(field, f"{name!r} is not of the form {collection}/{{id}} with a "
                                     "UUID id")
    return match.group(1)


def check_request_id(request_id: str | None) -> str | None:
    """The AIP-155 request id, or None for none (empty); raises InvalidArgument("request_id")
    unless it is a UUID."""
    if not request_id:
        return None
    try:
        return str(uuid.UUID(request_id))
    except ValueError:
        raise InvalidArgument("request_id", f"{request_id[:64]!r} is not a UUID") from None


@dataclass(frozen=True)
class RunFilter:
    """A parsed ListRuns filter: each restriction None when absent."""

    state: RunState | None = None
    batch: str | None = None


def parse_run_filter(text: str) -> RunFilter:
    """Parses `state = RUNNING` (a state name, with or without its STATE_ prefix, optionally
    quoted) and `batch = "batches/{id}"`, each at most once, joined by AND; "" means no filter.

    Raises InvalidArgument("filter") naming what is wrong."""
    values: dict[str, str] = {}
    if not text.strip():
        return RunFilter()
    for term in re.split(r"\s+AND\s+", text.strip()):
        match = _TERM.match(term)
        if match is None:
            raise InvalidArgument("filter", f"{term[:100]!r} is not `field = value` (supported: "
                                            "state = RUNNING AND batch = \"batches/ID\")")
        field, value = match.group(1), match.group(2) if match.group(2) is not None \
            else match.group(3)
        if field not in ("state", "batch"):
            raise InvalidArgument("filter", f"unknown field {field!r} (supported: state, batch)")
        if field in values:
            raise InvalidArgument("filter", f"{field} is restricted twice")
        values[field] = value
    state = _state(values["state"]) if "state" in values else None
    batch = values.get("batch")
    if batch is not None:
        try:
            parse_name(batch, "batches")
        except InvalidArgument as error:
            raise InvalidArgument("filter", f"batch: {error.description}") from None
    return RunFilter(state=state, batch=batch)


def _state(value: str) -> RunState:
    name = value.upper().removeprefix("STATE_")
    try:
        return RunState[name]
    except KeyError:
        allowed = ", ".join(state.name for state in RunState)
        raise InvalidArgument("filter", f"unknown state {value!r} (one of {allowed})") from None


def page_size(size: int) -> int:
    """AIP-158 page size: 0 means DEFAULT_PAGE_SIZE, larger than MAX_PAGE_SIZE is read as it;
    raises InvalidArgument("page_size") when negative."""
    if size < 0:
        raise InvalidArgument("page_size", f"{size} is negative")
    return min(size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def fingerprint(*parts: object) -> str:
    """A short digest of the list's owner and filter, bound into its page tokens."""
    return hashlib.sha256(json.dumps([str(part) for part in parts]).encode()).hexdigest()[:16]


def encode_token(position: int, bound: str) -> str:
    """The page token of the page after row id `position`, for the list of fingerprint `bound`."""
    raw = json.dumps({"after": position, "list": bound}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, bound: str) -> int | None:
    """The row id a page token continues after (None for "", the first page).

    Raises InvalidArgument("page_token") for a token that is malformed or was issued for another
    list (another filter or key)."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        position, issued_for = data["after"], data["list"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise InvalidArgument("page_token", "malformed; pass next_page_token unchanged") \
            from None
    if not isinstance(position, int) or isinstance(position, bool) or issued_for != bound:
        raise InvalidArgument("page_token", "not issued for this list (its filter or key "
                                            "differs); start again without a page_token")
    return position
