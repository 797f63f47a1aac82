"""Leaf evaluators for `services.mcts.batched.search`: built-in games with rollouts, and Connect
Four by a policy/value network behind an injected async call (the gRPC adapter is
`services.mcts.api.neural_client`; this module imports no grpc).

Both replay each leaf's action path from the root state with the game module
(`services.mcts.core.game`), so legality and the end of the game come from the game: a leaf whose
last move ended the game is terminal with its exact outcome and is never sent to a network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from libs.connect4.board import Position
from services.mcts.batched.leaves import LeafBatch
from services.mcts.batched.search import BatchedSearch
from services.mcts.core.game import MAX_ACTIONS, Game
from services.mcts.core.result import SearchResult
from services.mcts.games.connect4 import from_position, game
from services.mcts.native.xorshift import random_below, rng_state

Evaluation = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(priors float64 [B, A], values float64 [B], terminal bool [B]), as `BatchedSearch.submit`."""


def replay(game: Game, root_state: np.ndarray, path: list[int]) -> tuple[np.ndarray, bool]:
    """The state after playing `path` from `root_state` (copied) and whether the last move ended
    the game (False for an empty path)."""
    state = root_state.copy()
    ended = False
    for action in path:
        ended = bool(game.play(state, action))
    return state, ended


def terminal_value(game: Game, state: np.ndarray, rng: np.ndarray) -> float:
    """The exact result of a finished game for the player to move (the loser of a won game: -1)."""
    outcome = float(game.outcome(state, rng))
    return -outcome if game.players == 2 else outcome


class GameEvaluator:
    """Evaluates leaves of a built-in game: the game's priors (uniform for the built-in games)
    over its legal actions and the result of one rollout (the game's rollout policy, else uniform
    random moves), for the player to move at the leaf.

    Args:
        game: the game module's `Game`.
        root_state: int64 [S], the state searched (a game that goes on).
        seed: seeds the rollouts (xorshift64*, `services.mcts.native.xorshift`).
    """

    def __init__(self, game: Game, root_state: np.ndarray, seed: int = 0) -> None:
        self.game = game
        self.root_state = np.ascontiguousarray(root_state, dtype=np.int64)
        self._rng = rng_state(seed)
        self._actions = np.empty(MAX_ACTIONS, dtype=np.int64)
        self._priors = np.empty(MAX_ACTIONS, dtype=np.float64)
        self._moves = np.empty(game.max_plies + 1, dtype=np.int64)

    def __call__(self, batch: LeafBatch) -> Evaluation:
        """Priors [B, A], values [B] and terminal flags [B] of the batch's leaves."""
        game = self.game
        size = len(batch)
        priors = np.zeros((size, game.num_actions), dtype=np.float64)
        values = np.zeros(size, dtype=np.float64)
        terminal = np.zeros(size, dtype=np.bool_)
        for b, path in enumerate(batch.paths):
            state, ended = replay(game, self.root_state, path)
            count = 0 if ended else game.legal_actions(state, self._actions)
            if count == 0:
                terminal[b] = True
                values[b] = terminal_value(game, state, self._rng)
                continue
            game.priors(state, self._actions, count, self._priors)
            priors[b, self._actions[:count]] = self._priors[:count]
            values[b] = self._rollout(state)
        return priors, values, terminal

    def _rollout(self, state: np.ndarray) -> float:
        """One rollout from `state` (changed), for the player to move there."""
        game = self.game
        if game.rollout is not None:
            value, plies = game.rollout(state, self._rng, self._moves, 0, False)
        else:
            plies = 0
            ended = False
            while not ended:
                count = game.legal_actions(state, self._actions)
                ended = game.play(state, self._actions[random_below(self._rng, count)])
                plies += 1
            value = game.outcome(state, self._rng)
        # `value` is for the last mover; the player to move at the leaf made the first move.
        if game.players == 2 and plies % 2 == 0:
            value = -value
        return float(value)


EvaluatePositions = Callable[[list[str]], Awaitable[tuple[np.ndarray, np.ndarray]]]
"""An async call evaluating Connect Four positions given as Pons move strings (on one board):
returns policy float [N, W] (W the board's columns, 0 on full columns) and value float [N] for the
player to move."""


class NeuralConnectFourEvaluator:
    """Evaluates Connect Four leaves with a policy/value network in ONE call per batch (the
    non-terminal leaves only; a batch of finished games makes no call).

    Args:
        root: the root position, on its board (a Pons move string: on 7x6).
        evaluate_positions: the network call (see `EvaluatePositions`), which evaluates
            positions of the root's board.
    """

    def __init__(self, root: Position | str, evaluate_positions: EvaluatePositions) -> None:
        if isinstance(root, str):
            root = Position.from_moves(root)
        self.game = game(root.board)
        self.root_moves = root.moves
        self.root_state = from_position(root)
        self._evaluate_positions = evaluate_positions
        self._rng = rng_state(0)
        self.calls = 0
        """Network calls made (one per batch with a non-terminal leaf)."""

    async def __call__(self, batch: LeafBatch) -> Evaluation:
        """Priors [B, W], values [B] and terminal flags [B] of the batch's leaves (W the
        board's columns)."""
        size = len(batch)
        priors = np.zeros((size, self.game.num_actions), dtype=np.float64)
        values = np.zeros(size, dtype=np.float64)
        terminal = np.zeros(size, dtype=np.bool_)
        rows: list[int] = []
        moves: list[str] = []
        for b, path in enumerate(batch.paths):
            state, ended = replay(self.game, self.root_state, path)
            if ended:
                terminal[b] = True
                values[b] = terminal_value(self.game, state, self._rng)
            else:
                rows.append(b)
                moves.append(self.root_moves + "".join(str(a + 1) for a in path))
        if rows:
            self.calls += 1
            policy, value = await self._evaluate_positions(moves)
            priors[rows] = np.asarray(policy, dtype=np.float64)
            values[rows] = np.clip(np.asarray(value, dtype=np.float64), -1.0, 1.0)
        return priors, values, terminal


async def run_batched_async(search: BatchedSearch,
                            evaluate: Callable[[LeafBatch], Awaitable[Evaluation]],
                            deadline: float | None = None) -> SearchResult:
    """`batched.run_batched` with an async evaluator; selection and backup run inline (they take
    microseconds per leaf).

    Args:
        deadline: `asyncio` loop time after which no new batch starts; the result then reports
            the simulations done.
    """
    loop = asyncio.get_running_loop()
    while deadline is None or loop.time() < deadline:
        batch = search.next_batch()
        if batch is None:
            break
        search.submit(*await evaluate(batch))
    return search.result()
