"""Anthropic Messages through the official `anthropic` AsyncAnthropic client, whole or streamed
(`messages.stream`: the usage is the final message's, as a whole message reports it).

The SDK's own retries are off (`max_retries=0`): `resilience.py` retries. The Messages API of the
SDK we pin (anthropic 2.x) takes no sampling temperature, so the request's `temperature` is not sent
to Anthropic; the model samples with its own default.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import httpx2

from services.llm.providers.errors import ProviderError, status_error
from services.llm.providers.prompt import system_prompt, user_message
from services.llm.providers.provider import Generation, GenerationRequest, StreamItem
from services.llm.redaction import scrub, url_secrets

FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                  "refusal": "content_filter"}
"""Anthropic's stop_reason -> the gateway's finish_reason (others pass through as they are)."""


class AnthropicProvider:
    """Messages API (`POST {base_url}/v1/messages`) with a system prompt and one user turn.

    Args:
        name: "anthropic".
        api_key: the API key (`x-api-key`).
        base_url: e.g. "https://api.anthropic.com".
        model: model id sent in the request.
    """

    def __init__(self, name: str, api_key: str, base_url: str, model: str) -> None:
        self.name = name
        self.model = model
        self._client = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0)
        self._secrets = (api_key, *url_secrets(base_url))

    def _scrub(self, message: str) -> str:
        """A provider's error text without this provider's key or URL credentials."""
        return scrub(message, self._secrets)

    def _arguments(self, request: GenerationRequest, timeout_s: float) -> dict:
        return {
            "model": self.model,
            "system": system_prompt(request),
            "messages": [{"role": "user", "content": user_message(request)}],
            "max_tokens": request.max_tokens,
            "timeout": timeout_s,
        }

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """One message within `timeout_s` seconds (the SDK's request timeout).

        Raises:
            ProviderError: timeout, connection failure, an HTTP error status (529 "overloaded" is
                a server error), or an answer with no text.
        """
        try:
            message = await self._client.messages.create(**self._arguments(request, timeout_s))
        except (anthropic.APIError, httpx2.HTTPError) as error:
            raise self._error(error) from error
        return self._generation(message)

    async def stream(self, request: GenerationRequest,
                     timeout_s: float) -> AsyncIterator[StreamItem]:
        """A streamed message (`messages.stream`): each text delta, then the Generation of the
        final message (its usage). `timeout_s` bounds the response's start and each read.
        Closing this iterator leaves the SDK's stream context, which closes the HTTP
        connection.

        Raises:
            ProviderError: as `generate`; also when the stream breaks.
        """
        try:
            async with self._client.messages.stream(**self._arguments(request, timeout_s)) \
                    as stream:
                async for text in stream.text_stream:
                    if text:
                        yield text
                message = await stream.get_final_message()
        except (anthropic.APIError, httpx2.HTTPError) as error:
            raise self._error(error) from error
        yield self._generation(message)

    def _generation(self, message) -> Generation:
        """The Generation of a whole (or final streamed) message.

        Raises:
            ProviderError: the message has no text.
        """
        text = "".join(block.text for block in message.content if block.type == "text")
        if not text:
            raise ProviderError(self.name, "error", "the message has no text", retryable=False)
        return Generation(
            text=text,
            model=message.model or self.model,
            prompt_tokens=message.usage.input_tokens,
            completion_tokens=message.usage.output_tokens,
            finish_reason=FINISH_REASONS.get(message.stop_reason or "end_turn",
                                             message.stop_reason or "stop"),
        )

    def _error(self, error: Exception) -> ProviderError:
        """The ProviderError of an SDK or HTTP failure (raw httpx errors come from a stream's
        reads), its text scrubbed of this provider's secrets."""
        if isinstance(error, anthropic.APITimeoutError | httpx2.TimeoutException):
            return ProviderError(self.name, "timeout", self._scrub(str(error)), retryable=True)
        if isinstance(error, anthropic.APIConnectionError | httpx2.TransportError):
            return ProviderError(self.name, "error",
                                 f"connection failed: {self._scrub(str(error) or repr(error))}",
                                 retryable=True)
        if isinstance(error, anthropic.APIStatusError):
            return status_error(self.name, error.status_code, self._scrub(error.message),
                                error.response.headers)
        return ProviderError(self.name, "error", self._scrub(str(error)), retryable=False)

    async def aclose(self) -> None:
        await self._client.close()
