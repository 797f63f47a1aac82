"""`mesh.common.v1.ConnectFourPosition` messages: parsed into a board and a position at the edge of
every service that takes one, with each refusal an `InvalidArgument` naming the field, and made
back from a position for the calls a service sends on.

A position states its board (`board.columns`, `board.rows`); a message without one is on the
standard 7x6 board, so the callers written before boards had a size are unchanged. The limits are
those of `libs.connect4.geometry.Board`: 4..9 columns, at least 4 rows, at most 42 cells and 49
bits (`(rows + 1) * columns`); a board too large for them is refused naming `board.rows`.
"""

from __future__ import annotations

from mesh.common.v1 import common_pb2

from libs.connect4.board import IllegalPosition, Position
from libs.connect4.geometry import MAX_BITS, MAX_CELLS, MIN_SIDE, STANDARD, Board
from libs.errors import InvalidArgument

MAX_COLUMNS = 9
"""Most columns: a move names its column with one character '1'..'9'."""


def parse_board(message: common_pb2.ConnectFourPosition, field: str) -> Board:
    """The board of a position message (`STANDARD`, 7x6, when it states none).

    Args:
        message: the position.
        field: the message's path in its request, e.g. "connect_four" or "positions[2]".
    Raises:
        InvalidArgument: "<field>.board.columns" outside 4..9 (0, unset, included);
            "<field>.board.rows" below 4, or a board of more than 42 cells or 49 bits.
    """
    if not message.HasField("board"):
        return STANDARD
    columns, rows = message.board.columns, message.board.rows
    if not MIN_SIDE <= columns <= MAX_COLUMNS:
        raise InvalidArgument(f"{field}.board.columns",
                              f"is {columns}; a board has {MIN_SIDE}..{MAX_COLUMNS} columns "
                              f"(leave `board` unset for the standard 7x6)")
    if rows < MIN_SIDE:
        raise InvalidArgument(f"{field}.board.rows",
                              f"is {rows}; a board has at least {MIN_SIDE} rows (leave `board` "
                              f"unset for the standard 7x6)")
    if columns * rows > MAX_CELLS or columns * (rows + 1) > MAX_BITS:
        raise InvalidArgument(f"{field}.board.rows",
                              f"is {rows}: a {columns}x{rows} board has {columns * rows} cells in "
                              f"{columns * (rows + 1)} bits; at most {MAX_CELLS} cells in "
                              f"{MAX_BITS} bits (columns x (rows + 1))")
    return Board(columns, rows)


def parse_position(message: common_pb2.ConnectFourPosition, field: str, *,
                   finished: bool = False) -> Position:
    """The position of a message, on its board.

    Args:
        message: the position.
        field: the message's path in its request, e.g. "connect_four" or "positions[2]".
        finished: accept a finished game (four in a row made, or the board full); False refuses
            it, for a position that needs a move.
    Raises:
        InvalidArgument: the board, as `parse_board`; "<field>.moves" malformed, illegal on the
            board (a character that names no column of it, a move into a full column, a move
            after four in a row), or, unless `finished`, a finished game.
    """
    board = parse_board(message, field)
    try:
        position = Position.from_moves(message.moves, board)
    except IllegalPosition as error:
        raise InvalidArgument(f"{field}.moves", error.message) from error
    if not finished:
        if position.won:
            raise InvalidArgument(f"{field}.moves", "the game is over: the last move made four "
                                                    "in a row")
        if position.is_full:
            raise InvalidArgument(f"{field}.moves", "the game is over: the board is full")
    return position


def position_message(position: Position) -> common_pb2.ConnectFourPosition:
    """The message of `position`: its moves, and its board unless it is the standard 7x6 (so a
    service built before boards had a size reads it unchanged)."""
    message = common_pb2.ConnectFourPosition(moves=position.moves)
    if position.board != STANDARD:
        message.board.columns = position.board.columns
        message.board.rows = position.board.rows
    return message


def board_message(board: Board) -> common_pb2.ConnectFourBoard:
    """The `ConnectFourBoard` message of `board`."""
    return common_pb2.ConnectFourBoard(columns=board.columns, rows=board.rows)
