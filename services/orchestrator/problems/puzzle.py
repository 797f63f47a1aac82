"""What the consensus loop needs from a puzzle with an exact checker (Sudoku, mazes).

A puzzle is parsed and validated at the edge into an object with this interface; the solver agent
calls `solve`, the checker agent calls `check` on every proposed answer, and synthesis checks the
final answer once more. Answers travel through the loop as the strings the contract returns (a
Sudoku solution string, a maze grid with its path marked), so votes of different agents compare
by string equality.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Solved:
    """The exact solver's answer.

    Attributes:
        answer: the answer string in the contract's format.
        rationale: a few words on how ("exact: 37 search nodes", "exact: BFS, 34 steps").
    """

    answer: str
    rationale: str


@dataclass(frozen=True)
class Verdict:
    """The exact checker's judgement of one proposed answer.

    Attributes:
        accepted: the answer is right: a valid Sudoku solution keeping the givens, or a valid
            maze path of the shortest length.
        reason: why, in a few words ("valid: 27 units complete, 30 givens kept",
            "digit 5 twice in row 3").
        path_length: steps of a valid maze path (-1 otherwise, and for Sudoku).
    """

    accepted: bool
    reason: str
    path_length: int = -1


class Puzzle(Protocol):
    """A validated puzzle (see `services.orchestrator.problems.sudoku` and
    `services.orchestrator.problems.maze`)."""

    @property
    def query_length_norm(self) -> float:
        """The puzzle's size or difficulty in [0, 1] (routing feature 8)."""
        ...

    def solve(self, stop: threading.Event | None = None) -> Solved | None:
        """Solves exactly (CPU-bound: run it in a worker thread); returns None when `stop` was
        set before it finished (the caller's time budget ended).

        Raises:
            InvalidArgument: the puzzle provably has no solution (names the request field).
        """
        ...

    def check(self, answer: str) -> Verdict:
        """Checks a proposed answer string exactly; a malformed string is rejected, not raised."""
        ...


def verified(problem: Puzzle, answer: str) -> Verdict:
    """The checker's verdict on the loop's final answer, which must be accepted.

    Raises:
        ValueError: the answer fails the checker (the loop counts only verified answers, so this is
            a bug).
    """
    verdict = problem.check(answer)
    if not verdict.accepted:
        raise ValueError(f"tally answer failed the checker: {verdict.reason}")
    return verdict
