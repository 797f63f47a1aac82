"""`mcts-mesh puzzles heldout` and `mcts-mesh eval sudoku|maze` against the real orchestrator on
port 0, whose TRM is a fake neural service that knows the answers of some puzzles: the JSON lines
say who answered, and the summary's rates count what the mesh returned."""

from __future__ import annotations

import asyncio
import json

import pytest

from libs.puzzles import maze as maze_lib
from libs.puzzles.sudoku import format_grid
from mcts_mesh import cli
from mcts_mesh.puzzle_files import held_out_rows, maze_line, maze_rows
from training.reasoning.data import MazeTask, SudokuTask


async def run_cli(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, list(argv))
    assert code == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


async def test_eval_sudoku_through_trm_reports_who_answered_and_the_rates(
        reasoning_mesh, tmp_path, capsys):
    mesh = await reasoning_mesh()
    path = tmp_path / "heldout.csv"
    assert cli.main(["puzzles", "heldout", "sudoku", "--size", "6", "--blanks", "16",
                     "--count", "6", "--seed", "3", "--output", str(path)]) == 0
    rows = held_out_rows(SudokuTask(6, 16), 6, 3)
    for puzzle, solution in rows[:4]:  # TRM knows four of the six
        mesh.fake.answers[format_grid(puzzle)] = format_grid(solution)

    lines = await run_cli(capsys, "--target", mesh.target, "eval", "sudoku", str(path),
                          "--agents", "trm", "--json")
    records, summary = lines[:-1], lines[-1]
    assert [r["puzzle"] for r in records] == [format_grid(p) for p, _ in rows]
    assert [r["valid"] for r in records] == [True] * 4 + [False] * 2
    assert [r["answered_by"] for r in records] == ["trm"] * 4 + [""] * 2
    assert records[0]["agents"] == ["trm", "checker"] and records[0]["exact"] is True
    assert records[5]["error"]["code"] == "FAILED_PRECONDITION"
    assert all(r["latency_ms"] > 0 for r in records)
    assert summary["valid_rate"] == summary["exact_rate"] == pytest.approx(4 / 6, abs=1e-4)
    assert summary["answered_by"] == {"trm": 4}
    assert summary["errors"] == {"FAILED_PRECONDITION": 2}

    lines = await run_cli(capsys, "--target", mesh.target, "eval", "sudoku", str(path),
                          "--agents", "trm,solver", "--json")
    summary = lines[-1]
    assert summary["valid_rate"] == summary["exact_rate"] == 1.0
    assert summary["answered_by"] == {"trm": 4, "solver": 2}


async def test_eval_maze_line_file_reports_rates_by_path_length(
        reasoning_mesh, tmp_path, capsys):
    mesh = await reasoning_mesh()
    path = tmp_path / "mazes.txt"
    assert cli.main(["puzzles", "heldout", "maze", "--count", "8", "--seed", "5",
                     "--format", "lines", "--output", str(path)]) == 0
    rows = held_out_rows(MazeTask(), 8, 5)
    for question, answer in rows[::2]:
        mesh.fake.answers[maze_lib.format_maze(question)] = maze_lib.format_maze(answer)

    lines = await run_cli(capsys, "--target", mesh.target, "eval", "maze", str(path),
                          "--agents", "trm,solver", "--json")
    records, summary = lines[:-1], lines[-1]
    assert len(records) == 8
    assert [r["answered_by"] for r in records] == ["trm", "solver"] * 4
    assert all(r["valid"] and r["optimal"] and r["exact"] for r in records)
    assert [r["shortest"] for r in records] == [int((a == maze_lib.PATH).sum()) + 1
                                                for _, a in rows]
    assert records[0]["solution"].count("/") == 8
    assert summary["optimal_rate"] == summary["exact_rate"] == 1.0
    assert summary["answered_by"] == {"trm": 4, "solver": 4}
    by_length = summary["by_path_length"]
    assert sum(group["mazes"] for group in by_length.values()) == 8
    assert all(group["optimal_rate"] == 1.0 for group in by_length.values())

    lines = await run_cli(capsys, "--target", mesh.target, "eval", "maze", str(path),
                          "--agents", "trm", "--json")
    summary = lines[-1]
    assert summary["optimal"] == 4 and summary["errors"] == {"FAILED_PRECONDITION": 4}


async def test_solve_maze_takes_one_line_with_rows_joined_by_slashes(reasoning_mesh, capsys):
    mesh = await reasoning_mesh()
    ((question, answer),) = held_out_rows(MazeTask(), 1, 9)
    mesh.fake.answers[maze_lib.format_maze(question)] = maze_lib.format_maze(answer)
    (record,) = await run_cli(capsys, "--target", mesh.target, "solve", "maze",
                              maze_line(question), "--agents", "trm", "--json")
    assert record["grid"] == maze_rows(answer) and record["optimal"]
    assert record["answered_by"] == "trm" and record["agents"] == ["trm", "checker"]
