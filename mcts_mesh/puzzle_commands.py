"""`mcts-mesh solve sudoku|maze` and `mcts-mesh eval sudoku`: clients of the orchestrator's
SolveProblem RPC. The answer comes only from the mesh; `eval` checks each returned solution here,
independently, against the puzzle's constraints and givens (`libs.puzzles.sudoku.check_solution`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import grpc


def _request(problem: dict, args):
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from mcts_mesh.cli import _agents

    request = pb.SolveProblemRequest(agents=_agents(args.agents), seed=args.seed, **problem)
    return request


def _record(response, latency_ms: float) -> dict:
    from mcts_mesh.cli import _agent_name

    answered_by = next((_agent_name(v.agent) for v in response.votes
                        if v.proposal == (response.sudoku.solution or response.maze.grid)), "")
    return {
        "agents": [_agent_name(a) for a in response.agents],
        "answered_by": answered_by,
        "votes": [{"agent": _agent_name(v.agent), "rationale": v.rationale}
                  for v in response.votes],
        "iterations": response.iterations,
        "latency_ms": round(latency_ms, 2),
    }


def solve_sudoku(stub, args) -> int:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from mcts_mesh.cli import _fail

    started = time.perf_counter()
    try:
        problem = {"sudoku": pb.SudokuProblem(puzzle=args.problem)}
        response = stub.SolveProblem(_request(problem, args), timeout=args.deadline)
    except grpc.RpcError as error:
        return _fail(error)
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

    from mcts_mesh.cli import _fail

    grid = Path(args.problem).read_text() if Path(args.problem).is_file() else args.problem
    started = time.perf_counter()
    try:
        response = stub.SolveProblem(_request({"maze": pb.MazeProblem(grid=grid)}, args),
                                     timeout=args.deadline)
    except grpc.RpcError as error:
        return _fail(error)
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


def eval_sudoku(stub, args) -> int:
    """Every puzzle of a Norvig/tdoku file through the mesh; each solution checked here."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.puzzles.readers import read_sudoku_file
    from libs.puzzles.sudoku import check_solution, format_grid, parse_puzzle
    from mcts_mesh.cli import _fail

    puzzles = read_sudoku_file(args.file, limit=args.limit)
    valid = 0
    latencies = []
    for index, grid in enumerate(puzzles, 1):
        text = format_grid(grid)
        started = time.perf_counter()
        try:
            response = stub.SolveProblem(_request({"sudoku": pb.SudokuProblem(puzzle=text)}, args),
                                         timeout=args.deadline)
        except grpc.RpcError as error:
            return _fail(error)
        latency_ms = (time.perf_counter() - started) * 1e3
        latencies.append(latency_ms)
        solution = response.sudoku.solution
        checked = check_solution(grid, parse_puzzle(solution)).valid if solution else False
        valid += checked
        record = {"puzzle": text, "solution": solution, "valid": bool(checked),
                  **_record(response, latency_ms)}
        if args.json:
            print(json.dumps(record), flush=True)
        elif index % 100 == 0:
            print(f"{index}/{len(puzzles)}: {valid} valid", file=sys.stderr)
    latencies.sort()
    summary = {"summary": True, "file": str(args.file), "puzzles": len(puzzles), "valid": valid,
               "valid_rate": round(valid / len(puzzles), 4) if puzzles else 0.0,
               "median_latency_ms": round(latencies[len(latencies) // 2], 2) if latencies else 0.0,
               "p95_latency_ms": round(latencies[int(len(latencies) * 0.95)], 2)
               if latencies else 0.0}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{Path(args.file).name}: {valid}/{len(puzzles)} valid solutions; median latency "
              f"{summary['median_latency_ms']:.0f} ms, p95 {summary['p95_latency_ms']:.0f} ms")
    return 0
