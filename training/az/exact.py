"""Judging a network by the exact game-theoretic values, each generation, on boards small enough.

The judged set: every unfinished position reachable from the start (listed level by level, ply
after ply, deduplicated by key) when there are at most `max_positions`; else a uniform sample of
`sample` of them (drawn from the full list); and where even the list is out of reach
(`ENUMERATION_LIMIT`), `sample` distinct positions of uniformly random games (not uniform over
positions; the set says so in `how`).

Labels: for each position the actions that keep its game-theoretic outcome (win, draw or loss for
the player to move; in a lost position every legal action keeps it, as
`libs.connect4.outcome.keeps_outcome` counts): Connect Four by the exact solver
(`libs.connect4.solver.Solver.best_moves` in weak mode), tic-tac-toe by a memoised negamax over its
5,478 positions.

Rates (`exact_rates`): the share of judged positions where the move chosen keeps the outcome, for
the network alone (its most probable legal action) and for PUCT with the network at
`simulations` simulations (no root noise, the most visited action) on a uniform sample of at most
`puct_positions` of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from libs.connect4.board import Position
from libs.connect4.solver import Solver
from training.az.boards import Boards, ConnectFourBoards
from training.az.games import Evaluator, SearchOptions, search_many

ENUMERATION_LIMIT = 30_000_000
"""Most positions the level-by-level listing holds before it gives up (memory: ~40 bytes each)."""
BATCH = 4_096
"""Positions per network call of the network-alone rate."""
SEARCHES = 1_024
"""PUCT searches run at once."""


@dataclass(frozen=True)
class ExactSet:
    """Judged positions and their labels.

    Attributes:
        position, mask: int64 [N], the bitboards (`training.az.boards`).
        plies: int64 [N], stones on the board.
        keep: bool [N, A], the actions that keep the position's outcome.
        reachable: unfinished positions reachable from the start (-1: too many to list).
        how: "every reachable position", "uniform sample" or "random games".
    """

    position: np.ndarray
    mask: np.ndarray
    plies: np.ndarray
    keep: np.ndarray
    reachable: int
    how: str

    def __len__(self) -> int:
        return len(self.position)


def reachable_positions(game: Boards, limit: int = ENUMERATION_LIMIT
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every unfinished position reachable from the start: (position, mask, plies), int64 [R]
    each, level by level; None when more than `limit`."""
    level_p, level_m = np.zeros(1, np.int64), np.zeros(1, np.int64)
    found_p, found_m, found_n = [level_p], [level_m], [np.zeros(1, np.int64)]
    total = 1
    for ply in range(1, game.cells):
        legal = game.legal(level_m)
        rows, actions = np.nonzero(legal)
        child_p, child_m, won = game.play(level_p[rows], level_m[rows], actions)
        child_p, child_m = child_p[~won], child_m[~won]
        _, first = np.unique(game.key(child_p, child_m), return_index=True)
        level_p, level_m = child_p[first], child_m[first]
        total += len(level_p)
        if total > limit:
            return None
        found_p.append(level_p)
        found_m.append(level_m)
        found_n.append(np.full(len(level_p), ply, np.int64))
    return np.concatenate(found_p), np.concatenate(found_m), np.concatenate(found_n)


def _random_game_positions(game: Boards, count: int, rng: np.random.Generator
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` distinct unfinished positions met in uniformly random games."""
    seen: dict[int, tuple[int, int, int]] = {}
    while len(seen) < count:
        position, mask = np.zeros(1, np.int64), np.zeros(1, np.int64)
        for ply in range(game.cells):
            seen.setdefault(int(game.key(position, mask)[0]), (int(position[0]), int(mask[0]),
                                                                ply))
            action = rng.choice(np.flatnonzero(game.legal(mask)[0]))
            position, mask, won = game.play(position, mask, np.array([action]))
            if won[0] or ply + 1 == game.cells or len(seen) >= count:
                break
    rows = np.array(list(seen.values()), dtype=np.int64)
    return rows[:, 0], rows[:, 1], rows[:, 2]


def judged_set(game: Boards, max_positions: int, sample: int, seed: int) -> ExactSet:
    """The judged positions of `game` and their labels (see the module doc)."""
    rng = np.random.default_rng(seed)
    listed = reachable_positions(game)
    if listed is None:
        position, mask, plies = _random_game_positions(game, sample, rng)
        reachable, how = -1, "random games"
    else:
        position, mask, plies = listed
        reachable, how = len(position), "every reachable position"
        if reachable > max_positions:
            rows = np.sort(rng.choice(reachable, size=min(sample, reachable), replace=False))
            position, mask, plies = position[rows], mask[rows], plies[rows]
            how = "uniform sample"
    keep = label(game, position, mask, plies)
    return ExactSet(position, mask, plies, keep, reachable, how)


def label(game: Boards, position: np.ndarray, mask: np.ndarray, plies: np.ndarray) -> np.ndarray:
    """bool [N, A]: the legal actions that keep each position's outcome (module doc)."""
    if isinstance(game, ConnectFourBoards):
        return _connect4_labels(game, position, mask, plies)
    return _negamax_labels(game, position, mask)


def _connect4_labels(game: ConnectFourBoards, position: np.ndarray, mask: np.ndarray,
                     plies: np.ndarray) -> np.ndarray:
    solver = Solver()
    keep = np.zeros((len(position), game.num_actions), dtype=np.bool_)
    for row in range(len(position)):
        # The solver reads the stone count from the move string; any string of that length will
        # do, as the bitboards carry the position.
        root = Position(moves="1" * int(plies[row]), position=int(position[row]),
                        mask=int(mask[row]), board=game.board)
        scores = solver.best_moves(root, weak=True).scores
        known = [s for s in scores if s is not None]
        best = max(known)
        keep[row] = [s is not None and (s == best or best < 0) for s in scores]
    return keep


def _negamax_labels(game: Boards, position: np.ndarray, mask: np.ndarray) -> np.ndarray:
    keep = np.zeros((len(position), game.num_actions), dtype=np.bool_)
    for row in range(len(position)):
        results = _action_results(game, int(position[row]), int(mask[row]))
        best = max(results.values())
        for action, result in results.items():
            keep[row, action] = result == best or best < 0
    return keep


def _action_results(game: Boards, position: int, mask: int) -> dict[int, int]:
    """{legal action: the result (1, 0, -1) for the mover after it} of an unfinished position."""
    results = {}
    for action in np.flatnonzero(game.legal(np.array([mask]))[0]):
        child_p, child_m, won = game.play(np.array([position]), np.array([mask]),
                                          np.array([action]))
        if won[0]:
            results[int(action)] = 1
        elif not game.legal(child_m)[0].any():
            results[int(action)] = 0
        else:
            results[int(action)] = -_negamax_value(game, int(child_p[0]), int(child_m[0]))
    return results


@functools.cache
def _negamax_value(game: Boards, position: int, mask: int) -> int:
    return max(_action_results(game, position, mask).values())


def exact_rates(evaluate: Evaluator, judged: ExactSet, game: Boards, simulations: int,
                puct_positions: int, leaves_per_search: int, c_puct: float, seed: int
                ) -> dict[str, Any]:
    """{"positions", "reachable", "how", "network", "puct", "puct_positions", "simulations"}:
    the rates (0..1, 5 digits) of the network alone on every judged position and of PUCT on a
    uniform sample of at most `puct_positions` of them (fixed by `seed`)."""
    chosen = np.empty(len(judged), dtype=np.int64)
    for start in range(0, len(judged), BATCH):
        rows = slice(start, start + BATCH)
        policy, _ = evaluate(game.encode(judged.position[rows], judged.mask[rows]),
                             game.legal(judged.mask[rows]))
        chosen[rows] = np.argmax(policy, axis=1)
    network = judged.keep[np.arange(len(judged)), chosen]
    rng = np.random.default_rng(seed)
    subset = np.sort(rng.choice(len(judged), size=min(puct_positions, len(judged)),
                                replace=False))
    options = SearchOptions(simulations=simulations, leaves_per_search=leaves_per_search,
                            c_puct=c_puct, dirichlet_alpha=None)
    kept = []
    for start in range(0, len(subset), SEARCHES):
        rows = subset[start:start + SEARCHES]
        results, _ = search_many(judged.position[rows], judged.mask[rows],
                                 np.zeros(len(rows), np.int64), [evaluate], options, rows,
                                 np.zeros(len(rows)), game)
        kept.extend(judged.keep[row, result.action] for row, result in zip(rows, results,
                                                                            strict=True))
    return {"positions": len(judged), "reachable": judged.reachable, "how": judged.how,
            "network": round(float(network.mean()), 5), "puct": round(float(np.mean(kept)), 5),
            "puct_positions": len(subset), "simulations": simulations}
