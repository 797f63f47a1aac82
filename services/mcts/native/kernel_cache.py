"""Numba's on-disk cache for kernels that take numba functions as arguments (a game's
`GameFunctions`, an evaluator).

Numba keys its cache index by the argument types, and the type of a function argument is tied to
the dispatcher object of this process, so such a kernel never matches its cached entry in a new
process and compiles again (seconds per kernel and game: most of the mcts service's start). Here
the index key names each function argument by what it is instead: its module, qualified name,
bytecode hash and source file stamp. The compiled code is independent of the dispatcher's identity
(the functions are inlined or linked into the kernel), so a loaded kernel is registered under the
signature of the call that asked for it.

Numba's own cache drops a kernel's entries when the kernel's source file changes, not when a
module it calls does; here the stamp that the index is checked against also holds the stamps of
every source file of the packages the kernels are made of (`services.mcts` core, games, native,
rollout, batched), so any edit there (a rule, a game) compiles the kernels afresh and the stale
entries are replaced, not piled up.

`enable(dispatcher)` turns this cache on for one `njit` dispatcher (declared without
`cache=True`); the directory is numba's (`NUMBA_CACHE_DIR`, or `__pycache__` beside the source).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from pathlib import Path
from typing import Any

from numba.core import types
from numba.core.caching import FunctionCache, IndexDataCacheFile

from libs.numba_cache import closure_key

_PACKAGE = Path(__file__).resolve().parents[1]
_KERNEL_PACKAGES = ("core", "games", "native", "rollout", "batched")


def _file_stamp(path: str | os.PathLike) -> tuple[int, int] | None:
    """(mtime in ns, size in bytes) of `path`, None if it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.cache
def package_stamp() -> str:
    """SHA-256 (hex) of the path and stamp of every .py file of the kernels' packages, computed once
    a process."""
    digest = hashlib.sha256()
    paths = (path for package in _KERNEL_PACKAGES for path in (_PACKAGE / package).rglob("*.py"))
    for path in sorted(paths):
        digest.update(f"{path.relative_to(_PACKAGE)}:{_file_stamp(path)};".encode())
    return digest.hexdigest()


def _function_key(function: Any) -> tuple:
    """What a numba function argument is, the same in every process that imports it."""
    try:
        source = inspect.getfile(function)
    except TypeError:
        source = None
    code = hashlib.sha256(function.__code__.co_code).hexdigest()
    return (function.__module__, function.__qualname__, code,
            source and _file_stamp(source), _closure_key(function))


def _closure_key(function: Any) -> tuple:
    """What a closure captured (numba compiles the captured values as constants), as
    `libs.numba_cache.closure_key`: two closures of one factory with other constants (a game
    compiled per board size) get different keys; () for a plain function."""
    return closure_key(function)


def stable_key(numba_type: types.Type) -> Any:
    """`numba_type` with each function type (in tuples and named tuples too) replaced by
    `_function_key` of its Python function: picklable and equal across processes."""
    if isinstance(numba_type, types.Dispatcher):
        return ("function", _function_key(numba_type.dispatcher.py_func))
    if isinstance(numba_type, types.BaseTuple):
        record = getattr(numba_type, "instance_class", tuple)
        return (type(numba_type).__name__, record.__qualname__,
                tuple(stable_key(member) for member in numba_type.types))
    return str(numba_type)


class StableFunctionCache(FunctionCache):
    """Numba's `FunctionCache` with `stable_key` signatures, and an index valid only for the
    kernel packages' current sources (see the module doc)."""

    def __init__(self, py_func) -> None:
        super().__init__(py_func)
        self._cache_file = IndexDataCacheFile(
            cache_path=self._cache_path, filename_base=self._impl.filename_base,
            source_stamp=(self._impl.locator.get_source_stamp(), package_stamp()))

    def _index_key(self, sig, codegen):
        return super()._index_key(tuple(stable_key(arg) for arg in sig), codegen)

    def _load_overload(self, sig, target_context):
        compiled = super()._load_overload(sig, target_context)
        if compiled is not None:
            # Registered under this process's argument types (the pickled signature holds
            # stand-ins for the function arguments' dispatchers).
            compiled = compiled._replace(signature=compiled.signature.replace(args=tuple(sig)))
        return compiled


def enable(dispatcher) -> None:
    """Caches `dispatcher`'s compiled specialisations on disk with `StableFunctionCache`."""
    dispatcher._cache = StableFunctionCache(dispatcher.py_func)
