"""`solve` and `eval`: clients of the orchestrator's SolveProblem RPC. Connect Four is answered
here; Sudoku and mazes in `mcts_mesh.cli.puzzles`."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from rich.console import Console

from libs.errors import MeshError
from mcts_mesh.cli import puzzles
from mcts_mesh.cli.common import agent_name, agents, fail, failure_records, stub
from mcts_mesh.cli.progress import StreamingSolveStub, eval_progress

if TYPE_CHECKING:  # the game's modules load numba: imported where a command needs them
    from libs.connect4.geometry import Board
    from mcts_mesh.position_files import PositionRow

AGENTS_HELP = ("comma list: mcts,neural,checker (connect4); hrm,trm,solver (puzzles; default: the "
               "models served for the grid, then solver)")


def register(sub) -> None:
    """Adds `solve` and `eval` to the command line's subparsers."""
    solve = sub.add_parser("solve", help="ask the orchestrator to solve a problem")
    solve.add_argument("game", choices=["connect4", "sudoku", "maze"])
    solve.add_argument("problem", help="connect4: columns 1-7 played from the empty board, e.g. "
                       "4453 ('' is the start; 1-W on a board of W columns); sudoku: N*N "
                       "characters, '.' or '0' blank; maze: a file (or text) of rows of '#', "
                       "' ', 'S', 'G', or one line with the rows joined by '/'")
    solve.add_argument("--board", default=None, metavar="WxH",
                       help="connect4: the board, columns x rows, e.g. 5x4 (default 7x6)")
    solve.add_argument("--agents", default=None, help=AGENTS_HELP)
    solve.add_argument("--simulations", type=int, default=None)
    solve.add_argument("--seed", type=int, default=0)
    solve.add_argument("--json", action="store_true")
    solve.add_argument("--progress", action="store_true",
                       help="watch the consensus loop live on stderr (StreamSolveProblem)")
    solve.set_defaults(func=cmd_solve)

    evaluate = sub.add_parser("eval", help="evaluate the mesh on a benchmark file (connect4: Pons "
                              "lines '<moves> <score> [WxH]' or JSON Lines with a board; "
                              "Sudoku: one puzzle per line or HRM CSV; maze: one maze per line, "
                              "rows joined by '/', or HRM CSV)")
    evaluate.add_argument("game", choices=["connect4", "sudoku", "maze"])
    evaluate.add_argument("file")
    evaluate.add_argument("--limit", type=int, default=None)
    evaluate.add_argument("--agents", default=None, help=AGENTS_HELP)
    evaluate.add_argument("--simulations", type=int, default=None)
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--json", action="store_true")
    evaluate.add_argument("--batch", action="store_true",
                          help="connect4: submit the file as one batch of durable runs and score "
                               "its results (see `runs`)")
    evaluate.set_defaults(func=cmd_eval)


def _solve_request(moves: str, args, board: Board | None = None) -> object:
    """The SolveProblem request of a Connect Four position (on `board`; None: 7x6, which the
    request leaves unstated)."""
    from mesh.common.v1 import common_pb2
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.connect4.geometry import STANDARD

    position = common_pb2.ConnectFourPosition(moves=moves)
    if board is not None and board != STANDARD:
        position.board.columns, position.board.rows = board.columns, board.rows
    request = pb.SolveProblemRequest(connect_four=position, agents=agents(args.agents),
                                     seed=args.seed)
    if args.simulations is not None:
        request.simulations = args.simulations
    return request


def _answer_record(moves: str, response, latency_ms: float, board: Board | None = None) -> dict:
    answer = response.connect_four
    stats = response.search_statistics
    return {
        "moves": moves,
        "board": board.name if board is not None else "7x6",
        "move": answer.column,
        "value": round(answer.value, 4),
        "outcome": _outcome_name(answer.outcome),
        "confidence": round(response.confidence, 4),
        "agents": [agent_name(a) for a in response.agents],
        "votes": [{"agent": agent_name(v.agent), "proposal": v.proposal,
                   "confidence": round(v.confidence, 4), "rationale": v.rationale}
                  for v in response.votes],
        "simulations": stats.simulations,
        "simulations_per_second": round(stats.simulations_per_second, 1),
        "iterations": response.iterations,
        "consensus": response.consensus_reached,
        "latency_ms": round(latency_ms, 2),
        "failures": failure_records(response),
    }


def _outcome_name(value: int) -> str:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    return pb.Outcome.Name(value).removeprefix("OUTCOME_").lower()


def cmd_solve(args) -> int:
    """`solve GAME PROBLEM`: one SolveProblem call (StreamSolveProblem with `--progress`); prints
    the answer, each vote and each failed agent, or one JSON record with `--json`."""
    board = _board(args.board) if args.game == "connect4" else None
    channel, orchestrator = stub(args.target, args.api_key)
    if args.progress:  # the same answer, through StreamSolveProblem, with the loop shown live
        orchestrator = StreamingSolveStub(orchestrator, Console(stderr=True))
    started = time.perf_counter()
    try:
        if args.game == "sudoku":
            return puzzles.solve_sudoku(orchestrator, args)
        if args.game == "maze":
            return puzzles.solve_maze(orchestrator, args)
        response = orchestrator.SolveProblem(_solve_request(args.problem, args, board),
                                             timeout=args.deadline)
    except grpc.RpcError as error:
        return fail(error)
    finally:
        channel.close()
    record = _answer_record(args.problem, response, (time.perf_counter() - started) * 1e3,
                            board)
    if args.json:
        print(json.dumps(record))
    else:
        _print_answer(record)
    return 0


def _print_answer(record: dict) -> None:
    search = (f"{record['simulations']} simulations at "
              f"{record['simulations_per_second']:.0f}/s, " if record["simulations"] else "")
    print(f"play column {record['move']}  (value {record['value']:+.3f}, outcome "
          f"{record['outcome']}, confidence {record['confidence']:.2f}, agents "
          f"{','.join(record['agents'])}, {search}{record['latency_ms']:.0f} ms)")
    for vote in record["votes"]:
        print(f"  {vote['agent']:>8}: {vote['proposal']:>2}  conf {vote['confidence']:.2f}  "
              f"{vote['rationale']}")
    for failure in record["failures"]:
        print(f"  {failure['agent']:>8}: failed ({failure['code']}: {failure['message']})")


def _board(text: str | None) -> Board:
    """The `--board` option ("WxH"); None is the standard 7x6.

    Raises:
        SystemExit: not of the form WxH, or a board outside the game's limits.
    """
    from libs.connect4.geometry import STANDARD, Board

    if text is None:
        return STANDARD
    try:
        return Board.parse(text)
    except ValueError as error:
        raise SystemExit(f"mcts-mesh: --board: {error}") from error


def _labelled(rows: list[PositionRow]) -> list[PositionRow]:
    """`rows` with every missing score found by the exact solver here (weak mode: its sign).

    Raises:
        MeshError: the solver's guard budget (`JUDGE_MAX_NODES`) did not decide a position.
    """
    from libs.connect4.board import Position
    from libs.connect4.outcome import JUDGE_MAX_NODES
    from libs.connect4.solver import solve

    labelled = []
    for row in rows:
        if row.score is None:
            solved = solve(Position.from_moves(row.moves, row.board), max_nodes=JUDGE_MAX_NODES,
                           weak=True)
            if solved.score is None:
                raise MeshError(f"{row.moves!r} on {row.board_name}: the exact solver did not "
                                f"decide it within {JUDGE_MAX_NODES:,} nodes; give its score")
            row = replace(row, score=solved.score)
        labelled.append(row)
    return labelled


def cmd_eval(args) -> int:
    """Sends every position of a position file to the orchestrator and judges the move it returns.

    A move keeps the outcome when the position after it has the same game-theoretic result for the
    player who moved as the position before it (the file's score, or the exact solver's where the
    file gives none); the judging uses the exact solver on this side, the answer comes only from
    the mesh. The file's format: `mcts_mesh.position_files`.
    """
    from mcts_mesh.position_files import read_positions

    if args.batch and args.game != "connect4":
        raise SystemExit(f"--batch: only connect4 is evaluated as a batch, not {args.game}")
    if args.game in ("sudoku", "maze"):
        channel, orchestrator = stub(args.target, args.api_key)
        try:
            return (puzzles.eval_sudoku if args.game == "sudoku" else puzzles.eval_maze)(
                orchestrator, args)
        finally:
            channel.close()
    rows = _labelled(read_positions(Path(args.file), args.limit))
    if args.batch:
        return _eval_batch(args, rows)
    channel, orchestrator = stub(args.target, args.api_key)
    latencies: list[float] = []
    rates: list[float] = []
    progress_bar = contextlib.ExitStack()
    try:
        progress = progress_bar.enter_context(
            eval_progress(len(rows), Path(args.file).name, every=25, lines=not args.json))
        kept = _eval_positions(orchestrator, args, rows, progress, latencies, rates)
        if isinstance(kept, grpc.RpcError):
            return fail(kept)
    finally:
        progress_bar.close()
        channel.close()
    _print_summary(args, rows, kept, latencies, rates)
    return 0


def _eval_positions(orchestrator, args, rows, progress, latencies: list[float],
                    rates: list[float]) -> int | grpc.RpcError:
    """`cmd_eval`'s loop over the file's rows (labelled): fills `latencies` and `rates`, prints
    each record with `--json`; returns the number of moves that keep the outcome, or the failed
    call's error, which ends the run."""
    from libs.connect4.outcome import keeps_outcome

    kept = 0
    for index, row in enumerate(rows, 1):
        started = time.perf_counter()
        try:
            response = orchestrator.SolveProblem(_solve_request(row.moves, args, row.board),
                                                 timeout=args.deadline)
        except grpc.RpcError as error:
            return error
        latency_ms = (time.perf_counter() - started) * 1e3
        record = _answer_record(row.moves, response, latency_ms, row.board)
        record["score"] = row.score
        record["keeps_outcome"] = bool(keeps_outcome(row.moves, record["move"], row.score,
                                                     board=row.board))
        kept += record["keeps_outcome"]
        latencies.append(latency_ms)
        if record["simulations_per_second"]:
            rates.append(record["simulations_per_second"])
        if args.json:
            print(json.dumps(record), flush=True)
        progress(index, f"kept {kept} ({kept / index:.1%})")
    return kept


def _eval_batch(args, rows) -> int:
    """`eval connect4 FILE --batch`: the positions as one batch of runs (`runs.run_batch`), each
    run's answer judged as `_eval_positions` judges a call's; a run's latency is its execution
    (start to end). A run that failed keeps nothing and is printed with its error."""
    from libs.connect4.outcome import keeps_outcome
    from mcts_mesh.cli.runs import run_batch

    try:
        runs = run_batch(args, [_solve_request(row.moves, args, row.board) for row in rows],
                         Path(args.file).name)
    except grpc.RpcError as error:
        return fail(error)
    if len(runs) != len(rows):
        raise SystemExit(f"eval --batch: the batch lists {len(runs)} runs for {len(rows)} "
                         "positions")
    kept, latencies, rates = 0, [], []
    for run, row in zip(runs, rows, strict=True):
        moves = row.moves
        if not run.HasField("solve_response"):
            record = {"moves": moves, "board": row.board_name, "score": row.score,
                      "keeps_outcome": False, "run": run.name,
                      "error": run.error.message or "the run did not succeed"}
        else:
            latency_ms = (run.end_time.ToNanoseconds() - run.start_time.ToNanoseconds()) / 1e6
            record = _answer_record(moves, run.solve_response, latency_ms, row.board)
            record.update(score=row.score, run=run.name,
                          keeps_outcome=bool(keeps_outcome(moves, record["move"], row.score,
                                                           board=row.board)))
            latencies.append(latency_ms)
            if record["simulations_per_second"]:
                rates.append(record["simulations_per_second"])
        kept += record["keeps_outcome"]
        if args.json:
            print(json.dumps(record), flush=True)
        elif "error" in record:
            print(f"  {moves}: {run.name} failed: {record['error']}")
    _print_summary(args, rows, kept, latencies, rates)
    return 0


def _print_summary(args, rows, kept: int, latencies: list[float], rates: list[float]) -> None:
    latencies.sort()
    summary = {
        "summary": True,
        "file": str(args.file),
        "positions": len(rows),
        "kept": kept,
        "keeps_outcome_rate": round(kept / len(rows), 4) if rows else 0.0,
        "agents": args.agents or "all",
        "median_latency_ms": round(latencies[len(latencies) // 2], 2) if latencies else 0.0,
        "mean_simulations_per_second": round(sum(rates) / len(rates), 1) if rates else 0.0,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{Path(args.file).name}: {kept}/{len(rows)} moves keep the outcome "
              f"({summary['keeps_outcome_rate']:.1%}); median latency "
              f"{summary['median_latency_ms']:.0f} ms; MCTS "
              f"{summary['mean_simulations_per_second']:.0f} simulations/s")
