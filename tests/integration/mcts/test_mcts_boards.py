"""The mcts service (a real grpc.aio server on port 0) on boards of other sizes: a Search of a 5x4
position plays on that board (UCT, and PUCT with rollouts), PUCT with the neural evaluator asks
the neural service for the 5x4 board's network (FAILED_PRECONDITION naming the board when it has
none), and impossible boards and moves outside the board are INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import grpc
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as pb
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import build_servicers
from services.mcts.settings import MctsSettings
from services.neural.checkpoint import save_checkpoint
from services.neural.main import build_servicers as neural_servicers
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PV, Connect4PVConfig
from services.neural.settings import NeuralSettings

TIMEOUT_S = 60


def search_request(moves: str, columns: int = 5, rows: int = 4, **fields) -> pb.SearchRequest:
    return pb.SearchRequest(
        game=pb.GAME_CONNECT_FOUR, connect_four=common_pb2.ConnectFourPosition(
            moves=moves, board=common_pb2.ConnectFourBoard(columns=columns, rows=rows)),
        **fields)


@pytest.fixture
async def served(tmp_path):
    """The neural service with a tiny 5x4 network only, and the mcts service wired to it."""
    torch.manual_seed(4)
    save_checkpoint(tmp_path / "models" / "connect4-small", Connect4PV(Connect4PVConfig(
        channels=8, blocks=1, value_hidden=16, columns=5, rows=4)).eval(), ARCHITECTURE)
    neural_settings = NeuralSettings(port=0, models_dir=tmp_path / "models", device="cpu",
                                     max_wait_ms=0.0)
    servicers, ready = await neural_servicers(neural_settings)
    neural = await start_server("neural", neural_settings, servicers, ready)
    settings = MctsSettings(port=0, neural_target=f"127.0.0.1:{neural.port}")
    servicers, ready = await build_servicers(settings)
    server = await start_server("mcts", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield mcts_service_pb2_grpc.MctsServiceStub(channel)
    await channel.close()
    await server.stop(0)
    await neural.stop(0)


@pytest.mark.parametrize("fields", [
    {},  # UCT with rollouts
    {"rule": pb.SELECTION_RULE_PUCT, "batch_size": 4},
    {"rule": pb.SELECTION_RULE_PUCT, "evaluator": pb.LEAF_EVALUATOR_NEURAL, "batch_size": 4},
])
async def test_a_5x4_search_plays_on_its_board_and_takes_the_win(served, fields):
    # The first player has three stones in column 5 (moves 1, 3, 5) and plays it again.
    reply = await served.Search(search_request("515151", simulations=400, seed=2, **fields),
                                timeout=TIMEOUT_S)
    assert reply.best_action == 5
    assert [a.action for a in reply.statistics.actions] == [1, 2, 3, 4, 5]
    assert sum(a.visits for a in reply.statistics.actions) > 0


async def test_the_neural_evaluator_on_a_board_without_a_network_is_failed_precondition(served):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.Search(search_request("", 6, 5, simulations=50, rule=pb.SELECTION_RULE_PUCT,
                                           evaluator=pb.LEAF_EVALUATOR_NEURAL),
                            timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "6x5" in caught.value.details()


@pytest.mark.parametrize(("moves", "columns", "rows", "field"), [
    ("", 3, 4, "connect_four.board.columns"),
    ("", 5, 3, "connect_four.board.rows"),
    ("", 9, 5, "connect_four.board.rows"),
    ("7", 5, 4, "connect_four.moves"),
    ("11111", 5, 4, "connect_four.moves"),
    ("1212121", 5, 4, "connect_four.moves"),  # four in a row: the game is over
])
async def test_impossible_boards_and_moves_outside_the_board_name_the_field(served, moves,
                                                                            columns, rows, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.Search(search_request(moves, columns, rows), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == field
