"""ConnectFourPosition messages at the services' edges: a position without a board is on 7x6, a
stated board is checked against the game's limits and every refusal names its field."""

from __future__ import annotations

import pytest
from mesh.common.v1 import common_pb2

from libs.connect4.board import Position
from libs.connect4.geometry import STANDARD, Board
from libs.connect4_messages import parse_board, parse_position, position_message
from libs.errors import InvalidArgument


def message(moves: str, columns: int | None = None, rows: int | None = None
            ) -> common_pb2.ConnectFourPosition:
    position = common_pb2.ConnectFourPosition(moves=moves)
    if columns is not None or rows is not None:
        position.board.columns = columns or 0
        position.board.rows = rows or 0
    return position


def test_no_board_is_the_standard_board_as_before():
    assert parse_board(message("44"), "connect_four") == STANDARD
    position = parse_position(message("4453"), "connect_four")
    assert position == Position.from_moves("4453")
    assert position.board == STANDARD


def test_a_stated_board_is_the_positions_board():
    position = parse_position(message("3", 5, 4), "connect_four")
    assert position.board == Board(5, 4)
    assert position.legal_columns() == [0, 1, 2, 3, 4]
    assert parse_board(message("", 7, 6), "positions[0]") == STANDARD


@pytest.mark.parametrize(("columns", "rows", "field", "words"), [
    (0, 4, "connect_four.board.columns", "is 0"),  # a board given without its columns
    (3, 4, "connect_four.board.columns", "4..9"),
    (10, 4, "connect_four.board.columns", "4..9"),
    (-5, 4, "connect_four.board.columns", "is -5"),
    (5, 0, "connect_four.board.rows", "at least 4"),
    (5, 3, "connect_four.board.rows", "at least 4"),
    (7, 7, "connect_four.board.rows", "49 cells"),
    (8, 6, "connect_four.board.rows", "48 cells in 56 bits"),
    (9, 5, "connect_four.board.rows", "45 cells"),
])
def test_an_impossible_board_names_the_field(columns, rows, field, words):
    with pytest.raises(InvalidArgument) as caught:
        parse_position(message("1", columns, rows), "connect_four")
    assert caught.value.field == field
    assert words in caught.value.description


@pytest.mark.parametrize(("moves", "columns", "rows", "words"), [
    ("6", 5, 4, "columns are '1'..'5'"),  # a column outside the board
    ("11111", 5, 4, "full"),  # four rows: the fifth stone does not fit
    ("1212121", 5, 4, "four in a row"),  # vertical four on move 7
    ("44523224314125531531", 5, 4, "board is full"),  # a draw
    ("8", None, None, "columns are '1'..'7'"),
])
def test_moves_outside_the_board_or_a_finished_game_name_the_moves(moves, columns, rows, words):
    with pytest.raises(InvalidArgument) as caught:
        parse_position(message(moves, columns, rows), "positions[3]")
    assert caught.value.field == "positions[3].moves"
    assert words in caught.value.description


def test_a_finished_game_is_accepted_when_asked():
    position = parse_position(message("1212121", 5, 4), "p", finished=True)
    assert position.won


def test_position_message_states_the_board_only_off_the_standard_board():
    standard = position_message(Position.from_moves("44"))
    assert standard == common_pb2.ConnectFourPosition(moves="44")
    assert not standard.HasField("board")
    small = position_message(Position.from_moves("23", Board(5, 4)))
    assert (small.moves, small.board.columns, small.board.rows) == ("23", 5, 4)
    assert parse_position(small, "x") == Position.from_moves("23", Board(5, 4))
