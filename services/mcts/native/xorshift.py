"""The search kernels' random generator: xorshift64* (Vigna 2016) on a uint64 [1] state array,
seeded by splitmix64, so a seed fixes every random choice of a search."""

from __future__ import annotations

import numpy as np
from numba import njit

_MULTIPLIER = np.uint64(2685821657736338717)


@njit(cache=True, nogil=True)
def next_random(rng):
    """Advances `rng[0]` (uint64 state, nonzero) and returns 64 random bits (uint64)."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * _MULTIPLIER


@njit(cache=True, nogil=True)
def random_below(rng, n):
    """A uniform integer (int64) in [0, n) for 1 <= n <= 2**31."""
    return np.int64(next_random(rng) >> np.uint64(33)) % n


def rng_state(seed: int) -> np.ndarray:
    """uint64 [1]: splitmix64 of the seed, a nonzero xorshift state for any seed (0 included)."""
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return np.array([z or 1], dtype=np.uint64)
