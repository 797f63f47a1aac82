"""The root's noise and temperature draw (`services.mcts.core.root`), shared by the rollout engine
and the batched search: both searches give the same priors and moves for the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from services.mcts.core.root import add_dirichlet_noise, sample_by_temperature


def test_noise_keeps_a_distribution_and_follows_the_seed():
    prior = np.full(7, 1 / 7, dtype=np.float32)
    first, second = prior.copy(), prior.copy()
    add_dirichlet_noise(first, 0.3, 0.25, np.random.default_rng(4))
    add_dirichlet_noise(second, 0.3, 0.25, np.random.default_rng(4))
    assert np.array_equal(first, second) and not np.allclose(first, prior)
    assert first.sum() == pytest.approx(1.0, abs=1e-6) and (first >= 0.75 / 7 - 1e-7).all()
    untouched = prior.copy()
    add_dirichlet_noise(untouched, 0.3, 0.0, np.random.default_rng(4))
    assert np.allclose(untouched, prior)


def test_temperature_draws_from_the_visits():
    visits = np.array([0, 10, 300, 5, 0], dtype=np.int64)
    assert {sample_by_temperature(visits, 1e-3, seed) for seed in range(20)} == {2}
    hot = [sample_by_temperature(visits, 100.0, seed) for seed in range(200)]
    assert set(hot) == {1, 2, 3}  # never an unvisited action
    assert sample_by_temperature(visits, 1.0, 9) == sample_by_temperature(visits, 1.0, 9)
