"""`mcts-mesh solve sudoku|maze` and `mcts-mesh eval sudoku|maze`: clients of the orchestrator's
SolveProblem RPC; and `mcts-mesh puzzles heldout`, which writes the trainer's held-out sets.

The answer comes only from the mesh; `eval` checks each returned answer here, independently: a
Sudoku against its constraints and givens (`libs.puzzles.sudoku.check_solution`), a maze path for
validity and optimality (`libs.puzzles.maze.check_path`). Each JSON line says which agent produced
the answer (`answered_by`, from SolveProblemResponse.answered_by). File formats:
`mcts_mesh.puzzle_files`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import grpc

from mcts_mesh.cli.common import agent_name, agents, fail
from mcts_mesh.cli.progress import eval_progress


def register(sub) -> None:
    """Adds `puzzles` and its subcommand `heldout` to the command line's subparsers."""
    puzzles = sub.add_parser("puzzles", help="write puzzle files (no orchestrator involved)")
    puzzles_sub = puzzles.add_subparsers(dest="puzzles_command", required=True)
    heldout = puzzles_sub.add_parser(
        "heldout", help="write the trainer's held-out set, held_out_set(task, count, seed), for "
                        "`eval sudoku|maze` (a training run with --seed T evaluates on seed T+1)")
    heldout.add_argument("kind", choices=["sudoku", "maze"])
    heldout.add_argument("--count", type=int, default=1000)
    heldout.add_argument("--seed", type=int, default=1,
                         help="held_out_set's seed (default 1: the set of `train --seed 0`)")
    heldout.add_argument("--size", type=int, default=6, help="sudoku: N")
    heldout.add_argument("--blanks", type=int, default=16, help="sudoku: blanks per puzzle")
    heldout.add_argument("--rows", type=int, default=4, help="maze: lattice rows (grid 2r+1)")
    heldout.add_argument("--cols", type=int, default=4, help="maze: lattice columns (grid 2c+1)")
    heldout.add_argument("--extra-openings", type=int, default=0,
                         help="maze: walls removed after carving (0: a perfect maze, one path)")
    heldout.add_argument("--min-path-length", type=int, default=4, help="maze: S-G steps")
    heldout.add_argument("--format", choices=["csv", "lines"], default="csv",
                         help="csv: HRM CSV with answers (default); lines: one puzzle a line")
    heldout.add_argument("--output", default=None, help="file to write (default stdout)")
    heldout.set_defaults(func=held_out)


def _request(problem: dict, args):
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    request = pb.SolveProblemRequest(agents=agents(args.agents), seed=args.seed, **problem)
    return request


def _record(response, latency_ms: float) -> dict:
    return {
        "agents": [agent_name(a) for a in response.agents],
        "answered_by": agent_name(response.answered_by),
        "votes": [{"agent": agent_name(v.agent), "rationale": v.rationale}
                  for v in response.votes],
        "iterations": response.iterations,
        "latency_ms": round(latency_ms, 2),
    }


def solve_sudoku(stub, args) -> int:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    started = time.perf_counter()
    try:
        problem = {"sudoku": pb.SudokuProblem(puzzle=args.problem)}
        response = stub.SolveProblem(_request(problem, args), timeout=args.deadline)
    except grpc.RpcError as error:
        return fail(error)
    record = {"puzzle": args.problem, "solution": response.sudoku.solution,
              "valid": response.sudoku.valid,
              **_record(response, (time.perf_counter() - started) * 1e3)}
    if args.json:
        print(json.dumps(record))
        return 0
    size = round(len(record["solution"]) ** 0.5)
    for row in range(size):
        print(" ".join(record["solution"][row * size:(row + 1) * size]))
    print(f"(valid {record['valid']}; answered by {record['answered_by']}; agents "
          f"{','.join(record['agents'])}; {record['latency_ms']:.0f} ms)")
    return 0


def solve_maze(stub, args) -> int:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    grid = Path(args.problem).read_text() if Path(args.problem).is_file() else args.problem
    if "\n" not in grid.strip("\n") and "/" in grid:  # one line of a maze file: rows joined by '/'
        grid = grid.strip("\n").replace("/", "\n")
    started = time.perf_counter()
    try:
        response = stub.SolveProblem(_request({"maze": pb.MazeProblem(grid=grid)}, args),
                                     timeout=args.deadline)
    except grpc.RpcError as error:
        return fail(error)
    record = {"grid": response.maze.grid, "path_length": response.maze.path_length,
              "optimal": response.maze.optimal,
              **_record(response, (time.perf_counter() - started) * 1e3)}
    if args.json:
        print(json.dumps(record))
        return 0
    print(record["grid"])
    print(f"(path of {record['path_length']} steps, optimal {record['optimal']}; answered by "
          f"{record['answered_by']}; {record['latency_ms']:.0f} ms)")
    return 0


CONTINUE_CODES = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.DEADLINE_EXCEEDED,
                  grpc.StatusCode.INVALID_ARGUMENT)
"""Per-puzzle outcomes an evaluation records and goes past (no proposal verified, out of time, a
puzzle the mesh refuses); any other failure (the mesh is down) ends it."""


def _error_record(error: grpc.RpcError) -> dict:
    return {"error": {"code": error.code().name, "message": error.details()}}


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _summary(args, records: list[dict], latencies: list[float]) -> dict:
    """What sudoku and maze evaluations share: counts, rates, who answered, latencies."""
    latencies = sorted(latencies)
    answered_by: dict[str, int] = {}
    errors: dict[str, int] = {}
    for record in records:
        if "error" in record:
            errors[record["error"]["code"]] = errors.get(record["error"]["code"], 0) + 1
        else:
            answered_by[record["answered_by"]] = answered_by.get(record["answered_by"], 0) + 1
    valid = sum(record["valid"] for record in records)
    known = [record for record in records if record["exact"] is not None]
    exact = sum(record["exact"] for record in known)
    return {
        "summary": True, "file": str(args.file), "agents": args.agents or "default",
        "puzzles": len(records), "valid": valid, "valid_rate": _rate(valid, len(records)),
        "exact_known": len(known), "exact": exact,
        "exact_rate": _rate(exact, len(known)) if known else None,  # no answers in the file
        "answered_by": answered_by, "errors": errors,
        "median_latency_ms": round(latencies[len(latencies) // 2], 2) if latencies else 0.0,
        "p95_latency_ms": round(latencies[int(len(latencies) * 0.95)], 2) if latencies else 0.0,
    }


def _evaluate(stub, args, items, problem_of, judge) -> tuple[list[dict], list[float]] | int:
    """Sends each item through the orchestrator; `judge(item, response)` checks the answer here.
    Returns the records and latencies, or the exit code of a failure that ends the run."""
    records, latencies = [], []
    with eval_progress(len(items), Path(args.file).name, every=100,
                       lines=not args.json) as progress:
        outcome = _evaluate_items(stub, args, items, problem_of, judge, records, latencies,
                                  progress)
    return outcome if outcome is not None else (records, latencies)


def _evaluate_items(stub, args, items, problem_of, judge, records: list[dict],
                    latencies: list[float], progress) -> int | None:
    """`_evaluate`'s loop: fills `records` and `latencies`; returns an exit code to end early."""
    valid = 0
    for index, item in enumerate(items, 1):
        started = time.perf_counter()
        try:
            response = stub.SolveProblem(_request(problem_of(item), args), timeout=args.deadline)
        except grpc.RpcError as error:
            if error.code() not in CONTINUE_CODES:
                return fail(error)
            response = None
            outcome = _error_record(error)
        latency_ms = (time.perf_counter() - started) * 1e3
        latencies.append(latency_ms)
        record = judge(item, response)
        record.update(_record(response, latency_ms) if response is not None
                      else {"agents": [], "answered_by": "", "latency_ms": round(latency_ms, 2),
                            **outcome})
        records.append(record)
        valid += bool(record["valid"])
        if args.json:
            print(json.dumps(record), flush=True)
        progress(index, f"{valid} valid")
    return None


def eval_sudoku(stub, args) -> int:
    """Every puzzle of a Sudoku file (`mcts_mesh.puzzle_files`: HRM CSV with answers, or one
    puzzle a line) through the mesh; each solution checked here, independently: `valid` keeps the
    givens and completes every unit, `exact` equals the file's answer (CSV only; on a puzzle with
    one solution, as every generated one, valid and exact agree)."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.puzzles.sudoku import check_solution, format_grid, parse_puzzle
    from mcts_mesh.puzzle_files import read_sudoku_items

    def judge(item, response) -> dict:
        puzzle, answer = item
        solution = response.sudoku.solution if response is not None else ""
        valid = bool(solution) and check_solution(puzzle, parse_puzzle(solution)).valid
        exact = None if answer is None else solution == format_grid(answer)
        return {"puzzle": format_grid(puzzle), "solution": solution, "valid": valid,
                "exact": exact}

    items = read_sudoku_items(args.file, limit=args.limit)
    outcome = _evaluate(stub, args, items,
                        lambda item: {"sudoku": pb.SudokuProblem(puzzle=format_grid(item[0]))},
                        judge)
    if isinstance(outcome, int):
        return outcome
    summary = _summary(args, *outcome)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{Path(args.file).name}: {summary['valid']}/{summary['puzzles']} valid solutions"
              f" ({summary['valid_rate']:.1%}); answered by {summary['answered_by']}; errors "
              f"{summary['errors']}; median latency {summary['median_latency_ms']:.0f} ms, p95 "
              f"{summary['p95_latency_ms']:.0f} ms")
    return 0


def eval_maze(stub, args) -> int:
    """Every maze of a maze file (`mcts_mesh.puzzle_files`: HRM CSV with answers, or one maze a
    line with rows joined by '/') through the mesh; each path checked here: `valid` is one path
    from S to G, `optimal` a shortest one, `exact` equals the reference path (the file's answer,
    else the trainer's breadth-first-search label). The summary breaks the rates down by
    shortest-path length."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.puzzles.maze import PATH, check_path, parse_maze, solve_maze
    from mcts_mesh.puzzle_files import maze_line, maze_rows, read_maze_items

    def judge(item, response) -> dict:
        question, answer = item
        reference = answer if answer is not None else solve_maze(question)
        grid = response.maze.grid if response is not None else ""
        width = question.shape[1]
        rows = grid.split("\n")
        checked = None
        if grid and len(rows) == question.shape[0] and all(len(r) == width for r in rows):
            checked = check_path(question, parse_maze("".join(rows), width))
        shortest = int((reference == PATH).sum()) + 1
        return {"puzzle": maze_line(question),
                "solution": grid.replace("\n", "/"),
                "valid": bool(checked and checked.valid),
                "optimal": bool(checked and checked.optimal),
                "exact": grid == maze_rows(reference),
                "path_length": checked.length if checked and checked.valid else -1,
                "shortest": shortest}

    items = read_maze_items(args.file, limit=args.limit)
    outcome = _evaluate(stub, args, items,
                        lambda item: {"maze": pb.MazeProblem(grid=maze_rows(item[0]))}, judge)
    if isinstance(outcome, int):
        return outcome
    records, latencies = outcome
    summary = _summary(args, records, latencies)
    optimal = sum(record["optimal"] for record in records)
    summary.update(optimal=optimal, optimal_rate=_rate(optimal, len(records)))
    by_length: dict[int, dict] = {}
    for record in records:
        group = by_length.setdefault(record["shortest"], {"mazes": 0, "optimal": 0, "exact": 0})
        group["mazes"] += 1
        group["optimal"] += record["optimal"]
        group["exact"] += record["exact"]
    summary["by_path_length"] = {
        length: {**group, "optimal_rate": _rate(group["optimal"], group["mazes"]),
                 "exact_rate": _rate(group["exact"], group["mazes"])}
        for length, group in sorted(by_length.items())}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{Path(args.file).name}: {optimal}/{summary['puzzles']} optimal paths "
              f"({summary['optimal_rate']:.1%}), exact {summary['exact']}; answered by "
              f"{summary['answered_by']}; errors {summary['errors']}; median latency "
              f"{summary['median_latency_ms']:.0f} ms")
        for length, group in summary["by_path_length"].items():
            print(f"  path {length:>3} steps: {group['mazes']:>5} mazes, optimal "
                  f"{group['optimal_rate']:.1%}, exact {group['exact_rate']:.1%}")
    return 0


def held_out(args) -> int:
    """`mcts-mesh puzzles heldout sudoku|maze`: writes `held_out_set(task, count, seed)`, the
    trainer's evaluation set, to stdout or `--output` (no orchestrator involved)."""
    from mcts_mesh.puzzle_files import write_held_out
    from training.reasoning.data import MazeTask, SudokuTask

    if args.kind == "sudoku":
        task = SudokuTask(size=args.size, blanks=args.blanks)
    else:
        task = MazeTask(rows=args.rows, cols=args.cols, extra_openings=args.extra_openings,
                        min_path_length=args.min_path_length)
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as out:
                count = write_held_out(task, args.count, args.seed, out, args.format)
            print(f"wrote {count} puzzles of held_out_set({task}, {args.count}, {args.seed}) to "
                  f"{args.output}", file=sys.stderr)
        else:
            write_held_out(task, args.count, args.seed, sys.stdout, args.format)
    except ValueError as error:
        raise SystemExit(f"puzzles heldout: {error}") from error
    return 0
