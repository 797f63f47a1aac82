"""UCB1 selection over eight children at once, in explicit SIMD instructions, for numba kernels.

LLVM does not vectorise the search kernel's score loop by itself (the scores go to a scratch
array that could alias the statistics, and a Connect Four node has only seven children), so
`ucb1_lanes` writes the vector code directly through `numba.extending.intrinsic`: one 8-wide
load of the visit counts and one of the value sums, the UCB1 scores
`value_sum / n + c * sqrt(ln N / n)` of all eight lanes in the same IEEE operations as the scalar
formula (correctly rounded division and square root, no fused multiply-add: the same bits), and
the choice without a branch: the first unvisited lane if any, else the first lane of the highest
score (a horizontal maximum, an equality mask, a count of trailing zeros). On AVX-512 each of
these operations is one instruction for all eight lanes; on narrower machines LLVM splits the
vectors, with the same results.

The loads read eight consecutive elements whatever `count` is: the caller keeps
`start + LANES <= len(visits)` (lanes past `count` are read, then ignored).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
"""Children scored per call."""


def _pointer(context, builder, array_type, array_value, index, index_type, element):
    """LLVM pointer to LANES elements of type `element` from `array[index]` on."""
    data = context.make_array(array_type)(context, builder, array_value)
    position = context.cast(builder, index, index_type, types.intp)
    pointer = cgutils.get_item_pointer(context, builder, array_type, data, [position],
                                       wraparound=False)
    return builder.bitcast(pointer, ir.VectorType(element, LANES).as_pointer())


def _call(builder, name, return_type, arguments):
    function_type = ir.FunctionType(return_type, [a.type for a in arguments])
    function = cgutils.get_or_insert_function(builder.module, function_type, name)
    return builder.call(function, arguments)


def _splat(builder, value, element):
    """A vector of LANES copies of the scalar `value`."""
    vector_type = ir.VectorType(element, LANES)
    one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value,
                                 ir.IntType(32)(0))
    return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                              [0] * LANES))


def _first_set(builder, mask):
    """Index of the lowest set lane of an <LANES x i1> mask as int64 (LANES when none)."""
    bits = builder.bitcast(mask, ir.IntType(LANES))
    # Above the lanes, a set bit makes an empty mask count LANES trailing zeros.
    wide = builder.or_(builder.zext(bits, ir.IntType(16)), ir.IntType(16)(1 << LANES))
    zeros = _call(builder, "llvm.cttz.i16", ir.IntType(16), [wide, ir.IntType(1)(1)])
    return builder.zext(zeros, ir.IntType(64))


def _maximum(builder, vector):
    """The largest lane of a <LANES x double> without NaNs, by halving: three vector maxima
    (LLVM's NaN-aware `vector.reduce.fmax` compiles to a chain of seven scalar ones)."""
    width = LANES
    while width > 1:
        width //= 2
        upper = builder.shuffle_vector(
            vector, vector,
            ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                        [width + i if i < width else i for i in range(LANES)]))
        vector = builder.select(builder.fcmp_ordered(">", upper, vector), upper, vector)
    return builder.extract_element(vector, ir.IntType(32)(0))


@intrinsic
def ucb1_lanes(typingctx, visits, value_sum, start, count, log_parent_n, exploration):
    """Scores children `start .. start + count - 1` (1 <= count <= LANES) by UCB1.

    Args:
        visits: int32 or int64 [>= start + LANES], visit counts n.
        value_sum: float64 [>= start + LANES], value sums.
        start, count: the children (int64).
        log_parent_n: ln N of the parent (float64).
        exploration: c (float64, finite).

    Returns:
        (unvisited, best, best_score): the offset from `start` of the first child with n = 0
        (LANES when none), the offset of the first child of the highest score
        `value_sum / n + c * sqrt(ln N / n)` among the visited ones (its score is -inf when
        all are unvisited), and that score; int64, int64, float64.
    """
    if not (isinstance(visits, types.Array) and visits.dtype in (types.int32, types.int64)
            and isinstance(value_sum, types.Array) and value_sum.dtype == types.float64):
        return None
    result_type = types.Tuple((types.int64, types.int64, types.float64))
    sig = result_type(visits, value_sum, start, count, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        f64 = ir.DoubleType()
        i64 = ir.IntType(64)
        lanes_f64 = ir.VectorType(f64, LANES)
        lanes_i64 = ir.VectorType(i64, LANES)
        count_type = ir.IntType(signature.args[0].dtype.bitwidth)
        visits_pointer = _pointer(context, builder, signature.args[0], args[0], args[2],
                                  signature.args[2], count_type)
        sums_pointer = _pointer(context, builder, signature.args[1], args[1], args[2],
                                signature.args[2], f64)
        n = builder.sext(builder.load(visits_pointer, align=4), lanes_i64)
        sums = builder.load(sums_pointer, align=8)
        count = context.cast(builder, args[3], signature.args[3], types.int64)
        lane = ir.Constant(lanes_i64, list(range(LANES)))
        active = builder.icmp_signed("<", lane, _splat(builder, count, i64))
        unvisited = builder.and_(active, builder.icmp_signed("==", n, ir.Constant(lanes_i64,
                                                                                  [0] * LANES)))
        visited = builder.and_(active, builder.not_(unvisited))
        n_float = builder.sitofp(n, lanes_f64)
        mean = builder.fdiv(sums, n_float)
        ratio = builder.fdiv(_splat(builder, args[4], f64), n_float)
        root = _call(builder, "llvm.sqrt.v8f64", lanes_f64, [ratio])
        score = builder.fadd(mean, builder.fmul(_splat(builder, args[5], f64), root))
        minus_infinity = ir.Constant(lanes_f64, [float("-inf")] * LANES)
        score = builder.select(visited, score, minus_infinity)
        best_score = _maximum(builder, score)
        best = _first_set(builder, builder.fcmp_ordered("==", score,
                                                        _splat(builder, best_score, f64)))
        return context.make_tuple(builder, result_type,
                                  [_first_set(builder, unvisited), best, best_score])

    return sig, codegen
