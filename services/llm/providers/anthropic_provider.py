"""Anthropic Messages through the official `anthropic` AsyncAnthropic client.

The SDK's own retries are off (`max_retries=0`): `resilience.py` retries. The Messages API of the
SDK we pin (anthropic 2.x) takes no sampling temperature, so the request's `temperature` is not sent
to Anthropic; the model samples with its own default.
"""

from __future__ import annotations

import anthropic

from services.llm.providers.errors import ProviderError, status_error
from services.llm.providers.prompt import system_prompt, user_message
from services.llm.providers.provider import Generation, GenerationRequest
from services.llm.redaction import scrub, url_secrets


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

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """One message within `timeout_s` seconds (the SDK's request timeout).

        Raises:
            ProviderError: timeout, connection failure, an HTTP error status (529 "overloaded" is
                a server error), or an answer with no text.
        """
        try:
            message = await self._client.messages.create(
                model=self.model,
                system=system_prompt(request),
                messages=[{"role": "user", "content": user_message(request)}],
                max_tokens=request.max_tokens,
                timeout=timeout_s,
            )
        except anthropic.APITimeoutError as error:
            raise ProviderError(self.name, "timeout", self._scrub(str(error)),
                                retryable=True) from error
        except anthropic.APIConnectionError as error:
            raise ProviderError(self.name, "error",
                                f"connection failed: {self._scrub(str(error))}",
                                retryable=True) from error
        except anthropic.APIStatusError as error:
            raise status_error(self.name, error.status_code, self._scrub(error.message),
                               error.response.headers) from error
        except anthropic.APIError as error:
            raise ProviderError(self.name, "error", self._scrub(str(error)),
                                retryable=False) from error
        text = "".join(block.text for block in message.content if block.type == "text")
        if not text:
            raise ProviderError(self.name, "error", "the message has no text", retryable=False)
        return Generation(
            text=text,
            model=message.model or self.model,
            prompt_tokens=message.usage.input_tokens,
            completion_tokens=message.usage.output_tokens,
        )

    async def aclose(self) -> None:
        await self._client.close()
