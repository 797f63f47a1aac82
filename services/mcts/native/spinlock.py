"""A mutual-exclusion lock that numba kernels take and release without the GIL.

An atomic exchange with acquire ordering takes the lock, an atomic store with release ordering
frees it (`services.mcts.native.atomics`; every read and write the holder makes stays inside the
critical section). The lock word is one int64 slot of an array, 0 free and 1 held.

Waiting is "test and test-and-set" (Rudolph & Segall 1984): a waiter reads the word with relaxed
atomic loads until it looks free and only then tries the exchange, and after SPINS_BEFORE_YIELD
failed reads it calls `sched_yield` (libc, through ctypes, which numba calls directly), so that a
holder preempted on a busy machine gets the core back instead of being starved by spinners.
"""

from __future__ import annotations

import ctypes

from numba import njit

from services.mcts.native.atomics import exchange_acquire, load_relaxed, store_release

SPINS_BEFORE_YIELD = 64
"""Relaxed reads of a held lock before the waiter yields its core."""

_libc = ctypes.CDLL(None)
_sched_yield = _libc.sched_yield
_sched_yield.restype = ctypes.c_int
_sched_yield.argtypes = []


@njit(nogil=True, inline="always")
def pause():
    """Gives the core to another thread (`sched_yield`): for waits on a busy machine."""
    _sched_yield()


@njit(nogil=True, inline="always")
def acquire(lock, slot):
    """Takes the lock held in `lock[slot]` (int64, 0 = free), waiting as the module doc says."""
    while exchange_acquire(lock, slot, 1) != 0:
        spins = 0
        while load_relaxed(lock, slot) != 0:
            spins += 1
            if spins == SPINS_BEFORE_YIELD:
                pause()
                spins = 0


@njit(nogil=True, inline="always")
def release(lock, slot):
    """Frees the lock in `lock[slot]`; only its holder may call this."""
    store_release(lock, slot, 0)

