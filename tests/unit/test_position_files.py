"""The Connect Four position files `eval connect4` reads: Pons lines with an optional board field,
and JSON Lines with a board object and an optional score; a bad line names its file and line."""

from __future__ import annotations

import pytest

from libs.connect4.geometry import STANDARD, Board
from mcts_mesh.cli import main
from mcts_mesh.position_files import PositionFileError, PositionRow, read_positions


def write(tmp_path, text: str, name: str = "positions.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_pons_lines_are_7x6_and_a_third_field_states_the_board(tmp_path):
    path = write(tmp_path, "4453 2\n# a 5x4 position\n\n2213 -1 5x4\n33 0 4x4\n")
    assert read_positions(path) == [PositionRow("4453", STANDARD, 2),
                                    PositionRow("2213", Board(5, 4), -1),
                                    PositionRow("33", Board(4, 4), 0)]


def test_json_lines_hold_the_board_and_an_optional_score(tmp_path):
    path = write(tmp_path, '{"moves": "", "board": {"columns": 5, "rows": 4}, "score": 1}\n'
                           '{"moves": "44"}\n'
                           '{"moves": "3", "board": {"columns": 6, "rows": 5}, "score": null}\n',
                 "positions.jsonl")
    assert read_positions(path, limit=3) == [PositionRow("", Board(5, 4), 1),
                                             PositionRow("44", STANDARD, None),
                                             PositionRow("3", Board(6, 5), None)]
    assert len(read_positions(path, limit=1)) == 1


@pytest.mark.parametrize(("text", "words"), [
    ("4453\n", "expected '<moves> <score>'"),
    ("4453 2 5by4\n", "not of the form WxH"),
    ("4453 2 3x4\n", "columns is 3"),
    ("4453 2 8x6\n", "at most 42 cells"),
    ("6 1 5x4\n", "columns are '1'..'5'"),  # a column outside the board
    ("1212121 1 5x4\n", "finished game"),
    ("4453 two\n", "invalid literal"),
    ('{"moves": "1", "board": {"columns": 5}}\n', "rows is 0"),
    ('{"moves": "1", "size": "5x4"}\n', "unknown field(s) size"),
    ('{"moves": 12}\n', "moves must be a string"),
    ('{"moves": "1", "score": 1.5}\n', "score must be an integer"),
    ('{"moves": "1", "board": {"columns": 5, "rows": 4, "k": 4}}\n', "board must be"),
    ('{"moves": "1"\n', "Expecting"),
])
def test_a_bad_line_names_the_file_and_line(tmp_path, text, words):
    path = write(tmp_path, ("44 0\n" if not text.startswith("{") else '{"moves": "4"}\n') + text)
    with pytest.raises(PositionFileError) as caught:
        read_positions(path)
    assert caught.value.message.startswith(f"{path}:2: ")
    assert words in caught.value.message


@pytest.mark.parametrize(("board", "words"), [("8x6", "at most 42 cells"),
                                              ("5-4", "not of the form WxH")])
def test_solve_refuses_an_impossible_board_before_calling(board, words):
    with pytest.raises(SystemExit) as caught:
        main(["--target", "127.0.0.1:1", "solve", "connect4", "3", "--board", board])
    assert str(caught.value).startswith("mcts-mesh: --board: ") and words in str(caught.value)
