"""Lowerings of the cumulative, scatter, sort, convolution, window and random-bits prims.

Op semantics: the StableHLO spec sections named per function
(https://openxla.org/stablehlo/spec): reduce_window, scatter, sort, convolution,
rng_bit_generator.
"""

from __future__ import annotations

import math

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo as shlo

from thunder_mlir.ir.dialect import RNG_STREAM_SHIFT

from thunder_mlir.transforms.lowerings import (
    _i64s, _int, _is_real_float, _reduce_init, add_combiner, compare, hlo, splat)


def _pad_attr(pairs) -> ir.Attribute:
    i64 = ir.IntegerType.get_signless(64)
    arr = np.array(pairs, dtype="int64").reshape(len(pairs), 2)
    return ir.DenseElementsAttr.get(arr, type=i64)


def _body(kind: str, st: ir.Type, a, b, loc):
    """Scalar combiner of ``kind`` applied to block arguments a, b (StableHLO ops)."""
    if kind in ("sum", "add", "cumsum"):
        return hlo("stablehlo.add", [a, b], [st], loc=loc).result
    if kind in ("mul", "cumprod"):
        return hlo("stablehlo.multiply", [a, b], [st], loc=loc).result
    if kind in ("max", "cummax"):
        return hlo("stablehlo.maximum", [a, b], [st], loc=loc).result
    if kind in ("min", "cummin"):
        return hlo("stablehlo.minimum", [a, b], [st], loc=loc).result
    if kind == "set":
        return b
    if kind == "logcumsumexp":  # max + log1p(exp(min - max)); infinities pass through
        mx = hlo("stablehlo.maximum", [a, b], [st], loc=loc).result
        mn = hlo("stablehlo.minimum", [a, b], [st], loc=loc).result
        d = hlo("stablehlo.subtract", [mn, mx], [st], loc=loc).result
        e = hlo("stablehlo.exponential", [d], [st], loc=loc).result
        lp = hlo("stablehlo.log_plus_one", [e], [st], loc=loc).result
        r = hlo("stablehlo.add", [mx, lp], [st], loc=loc).result
        absm = hlo("stablehlo.abs", [mx], [st], loc=loc).result
        inf = compare(absm, splat(st, math.inf, loc), "EQ", loc)
        return hlo("stablehlo.select", [inf, mx, r], [st], loc=loc).result
    raise ValueError(kind)


def _init(kind: str, e: ir.Type):
    if kind in ("sum", "add", "cumsum"):
        return 0
    if kind in ("mul", "cumprod"):
        return 1
    if kind == "logcumsumexp":
        return -math.inf
    return _reduce_init("reduce_max" if kind in ("max", "cummax") else "reduce_min", e)


def lower_cumulative(kind: str):
    def lower(op, operands, rw):
        """Inclusive scan: reduce_window with window = dim length, low padding n - 1."""
        t, loc = op.result.type, op.location
        rt = ir.RankedTensorType(t)
        dim = _int(op, "dim")
        n = rt.shape[dim]
        st = ir.RankedTensorType.get([], rt.element_type)
        window = [n if i == dim else 1 for i in range(rt.rank)]
        pads = [[n - 1 if i == dim else 0, 0] for i in range(rt.rank)]
        with rw.ip:
            init = splat(st, _init(kind, rt.element_type), loc)
            rwin = hlo("stablehlo.reduce_window", [operands[0], init], [t],
                       {"window_dimensions": _i64s(window), "padding": _pad_attr(pads)}, loc,
                       regions=1)
            add_combiner(rwin, st, loc, lambda a, b: _body(kind, st, a, b, loc))
        rw.replace_op(op, rwin.results)
    return lower


def lower_scatter(op, operands, rw):
    x, idx, upd = operands
    loc = op.location
    xt, it = ir.RankedTensorType(x.type), ir.RankedTensorType(idx.type)
    k = it.shape[-1]
    nb = it.rank - 1
    kind = ir.StringAttr(op.attributes["kind"]).value
    dn = shlo.ScatterDimensionNumbers.get(
        update_window_dims=list(range(nb, nb + xt.rank - k)), inserted_window_dims=list(range(k)),
        input_batching_dims=[], scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=list(range(k)), index_vector_dim=nb)
    st = ir.RankedTensorType.get([], xt.element_type)
    with rw.ip:
        s = hlo("stablehlo.scatter", [x, idx, upd], [op.result.type],
                {"scatter_dimension_numbers": dn,
                 "indices_are_sorted": ir.BoolAttr.get(False),
                 "unique_indices": ir.BoolAttr.get(False)}, loc, regions=1)
        add_combiner(s, st, loc, lambda a, b: _body(kind, st, a, b, loc))
    rw.replace_op(op, s.results)


def lower_argsort(op, operands, rw):
    """stablehlo.sort of (x, iota) with is_stable; comparator orders NaN above everything."""
    x = operands[0]
    loc = op.location
    xt = ir.RankedTensorType(x.type)
    e = xt.element_type
    dim = _int(op, "dim")
    desc = bool(_int(op, "descending"))
    i64 = ir.IntegerType.get_signless(64)
    it = ir.RankedTensorType.get(xt.shape, i64)
    sv, si = ir.RankedTensorType.get([], e), ir.RankedTensorType.get([], i64)
    with rw.ip:
        iota = hlo("stablehlo.iota", [], [it], {"iota_dimension": ir.IntegerAttr.get(i64, dim)},
                   loc).result
        s = hlo("stablehlo.sort", [x, iota], [xt, it],
                {"dimension": ir.IntegerAttr.get(i64, dim), "is_stable": ir.BoolAttr.get(True)},
                loc, regions=1)
        b = ir.Block.create_at_start(s.regions[0], [sv, sv, si, si])
        a_, b_ = b.arguments[0], b.arguments[1]
        with ir.InsertionPoint(b):
            first, second = (b_, a_) if desc else (a_, b_)
            r = compare(first, second, "LT", loc)
            if _is_real_float(e):  # first < second, or second is NaN and first is not
                nan2 = compare(second, second, "NE", loc)
                num1 = compare(first, first, "EQ", loc)
                both = hlo("stablehlo.and", [nan2, num1], [r.type], loc=loc).result
                r = hlo("stablehlo.or", [r, both], [r.type], loc=loc).result
            hlo("stablehlo.return", [r], [], loc=loc)
    rw.replace_op(op, [s.results[1]])


def _arr(op, name):
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def lower_convolution(op, operands, rw):
    rt = ir.RankedTensorType(op.result.type)
    n = rt.rank - 2
    sp = list(range(2, 2 + n))
    dn = shlo.ConvDimensionNumbers.get(
        input_batch_dimension=0, input_feature_dimension=1, input_spatial_dimensions=sp,
        kernel_input_feature_dimension=1, kernel_output_feature_dimension=0,
        kernel_spatial_dimensions=sp, output_batch_dimension=0, output_feature_dimension=1,
        output_spatial_dimensions=sp)
    flat = _arr(op, "padding")
    attrs = {"window_strides": _i64s(_arr(op, "window_strides")),
             "padding": _pad_attr([flat[2 * i:2 * i + 2] for i in range(n)]),
             "lhs_dilation": _i64s(_arr(op, "lhs_dilation")),
             "rhs_dilation": _i64s(_arr(op, "rhs_dilation")),
             "dimension_numbers": dn,
             "feature_group_count": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                       _int(op, "feature_group_count")),
             "batch_group_count": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}
    if isinstance(rt.element_type, (ir.F32Type, ir.F64Type)):
        p = shlo.PrecisionAttr.get("HIGHEST")
        attrs["precision_config"] = ir.ArrayAttr.get([p, p])
    with rw.ip:
        r = hlo("stablehlo.convolution", operands, [op.result.type], attrs, op.location)
    rw.replace_op(op, r.results)


def lower_reduce_window(op, operands, rw):
    loc = op.location
    rt = ir.RankedTensorType(op.result.type)
    st = ir.RankedTensorType.get([], rt.element_type)
    kind = ir.StringAttr(op.attributes["kind"]).value
    flat = _arr(op, "padding")
    with rw.ip:
        rwin = hlo("stablehlo.reduce_window", operands, [op.result.type],
                   {"window_dimensions": _i64s(_arr(op, "window_dimensions")),
                    "window_strides": _i64s(_arr(op, "window_strides")),
                    "padding": _pad_attr([flat[2 * i:2 * i + 2] for i in range(rt.rank)])},
                   loc, regions=1)
        add_combiner(rwin, st, loc, lambda a, b: _body(kind, st, a, b, loc))
    rw.replace_op(op, rwin.results)


def lower_cholesky(op, operands, rw):
    with rw.ip:
        r = hlo("stablehlo.cholesky", operands, [op.result.type],
                {"lower": ir.BoolAttr.get(bool(_int(op, "lower")))}, op.location)
    rw.replace_op(op, r.results)


def lower_triangular_solve(op, operands, rw):
    attrs = {k: ir.BoolAttr.get(bool(_int(op, k))) for k in ("left_side", "lower",
                                                           "unit_diagonal")}
    attrs["transpose_a"] = shlo.TransposeAttr.get(
        "TRANSPOSE" if _int(op, "transpose_a") else "NO_TRANSPOSE")
    with rw.ip:
        r = hlo("stablehlo.triangular_solve", operands, [op.result.type], attrs, op.location)
    rw.replace_op(op, r.results)


def lower_rng_bits(op, operands, rw):
    """stablehlo.rng_bit_generator (spec: rng_bit_generator) with algorithm THREE_FRY and
    state ``tensor<2xui64>`` = [seed, stream << RNG_STREAM_SHIFT] (XLA's ThreeFry reads
    state[0] as the key and state[1] as the first counter); the unsigned bits are
    bitcast to the prim's signless result type."""
    loc, rt = op.location, ir.RankedTensorType(op.result.type)
    width = ir.IntegerType(rt.element_type).width
    u64 = ir.IntegerType.get_unsigned(64)
    stream = _int(op, "stream") << RNG_STREAM_SHIFT
    with rw.ip:
        seed = hlo("stablehlo.bitcast_convert", operands, [ir.RankedTensorType.get([], u64)],
                   loc=loc).result
        seed = hlo("stablehlo.reshape", [seed], [ir.RankedTensorType.get([1], u64)],
                   loc=loc).result
        counter = splat(ir.RankedTensorType.get([1], u64), stream, loc)
        state_t = ir.RankedTensorType.get([2], u64)
        state = hlo("stablehlo.concatenate", [seed, counter], [state_t],
                    {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
                    loc).result
        bits_t = ir.RankedTensorType.get(rt.shape, ir.IntegerType.get_unsigned(width))
        gen = hlo("stablehlo.rng_bit_generator", [state], [state_t, bits_t],
                  {"rng_algorithm": shlo.RngAlgorithmAttr.get("THREE_FRY")}, loc)
        r = hlo("stablehlo.bitcast_convert", [gen.results[1]], [rt], loc=loc)
    rw.replace_op(op, r.results)


EXTRA_LOWERINGS = {
    "rng_bits": lower_rng_bits,
    "cholesky": lower_cholesky,
    "triangular_solve": lower_triangular_solve,
    **{k: lower_cumulative(k) for k in ("cumprod", "cummax", "cummin", "logcumsumexp")},
    "scatter": lower_scatter,
    "argsort": lower_argsort,
    "convolution": lower_convolution,
    "reduce_window": lower_reduce_window,
}
