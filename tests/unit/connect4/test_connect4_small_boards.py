"""Connect Four on boards other than 7x6: the rules of `Position` and the exact solver's values on
4x4 and 5x4 against an exhaustive minimax written here, independently of the solver (a grid
string instead of bitboards, lines of four listed cell by cell, alpha-beta with a plain dict of
bounds, none of the solver's pruning or move ordering).

Score convention (Pons): for the player to move, `(C + 1 - n) // 2` for a win with the stone
played at ply n + 1 (C cells), 0 for a draw, negated for a loss."""

from __future__ import annotations

import random

import numpy as np
import pytest

from libs.connect4.board import IllegalPosition, Position, encode, legal_mask
from libs.connect4.geometry import STANDARD, Board
from libs.connect4.outcome import keeps_outcome
from libs.connect4.solver import Solver

SMALL = [Board(4, 4), Board(5, 4)]


class Minimax:
    """Exact scores of one board size by alpha-beta over grid strings ('.', 'x', 'o'; cell
    `col * rows + row`, row 0 the bottom), with a dict of (lower, upper) bounds per grid."""

    def __init__(self, board: Board) -> None:
        self.columns, self.rows, self.cells = board.columns, board.rows, board.cells
        lines = []
        for col in range(self.columns):
            for row in range(self.rows):
                for dc, dr in ((1, 0), (0, 1), (1, 1), (1, -1)):
                    cells = [(col + i * dc, row + i * dr) for i in range(4)]
                    if all(0 <= c < self.columns and 0 <= r < self.rows for c, r in cells):
                        lines.append(tuple(c * self.rows + r for c, r in cells))
        self.lines_at = [[line for line in lines if cell in line] for cell in range(self.cells)]
        self.order = sorted(range(self.columns), key=lambda c: abs(2 * c - (self.columns - 1)))
        self.bounds: dict[str, tuple[int, int]] = {}

    def grid(self, moves: str) -> str:
        grid = ["."] * self.cells
        for ply, char in enumerate(moves):
            col = int(char) - 1
            row = sum(1 for r in range(self.rows) if grid[col * self.rows + r] != ".")
            grid[col * self.rows + row] = "xo"[ply % 2]
        return "".join(grid)

    def _completes(self, grid: str, cell: int, who: str) -> bool:
        return any(all(grid[j] == who for j in line if j != cell) for line in self.lines_at[cell])

    def score(self, moves: str) -> int:
        """The exact score of the unfinished position `moves` for the player to move."""
        return self._search(self.grid(moves), len(moves), -self.cells, self.cells)

    def _search(self, grid: str, n: int, alpha: int, beta: int) -> int:
        who = "xo"[n % 2]
        cells = []
        for col in self.order:
            row = grid[col * self.rows:(col + 1) * self.rows].find(".")
            if row < 0:
                continue
            cell = col * self.rows + row
            if self._completes(grid, cell, who):
                return (self.cells + 1 - n) // 2
            cells.append(cell)
        if n + 1 == self.cells:
            return 0
        low, high = self.bounds.get(grid, (-self.cells, self.cells))
        if low >= beta:
            return low
        if high <= alpha:
            return high
        alpha, beta = max(alpha, low), min(beta, high)
        if alpha >= beta:  # the bounds meet: the value is known
            return alpha
        best, a = -self.cells - 1, alpha
        for cell in cells:
            value = -self._search(grid[:cell] + who + grid[cell + 1:], n + 1, -beta, -a)
            best = max(best, value)
            a = max(a, value)
            if a >= beta:
                break
        if best <= alpha:
            self.bounds[grid] = (low, min(high, best))
        elif best >= beta:
            self.bounds[grid] = (max(low, best), high)
        else:
            self.bounds[grid] = (best, best)
        return best


def _sample(board: Board, count: int, seed: int) -> list[str]:
    """Unfinished positions of random games (uniform legal moves), every ply of each game."""
    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < count:
        position = Position.from_moves("", board)
        while not position.is_finished and len(found) < count:
            if position.num_moves:
                found.append(position.moves)
            position = position.play(rng.choice(position.legal_columns()))
    return found


@pytest.fixture(scope="module")
def solver() -> Solver:
    return Solver(table_size=(1 << 17) + 1)


@pytest.mark.parametrize("board", SMALL, ids=lambda b: b.name)
def test_the_start_position_scores_as_the_minimax_says(board: Board, solver: Solver) -> None:
    expected = Minimax(board).score("")
    assert solver.solve("", board=board).score == expected
    assert solver.solve("", board=board, weak=True).score == (expected > 0) - (expected < 0)
    scores = solver.best_moves("", board=board).scores
    minimax = Minimax(board)
    assert list(scores) == [-minimax.score(str(col + 1)) for col in range(board.columns)]


@pytest.mark.parametrize("board", SMALL, ids=lambda b: b.name)
def test_sampled_positions_score_as_the_minimax_says(board: Board, solver: Solver) -> None:
    minimax = Minimax(board)
    for moves in _sample(board, 150, seed=board.columns):
        expected = minimax.score(moves)
        assert solver.solve(moves, board=board).score == expected, moves
        assert solver.solve(moves, board=board, weak=True).score == (
            (expected > 0) - (expected < 0)), moves


def test_keeps_outcome_agrees_with_the_minimax_on_every_move() -> None:
    board = Board(4, 4)
    minimax = Minimax(board)
    for moves in _sample(board, 40, seed=7):
        before = minimax.score(moves)
        position = Position.from_moves(moves, board)
        for col in position.legal_columns():
            after = position.play(col)
            result = 1 if after.won else 0 if after.is_full else -minimax.score(after.moves)
            sign = (before > 0) - (before < 0)
            kept = sign < 0 or (result > 0) - (result < 0) == sign
            assert keeps_outcome(moves, col + 1, before, board=board) == kept, (moves, col)


def test_a_small_board_has_its_own_columns_cells_and_planes() -> None:
    board = Board(5, 4)
    position = Position.from_moves("1111", board)
    assert position.legal_columns() == [1, 2, 3, 4]
    assert legal_mask(position).tolist() == [False, True, True, True, True]
    planes = encode(position)
    assert planes.shape == (2, 4, 5) and planes.dtype == np.float32
    assert planes[:, :, 0].sum() == 4 and planes[0, :, 0].tolist() == [1, 0, 1, 0]
    with pytest.raises(IllegalPosition, match="'1'..'5'"):
        Position.from_moves("6", board)
    with pytest.raises(IllegalPosition, match="full"):
        Position.from_moves("11111", board)
    full = "1212" "2121" "3434" "4343" "5555"
    assert Position.from_moves(full[:19], board).legal_columns() == [4]
    assert Position.from_moves("1234" * 2 + "4321" * 2, Board(4, 4)).is_full


@pytest.mark.parametrize("board", [Board(4, 4), Board(5, 4), Board(6, 5), Board(8, 5)],
                         ids=lambda b: b.name)
def test_four_in_a_row_is_found_exactly_where_the_grid_has_one(board: Board) -> None:
    minimax = Minimax(board)
    rng = random.Random(board.bits)
    for _ in range(60):
        position = Position.from_moves("", board)
        while not position.is_finished:
            col = rng.choice(position.legal_columns())
            grid = minimax.grid(position.moves)
            cell = col * board.rows + grid[col * board.rows:(col + 1) * board.rows].find(".")
            expected = minimax._completes(grid, cell, "xo"[position.num_moves % 2])
            assert position.is_winning_move(col) == expected, (position.moves, col)
            position = position.play(col)
            assert position.won == expected
    assert Position.from_moves("12233434144", Board(4, 4)).won  # the rising diagonal


@pytest.mark.parametrize("text,board", [("7x6", STANDARD), ("5x4", Board(5, 4)),
                                        ("4X4", Board(4, 4))])
def test_boards_parse_from_their_names(text: str, board: Board) -> None:
    assert Board.parse(text) == board and Board.parse(board.name) == board


@pytest.mark.parametrize("columns,rows,field", [(3, 6, "columns"), (7, 3, "rows"),
                                               (10, 4, "columns"), (8, 7, "rows")])
def test_impossible_boards_are_refused_naming_the_field(columns: int, rows: int,
                                                        field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Board(columns, rows)
