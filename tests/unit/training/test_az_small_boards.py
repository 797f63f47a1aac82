"""The AlphaZero loop's games off the standard board: tic-tac-toe's vectorised rules against rules
written here, the left-right mirror of replay rows against the mirrored game, the exact
evaluation's reachable positions and labels against an exhaustive minimax written here, the rates
of a perfect and a uniform policy, and settings that give the network its board."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pydantic import ValidationError

from libs.connect4.geometry import Board
from services.neural.checkpoint import CheckpointError
from training.az import learner
from training.az.boards import ConnectFourBoards, TicTacToeBoards
from training.az.exact import exact_rates, judged_set, reachable_positions
from training.az.games import GameRecord
from training.az.replay import game_examples
from training.az.settings import AZSettings

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def _won(grid: str, who: str) -> bool:
    return any(all(grid[i] == who for i in line) for line in LINES)


def _children(grid: str) -> list[tuple[int, str, bool]]:
    """(cell, grid after it, the mover made a line) of an unfinished tic-tac-toe grid."""
    who = "xo"[sum(c != "." for c in grid) % 2]
    out = []
    for cell in range(9):
        if grid[cell] == ".":
            after = grid[:cell] + who + grid[cell + 1:]
            out.append((cell, after, _won(after, who)))
    return out


def _value(grid: str, memo: dict[str, int]) -> int:
    """Tic-tac-toe's value (1, 0, -1) for the player to move in an unfinished grid."""
    if grid not in memo:
        results = [1 if won else 0 if "." not in after else -_value(after, memo)
                   for _, after, won in _children(grid)]
        memo[grid] = max(results)
    return memo[grid]


def _grid(game: TicTacToeBoards, position: int, mask: int) -> str:
    mover = "xo"[bin(mask).count("1") % 2]
    other = "o" if mover == "x" else "x"
    return "".join(mover if position >> c & 1 else other if mask >> c & 1 else "."
                   for c in range(9))


def test_tictactoe_rules_follow_the_grid() -> None:
    game = TicTacToeBoards()
    rng = random.Random(3)
    for _ in range(200):
        position, mask, grid = np.zeros(1, np.int64), np.zeros(1, np.int64), "." * 9
        while True:
            legal = game.legal(mask)[0]
            assert legal.tolist() == [c == "." for c in grid]
            cell = rng.choice([c for c in range(9) if legal[c]])
            position, mask, won = game.play(position, mask, np.array([cell]))
            mover = "xo"[grid.count("x") - grid.count("o")]
            grid = grid[:cell] + mover + grid[cell + 1:]
            assert bool(won[0]) == _won(grid, mover)
            assert _grid(game, int(position[0]), int(mask[0])) == grid
            if won[0] or "." not in grid:
                break


def test_every_reachable_tictactoe_position_is_listed_and_labelled_as_the_minimax_says() -> None:
    game = TicTacToeBoards()
    grids, stack = {"." * 9}, ["." * 9]
    while stack:
        for _, after, won in _children(stack.pop()):
            if not won and "." in after and after not in grids:
                grids.add(after)
                stack.append(after)
    position, mask, _ = reachable_positions(game)
    assert {_grid(game, int(p), int(m)) for p, m in zip(position, mask, strict=True)} == grids
    assert len(position) == len(grids) == 4520
    judged = judged_set(game, 10_000, 5_000, seed=0)
    assert judged.how == "every reachable position" and judged.reachable == 4520
    memo: dict[str, int] = {}
    for row in range(len(judged)):
        grid = _grid(game, int(judged.position[row]), int(judged.mask[row]))
        results = {cell: 1 if won else 0 if "." not in after else -_value(after, memo)
                   for cell, after, won in _children(grid)}
        best = max(results.values())
        expected = [cell in results and (results[cell] == best or best < 0) for cell in range(9)]
        assert judged.keep[row].tolist() == expected, grid
    assert _value("." * 9, memo) == 0


def test_a_small_board_is_listed_whole_or_sampled_uniformly() -> None:
    game = ConnectFourBoards(Board(4, 4))
    position, mask, plies = reachable_positions(game)
    assert len(position) == 134_289  # the independent minimax of tests/unit/connect4 visits as many
    assert len(np.unique(game.key(position, mask))) == len(position)
    assert reachable_positions(game, limit=1_000) is None
    sample = judged_set(game, 1_000, 300, seed=4)
    assert (sample.how, len(sample), sample.reachable) == ("uniform sample", 300, 134_289)
    assert sample.keep[~game.legal(sample.mask)].sum() == 0 and sample.keep.any(axis=1).all()


SYMMETRIES = [(game, index) for game in (ConnectFourBoards(Board(5, 4)), TicTacToeBoards())
              for index in range(len(game.symmetries()))]


@pytest.mark.parametrize(("game", "index"), SYMMETRIES,
                         ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_each_symmetric_image_is_the_rows_of_the_transformed_game(game, index) -> None:
    """The image of a game's rows under a symmetry equals the rows of the game played with every
    action mapped by it: planes, legality, policy and value all follow the board."""
    planes_map, actions = game.symmetries()[index]
    rng = np.random.default_rng(5 + index)
    moves, twin_moves, policies = "", "", []
    position, mask = np.zeros(1, np.int64), np.zeros(1, np.int64)
    while True:
        legal = np.flatnonzero(game.legal(mask)[0])
        policy = np.zeros(game.num_actions, np.float32)
        policy[legal] = rng.dirichlet(np.ones(len(legal)))
        policies.append(policy)
        action = int(rng.choice(legal))
        moves += str(action + 1)
        twin_moves += str(int(actions[action]) + 1)
        position, mask, won = game.play(position, mask, np.array([action]))
        if won[0] or not game.legal(mask)[0].any():
            break
    record = GameRecord(moves, np.stack(policies), -1, (0, 0))
    inverse = np.argsort(actions)
    twin = GameRecord(twin_moves, np.stack(policies)[:, inverse], -1, (0, 0))
    image = game_examples([record], game).transformed(planes_map, actions)
    expected = game_examples([twin], game)
    for name in ("planes", "legal", "policy", "value"):
        assert np.array_equal(getattr(image, name), getattr(expected, name)), name


def test_tictactoe_augments_with_the_eight_symmetries_of_the_square() -> None:
    game = TicTacToeBoards()
    record = GameRecord("1", np.full((1, 9), 1 / 9, np.float32), -1, (0, 0))
    rows = game_examples([GameRecord("15", np.eye(9, dtype=np.float32)[[4, 8]], -1, (0, 0))],
                         game).with_symmetries(game)
    assert len(rows) == 16 and len(game_examples([record], game).with_symmetries(game)) == 8
    # after X in the corner (cell 0), O to move; the policy's move (cell 8) stays opposite it
    second = rows.planes[1::2]
    corners = {int(np.flatnonzero(p[1].ravel())[0]) for p in second}
    assert corners == {0, 2, 6, 8}
    for planes, policy in zip(second, rows.policy[1::2], strict=True):
        assert int(np.argmax(policy)) == 8 - int(np.flatnonzero(planes[1].ravel())[0])
    connect4 = ConnectFourBoards(Board(5, 4))
    one = GameRecord("3", np.full((1, 5), 1 / 5, np.float32), -1, (0, 0))
    assert len(game_examples([one], connect4).with_symmetries(connect4)) == 2  # the mirror


def test_a_perfect_policy_scores_one_and_a_uniform_one_less() -> None:
    game = TicTacToeBoards()
    judged = judged_set(game, 10_000, 5_000, seed=0)
    keys = {int(k): row for row, k in enumerate(game.key(judged.position, judged.mask))}

    def perfect(planes, legal):
        mover = (planes[:, 0].reshape(len(planes), 9) * (1 << np.arange(9))).sum(axis=1)
        other = (planes[:, 1].reshape(len(planes), 9) * (1 << np.arange(9))).sum(axis=1)
        rows = [keys[int(game.key(np.array([int(m)]), np.array([int(m) | int(o)]))[0])]
                for m, o in zip(mover, other, strict=True)]
        policy = judged.keep[rows].astype(float)
        return policy / policy.sum(axis=1, keepdims=True), np.zeros(len(planes))

    def uniform(planes, legal):
        return legal / legal.sum(axis=1, keepdims=True), np.zeros(len(planes))

    best = exact_rates(perfect, judged, game, 8, 200, 4, 2.0, seed=1)
    assert (best["network"], best["positions"], best["puct_positions"]) == (1.0, 4520, 200)
    worst = exact_rates(uniform, judged, game, 8, 200, 4, 2.0, seed=1)
    assert worst["network"] < 0.8


def test_settings_give_the_network_its_board_and_refuse_an_impossible_one(tmp_path) -> None:
    assert AZSettings(board="5x4").network | {} == {
        "channels": 48, "blocks": 4, "value_hidden": 64, "columns": 5, "rows": 4, "actions": 0}
    assert AZSettings(game="tictactoe").network["actions"] == 9
    assert AZSettings().network["columns"] == 7 and AZSettings().is_standard
    with pytest.raises(ValidationError, match="board"):
        AZSettings(board="3x6")
    small = AZSettings(board="5x4", channels=8, blocks=1, value_hidden=8).network
    learner.save_generation(tmp_path, 0, learner.new_model(small, 0, "cpu"), {})
    with pytest.raises(CheckpointError, match="network"):
        learner.load_generation(tmp_path / "checkpoints" / "gen-0000",
                                {**small, "columns": 7, "rows": 6}, "cpu")
    model, _ = learner.load_generation(tmp_path / "checkpoints" / "gen-0000", small, "cpu")
    assert model.config.columns == 5 and model.config.rows == 4
