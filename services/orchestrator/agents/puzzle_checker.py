"""The exact checker of puzzle answers (Sudoku, mazes): the loop's verifier.

After every round that produced answers it checks each new one (`Puzzle.check`: the Sudoku rules
and the givens; a simple S-to-G path of shortest length) and votes, verified, for the first it
accepts; the loop drops every vote for an answer it did not accept, so an unverified proposal never
becomes the answer. In the routing features it is the GROUNDING agent: its confidence is 1 exactly
when it accepted an answer, which ends the loop.
"""

from __future__ import annotations

import asyncio

from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.problems.puzzle import Puzzle, Verdict


class PuzzleCheckerAgent:
    """Verifies `Round.candidates` against the round's puzzle (in a worker thread: a maze check
    is a breadth-first search over up to 40,000 cells)."""

    name = AgentName.CHECKER
    role = Role.VERIFIER
    repeatable = False

    async def propose(self, round_: Round) -> Proposal:
        """A verified vote for the first accepted candidate, or an abstention naming why each was
        rejected. `excluded` holds the rejected answers; `detail` the verdicts as
        `((agent, Verdict), ...)` in candidate order."""
        puzzle: Puzzle = round_.problem
        verdicts = await asyncio.to_thread(self.check_all, puzzle, round_.candidates)
        rejected = frozenset(answer for (_, answer), (_, verdict)
                             in zip(round_.candidates, verdicts, strict=True)
                             if not verdict.accepted)
        for (agent, answer), (_, verdict) in zip(round_.candidates, verdicts, strict=True):
            if verdict.accepted:
                return Proposal(answer, 1.0, f"{agent}'s answer is {verdict.reason}",
                                verified=True, excluded=rejected, detail=tuple(verdicts))
        reasons = "; ".join(f"{agent}: {verdict.reason}" for agent, verdict in verdicts)
        return Proposal(None, 0.0, f"rejected {reasons}", excluded=rejected,
                        detail=tuple(verdicts))

    @staticmethod
    def check_all(puzzle: Puzzle, candidates: tuple[tuple[AgentName, str], ...]
                  ) -> list[tuple[AgentName, Verdict]]:
        """The verdict on each candidate, in order (an answer seen twice is checked once)."""
        seen: dict[str, Verdict] = {}
        verdicts = []
        for agent, answer in candidates:
            if answer not in seen:
                seen[answer] = puzzle.check(answer)
            verdicts.append((agent, seen[answer]))
        return verdicts
