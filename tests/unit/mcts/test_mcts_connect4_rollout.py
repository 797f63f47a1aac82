"""Connect Four's uniform rollout (`services.mcts.games.connect4.uniform_rollout`): the same moves,
results and random draws as the reference `_rollout` without decisive moves, a uniform choice
among the open columns at every ply, and games that end exactly where `libs.connect4` says."""

from __future__ import annotations

import numpy as np
from numba import njit

from libs.connect4.board import CELLS, WIDTH, Position
from services.mcts.games.connect4 import _rollout, from_position, uniform_rollout
from services.mcts.native.xorshift import rng_state

MAX_PLIES = CELLS + 1


@njit(cache=True)
def _reference(state, rng, moves, ply, record):
    return _rollout(state, rng, moves, ply, record, False)


@njit(cache=True)
def _fast(state, rng, moves, ply, record):
    return uniform_rollout(state, rng, moves, ply, record)


@njit(cache=True)
def _many(states, seed_rng, record, fast, moves, results, plies):
    """One rollout from each row of `states` (int64 [R, 3]) with one shared generator."""
    for i in range(states.shape[0]):
        state = states[i].copy()
        if fast:
            result, ply = _fast(state, seed_rng, moves[i], 0, record)
        else:
            result, ply = _reference(state, seed_rng, moves[i], 0, record)
        results[i] = result
        plies[i] = ply


def _random_positions(count: int, seed: int) -> list[Position]:
    """Games that go on after 0..40 random moves."""
    draw = np.random.default_rng(seed)
    positions = []
    while len(positions) < count:
        position = Position.from_moves("")
        for _ in range(int(draw.integers(0, 41))):
            legal = position.legal_columns()
            if not legal:
                break
            position = position.play(int(draw.choice(legal)))
        if not position.is_finished:
            positions.append(position)
    return positions


def _states(positions: list[Position]) -> np.ndarray:
    """int64 [len(positions), 3]: the search core's states of `positions`."""
    return np.array([from_position(position) for position in positions])


def _run(states: np.ndarray, seed: int, record: bool, fast: bool):
    rng = rng_state(seed)
    moves = np.full((len(states), MAX_PLIES), -1, dtype=np.int64)
    results = np.zeros(len(states))
    plies = np.zeros(len(states), dtype=np.int64)
    _many(states, rng, record, fast, moves, results, plies)
    return moves, results, plies, int(rng[0])


def test_same_moves_results_and_draws_as_the_reference() -> None:
    states = _states(_random_positions(400, seed=3))
    for record in (True, False):
        fast = _run(states, 7, record, fast=True)
        reference = _run(states, 7, record, fast=False)
        for mine, theirs in zip(fast, reference, strict=True):
            assert np.array_equal(mine, theirs)


def test_games_end_where_libs_connect4_says() -> None:
    positions = _random_positions(300, seed=4)
    moves, results, plies, _ = _run(_states(positions), 11, True, fast=True)
    for position, row, result, ply in zip(positions, moves, results, plies, strict=True):
        assert ply >= 1
        for col in row[:ply]:
            assert not position.is_finished
            assert position.can_play(int(col))
            position = position.play(int(col))
        assert position.is_finished
        # +1: the last mover made four in a row; 0: the board filled without one.
        assert result == (1.0 if position.won else 0.0)
        assert result == 1.0 or position.num_moves == CELLS
        assert np.all(row[ply:] == -1)


def _first_moves(state: np.ndarray, count: int, seed: int) -> np.ndarray:
    states = np.repeat(state[None, :], count, axis=0)
    moves, _, _, _ = _run(states, seed, True, fast=True)
    return np.bincount(moves[:, 0], minlength=WIDTH)


def _chi_square(observed: np.ndarray) -> float:
    expected = observed.sum() / len(observed)
    return float(((observed - expected) ** 2 / expected).sum())


def test_first_move_is_uniform_over_the_columns() -> None:
    counts = _first_moves(from_position(Position.from_moves("")), 70_000, seed=5)
    # 6 degrees of freedom: P(chi2 > 35) is about 4e-6.
    assert _chi_square(counts) < 35.0
    assert counts.min() > 0


def test_full_columns_are_never_drawn_and_the_others_uniformly() -> None:
    # Columns 1 and 4 (0-based 0 and 3) full, nobody has won.
    position = Position.from_moves("111111444444")
    assert not position.is_finished and not position.can_play(0) and not position.can_play(3)
    counts = _first_moves(from_position(position), 50_000, seed=6)
    assert counts[0] == 0 and counts[3] == 0
    # 4 degrees of freedom over the 5 open columns: P(chi2 > 30) is about 5e-6.
    assert _chi_square(counts[[1, 2, 4, 5, 6]]) < 30.0
