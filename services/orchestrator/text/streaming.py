"""Where a streamed text answer's events go (StreamAnswerQuery): the request's `AnswerStream`,
set for the request's task in `ANSWER_STREAM`, so that the LLM agent, deep in the consensus loop,
streams its draft there without every layer between passing it along. A context variable is
copied into the tasks the loop starts, and stays unset for every other request."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from services.orchestrator.text.query import Passage


@dataclass
class Prestarted:
    """A draft's StreamGenerate call started before the retrieval's answer was known (the
    ungrounded draft of a fresh mesh, see `api.answer_stream.prestart_draft`): `request` the
    serialized StreamGenerateRequest it was started with, `call` the grpc.aio call (its messages
    wait in the call until read). The LLM agent reads it only when the request it would make is
    the same bytes; else it cancels it."""

    request: bytes
    call: Any


class AnswerStream(Protocol):
    """Receives a streamed answer's events, in order."""

    def sources(self, passages: tuple[Passage, ...]) -> None:
        """The passages the draft is grounded in, once, before its text."""

    def delta(self, text: str) -> None:
        """Text of the answer to append (never empty)."""

    def take_prestarted(self) -> Prestarted | None:
        """The draft call started ahead for this request, once (None: none); the taker reads
        or cancels it."""


ANSWER_STREAM: ContextVar[AnswerStream | None] = ContextVar("answer_stream", default=None)
"""The current request's stream; None when the request is not streamed."""
