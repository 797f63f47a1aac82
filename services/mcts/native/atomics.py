"""Atomic operations on array elements for numba kernels that run in several threads at once.

Numba exposes no atomic operations on CPU arrays, so these emit LLVM's atomic instructions through
`numba.extending.intrinsic`, with the orderings of the C11 memory model (LLVM's "monotonic" is
C11's relaxed). Each takes a C-contiguous array, an index and, where needed, values of the
array's dtype (int32, int64 or float64 as listed).

- `fetch_add(a, i, v)`: `a[i] += v`, returns the old value (int32 / int64 / float64; relaxed:
  statistics, not synchronisation).
- `compare_exchange(a, i, expected, desired)`: sets `a[i] = desired` when it holds `expected`;
  returns the old value (int64; acquire-release).
- `exchange_acquire(a, i, v)`: `a[i] = v`, returns the old value (int64; acquire: a lock's taking).
- `load_acquire(a, i)`, `store_release(a, i, v)`: publication of data written before the store
  to a reader after the load (int32 / int64).
- `load_relaxed(a, i)`: a read that the compiler may not hoist out of a waiting loop (int32 /
  int64).
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_INTEGERS = (types.int32, types.int64)
_NUMBERS = (types.int32, types.int64, types.float64)


def _element(context, builder, signature, args):
    """LLVM pointer to `args[0][args[1]]`."""
    array_type, index_type = signature.args[0], signature.args[1]
    array = context.make_array(array_type)(context, builder, args[0])
    index = context.cast(builder, args[1], index_type, types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, array, [index])


def _array_of(array, dtypes) -> bool:
    return isinstance(array, types.Array) and array.dtype in dtypes


def _align(dtype) -> int:
    return 4 if dtype == types.int32 else 8


@intrinsic
def fetch_add(typingctx, array, index, value):
    """`array[index] += value` atomically (relaxed); returns the old value."""
    if not _array_of(array, _NUMBERS):
        return None
    dtype = array.dtype
    sig = dtype(array, index, dtype)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        value = context.cast(builder, args[2], signature.args[2], dtype)
        operation = "fadd" if dtype == types.float64 else "add"
        return builder.atomic_rmw(operation, ptr, value, "monotonic")

    return sig, codegen


@intrinsic
def compare_exchange(typingctx, array, index, expected, desired):
    """`array[index] = desired` if it equals `expected` (acquire-release); returns the old
    value, so the exchange happened when the result equals `expected`."""
    if not _array_of(array, (types.int64,)):
        return None
    sig = types.int64(array, index, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        pair = builder.cmpxchg(ptr, args[2], args[3], "acq_rel", "acquire")
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def exchange_acquire(typingctx, array, index, value):
    """`old = array[index]; array[index] = value` atomically (acquire); returns old."""
    if not _array_of(array, (types.int64,)):
        return None
    sig = types.int64(array, index, types.int64)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        return builder.atomic_rmw("xchg", ptr, args[2], "acquire")

    return sig, codegen


@intrinsic
def load_acquire(typingctx, array, index):
    """`array[index]` with acquire ordering."""
    if not _array_of(array, _INTEGERS):
        return None
    sig = array.dtype(array, index)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        return builder.load_atomic(ptr, "acquire", _align(signature.args[0].dtype))

    return sig, codegen


@intrinsic
def load_relaxed(typingctx, array, index):
    """`array[index]` as an atomic load with relaxed (monotonic) ordering."""
    if not _array_of(array, _INTEGERS):
        return None
    sig = array.dtype(array, index)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        return builder.load_atomic(ptr, "monotonic", _align(signature.args[0].dtype))

    return sig, codegen


@intrinsic
def store_release(typingctx, array, index, value):
    """`array[index] = value` with release ordering."""
    if not _array_of(array, _INTEGERS):
        return None
    dtype = array.dtype
    sig = types.void(array, index, dtype)

    def codegen(context, builder, signature, args):
        ptr = _element(context, builder, signature, args)
        value = context.cast(builder, args[2], signature.args[2], dtype)
        builder.store_atomic(value, ptr, "release", _align(dtype))
        return context.get_dummy_value()

    return sig, codegen
