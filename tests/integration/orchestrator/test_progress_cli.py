"""`mcts-mesh solve ... --progress` and `mcts-mesh eval`'s progress against the real orchestrator on
port 0 (fake neural service, `conftest.reasoning_mesh`): the events of StreamSolveProblem reach
stderr as they come, stdout keeps only the answer, and the eval bar has a total and an ETA."""

from __future__ import annotations

import asyncio
import io
import json

import numpy as np
from rich.console import Console

from libs.puzzles.sudoku import BoxShape, format_grid, generate
from mcts_mesh import cli
from mcts_mesh.cli.progress import eval_progress


async def test_solve_progress_shows_each_step_and_prints_the_same_answer(reasoning_mesh, capsys):
    mesh = await reasoning_mesh()
    puzzle, solution = (format_grid(grid) for grid in
                        generate(BoxShape(2, 3), 16, np.random.default_rng(6)))
    argv = ["--target", mesh.target, "solve", "sudoku", puzzle, "--agents", "trm,solver",
            "--json"]
    capsys.readouterr()
    assert await asyncio.to_thread(cli.main, [*argv, "--progress"]) == 0
    watched = capsys.readouterr()
    assert await asyncio.to_thread(cli.main, argv) == 0
    plain = capsys.readouterr()
    record, unwatched = json.loads(watched.out), json.loads(plain.out)
    assert record["solution"] == unwatched["solution"] == solution
    assert record["answered_by"] == "solver"
    assert plain.err == ""
    lines = watched.err.splitlines()
    assert "iteration 1: asking trm" in lines[0]
    assert any("iteration 1: trm proposes" in line for line in lines)
    assert any("iteration 1: checker abstained" in line for line in lines)
    assert any("iteration 2: asking solver" in line for line in lines)
    assert any("tally" in line and "verified" in line for line in lines)
    assert "answered after 2 iteration(s)" in lines[-1]


async def test_solve_progress_reports_a_bad_request_like_solve(reasoning_mesh, capsys):
    mesh = await reasoning_mesh()
    code = await asyncio.to_thread(cli.main, ["--target", mesh.target, "solve", "connect4", "48",
                                              "--progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "INVALID_ARGUMENT" in err and "field connect_four.moves" in err


def test_eval_bar_has_a_total_and_an_eta_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with eval_progress(8, "positions.txt", every=4, console=console) as update:
        for done in range(1, 9):
            update(done, f"kept {done}")
    text = out.getvalue()
    assert "positions.txt" in text and "8/8" in text and "ETA" in text and "kept 8" in text


def test_eval_progress_off_a_terminal_is_a_line_every_n_items():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    with eval_progress(10, "f", every=4, console=console) as update:
        for done in range(1, 11):
            update(done, f"{done} valid")
    assert out.getvalue().splitlines() == ["4/10: 4 valid", "8/10: 8 valid", "10/10: 10 valid"]
    quiet = io.StringIO()
    with eval_progress(10, "f", every=4, lines=False,
                       console=Console(file=quiet, force_terminal=False)) as update:
        update(4, "x")
    assert quiet.getvalue() == ""


def test_solve_progress_on_a_terminal_draws_a_live_table():
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from mcts_mesh.cli.progress import StreamingSolveStub

    answer = pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=3), iterations=1)
    events = [
        pb.StreamSolveProblemResponse(iteration=1, iteration_started=pb.IterationStarted(
            agents=[pb.AGENT_MCTS, pb.AGENT_NEURAL], simulations=2000, reason="first round")),
        pb.StreamSolveProblemResponse(iteration=1, agent_started=pb.AgentStarted(
            agent=pb.AGENT_MCTS)),
        pb.StreamSolveProblemResponse(iteration=1, agent_finished=pb.AgentFinished(
            agent=pb.AGENT_MCTS, latency_ms=41, vote=pb.AgentVote(
                agent=pb.AGENT_MCTS, proposal="3", confidence=0.8, rationale="visits 812/2000"))),
        pb.StreamSolveProblemResponse(iteration=1, agent_finished=pb.AgentFinished(
            agent=pb.AGENT_NEURAL, latency_ms=5, error_code="UNAVAILABLE",
            error_message="neural: down")),
        pb.StreamSolveProblemResponse(iteration=1, elapsed_ms=50, response=answer),
    ]

    class Stub:
        def StreamSolveProblem(self, request, timeout):  # noqa: N802
            assert request.connect_four.moves == "44" and timeout == 9
            return iter(events)

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140)
    request = pb.SolveProblemRequest()
    request.connect_four.moves = "44"
    response = StreamingSolveStub(Stub(), console).SolveProblem(request, timeout=9)
    assert response == answer
    text = out.getvalue()
    for expected in ("mcts", "proposed", "visits 812/2000", "neural", "failed",
                     "UNAVAILABLE: neural: down", "answered after 1 iteration(s)"):
        assert expected in text
