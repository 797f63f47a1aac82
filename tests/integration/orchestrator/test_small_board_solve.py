"""Connect Four on a board of another size through the mesh: the real orchestrator, neural and
mcts services (port 0) answer SolveProblem for a 5x4 position with the learned agent's vote (the
5x4 network through AGENT_NEURAL, and the search) beside the checker's exact vote on 5x4, over
gRPC and REST; impossible boards and moves outside the board are INVALID_ARGUMENT (HTTP 400)
naming the field; a board with no network loaded fails the neural agent alone with
FAILED_PRECONDITION naming the board; and a position that states no board is the 7x6 one, answered
by the 7x6 network as before."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.connect4.board import Position
from libs.connect4.geometry import Board
from libs.connect4.solver import best_moves
from libs.rest import RestSettings, serve_rest
from libs.server import start_server
from mcts_mesh import cli
from services.mcts.main import build_servicers as mcts_servicers
from services.mcts.settings import MctsSettings
from services.neural.checkpoint import save_checkpoint
from services.neural.main import build_servicers as neural_servicers
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PV, Connect4PVConfig
from services.neural.settings import NeuralSettings
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.main import Wiring, build_servicers
from services.orchestrator.settings import OrchestratorSettings

TIMEOUT_S = 60
SMALL = Board(5, 4)
SMALL_MODEL = "connect4-small-5x4"
SMALL_BOARD = {"columns": 5, "rows": 4}


def tiny(board: Board) -> Connect4PV:
    torch.manual_seed(2)
    return Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16,
                                       columns=board.columns, rows=board.rows)).eval()


@pytest.fixture
async def mesh(tmp_path):
    """Real neural (a tiny 7x6 network and a tiny 5x4 one), mcts and orchestrator servers; yields
    (orchestrator stub, orchestrator server)."""
    models = tmp_path / "models"
    save_checkpoint(models / "connect4-pv", tiny(Board(7, 6)), ARCHITECTURE)
    save_checkpoint(models / SMALL_MODEL, tiny(SMALL), ARCHITECTURE, {"note": "test"})
    neural_settings = NeuralSettings(port=0, models_dir=models, device="cpu", max_wait_ms=0.0)
    servicers, ready = await neural_servicers(neural_settings)
    neural = await start_server("neural", neural_settings, servicers, ready)
    mcts_settings = MctsSettings(port=0, neural_target=f"127.0.0.1:{neural.port}")
    servicers, ready = await mcts_servicers(mcts_settings)
    mcts = await start_server("mcts", mcts_settings, servicers, ready)
    settings = OrchestratorSettings(port=0, rest_port=-1, default_simulations=200,
                                    neural_target=f"127.0.0.1:{neural.port}",
                                    mcts_target=f"127.0.0.1:{mcts.port}")
    wiring = Wiring(settings)
    servicers, ready = await build_servicers(settings, wiring)
    orchestrator = await start_server("orchestrator", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}")
    yield orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel), orchestrator
    await channel.close()
    await orchestrator.stop(0)
    await wiring.aclose()
    await mcts.stop(0)
    await neural.stop(0)


def solve_request(moves: str, board: dict | None = None, agents=(), **fields
                  ) -> pb.SolveProblemRequest:
    position = common_pb2.ConnectFourPosition(moves=moves)
    if board is not None:
        position.board.CopyFrom(common_pb2.ConnectFourBoard(**board))
    return pb.SolveProblemRequest(connect_four=position, agents=list(agents), **fields)


def votes_of(response) -> dict[str, pb.AgentVote]:
    return {pb.Agent.Name(vote.agent): vote for vote in response.votes}


async def test_a_5x4_position_gets_the_learned_agents_vote_beside_the_checkers(mesh):
    stub, _ = mesh
    moves = "3"
    response = await stub.SolveProblem(solve_request(moves, SMALL_BOARD, seed=1),
                                       timeout=TIMEOUT_S)
    votes = votes_of(response)
    assert {"AGENT_CHECKER", "AGENT_NEURAL", "AGENT_MCTS"} <= set(votes), response
    assert not response.failures
    assert votes["AGENT_CHECKER"].rationale.startswith("exact:")
    assert SMALL_MODEL in votes["AGENT_NEURAL"].rationale
    legal = {str(col + 1) for col in Position.from_moves(moves, SMALL).legal_columns()}
    assert {vote.proposal for vote in votes.values()} <= legal == {"1", "2", "3", "4", "5"}
    # The checker's vote is exact on 5x4: the answer keeps the solver's best score.
    scores = best_moves(Position.from_moves(moves, SMALL))
    assert scores.complete
    assert response.connect_four.column in scores.best_columns()
    assert response.connect_four.score == max(s for s in scores.scores if s is not None)
    assert response.connect_four.outcome != pb.OUTCOME_UNSPECIFIED


async def test_no_board_is_7x6_answered_by_the_7x6_network(mesh):
    stub, _ = mesh
    response = await stub.SolveProblem(solve_request("4453", agents=[pb.AGENT_NEURAL]),
                                       timeout=TIMEOUT_S)
    assert "connect4-pv" in votes_of(response)["AGENT_NEURAL"].rationale
    assert 1 <= response.connect_four.column <= 7


async def test_a_board_without_a_network_fails_the_neural_agent_alone(mesh):
    stub, _ = mesh
    response = await stub.SolveProblem(
        solve_request("23", {"columns": 4, "rows": 4},
                      agents=[pb.AGENT_CHECKER, pb.AGENT_NEURAL]), timeout=TIMEOUT_S)
    assert votes_of(response)["AGENT_CHECKER"].rationale.startswith("exact:")
    [failure] = response.failures
    assert failure.agent == pb.AGENT_NEURAL and failure.code == "FAILED_PRECONDITION"
    assert "no policy/value network of the 4x4 board" in failure.message
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SolveProblem(solve_request("23", {"columns": 4, "rows": 4},
                                              agents=[pb.AGENT_NEURAL]), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "4x4" in caught.value.details()


BAD_BOARDS = [
    ("", {"columns": 3, "rows": 4}, "connect_four.board.columns"),
    ("", {"columns": 10, "rows": 4}, "connect_four.board.columns"),
    ("", {"columns": 5, "rows": 0}, "connect_four.board.rows"),
    ("", {"columns": 7, "rows": 7}, "connect_four.board.rows"),
    ("6", SMALL_BOARD, "connect_four.moves"),  # column 6 of a 5-column board
    ("33333", SMALL_BOARD, "connect_four.moves"),  # a fifth stone in a 4-row column
    ("8", None, "connect_four.moves"),  # 7x6 as before
]


@pytest.mark.parametrize(("moves", "board", "field"), BAD_BOARDS)
async def test_impossible_boards_and_moves_name_the_field_over_grpc(mesh, moves, board, field):
    stub, _ = mesh
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SolveProblem(solve_request(moves, board), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == field


async def test_rest_solves_a_5x4_position_and_maps_bad_boards_to_400(mesh):
    _, orchestrator = mesh
    rest = await serve_rest(build_rest_app(orchestrator.in_process,
                                           RestSettings(port=0, default_deadline_s=30.0)),
                            "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}",
                                     timeout=TIMEOUT_S) as client:
            reply = await client.post("/v1/problems:solve", json={
                "connectFour": {"moves": "3", "board": SMALL_BOARD},
                "agents": ["AGENT_CHECKER", "AGENT_NEURAL"]})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert 1 <= body["connectFour"]["column"] <= 5
            rationale = {vote["agent"]: vote["rationale"] for vote in body["votes"]}
            assert SMALL_MODEL in rationale["AGENT_NEURAL"]
            assert rationale["AGENT_CHECKER"].startswith("exact:")
            reply = await client.get("/v1/problems:solve", params={
                "connectFour.moves": "3", "connectFour.board.columns": 5,
                "connectFour.board.rows": 4, "agents": "AGENT_CHECKER"})
            assert reply.status_code == 200, reply.text
            # 5x4 after a stone in the middle column: an exact draw (the 7x6 checker does not
            # solve a position this early).
            assert reply.json()["votes"][0]["rationale"].startswith("exact: draw")
            for moves, board, field in BAD_BOARDS:
                position = {"moves": moves} if board is None else {"moves": moves,
                                                                   "board": board}
                reply = await client.post("/v1/problems:solve", json={"connectFour": position})
                assert reply.status_code == 400, (moves, board, reply.text)
                violation = reply.json()["details"][0]["fieldViolations"][0]
                assert violation["field"] == field
    finally:
        await rest.stop()


async def test_eval_connect4_judges_a_file_of_5x4_positions(mesh, tmp_path, capsys):
    """`mcts-mesh eval connect4` on JSON Lines with their board (one score left to the solver)
    and on Pons lines with a board field; `solve connect4 --board 5x4` answers on that board."""
    _, orchestrator = mesh
    target = f"127.0.0.1:{orchestrator.port}"
    positions = ["", "3", "33", "2213"]
    scores = {m: best_moves(Position.from_moves(m, SMALL)) for m in positions}
    score = {m: max(s for s in scores[m].scores if s is not None) for m in positions}
    jsonl = tmp_path / "small.jsonl"
    jsonl.write_text("".join(json.dumps({"moves": m, "board": SMALL_BOARD, "score": score[m]})
                             + "\n" for m in positions[:3])
                     + json.dumps({"moves": "2213", "board": SMALL_BOARD}) + "\n")
    pons = tmp_path / "small.txt"
    pons.write_text("".join(f"{m} {score[m]} 5x4\n" for m in positions[1:]))
    for path in (jsonl, pons):
        capsys.readouterr()
        code = await asyncio.to_thread(cli.main, ["--target", target, "eval", "connect4",
                                                  str(path), "--agents", "checker,neural",
                                                  "--json"])
        assert code == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        *records, summary = lines
        assert [r["moves"] for r in records] == (positions if path == jsonl else positions[1:])
        assert all(r["board"] == "5x4" and 1 <= r["move"] <= 5 for r in records)
        assert all(r["keeps_outcome"] for r in records)  # the checker's exact vote wins
        assert summary["keeps_outcome_rate"] == 1.0
        assert {vote["agent"] for vote in records[0]["votes"]} == {"checker", "neural"}
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["--target", target, "solve", "connect4", "3",
                                              "--board", "5x4", "--agents", "checker", "--json"])
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["board"] == "5x4" and record["move"] in scores["3"].best_columns()
