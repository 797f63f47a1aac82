"""Maze core: generator, BFS labels, path check, HRM token encoding."""

import numpy as np
import pytest

from libs.puzzles.maze import (
    GOAL,
    OPEN,
    PATH,
    START,
    WALL,
    MalformedMaze,
    check_path,
    format_maze,
    generate_maze,
    parse_maze,
    shortest_path,
    solve_maze,
)


def _rows(*rows: str) -> str:
    """A maze string from its rows (keeps the literals readable)."""
    return "".join(rows)


# A 5x5 maze with two routes from S to G: 2 steps along the top, 6 around the bottom.
LOOP = _rows("#####", "#S G#", "# # #", "#   #", "#####")


def test_tokens_match_hrm_charset():
    grid = parse_maze("# SGo" + "#" * 4)
    assert grid.dtype == np.uint8
    assert grid.ravel()[:5].tolist() == [WALL, OPEN, START, GOAL, PATH] == [1, 2, 3, 4, 5]
    assert format_maze(grid) == "# SGo####"


@pytest.mark.parametrize("text", ["#####", "#x#" + "#" * 6])
def test_parse_rejects_bad_mazes(text):
    with pytest.raises(MalformedMaze):
        parse_maze(text)


def test_bfs_label_on_a_known_maze():
    question = parse_maze(LOOP)
    path = shortest_path(question)
    assert path == [(1, 1), (1, 2), (1, 3)]
    answer = solve_maze(question)
    assert format_maze(answer) == _rows("#####", "#SoG#", "# # #", "#   #", "#####")
    check = check_path(question, answer)
    assert check.valid and check.optimal and check.length == check.shortest == 2


def test_check_path_valid_but_not_optimal():
    question = parse_maze(LOOP)
    detour = parse_maze(_rows("#####", "#S G#", "#o#o#", "#ooo#", "#####"))
    check = check_path(question, detour)
    assert check.valid and not check.optimal
    assert check.length == 6 and check.shortest == 2


@pytest.mark.parametrize(
    "answer",
    [
        _rows("#####", "#S G#", "#o# #", "#   #", "#####"),  # dead end, not reaching G
        _rows("#####", "#SoG#", "# # #", "#o  #", "#####"),  # stray cell off the path
        _rows("#####", "#SoG#", "#o#o#", "#ooo#", "#####"),  # a cycle through S and G
        _rows("#####", "#SGG#", "# # #", "#   #", "#####"),  # goal/start cells changed
        _rows("#o###", "#S G#", "# # #", "#   #", "#####"),  # path on a wall
    ],
)
def test_check_path_rejects_invalid_answers(answer):
    question = parse_maze(LOOP)
    check = check_path(question, parse_maze(answer))
    assert not check.valid and not check.optimal


def test_check_path_rejects_wrong_shape():
    question = parse_maze(LOOP)
    answer = solve_maze(question)
    assert not check_path(question, answer[:, :4]).valid


def test_generated_mazes_have_valid_optimal_labels():
    rng = np.random.default_rng(5)
    for extra in (0, 0, 8, 20):
        question, answer = generate_maze(7, 9, rng, extra_openings=extra, min_path_length=10)
        assert question.shape == (15, 19)
        assert (question == START).sum() == 1 and (question == GOAL).sum() == 1
        assert not (question == PATH).any()
        # Border stays closed.
        assert (question[0] == WALL).all() and (question[:, -1] == WALL).all()
        check = check_path(question, answer)
        assert check.valid and check.optimal and check.shortest >= 10
        assert int((answer == PATH).sum()) == check.shortest - 1


def test_perfect_maze_is_a_tree():
    # A perfect maze on r x c cells opens exactly r*c cells plus r*c - 1 passages.
    question, _ = generate_maze(6, 6, np.random.default_rng(1))
    open_cells = int((question != WALL).sum())
    assert open_cells == 36 + 35


def test_generator_is_seeded():
    a = generate_maze(5, 5, np.random.default_rng(9), extra_openings=3)
    b = generate_maze(5, 5, np.random.default_rng(9), extra_openings=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
