"""The transposition table: the hash table itself, statistics shared exactly by the nodes of one
position, hits counted on games full of transpositions, and the same forced answers as without
a table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.connect4.board import Position
from services.mcts.core.config import SearchConfig
from services.mcts.core.game import Game
from services.mcts.games import connect4, tictactoe
from services.mcts.rollout.connect4 import uct_search
from services.mcts.rollout.engine import grow, grow_tree_parallel, search
from services.mcts.rollout.transpositions import TranspositionTable, find_or_insert

FEW = settings(max_examples=20, deadline=None)


@FEW
@given(keys=st.lists(st.integers(-2**62, 2**62), max_size=300), capacity=st.integers(1, 400))
def test_find_or_insert_gives_one_entry_per_key(keys: list[int], capacity: int) -> None:
    table = TranspositionTable.allocate(capacity)
    assert table.slot_key.shape[0] >= 2 * capacity
    entries: dict[int, int] = {}
    hits = 0
    for key in keys:
        entry = find_or_insert(key, table.slot_key, table.slot_entry, table.counters, capacity,
                               table.shift)
        if key in entries:
            hits += 1
            assert entry == entries[key]
        elif len(entries) < capacity:
            assert entry == len(entries)  # entries are handed out in order
            entries[key] = entry
        else:
            assert entry == -1  # full: the key gets no entry
    assert table.size == len(entries) and table.hits == hits


def node_states(tree, game: Game, root: np.ndarray) -> list[np.ndarray]:
    """The state of every node of the tree, replayed from the root along the actions."""
    states = [root.copy()]
    for node in range(1, tree.size):
        state = states[int(tree.parent[node])].copy()
        game.play(state, int(tree.action[node]))
        states.append(state)
    return states


def check_table(grown, game: Game, root: np.ndarray) -> None:
    """Each entry's statistics are exactly the sum of its nodes' (every visit of a node updates
    its entry once), and nodes share an entry exactly when they hold the same position."""
    tree, table, entry = grown.tree, grown.table, grown.entry
    size = tree.size
    reached = tree.visits[:size] > 0
    assert (entry[:size][reached] >= 0).all() and (entry[size:] == -1).all()
    used = entry[:size] >= 0
    visits = np.zeros(table.size, dtype=np.int64)
    values = np.zeros(table.size)
    np.add.at(visits, entry[:size][used], tree.visits[:size][used])
    np.add.at(values, entry[:size][used], tree.value_sum[:size][used])
    assert np.array_equal(visits, table.visits[: table.size])
    assert np.allclose(values, table.value_sum[: table.size])
    keys = [int(game.key(state)) for state in node_states(tree, game, root)]
    by_entry: dict[int, int] = {}
    for node in np.flatnonzero(used):
        assert by_entry.setdefault(int(entry[node]), keys[node]) == keys[node]
    assert len(set(by_entry.values())) == table.size
    # Every node looks its position up once; all but the first of each position are hits.
    assert table.hits == int(used.sum()) - table.size


@FEW
@given(simulations=st.integers(1, 3000), seed=st.integers(0, 2**32),
       rule=st.sampled_from(["uct", "puct"]), threads=st.integers(1, 3))
def test_tictactoe_shares_statistics_between_transposed_positions(simulations: int, seed: int,
                                                                  rule: str,
                                                                  threads: int) -> None:
    root = tictactoe.initial_state()
    config = SearchConfig(rule=rule, seed=seed, transpositions=True)
    grown = grow_tree_parallel(tictactoe.GAME, root, simulations, config, threads=threads)
    assert grown.simulations == simulations == grown.tree.visits[0]
    assert (grown.virtual_loss == 0).all()
    check_table(grown, tictactoe.GAME, root)
    if simulations >= 500:
        # Tic-tac-toe reaches most positions by several move orders.
        assert grown.transposition_hits > 0


def test_connect_four_counts_hits_and_keeps_the_tree_consistent() -> None:
    root = connect4.from_position(Position.from_moves("4453"))
    grown = grow(connect4.GAME, root, 20_000, SearchConfig(seed=5, transpositions=True))
    check_table(grown, connect4.GAME, root)
    assert grown.transposition_hits > 1_000
    assert grown.table.size < grown.tree.size
    plain = grow(connect4.GAME, root, 20_000, SearchConfig(seed=5))
    assert plain.transposition_hits == 0 and plain.table is None


@pytest.mark.parametrize("threads", [1, 2])
def test_forced_answers_match_the_search_without_a_table(threads: int) -> None:
    # Tic-tac-toe: X completes the top row with cell 2.
    state = tictactoe.from_moves([0, 3, 1, 4])
    for transpositions in (False, True):
        config = SearchConfig(seed=1, parallelism="tree", transpositions=transpositions)
        result = search(tictactoe.GAME, state, 2_000, config, threads=threads)
        assert result.action == 2 and result.values[2] == 1.0
        assert (result.transposition_hits > 0) == transpositions
    # Connect Four: column 4 completes the bottom row; "15253": the only move blocks column 4.
    for moves, simulations, best in (("112233", 4_000, 4), ("15253", 20_000, 4)):
        with_table = uct_search(moves, simulations, seed=2, threads=threads,
                                parallelism="tree", transpositions=True)
        without = uct_search(moves, simulations, seed=2, threads=threads, parallelism="tree")
        assert with_table.best_action == without.best_action == best
        assert with_table.transposition_hits > 0 and without.transposition_hits == 0


def test_root_parallel_trees_each_get_a_table() -> None:
    result = uct_search("4453", 6_000, seed=1, threads=2, transpositions=True)
    assert result.parallelism == "root" and result.threads == 2
    assert result.transposition_hits > 0 and int(result.visits.sum()) == 6_000


def test_a_game_without_a_key_cannot_use_a_table() -> None:
    keyless = Game(name="keyless", num_actions=9, state_size=3, max_plies=9, players=2,
                   initial_state=tictactoe.initial_state, legal_actions=tictactoe.legal_actions,
                   play=tictactoe.play, outcome=tictactoe.outcome, priors=tictactoe.priors,
                   encode=tictactoe.encode)
    with pytest.raises(ValueError, match="no key"):
        grow(keyless, keyless.initial_state(), 10, SearchConfig(transpositions=True))
    with pytest.raises(ValueError, match="parallelism"):
        grow(tictactoe.GAME, tictactoe.initial_state(), 10, SearchConfig(parallelism="leaf"))
