"""StreamSolveProblem through the real orchestrator server on port 0 (a fake neural service,
`conftest.reasoning_mesh`): the events of the consensus loop arrive in order, the last message is
what SolveProblem answers, a bad request fails before any event, and a failing agent is reported
as such."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.puzzles.sudoku import BoxShape, format_grid, generate


def _kinds(events) -> list[str]:
    return [event.WhichOneof("event") for event in events]


async def test_sudoku_stream_reports_each_step_then_the_answer(reasoning_mesh):
    mesh = await reasoning_mesh()
    puzzle, solution = (format_grid(grid) for grid in
                        generate(BoxShape(2, 3), 16, np.random.default_rng(6)))
    request = dict(sudoku=pb.SudokuProblem(puzzle=puzzle), agents=[pb.AGENT_TRM, pb.AGENT_SOLVER])
    events = [event async for event in mesh.stub.StreamSolveProblem(
        pb.StreamSolveProblemRequest(**request), timeout=30)]
    # the fake TRM echoes the puzzle (rejected by the checker); the solver answers next round
    assert _kinds(events) == [
        "iteration_started", "agent_started", "agent_finished",  # TRM
        "agent_started", "agent_finished",  # checker rejects
        "iteration_started", "agent_started", "agent_finished",  # solver
        "agent_started", "agent_finished",  # checker accepts
        "tally", "response"]
    first, second = events[0].iteration_started, events[5].iteration_started
    assert list(first.agents) == [pb.AGENT_TRM] and list(second.agents) == [pb.AGENT_SOLVER]
    assert [event.iteration for event in events[:5]] == [1] * 5
    trm = events[2].agent_finished
    assert trm.agent == pb.AGENT_TRM and trm.vote.proposal == puzzle and trm.latency_ms > 0
    rejected = events[4].agent_finished
    assert rejected.agent == pb.AGENT_CHECKER and rejected.abstain_reason
    accepted = events[9].agent_finished
    assert accepted.vote.proposal == solution
    tally = events[10].tally
    assert tally.answer == solution and tally.verified and tally.agreed
    elapsed = [event.elapsed_ms for event in events]
    assert elapsed == sorted(elapsed)
    final = events[-1].response
    unary = await mesh.stub.SolveProblem(pb.SolveProblemRequest(**request), timeout=30)
    assert final.sudoku == unary.sudoku and final.answered_by == pb.AGENT_SOLVER
    assert [vote.agent for vote in final.votes] == [vote.agent for vote in unary.votes]
    assert events[-1].iteration == final.iterations == 2


async def test_connect_four_stream_with_the_checker(reasoning_mesh):
    mesh = await reasoning_mesh()
    events = [event async for event in mesh.stub.StreamSolveProblem(
        pb.StreamSolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="121212"),
                                     agents=[pb.AGENT_CHECKER]), timeout=30)]
    assert _kinds(events) == ["iteration_started", "agent_started", "agent_finished", "tally",
                              "response"]
    vote = events[2].agent_finished.vote
    assert vote.agent == pb.AGENT_CHECKER and vote.proposal == str(
        events[-1].response.connect_four.column)


async def test_a_bad_request_fails_before_any_event(reasoning_mesh):
    mesh = await reasoning_mesh()
    call = mesh.stub.StreamSolveProblem(
        pb.StreamSolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="48")),
        timeout=30)
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for event in call:
            received.append(event)
    assert received == []
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "connect_four.moves" in caught.value.details()


async def test_a_failing_agent_is_reported_then_the_error_ends_the_stream(reasoning_mesh):
    # mcts points at a closed port: it fails UNAVAILABLE, and it is the only agent
    mesh = await reasoning_mesh(mcts_target="127.0.0.1:1")
    call = mesh.stub.StreamSolveProblem(
        pb.StreamSolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="44"),
                                     agents=[pb.AGENT_MCTS]), timeout=30)
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for event in call:
            received.append(event)
    assert _kinds(received) == ["iteration_started", "agent_started", "agent_finished"]
    failed = received[2].agent_finished
    assert failed.agent == pb.AGENT_MCTS and failed.error_code == "UNAVAILABLE"
    assert not failed.HasField("vote")
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_rest_front_streams_the_real_loop_as_ndjson(reasoning_mesh):
    import json

    import httpx

    from libs.rest import RestSettings, serve_rest
    from services.orchestrator.api.rest import build_rest_app

    mesh = await reasoning_mesh()
    rest = await serve_rest(build_rest_app(mesh.server.in_process, RestSettings(port=0)),
                            "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}") as client:
            async with client.stream("POST", "/v1/problems:streamSolve", json={
                    "connectFour": {"moves": "121212"}, "agents": ["AGENT_CHECKER"]},
                    timeout=30) as reply:
                assert reply.status_code == 200
                assert reply.headers["content-type"] == "application/x-ndjson"
                lines = [json.loads(line) async for line in reply.aiter_lines() if line]
            bad = await client.post("/v1/problems:streamSolve",
                                    json={"connectFour": {"moves": "48"}})
    finally:
        await rest.stop()
    assert all(set(line) == {"result"} for line in lines)
    events = [line["result"] for line in lines]
    assert [event["agentFinished"]["vote"]["proposal"] for event in events
            if "agentFinished" in event] == ["1"]
    assert events[-1]["response"]["connectFour"]["column"] == 1
    assert bad.status_code == 400 and bad.json()["code"] == 3
