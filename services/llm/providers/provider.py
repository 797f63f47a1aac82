"""What every provider takes and returns: plain dataclasses and the `Provider` protocol, no gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Passage:
    """A passage of context: its text, the source label an answer cites, and an optional title."""

    text: str
    source: str
    title: str = ""


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt, the passages the answer must be grounded in, and sampling limits.

    `max_tokens` bounds the generated tokens; `temperature` is in 0..2 (0 is greedy).
    """

    prompt: str
    context: tuple[Passage, ...] = ()
    max_tokens: int = 512
    temperature: float = 0.0


@dataclass(frozen=True)
class Generation:
    """One provider's answer.

    `prompt_tokens` and `completion_tokens` are the provider's own counts (0 when an
    OpenAI-compatible local server reports no usage). `offline` is True only for the offline
    extractive provider. `finish_reason`: "stop" (the model ended, or met a stop sequence),
    "length" (max_tokens reached), "content_filter", or the provider's own word otherwise.
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    offline: bool = False
    finish_reason: str = "stop"


StreamItem = str | Generation
"""What a provider's stream yields: text deltas (never empty), then one Generation, last, whose
`text` is the deltas joined and whose token counts are the provider's streamed usage."""


class Provider(Protocol):
    """A source of generations. `name` is the word used in settings and in ProviderAttempt."""

    name: str

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """Generates an answer within `timeout_s` seconds.

        Raises:
            ProviderError: the provider failed; its `outcome` and `retryable` say how.
        """
        ...

    def stream(self, request: GenerationRequest, timeout_s: float) -> AsyncIterator[StreamItem]:
        """Generates as `generate` does, yielding the text as it comes (see `StreamItem`).
        `timeout_s` bounds the wait for the response's start and for each next chunk. Closing
        the iterator (`aclose`, or cancelling its consumer) closes the provider's stream and its
        HTTP connection.

        Raises:
            ProviderError: as `generate`, before or after the first delta.
        """
        ...

    async def aclose(self) -> None:
        """Releases connections (HTTP pools); the provider is unusable afterwards."""
        ...
