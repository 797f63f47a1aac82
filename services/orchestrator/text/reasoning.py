"""The entry point of the language model's roles for a text query: `answer_with_role` runs
decompose, refine (`text_roles.py`) or the search over reasoning steps (`step_search.py`) with the
request's budgets. The servicer calls it when a request names a role or sets mcts_iterations; a
router that picks a role calls it the same way."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from mesh.llm.v1 import llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.errors import DeadlineExceeded, FailedPrecondition
from services.orchestrator.text.query import Passage, TextProblem
from services.orchestrator.text.roles import (
    LanguageModel,
    Ledger,
    RoleOptions,
    RoleResult,
    TextRole,
    decompose,
    refine,
)
from services.orchestrator.text.step_search import search_steps

RetrieveFor = Callable[[TextProblem, float], Awaitable[tuple[Passage, ...]]]
"""Passages for a problem within a timeout in seconds (`agents.retrieval.search_passages` bound
to a stub)."""


@dataclass(frozen=True)
class RoleServices:
    """What the roles call, and the deadline of one call of each (seconds).

    Attributes:
        llm: the gateway.
        retrieve: retrieval of decompose's sub-questions.
        mcts: the mcts service (the search); None where it is not configured.
    """

    llm: llm_service_pb2_grpc.LlmServiceStub
    retrieve: RetrieveFor
    mcts: mcts_service_pb2_grpc.MctsServiceStub | None = None
    llm_deadline_s: float = 60.0
    retrieval_deadline_s: float = 10.0


async def answer_with_role(problem: TextProblem, passages: tuple[Passage, ...],
                           options: RoleOptions, services: RoleServices,
                           deadline: float, ledger: Ledger | None = None
                           ) -> tuple[RoleResult, Ledger, str]:
    """Runs `options.role` on `problem` with its retrieved `passages` before `deadline` (a
    `time.monotonic()` instant); returns the result, the calls made (tokens, US dollars; into
    `ledger` when given, so that a caller sees them after an error too) and the provider that
    answered them.

    Raises:
        FailedPrecondition: only the offline provider answered (a language model is needed), or
            the search is asked for where no mcts service is configured.
        InvalidArgument: "query" too long for a role's prompt.
        DeadlineExceeded, Unavailable, NotFound: a dependency failed (`LanguageModel.ask`,
            retrieval, `step_search.search_steps`).
    """
    ledger = ledger or Ledger(options.max_tokens, options.max_cost_usd)
    model = LanguageModel(services.llm, ledger, options.role, deadline, services.llm_deadline_s,
                          options.answer_tokens)
    if options.role is TextRole.DECOMPOSE:
        async def retrieve(query: str) -> tuple[Passage, ...]:
            timeout = min(services.retrieval_deadline_s, deadline - time.monotonic())
            if timeout <= 0:
                raise DeadlineExceeded("retrieval: no time left for a sub-question")
            return await services.retrieve(replace(problem, query=query), timeout)

        result = await decompose(model, retrieve, problem.query, passages, options.max_parts)
    elif options.role is TextRole.REFINE:
        result = await refine(model, problem.query, passages, options.max_refinements)
    else:
        if services.mcts is None:
            raise FailedPrecondition("search over reasoning steps needs the mcts service; none "
                                     "is configured here")
        result = await search_steps(model, services.mcts, problem.query, passages, options,
                                    deadline)
    return result, ledger, model.provider
