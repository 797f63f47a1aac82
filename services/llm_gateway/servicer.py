"""gRPC edge of the gateway: validates GenerateRequest, calls the Gateway within the caller's
deadline, and turns the Answer into a GenerateResponse."""

from __future__ import annotations

import math

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import InvalidArgument
from libs.telemetry import set_work_attributes
from services.llm_gateway.gateway import Answer, Gateway
from services.llm_gateway.providers.provider import GenerationRequest, Passage

MAX_PROMPT_CHARS = 10_000
MAX_TOKENS_LIMIT = 32_768
DEFAULT_MAX_TOKENS = 512
MAX_TEMPERATURE = 2.0


class LlmServicer(llm_service_pb2_grpc.LlmServiceServicer):
    """mesh.llm.v1.LlmService over a `Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

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
        set_work_attributes({
            "mesh.llm.provider": answer.provider,
            "mesh.llm.model": answer.generation.model,
            "mesh.llm.prompt_tokens": answer.generation.prompt_tokens,
            "mesh.llm.completion_tokens": answer.generation.completion_tokens,
            "mesh.llm.offline": answer.generation.offline,
            "mesh.llm.attempts": len(answer.attempts),
        })
        return to_response(answer)


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


def to_response(answer: Answer) -> llm_service_pb2.GenerateResponse:
    """The proto response for the gateway's answer, attempts in the order they were made."""
    generation = answer.generation
    return llm_service_pb2.GenerateResponse(
        text=generation.text,
        provider=answer.provider,
        model=generation.model,
        offline=generation.offline,
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

