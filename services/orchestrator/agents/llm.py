"""The LLM agent: a client of mesh.llm.v1.LlmService.Generate that drafts an answer grounded in the
retrieved passages (the gateway picks the provider and falls back to its offline provider). In a
streamed answer (`text.streaming.ANSWER_STREAM` set) a single draft comes through StreamGenerate,
its text passed on as the gateway streams it.

With a `Sampling` (`for_request`), the agent does self-consistency (Wang et al. 2022): each round
samples a batch of drafts concurrently at the request's temperature, and votes the winning answer
with its vote share as confidence; it stays `repeatable` while the share is below the agreement
threshold and the budgets allow another draft, so the loop's next iteration samples more.
"""

from __future__ import annotations

import asyncio

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import DeadlineExceeded, Unavailable, propagate
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.text.query import Draft, Passage, TextProblem, grounding_confidence
from services.orchestrator.text.self_consistency import SampledDraft, Sampling, extract_answer
from services.orchestrator.text.streaming import ANSWER_STREAM, AnswerStream, Prestarted


class LlmAgent:
    """Drafts an answer to the query from the round's context.

    Args:
        stub: a LlmService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one call in seconds; the round's deadline shortens it.
        max_tokens: upper bound on the draft's tokens.
    """

    name = AgentName.LLM
    role = Role.PROPOSER

    def __init__(self, stub: llm_service_pb2_grpc.LlmServiceStub, deadline_s: float,
                 max_tokens: int) -> None:
        self._stub = stub
        self._deadline_s = deadline_s
        self._max_tokens = max_tokens
        self.sampling: Sampling | None = None

    def for_request(self, sampling: Sampling) -> LlmAgent:
        """An agent for one request that samples drafts by `sampling` (self-consistency); this
        agent, shared by requests, is left as it is."""
        agent = LlmAgent(self._stub, self._deadline_s, self._max_tokens)
        agent.sampling = sampling
        return agent

    @property
    def repeatable(self) -> bool:
        """True while self-consistency wants another batch (`Sampling.wants_more`). Without a
        `Sampling` the agent drafts once at temperature 0 (the same context gives the same
        draft), so it is not repeatable."""
        return self.sampling is not None and bool(self.sampling.drafts) \
            and self.sampling.wants_more()

    async def propose(self, round_: Round) -> Proposal:
        """The draft as the answer; confidence is its grounding (`grounding_confidence`); `detail`
        is the `Draft`. With a `Sampling`: a batch of drafts and their vote (`_sample`), the
        winning draft as the answer and its vote share as confidence.

        Raises:
            DeadlineExceeded: no time left, or the call ran past its deadline.
            Unavailable: the gateway is down, every provider failed, or the draft is empty.
        """
        problem: TextProblem = round_.problem
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded("llm: no time left for a draft")
        passages = tuple(p for p in round_.context if isinstance(p, Passage))
        if self.sampling is not None:
            return await self._sample(self.sampling, problem, passages, round_.iteration, timeout)
        request = self.draft_request(problem, passages)
        stream = ANSWER_STREAM.get()
        try:
            if stream is None:
                response = await self._stub.Generate(request, timeout=timeout)
            else:
                response = await self._streamed(request, timeout, stream, passages)
        except grpc.aio.AioRpcError as error:
            raise propagate(error, "llm") from error
        if not response.text.strip():
            raise Unavailable(f"llm: provider {response.provider!r} returned an empty draft")
        draft = Draft(response.text, response.provider, response.model, response.offline,
                      prompt_tokens=response.usage.prompt_tokens,
                      completion_tokens=response.usage.completion_tokens,
                      cost_usd=response.cost_usd if response.HasField("cost_usd") else None,
                      finish_reason=response.finish_reason)
        tokens = response.usage.completion_tokens
        return Proposal(response.text, grounding_confidence(passages),
                        f"drafted by {response.provider} ({response.model}), {tokens} tokens, "
                        f"{len(passages)} passage(s)", detail=draft)

    def draft_request(self, problem: TextProblem, passages: tuple[Passage, ...]
                      ) -> llm_service_pb2.GenerateRequest:
        """The single draft's request (temperature 0) over `passages`."""
        return llm_service_pb2.GenerateRequest(
            prompt=problem.query,
            context=[llm_service_pb2.ContextPassage(text=p.text, source=p.document_id,
                                                    title=p.title) for p in passages],
            max_tokens=problem.answer_tokens or self._max_tokens,
            temperature=0.0,
        )

    def prestart(self, problem: TextProblem, remaining_s: float) -> Prestarted:
        """The single draft's StreamGenerate over no passages, started now (before the
        retrieval has answered), its deadline this agent's shortened to `remaining_s` (the
        request's seconds left); `_streamed` reads it when its request is the same."""
        request = self.draft_request(problem, ()).SerializeToString()
        return Prestarted(request, self._stub.StreamGenerate(
            llm_service_pb2.StreamGenerateRequest.FromString(request),
            timeout=min(self._deadline_s, remaining_s)))

    async def _streamed(self, request: llm_service_pb2.GenerateRequest, timeout: float,
                        stream: AnswerStream, passages: tuple[Passage, ...]
                        ) -> llm_service_pb2.GenerateResponse:
        """The draft through StreamGenerate, its passages then each text delta sent to `stream`
        as they come; the gateway's final response. Leaving early (cancelled) cancels the call,
        which closes the provider's stream.

        Raises:
            grpc.aio.AioRpcError: the call failed. Unavailable: it ended without a response.
        """
        stream.sources(passages)
        data = request.SerializeToString()  # StreamGenerateRequest has the same fields
        prestarted = stream.take_prestarted()
        if prestarted is not None and prestarted.request == data:
            call = prestarted.call  # the same call, started beside the retrieval
        else:
            if prestarted is not None:
                prestarted.call.cancel()
            call = self._stub.StreamGenerate(
                llm_service_pb2.StreamGenerateRequest.FromString(data), timeout=timeout)
        try:
            async for message in call:
                if message.WhichOneof("chunk") == "response":
                    return message.response
                stream.delta(message.text_delta)
        finally:
            call.cancel()
        raise Unavailable("llm: the gateway's stream ended without its response")

    async def _sample(self, sampling: Sampling, problem: TextProblem,
                      passages: tuple[Passage, ...], iteration: int, timeout: float) -> Proposal:
        """One self-consistency batch: `Sampling.next_batch` drafts concurrently, then the vote.

        Without a language-model draft (only the offline provider answered), the first draft is
        proposed as one unsampled draft is (grounding confidence, marked offline).

        Raises:
            DeadlineExceeded, Unavailable: every call of the batch failed (the first error).
        """
        count = sampling.next_batch()
        if count <= 0:
            raise Unavailable(f"llm: no draft to sample ({sampling.stop_reason})")
        options = sampling.options
        request = llm_service_pb2.GenerateRequest(
            prompt=problem.query,
            context=[llm_service_pb2.ContextPassage(text=p.text, source=p.document_id,
                                                    title=p.title) for p in passages],
            max_tokens=options.draft_tokens,
            temperature=options.temperature,
        )
        outcomes = await asyncio.gather(
            *(self._stub.Generate(request, timeout=timeout) for _ in range(count)),
            return_exceptions=True)
        drafts: list[SampledDraft] = []
        errors: list[BaseException] = []
        for outcome in outcomes:
            if isinstance(outcome, grpc.aio.AioRpcError):
                errors.append(propagate(outcome, "llm"))
            elif isinstance(outcome, BaseException):
                raise outcome
            elif outcome.text.strip():
                drafts.append(SampledDraft(
                    text=outcome.text,
                    answer="" if outcome.offline else extract_answer(outcome.text),
                    iteration=iteration, provider=outcome.provider, model=outcome.model,
                    total_tokens=outcome.usage.prompt_tokens + outcome.usage.completion_tokens,
                    prompt_tokens=outcome.usage.prompt_tokens,
                    completion_tokens=outcome.usage.completion_tokens,
                    cost_usd=outcome.cost_usd if outcome.HasField("cost_usd") else None,
                    offline=outcome.offline))
        if not drafts:
            if errors:
                raise errors[0]
            raise Unavailable("llm: every draft of the batch was empty")
        sampling.add(drafts)
        winning = sampling.winning_draft()
        if winning is None:  # no language model voted: the offline (or unmarked) answer
            first = drafts[0]
            return Proposal(first.text, grounding_confidence(passages),
                            f"drafted by {first.provider} ({first.model}), not sampled: "
                            f"{'offline, extractive' if first.offline else 'no answer found'}, "
                            f"{len(passages)} passage(s)",
                            detail=Draft(first.text, first.provider, first.model, first.offline))
        return Proposal(winning.text, sampling.share(), sampling.vote_rationale(),
                        detail=Draft(winning.text, winning.provider, winning.model, False),
                        settled=not sampling.wants_more())
