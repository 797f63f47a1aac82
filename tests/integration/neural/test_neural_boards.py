"""The neural service (a real grpc.aio server on port 0) on boards of other sizes: a 5x4 position
is evaluated by the loaded 5x4 network, a board with no network loaded is FAILED_PRECONDITION
naming it, impossible boards and moves outside the board are INVALID_ARGUMENT naming the field,
and a request that states no board is answered by the 7x6 default model as before."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.geometry import Board
from libs.server import start_server
from services.neural.checkpoint import load_checkpoint, save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.main import build_servicers
from services.neural.models.connect4_pv import (
    ARCHITECTURE,
    Connect4PV,
    Connect4PVConfig,
    predict,
)
from services.neural.settings import NeuralSettings

TIMEOUT_S = 10
SMALL = Board(5, 4)


def tiny(board: Board) -> Connect4PV:
    torch.manual_seed(11)
    return Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16,
                                       columns=board.columns, rows=board.rows)).eval()


@pytest.fixture
async def neural(tmp_path):
    models = tmp_path / "models"
    save_checkpoint(models / "connect4-pv", tiny(Board(7, 6)), ARCHITECTURE)
    save_checkpoint(models / "connect4-small", tiny(SMALL), ARCHITECTURE, {"note": "5x4"})
    settings = NeuralSettings(port=0, models_dir=models, device="cpu", max_wait_ms=0.0)
    evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                  settings.max_wait_ms)
    servicers, ready = await build_servicers(settings, evaluator)
    server = await start_server("neural", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield neural_service_pb2_grpc.NeuralServiceStub(channel), models
    await channel.close()
    await server.stop(0)
    await evaluator.close()


def position(moves: str, columns: int | None = None, rows: int | None = None):
    message = common_pb2.ConnectFourPosition(moves=moves)
    if columns is not None:
        message.board.columns = columns
        message.board.rows = rows or 0
    return message


def field_of(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    return bad.field_violations[0].field


async def test_a_small_board_position_is_evaluated_by_the_network_of_its_board(neural):
    stub, models = neural
    response = await stub.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
        positions=[position("", 5, 4), position("3333", 5, 4)]), timeout=TIMEOUT_S)
    assert response.model.name == "connect4-small"
    assert (response.model.board.columns, response.model.board.rows) == (5, 4)
    checkpoint = load_checkpoint(models / "connect4-small")
    positions = [Position.from_moves(m, SMALL) for m in ("", "3333")]
    policy, value = predict(checkpoint.model, np.stack([encode(p) for p in positions]),
                            np.stack([legal_mask(p) for p in positions]))
    for i, evaluation in enumerate(response.evaluations):
        assert len(evaluation.policy) == 5
        np.testing.assert_allclose(evaluation.policy, policy[i], rtol=1e-5, atol=1e-6)
        assert evaluation.value == pytest.approx(float(value[i]), abs=1e-6)
    assert response.evaluations[1].policy[2] == 0.0  # column 3 holds four stones: full

    standard = await stub.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
        positions=[position("44")]), timeout=TIMEOUT_S)
    assert standard.model.name == "connect4-pv"
    assert len(standard.evaluations[0].policy) == 7
    assert (standard.model.board.columns, standard.model.board.rows) == (7, 6)


async def test_models_list_their_board(neural):
    stub, _ = neural
    listed = await stub.ListModels(neural_service_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
    assert {m.name: (m.board.columns, m.board.rows) for m in listed.models} == {
        "connect4-pv": (7, 6), "connect4-small": (5, 4)}


async def test_a_board_without_a_network_is_failed_precondition_naming_it(neural):
    stub, _ = neural
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
            positions=[position("", 6, 5)]), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no policy/value network of the 6x5 board" in caught.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
            model="connect4-pv", positions=[position("", 5, 4)]), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "plays the 7x6 board; the positions are on 5x4" in caught.value.details()


@pytest.mark.parametrize(("positions", "field"), [
    ([position("", 3, 4)], "positions[0].board.columns"),
    ([position("", 5, 2)], "positions[0].board.rows"),
    ([position("", 7, 7)], "positions[0].board.rows"),
    ([position("", 5, 4), position("6", 5, 4)], "positions[1].moves"),
    ([position("", 5, 4), position("1")], "positions[1].board"),
    ([position("1"), position("", 5, 4)], "positions[1].board"),
])
async def test_impossible_boards_and_moves_outside_the_board_name_the_field(neural, positions,
                                                                            field):
    stub, _ = neural
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
            positions=positions), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(caught.value) == field
