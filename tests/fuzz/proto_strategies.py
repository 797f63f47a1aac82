"""Hypothesis strategies that build protobuf request bytes from a message descriptor: well-typed
messages with hostile values, and malformed wire bytes.

Well-typed (`messages`): every field optional; integers at and between their type's limits (so
overflowing numbers reach the server as the limits, -1, 0 and huge values), floats with NaN and
the infinities, strings from empty to `text_max` characters (any Unicode, NUL included), enums
with values outside the enum, repeated fields and maps of 0..`max_items` entries, nested
messages to `depth` levels; then optionally unknown fields (numbers 1,000..536,870,911 of every
wire type) appended, which a proto3 parser must skip.

Malformed (`malformed`): random bytes; a string field holding invalid UTF-8; a varint of 11
bytes (overflow); a length prefix longer than the message; a field tag with number 0; a
well-typed message cut short. Protobuf's own wire format rules (protobuf.dev, "Encoding") say
which of these a parser must reject.
"""

from __future__ import annotations

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

F = FieldDescriptor
_INT_BOUNDS = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1), F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1), F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1), F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1),
}


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (negatives as 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = sorted({lo, hi, 0, 1, max(lo, -1), min(hi, 10**6), min(hi, 10**7 + 1)})
    return st.one_of(st.sampled_from(edges), st.integers(max(lo, -1000), min(hi, 10**5)),
                     st.integers(lo, hi))


def _text(text_max: int) -> st.SearchStrategy[str]:
    small = st.text(max_size=40)
    edge = st.sampled_from(["", " ", "\x00", "\u0000" * 8, "\ufeff", "💥" * 50, "../../etc/passwd",
                            "%s%n{0}", "4453", "1" * 43])
    if text_max <= 40:
        return st.one_of(small, edge)
    huge = st.integers(41, text_max).map(lambda n: ("ab\u00e9" * (n // 3 + 1))[:n])
    return st.one_of(small, edge, huge)


def _scalar(field: FieldDescriptor, text_max: int) -> st.SearchStrategy:
    kind = field.type
    if kind in _INT_BOUNDS:
        return _integers(*_INT_BOUNDS[kind])
    if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True,
                         width=32 if kind == F.TYPE_FLOAT else 64)
    if kind == F.TYPE_BOOL:
        return st.booleans()
    if kind == F.TYPE_STRING:
        return _text(text_max)
    if kind == F.TYPE_BYTES:
        return st.binary(max_size=min(text_max, 256))
    if kind == F.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    raise TypeError(f"no strategy for field type {kind} of {field.full_name}")


def _is_map(field: FieldDescriptor) -> bool:
    return (field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
            and field.is_repeated)


def _fill(message: Message, draw, depth: int, text_max: int, max_items: int) -> None:
    for field in message.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        name = field.name
        if _is_map(field):
            key_field, value_field = field.message_type.fields_by_name["key"], \
                field.message_type.fields_by_name["value"]
            target = getattr(message, name)
            for _ in range(draw(st.integers(0, max_items))):
                key = draw(_scalar(key_field, 40))
                if value_field.type == F.TYPE_MESSAGE:
                    if depth > 0:
                        _fill(target[key], draw, depth - 1, text_max, max_items)
                else:
                    target[key] = draw(_scalar(value_field, text_max))
        elif field.is_repeated:
            count = draw(st.integers(0, max_items))
            if field.type == F.TYPE_MESSAGE:
                if depth > 0:
                    for _ in range(count):
                        _fill(getattr(message, name).add(), draw, depth - 1, text_max, max_items)
            else:
                getattr(message, name).extend(
                    draw(_scalar(field, text_max)) for _ in range(count))
        elif field.type == F.TYPE_MESSAGE:
            if depth > 0:
                child = getattr(message, name)
                child.SetInParent()
                _fill(child, draw, depth - 1, text_max, max_items)
        else:
            setattr(message, name, draw(_scalar(field, text_max)))


@st.composite
def _unknown_fields(draw) -> bytes:
    out = bytearray()
    for _ in range(draw(st.integers(1, 4))):
        number = draw(st.one_of(st.integers(1000, 5000), st.just(536_870_911)))
        wire = draw(st.sampled_from([0, 1, 2, 5]))
        if wire == 0:
            out += tag(number, 0) + varint(draw(st.integers(0, 2**64 - 1)))
        elif wire == 1:
            out += tag(number, 1) + draw(st.binary(min_size=8, max_size=8))
        elif wire == 5:
            out += tag(number, 5) + draw(st.binary(min_size=4, max_size=4))
        else:
            payload = draw(st.binary(max_size=64))
            out += tag(number, 2) + varint(len(payload)) + payload
    return bytes(out)


def messages(descriptor: Descriptor, depth: int = 3, text_max: int = 20_000,
             max_items: int = 5) -> st.SearchStrategy[bytes]:
    """Serialized well-typed messages of `descriptor`'s type, sometimes with unknown fields."""
    message_class = message_factory.GetMessageClass(descriptor)

    @st.composite
    def build(draw) -> bytes:
        message = message_class()
        _fill(message, draw, depth, text_max, max_items)
        data = message.SerializeToString()
        if draw(st.integers(0, 3)) == 0:
            data += draw(_unknown_fields())
        return data

    return build()


def _string_field_numbers(descriptor: Descriptor) -> list[int]:
    return [f.number for f in descriptor.fields if f.type == F.TYPE_STRING] or [1]


def malformed(descriptor: Descriptor) -> st.SearchStrategy[bytes]:
    """Bytes that are not a valid serialization of `descriptor`'s type."""
    strings = _string_field_numbers(descriptor)
    invalid_utf8 = st.builds(
        lambda number, junk: tag(number, 2) + varint(len(junk)) + junk,
        st.sampled_from(strings),
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"ok\xfe\xfe", b"\xf8\x88\x80"]))
    overflow = st.builds(lambda number: tag(number, 0) + b"\xff" * 10 + b"\x01",
                         st.integers(1, 15))
    too_long = st.builds(lambda number, claimed: tag(number, 2) + varint(claimed) + b"abc",
                         st.sampled_from(strings), st.integers(4, 2**31))
    zero_tag = st.just(b"\x00\x01")
    truncated = messages(descriptor, depth=2, text_max=200).filter(lambda b: len(b) > 2).map(
        lambda b: b[:-1])
    return st.one_of(st.binary(min_size=1, max_size=512), invalid_utf8, overflow, too_long,
                     zero_tag, truncated)
