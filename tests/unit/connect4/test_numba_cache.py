"""Kernels compiled per board size (numba closures that capture other kernels) load from numba's
disk cache in a new process (`libs.numba_cache`): without it every process compiled them again,
seconds for the solver."""

from __future__ import annotations

import os
import subprocess
import sys

from libs.connect4.geometry import Board
from libs.connect4.rules import rules
from libs.connect4.solver import search_kernel
from libs.numba_cache import closure_key

PROBE = """
from libs.connect4.geometry import Board
from libs.connect4.rules import rules
kernels = rules(Board(6, 4))
kernels.non_losing_moves(0, 0)
stats = kernels.non_losing_moves.stats
print(len(stats.cache_hits), len(stats.cache_misses))
"""


def test_a_board_size_kernel_is_compiled_once_then_loaded(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           env=env, timeout=300, check=True).stdout.strip() for _ in range(2)]
    assert runs == ["0 1", "1 0"]  # (hits, misses): compiled, then loaded


def test_the_key_tells_sizes_apart_and_names_recursion():
    small, large = rules(Board(5, 4)), rules(Board(6, 5))
    assert closure_key(small.possible.py_func) != closure_key(large.possible.py_func)
    assert closure_key(small.possible.py_func) == closure_key(rules(Board(5, 4)).possible.py_func)
    negamax = dict(zip(search_kernel(Board(5, 4)).py_func.__code__.co_freevars,
                       search_kernel(Board(5, 4)).py_func.__closure__, strict=True))["negamax"]
    assert ("recursion", "_negamax_kernel.<locals>._negamax") in closure_key(
        negamax.cell_contents.py_func)
