"""A mutual-exclusion lock that numba kernels take and release without the GIL.

An atomic exchange with acquire ordering takes the lock, an atomic store with release ordering
frees it (`services.mcts.native.atomics`; every read and write the holder makes stays inside the
critical section). The lock word is one int64 slot of an array, 0 free and 1 held.

Waiting is "test and test-and-set" (Rudolph & Segall 1984): a waiter reads the word with relaxed
atomic loads until it looks free and only then tries the exchange, and after SPINS_BEFORE_YIELD
failed reads it calls libc's `sched_yield` (declared by name, so no process address is baked into
the compiled code and the kernels that take the lock can be cached on disk), so that a holder
preempted on a busy machine gets the core back instead of being starved by spinners.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from services.mcts.native.atomics import exchange_acquire, load_relaxed, store_release

SPINS_BEFORE_YIELD = 64
"""Relaxed reads of a held lock before the waiter yields its core."""


@intrinsic
def _sched_yield(typingctx):
    """libc's `int sched_yield(void)`, called by its symbol (resolved in the process at link
    time)."""

    def codegen(context, builder, signature, args):
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        return builder.call(function, [])

    return types.int32(), codegen


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

