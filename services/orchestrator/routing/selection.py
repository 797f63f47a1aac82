"""Which agents and routers a request gets: the agent set the orchestrator was built with (games,
text, puzzles, the quick checker), narrowed to what a request names, and the routers (rules for
games, text and puzzles; the neural service's predictors when configured).

A request's agents arrive here as `AgentName`s (the gRPC edge parses the proto's enum values);
labels in errors are the proto's enum names (`AGENT_HRM`), which are the agent names upper-cased.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from libs.errors import FailedPrecondition, InvalidArgument, MeshError
from services.orchestrator.agents.reasoning import ModelBackedAgent
from services.orchestrator.loop.routing import Router, RoutingState, routing_features
from services.orchestrator.loop.types import Agent, AgentName, Role
from services.orchestrator.problems.connect_four import ConnectFourProblem
from services.orchestrator.routing.learned import LearnedRouter, choose_text_role
from services.orchestrator.routing.predictors import RoutePredictor, TextRoutePredictor
from services.orchestrator.routing.rules import PuzzleRouter, Route, RuleRouter, TextRouter
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.roles import TextRole

log = logging.getLogger(__name__)

CONNECT_FOUR_AGENTS = (AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL)
"""Agents that apply to a Connect Four position, in the order they vote (ties go to the first)."""
PUZZLE_AGENTS = (AgentName.HRM, AgentName.TRM, AgentName.SOLVER, AgentName.CHECKER)
"""Agents that apply to a Sudoku or a maze: the proposers in routing order (the learned models
first, the exact solver when they fail), then the checker, which verifies every answer and takes
part whether named or not. HRM and TRM serve a grid only when the neural service has a model for
it (`ModelBackedAgent.model_for`)."""


def label(name: AgentName) -> str:
    """The proto enum name of an agent ("AGENT_HRM"), as errors name it."""
    return f"AGENT_{name.name}"


@dataclass(frozen=True)
class Routers:
    """The routers of the three kinds of problem, and the neural service's predictors.

    Attributes:
        game: picks the next agents of a Connect Four position (`RuleRouter`).
        text: picks the next agents of a text query (`TextRouter`).
        puzzle: picks the next agents of a Sudoku or a maze (`PuzzleRouter`).
        predictor: the meta-controller; when set, a Connect Four request asks it for the first
            round's agents and follows it above `router_threshold` (`LearnedRouter`).
        text_predictor: the text router; when set, a text query that names no role asks it
            which role answers and follows it above `text_router_threshold`.
    """

    game: Router = field(default_factory=RuleRouter)
    text: Router = field(default_factory=TextRouter)
    puzzle: Router = field(default_factory=PuzzleRouter)
    predictor: RoutePredictor | None = None
    text_predictor: TextRoutePredictor | None = None


@dataclass(frozen=True)
class AgentSet:
    """The agents the orchestrator was built with.

    Attributes:
        game: the agents that can vote on a Connect Four position (some of checker, mcts,
            neural).
        text: the agents of a text query (retrieval as context, then the LLM).
        puzzle: the agents of Sudoku and maze problems: proposers (HRM and TRM, which are
            `ModelBackedAgent`s, and the exact solver) and the checker (a VERIFIER), which must
            be among them when any are.
        quick_checker: the checker on the quick budget (`rules.QUICK_CHECKER_MAX_NODES`), run
            instead of the checker when a followed learned route says "checker@quick"; None:
            such routes are left to the rules.

    Raises:
        ValueError: puzzle agents without a VERIFIER.
    """

    game: Sequence[Agent] = ()
    text: Sequence[Agent] = ()
    puzzle: Sequence[Agent] = ()
    quick_checker: Agent | None = None

    def __post_init__(self) -> None:
        if self.puzzle and not any(agent.role is Role.VERIFIER for agent in self.puzzle):
            raise ValueError("puzzle agents need the checker (a VERIFIER agent)")

    def connect_four(self, names: Sequence[AgentName]) -> list[Agent]:
        """The game agents named (in that order).

        Raises:
            InvalidArgument: "agents" names one that is not configured here.
        """
        configured = {agent.name: agent for agent in self.game}
        missing = [name for name in names if name not in configured]
        if missing:
            raise InvalidArgument("agents", f"{', '.join(missing)} is not configured here")
        return [configured[name] for name in names]

    async def for_puzzle(self, names: Sequence[AgentName], named: bool, problem: Any,
                         deadline: float) -> list[Agent]:
        """The agents of a Sudoku or maze request: the proposers among `names` (the request's,
        when `named`, else every puzzle agent) where the neural service has a model for the grid
        (HRM, TRM) or that need none (the solver); always the checker.

        A named HRM/TRM whose model lookup fails (the neural service is down) still takes part,
        so the loop reports its failure, or the solver answers beside it; an unnamed one is left
        out.

        Raises:
            FailedPrecondition: a named AGENT_HRM or AGENT_TRM has no model of its architecture
                for the grid, or a named agent is not configured here.
        """
        configured = {agent.name: agent for agent in self.puzzle}
        chosen: list[Agent] = []
        for name in names:
            agent = configured.get(name)
            if agent is None:
                if named:
                    raise FailedPrecondition(f"{label(name)}: it is not configured here; use "
                                             f"AGENT_SOLVER")
                continue
            if agent.role is Role.PROPOSER and await self._serves(agent, named, problem,
                                                                  deadline):
                chosen.append(agent)
        if not chosen:  # only when none are named: a named proposer is chosen or refused
            raise FailedPrecondition("no puzzle agent is configured here")
        return chosen + [agent for agent in self.puzzle if agent.role is Role.VERIFIER]

    @staticmethod
    async def _serves(agent: Agent, named: bool, problem: Any, deadline: float) -> bool:
        """Whether a puzzle proposer takes part (see `for_puzzle`)."""
        if not isinstance(agent, ModelBackedAgent):
            return True
        try:
            model = await agent.model_for(problem, deadline - time.monotonic())
        except MeshError as error:
            if not named:
                log.warning("leaving %s out: listing the neural service's models failed: %s",
                            agent.name, error.message)
            return named  # a named one's failure is reported by the loop
        if model is None:
            if named:
                raise FailedPrecondition(
                    f"{label(agent.name)}: the neural service has no {agent.name.value} model "
                    f"for {problem.model_task}; use AGENT_SOLVER")
            return False
        return True

    def for_text(self, sampling: object | None) -> list[Agent]:
        """The text agents, each bound to the request's self-consistency `sampling` where it
        samples (`for_request`)."""
        return [agent.for_request(sampling)
                if sampling is not None and hasattr(agent, "for_request") else agent
                for agent in self.text]


async def learned_router(predictor: RoutePredictor, problem: ConnectFourProblem,
                         agents: list[Agent], max_iterations: int, deadline: float,
                         rules: Router, settings: OrchestratorSettings,
                         quick_checker: Agent | None) -> tuple[Router, list[Agent], Route | None]:
    """A `LearnedRouter` over `rules`, with `predictor`'s prediction for the first round's
    features (known before any agent runs), the request's agents (the checker replaced by the
    quick checker when the followed route asks for it), and the followed route (None: the rules
    decide)."""
    first = routing_features(RoutingState(
        confidences={}, mcts_value=None, consensus_score=0.0, last_agents=(), iteration=1,
        max_iterations=max_iterations, query_length_norm=problem.query_length_norm,
        has_context=False))
    prediction = await predictor.predict([first], deadline - time.monotonic())
    learned = LearnedRouter(prediction, settings.router_threshold, rules,
                            quick_checker=quick_checker is not None,
                            network_check_below=settings.router_network_check_below)
    route, _ = learned.choice([agent.name for agent in agents])
    if route is not None and route.quick_checker and quick_checker is not None:
        agents = [quick_checker if agent.name is AgentName.CHECKER else agent
                  for agent in agents]
    return learned, agents, route


async def learned_text_role(predictor: TextRoutePredictor, query: str, remaining_s: float,
                            threshold: float, available: Sequence[TextRole]
                            ) -> tuple[TextRole | None, float | None, str]:
    """The text router's role for `query` when it is followed (its probability clears
    `threshold` and the role is `available`), else None; the router's probability of its choice
    (None when it did not answer); and why it is not followed."""
    prediction = await predictor.predict_text(query, remaining_s)
    if prediction is None:
        return None, None, "no text router prediction"
    return choose_text_role(prediction, threshold, available)
