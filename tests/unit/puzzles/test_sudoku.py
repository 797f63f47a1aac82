"""Sudoku core: parsing, exact solver, uniqueness, contradictions, generator, augmentations."""


import numpy as np
import pytest

from libs.puzzles.readers import read_sudoku_file
from libs.puzzles.sudoku import (
    BoxShape,
    ContradictoryGivens,
    GenerationFailed,
    MalformedPuzzle,
    box_shape_for,
    check_solution,
    format_grid,
    generate,
    parse_puzzle,
    solve,
)
from libs.puzzles.sudoku_augment import random_augmentation

SIX = BoxShape(2, 3)

# Norvig's example (norvig.com/sudoku.html, "grid1") and its unique solution.
GRID1 = "..3.2.6..9..3.5..1..18.64....81.29..7.......8..67.82....26.95..8..2.3..9..5.1.3.."
GRID1_SOLUTION = "483921657967345821251876493548132976729564138136798245372689514814253769695417382"


def test_parse_and_format_round_trip():
    grid = parse_puzzle(GRID1)
    assert grid.shape == (9, 9) and grid.dtype == np.int8
    assert grid[0, 2] == 3 and grid[0, 0] == 0
    assert format_grid(grid) == GRID1
    assert format_grid(parse_puzzle(GRID1.replace(".", "0")), blank="0") == GRID1.replace(".", "0")


@pytest.mark.parametrize(
    ("text", "index"),
    [("1" * 80, None), ("x" + "." * 80, 0), ("." * 35 + "7", 35), ("." * 4 * 4 + ".", None)],
)
def test_parse_rejects_bad_strings(text, index):
    with pytest.raises(MalformedPuzzle) as caught:
        parse_puzzle(text)
    assert caught.value.index == index


def test_box_shapes():
    assert box_shape_for(9) == BoxShape(3, 3)
    assert box_shape_for(6) == BoxShape(2, 3)
    assert box_shape_for(4) == BoxShape(2, 2)
    with pytest.raises(MalformedPuzzle):
        box_shape_for(7)


def test_solves_norvig_example_exactly():
    result = solve(parse_puzzle(GRID1))
    assert result.unique
    assert format_grid(result.solution) == GRID1_SOLUTION


@pytest.mark.parametrize(
    "data_set, name",
    [
        ("sudoku-norvig", "py_sudoku-top95.txt"),
        ("sudoku-norvig", "py_sudoku-hardest.txt"),
        ("sudoku-tdoku-bench", "puzzles5_forum_hardest_1905_11+"),
    ],
    ids=["top95", "hardest", "forum_hardest"],
)
def test_solver_solves_reference_puzzles(data_dir, data_set, name):
    path = data_dir / data_set / name
    puzzles = read_sudoku_file(path, limit=20)
    assert len(puzzles) == min(20, 11 if "hardest.txt" in path.name else 20)
    for puzzle in puzzles:
        result = solve(puzzle)
        assert result.count == 1
        assert check_solution(puzzle, result.solution).valid


def test_uniqueness_check_sees_two_solutions():
    solution = parse_puzzle(GRID1_SOLUTION)
    puzzle = solution.copy()
    # Blank a "deadly rectangle": two rows of one band and two columns holding a / b and b / a,
    # so swapping them gives a second solution.
    rows, cols = _deadly_rectangle(solution)
    for r in rows:
        for c in cols:
            puzzle[r, c] = 0
    result = solve(puzzle, limit=2)
    assert result.count == 2
    assert not result.unique
    assert solve(puzzle, limit=1).count == 1


def _deadly_rectangle(solution):
    for r1 in range(9):
        for r2 in range(r1 + 1, 9):
            if r1 // 3 != r2 // 3:
                continue
            for c1 in range(9):
                for c2 in range(c1 + 1, 9):
                    a, b = solution[r1, c1], solution[r1, c2]
                    if solution[r2, c1] == b and solution[r2, c2] == a:
                        return (r1, r2), (c1, c2)
    raise AssertionError("no deadly rectangle in the test grid")


def test_unsolvable_is_not_contradictory():
    # Row 0 leaves only 9 for r1c9, but r2c9 already holds 9 (same column and box): no unit
    # repeats a digit, yet there is no solution.
    puzzle = parse_puzzle("12345678." + "." * 8 + "9" + "." * 63)
    assert solve(puzzle).count == 0
    assert solve(puzzle).solution is None


def test_contradictory_givens_reported_as_such():
    puzzle = parse_puzzle("5" + "." * 7 + "5" + "." * 72)
    with pytest.raises(ContradictoryGivens) as caught:
        solve(puzzle)
    assert caught.value.unit == "row" and caught.value.digit == 5
    assert caught.value.cells == ((0, 0), (0, 8))
    box = parse_puzzle("3" + "." * 9 + "3" + "." * 70)
    with pytest.raises(ContradictoryGivens) as caught:
        solve(box)
    assert caught.value.unit == "box"


def test_check_solution_reports_each_fault():
    puzzle = parse_puzzle(GRID1)
    solution = parse_puzzle(GRID1_SOLUTION)
    assert check_solution(puzzle, solution).valid
    broken = solution.copy()
    broken[0, 2], broken[0, 3] = broken[0, 3], broken[0, 2]  # (0, 2) is a given
    verdict = check_solution(puzzle, broken)
    assert not verdict.valid
    assert (0, 2) in verdict.changed_givens
    assert ("column", 2) in verdict.violations and ("row", 0) not in verdict.violations
    blank = solution.copy()
    blank[8, 8] = 0
    assert check_solution(puzzle, blank).blanks == 1


def test_check_solution_enforces_the_box_rule():
    """Grids whose rows and columns all hold 1..N but whose boxes do not are refused, box by box:
    a checker that looked only at rows and columns would accept both."""
    blank = np.zeros((9, 9), dtype=np.int8)
    latin = np.array([[(r + c) % 9 + 1 for c in range(9)] for r in range(9)], dtype=np.int8)
    verdict = check_solution(blank, latin)
    assert not verdict.valid
    assert verdict.violations == tuple(("box", b) for b in range(9))
    # Swap rows 2 and 3 (0-based) of a true solution: every row and column still holds 1..9, but
    # the two rows cross from band 0 into band 1, breaking exactly the boxes of those two bands.
    crossed = parse_puzzle(GRID1_SOLUTION)
    crossed[[2, 3]] = crossed[[3, 2]]
    verdict = check_solution(blank, crossed)
    assert verdict.violations == tuple(("box", b) for b in range(6))
    # The box shape is the one given: a 6x6 grid with 2x3 boxes is not one with 3x2 boxes.
    six = parse_puzzle("123456456123231564564231312645645312")
    assert check_solution(np.zeros((6, 6), dtype=np.int8), six, SIX).valid
    turned = check_solution(np.zeros((6, 6), dtype=np.int8), six, BoxShape(3, 2))
    assert turned.violations and {unit for unit, _ in turned.violations} == {"box"}


@pytest.mark.parametrize("blanks", [16, 22])
def test_generator_gives_unique_six_by_six_puzzles(blanks):
    rng = np.random.default_rng(7)
    for _ in range(10):
        puzzle, solution = generate(SIX, blanks, rng)
        assert int((puzzle == 0).sum()) == blanks
        assert check_solution(puzzle, solution, SIX).valid
        result = solve(puzzle, SIX)
        assert result.unique
        assert np.array_equal(result.solution, solution)


def test_generator_is_seeded():
    a = generate(SIX, 16, np.random.default_rng(3))
    b = generate(SIX, 16, np.random.default_rng(3))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_generator_refuses_impossible_blank_counts():
    with pytest.raises(GenerationFailed):
        generate(BoxShape(2, 2), 16, np.random.default_rng(0), attempts=2)
    with pytest.raises(ValueError):
        generate(SIX, 37, np.random.default_rng(0))


@pytest.mark.parametrize("shape", [BoxShape(3, 3), SIX])
def test_augmentation_keeps_validity_and_inverts(shape):
    rng = np.random.default_rng(11)
    puzzle, solution = generate(shape, 20, rng)
    seen_transpose = False
    for _ in range(20):
        aug = random_augmentation(shape, rng)
        seen_transpose |= aug.transpose
        new_puzzle, new_solution = aug.apply(puzzle), aug.apply(solution)
        assert check_solution(new_puzzle, new_solution, shape).valid
        assert int((new_puzzle == 0).sum()) == 20
        assert np.array_equal(aug.invert(new_puzzle), puzzle)
        assert np.array_equal(aug.invert(new_solution), solution)
    # Transpose only keeps the box shape for square boxes.
    assert seen_transpose == (shape.box_rows == shape.box_cols)


def test_the_search_stops_on_its_node_budget_or_when_told():
    import threading

    from libs.puzzles.sudoku import SearchStopped

    empty = np.zeros((9, 9), dtype=np.int8)
    with pytest.raises(SearchStopped) as caught:
        solve(empty, limit=10**9, max_nodes=500)
    assert caught.value.nodes == 500
    stop = threading.Event()
    stop.set()
    with pytest.raises(SearchStopped, match="stopped by the caller"):
        solve(empty, limit=10**9, stop=stop)
    assert solve(parse_puzzle(GRID1), limit=1, max_nodes=10_000).count == 1
