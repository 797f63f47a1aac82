"""A software prefetch for numba kernels: LLVM's `llvm.prefetch` (x86-64: PREFETCHT0).

`prefetch(a, i)` asks the processor to bring the cache line holding `a[i]` (a C-contiguous
array) into every cache level, without waiting for it and without faulting: the search
kernels issue it for rows they will read a few dozen cycles later, so that the memory
latency overlaps work instead of following it. It changes no value; `i` must be a valid
index (not checked, no wraparound of negative indices).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ = 0
_HIGH_LOCALITY = 3
_DATA_CACHE = 1


@intrinsic
def prefetch(typingctx, array, index):
    """Prefetches the line of `array[index]` for reading (no result)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        data = context.make_array(array_type)(context, builder, args[0])
        position = context.cast(builder, args[1], index_type, types.intp)
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, [position],
                                           wraparound=False)
        i32 = ir.IntType(32)
        byte_pointer = ir.IntType(8).as_pointer()
        function_type = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        function = cgutils.get_or_insert_function(builder.module, function_type,
                                                  "llvm.prefetch.p0")
        builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(_READ),
                                i32(_HIGH_LOCALITY), i32(_DATA_CACHE)])
        return context.get_dummy_value()

    return sig, codegen
