"""OpenAI Chat Completions through the official `openai` AsyncOpenAI client, whole or streamed.

The same class serves OpenAI-compatible local servers (LM Studio, Ollama, vLLM): configure a second
instance named "local" with that server's base URL and model. The SDK's own retries are off
(`max_retries=0`): `resilience.py` retries, so every call made is one the gateway counted.
Streams ask for usage (`stream_options={"include_usage": True}`): the last chunk carries the same
prompt and completion counts a whole completion reports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import httpx2
import openai

from services.llm.providers.errors import ProviderError, status_error
from services.llm.providers.prompt import system_prompt, user_message
from services.llm.providers.provider import Generation, GenerationRequest, StreamItem
from services.llm.redaction import scrub, url_secrets

TokenLimitField = Literal["max_completion_tokens", "max_tokens"]


class OpenAIProvider:
    """Chat Completions (`POST {base_url}/chat/completions`) with one system and one user message.

    Args:
        name: "openai", or "local" for an OpenAI-compatible local server.
        api_key: sent as a bearer token; local servers that check none accept any value.
        base_url: e.g. "https://api.openai.com/v1" or "http://127.0.0.1:11434/v1".
        model: model id sent in the request.
        token_limit_field: OpenAI's current models take `max_completion_tokens`; local servers
            take the older `max_tokens`.
    """

    def __init__(
        self,
        name: str,
        api_key: str,
        base_url: str,
        model: str,
        token_limit_field: TokenLimitField = "max_completion_tokens",
    ) -> None:
        self.name = name
        self.model = model
        self._token_limit_field = token_limit_field
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)
        self._secrets = (api_key, *url_secrets(base_url))

    def _scrub(self, message: str) -> str:
        """A provider's error text without this provider's key or URL credentials."""
        return scrub(message, self._secrets)

    def _arguments(self, request: GenerationRequest, timeout_s: float) -> dict:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system_prompt(request)},
                {"role": "user", "content": user_message(request)},
            ],
            "temperature": request.temperature,
            "timeout": timeout_s,
            self._token_limit_field: request.max_tokens,
        }

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """One chat completion within `timeout_s` seconds (the SDK's request timeout).

        Raises:
            ProviderError: timeout, connection failure, an HTTP error status, or an empty answer.
        """
        try:
            completion = await self._client.chat.completions.create(
                **self._arguments(request, timeout_s))
        except (openai.APIError, httpx2.HTTPError) as error:
            raise self._error(error) from error
        if not completion.choices or not completion.choices[0].message.content:
            raise ProviderError(self.name, "error", "the completion has no text", retryable=False)
        usage = completion.usage
        return Generation(
            text=completion.choices[0].message.content,
            model=completion.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            finish_reason=completion.choices[0].finish_reason or "stop",
        )

    async def stream(self, request: GenerationRequest,
                     timeout_s: float) -> AsyncIterator[StreamItem]:
        """A streamed chat completion (`stream=True`, server-sent events): each chunk's content
        as a delta, then the Generation with the usage of the last chunk. `timeout_s` bounds the
        response's start and each read. Closing this iterator closes the SDK's stream (and so
        the HTTP connection).

        Raises:
            ProviderError: as `generate`; also when the stream breaks or ends without text.
        """
        try:
            stream = await self._client.chat.completions.create(
                **self._arguments(request, timeout_s), stream=True,
                stream_options={"include_usage": True})
        except (openai.APIError, httpx2.HTTPError) as error:
            raise self._error(error) from error
        parts: list[str] = []
        model, finish_reason, usage = self.model, "stop", None
        try:
            async for chunk in stream:
                model = chunk.model or model
                usage = chunk.usage or usage
                for choice in chunk.choices[:1]:
                    finish_reason = choice.finish_reason or finish_reason
                    if choice.delta.content:
                        parts.append(choice.delta.content)
                        yield choice.delta.content
        except (openai.APIError, httpx2.HTTPError) as error:
            raise self._error(error) from error
        finally:
            await stream.close()
        if not parts:
            raise ProviderError(self.name, "error", "the completion has no text", retryable=False)
        yield Generation(text="".join(parts), model=model,
                         prompt_tokens=usage.prompt_tokens if usage else 0,
                         completion_tokens=usage.completion_tokens if usage else 0,
                         finish_reason=finish_reason)

    def _error(self, error: Exception) -> ProviderError:
        """The ProviderError of an SDK or HTTP failure (raw httpx errors come from a stream's
        reads), its text scrubbed of this provider's secrets."""
        if isinstance(error, openai.APITimeoutError | httpx2.TimeoutException):
            return ProviderError(self.name, "timeout", self._scrub(str(error)), retryable=True)
        if isinstance(error, openai.APIConnectionError | httpx2.TransportError):
            return ProviderError(self.name, "error",
                                 f"connection failed: {self._scrub(str(error) or repr(error))}",
                                 retryable=True)
        if isinstance(error, openai.APIStatusError):
            return status_error(self.name, error.status_code, self._scrub(error.message),
                                error.response.headers)
        return ProviderError(self.name, "error", self._scrub(str(error)), retryable=False)

    async def aclose(self) -> None:
        await self._client.close()
