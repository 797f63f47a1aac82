"""Progressive widening on a wide-action bandit and RAVE on a game where move order does not
matter, each against plain UCT at the same seed and budget; PUCT noise and temperature."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from services.mcts.core.config import SearchConfig
from services.mcts.core.game import Game
from services.mcts.core.tree import MAX_VISITS
from services.mcts.native.xorshift import next_random
from services.mcts.rollout.engine import grow, search

ARMS = 60
BEST_ARM = 2
# Win probabilities: arm 2 is best; the arms are introduced in index order (uniform priors).
ARM_WIN = np.array([0.5 if a != BEST_ARM else 0.8 for a in range(ARMS)]) - np.linspace(
    0.0, 0.2, ARMS)


@njit(cache=True, nogil=True)
def _uniform(rng):
    return np.float64(next_random(rng) >> np.uint64(11)) * 2.0 ** -53


@njit(cache=True, nogil=True)
def bandit_legal(state, out):
    if state[0] >= 0:
        return 0
    for a in range(ARMS):
        out[a] = a
    return ARMS


@njit(cache=True, nogil=True)
def bandit_play(state, action):
    state[0] = action
    return True


@njit(cache=True, nogil=True)
def bandit_outcome(state, rng):
    return 1.0 if _uniform(rng) < ARM_WIN[state[0]] else -1.0


@njit(cache=True, nogil=True)
def uniform_priors(state, actions, count, out):
    for i in range(count):
        out[i] = 1.0 / count


BANDIT = Game(name="bandit", num_actions=ARMS, state_size=1, max_plies=1, players=1,
              initial_state=lambda: np.full(1, -1, dtype=np.int64), legal_actions=bandit_legal,
              play=bandit_play, outcome=bandit_outcome, priors=uniform_priors,
              encode=lambda state: state.astype(np.float32))

NUMBERS = 20
PICKS = 4
# Worth of each number, in a shuffled order so that action order tells nothing.
WORTH = np.random.default_rng(7).permutation(NUMBERS).astype(np.float64)
BEST_SUM = np.sort(WORTH)[-PICKS:].sum()
BEST_NUMBERS = np.argsort(WORTH)[-PICKS:]


@njit(cache=True, nogil=True)
def pick_legal(state, out):
    if state[1] == PICKS:
        return 0
    count = 0
    for a in range(NUMBERS):
        if not (state[0] >> a) & 1:
            out[count] = a
            count += 1
    return count


@njit(cache=True, nogil=True)
def pick_play(state, action):
    state[0] |= np.int64(1) << action
    state[1] += 1
    return state[1] == PICKS


@njit(cache=True, nogil=True)
def pick_outcome(state, rng):
    total = 0.0
    for a in range(NUMBERS):
        if (state[0] >> a) & 1:
            total += WORTH[a]
    # Won with probability total / BEST_SUM: the value is a noisy sum, order irrelevant.
    return 1.0 if _uniform(rng) * BEST_SUM < total else -1.0


PICK = Game(name="pick", num_actions=NUMBERS, state_size=2, max_plies=PICKS, players=1,
            initial_state=lambda: np.zeros(2, dtype=np.int64), legal_actions=pick_legal,
            play=pick_play, outcome=pick_outcome, priors=uniform_priors,
            encode=lambda state: state.astype(np.float32))


def best_share(game: Game, good: np.ndarray, simulations: int, seeds: range,
               **options: float) -> float:
    """Mean share of root visits on the `good` actions over the seeds."""
    shares = []
    for seed in seeds:
        result = search(game, game.initial_state(), simulations,
                        SearchConfig(exploration=0.5, seed=seed, **options))
        shares.append(result.visits[good].sum() / simulations)
    return float(np.mean(shares))


@pytest.mark.parametrize(("simulations", "k", "alpha"), [(200, 1.0, 0.5), (400, 1.0, 0.5),
                                                         (300, 2.0, 0.3)])
def test_widening_opens_ceil_k_n_alpha_children(simulations: int, k: float, alpha: float) -> None:
    # UCT tries an unvisited child as soon as it is introduced, so the visited children are those
    # open at the last selection, made with N = simulations - 1 root visits.
    result = search(BANDIT, BANDIT.initial_state(), simulations,
                    SearchConfig(exploration=0.5, widening_k=k, widening_alpha=alpha))
    assert (result.visits > 0).sum() == min(ARMS, int(np.ceil(k * (simulations - 1) ** alpha)))
    assert (result.visits > 0)[: (result.visits > 0).sum()].all()  # introduced in order
    plain = search(BANDIT, BANDIT.initial_state(), simulations, SearchConfig(exploration=0.5))
    assert (plain.visits > 0).sum() == ARMS


def test_widening_finds_the_best_arm_with_a_larger_share_than_plain_uct() -> None:
    widened = best_share(BANDIT, np.array([BEST_ARM]), 400, range(5), widening_k=1.0)
    plain = best_share(BANDIT, np.array([BEST_ARM]), 400, range(5))
    assert widened > 0.6 and widened > plain + 0.15
    result = search(BANDIT, BANDIT.initial_state(), 400, SearchConfig(exploration=0.5,
                                                                      widening_k=1.0))
    assert result.action == BEST_ARM


def test_rave_concentrates_on_the_best_numbers_sooner_than_uct() -> None:
    rave = best_share(PICK, BEST_NUMBERS, 300, range(8), rave_k=1000.0)
    plain = best_share(PICK, BEST_NUMBERS, 300, range(8))
    assert rave > plain + 0.1


def test_amaf_counts_every_simulation_that_played_the_action_later() -> None:
    grown = grow(PICK, PICK.initial_state(), 500, SearchConfig(rave_k=100.0))
    tree = grown.tree
    root_children = tree.children(0)
    amaf = grown.amaf_visits[root_children.start:root_children.stop]
    # Every simulation picks PICKS distinct numbers: each root child's AMAF count is at least its
    # own visits, and the counts sum to PICKS per simulation.
    assert (amaf >= tree.visits[root_children.start:root_children.stop]).all()
    assert amaf.sum() == PICKS * 500
    plain = grow(PICK, PICK.initial_state(), 500, SearchConfig())
    assert plain.amaf_visits.size == plain.amaf_value_sum.size == 0  # nothing recorded


def test_dirichlet_noise_mixes_the_root_priors_and_is_seeded() -> None:
    config = SearchConfig(rule="puct", exploration=1.0, dirichlet_alpha=0.3,
                          dirichlet_epsilon=0.25, seed=4)
    a = search(PICK, PICK.initial_state(), 200, config)
    b = search(PICK, PICK.initial_state(), 200, config)
    assert np.array_equal(a.priors, b.priors) and np.array_equal(a.visits, b.visits)
    assert np.isclose(a.priors.sum(), 1.0)
    assert (a.priors >= 0.75 / NUMBERS - 1e-6).all()  # (1 - eps) * uniform + eps * noise
    assert not np.allclose(a.priors, 1.0 / NUMBERS)
    noiseless = search(PICK, PICK.initial_state(), 200, SearchConfig(rule="puct", seed=4))
    assert np.allclose(noiseless.priors, 1.0 / NUMBERS)


def test_temperature_samples_in_proportion_to_visits() -> None:
    greedy = search(BANDIT, BANDIT.initial_state(), 300, SearchConfig(exploration=0.5))
    picks = [search(BANDIT, BANDIT.initial_state(), 300,
                    SearchConfig(exploration=0.5, temperature=1.0, seed=s)).action
             for s in range(30)]
    assert len(set(picks)) > 1  # T = 1 does not always play the most visited arm
    assert picks.count(greedy.action) >= 5
    again = search(BANDIT, BANDIT.initial_state(), 300,
                   SearchConfig(exploration=0.5, temperature=1.0, seed=3))
    assert again.action == picks[3]


@pytest.mark.parametrize("options", [{"rule": "minimax"}, {"exploration": -1.0},
                                     {"widening_k": 0.0}, {"rave_k": -2.0},
                                     {"dirichlet_alpha": 0.0}, {"temperature": -1.0}])
def test_bad_options_raise(options: dict) -> None:
    with pytest.raises(ValueError):
        search(PICK, PICK.initial_state(), 10, SearchConfig(**options))
    with pytest.raises(ValueError):
        search(PICK, PICK.initial_state(), 0)


def test_more_simulations_than_a_tree_can_count_raise() -> None:
    with pytest.raises(ValueError, match="at most"):
        search(PICK, PICK.initial_state(), MAX_VISITS + 1)
