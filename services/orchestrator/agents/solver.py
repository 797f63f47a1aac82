"""The exact solver agent for puzzles (Sudoku, mazes): in-process, in a worker thread.

It proposes the answer of the puzzle's own exact solver (`Puzzle.solve`: constraint propagation
and depth-first search for Sudoku, breadth-first search for mazes). Deterministic, so it runs once
per request; in `PuzzleRouter`'s terms it is the SEARCH agent that answers when the learned models'
proposals fail. Its answers still pass the checker like any other.
"""

from __future__ import annotations

import asyncio
import threading

from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.problems.puzzle import Puzzle


class SolverAgent:
    """Solves the round's puzzle exactly within a time budget.

    Args:
        time_budget_s: seconds the agent waits for the solver (the round's deadline shortens it).
            The search runs in a worker thread; when the budget ends (or the request goes away)
            the agent abstains and tells the search to stop, which it does within 64 search
            nodes (Sudoku; a maze's breadth-first search is bounded by its grid).
    """

    name = AgentName.SOLVER
    role = Role.PROPOSER
    repeatable = False

    def __init__(self, time_budget_s: float) -> None:
        if time_budget_s <= 0:
            raise ValueError("time_budget_s must be positive")
        self._time_budget_s = time_budget_s

    async def propose(self, round_: Round) -> Proposal:
        """The exact answer with confidence 1, or an abstention when the budget ran out.

        Raises:
            InvalidArgument: the puzzle provably has no solution (from `Puzzle.solve`).
        """
        puzzle: Puzzle = round_.problem
        budget = min(self._time_budget_s, round_.remaining_s())
        stop = threading.Event()
        try:
            async with asyncio.timeout(budget):
                solved = await asyncio.to_thread(puzzle.solve, stop)
        except TimeoutError:
            stop.set()
            return Proposal(None, 0.0, f"not solved within {budget:.2f} s")
        except asyncio.CancelledError:
            stop.set()
            raise
        if solved is None:
            return Proposal(None, 0.0, f"not solved within {budget:.2f} s")
        return Proposal(solved.answer, 1.0, solved.rationale)
