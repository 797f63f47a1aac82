"""What every provider takes and returns: plain dataclasses and the `Provider` protocol, no gRPC."""

from __future__ import annotations

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
    extractive provider.
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    offline: bool = False


class Provider(Protocol):
    """A source of generations. `name` is the word used in settings and in ProviderAttempt."""

    name: str

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """Generates an answer within `timeout_s` seconds.

        Raises:
            ProviderError: the provider failed; its `outcome` and `retryable` say how.
        """
        ...

    async def aclose(self) -> None:
        """Releases connections (HTTP pools); the provider is unusable afterwards."""
        ...
