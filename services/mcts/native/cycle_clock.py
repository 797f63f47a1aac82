"""A clock that numba kernels read in a few nanoseconds: the processor's cycle counter.

`read_cycles()` is LLVM's `llvm.readcyclecounter` (the time-stamp counter, RDTSC, on x86-64): a
count of reference cycles at a constant rate on every processor of the last fifteen years
("invariant TSC"), that keeps running while the thread is descheduled, so it measures wall time.
`seconds_per_cycle()` calibrates it once per process against `time.perf_counter` over
CALIBRATION_S seconds.

Only x86-64 is trusted (`AVAILABLE`): elsewhere LLVM may read a counter that user code cannot (a
trap) or one that is always 0, so the kernels are told not to read it and report no clock times.
"""

from __future__ import annotations

import functools
import platform
import time

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

AVAILABLE = platform.machine().lower() in ("x86_64", "amd64")
"""True where `read_cycles` may be called (x86-64)."""

CALIBRATION_S = 0.01
"""Seconds of each of the three timings of `seconds_per_cycle` (the median is kept)."""


@intrinsic
def _readcyclecounter(typingctx):
    sig = types.int64()

    def codegen(context, builder, signature, args):
        function_type = ir.FunctionType(ir.IntType(64), [])
        function = cgutils.get_or_insert_function(builder.module, function_type,
                                                  "llvm.readcyclecounter")
        return builder.call(function, [])

    return sig, codegen


@njit(nogil=True, inline="always")
def read_cycles():
    """The cycle counter (int64 cycles); call only where `AVAILABLE`."""
    return _readcyclecounter()


@njit(nogil=True)
def _read_now():
    return read_cycles()


@functools.cache
def seconds_per_cycle() -> float:
    """Seconds per cycle-counter tick, measured once per process (0.0 where not AVAILABLE)."""
    if not AVAILABLE:
        return 0.0
    _read_now()  # compile first
    ratios = []
    for _ in range(3):
        wall, cycles = time.perf_counter(), _read_now()
        time.sleep(CALIBRATION_S)
        wall, cycles = time.perf_counter() - wall, _read_now() - cycles
        if cycles <= 0:
            return 0.0
        ratios.append(wall / cycles)
    return sorted(ratios)[1]
