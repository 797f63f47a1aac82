"""The LLM agent: a client of mesh.llm.v1.LlmService.Generate that drafts an answer grounded in the
retrieved passages (the gateway picks the provider and falls back to its offline provider)."""

from __future__ import annotations

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import DeadlineExceeded, Unavailable, propagate
from services.orchestrator.consensus import Proposal, Round
from services.orchestrator.routing import AgentName, Role
from services.orchestrator.text_query import Draft, Passage, TextProblem, grounding_confidence


class LlmAgent:
    """Drafts an answer to the query from the round's context.

    Args:
        stub: a LlmService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one call in seconds; the round's deadline shortens it.
        max_tokens: upper bound on the draft's tokens.
    """

    name = AgentName.LLM
    role = Role.PROPOSER
    # Drafts at temperature 0: the same context gives the same draft, so one draft per request.
    repeatable = False

    def __init__(self, stub: llm_service_pb2_grpc.LlmServiceStub, deadline_s: float,
                 max_tokens: int) -> None:
        self._stub = stub
        self._deadline_s = deadline_s
        self._max_tokens = max_tokens

    async def propose(self, round_: Round) -> Proposal:
        """The draft as the answer; confidence is its grounding (`grounding_confidence`); `detail`
        is the `Draft`.

        Raises:
            DeadlineExceeded: no time left, or the call ran past its deadline.
            Unavailable: the gateway is down, every provider failed, or the draft is empty.
        """
        problem: TextProblem = round_.problem
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded("llm: no time left for a draft")
        passages = tuple(p for p in round_.context if isinstance(p, Passage))
        request = llm_service_pb2.GenerateRequest(
            prompt=problem.query,
            context=[llm_service_pb2.ContextPassage(text=p.text, source=p.document_id,
                                                    title=p.title) for p in passages],
            max_tokens=self._max_tokens,
            temperature=0.0,
        )
        try:
            response = await self._stub.Generate(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise propagate(error, "llm") from error
        if not response.text.strip():
            raise Unavailable(f"llm: provider {response.provider!r} returned an empty draft")
        draft = Draft(response.text, response.provider, response.model, response.offline)
        tokens = response.usage.completion_tokens
        return Proposal(response.text, grounding_confidence(passages),
                        f"drafted by {response.provider} ({response.model}), {tokens} tokens, "
                        f"{len(passages)} passage(s)", detail=draft)
