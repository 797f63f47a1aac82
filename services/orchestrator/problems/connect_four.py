"""A Connect Four problem for the consensus loop, and the synthesis of its answer.

Answers are columns written "1".."W" (as in Pons' move strings; "1".."7" on the standard board);
values are for the player to move, in [-1, 1]; scores follow Pons' convention (positive wins, 22
minus the winner's stone count on 7x6, C / 2 + 1 minus it on a board of C cells).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from libs.connect4 import Position
from services.orchestrator.loop.types import AgentName, Proposal, Tally


class Outcome(enum.Enum):
    """Game-theoretic outcome for the player to move."""

    WIN = "win"
    DRAW = "draw"
    LOSS = "loss"

    @staticmethod
    def of_score(score: int) -> Outcome:
        """The outcome of a Pons score."""
        if score > 0:
            return Outcome.WIN
        if score < 0:
            return Outcome.LOSS
        return Outcome.DRAW


@dataclass(frozen=True)
class ConnectFourProblem:
    """Choose a move in `position` (unfinished, on its board; validated at the edge)."""

    position: Position

    @property
    def query_length_norm(self) -> float:
        """Plies played over the cells of the board (42 on 7x6), in [0, 1] (routing feature
        8)."""
        return self.position.num_moves / self.position.board.cells

    @functools.cached_property
    def legal_columns(self) -> tuple[int, ...]:
        """The playable columns 0..W-1 in increasing order (computed once: the agents and the
        synthesis each ask, several times a request)."""
        return tuple(self.position.legal_columns())

    def legal_answers(self) -> tuple[str, ...]:
        """The playable columns as answers "1".."W"."""
        return self._legal_answers

    @functools.cached_property
    def _legal_answers(self) -> tuple[str, ...]:
        return tuple(str(col + 1) for col in self.legal_columns)


@dataclass(frozen=True)
class ExactResult:
    """What the checker proved about a position.

    Attributes:
        score: Pons score of the position for the player to move, or None when only the move is
            proved (a forced block, a proven winning move without the exact score).
        column_scores: per column 1..W (index 0 = column 1) the score after playing it, None when
            full or not solved; empty when the proof needed no solving.
        nodes: solver nodes spent.
    """

    score: int | None
    column_scores: tuple[int | None, ...] = ()
    nodes: int = 0

    @property
    def outcome(self) -> Outcome | None:
        """The exact outcome: from the score when it is known, WIN when a column is proved
        winning without it, else None."""
        if self.score is not None:
            return Outcome.of_score(self.score)
        if any(s is not None and s > 0 for s in self.column_scores):
            return Outcome.WIN
        return None


@dataclass(frozen=True)
class ConnectFourAnswer:
    """The loop's answer to a Connect Four problem.

    Attributes:
        column: the chosen column, 1..W, always playable in the position.
        value: the position's value for the player to move in [-1, 1]: the exact outcome's sign
            when solved, else 1 when the checker proved a winning move, else the newest MCTS root
            value, else the network's value, else 0.
        outcome: the exact outcome when the checker solved the position or proved a column
            winning.
        score: the Pons score when solved exactly (0 otherwise, also when only a winning move is
            proved: the outcome is then WIN).
    """

    column: int
    value: float
    outcome: Outcome | None
    score: int


def synthesize_connect_four(problem: ConnectFourProblem, tally: Tally,
                            proposals: dict[AgentName, Proposal],
                            context: tuple = ()) -> ConnectFourAnswer:
    """Builds the answer from the final tally.

    Raises:
        ValueError: the tally's answer is not a playable column (agents check their answers, so
            this is a bug).
    """
    if tally.answer not in problem.legal_answers():
        raise ValueError(f"tally answer {tally.answer!r} is not a playable column of "
                         f"{problem.position.moves!r}")
    checker = proposals.get(AgentName.CHECKER)
    exact = checker.detail if checker is not None and isinstance(checker.detail, ExactResult) \
        else None
    outcome = exact.outcome if exact is not None else None
    if outcome is not None:
        value = {Outcome.WIN: 1.0, Outcome.DRAW: 0.0, Outcome.LOSS: -1.0}[outcome]
        score = exact.score if exact.score is not None else 0
        return ConnectFourAnswer(int(tally.answer), value, outcome, score)
    value = 0.0
    for agent in (AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL):
        proposal = proposals.get(agent)
        if proposal is not None and proposal.value is not None:
            value = max(-1.0, min(1.0, float(proposal.value)))
            break
    return ConnectFourAnswer(int(tally.answer), value, None, 0)
