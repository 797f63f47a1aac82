"""HTTP request -> request message, and response message -> JSON, with grpc-gateway v2's semantics
for unary calls (its generated `request_X_N` handlers and `runtime/query.go`).

Request: the JSON body is decoded first (`body: "*"` onto the whole message, `body: "field"` onto
that field; an empty body leaves the message empty), then path variables are set (they win over the
body), then, unless the body is "*", query parameters fill the remaining fields: a key is a dotted
field path (each name the proto name or the lowerCamelCase JSON name), repeated fields take repeated
keys, maps take `field[key]=value`, enums take a value name or number, bools take Go's
`strconv.ParseBool` spellings; keys that name no field are ignored and keys under a path variable or
the body field are skipped, as in grpc-gateway.

JSON is proto3 JSON (google.protobuf.json_format). Unknown body fields are rejected (grpc-gateway's
default marshaler discards them; a client's typo silently ignored is worse than a 400, so this front
behaves like grpc-gateway configured with `DiscardUnknown: false`). Responses follow grpc-gateway
v2's default marshaler, protojson with `UseProtoNames: false, EmitUnpopulated: true`: lowerCamelCase
names, fields without presence emitted with their defaults, unset singular messages (outside oneofs)
emitted as null, 64-bit integers as strings.

Every transcoding failure raises `libs.errors.InvalidArgument` naming the proto field path, e.g.
"connect_four.moves" or "agents".
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from urllib.parse import parse_qsl

import grpc
from google.protobuf import field_mask_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from libs.errors import InvalidArgument, MeshError
from libs.rest.bindings import HttpBinding

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
# Message types a single query or path value may carry, parsed from their proto3 JSON string form.
_SCALAR_MESSAGES = {
    "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.DoubleValue",
    "google.protobuf.FloatValue", "google.protobuf.Int64Value", "google.protobuf.UInt64Value",
    "google.protobuf.Int32Value", "google.protobuf.UInt32Value", "google.protobuf.BoolValue",
    "google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.FieldMask",
}


def build_request(
    binding: HttpBinding, message_class: type[Message], body: bytes, path_values: dict[str, str],
    query: str,
) -> Message:
    """The request message for one HTTP request.

    Args:
        binding: the matched binding.
        message_class: the generated class of the binding's request type.
        body: the raw HTTP body (JSON; empty or whitespace means no body).
        path_values: the template's variables, by dotted proto field path.
        query: the raw query string ("" when none).
    Raises:
        InvalidArgument: malformed JSON, an unknown or mistyped field, or a bad path or query value,
            naming the field.
    """
    request = message_class()
    if binding.body and body.strip():
        decode_body(request, binding.body, body)
    apply_path_and_query(binding, request, path_values, query)
    return request


def apply_path_and_query(binding: HttpBinding, request: Message, path_values: dict[str, str],
                         query: str) -> None:
    """Sets the path variables, then (unless the body is "*") the query parameters, on `request`
    (its body already decoded), as `build_request` does.

    Raises:
        InvalidArgument: a bad path or query value, naming the field.
    """
    for name, value in path_values.items():
        set_field(request, name.split("."), [value])
    if binding.body != "*" and query:
        skip = [tuple(name.split(".")) for name in path_values]
        if binding.body:
            skip.append((binding.body,))
        apply_query(request, query, skip)


class MalformedBody(MeshError):
    """The HTTP body is not JSON, or not a JSON object where the request message goes."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "MALFORMED_BODY"


def decode_body(request: Message, body_field: str, body: bytes) -> None:
    """Merges the JSON `body` into `request` ("*") or into its top-level field `body_field`.

    Raises:
        MalformedBody: not JSON, or not an object for "*".
        InvalidArgument: an unknown field or a value of the wrong type, naming the field.
    """
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedBody(f"the request body is not JSON: {error}") from None
    if body_field == "*":
        if not isinstance(value, dict):
            raise MalformedBody(f"the request body must be a JSON object "
                                f"({request.DESCRIPTOR.full_name})")
    else:
        value = {request.DESCRIPTOR.fields_by_name[body_field].json_name: value}
    try:
        json_format.ParseDict(value, request, ignore_unknown_fields=False)
    except json_format.ParseError as error:
        field_path, description = locate_parse_error(request.DESCRIPTOR, value, str(error))
        if not field_path:
            raise MalformedBody(description) from None
        raise InvalidArgument(field_path, description) from None


def locate_parse_error(descriptor: Descriptor, value: object, message: str,
                       prefix: str = "") -> tuple[str, str]:
    """The proto field path ("" for the whole body) and description of the first JSON member of
    `value` that fails to parse as `descriptor`; `message` is json_format's error for the whole.

    json_format reports the first failure without a usable path, so each member is parsed alone to
    find the one at fault, descending into message fields and list items.
    """
    if not isinstance(value, dict):
        return prefix, f"expected a JSON object for {descriptor.full_name}"
    fields = {f.name: f for f in descriptor.fields}
    fields.update({f.json_name: f for f in descriptor.fields})
    seen_fields: set[str] = set()
    seen_oneofs: dict[str, str] = {}
    for key, member in value.items():
        field = fields.get(key)
        if field is None:
            return _join(prefix, key), f"unknown field {key!r} in {descriptor.full_name}"
        path = _join(prefix, field.name)
        if field.name in seen_fields:
            return path, "given twice (by its proto name and its JSON name)"
        seen_fields.add(field.name)
        oneof = field.containing_oneof
        if oneof is not None and member is not None:
            if oneof.name in seen_oneofs:
                return path, f"oneof {oneof.name!r} already set by {seen_oneofs[oneof.name]!r}"
            seen_oneofs[oneof.name] = field.name
        error = _parse_error(descriptor, {key: member})
        if error is None:
            continue
        descend = (field.type == FieldDescriptor.TYPE_MESSAGE
                   and not field.message_type.GetOptions().map_entry
                   and not field.message_type.full_name.startswith("google.protobuf."))
        if descend and field.is_repeated and isinstance(member, list):
            for index, item in enumerate(member):
                item_error = _parse_error(field.message_type, item)
                if item_error is not None:
                    return locate_parse_error(field.message_type, item, item_error,
                                              f"{path}[{index}]")
        elif descend and not field.is_repeated and isinstance(member, dict):
            return locate_parse_error(field.message_type, member, error, path)
        if field.type == FieldDescriptor.TYPE_ENUM:
            return _enum_error(field, member, path, error)
        return path, error
    return prefix, message


def _enum_error(field: FieldDescriptor, member: object, path: str, error: str
                ) -> tuple[str, str]:
    """The path and description of a JSON value that is not one of the enum field's values,
    listing them (json_format names none; a list's item is named in the description, the field
    stays the list's, as the services name it); `error` when every value is one."""
    enum = field.enum_type
    items = (list(enumerate(member)) if field.is_repeated and isinstance(member, list)
             else [(None, member)])
    for index, item in items:
        named = isinstance(item, str) and item in enum.values_by_name
        numbered = isinstance(item, int) and not isinstance(item, bool)
        if not (named or numbered):
            names = ", ".join(value.name for value in enum.values)
            what = "" if index is None else f"{path}[{index}] "
            return path, f"{what}{item!r} is not a value of {enum.full_name} ({names})"
    return path, error


def _parse_error(descriptor: Descriptor, value: object) -> str | None:
    if not isinstance(value, dict):  # ParseDict raises TypeError, not ParseError, for these
        return f"expected a JSON object for {descriptor.full_name}"
    try:
        json_format.ParseDict(value, message_factory.GetMessageClass(descriptor)(),
                              ignore_unknown_fields=False)
    except json_format.ParseError as error:
        return str(error)
    return None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def apply_query(request: Message, query: str, skip: Iterable[tuple[str, ...]]) -> None:
    """Sets fields of `request` from a URL query string (grpc-gateway's `DefaultQueryParser`).

    `skip` lists proto field paths set by the path or the body: a key sharing a prefix with one of
    them is ignored.
    """
    skipped = list(skip)
    grouped: dict[str, list[str]] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        grouped.setdefault(key, []).append(value)
    for key, values in grouped.items():
        map_key = split_map_key(key)
        if map_key is not None:
            key, values = map_key[0], [map_key[1], *values]
        names = key.split(".")
        resolved = _proto_path(request.DESCRIPTOR, names)
        if any(_common_prefix(resolved, path) for path in skipped):
            continue
        set_field(request, names, values)


def split_map_key(key: str) -> tuple[str, str] | None:
    """A `field[key]` query key split into ("field", "key"); None when it is not one.

    grpc-gateway matches `^(.*)\\[(.*)\\]$` with Go's linear-time regexp; a backtracking engine
    takes quadratic time on a key of many "[" (65 KB of them cost 9 s). The same split in one scan:
    the key ends with "]", and the field path ends at the last "[" before it. A key with a line
    break is none (Go's "." does not match one).
    """
    if not key.endswith("]") or "\n" in key:
        return None
    opening = key.rfind("[", 0, len(key) - 1)
    if opening < 0:
        return None
    return key[:opening], key[opening + 1:-1]


def _proto_path(descriptor: Descriptor, names: list[str]) -> tuple[str, ...]:
    """The proto names of a dotted path written with proto or JSON names (as far as it resolves)."""
    out: list[str] = []
    for name in names:
        field = _field(descriptor, name) if descriptor is not None else None
        if field is None:
            return (*out, name)
        out.append(field.name)
        descriptor = field.message_type
    return tuple(out)


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _field(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    field = descriptor.fields_by_name.get(name)
    if field is None:
        field = next((f for f in descriptor.fields if f.json_name == name), None)
    return field


def set_field(request: Message, names: list[str], values: list[str]) -> None:
    """Sets the field at the dotted path `names` of `request` from its string `values`.

    A name that matches no field ends the walk silently (grpc-gateway ignores unknown query keys).

    Raises:
        InvalidArgument: the path crosses a repeated or scalar field, a oneof already has another
            member set, several values for a singular field, or a value that does not parse.
    """
    message = request
    proto_path: list[str] = []
    for position, name in enumerate(names):
        field = _field(message.DESCRIPTOR, name)
        if field is None:
            return
        proto_path.append(field.name)
        path = ".".join(proto_path)
        _check_oneof(message, field, path)
        if position == len(names) - 1:
            _assign(message, field, values, path)
            return
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.is_repeated:
            raise InvalidArgument(path, "is not a singular message field, so it has no subfields")
        message = getattr(message, field.name)


def _check_oneof(message: Message, field: FieldDescriptor, path: str) -> None:
    oneof = field.containing_oneof
    if oneof is None:
        return
    current = message.WhichOneof(oneof.name)
    if current is not None and current != field.name:
        raise InvalidArgument(path, f"field already set for oneof {oneof.name!r} ({current})")


def _assign(message: Message, field: FieldDescriptor, values: list[str], path: str) -> None:
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        if len(values) != 2:
            raise InvalidArgument(path, "a map entry takes one key and one value: field[key]=value")
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        key = parse_value(key_field, values[0], path)
        value = parse_value(value_field, values[1], path)
        target = getattr(message, field.name)
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            target[key].CopyFrom(value)
        else:
            target[key] = value
        return
    if field.is_repeated:
        target = getattr(message, field.name)
        for text in values:
            value = parse_value(field, text, path)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                target.add().CopyFrom(value)
            else:
                target.append(value)
        return
    if len(values) > 1:
        raise InvalidArgument(path, f"too many values for a singular field: {', '.join(values)}")
    value = parse_value(field, values[0], path)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def parse_value(field: FieldDescriptor, text: str, path: str) -> object:
    """One path or query value as the field's type (grpc-gateway's `parseField`).

    Raises:
        InvalidArgument: the text does not parse as the type, an integer out of range, an enum value
            not defined, or a message type that has no single-string form.
    """
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return text
    if kind == FieldDescriptor.TYPE_BOOL:
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise InvalidArgument(path, f"{text!r} is not a bool")
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        try:
            number = int(text, 10)
        except ValueError:
            raise InvalidArgument(path, f"{text!r} is not an integer") from None
        if not low <= number <= high:
            raise InvalidArgument(path, f"{text} is out of range [{low}, {high}]")
        return number
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        try:
            return float(text)
        except ValueError:
            raise InvalidArgument(path, f"{text!r} is not a number") from None
    if kind == FieldDescriptor.TYPE_BYTES:
        return _parse_bytes(text, path)
    if kind == FieldDescriptor.TYPE_ENUM:
        return _parse_enum(field, text, path)
    return _parse_message(field, text, path)


def _parse_bytes(text: str, path: str) -> bytes:
    """Standard base64, then URL-safe base64, padding optional (grpc-gateway's `runtime.Bytes`)."""
    padded = text + "=" * (-len(text) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded.encode("ascii"), altchars=altchars, validate=True)
        except (binascii.Error, UnicodeEncodeError):
            continue
    raise InvalidArgument(path, f"{text!r} is not base64")


def _parse_enum(field: FieldDescriptor, text: str, path: str) -> int:
    enum = field.enum_type
    by_name = enum.values_by_name.get(text)
    if by_name is not None:
        return by_name.number
    try:
        number = int(text, 10)
    except ValueError:
        number = None
    if number is None or number not in enum.values_by_number:
        names = ", ".join(value.name for value in enum.values)
        raise InvalidArgument(path, f"{text!r} is not a value of {enum.full_name} ({names})")
    return number


def _parse_message(field: FieldDescriptor, text: str, path: str) -> Message:
    full_name = field.message_type.full_name
    if full_name not in _SCALAR_MESSAGES:
        raise InvalidArgument(path, f"{full_name} cannot be set from a single path or query value")
    if full_name == "google.protobuf.FieldMask":
        return field_mask_pb2.FieldMask(paths=[part for part in text.split(",") if part])
    message = message_factory.GetMessageClass(field.message_type)()
    if full_name == "google.protobuf.StringValue":
        message.value = text
        return message
    try:
        json_format.Parse(json.dumps(text), message)
    except json_format.ParseError as error:
        raise InvalidArgument(path, f"{text!r} is not a {full_name}: {error}") from None
    return message


def response_json(message: Message, response_body: str = "") -> bytes:
    """The HTTP response body for a response message (or for its `response_body` field)."""
    value = message_to_json_value(message)
    if response_body:
        value = value.get(message.DESCRIPTOR.fields_by_name[response_body].json_name)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def message_to_json_value(message: Message) -> dict:
    """proto3 JSON of `message` as protojson with EmitUnpopulated (see the module docstring)."""
    value = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    _emit_null_messages(message, value)
    return value


def _emit_null_messages(message: Message, value: dict) -> None:
    if message.DESCRIPTOR.full_name.startswith("google.protobuf."):
        return
    for field in message.DESCRIPTOR.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                entries = value.get(field.json_name, {})
                for key, item in getattr(message, field.name).items():
                    _emit_null_messages(item, entries[_map_key_json(key)])
            continue
        if field.is_repeated:
            items = value.get(field.json_name, [])
            for item, item_value in zip(getattr(message, field.name), items, strict=True):
                if isinstance(item_value, dict):
                    _emit_null_messages(item, item_value)
            continue
        if message.HasField(field.name):
            child = value.get(field.json_name)
            if isinstance(child, dict):
                _emit_null_messages(getattr(message, field.name), child)
        elif field.containing_oneof is None:
            value[field.json_name] = None


def _map_key_json(key: object) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
