"""JSON Lines (https://jsonlines.org) at the REST front: a create method that also takes an
uploaded file of one item per line, and downloads written one JSON object per line.

Upload: a binding whose method is named in `Extras.uploads` accepts, besides its JSON body, a body
of `Content-Type: application/x-ndjson` or `application/jsonl` (`JSON_LINES_MEDIA_TYPES`). Each
non-blank line is the proto3 JSON of one element of the request's repeated message field
(`LinesUpload.field`), in order; blank lines are skipped but counted, so line numbers are the
file's. The body is read up to `max_bytes` (413 beyond, naming the limit); a file of more than
`max_items` items is refused (400 naming the limit) before any line is parsed; then every line is
checked (nesting depth, JSON, the message's fields) and the first bad one refuses the whole upload
(400, `InvalidLine`: its line number and the field, e.g. "line 3: items[2].solve.connect_four.moves:
..."); nothing is created. Query parameters fill the request's other fields (`request_id`,
`display_name`). Errors the service raises later about an item (`items[2]...`) are told with
their line number too (`name_lines`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from libs.errors import InvalidArgument
from libs.rest.limits import BodyTooDeep, check_json_depth
from libs.rest.transcoding import MalformedBody, decode_body

JSON_LINES_MEDIA_TYPES = ("application/x-ndjson", "application/jsonl")
JSON_LINES = "application/x-ndjson"


@dataclass(frozen=True)
class LinesUpload:
    """A create method that also takes a JSON Lines body.

    Attributes:
        field: the request's repeated message field; each line is one element.
        max_items: most items (lines that are not blank) accepted.
        max_bytes: largest body read (it replaces `RestSettings.max_body_bytes` for uploads).
        items_limit: the name of `max_items` in refusals (e.g. the setting's variable).
        bytes_limit: the name of `max_bytes` in refusals.
    """

    field: str
    max_items: int
    max_bytes: int
    items_limit: str = "max_items"
    bytes_limit: str = "max_bytes"


class InvalidLine(InvalidArgument):
    """An uploaded line that is not a valid item: `line` is its 1-based number in the file,
    `field` the proto path of the field at fault in the request (`items[2].solve.query`), `what`
    the fault."""

    def __init__(self, line: int, field: str, description: str) -> None:
        super().__init__(field, f"line {line}: {description}")
        self.line = line
        self.what = description
        self.message = f"line {line}: {field}: {description}"


class TooManyItems(InvalidArgument):
    """An upload of more items than the limit (not parsed)."""


def is_json_lines(content_type: str | None) -> bool:
    """Whether a Content-Type (any parameters, any case) is one of `JSON_LINES_MEDIA_TYPES`."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type in JSON_LINES_MEDIA_TYPES


def decode_lines(request: Message, upload: LinesUpload, body: bytes, max_depth: int) -> list[int]:
    """Appends one element of `request.<upload.field>` per non-blank line of `body`; returns the
    line number (1-based) of each element added.

    Raises:
        TooManyItems: more than `upload.max_items` non-blank lines (counted before parsing).
        InvalidLine: a line nested deeper than `max_depth`, not JSON, not an object, or with an
            unknown or mistyped field (its number and the field's path).
    """
    lines = body.split(b"\n")
    numbers = [number for number, line in enumerate(lines, 1) if line.strip()]
    if len(numbers) > upload.max_items:
        raise TooManyItems(upload.field, f"the upload has {len(numbers):,} items; at most "
                           f"{upload.max_items:,} are accepted ({upload.items_limit})")
    items = getattr(request, upload.field)
    for index, number in enumerate(numbers):
        item = items.add()
        where = f"{upload.field}[{index}]"
        line = lines[number - 1]
        try:
            check_json_depth(line, max_depth)
            decode_body(item, "*", line)
        except (BodyTooDeep, MalformedBody) as error:
            raise InvalidLine(number, where, _line_text(error.message)) from None
        except InvalidArgument as error:
            raise InvalidLine(number, f"{where}.{error.field}", error.description) from None
    return numbers


def _line_text(message: str) -> str:
    return message.replace("the request body", "the line")


_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]")


def name_lines(status: status_pb2.Status, field: str, numbers: list[int]) -> status_pb2.Status:
    """`status` with each BadRequest violation of an uploaded item (`<field>[i]...`) and the
    message told with the item's line number ("line 7: ..."), so an error the service found in
    an item points into the uploaded file. Other statuses are returned as they are."""
    out = status_pb2.Status()
    out.CopyFrom(status)
    lines: list[int] = []
    for detail in out.details:
        bad = error_details_pb2.BadRequest()
        if not detail.Unpack(bad):
            continue
        for violation in bad.field_violations:
            match = _ITEM.match(violation.field)
            if match is None or match.group(1) != field or int(match.group(2)) >= len(numbers):
                continue
            line = numbers[int(match.group(2))]
            lines.append(line)
            violation.description = f"line {line}: {violation.description}"
        detail.Pack(bad)
    if lines and not out.message.startswith("line "):
        out.message = f"line {lines[0]}: {out.message}"
    return out


def json_line(value: object) -> bytes:
    """One JSON Lines record: compact JSON (non-ASCII kept) and a newline."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
