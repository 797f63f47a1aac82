"""The AlphaZero loop's parts: vectorised boards, concurrent games, replay shards and their bad
input, checkpoints of another architecture, settings and device selection."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.geometry import STANDARD, Board
from services.neural.checkpoint import CheckpointError, save_checkpoint
from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig
from services.neural.models.trm import TRM, TRMConfig
from training.az import learner
from training.az.boards import ConnectFourBoards
from training.az.games import GameRecord, SearchOptions, play_games, search_many
from training.az.replay import FORMAT_VERSION, ReplayBuffer, ReplayError, read_shard
from training.az.settings import AZSettings
from training.device import resolve_device


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread, as the trainer runs (two threads on a busy 2-core machine wait on
    each other: this module's training test took 96 s with two, against seconds with one)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


MOVES = ["", "4", "4453", "1234567123", "44444411", "3333332222221111"]
boards = ConnectFourBoards(STANDARD)


def uniform(planes, legal):
    policy = legal / legal.sum(axis=1, keepdims=True)
    return policy, np.zeros(len(planes))


@pytest.mark.parametrize("moves,size", [(m, STANDARD) for m in MOVES] + [
    ("", Board(5, 4)), ("3", Board(5, 4)), ("1111223", Board(5, 4)), ("1234432", Board(4, 4)),
    ("55555444", Board(6, 5))])
def test_vectorised_boards_match_the_library(moves, size):
    boards = ConnectFourBoards(size)
    position = Position.from_moves(moves, size)
    pos, mask = boards.from_moves(moves)
    assert (pos, mask) == (position.position, position.mask)
    assert (boards.encode(np.array([pos]), np.array([mask]))[0] == encode(position)).all()
    assert (boards.legal(np.array([mask]))[0] == legal_mask(position)).all()
    for column in position.legal_columns():
        after = position.play(column)
        new_pos, new_mask, won = boards.play(np.array([pos]), np.array([mask]),
                                             np.array([column]))
        assert (int(new_pos[0]), int(new_mask[0]), bool(won[0])) == (after.position, after.mask,
                                                                     after.won)


def test_search_many_finds_the_immediate_win_and_the_forced_block():
    # "112233": the first player wins with column 4; "11223": the second player must block it.
    roots = [boards.from_moves(m) for m in ("112233", "11223")]
    results, counters = search_many(
        np.array([r[0] for r in roots]), np.array([r[1] for r in roots]), np.zeros(2, np.int64),
        [uniform], SearchOptions(simulations=300, leaves_per_search=4, dirichlet_alpha=None),
        np.arange(2), np.zeros(2))
    assert results[0].action == 3
    assert results[1].action == 3
    assert counters.calls > 0 and counters.positions > counters.calls  # batched calls


def test_games_end_legally_and_their_records_replay():
    records, counters = play_games([uniform, uniform], [(0, 1), (1, 0), (0, 0)], 2,
                                   SearchOptions(simulations=8, leaves_per_search=2), 4, seed=3)
    assert [r.sides for r in records] == [(0, 1), (1, 0), (0, 0)]
    for record in records:
        position = Position.from_moves(record.moves)  # raises on an illegal move
        assert position.is_finished
        assert record.policies.shape == (len(record.moves), 7)
        np.testing.assert_allclose(record.policies.sum(axis=1), 1.0, atol=1e-5)
        winner = (len(record.moves) - 1) % 2 if position.won else -1
        assert record.winner == winner
    again, _ = play_games([uniform, uniform], [(0, 1), (1, 0), (0, 0)], 2,
                          SearchOptions(simulations=8, leaves_per_search=2), 4, seed=3)
    assert [r.moves for r in again] == [r.moves for r in records]


def test_random_openings_start_games_anywhere_and_only_searched_plies_are_trained_on(tmp_path):
    small = ConnectFourBoards(Board(5, 4))
    records, _ = play_games([uniform], [(0, 0)] * 40, 8,
                            SearchOptions(simulations=8, leaves_per_search=2), 0, seed=5,
                            game=small, opening_plies=8)
    openings = [r.opening for r in records]
    assert max(openings) <= 8 and len(set(openings)) > 3  # drawn from 0..8
    for record in records:
        position = Position.from_moves(record.moves, board=Board(5, 4))  # every move legal
        assert position.is_finished and record.opening < len(record.moves)
        assert record.policies.shape == (len(record.moves) - record.opening, 5)
    path = ReplayBuffer(tmp_path, small).write(records, 1, "test")
    examples, meta = read_shard(path, game=small)
    assert meta["positions"] == sum(len(r.moves) - r.opening for r in records)
    first = records[0]
    after_opening = Position.from_moves(first.moves[:first.opening], board=Board(5, 4))
    np.testing.assert_array_equal(examples.planes[0], encode(after_opening))
    plain, _ = play_games([uniform], [(0, 0)] * 3, 2, SearchOptions(simulations=8,
                          leaves_per_search=2), 0, seed=5, game=small)
    assert all(r.opening == 0 for r in plain)


def _record(moves="4455667", winner=0):
    return GameRecord(moves, np.full((len(moves), 7), 1 / 7, np.float32), winner, (0, 0))


def test_shards_round_trip_with_values_and_mirrors(tmp_path):
    buffer = ReplayBuffer(tmp_path)
    path = buffer.write([_record()], 3, "test", cpu_s=1.5, network=2)
    examples, meta = read_shard(path)
    assert meta["generation"] == 3 and meta["positions"] == 7 and meta["cpu_s"] == 1.5
    assert examples.value.tolist() == [1, -1, 1, -1, 1, -1, 1]
    assert (examples.planes[1] == encode(Position.from_moves("4"))).all()
    data, summary = buffer.load(1, mirror=True)
    assert summary["positions"] == 7 and len(data) == 14
    assert (data.planes[7 + 1] == data.planes[1][..., ::-1]).all()


def test_the_window_rolls_old_generations_off_the_disk(tmp_path):
    buffer = ReplayBuffer(tmp_path)
    for generation in (1, 2, 3):
        buffer.write([_record()], generation, "test")
    assert buffer.roll(2) == 1
    assert [g for g, _ in buffer.shards()] == [2, 3]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "shape"])
def test_a_bad_shard_is_named_left_out_and_the_rest_is_used(tmp_path, damage):
    buffer = ReplayBuffer(tmp_path)
    good = buffer.write([_record()], 1, "a")
    bad = buffer.write([_record()], 1, "b")
    if damage == "truncate":
        bad.write_bytes(bad.read_bytes()[:200])
    elif damage == "garbage":
        bad.write_bytes(b"not a zip at all")
    else:
        with bad.open("wb") as handle:
            np.savez(handle, planes=np.zeros((2, 2, 6, 7), np.uint8), legal=np.zeros((2, 7), bool),
                     policy=np.zeros((3, 7), np.float32), value=np.zeros(2, np.float32),
                     meta=np.array(json.dumps({"format": "mcts-mesh-replay",
                                               "format_version": 1})))
    with pytest.raises(ReplayError, match=bad.name):
        read_shard(bad)
    data, summary = buffer.load(1, mirror=False)
    assert len(data) == 7 and summary["shards"] == 1
    assert bad.name in summary["bad_shards"][0]
    assert not bad.exists() and bad.with_name(bad.name + ".bad").exists() and good.exists()


def test_a_replay_directory_of_a_newer_version_is_refused_by_name(tmp_path):
    (tmp_path / "replay.json").write_text(json.dumps(
        {"format": "mcts-mesh-replay", "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ReplayError, match="replay.json.*newer"):
        ReplayBuffer(tmp_path)


def test_a_replay_directory_of_another_format_is_refused_by_name_and_format(tmp_path):
    (tmp_path / "replay.json").write_text(json.dumps(
        {"format": "someone-elses-replay", "format_version": FORMAT_VERSION}))
    with pytest.raises(ReplayError, match="replay.json: format 'someone-elses-replay', not a "
                                          "mcts-mesh-replay index"):
        ReplayBuffer(tmp_path)


def test_a_checkpoint_of_another_architecture_or_size_is_refused_by_name(tmp_path):
    network = {"channels": 8, "blocks": 1, "value_hidden": 8}
    save_checkpoint(tmp_path / "other", Connect4PV(Connect4PVConfig(16, 1, 8)), "connect4_pv")
    with pytest.raises(CheckpointError, match="other/config.json.*network"):
        learner.load_generation(tmp_path / "other", network, "cpu")
    reasoning = TRM(TRMConfig(vocab_size=8, seq_len=36, hidden_size=16, num_heads=2, layers=1,
                              puzzle_emb_ndim=16, puzzle_emb_len=1))
    save_checkpoint(tmp_path / "trm", reasoning, "trm")
    with pytest.raises(CheckpointError, match="trm/config.json.*architecture 'trm'"):
        learner.load_generation(tmp_path / "trm", network, "cpu")
    model = learner.new_model(network, 0, "cpu")
    path = learner.save_generation(tmp_path, 1, model, {"history": []})
    loaded, _ = learner.load_generation(path, network, "cpu")
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_training_lowers_the_loss_on_a_fixed_set():
    records, _ = play_games([uniform], [(0, 0)] * 4, 4, SearchOptions(simulations=8), 8, seed=1)
    from training.az.replay import game_examples

    data = game_examples(records)
    model = learner.new_model({"channels": 8, "blocks": 1, "value_hidden": 8}, 0, "cpu")
    first = learner.train_steps(model, data, 5, 64, 3e-3, 1e-4, "cpu", np.random.default_rng(0))
    later = learner.train_steps(model, data, 60, 64, 3e-3, 1e-4, "cpu", np.random.default_rng(1))
    assert later["total"] < first["total"]


def test_settings_are_validated_with_the_field_named():
    with pytest.raises(ValidationError, match="arena_games"):
        AZSettings(arena_games=15)
    with pytest.raises(ValidationError, match="simulations"):
        AZSettings(simulations=0)
    with pytest.raises(ValidationError, match="pons_files"):
        AZSettings(pons_files=("Test_X",))
    with pytest.raises(ValidationError, match="learning_rate_steps"):
        AZSettings(learning_rate_steps=((10, 1e-4), (5, 1e-5)))
    with pytest.raises(ValidationError, match="learning_rate_steps"):
        AZSettings(learning_rate_steps=((0, 1e-4),))
    with pytest.raises(ValidationError, match="learning_rate_steps"):
        AZSettings(learning_rate_steps=((3, 0.0),))


def test_the_stepped_learning_rate_changes_at_each_step_generation():
    settings = AZSettings(learning_rate=2e-3, learning_rate_steps=[[24, 5e-4], [32, 2e-4]])
    assert [settings.learning_rate_at(g) for g in (1, 23, 24, 31, 32, 60)] == [
        2e-3, 2e-3, 5e-4, 5e-4, 2e-4, 2e-4]
    assert AZSettings(learning_rate=2e-3).learning_rate_at(100) == 2e-3


def test_device_selection(monkeypatch):
    assert resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="auto, cpu or cuda"):
        resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
