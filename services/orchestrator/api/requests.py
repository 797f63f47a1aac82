"""Request parsing and validation of the orchestrator's gRPC edge: every field is checked here,
before any downstream call, and a bad one raises `InvalidArgument` naming the proto field."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.connect4_messages import parse_position
from libs.errors import InvalidArgument
from services.orchestrator.api.documents import validate_document_fields
from services.orchestrator.api.enums import AGENT_TO_PROTO, PROTO_TO_AGENT
from services.orchestrator.loop.routing import Router
from services.orchestrator.loop.types import Agent, AgentName
from services.orchestrator.problems.connect_four import ConnectFourProblem, synthesize_connect_four
from services.orchestrator.problems.maze import parse_maze_grid, synthesize_maze
from services.orchestrator.problems.sudoku import parse_sudoku, synthesize_sudoku
from services.orchestrator.routing.selection import (
    CONNECT_FOUR_AGENTS,
    PUZZLE_AGENTS,
    AgentSet,
    Routers,
)
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import MAX_QUERY_CHARS, TextProblem
from services.orchestrator.text.self_consistency import SamplingOptions

MAX_SIMULATIONS = 10_000_000
MAX_ITERATIONS = 10
MAX_TOP_K = 20
MAX_MCTS_ITERATIONS = 10_000
MAX_DOCUMENTS = 10_000
MAX_SAMPLE_COUNT = 20
MAX_TEXT_TOKENS = 10_000_000
MAX_COST_USD = 1_000.0
MAX_ANSWER_TOKENS = 32_768
"""The LLM gateway's bound on max_tokens of one generation."""
THREAD_ID = re.compile(r"[a-zA-Z0-9_-]{1,100}")
COLLECTION = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@dataclass(frozen=True)
class Solve:
    """A validated SolveProblemRequest.

    Attributes:
        problem: a `ConnectFourProblem`, a Sudoku or a maze.
        agents: a Connect Four position's agents; None for a puzzle, whose agents depend on the
            models the neural service has (`AgentSet.for_puzzle` over `puzzle_names`).
        puzzle_names: the puzzle agents named (every puzzle agent when `named` is False).
        named: the request named its agents.
        router: the problem's router.
        synthesize: builds the problem's answer from the final tally.
        simulations: the first round's MCTS simulations.
        max_iterations: the iteration budget.
    """

    problem: Any
    agents: list[Agent] | None
    puzzle_names: list[AgentName]
    named: bool
    router: Router
    synthesize: Callable
    simulations: int
    max_iterations: int


def parse_solve(request: pb.SolveProblemRequest, settings: OrchestratorSettings,
                agents: AgentSet, routers: Routers) -> Solve:
    """The validated request.

    Raises:
        InvalidArgument: "problem", "connect_four.board.columns", "connect_four.board.rows",
            "connect_four.moves", "sudoku.puzzle", "sudoku.box_rows", "sudoku.box_cols",
            "maze.grid", "agents", "simulations", "max_iterations" or "thread_id" is bad.
    """
    kind = request.WhichOneof("problem")
    if kind is None:
        raise InvalidArgument("problem", "set exactly one problem: connect_four, sudoku or maze")
    names: list[AgentName] = list(PUZZLE_AGENTS)
    chosen: list[Agent] | None = None
    if kind == "connect_four":
        problem: Any = ConnectFourProblem(parse_position(request.connect_four, "connect_four"))
        chosen = agents.connect_four(validate_agents(request.agents, CONNECT_FOUR_AGENTS))
        router, synthesize = routers.game, functools.partial(synthesize_connect_four, problem)
    else:
        problem, synthesize = _puzzle(request, kind)
        if request.agents:
            names = validate_agents(request.agents, PUZZLE_AGENTS)
            if names == [AgentName.CHECKER]:
                raise InvalidArgument("agents", "AGENT_CHECKER only verifies answers; allow "
                                                "a proposer too, e.g. AGENT_SOLVER")
        router = routers.puzzle
    if request.HasField("simulations") and not 1 <= request.simulations <= MAX_SIMULATIONS:
        raise InvalidArgument("simulations", f"is {request.simulations}; must be in "
                                             f"1..{MAX_SIMULATIONS:,}")
    if request.HasField("max_iterations") and \
            not 1 <= request.max_iterations <= MAX_ITERATIONS:
        raise InvalidArgument("max_iterations", f"is {request.max_iterations}; must be in "
                                                f"1..{MAX_ITERATIONS}")
    validate_thread_id(request.thread_id)
    return Solve(problem, chosen, names, bool(request.agents), router, synthesize,
                 request.simulations if request.HasField("simulations")
                 else settings.default_simulations,
                 request.max_iterations if request.HasField("max_iterations")
                 else settings.max_iterations)


def _puzzle(request: pb.SolveProblemRequest, kind: str) -> tuple[Any, Callable]:
    """A Sudoku's or a maze's problem and synthesizer."""
    if kind == "sudoku":
        sudoku = request.sudoku
        problem = parse_sudoku(sudoku.puzzle,
                               sudoku.box_rows if sudoku.HasField("box_rows") else None,
                               sudoku.box_cols if sudoku.HasField("box_cols") else None)
        return problem, functools.partial(synthesize_sudoku, problem)
    problem = parse_maze_grid(request.maze.grid)
    return problem, functools.partial(synthesize_maze, problem)


def parse_query(request: pb.AnswerQueryRequest, settings: OrchestratorSettings) -> TextProblem:
    """The text problem of a query.

    Raises:
        InvalidArgument: "query", "collection", "top_k", "thread_id", "mcts_iterations",
            "search_mode", "fusion" or "max_answer_tokens" is bad.
    """
    if not request.query.strip():
        raise InvalidArgument("query", "must not be empty")
    if len(request.query) > MAX_QUERY_CHARS:
        raise InvalidArgument("query", f"has {len(request.query)} characters; at most "
                                       f"{MAX_QUERY_CHARS:,}")
    validate_collection(request.collection, required=False)
    top_k = request.top_k if request.HasField("top_k") else settings.default_top_k
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"is {top_k}; must be in 1..{MAX_TOP_K}")
    validate_thread_id(request.thread_id)
    if request.HasField("mcts_iterations"):
        if not 1 <= request.mcts_iterations <= MAX_MCTS_ITERATIONS:
            raise InvalidArgument("mcts_iterations", f"is {request.mcts_iterations}; must be "
                                                     f"in 1..{MAX_MCTS_ITERATIONS:,}")
    if request.search_mode not in common_pb2.SearchMode.values():
        raise InvalidArgument("search_mode", f"is {request.search_mode}; not a SearchMode "
                                            f"({', '.join(common_pb2.SearchMode.keys())})")
    if request.fusion not in common_pb2.FusionMethod.values():
        raise InvalidArgument("fusion", f"is {request.fusion}; not a FusionMethod "
                                       f"({', '.join(common_pb2.FusionMethod.keys())})")
    return TextProblem(request.query, request.collection or settings.default_collection,
                       top_k, request.search_mode, request.fusion,
                       collection_named=bool(request.collection),
                       answer_tokens=answer_tokens(request, settings))


def answer_tokens(request: pb.AnswerQueryRequest, settings: OrchestratorSettings) -> int:
    """Most tokens one language-model call of the request may generate: `max_answer_tokens`,
    else the setting.

    Raises:
        InvalidArgument: "max_answer_tokens" outside 1..32,768.
    """
    if not request.HasField("max_answer_tokens"):
        return settings.max_answer_tokens
    if not 1 <= request.max_answer_tokens <= MAX_ANSWER_TOKENS:
        raise InvalidArgument("max_answer_tokens", f"is {request.max_answer_tokens}; must be in "
                                                   f"1..{MAX_ANSWER_TOKENS:,}")
    return request.max_answer_tokens


def sampling_options(request: pb.AnswerQueryRequest,
                     settings: OrchestratorSettings) -> SamplingOptions:
    """The request's self-consistency options, the settings filling what it leaves unset.

    Raises:
        InvalidArgument: "sample_count" outside 1..20, "temperature" outside 0..2,
            "max_tokens" outside 1..10,000,000 or "max_cost_usd" outside 0..1,000 (or not a
            number).
    """
    count = request.sample_count if request.HasField("sample_count") \
        else settings.text_sample_count
    if not 1 <= count <= MAX_SAMPLE_COUNT:
        raise InvalidArgument("sample_count", f"is {count}; must be in 1..{MAX_SAMPLE_COUNT}")
    temperature = request.temperature if request.HasField("temperature") \
        else settings.text_temperature
    if not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
        raise InvalidArgument("temperature", f"is {temperature}; must be in 0..2")
    max_tokens = request.max_tokens if request.HasField("max_tokens") else None
    if max_tokens is not None and not 1 <= max_tokens <= MAX_TEXT_TOKENS:
        raise InvalidArgument("max_tokens", f"is {max_tokens}; must be in 1..{MAX_TEXT_TOKENS:,}")
    max_cost = request.max_cost_usd if request.HasField("max_cost_usd") else None
    if max_cost is not None and not (math.isfinite(max_cost) and 0.0 <= max_cost <= MAX_COST_USD):
        raise InvalidArgument("max_cost_usd", f"is {max_cost}; must be in 0..{MAX_COST_USD:,.0f}")
    return SamplingOptions(sample_count=count, temperature=temperature,
                           agreement=settings.text_agreement, max_tokens=max_tokens,
                           max_cost_usd=max_cost,
                           draft_tokens=answer_tokens(request, settings))


def validate_agents(requested: Sequence[int], applicable: Sequence[AgentName]) -> list[AgentName]:
    """The agents to run: `applicable` when none are requested, else the requested ones (in the
    order of `applicable`, duplicates dropped).

    Raises:
        InvalidArgument: "agents" holds AGENT_UNSPECIFIED, an unknown value, or an agent that does
            not apply to the problem.
    """
    if not requested:
        return list(applicable)
    chosen: set[AgentName] = set()
    names = ", ".join(pb.Agent.Name(AGENT_TO_PROTO[a]) for a in applicable)
    for index, value in enumerate(requested):
        if value == pb.AGENT_UNSPECIFIED:
            raise InvalidArgument("agents", f"agents[{index}] is AGENT_UNSPECIFIED; use {names}")
        if value not in PROTO_TO_AGENT:
            raise InvalidArgument("agents", f"agents[{index}] is {value}, not an Agent; use "
                                            f"{names}")
        name = PROTO_TO_AGENT[value]
        if name not in applicable:
            raise InvalidArgument(
                "agents", f"{pb.Agent.Name(value)} does not apply to this problem; use {names}")
        chosen.add(name)
    return [name for name in applicable if name in chosen]


def validate_thread_id(thread_id: str) -> None:
    """Raises InvalidArgument("thread_id") unless empty or ^[a-zA-Z0-9_-]{1,100}$."""
    if thread_id and not THREAD_ID.fullmatch(thread_id):
        raise InvalidArgument("thread_id", "must match ^[a-zA-Z0-9_-]{1,100}$")


def validate_collection(collection: str, required: bool) -> None:
    """Raises InvalidArgument("collection") unless it matches ^[a-zA-Z0-9_-]{1,64}$ (or is empty
    and not `required`)."""
    if not collection and not required:
        return
    if not COLLECTION.fullmatch(collection):
        raise InvalidArgument("collection", "must match ^[a-zA-Z0-9_-]{1,64}$")


def validate_documents(documents: Sequence[common_pb2.Document]) -> None:
    """Raises InvalidArgument on "documents" (count outside 1..10,000), on
    "documents[i].id" / "documents[i].text" (empty) or on "documents[i].id" / ".title" /
    ".source" (longer than 1,024 / 1,024 / 2,048 characters)."""
    if not 1 <= len(documents) <= MAX_DOCUMENTS:
        raise InvalidArgument("documents", f"has {len(documents)} documents; must be 1.."
                                           f"{MAX_DOCUMENTS:,}")
    for index, document in enumerate(documents):
        if not document.id:
            raise InvalidArgument(f"documents[{index}].id", "must not be empty")
        if not document.text.strip():
            raise InvalidArgument(f"documents[{index}].text", "must not be empty")
    validate_document_fields(documents)
