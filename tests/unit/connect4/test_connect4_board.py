from __future__ import annotations

import random

import numpy as np
import pytest

from libs.connect4.board import (
    IllegalPosition,
    Position,
    alignment,
    can_win_next,
    encode,
    legal_mask,
    non_losing_moves,
    possible,
)


def test_empty_board() -> None:
    pos = Position.from_moves("")
    assert pos.num_moves == 0
    assert pos.legal_columns() == list(range(7))
    assert not pos.is_finished
    assert pos.current_player == 0


def test_vertical_four_is_won_and_further_moves_are_illegal() -> None:
    pos = Position.from_moves("1212121")
    assert pos.won and pos.is_finished
    assert pos.legal_columns() == []
    with pytest.raises(IllegalPosition) as info:
        Position.from_moves("12121212")
    assert info.value.index == 7


@pytest.mark.parametrize(
    ("moves", "winning_column"),
    [
        ("112233", 3),  # horizontal: first player completes 1-2-3-4 on the bottom row
        ("1223433454", 3),  # diagonal up-right: (col 1, row 0) .. (col 4, row 3)
        ("7665455434", 3),  # diagonal up-left, the mirror image
    ],
)
def test_winning_moves_in_every_direction(moves: str, winning_column: int) -> None:
    pos = Position.from_moves(moves)
    assert pos.is_winning_move(winning_column)
    assert pos.can_win_next()
    assert [c for c in range(7) if pos.is_winning_move(c)] == [winning_column]
    after = pos.play(winning_column)
    assert after.won
    assert alignment(after.position ^ after.mask)


@pytest.mark.parametrize("moves", ["8", "0", "12a", " 1", "4\n"])
def test_characters_outside_one_to_seven_are_rejected(moves: str) -> None:
    with pytest.raises(IllegalPosition):
        Position.from_moves(moves)


def test_full_column_is_rejected() -> None:
    Position.from_moves("444444")
    with pytest.raises(IllegalPosition, match="full") as info:
        Position.from_moves("4444444")
    assert info.value.index == 6


def test_full_board_is_a_finished_draw() -> None:
    moves = "121212" "343434" "565656" "212121" "434343" "656565" "777777"
    assert naive_winner(moves) is None
    pos = Position.from_moves(moves)
    assert pos.is_full and pos.is_finished and not pos.won


def test_play_swaps_sides_and_updates_masks() -> None:
    pos = Position.from_moves("4")
    assert pos.current_player == 1
    assert pos.mask == 1 << 21
    assert pos.position == 0  # the second player has no stone yet
    assert pos.key() == pos.position + pos.mask
    assert possible(pos.mask) & (1 << 22)


def test_non_losing_moves_forces_the_block() -> None:
    # First player threatens 1-2-3 on the bottom row; the second player must play column 4.
    pos = Position.from_moves("15253")
    assert not can_win_next(pos.position, pos.mask)
    # second player to move; first player threatens column 4 (index 3) on row 0
    assert non_losing_moves(pos.position, pos.mask) == 1 << (3 * 7)


def test_encode_planes_are_from_the_side_to_move() -> None:
    pos = Position.from_moves("41")
    planes = encode(pos)
    assert planes.shape == (2, 6, 7) and planes.dtype == np.float32
    # first player to move: their stone at column 4 (index 3), bottom row; opponent's at column 1
    assert planes[0, 0, 3] == 1.0 and planes[0].sum() == 1.0
    assert planes[1, 0, 0] == 1.0 and planes[1].sum() == 1.0
    planes = encode(Position.from_moves("414"))
    assert planes[0, 0, 0] == 1.0 and planes[0].sum() == 1.0  # second player's stone
    assert planes[1, 0, 3] == 1.0 and planes[1, 1, 3] == 1.0


def test_legal_mask() -> None:
    pos = Position.from_moves("444444")
    mask = legal_mask(pos)
    assert mask.dtype == np.bool_ and mask.shape == (7,)
    assert mask.tolist() == [True, True, True, False, True, True, True]
    assert not legal_mask(Position.from_moves("1212121")).any()


def naive_winner(moves: str) -> int | None:
    """Index of the move that first makes four in a row, found by scanning a 2D grid."""
    grid = [[-1] * 6 for _ in range(7)]
    for index, char in enumerate(moves):
        col = int(char) - 1
        row = grid[col].index(-1)
        grid[col][row] = index % 2
        for dc, dr in ((1, 0), (0, 1), (1, 1), (1, -1)):
            run = 1
            for direction in (1, -1):
                c, r = col + dc * direction, row + dr * direction
                while 0 <= c < 7 and 0 <= r < 6 and grid[c][r] == index % 2:
                    run += 1
                    c, r = c + dc * direction, r + dr * direction
            if run >= 4:
                return index
    return None


def test_win_detection_agrees_with_a_grid_scan_on_random_games() -> None:
    rng = random.Random(7)
    for _ in range(300):
        pos = Position.from_moves("")
        while not pos.is_finished:
            col = rng.choice(pos.legal_columns())
            pos = pos.play(col)
        winner_index = naive_winner(pos.moves)
        if winner_index is None:
            assert pos.is_full and not pos.won
        else:
            assert pos.won and winner_index == len(pos.moves) - 1
