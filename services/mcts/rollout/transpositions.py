"""A transposition table for the search core: one statistics entry per game position, shared by
every tree node that reaches that position by whatever path (Childs, Brodeur & Kocsis 2008,
"Transpositions and move groups in Monte Carlo tree search").

Positions are identified by the game's `key(state) -> int64` (see `services.mcts.core.game`): an
injective code of the state (the Connect Four bitboard key `position + mask`, Pons 2019; a
tic-tac-toe board's two bitboards), so entries never merge different positions. The table is
open addressing with linear probing over SLOTS = a power of two at least twice the entry capacity
(load at most 1/2), slots found by Fibonacci hashing of the key (Knuth, TAOCP vol. 3, 6.4): the
high bits of `key * 0x9E3779B97F4A7C15 mod 2**64`.

Arrays (E = entry capacity, the tree's node capacity: a tree never has more positions than nodes):
    slot_key: int64 [SLOTS], the key held by a slot.
    slot_entry: int32 [SLOTS], the entry of a slot, -1 while the slot is free.
    visits: int64 [E], value_sum: float64 [E]: simulations through the position and the sum of
        their results for the player who moved into it (as `Tree.value_sum`).
    counters: int64 [2]: entries in use, and hits (look-ups that found the position already
        there: a transposition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)

USED, HITS = 0, 1
"""Indices of `TranspositionTable.counters`."""


@dataclass(frozen=True)
class TranspositionTable:
    """The arrays of the module doc; `shift` = 64 - log2(SLOTS)."""

    slot_key: np.ndarray
    slot_entry: np.ndarray
    visits: np.ndarray
    value_sum: np.ndarray
    counters: np.ndarray
    shift: int

    @staticmethod
    def allocate(entries: int) -> TranspositionTable:
        """An empty table for up to `entries` (>= 1) positions; memory about 44 bytes per entry
        (16 for the statistics, 12 per slot, two slots or more per entry)."""
        entries = max(int(entries), 1)
        bits = max(1, (2 * entries - 1).bit_length())
        return TranspositionTable(
            slot_key=np.zeros(1 << bits, dtype=np.int64),
            slot_entry=np.full(1 << bits, -1, dtype=np.int32),
            visits=np.zeros(entries, dtype=np.int64),
            value_sum=np.zeros(entries, dtype=np.float64),
            counters=np.zeros(2, dtype=np.int64),
            shift=64 - bits,
        )

    @property
    def size(self) -> int:
        """Entries in use (distinct positions seen)."""
        return int(self.counters[USED])

    @property
    def hits(self) -> int:
        """Look-ups that found their position already in the table."""
        return int(self.counters[HITS])


@njit(cache=True, nogil=True, inline="always")
def find_or_insert(key, slot_key, slot_entry, counters, capacity, shift):
    """The entry of position `key`, created (zero statistics) when new and counted as a hit when
    not; -1 when new and all `capacity` entries are taken. Not thread-safe: callers hold the
    tree's lock."""
    mask = slot_key.shape[0] - 1
    slot = np.int64((np.uint64(key) * _FIBONACCI) >> np.uint64(shift))
    while True:
        entry = slot_entry[slot]
        if entry < 0:
            break
        if slot_key[slot] == key:
            counters[1] += 1
            return entry
        slot = (slot + 1) & mask
    entry = counters[0]
    if entry >= capacity:
        return -1
    slot_key[slot] = key
    slot_entry[slot] = entry
    counters[0] = entry + 1
    return entry
