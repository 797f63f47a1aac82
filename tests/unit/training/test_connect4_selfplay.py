"""Self-play and training of the Connect Four policy/value network, at toy sizes: the targets are
consistent with the games, a few steps reduce the loss on their own data, and the trainer writes a
checkpoint the registry loads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.connect4.board import Position
from services.neural.checkpoint import load_checkpoint
from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig
from training.connect4_selfplay import (
    Examples,
    SelfPlayConfig,
    evaluate_losses,
    fit,
    game_examples,
    play_game,
    play_games,
    split_by_game,
    train_connect4_pv,
)

# The first lines of two Pons benchmark files (moves, exact score for the player to move).
PONS_LINES = {
    "Test_L3_R1": ["2252576253462244111563365343671351441 -1",
                   "7422341735647741166133573473242566 1"],
    "Test_L2_R1": ["6614446666373154 -12", "24617524315172127 3"],
}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Training runs on one thread, as the trainer does (two contend on a busy 2-core machine)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_a_game_is_legal_finished_and_reproducible():
    game = play_game(3, simulations=64, seed=11, temperature_moves=4)
    end = Position.from_moves(game.moves)
    assert end.is_finished
    assert game.winner == ((len(game.moves) - 1) % 2 if end.won else -1)
    assert game.policies.shape == (len(game.moves), 7)
    np.testing.assert_allclose(game.policies.sum(axis=1), 1.0, rtol=1e-6)
    again = play_game(3, simulations=64, seed=11, temperature_moves=4)
    assert again.moves == game.moves
    assert play_game(4, simulations=64, seed=11, temperature_moves=4).moves != game.moves


def test_examples_carry_the_outcome_for_the_player_to_move():
    records = play_games(4, simulations=64, seed=5, workers=2, progress=False)
    examples = game_examples(records)
    assert len(examples) == sum(len(r.moves) for r in records)
    start = 0
    for index, record in enumerate(records):
        rows = examples.value[start:start + len(record.moves)]
        assert np.all(examples.game[start:start + len(record.moves)] == index)
        if record.winner < 0:
            assert np.all(rows == 0)
        else:
            # The last mover won: +1 at their positions, -1 at the opponent's, alternating.
            assert rows[-1] == 1.0
            assert np.all(rows[:-1] == -rows[1:])
        start += len(record.moves)
    # A played column is always legal, and the policy puts no mass on illegal columns.
    assert np.all(examples.policy[~examples.legal] == 0)
    mirrored = examples.mirrored()
    np.testing.assert_array_equal(mirrored.planes[:, :, :, 0], examples.planes[:, :, :, 6])
    np.testing.assert_array_equal(mirrored.policy[:, 0], examples.policy[:, 6])
    train, validation = split_by_game(examples, 4, 0.25, seed=0)
    assert len(train) + len(validation) == len(examples)
    assert not set(train.game) & set(validation.game)


def test_a_few_steps_reduce_the_loss_on_their_own_data():
    records = play_games(3, simulations=64, seed=2, workers=2, progress=False)
    examples = game_examples(records)
    examples = Examples.concatenate([examples, examples.mirrored()])
    torch.manual_seed(0)
    model = Connect4PV(Connect4PVConfig(channels=8, blocks=1))
    before = evaluate_losses(model, examples)
    history = fit(model, examples, epochs=20, seed=0, batch_size=64, learning_rate=1e-2,
                  progress=False)
    after = evaluate_losses(model, examples)
    assert after.total < 0.8 * before.total
    assert history[-1] < history[0]


def test_train_connect4_pv_writes_a_loadable_checkpoint_with_its_measurements(tmp_path):
    pons = tmp_path / "pons"
    pons.mkdir()
    for name, lines in PONS_LINES.items():
        (pons / name).write_text("\n".join(lines) + "\n")
    report = train_connect4_pv(SelfPlayConfig(
        tmp_path / "connect4-pv", games=4, simulations=32, epochs=1, seed=0, workers=2,
        network=Connect4PVConfig(channels=8, blocks=1), pons_dir=pons, progress=False))
    checkpoint = load_checkpoint(tmp_path / "connect4-pv")
    assert checkpoint.version == report["version"]
    assert checkpoint.metadata["games"] == 4
    assert checkpoint.metadata["simulations_per_move"] == 32
    assert len(checkpoint.metadata["epoch_train_loss"]) == 1
    for name in PONS_LINES:
        measured = checkpoint.metadata["pons"][name]
        assert measured["positions"] == 2
        assert 0.0 <= measured["argmax_keeps_outcome"] <= 1.0
    assert checkpoint.metadata["validation"]["examples"] > 0


def test_on_a_small_board_the_checkpoint_has_its_board_and_exact_rates(tmp_path):
    report = train_connect4_pv(SelfPlayConfig(
        tmp_path / "pv-4x4", games=4, simulations=32, epochs=1, seed=0, workers=1,
        network=Connect4PVConfig(channels=8, blocks=1), pons_dir=tmp_path / "absent",
        progress=False, board="4x4", exact_max_positions=1_000, exact_sample=200,
        exact_puct_positions=20, exact_simulations=16))
    checkpoint = load_checkpoint(tmp_path / "pv-4x4")
    assert checkpoint.version == report["version"]
    assert (checkpoint.model.config.columns, checkpoint.model.config.rows) == (4, 4)
    assert checkpoint.metadata["pons"] == {}
    exact = checkpoint.metadata["exact"]
    assert (exact["positions"], exact["reachable"], exact["how"]) == (200, 134_289,
                                                                      "uniform sample")
    assert exact["puct_positions"] == 20 and 0.0 <= exact["network"] <= 1.0
    assert checkpoint.metadata["mean_game_length"] <= 16
