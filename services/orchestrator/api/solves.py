"""SolveProblem's work once validated: the puzzle agents chosen, admission, the learned router
when configured, the consensus loop within the deadline, then the response and the routing log."""

from __future__ import annotations

import time

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.connect4.geometry import STANDARD
from services.orchestrator.api.requests import MAX_SIMULATIONS, Solve
from services.orchestrator.api.responses import solve_response
from services.orchestrator.loop.admission import RunningSolves
from services.orchestrator.loop.checkpoint import Durable
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.events import EventSink
from services.orchestrator.loop.tracing import observe_result
from services.orchestrator.loop.types import Budget
from services.orchestrator.problems.connect_four import ConnectFourProblem
from services.orchestrator.routing.log import (
    RoutingLog,
    log_loop,
    problem_fields,
    problem_text,
)
from services.orchestrator.routing.rules import DEEP_SEARCH_FACTOR
from services.orchestrator.routing.selection import AgentSet, Routers, learned_router
from services.orchestrator.settings import OrchestratorSettings


class Solves:
    """Runs validated solves (see `run`)."""

    def __init__(self, settings: OrchestratorSettings, agents: AgentSet, routers: Routers,
                 routing_log: RoutingLog | None, admission: RunningSolves) -> None:
        self._settings = settings
        self._agents = agents
        self._routers = routers
        self._routing_log = routing_log
        self._admission = admission

    async def run(self, kind: str, solve: Solve, seed: int, thread_id: str, deadline: float,
                  events: EventSink | None = None,
                  durable: Durable | None = None) -> pb.SolveProblemResponse:
        """The loop's answer to `solve` (`events` receives its progress; a durable run's
        `durable` takes its events and checkpoints, and may resume it from one).

        Raises:
            FailedPrecondition: a named HRM or TRM has no model for the grid, or no proposal
                passed the checker.
            Unavailable: every agent that ran failed. DeadlineExceeded: the deadline passed
                before any agent answered (or while the solve waited for admission).
        """
        problem, agents, router = solve.problem, solve.agents, solve.router
        if agents is None:
            agents = await self._agents.for_puzzle(solve.puzzle_names, solve.named, problem,
                                                   deadline)
        simulations = solve.simulations
        async with self._admission.hold(deadline):
            started = time.perf_counter()
            predictor = self._routers.predictor
            # The learned router knows the 7x6 board only: another board is routed by the rules.
            if isinstance(problem, ConnectFourProblem) and predictor is not None \
                    and problem.position.board == STANDARD:
                router, agents, route = await learned_router(
                    predictor, problem, agents, solve.max_iterations, deadline, router,
                    self._settings, self._agents.quick_checker)
                if route is not None and route.deep_search:
                    simulations = min(simulations * DEEP_SEARCH_FACTOR, MAX_SIMULATIONS)
            if durable is not None:
                events = durable.events
            loop: ConsensusLoop = ConsensusLoop(
                agents, router, solve.synthesize, problem.query_length_norm, events=events,
                checkpoints=durable.checkpoints if durable is not None else None)
            budget = Budget(max_iterations=solve.max_iterations, deadline=deadline,
                            simulations=simulations,
                            max_simulations=max(simulations, self._settings.max_simulations),
                            seed=seed)
            result = await loop.run(problem, budget,
                                    durable.resume if durable is not None else None)
        observe_result(kind, result)
        log_loop(self._routing_log, kind, problem_text(problem), thread_id, result, started,
                 problem_fields(problem))
        return solve_response(result, thread_id)
