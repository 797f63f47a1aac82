"""The gRPC edge of the text roles: an AnswerQueryRequest's role fields validated into
`RoleOptions`, and a `RoleResult` turned into the AnswerQueryResponse."""

from __future__ import annotations

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument, MeshError
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import Passage
from services.orchestrator.text.roles import Ledger, RoleOptions, RoleResult, TextRole
from services.orchestrator.text.self_consistency import SamplingOptions
from services.orchestrator.text.step_search import MAX_BRANCHING, SearchOutcome

MAX_STEPS = 20
MAX_REFINEMENTS = 10
ROLE_FROM_PROTO = {
    pb.TEXT_ROLE_DRAFT: TextRole.DRAFT,
    pb.TEXT_ROLE_DECOMPOSE: TextRole.DECOMPOSE,
    pb.TEXT_ROLE_REFINE: TextRole.REFINE,
    pb.TEXT_ROLE_SEARCH: TextRole.SEARCH,
}
ROLE_TO_PROTO = {role: value for value, role in ROLE_FROM_PROTO.items()}


def _bounded(request: pb.AnswerQueryRequest, name: str, default: int, high: int) -> int:
    value = getattr(request, name) if request.HasField(name) else default
    if not 1 <= value <= high:
        raise InvalidArgument(name, f"is {value}; must be in 1..{high}")
    return value


def role_options(request: pb.AnswerQueryRequest, settings: OrchestratorSettings,
                 sampling: SamplingOptions) -> RoleOptions | None:
    """The role the request asks for with its limits, None for drafts (self-consistency).
    `mcts_iterations` (validated by the caller) selects the search; the budgets come from the
    validated `sampling`.

    Raises:
        InvalidArgument: "role" not a TextRole, or not the search while mcts_iterations is set;
            "mcts_iterations" unset with TEXT_ROLE_SEARCH; "step_branching" outside 1..8,
            "max_steps" outside 1..20, "max_refinements" outside 1..10.
    """
    if request.role not in pb.TextRole.values():
        raise InvalidArgument("role", f"is {request.role}; not a TextRole "
                                     f"({', '.join(pb.TextRole.keys())})")
    branching = _bounded(request, "step_branching", settings.text_step_branching, MAX_BRANCHING)
    max_steps = _bounded(request, "max_steps", settings.text_max_steps, MAX_STEPS)
    refinements = _bounded(request, "max_refinements", settings.text_refine_max_rounds,
                           MAX_REFINEMENTS)
    if request.HasField("mcts_iterations"):
        if request.role not in (pb.TEXT_ROLE_UNSPECIFIED, pb.TEXT_ROLE_SEARCH):
            raise InvalidArgument("role", f"is {pb.TextRole.Name(request.role)}; mcts_iterations "
                                          "asks for the search: leave role unset or name "
                                          "TEXT_ROLE_SEARCH")
        role = TextRole.SEARCH
    elif request.role == pb.TEXT_ROLE_SEARCH:
        raise InvalidArgument("mcts_iterations", "must be set (1..10,000) for TEXT_ROLE_SEARCH")
    elif request.role in (pb.TEXT_ROLE_UNSPECIFIED, pb.TEXT_ROLE_DRAFT):
        return None
    else:
        role = ROLE_FROM_PROTO[request.role]
    return RoleOptions(role=role, max_tokens=sampling.max_tokens,
                       max_cost_usd=sampling.max_cost_usd, max_refinements=refinements,
                       max_parts=settings.text_decompose_max_parts,
                       simulations=request.mcts_iterations, branching=branching,
                       max_steps=max_steps, answer_tokens=sampling.draft_tokens)


def _sources(passages: tuple[Passage, ...]) -> list[pb.Source]:
    return [pb.Source(document_id=p.document_id, title=p.title, text=p.text, score=p.score,
                      source=p.source) for p in passages]


def _agents(role: TextRole) -> list[int]:
    agents = [pb.AGENT_RETRIEVAL, pb.AGENT_LLM]
    return agents + [pb.AGENT_MCTS] if role is TextRole.SEARCH else agents


def _step_search(outcome: SearchOutcome) -> pb.StepSearchResult:
    result = pb.StepSearchResult(
        trajectory=[pb.ReasoningStep(text=node.text, value=node.value, checked=node.checked,
                                     final=node.final) for node in outcome.trajectory],
        complete=outcome.complete, leaves_evaluated=outcome.leaves_evaluated,
        steps_proposed=outcome.steps_proposed, max_depth=outcome.max_depth)
    if outcome.statistics is not None:
        result.statistics.CopyFrom(outcome.statistics)
    return result


def role_response(result: RoleResult, ledger: Ledger, provider: str,
                  passages: tuple[Passage, ...], thread_id: str,
                  timings: list[pb.StepTiming], latency_ms: float) -> pb.AnswerQueryResponse:
    """The AnswerQueryResponse of a role: the answer with the LLM's vote (its confidence and the
    stop reason), the role's record (sub-questions, refinements or the search), the calls' tokens
    and cost. No text (a budget stopped the role first) is `passages_only`."""
    agent = pb.AGENT_MCTS if result.role is TextRole.SEARCH else pb.AGENT_LLM
    response = pb.AnswerQueryResponse(
        answer=result.answer,
        confidence=result.confidence if result.answer else 0.0,
        sources=_sources(passages),
        agents=_agents(result.role),
        provider=provider,
        iterations=max(1, result.iterations),
        timings=timings,
        thread_id=thread_id,
        passages_only=not result.answer,
        stop_reason=result.stop_reason,
        total_tokens=ledger.total_tokens, prompt_tokens=ledger.prompt_tokens,
        completion_tokens=ledger.completion_tokens,
        cost_usd=ledger.cost_usd,
        cost_known=ledger.cost_known,
        role=ROLE_TO_PROTO[result.role],
        sub_questions=[pb.SubQuestion(question=s.question, answer=s.answer,
                                      document_ids=s.document_ids) for s in result.sub_answers],
        refinements=[pb.Refinement(draft=r.draft, critique=r.critique, revised=r.revised)
                     for r in result.refinements],
    )
    if result.answer:
        response.votes.append(pb.AgentVote(
            agent=agent, proposal=result.answer, confidence=response.confidence,
            latency_ms=latency_ms, iteration=response.iterations,
            rationale=f"{result.role} role: {result.stop_reason}"))
    if isinstance(result.search, SearchOutcome):
        response.step_search.CopyFrom(_step_search(result.search))
    return response


def failed_role_response(role: TextRole, error: MeshError, ledger: Ledger,
                         passages: tuple[Passage, ...], thread_id: str,
                         timings: list[pb.StepTiming]) -> pb.AnswerQueryResponse:
    """The passages alone when the gateway (or the mcts service) failed the role, flagged
    `passages_only`, with the failure and the tokens and cost of the calls made before it."""
    agent = pb.AGENT_MCTS if error.failed_service == "mcts" else pb.AGENT_LLM
    return pb.AnswerQueryResponse(
        sources=_sources(passages), agents=_agents(role), iterations=1, timings=timings,
        thread_id=thread_id, passages_only=True, role=ROLE_TO_PROTO[role],
        stop_reason=f"the {role} role failed: {error.message}",
        total_tokens=ledger.total_tokens, prompt_tokens=ledger.prompt_tokens,
        completion_tokens=ledger.completion_tokens, cost_usd=ledger.cost_usd,
        cost_known=ledger.cost_known,
        failures=[pb.AgentFailure(agent=agent, code=error.code.name, message=error.message,
                                  iteration=1)])
