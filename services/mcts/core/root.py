"""The root's two random policies, one implementation for the rollout engine
(`services.mcts.rollout.engine`, `services.mcts.rollout.connect4`) and the batched search
(`services.mcts.batched.search`): AlphaZero's Dirichlet noise on the root priors and the
temperature draw of the move played (Silver et al. 2017, "Mastering the game of Go without human
knowledge", Methods)."""

from __future__ import annotations

import numpy as np


def add_dirichlet_noise(prior: np.ndarray, alpha: float, epsilon: float,
                        rng: np.random.Generator) -> None:
    """Mixes Dirichlet noise into the root's children's priors, in place:
    `prior = (1 - epsilon) * prior + epsilon * Dirichlet(alpha, ..., alpha)`.

    Args:
        prior: float [C], the priors of the root's C children (a view into the tree's array).
        alpha: the Dirichlet concentration, > 0 (AlphaZero: 0.3 for chess, 0.03 for Go).
        epsilon: the noise's weight, 0..1 (AlphaZero: 0.25).
        rng: the generator drawing the noise (one draw of C values).
    """
    noise = rng.dirichlet(np.full(len(prior), alpha))
    prior[:] = (1 - epsilon) * prior + epsilon * noise


def sample_by_temperature(visits: np.ndarray, temperature: float, seed: int) -> int:
    """The action played at temperature T > 0: index a of `visits` (int64 [A], root visits per
    action, some > 0) drawn with probability proportional to `visits[a] ** (1 / T)`, from
    numpy's PCG64 seeded by `[seed, 1]` (a stream apart from the noise's). Visits are divided
    by their maximum first, so a small T does not overflow."""
    weights = (visits / visits.max()) ** (1.0 / temperature)
    draw = np.random.default_rng([seed, 1])
    return int(draw.choice(len(visits), p=weights / weights.sum()))
