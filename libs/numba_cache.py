"""numba's on-disk cache for kernels compiled as closures (one per board size, say), whose
captured values include other numba functions.

numba keys a closure's cache entry by the pickled values it captured; a captured numba function
pickles with an identifier drawn afresh in every process, so such a closure never finds its entry
and compiles again in each process (seconds for the Connect Four solver). `enable(dispatcher)`
keys it instead by what it captured (`closure_key`): numbers and strings by their repr, arrays by
their bytes, numba functions by their module, qualified name, bytecode and, in turn, what they
captured; the same in every process, and different for two board sizes. numba still drops an
entry when the defining file changes; an edit of a captured function changes its bytecode hash,
so the key, too.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from numba.core.caching import FunctionCache


def closure_key(function: Any, seen: frozenset[int] = frozenset()) -> tuple:
    """What `function` (a Python function) captured, the same in every process (module doc);
    () for a function without a closure. A function capturing itself (recursion) is named once.
    """
    cells = []
    for cell in function.__closure__ or ():
        value = cell.cell_contents
        if hasattr(value, "py_func"):
            inner = value.py_func
            if id(inner) in seen or inner is function:
                cells.append(("recursion", inner.__qualname__))
                continue
            cells.append(("function", inner.__module__, inner.__qualname__,
                          hashlib.sha256(inner.__code__.co_code).hexdigest(),
                          closure_key(inner, seen | {id(function)})))
        elif isinstance(value, np.ndarray):
            cells.append(("array", str(value.dtype), value.shape,
                          hashlib.sha256(value.tobytes()).hexdigest()))
        else:
            cells.append(repr(value))
    return tuple(cells)


class ClosureCache(FunctionCache):
    """numba's `FunctionCache` whose index key hashes `closure_key` instead of the pickled
    closure."""

    def _index_key(self, sig, codegen):
        code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        captured = hashlib.sha256(repr(closure_key(self._py_func)).encode()).hexdigest()
        return (sig, codegen.magic_tuple(), (code, captured))


def enable(*dispatchers: Any) -> None:
    """Caches each numba dispatcher's compiled code on disk under `ClosureCache`'s keys."""
    for dispatcher in dispatchers:
        dispatcher._cache = ClosureCache(dispatcher.py_func)
