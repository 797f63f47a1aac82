"""A `LoopCheckpoint` as bytes and back: JSON (UTF-8) with tagged values, no pickle.

The loop's own vocabulary (votes, proposals, tallies, routing decisions, timings) is known here;
what agents put in `Proposal.detail` and `Round.context` comes in as `types` (the orchestrator's
edge passes the problems' and agents' dataclasses), and protobuf messages (the search's
`SearchStatistics`, a network's `SolveResponse`) travel as their serialized bytes under their full
name, resolved in the default descriptor pool. Decoding builds only those types, so a stored
checkpoint can create nothing else.

Tags: {"t": [...]} tuple, {"s": [...]} frozenset, {"m": [[k, v], ...]} dict, {"e": [type, value]}
enum, {"d": [type, {field: value}]} dataclass, {"p": [full name, base64]} protobuf message,
{"a": [dtype, values]} numpy array, {"x": [class, message, failed_service, field?]} a MeshError;
lists, strings, numbers, booleans and null are themselves.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Iterable
from typing import Any

import numpy as np
from google.protobuf import descriptor_pool, message, message_factory

from libs.errors import InvalidArgument, MeshError
from services.orchestrator.loop.checkpoint import LoopCheckpoint
from services.orchestrator.loop.state import LoopState
from services.orchestrator.loop.types import (
    AgentName,
    Decider,
    Proposal,
    RoutingDecision,
    StepTiming,
    Tally,
    Vote,
)

FORMAT_VERSION = 1
"""Written in every checkpoint; a checkpoint of another version is refused (CheckpointError)."""

LOOP_TYPES: tuple[type, ...] = (LoopCheckpoint, LoopState, AgentName, Decider, Proposal,
                                RoutingDecision, StepTiming, Tally, Vote)


class CheckpointError(ValueError):
    """A checkpoint that cannot be written (a value of a type the codec does not know) or read
    (not this format, or naming a type it does not know)."""


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _mesh_errors() -> dict[str, type[MeshError]]:
    found: dict[str, type[MeshError]] = {}
    pending: list[type[MeshError]] = [MeshError]
    while pending:
        cls = pending.pop()
        found[_name(cls)] = cls
        pending.extend(cls.__subclasses__())
    return found


class CheckpointCodec:
    """Encodes and decodes checkpoints of loops whose agents' details are of `types`
    (dataclasses or enums, beside the loop's own) or protobuf messages."""

    def __init__(self, types: Iterable[type] = ()) -> None:
        self._types = {_name(cls): cls for cls in (*LOOP_TYPES, *types)}

    def encode(self, checkpoint: LoopCheckpoint) -> bytes:
        """The checkpoint as UTF-8 JSON.

        Raises:
            CheckpointError: it holds a value of a type the codec does not know."""
        return json.dumps({"version": FORMAT_VERSION, "checkpoint": self._value(checkpoint)},
                          separators=(",", ":")).encode()

    def decode(self, data: bytes) -> LoopCheckpoint:
        """The checkpoint `encode` wrote.

        Raises:
            CheckpointError: not a checkpoint of this format, or a type the codec does not know.
        """
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
                raise CheckpointError(f"not a version-{FORMAT_VERSION} loop checkpoint")
            checkpoint = self._decoded(document["checkpoint"])
        except (KeyError, TypeError, ValueError, message.DecodeError) as error:
            if isinstance(error, CheckpointError):
                raise
            raise CheckpointError(f"unreadable loop checkpoint: {error}") from error
        if not isinstance(checkpoint, LoopCheckpoint):
            raise CheckpointError("the document is not a loop checkpoint")
        return checkpoint

    def _value(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, enum.Enum):
            return {"e": [self._known(type(value)), value.value]}
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, (tuple, list)):
            return {"t": [self._value(item) for item in value]}
        if isinstance(value, (frozenset, set)):
            return {"s": [self._value(item) for item in value]}
        if isinstance(value, dict):
            return {"m": [[self._value(k), self._value(v)] for k, v in value.items()]}
        if isinstance(value, message.Message):
            return {"p": [value.DESCRIPTOR.full_name,
                          base64.b64encode(value.SerializeToString()).decode()]}
        if isinstance(value, np.ndarray):
            return {"a": [str(value.dtype), value.tolist()]}
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, MeshError):
            return {"x": [_name(type(value)), value.message, value.failed_service,
                          getattr(value, "field", None)]}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {"d": [self._known(type(value)),
                          {f.name: self._value(getattr(value, f.name))
                           for f in dataclasses.fields(value)}]}
        raise CheckpointError(f"a loop checkpoint cannot hold a {type(value).__qualname__}")

    def _known(self, cls: type) -> str:
        name = _name(cls)
        if self._types.get(name) is not cls:
            raise CheckpointError(f"{name} is not a type this codec may write")
        return name

    def _decoded(self, value: Any) -> Any:
        if not isinstance(value, dict):
            if isinstance(value, list):
                raise CheckpointError("an untagged list in a loop checkpoint")
            return value
        (tag, body), = value.items()
        if tag == "t":
            return tuple(self._decoded(item) for item in body)
        if tag == "s":
            return frozenset(self._decoded(item) for item in body)
        if tag == "m":
            return {self._decoded(k): self._decoded(v) for k, v in body}
        if tag == "e":
            return self._type(body[0], enum.Enum)(body[1])
        if tag == "d":
            cls = self._type(body[0], object)
            return cls(**{key: self._decoded(item) for key, item in body[1].items()})
        if tag == "p":
            return _message(body[0], body[1])
        if tag == "a":
            return np.asarray(body[1], dtype=np.dtype(body[0]))
        if tag == "x":
            return _error(*body)
        raise CheckpointError(f"unknown tag {tag!r} in a loop checkpoint")

    def _type(self, name: str, base: type) -> Any:
        cls = self._types.get(name)
        if cls is None or not issubclass(cls, base):
            raise CheckpointError(f"a loop checkpoint names {name}, which this codec does not "
                                  "read")
        return cls


def _message(full_name: str, data: str) -> message.Message:
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(full_name)
    except KeyError as error:
        raise CheckpointError(f"unknown protobuf message {full_name!r}") from error
    return message_factory.GetMessageClass(descriptor).FromString(base64.b64decode(data))


def _error(name: str, text: str, failed_service: str | None, field: str | None) -> MeshError:
    cls = _mesh_errors().get(name)
    if cls is None:
        raise CheckpointError(f"unknown error type {name!r} in a loop checkpoint")
    if issubclass(cls, InvalidArgument):
        error: MeshError = cls(field or "request", text.removeprefix(f"{field}: "))
    else:
        error = cls(text)
    error.failed_service = failed_service
    return error
