"""Where a streamed text answer's events go (StreamAnswerQuery): the request's `AnswerStream`,
set for the request's task in `ANSWER_STREAM`, so that the LLM agent, deep in the consensus loop,
streams its draft there without every layer between passing it along. A context variable is
copied into the tasks the loop starts, and stays unset for every other request."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from services.orchestrator.text.query import Passage


class AnswerStream(Protocol):
    """Receives a streamed answer's events, in order."""

    def sources(self, passages: tuple[Passage, ...]) -> None:
        """The passages the draft is grounded in, once, before its text."""

    def delta(self, text: str) -> None:
        """Text of the answer to append (never empty)."""


ANSWER_STREAM: ContextVar[AnswerStream | None] = ContextVar("answer_stream", default=None)
"""The current request's stream; None when the request is not streamed."""
