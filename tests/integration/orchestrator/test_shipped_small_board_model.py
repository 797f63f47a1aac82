"""The 5x4 network shipped in `models/connect4-az-5x4/` (learned from random weights by the
AlphaZero loop) through the real neural service and orchestrator (port 0): the neural service
lists it with its board, and `mcts-mesh eval connect4 --agents neural` on a file of 5x4 positions
(labelled by the exact solver on the client side) returns on every position the move the network
itself picks, so the served agent keeps the game-theoretic outcome exactly as often as the network
evaluated here in-process."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import grpc
import numpy as np
import torch
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.geometry import Board
from libs.connect4.outcome import keeps_outcome
from libs.connect4.solver import solve
from libs.server import start_server
from services.neural.checkpoint import load_checkpoint
from services.neural.main import build_servicers as neural_servicers
from services.neural.models.connect4_pv import predict
from services.neural.settings import NeuralSettings

MODELS = Path(__file__).resolve().parents[3] / "models"
NAME = "connect4-az-5x4"
SMALL = Board(5, 4)
POSITIONS = 60


def positions(count: int, seed: int = 5) -> list[str]:
    """`count` distinct unfinished 5x4 positions from seeded random games (0-13 moves)."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < count:
        position = Position.from_moves("", SMALL)
        for _ in range(rng.randrange(14)):
            position = position.play(rng.choice(position.legal_columns()))
            if position.is_finished:
                break
        if not position.is_finished:
            found[position.moves] = None
    return list(found)


def network_moves(model, moves: list[str]) -> list[int]:
    """The network's move (1..5) in each position: the legal column of highest policy, ties to
    the centre, as the orchestrator's neural agent picks it."""
    parsed = [Position.from_moves(m, SMALL) for m in moves]
    torch.set_num_threads(1)
    policy, _ = predict(model, np.stack([encode(p) for p in parsed]),
                        np.stack([legal_mask(p) for p in parsed]))
    return [1 + max(p.legal_columns(), key=lambda c, row=row: (row[c], -abs(2 * c + 1 - 5)))
            for p, row in zip(parsed, policy, strict=True)]


def test_the_small_board_network_is_shipped_with_its_board():
    checkpoint = load_checkpoint(MODELS / NAME)
    assert (checkpoint.config["columns"], checkpoint.config["rows"]) == (5, 4)


async def test_served_network_plays_its_own_moves_and_keeps_what_it_keeps(tmp_path, served_eval):
    checkpoint = load_checkpoint(MODELS / NAME)
    moves = positions(POSITIONS)
    expected = network_moves(checkpoint.model, moves)
    scores = [solve(Position.from_moves(m, SMALL), weak=True).score for m in moves]
    kept_here = sum(keeps_outcome(m, col, s, board=SMALL)
                    for m, col, s in zip(moves, expected, scores, strict=True))

    models = tmp_path / "models"
    shutil.copytree(MODELS / NAME, models / NAME)
    file = tmp_path / "5x4.jsonl"
    file.write_text("".join(json.dumps({"moves": m, "board": {"columns": 5, "rows": 4}}) + "\n"
                            for m in moves))
    settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    servicers, ready = await neural_servicers(settings)
    neural = await start_server("neural", settings, servicers, ready)
    try:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{neural.port}")
        listed = await neural_service_pb2_grpc.NeuralServiceStub(channel).ListModels(
            neural_service_pb2.ListModelsRequest(), timeout=30)
        await channel.close()
        assert [(m.name, m.board.columns, m.board.rows) for m in listed.models] == [(NAME, 5, 4)]
        *records, summary = await served_eval(neural.port, "paper", [
            "connect4", str(file), "--agents", "neural"])
    finally:
        await neural.stop(0)
    assert [r["move"] for r in records] == expected
    assert all(NAME in r["votes"][0]["rationale"] for r in records)
    assert summary["kept"] == kept_here
