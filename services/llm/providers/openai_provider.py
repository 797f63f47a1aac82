"""OpenAI Chat Completions through the official `openai` AsyncOpenAI client.

The same class serves OpenAI-compatible local servers (LM Studio, Ollama, vLLM): configure a second
instance named "local" with that server's base URL and model. The SDK's own retries are off
(`max_retries=0`): `resilience.py` retries, so every call made is one the gateway counted.
"""

from __future__ import annotations

from typing import Literal

import openai

from services.llm.providers.errors import ProviderError, status_error
from services.llm.providers.prompt import system_prompt, user_message
from services.llm.providers.provider import Generation, GenerationRequest
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

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """One chat completion within `timeout_s` seconds (the SDK's request timeout).

        Raises:
            ProviderError: timeout, connection failure, an HTTP error status, or an empty answer.
        """
        try:
            completion = await self._client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": system_prompt(request)},
                    {"role": "user", "content": user_message(request)},
                ],
                temperature=request.temperature,
                timeout=timeout_s,
                **{self._token_limit_field: request.max_tokens},
            )
        except openai.APITimeoutError as error:
            raise ProviderError(self.name, "timeout", self._scrub(str(error)),
                                retryable=True) from error
        except openai.APIConnectionError as error:
            raise ProviderError(self.name, "error",
                                f"connection failed: {self._scrub(str(error))}",
                                retryable=True) from error
        except openai.APIStatusError as error:
            raise status_error(self.name, error.status_code, self._scrub(error.message),
                               error.response.headers) from error
        except openai.APIError as error:
            raise ProviderError(self.name, "error", self._scrub(str(error)),
                                retryable=False) from error
        if not completion.choices or not completion.choices[0].message.content:
            raise ProviderError(self.name, "error", "the completion has no text", retryable=False)
        usage = completion.usage
        return Generation(
            text=completion.choices[0].message.content,
            model=completion.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    async def aclose(self) -> None:
        await self._client.close()
