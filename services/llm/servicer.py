"""gRPC edge of the gateway: validates GenerateRequest, calls the Gateway within the caller's
deadline, and turns the Answer into a GenerateResponse."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import InvalidArgument
from libs.telemetry import set_work_attributes
from services.llm.gateway import Answer, Gateway
from services.llm.providers.provider import Generation, GenerationRequest, Passage

MAX_PROMPT_CHARS = 10_000
MAX_TOKENS_LIMIT = 32_768
DEFAULT_MAX_TOKENS = 512
MAX_TEMPERATURE = 2.0


class LlmServicer(llm_service_pb2_grpc.LlmServiceServicer):
    """mesh.llm.v1.LlmService over a `Gateway`.

    Args:
        gateway: the providers in their fallback order.
        prices: US dollars per million tokens by model, `(prompt, completion)` (settings'
            `prices`); the response's `cost_usd` comes from them.
    """

    def __init__(self, gateway: Gateway,
                 prices: dict[str, tuple[float, float]] | None = None) -> None:
        self._gateway = gateway
        self._prices = dict(prices or {})

    async def Generate(
        self, request: llm_service_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> llm_service_pb2.GenerateResponse:
        """The first answer in the fallback order.

        Raises:
            InvalidArgument: "prompt", "max_tokens" or "temperature" out of range.
            Unavailable: every provider failed.
            DeadlineExceeded: the call's deadline passed first.
        """
        generation_request = to_generation_request(request)
        answer = await self._gateway.generate(generation_request, context.time_remaining())
        _describe(answer)
        return to_response(answer, self._prices)

    async def StreamGenerate(
        self, request: llm_service_pb2.StreamGenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[llm_service_pb2.StreamGenerateResponse]:
        """The first answer in the fallback order, streamed: a `text_delta` message per delta,
        then the `response` (Generate's) last. A caller that cancels cancels this generator,
        which closes the provider's stream.

        Raises:
            InvalidArgument: as Generate, before any message.
            Unavailable: every provider failed (before any message), or the streaming one did.
            DeadlineExceeded: the call's deadline passed first.
        """
        generation_request = to_generation_request(
            llm_service_pb2.GenerateRequest.FromString(request.SerializeToString()))
        stream = self._gateway.stream(generation_request, context.time_remaining())
        try:
            async for item in stream:
                if isinstance(item, str):
                    yield llm_service_pb2.StreamGenerateResponse(text_delta=item)
                else:
                    _describe(item)
                    yield llm_service_pb2.StreamGenerateResponse(
                        response=to_response(item, self._prices))
        finally:
            await stream.aclose()


def _describe(answer: Answer) -> None:
    """The answer's provider, model, tokens and attempts on the call's span."""
    set_work_attributes({
        "mesh.llm.provider": answer.provider,
        "mesh.llm.model": answer.generation.model,
        "mesh.llm.prompt_tokens": answer.generation.prompt_tokens,
        "mesh.llm.completion_tokens": answer.generation.completion_tokens,
        "mesh.llm.offline": answer.generation.offline,
        "mesh.llm.attempts": len(answer.attempts),
    })


def to_generation_request(request: llm_service_pb2.GenerateRequest) -> GenerationRequest:
    """The core's request for a proto request.

    Raises:
        InvalidArgument: "prompt" empty, blank or over 10,000 characters; "max_tokens" outside
            1..32,768; "temperature" outside 0..2 or not a number.
    """
    if not request.prompt.strip():
        raise InvalidArgument("prompt", "must not be empty")
    if len(request.prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument(
            "prompt", f"has {len(request.prompt)} characters; at most {MAX_PROMPT_CHARS}")
    max_tokens = request.max_tokens if request.HasField("max_tokens") else DEFAULT_MAX_TOKENS
    if not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise InvalidArgument("max_tokens", f"is {max_tokens}; must be in 1..{MAX_TOKENS_LIMIT}")
    temperature = request.temperature if request.HasField("temperature") else 0.0
    if not (math.isfinite(temperature) and 0.0 <= temperature <= MAX_TEMPERATURE):
        raise InvalidArgument("temperature", f"is {temperature}; must be in 0..{MAX_TEMPERATURE}")
    return GenerationRequest(
        prompt=request.prompt,
        context=tuple(Passage(p.text, p.source, p.title) for p in request.context),
        max_tokens=max_tokens,
        temperature=temperature,
    )


def generation_cost(generation: Generation,
                    prices: dict[str, tuple[float, float]]) -> float | None:
    """US dollars of one generation: its reported prompt and completion tokens times the model's
    prices per million tokens; 0 for the offline provider; None when the model has no price."""
    if generation.offline:
        return 0.0
    price = prices.get(generation.model)
    if price is None:
        return None
    prompt_price, completion_price = price
    return (generation.prompt_tokens * prompt_price
            + generation.completion_tokens * completion_price) / 1e6


def to_response(answer: Answer, prices: dict[str, tuple[float, float]] | None = None
                ) -> llm_service_pb2.GenerateResponse:
    """The proto response for the gateway's answer, attempts in the order they were made, with
    its cost when the model has a price (`generation_cost`)."""
    generation = answer.generation
    cost = generation_cost(generation, prices or {})
    response = llm_service_pb2.GenerateResponse(
        text=generation.text,
        provider=answer.provider,
        model=generation.model,
        offline=generation.offline,
        finish_reason=generation.finish_reason,
        usage=llm_service_pb2.Usage(
            prompt_tokens=generation.prompt_tokens,
            completion_tokens=generation.completion_tokens,
        ),
        attempts=[
            llm_service_pb2.ProviderAttempt(
                provider=a.provider, outcome=a.outcome, latency_ms=a.latency_ms, retries=a.retries
            )
            for a in answer.attempts
        ],
    )
    if cost is not None:
        response.cost_usd = cost
    return response

