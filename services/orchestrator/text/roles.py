"""Roles of the language model for a text query, other than drafting: `decompose` (least-to-most,
Zhou et al. 2022) and `refine` (self-refine, Madaan et al. 2023); the search over reasoning steps
(`step_search.py`) uses the same `LanguageModel` and `Ledger`.

Every role needs a language model: an answer of the gateway's offline provider (extractive, no
model) ends the role with FailedPrecondition, so it is never counted as a model's sub-answer,
critique or step. Every call is counted in the request's `Ledger` (prompt plus completion tokens
as the provider reported them, US dollars from the gateway's prices); a call that would exceed
either budget is not made, and the role stops with the reason in words.

`text_reasoning.answer_with_role` is the entry point (the servicer's, and the router's when it
picks a role); the templates are in `prompts.py`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, propagate
from services.orchestrator.text import prompts
from services.orchestrator.text.query import Passage, grounding_confidence

MAX_PROMPT_CHARS = 10_000
"""The gateway's limit on a prompt (GenerateRequest.prompt)."""


class TextRole(StrEnum):
    """How the language model answers a text query (mesh.orchestrator.v1.TextRole)."""

    DRAFT = "draft"
    DECOMPOSE = "decompose"
    REFINE = "refine"
    SEARCH = "search"


class BudgetStop(Exception):  # noqa: N818 - a stop, not an error
    """Another call would exceed the request's token or cost budget; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Call:
    """One language-model call of a role.

    Attributes:
        purpose: what it was for ("decompose", "sub-answer", "compose", "draft", "critique",
            "revise", "propose", "evaluate").
        text: the reply.
        provider, model: who answered.
        total_tokens: prompt plus completion tokens as the provider reported them.
        cost_usd: US dollars from the gateway's prices; None when the model has none.
        prompt_tokens, completion_tokens: the two parts of `total_tokens`.
    """

    purpose: str
    text: str
    provider: str
    model: str
    total_tokens: int
    cost_usd: float | None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Ledger:
    """The calls of one request against its budgets (tokens; US dollars), None for no limit.

    The next call is projected to cost as much as the largest call so far (the rule
    self-consistency uses for its drafts); the first call is always allowed.
    """

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    calls: list[Call] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(call.total_tokens for call in self.calls)

    @property
    def prompt_tokens(self) -> int:
        return sum(call.prompt_tokens for call in self.calls)

    @property
    def completion_tokens(self) -> int:
        return sum(call.completion_tokens for call in self.calls)

    @property
    def cost_usd(self) -> float:
        """US dollars of the calls with a price (see `cost_known`)."""
        return sum(call.cost_usd for call in self.calls if call.cost_usd is not None)

    @property
    def cost_known(self) -> bool:
        """Every call's model has a price."""
        return all(call.cost_usd is not None for call in self.calls)

    def check(self) -> None:
        """Raises BudgetStop when one more call would exceed a budget (words as self-consistency's:
        what was used, of what, and what the next call would need)."""
        if not self.calls:
            return
        if self.max_tokens is not None:
            largest = max(call.total_tokens for call in self.calls)
            if self.total_tokens + largest > self.max_tokens:
                raise BudgetStop(f"token budget: {self.total_tokens} of {self.max_tokens} used, "
                                 f"another call would need about {largest}")
        if self.max_cost_usd is not None:
            if not self.cost_known:
                unpriced = sorted({call.model for call in self.calls if call.cost_usd is None})
                raise BudgetStop(f"cost budget: no price configured for {', '.join(unpriced)} "
                                 "(LLM_PRICES)")
            largest_cost = max(call.cost_usd or 0.0 for call in self.calls)
            if self.cost_usd + largest_cost > self.max_cost_usd + 1e-12:
                raise BudgetStop(f"cost budget: ${self.cost_usd:.6f} of "
                                 f"${self.max_cost_usd:.6f} used, another call would cost "
                                 f"about ${largest_cost:.6f}")


class LanguageModel:
    """The gateway as one role's language model: every call checked against and counted in the
    `ledger`, refused when only the offline provider answers.

    Args:
        stub: a LlmService stub.
        ledger: the request's calls and budgets.
        role: the role, named in errors.
        deadline: `time.monotonic()` instant by which every call must have answered.
        call_deadline_s: deadline of one call in seconds (the request's shortens it).
        answer_tokens: the `max_tokens` asked of each call.
    """

    def __init__(self, stub: llm_service_pb2_grpc.LlmServiceStub, ledger: Ledger,
                 role: TextRole, deadline: float, call_deadline_s: float,
                 answer_tokens: int) -> None:
        self._stub = stub
        self.ledger = ledger
        self.role = role
        self._deadline = deadline
        self._call_deadline_s = call_deadline_s
        self._answer_tokens = answer_tokens
        self.provider = ""

    async def ask(self, purpose: str, prompt: str, passages: tuple[Passage, ...] = (),
                  temperature: float = 0.0) -> str:
        """The model's reply to `prompt` grounded in `passages`.

        Raises:
            BudgetStop: the call would exceed a budget (it is not made).
            InvalidArgument: "query": the prompt the role built from it exceeds the gateway's
                10,000 characters.
            FailedPrecondition: only the offline provider answered: the role needs a model.
            DeadlineExceeded: no time left, or the call ran past it.
            Unavailable: the gateway is down or every provider failed.
        """
        self.ledger.check()
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidArgument("query", f"too long for the {self.role} role: its {purpose} "
                                           f"prompt would have {len(prompt):,} characters; at "
                                           f"most {MAX_PROMPT_CHARS:,}")
        timeout = min(self._call_deadline_s, self._deadline - time.monotonic())
        if timeout <= 0:
            raise DeadlineExceeded(f"llm: no time left for the {self.role} role's {purpose} call")
        request = llm_service_pb2.GenerateRequest(
            prompt=prompt, max_tokens=self._answer_tokens, temperature=temperature,
            context=[llm_service_pb2.ContextPassage(text=p.text, source=p.document_id,
                                                    title=p.title) for p in passages])
        try:
            response = await self._stub.Generate(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise propagate(error, "llm") from error
        if response.offline:
            raise FailedPrecondition(
                f"the {self.role} role needs a language model: only the offline extractive "
                "provider answered (configure a provider in LLM_FALLBACK_ORDER with its key)")
        self.provider = response.provider
        self.ledger.calls.append(Call(
            purpose, response.text, response.provider, response.model,
            response.usage.prompt_tokens + response.usage.completion_tokens,
            response.cost_usd if response.HasField("cost_usd") else None,
            response.usage.prompt_tokens, response.usage.completion_tokens))
        return response.text


@dataclass(frozen=True)
class SubAnswer:
    """A sub-question of decompose, its answer and the ids of the passages retrieved for it."""

    question: str
    answer: str
    document_ids: tuple[str, ...]


@dataclass(frozen=True)
class Refinement:
    """One round of refine: the draft, its critique, and whether it was revised."""

    draft: str
    critique: str
    revised: bool


@dataclass
class RoleResult:
    """What a role produced.

    Attributes:
        role: the role that ran.
        answer: the answer text ("" when the budget stopped the role before any answer).
        confidence: in [0, 1]; decompose and refine: the grounding of the retrieved passages (as
            one unsampled draft's); search: the chosen trajectory's last value.
        stop_reason: why it stopped, in words.
        iterations: refine's rounds; 1 otherwise.
        sub_answers: decompose's sub-questions, in order.
        refinements: refine's rounds, in order.
        search: the search's outcome (`step_search.SearchOutcome`), None for the other roles.
    """

    role: TextRole
    answer: str
    confidence: float
    stop_reason: str
    iterations: int = 1
    sub_answers: list[SubAnswer] = field(default_factory=list)
    refinements: list[Refinement] = field(default_factory=list)
    search: object | None = None


Retrieve = Callable[[str], Awaitable[tuple[Passage, ...]]]
"""Passages for a query (the problem's collection, top_k, mode and fusion)."""


async def decompose(model: LanguageModel, retrieve: Retrieve, question: str,
                    passages: tuple[Passage, ...], max_parts: int) -> RoleResult:
    """Least-to-most (Zhou et al. 2022): the model lists at most `max_parts` sub-questions
    (`prompts.DECOMPOSE`); each is retrieved and answered in order, seeing the answers before it
    (`prompts.SUB_ANSWER`); then the question is answered from them (`prompts.COMPOSE`), grounded in
    the question's own `passages`. A reply with no sub-question goes straight to composing.

    When the budget stops it, the answer is the last text written (a sub-answer), "" before any.

    Raises:
        the errors of `LanguageModel.ask` (BudgetStop excepted) and of `retrieve`.
    """
    result = RoleResult(TextRole.DECOMPOSE, "", grounding_confidence(passages), "")
    try:
        listed = await model.ask("decompose", prompts.DECOMPOSE.format(
            max_parts=max_parts, question=question))
        pairs: list[tuple[str, str]] = []
        for sub_question in prompts.parse_sub_questions(listed, max_parts):
            found = await retrieve(sub_question)
            answer = await model.ask("sub-answer", prompts.SUB_ANSWER.format(
                solved=prompts.solved(pairs), sub_question=sub_question), found)
            pairs.append((sub_question, answer.strip()))
            result.sub_answers.append(SubAnswer(sub_question, answer.strip(),
                                                tuple(p.document_id for p in found)))
            result.answer = answer.strip()
        result.answer = (await model.ask("compose", prompts.COMPOSE.format(
            solved=prompts.solved(pairs), question=question), passages)).strip()
        result.stop_reason = (f"composed from {len(pairs)} sub-question(s)" if pairs else
                              "composed without sub-questions: the model listed none")
    except BudgetStop as stop:
        result.stop_reason = f"{stop.reason}; stopped before composing the answer"
    return result


async def refine(model: LanguageModel, question: str, passages: tuple[Passage, ...],
                 max_rounds: int) -> RoleResult:
    """Self-refine (Madaan et al. 2023): a draft at temperature 0 (the question as asked), then
    up to `max_rounds` rounds of critique (`prompts.CRITIQUE`) and revision (`prompts.REVISE`),
    all grounded in `passages`; it stops when the critique finds nothing (`prompts.NO_ISSUES`),
    after `max_rounds`, or when the budget would be exceeded (the answer is then the latest
    draft).

    Raises:
        the errors of `LanguageModel.ask` (BudgetStop excepted).
    """
    result = RoleResult(TextRole.REFINE, "", grounding_confidence(passages), "", iterations=0)
    try:
        result.answer = (await model.ask("draft", question, passages)).strip()
        for round_ in range(1, max_rounds + 1):
            critique = (await model.ask("critique", prompts.CRITIQUE.format(
                question=question, draft=result.answer), passages)).strip()
            result.iterations = round_
            if prompts.finds_nothing(critique):
                result.refinements.append(Refinement(result.answer, critique, False))
                result.stop_reason = f"the critique of round {round_} found nothing to fix"
                return result
            revised = (await model.ask("revise", prompts.REVISE.format(
                question=question, draft=result.answer, critique=critique), passages)).strip()
            result.refinements.append(Refinement(result.answer, critique, True))
            result.answer = revised or result.answer
        result.stop_reason = (f"refinement limit: {max_rounds} round(s) run, the last critique "
                              "still found something")
    except BudgetStop as stop:
        result.stop_reason = f"{stop.reason}; the answer is the latest draft"
    return result


@dataclass(frozen=True)
class RoleOptions:
    """A role's limits for one request.

    Attributes:
        role: the role to run.
        max_tokens, max_cost_usd: the request's budgets, None for none.
        max_refinements: refine's rounds at most, >= 1.
        max_parts: decompose's sub-questions at most, >= 1.
        simulations: the search's simulations (mcts_iterations), >= 1.
        branching: the search's next steps proposed per leaf, 1..8.
        max_steps: the search's steps per trajectory at most, >= 1.
        answer_tokens: `max_tokens` of each call.
    """

    role: TextRole
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_refinements: int = 3
    max_parts: int = 4
    simulations: int = 0
    branching: int = 3
    max_steps: int = 6
    answer_tokens: int = 512

    def __post_init__(self) -> None:
        if self.role is TextRole.DRAFT:
            raise ValueError("drafts are self-consistency's (agents/llm.py), not a role here")
        if min(self.max_refinements, self.max_parts, self.branching, self.max_steps) < 1:
            raise ValueError("max_refinements, max_parts, branching and max_steps must be >= 1")
        if self.max_cost_usd is not None and not math.isfinite(self.max_cost_usd):
            raise ValueError("max_cost_usd must be finite")
