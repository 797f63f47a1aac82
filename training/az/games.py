"""Many Connect Four searches and games at once, so that every network call is a batch.

Each search is the mcts service's batched PUCT (`services.mcts.batched.search.BatchedSearch`:
virtual loss, Dirichlet noise at the root, the temperature draw of `services.mcts.core.root`),
driven through its ask/tell interface. One *round* asks every unfinished search for its next batch
of leaves (up to `SearchOptions.leaves_per_search`), plays the leaves' boards from their parents'
boards (kept per node, `boards`), evaluates every non-terminal leaf of every search in one call per
network, and submits the results. With G concurrent games and b leaves per search, a network call
carries up to G * b positions.

Games (`play_games`): each game's side k plays with network `sides[g][k]`, so the same driver runs
self-play (one network for both sides) and the arena (candidate against best, colours alternated).
The move played at ply p is drawn from the visit counts at temperature 1 while p <
`temperature_moves`, then the most visited column (AlphaZero's schedule; Silver et al. 2017,
Methods). No resignation: every game is played to its end.

Random openings (`opening_plies` > 0): each game first plays k uniformly random legal moves, k
drawn uniformly from 0..opening_plies (an opening that ends the game is drawn again), and is
searched from there; the opening's positions carry no search policy and are not trained on. Good
play avoids most positions of the game, and a network trained only on its own games judges them
badly; randomised starts put them in the data (KataGo varies the starts of its self-play games
too: Wu 2019, "Accelerating Self-Play Learning in Go").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from libs.connect4.geometry import STANDARD
from services.mcts.batched.search import BatchedSearch
from services.mcts.core.config import BatchedConfig
from services.mcts.core.result import SearchResult
from training.az.boards import Boards, ConnectFourBoards

Evaluator = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""(planes float32 [B, 2, H, W], legal bool [B, A]) -> (policy float [B, A] summing to 1 over the
legal actions, value float [B] in [-1, 1] for the player to move); [2, 6, 7] and 7 on the
standard Connect Four board (`boards.Boards`)."""

STANDARD_GAME = ConnectFourBoards(STANDARD)
"""Connect Four on 7x6, the default game of every function here."""


@dataclass(frozen=True)
class SearchOptions:
    """PUCT options of every search (see `services.mcts.batched.search.BatchedConfig`)."""

    simulations: int = 800
    leaves_per_search: int = 8
    c_puct: float = 2.0
    virtual_loss: float = 1.0
    dirichlet_alpha: float | None = 1.0
    dirichlet_epsilon: float = 0.25


@dataclass(frozen=True)
class GameRecord:
    """One finished game.

    Attributes:
        moves: move string (action + 1 per ply: Pons' columns '1'..'W', tic-tac-toe's cells).
        policies: float32 [T - opening, A], the root visit shares of the search at each ply
            after the opening.
        winner: 0 first player, 1 second player, -1 draw.
        sides: the evaluator index of the first and of the second player.
        opening: plies played at random before the first search (see the module doc).
    """

    moves: str
    policies: np.ndarray
    winner: int
    sides: tuple[int, int]
    opening: int = 0


@dataclass(frozen=True)
class Counters:
    """Work done by `search_many` / `play_games`: network calls, positions evaluated."""

    calls: int = 0
    positions: int = 0

    def __add__(self, other: Counters) -> Counters:
        return Counters(self.calls + other.calls, self.positions + other.positions)


def search_many(positions: np.ndarray, masks: np.ndarray, owners: np.ndarray,
                evaluators: Sequence[Evaluator], options: SearchOptions, seeds: np.ndarray,
                temperatures: np.ndarray, game: Boards = STANDARD_GAME
                ) -> tuple[list[SearchResult], Counters]:
    """Runs one PUCT search from each root board, all at once.

    Args:
        positions, masks: int64 [S], the roots' bitboards (unfinished games).
        owners: int64 [S], index into `evaluators` of the network searching each root.
        options: simulations, leaves per search, PUCT constants, root noise.
        seeds: int64 [S], each search's seed (noise and temperature draw).
        temperatures: float [S], 0 for the most visited column.
        game: the game's vectorised rules (Connect Four 7x6 by default).
    Returns:
        one `SearchResult` per root (its `action` is the action to play, 0..A-1) and the
        counters.
    """
    count = len(positions)
    searches = []
    node_boards = []
    for index in range(count):
        config = BatchedConfig(
            rule="puct", c_puct=options.c_puct, virtual_loss=options.virtual_loss,
            batch_size=options.leaves_per_search, seed=int(seeds[index]),
            dirichlet_alpha=options.dirichlet_alpha, dirichlet_epsilon=options.dirichlet_epsilon,
            temperature=float(temperatures[index]))
        search = BatchedSearch(game.num_actions, options.simulations, config)
        capacity = search.blocks[0].shape[1]
        board = np.zeros((2, capacity), dtype=np.int64)
        board[0, 0], board[1, 0] = positions[index], masks[index]
        searches.append(search)
        node_boards.append(board)
    counters = Counters()
    active = list(range(count))
    while active:
        pending = []
        for index in active:
            batch = searches[index].next_batch()
            if batch is not None:
                pending.append((index, batch))
        active = [index for index, _ in pending]
        if pending:
            counters += _evaluate_round(pending, node_boards, owners, evaluators, searches, game)
    return [search.result() for search in searches], counters


def _evaluate_round(pending, node_boards, owners, evaluators, searches, game) -> Counters:
    """Plays, evaluates and submits the leaves of one round (see the module doc)."""
    parts_position, parts_mask, parts_won, sizes = [], [], [], []
    for index, batch in pending:
        board = node_boards[index]
        if batch.batch_id == 0:
            position, mask = board[0, :1], board[1, :1]
            won = np.zeros(1, dtype=np.bool_)
        else:
            position, mask, won = game.play(board[0, batch.parents], board[1, batch.parents],
                                            batch.actions)
            board[0, batch.nodes], board[1, batch.nodes] = position, mask
        parts_position.append(position)
        parts_mask.append(mask)
        parts_won.append(won)
        sizes.append(len(batch))
    position = np.concatenate(parts_position)
    mask = np.concatenate(parts_mask)
    won = np.concatenate(parts_won)
    legal = game.legal(mask)
    terminal = won | ~legal.any(axis=1)
    owner = np.repeat(owners[[index for index, _ in pending]], sizes)
    priors = np.full((len(position), game.num_actions), 1.0 / game.num_actions)
    values = np.where(won, -1.0, 0.0)
    counters = Counters()
    for which, evaluate in enumerate(evaluators):
        rows = np.flatnonzero((owner == which) & ~terminal)
        if len(rows) == 0:
            continue
        policy, value = evaluate(game.encode(position[rows], mask[rows]), legal[rows])
        priors[rows] = policy
        values[rows] = np.clip(value, -1.0, 1.0)
        counters += Counters(1, len(rows))
    start = 0
    for (index, _), size in zip(pending, sizes, strict=True):
        rows = slice(start, start + size)
        searches[index].submit(priors[rows], values[rows], terminal[rows])
        start += size
    return counters


def play_games(evaluators: Sequence[Evaluator], sides: Sequence[tuple[int, int]],
               concurrent: int, options: SearchOptions, temperature_moves: int, seed: int,
               game: Boards = STANDARD_GAME, opening_plies: int = 0
               ) -> tuple[list[GameRecord], Counters]:
    """Plays one game per entry of `sides`, `concurrent` at a time (a finished game's slot takes
    the next game), every move a search of `options`.

    Args:
        evaluators: the networks.
        sides: per game, the evaluator index of the first and of the second player.
        concurrent: games in flight, >= 1.
        temperature_moves: plies whose move is drawn at temperature 1 (then greedy), counted
            from the start of the game (the random opening included).
        seed: the same seed and networks replay the same games.
        game: the game's vectorised rules (Connect Four 7x6 by default).
        opening_plies: the most plies of a game's random opening (0: none; module doc).
    Returns:
        the games in `sides` order, and the counters.
    """
    total = len(sides)
    records: list[GameRecord | None] = [None] * total
    rng = np.random.default_rng(seed)
    slots: dict[int, dict] = {}
    next_game = 0
    counters = Counters()
    while next_game < total or slots:
        while len(slots) < concurrent and next_game < total:
            slots[next_game] = _opening(rng, opening_plies, game)
            next_game += 1
        games = list(slots)
        plies = np.array([len(slots[g]["moves"]) for g in games])
        owners = np.array([sides[g][ply % 2] for g, ply in zip(games, plies, strict=True)])
        results, used = search_many(
            np.array([slots[g]["position"] for g in games], dtype=np.int64),
            np.array([slots[g]["mask"] for g in games], dtype=np.int64), owners, evaluators,
            options, rng.integers(2**62, size=len(games)),
            np.where(plies < temperature_moves, 1.0, 0.0), game)
        counters += used
        for index, result in zip(games, results, strict=True):
            record = _advance(slots[index], result, sides[index], game)
            if record is not None:
                records[index] = record
                del slots[index]
    return records, counters


def _opening(rng: np.random.Generator, opening_plies: int, game: Boards) -> dict:
    """A new game's slot after its random opening of 0..opening_plies plies (module doc)."""
    while True:
        slot = {"position": 0, "mask": 0, "moves": [], "policies": [], "opening": 0}
        plies = int(rng.integers(opening_plies + 1)) if opening_plies else 0
        for _ in range(plies):
            legal = np.flatnonzero(game.legal(np.array([slot["mask"]]))[0])
            if _play(slot, int(rng.choice(legal)), game) is not None:
                break  # the opening ended the game: draw another
        else:
            slot["opening"] = plies
            return slot


def _play(slot: dict, column: int, game: Boards) -> bool | None:
    """Plays `column` in a game's slot: True when the move won, False when it filled the board
    (a draw), None when the game goes on."""
    slot["moves"].append(str(column + 1))
    position, mask, won = game.play(np.array([slot["position"]]), np.array([slot["mask"]]),
                                    np.array([column]))
    slot["position"], slot["mask"] = int(position[0]), int(mask[0])
    if won[0]:
        return True
    return None if game.legal(mask)[0].any() else False


def _advance(slot: dict, result: SearchResult, sides: tuple[int, int], game: Boards
             ) -> GameRecord | None:
    """Plays the searched move in a game's slot; the game's record when it ended."""
    column = int(result.action)
    slot["policies"].append(result.policy.astype(np.float32))
    won = _play(slot, column, game)
    if won is None:
        return None
    winner = (len(slot["moves"]) - 1) % 2 if won else -1
    return GameRecord("".join(slot["moves"]), np.stack(slot["policies"]), winner, sides,
                      slot["opening"])
