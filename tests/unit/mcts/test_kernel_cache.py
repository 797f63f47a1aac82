"""The rollout kernels, typed by a game's numba functions, are loaded from numba's on-disk cache
in a new process (services/mcts/native/kernel_cache.py): the mcts service's start-up, with the
cache warm, loads them instead of compiling for seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from services.mcts.games.tictactoe import GAME
from services.mcts.native.kernel_cache import stable_key
from services.mcts.rollout.records import functions_of

SEARCH = """
import json, numpy as np
from services.mcts.games.tictactoe import GAME, from_moves
from services.mcts.rollout import kernel
from services.mcts.rollout.engine import search
from services.mcts.core.config import SearchConfig
result = search(GAME, from_moves([4]), 300, SearchConfig(seed=3))
print(json.dumps({"hits": sum(kernel.run_simulations._cache_hits.values()),
                  "misses": sum(kernel.run_simulations._cache_misses.values()),
                  "visits": np.asarray(result.visits).tolist()}))
"""


STAMPED = """
from services.mcts.native import kernel_cache
kernel_cache.package_stamp = lambda: "sources edited since"
""" + SEARCH


def _search_in_new_process(cache_dir, repo_root, script: str = SEARCH) -> dict:
    run = subprocess.run([sys.executable, "-c", script], cwd=repo_root, capture_output=True,
                         text=True, timeout=900,
                         env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_the_rollout_kernel_from_the_cache(tmp_path, repo_root) -> None:
    first = _search_in_new_process(tmp_path, repo_root)
    second = _search_in_new_process(tmp_path, repo_root)
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (second["hits"], second["misses"]) == (1, 0)
    assert second["visits"] == first["visits"]


def test_an_edit_to_the_kernel_sources_compiles_afresh_and_replaces_the_entry(tmp_path,
                                                                            repo_root) -> None:
    _search_in_new_process(tmp_path, repo_root)
    edited = _search_in_new_process(tmp_path, repo_root, STAMPED)
    assert (edited["hits"], edited["misses"]) == (0, 1)
    again = _search_in_new_process(tmp_path, repo_root, STAMPED)
    assert (again["hits"], again["misses"]) == (1, 0)
    assert len(list(tmp_path.rglob("kernel.run_simulations-*.nbc"))) == 1


def test_the_key_of_a_game_names_its_functions_not_their_dispatchers() -> None:
    from numba import typeof

    key = stable_key(typeof(functions_of(GAME)))
    members = key[2]
    assert key[1] == "GameFunctions"
    assert members[0][0] == "function"
    assert members[0][1][:2] == ("services.mcts.games.tictactoe", "legal_actions")
    assert "0x" not in repr(key)
