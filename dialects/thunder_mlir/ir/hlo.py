"""StableHLO emission helpers and the lowering patterns of the prims that do not lower 1:1.

``prim_defs.py`` names each prim's lowering (``PrimDef.lower``): a StableHLO/CHLO op name
(``one_to_one``) or one of the patterns here; ``lower-to-stablehlo`` applies them. Each pattern
receives the op, its (converted) operands and the conversion rewriter, builds the new ops
under ``rw.ip`` with the op's location, and replaces the op. Op semantics: the StableHLO
spec (https://openxla.org/stablehlo/spec); CHLO ops are used where StableHLO has none
(XLA legalizes them itself).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Callable

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo as shlo

from thunder_mlir.ir import attrs, sharding
from thunder_mlir.ir.dialect import RNG_STREAM_SHIFT
from thunder_mlir.ir.dtypes import complex_splat

Lowering = Callable  # (op, operands, rw) -> None


def hlo(name: str, operands, result_types, attrs=None, loc=None, regions: int = 0):
    """Create one StableHLO/CHLO op at the current insertion point; returns the Operation."""
    return ir.Operation.create(name, results=list(result_types), operands=list(operands),
                               attributes=attrs or {}, regions=regions, loc=loc)


def _elem(t: ir.Type) -> ir.Type:
    return ir.RankedTensorType(t).element_type


def _is_real_float(e: ir.Type) -> bool:
    return isinstance(e, (ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type))


def _is_unsigned(e: ir.Type) -> bool:
    return isinstance(e, ir.IntegerType) and (e.is_unsigned or e.width == 1)


def scalar_attr(e: ir.Type, value) -> ir.Attribute:
    """The scalar attribute of real element type ``e`` holding ``value``."""
    if _is_real_float(e):
        return ir.FloatAttr.get(e, float(value))
    if isinstance(e, ir.IntegerType) and e.width == 1:
        return ir.IntegerAttr.get(e, 1 if value else 0)
    return ir.IntegerAttr.get(e, int(value))


def splat(t: ir.Type, value, loc, like: ir.Value | None = None) -> ir.Value:
    """stablehlo.constant of type ``t`` with every element equal to ``value``. A type with
    ``?`` dims (symbolic sizes) takes the shape of ``like``: a 0-d constant broadcast by
    stablehlo.dynamic_broadcast_in_dim; raises DynamicShapeFallback without ``like``."""
    t = ir.RankedTensorType(t)
    if not t.has_static_shape:
        if like is None:
            from thunder_mlir.errors import DynamicShapeFallback

            raise DynamicShapeFallback("a constant of symbolic shape with no value to take "
                                       "the shape from")
        scalar = splat(ir.RankedTensorType.get([], t.element_type), value, loc)
        return hlo("stablehlo.dynamic_broadcast_in_dim", [scalar, shape_of(like, loc)], [t],
                   {"broadcast_dimensions": _i64s([])}, loc).result
    if isinstance(t.element_type, ir.ComplexType):
        attr = complex_splat(t, value)
    else:
        attr = ir.DenseElementsAttr.get_splat(t, scalar_attr(t.element_type, value))
    return hlo("stablehlo.constant", [], [t], {"value": attr}, loc).result


def shape_of(x: ir.Value, loc) -> ir.Value:
    """The shape of ``x`` as a ``tensor<rank x i64>``: constants for static dims,
    stablehlo.get_dimension_size for ``?`` dims (StableHLO spec: get_dimension_size)."""
    xt = ir.RankedTensorType(x.type)
    i64 = ir.IntegerType.get_signless(64)
    one = ir.RankedTensorType.get([1], i64)
    parts = []
    for d in range(xt.rank):
        if xt.is_dynamic_dim(d):
            n = hlo("stablehlo.get_dimension_size", [x],
                    [ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))],
                    {"dimension": ir.IntegerAttr.get(i64, d)}, loc).result
            n = hlo("stablehlo.convert", [n], [ir.RankedTensorType.get([], i64)], loc=loc).result
            parts.append(hlo("stablehlo.reshape", [n], [one], loc=loc).result)
        else:
            parts.append(hlo("stablehlo.constant", [], [one], {"value": ir.DenseElementsAttr.get(
                np.array([xt.get_dim_size(d)], dtype=np.int64), type=i64)}, loc).result)
    rt = ir.RankedTensorType.get([xt.rank], i64)
    if len(parts) == 1:
        return parts[0]
    return hlo("stablehlo.concatenate", parts, [rt], {"dimension": ir.IntegerAttr.get(i64, 0)},
               loc).result


def _i64s(v) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(list(v))


def _arr(op, name) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _int(op, name) -> int:
    return attrs.get_int(op, name)


# ------------------------------------------------------------------ elementwise
def one_to_one(target: str) -> Lowering:
    """The pattern replacing a prim by the StableHLO/CHLO op ``target`` of the same operands
    and result type (``PrimDef.lower`` given as an op name)."""
    def lower(op, operands, rw):
        with rw.ip:
            new = hlo(target, operands, [op.result.type], loc=op.location)
        rw.replace_op(op, new.results)
    return lower


def compare(x: ir.Value, y: ir.Value, direction: str, loc) -> ir.Value:
    """stablehlo.compare with the comparison type implied by the element type."""
    e = _elem(x.type)
    kind = "FLOAT" if _is_real_float(e) or isinstance(e, ir.ComplexType) else (
        "UNSIGNED" if _is_unsigned(e) else "SIGNED")
    rt = ir.RankedTensorType.get(ir.RankedTensorType(x.type).shape, ir.IntegerType.get_signless(1))
    return hlo("stablehlo.compare", [x, y], [rt], {
        "comparison_direction": shlo.ComparisonDirectionAttr.get(direction),
        "compare_type": shlo.ComparisonTypeAttr.get(kind)}, loc).result


def lower_compare(direction: str) -> Lowering:
    """The pattern of a comparison prim: stablehlo.compare ``direction`` (spec: compare)."""
    def lower(op, operands, rw):
        with rw.ip:
            r = compare(operands[0], operands[1], direction, op.location)
        rw.replace_op(op, [r])
    return lower


def lower_scaled(base_op: str, pre: float | None, post: float | None) -> Lowering:
    """exp2(x) = exp(x ln2); log2(x) = log(x) / ln2; log10(x) = log(x) / ln10."""
    def lower(op, operands, rw):
        t, loc = op.result.type, op.location
        with rw.ip:
            x = operands[0]
            if pre is not None:
                x = hlo("stablehlo.multiply", [x, splat(t, pre, loc, like=x)], [t],
                        loc=loc).result
            y = hlo(base_op, [x], [t], loc=loc).result
            if post is not None:
                y = hlo("stablehlo.divide", [y, splat(t, post, loc, like=y)], [t],
                        loc=loc).result
        rw.replace_op(op, [y])
    return lower


def lower_trunc(op, operands, rw):
    """trunc(x) = x < 0 ? ceil(x) : floor(x) (StableHLO has no trunc)."""
    t, loc, x = op.result.type, op.location, operands[0]
    with rw.ip:
        neg = compare(x, splat(t, 0.0, loc, like=x), "LT", loc)
        c = hlo("stablehlo.ceil", [x], [t], loc=loc).result
        f = hlo("stablehlo.floor", [x], [t], loc=loc).result
        r = hlo("stablehlo.select", [neg, c, f], [t], loc=loc)
    rw.replace_op(op, r.results)


def lower_reciprocal(op, operands, rw):
    """reciprocal(x) = 1 / x (stablehlo.divide)."""
    t, loc = op.result.type, op.location
    with rw.ip:
        r = hlo("stablehlo.divide", [splat(t, 1.0, loc, like=operands[0]), operands[0]], [t],
                loc=loc)
    rw.replace_op(op, r.results)


# ----------------------------------------------------------------- structural
def lower_with_attrs(target: str, renames: dict[str, str]) -> Lowering:
    """The pattern replacing a prim by the StableHLO op ``target`` with the prim's
    attributes renamed (``renames``: prim attribute -> StableHLO attribute)."""
    def lower(op, operands, rw):
        attrs = {new: op.attributes[old] for old, new in renames.items()}
        with rw.ip:
            r = hlo(target, operands, [op.result.type], attrs, op.location)
        rw.replace_op(op, r.results)
    return lower


def lower_full(op, operands, rw):
    """full: a splat stablehlo.constant of the result type."""
    value = attrs.get_value(op, "value")  # (float or int, as the prim recorded it)
    with rw.ip:
        r = splat(op.result.type, value, op.location)
    rw.replace_op(op, [r])


def lower_constant(op, operands, rw):
    """constant: stablehlo.constant with the prim's ``value``."""
    with rw.ip:
        r = hlo("stablehlo.constant", [], [op.result.type], {"value": op.attributes["value"]},
                op.location)
    rw.replace_op(op, r.results)


def lower_identity(op, operands, rw):
    """stop_gradient / no_derivative: autograd markers with no run-time effect."""
    rw.replace_op(op, [operands[0]])


def lower_concatenate(op, operands, rw):
    """stablehlo.concatenate along the prim's ``dimension``."""
    with rw.ip:
        r = hlo("stablehlo.concatenate", operands, [op.result.type],
                {"dimension": op.attributes["dimension"]}, op.location)
    rw.replace_op(op, r.results)


def lower_iota(op, operands, rw):
    """stablehlo.iota along the prim's ``dimension``."""
    with rw.ip:
        r = hlo("stablehlo.iota", [], [op.result.type],
                {"iota_dimension": op.attributes["dimension"]}, op.location)
    rw.replace_op(op, r.results)


def add_combiner(region_op, st: ir.Type, loc, combine) -> None:
    """Fill ``region_op``'s one region with the scalar reducer ``(a, b) -> combine(a, b)``
    on 0-d tensors of type ``st`` (the body of stablehlo.reduce, reduce_window, scatter)."""
    b = ir.Block.create_at_start(region_op.regions[0], [st, st])
    with ir.InsertionPoint(b):
        hlo("stablehlo.return", [combine(*b.arguments)], [], loc=loc)


def binary(name: str, st: ir.Type, loc):
    """A combiner applying the elementwise StableHLO op ``name`` (for ``add_combiner``)."""
    return lambda a, b: hlo(name, [a, b], [st], loc=loc).result


# ------------------------------------------------------------------ reductions
def _reduce_init(kind: str, e: ir.Type):
    if kind in ("reduce_sum", "reduce_or"):
        return 0
    if kind in ("reduce_prod", "reduce_and"):
        return 1
    if _is_real_float(e):
        return -math.inf if kind == "reduce_max" else math.inf
    w = ir.IntegerType(e).width
    if w == 1:
        return 0 if kind == "reduce_max" else 1
    if ir.IntegerType(e).is_unsigned:
        return 0 if kind == "reduce_max" else (1 << w) - 1
    return -(1 << (w - 1)) if kind == "reduce_max" else (1 << (w - 1)) - 1


_REDUCE_BODY = {"reduce_sum": "stablehlo.add", "reduce_prod": "stablehlo.multiply",
                "reduce_max": "stablehlo.maximum", "reduce_min": "stablehlo.minimum",
                "reduce_and": "stablehlo.and", "reduce_or": "stablehlo.or"}


def lower_reduce(kind: str) -> Lowering:
    """The pattern of a reduce_* prim: stablehlo.reduce over ``dims`` with the
    combiner of ``kind`` and its identity as the initial value."""
    def lower(op, operands, rw):
        t, loc = op.result.type, op.location
        e = _elem(t)
        st = ir.RankedTensorType.get([], e)
        with rw.ip:
            init = splat(st, _reduce_init(kind, e), loc)
            red = hlo("stablehlo.reduce", [operands[0], init], [t],
                      {"dimensions": op.attributes["dims"]}, loc, regions=1)
            add_combiner(red, st, loc, binary(_REDUCE_BODY[kind], st, loc))
        rw.replace_op(op, red.results)
    return lower


def lower_argreduce(kind: str) -> Lowering:
    """Variadic stablehlo.reduce over (value, index); NaN counts as the extreme, ties -> first."""
    direction = "GT" if kind == "argmax" else "LT"

    def lower(op, operands, rw):
        loc = op.location
        x = operands[0]
        xt = ir.RankedTensorType(x.type)
        e = xt.element_type
        dim = _int(op, "dim")
        i64 = ir.IntegerType.get_signless(64)
        it = ir.RankedTensorType.get(xt.shape, i64)
        sv, si = ir.RankedTensorType.get([], e), ir.RankedTensorType.get([], i64)
        rt = op.result.type
        rv = ir.RankedTensorType.get(ir.RankedTensorType(rt).shape, e)
        with rw.ip:
            if xt.has_static_shape:
                idx = hlo("stablehlo.iota", [], [it],
                          {"iota_dimension": ir.IntegerAttr.get(i64, dim)}, loc).result
            else:  # symbolic sizes: the shape of x, read at run time
                idx = hlo("stablehlo.dynamic_iota", [shape_of(x, loc)], [it],
                          {"iota_dimension": ir.IntegerAttr.get(i64, dim)}, loc).result
            init_v = splat(sv, _reduce_init("reduce_max" if kind == "argmax" else "reduce_min", e),
                           loc)
            init_i = splat(si, 0, loc)
            red = hlo("stablehlo.reduce", [x, idx, init_v, init_i], [rv, rt],
                      {"dimensions": _i64s([dim])}, loc, regions=1)
            b = ir.Block.create_at_start(red.regions[0], [sv, si, sv, si])
            av, ai, bv, bi = b.arguments
            with ir.InsertionPoint(b):
                better = compare(av, bv, direction, loc)
                if _is_real_float(e):
                    better = hlo("stablehlo.or", [better, compare(av, av, "NE", loc)],
                                 [better.type], loc=loc).result
                eq = compare(av, bv, "EQ", loc)
                first = compare(ai, bi, "LT", loc)
                tie = hlo("stablehlo.and", [eq, first], [eq.type], loc=loc).result
                pick_a = hlo("stablehlo.or", [better, tie], [eq.type], loc=loc).result
                v = hlo("stablehlo.select", [pick_a, av, bv], [sv], loc=loc).result
                i = hlo("stablehlo.select", [pick_a, ai, bi], [si], loc=loc).result
                hlo("stablehlo.return", [v, i], [], loc=loc)
        rw.replace_op(op, [red.results[1]])
    return lower


def lower_cumsum(op, operands, rw):
    """Inclusive prefix sum: stablehlo.reduce_window with a window of the full dim length."""
    t, loc = op.result.type, op.location
    rt = ir.RankedTensorType(t)
    dim, n = _int(op, "dim"), rt.shape[_int(op, "dim")]
    st = ir.RankedTensorType.get([], rt.element_type)
    window = [n if i == dim else 1 for i in range(rt.rank)]
    pads = [[n - 1 if i == dim else 0, 0] for i in range(rt.rank)]
    i64 = ir.IntegerType.get_signless(64)
    pad_attr = ir.DenseElementsAttr.get(
        np.array(pads, dtype="int64").reshape(rt.rank, 2),
        type=i64)
    with rw.ip:
        init = splat(st, 0, loc)
        rwin = hlo("stablehlo.reduce_window", [operands[0], init], [t],
                   {"window_dimensions": _i64s(window), "padding": pad_attr}, loc, regions=1)
        add_combiner(rwin, st, loc, binary("stablehlo.add", st, loc))
    rw.replace_op(op, rwin.results)


# -------------------------------------------------------------- linear algebra
def lower_dot_general(op, operands, rw):
    """stablehlo.dot_general; f32/f64 at precision HIGHEST (no TF32, as torch); bf16/f16
    accumulated in f32 and rounded once (``_accumulated_in_f32``)."""
    e = _elem(op.result.type)
    dn = shlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=_arr(op, "lhs_batching_dimensions"),
        rhs_batching_dimensions=_arr(op, "rhs_batching_dimensions"),
        lhs_contracting_dimensions=_arr(op, "lhs_contracting_dimensions"),
        rhs_contracting_dimensions=_arr(op, "rhs_contracting_dimensions"))
    attrs = {"dot_dimension_numbers": dn}
    narrow = _widened_16bit(op) if LOWERING_OPTIONS["narrow_dots"] else None
    if narrow is not None:
        operands = narrow  # (a float32 result of 16-bit operands: no precision needed)
    elif isinstance(e, (ir.F32Type, ir.F64Type)):
        # full fp32 accuracy everywhere, as torch's default (no TF32 on GPUs)
        p = shlo.PrecisionAttr.get("HIGHEST")
        attrs["precision_config"] = ir.ArrayAttr.get([p, p])
    with rw.ip:
        if narrow is not None and _is_gemv(op):
            r = _gemv_as_two_row_gemm(operands, op.result.type, attrs, op.location)
        else:
            r = _accumulated_in_f32("stablehlo.dot_general", operands, op.result.type,
                                    attrs, op.location)
    rw.replace_op(op, [r])


def _is_gemv(op) -> bool:
    """Whether ``op`` is a matrix-vector product ``[1, K] x [K, N]`` or ``[1, K] x [N, K]``
    (one row of activations times a weight, as a decode step's linear layers are), with
    static sizes and no batching dimensions."""
    lt, rt = (ir.RankedTensorType(v.type) for v in op.operands)
    return (lt.has_static_shape and rt.has_static_shape and lt.rank == 2 and rt.rank == 2
            and lt.shape[0] == 1 and list(_arr(op, "lhs_contracting_dimensions")) == [1]
            and not list(_arr(op, "lhs_batching_dimensions")))


def _gemv_as_two_row_gemm(operands, result_type: ir.Type, attrs: dict, loc) -> ir.Value:
    """A ``[1, K]`` row times a 16-bit weight, as a two-row gemm whose first row is taken:
    ``slice(dot(broadcast(x, [2, K]), w))[0:1]``, the same products and float32 sums.

    XLA:GPU rewrites a one-row dot into a multiply and a reduction (its algebraic
    simplifier's dot strength reduction) and, for a weight reduced along its major
    dimension (GPT-2's ``Conv1D``, ``x @ W`` with ``W`` of shape ``[K, N]``), writes the
    float32 product ``[K, N]`` to memory before reducing it: measured compiling for an
    H100 (jaxlib 0.12.0.1), a ``[1, 3072] x [3072, 768]`` bf16 layer moved 23.6 MB, 5x
    the weight's 4.7 MB. A two-row dot is a gemm (Triton), which reads the weight once:
    4.9 MB; in 8 of 8 shapes measured (K, N of 768, 2304, 3072, both weight layouts) it
    moved no more bytes than the one-row dot."""
    x, w = operands
    xt = ir.RankedTensorType(x.type)
    rt = ir.RankedTensorType(result_type)
    two = hlo("stablehlo.broadcast_in_dim", [x],
              [ir.RankedTensorType.get([2, xt.shape[1]], xt.element_type)],
              {"broadcast_dimensions": _i64s([0, 1])}, loc).result
    wide = ir.RankedTensorType.get([2, rt.shape[1]], rt.element_type)
    r = hlo("stablehlo.dot_general", [two, w], [wide], attrs, loc).result
    return hlo("stablehlo.slice", [r], [result_type],
               {"start_indices": _i64s([0, 0]), "limit_indices": _i64s([1, rt.shape[1]]),
                "strides": _i64s([1, 1])}, loc).result


def _widened_16bit(op) -> list | None:
    """The 16-bit values of a float32 ``dot_general`` both of whose operands are converted
    from one 16-bit float type (``thunder.convert_element_type``: what ATen's opmath rule
    writes for a 16-bit addmm or baddbmm, frontend/symbols/registry.py ``with_opmath``),
    else None. The product of two 16-bit floats is exact in float32, so a dot of the
    16-bit values with a float32 result (StableHLO's preferred element type) computes the
    same products and float32 sums; XLA:GPU then runs a 16-bit tensor-core gemm instead of
    a float32 one at precision HIGHEST (on an H100, 989 against 67 TFLOP/s)."""
    if not isinstance(_elem(op.result.type), ir.F32Type):
        return None
    sources = []
    for v in op.operands:
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.name != "thunder.convert_element_type":
            return None
        src = owner.operands[0]
        if not isinstance(_elem(src.type), (ir.BF16Type, ir.F16Type)):
            return None
        sources.append(src)
    if str(_elem(sources[0].type)) != str(_elem(sources[1].type)):
        return None
    return sources


def lower_convert_element_type(op, operands, rw):
    """``stablehlo.convert`` of ``x`` to the result's element type; on the GPU target
    (``narrow_dots``), a 16-bit float widened to float32 to be added to a narrowed dot's
    float32 result (``_gemm_bias``) comes out of ``stablehlo.optimization_barrier``.

    That sum is ATen's opmath ``addmm`` (``convert(bias) + x @ w``, rounded once: what
    cuBLASLt's bias epilogue computes). XLA:GPU's Triton gemm fusion (``GemmFusion``,
    xla/backends/gpu/transforms/gemm_fusion.cc ``FuseTowardUsers``) takes into the gemm's
    epilogue an add whose other operand is a broadcast operand of the fusion, but not one
    that reads a convert: the gemm then wrote its float32 result and another kernel added
    the bias and rounded. Behind the barrier the widened bias is an operand of its own and
    the gemm writes the rounded 16-bit result itself, the same arithmetic. Measured for an
    H100 (jaxlib 0.12.0.1), ``[2048, 768] x [768, 2304]`` bf16 with a bias: 2 kernels,
    51.4 MiB, 16.1 us roofline -> the gemm alone, 15.4 MiB, 7.3 us.

    The biases that are arguments of a region function are widened together, in one
    kernel (``_widened_gemm_biases``); one widened apart is a kernel of its own."""
    with rw.ip:
        if not (LOWERING_OPTIONS["narrow_dots"] and _gemm_bias(op)):
            r = hlo("stablehlo.convert", operands, [op.result.type], loc=op.location).result
        else:
            r = _widened_gemm_biases(op, operands[0])
            if r is None:
                r = hlo("stablehlo.convert", operands, [op.result.type], loc=op.location).result
                r = hlo("stablehlo.optimization_barrier", [r], [r.type], loc=op.location).result
    rw.replace_op(op, [r])


# Per lower-to-stablehlo conversion: region function name -> {(argument number, result
# type): the argument widened by ``_widened_gemm_biases``}. Cleared by ``lowering_options``.
_WIDENED_BIASES: dict[str, dict] = {}


def _widened_gemm_biases(op, x: ir.Value) -> ir.Value | None:
    """The widened value of gemm bias ``x`` (``_gemm_bias(op)``) when ``x`` is an argument of
    a region function, else None. At the first such bias of a function, every one of its
    gemm biases that is a static-shaped argument is widened at the function's start in one
    kernel: the arguments of each 16-bit type flattened and concatenated, converted,
    sliced apart and reshaped, then one ``optimization_barrier`` over all of them. XLA
    makes that one multi-output fusion (a barrier per bias: a kernel each; one barrier over
    separate converts: still a kernel each; the slices taken after the barrier: the gemms
    no longer take the bias into their epilogue. Measured for an H100, jaxlib 0.12.0.1).
    Not in a sharded program (``thunder.mesh``): None."""
    if not isinstance(x.owner, ir.Block) or not ir.RankedTensorType(x.type).has_static_shape:
        return None
    x = ir.BlockArgument(x)
    block = x.owner
    fn = block.owner.operation
    if fn.name != "func.func" or sharding.MESH_ATTR in fn.attributes:
        return None  # (a sharded program: its biases' shardings may differ, and the
        # partitioner would gather them to concatenate them; each is widened apart)
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    if name not in _WIDENED_BIASES:
        _WIDENED_BIASES[name] = _widen_block_biases(block)
    return _WIDENED_BIASES[name].get((x.arg_number, str(op.result.type)))


def _widen_block_biases(block) -> dict:
    """Widen every gemm bias (``_gemm_bias``) that is a static-shaped argument of
    ``block`` at its start, as ``_widened_gemm_biases`` says; returns {(argument number,
    result type): the widened value}."""
    groups: dict[str, list] = {}  # 16-bit type -> [(argument, result type, key)]
    seen = set()
    for o in block.operations:
        o = o.operation
        if o.name != "thunder.convert_element_type" or not _gemm_bias(o):
            continue
        a = o.operands[0]
        key = (ir.BlockArgument(a).arg_number if isinstance(a.owner, ir.Block) else None,
               str(o.results[0].type))
        if key[0] is None or key in seen or a.owner != block or \
                not ir.RankedTensorType(a.type).has_static_shape:
            continue
        seen.add(key)
        groups.setdefault(str(ir.RankedTensorType(a.type).element_type), []).append(
            (ir.BlockArgument(a), o.results[0].type, key))
    keys, values = [], []
    loc = ir.Location.unknown()
    with ir.InsertionPoint.at_block_begin(block):
        for members in groups.values():
            flat = []
            for a, _, _ in members:
                t = ir.RankedTensorType(a.type)
                n = math.prod(t.shape)
                flat.append(a if t.rank == 1 else hlo(
                    "stablehlo.reshape", [a], [ir.RankedTensorType.get([n], t.element_type)],
                    loc=loc).result)
            sizes = [ir.RankedTensorType(f.type).shape[0] for f in flat]
            f32 = ir.F32Type.get()
            cat = flat[0] if len(flat) == 1 else hlo(
                "stablehlo.concatenate", flat,
                [ir.RankedTensorType.get([sum(sizes)], ir.RankedTensorType(flat[0].type)
                                         .element_type)],
                {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
                loc).result
            wide = hlo("stablehlo.convert", [cat],
                       [ir.RankedTensorType.get([sum(sizes)], f32)], loc=loc).result
            start = 0
            for (a, rtype, key), n in zip(members, sizes):
                v = wide if len(flat) == 1 else hlo(
                    "stablehlo.slice", [wide], [ir.RankedTensorType.get([n], f32)],
                    {"start_indices": _i64s([start]), "limit_indices": _i64s([start + n]),
                     "strides": _i64s([1])}, loc).result
                if ir.RankedTensorType(rtype).rank != 1:
                    v = hlo("stablehlo.reshape", [v], [rtype], loc=loc).result
                start += n
                keys.append(key)
                values.append(v)
        if not values:
            return {}
        barrier = hlo("stablehlo.optimization_barrier", values, [v.type for v in values],
                      loc=loc)
    return dict(zip(keys, barrier.results))


def _gemm_bias(op) -> bool:
    """Whether ``op`` (a ``thunder.convert_element_type``) widens a 16-bit float to float32
    and its result, through broadcasts, is an operand of an add whose other operand is a
    float32 dot of 16-bit values (``_widened_16bit``)."""
    src = ir.RankedTensorType(op.operands[0].type).element_type
    if not isinstance(src, (ir.BF16Type, ir.F16Type)) or \
            not isinstance(_elem(op.results[0].type), ir.F32Type):
        return False
    frontier = [op.results[0]]
    while frontier:
        v = frontier.pop()
        for use in v.uses:
            user = use.owner
            name = user.name.split(".", 1)[-1]
            if name == "broadcast_in_dim":
                frontier.append(user.results[0])
            elif name == "add":
                other = user.operands[1 - use.operand_number]
                owner = other.owner
                if not isinstance(owner, ir.Block) and \
                        owner.name == "thunder.dot_general" and \
                        _widened_16bit(owner) is not None and \
                        _f32_bytes(other.type) >= _EPILOGUE_MIN_BYTES:
                    return True
    return False


# The float32 dot result below which a bias stays outside the gemm's epilogue
# (``_gemm_bias``): the widened biases of a region are held from its start to their gemms,
# and a decode step's gemms (8 rows) save less than they hold. Measured for an H100, GPT-2
# decode at batch 8: with them in the epilogue, 164 kernels against 148 at the same
# 0.10 ms roofline, and 1.29x the plain-jax reference's memory beyond the parameters (the
# 330 KiB of widened biases); the prefill's and training's gemms write 6-96 MiB.
_EPILOGUE_MIN_BYTES = 1 << 20


def _f32_bytes(t: ir.Type) -> int:
    """Bytes of a static-shaped float32 tensor type; 0 for a dynamic one."""
    rt = ir.RankedTensorType(t)
    return 4 * math.prod(rt.shape) if rt.has_static_shape else 0


def _accumulated_in_f32(name: str, operands, result_type: ir.Type, attrs: dict, loc):
    """One ``name`` op (dot_general, convolution) with ``result_type``; for 16-bit float
    results (bf16, f16), the op's result is float32 and one ``stablehlo.convert`` rounds it.

    Rule: ATen's CPU and CUDA bf16/f16 matrix products and convolutions accumulate in float32
    and round each output element once (``opmath_type``, aten/src/ATen/OpMathType.h; cuBLAS
    with ``CUBLAS_COMPUTE_32F``). A 16-bit result type leaves the accumulation type to the
    XLA backend: XLA:CPU in jaxlib 0.11.2 accumulates some bf16 dots (a transposed lhs, as in
    a matmul's weight gradient) in bf16, up to a few bf16 ulps from eager (docs/compat.md).
    StableHLO's dot_general and convolution allow a wider result type than their operands
    (the spec's "preferred element type").

    Only where ``LOWERING_OPTIONS["accumulate_f32"]`` (the CPU target's choice,
    pipeline.Target): XLA:GPU's gemms (cuBLAS, Triton) accumulate 16-bit products in
    float32 themselves, and a float32 result there is written to memory at twice the bytes
    and rounded by another kernel (measured, GPT-2 124M prefill for an H100: the MLP's
    up-projection wrote 24 MiB instead of 12 per layer, and its GELU read them)."""
    e = ir.RankedTensorType(result_type).element_type
    if not isinstance(e, (ir.BF16Type, ir.F16Type)) or not LOWERING_OPTIONS["accumulate_f32"]:
        return hlo(name, operands, [result_type], attrs, loc).result
    rt = ir.RankedTensorType(result_type)
    wide = ir.RankedTensorType.get(rt.shape, ir.F32Type.get(), rt.encoding)
    r = hlo(name, operands, [wide], attrs, loc).result
    return hlo("stablehlo.convert", [r], [result_type], loc=loc).result


# ----------------------------------------------------------------- indexing
def _transposed_source(x: ir.Value, d: int, r: int):
    """``(x0, perm)`` where ``x`` is a chain of ``stablehlo.transpose`` ops of ``x0``, of
    composed permutation ``perm`` with ``perm[d] == d``, and the indices are 1-d
    (``r == 1``): gathering along ``d`` of ``x0`` and transposing the result by ``perm``
    gives the same tensor. Else None."""
    perm, x0 = None, x
    while r == 1 and not isinstance(x0.owner, ir.Block) and \
            x0.owner.name == "stablehlo.transpose":
        inner = _arr(x0.owner, "permutation")  # x0 = transpose(y, inner)
        perm = inner if perm is None else [inner[p] for p in perm]
        x0 = x0.owner.operands[0]
    if perm is None or perm[d] != d or not ir.RankedTensorType(x0.type).has_static_shape:
        return None
    return x0, perm


def lower_take(op, operands, rw):
    """index_select as stablehlo.gather: collapse ``dim``, indices' dims become batch dims.

    A take of a transposed tensor along a dim the transpose keeps in place, with 1-d
    indices, gathers from the transpose's operand and transposes the (smaller) result:
    XLA would otherwise fuse the transpose into the gather, reading the operand with a
    stride per element, and its transpose folding absorbs a transpose that feeds a dot
    (``grouped_mm`` of ``w.transpose(-2, -1)``, transformers' experts: the weight gather
    of one layer's tiled product took 539 us that way, 1 thread, AMD EPYC)."""
    x, idx = operands
    d = _int(op, "dim")
    it = ir.RankedTensorType(idx.type)
    r = it.rank
    src = _transposed_source(x, d, r)
    x, perm = src if src is not None else (x, None)
    xt = ir.RankedTensorType(x.type)
    xs = xt.shape
    out_type = op.result.type if perm is None else ir.RankedTensorType.get(
        [it.shape[0] if i == d else s for i, s in enumerate(xs)], xt.element_type)
    offset_dims = list(range(d)) + list(range(d + r, d + r + len(xs) - d - 1))
    dn = shlo.GatherDimensionNumbers.get(
        offset_dims=offset_dims, collapsed_slice_dims=[d], operand_batching_dims=[],
        start_indices_batching_dims=[], start_index_map=[d], index_vector_dim=r)
    sizes = [1 if i == d else s for i, s in enumerate(xs)]
    with rw.ip:
        g = hlo("stablehlo.gather", [x, idx], [out_type],
                {"dimension_numbers": dn, "slice_sizes": _i64s(sizes),
                 "indices_are_sorted": ir.BoolAttr.get(False)}, op.location)
        if perm is not None and perm != sorted(perm):
            g = hlo("stablehlo.transpose", [g.result], [op.result.type],
                    {"permutation": _i64s(perm)}, op.location)
    rw.replace_op(op, g.results)


def lower_take_along(op, operands, rw):
    """torch.gather as stablehlo.gather with every other dim a batching dim."""
    x, idx = operands
    loc = op.location
    it = ir.RankedTensorType(idx.type)
    xt = ir.RankedTensorType(x.type)
    d = _int(op, "dim")
    rank = it.rank
    others = [i for i in range(rank) if i != d]
    # torch.gather allows index.size(k) <= input.size(k) for k != d: slice x to match
    lim = [xt.shape[i] if i == d else it.shape[i] for i in range(rank)]
    with rw.ip:
        if lim != list(xt.shape):
            st = ir.RankedTensorType.get(lim, xt.element_type)
            x = hlo("stablehlo.slice", [x], [st], {"start_indices": _i64s([0] * rank),
                                                  "limit_indices": _i64s(lim),
                                                  "strides": _i64s([1] * rank)}, loc).result
        dn = shlo.GatherDimensionNumbers.get(
            offset_dims=[], collapsed_slice_dims=[d], operand_batching_dims=others,
            start_indices_batching_dims=others, start_index_map=[d], index_vector_dim=rank)
        g = hlo("stablehlo.gather", [x, idx], [op.result.type],
                {"dimension_numbers": dn, "slice_sizes": _i64s([1] * rank),
                 "indices_are_sorted": ir.BoolAttr.get(False)}, loc)
    rw.replace_op(op, g.results)


def _scatter_add(op, x, idx, src, dn, loc, rw):
    t = op.result.type
    st = ir.RankedTensorType.get([], ir.RankedTensorType(t).element_type)
    with rw.ip:
        sc = hlo("stablehlo.scatter", [x, idx, src], [t],
                 {"scatter_dimension_numbers": dn,
                  "indices_are_sorted": ir.BoolAttr.get(False),
                  "unique_indices": ir.BoolAttr.get(False)}, loc, regions=1)
        add_combiner(sc, st, loc, binary("stablehlo.add", st, loc))
    rw.replace_op(op, sc.results)


def lower_index_add(op, operands, rw):
    """torch.index_add as stablehlo.scatter (add), the transpose of ``lower_take``."""
    x, idx, src = operands
    xs = ir.RankedTensorType(x.type).shape
    r = ir.RankedTensorType(idx.type).rank
    d = _int(op, "dim")
    window = list(range(d)) + list(range(d + r, d + r + len(xs) - d - 1))
    dn = shlo.ScatterDimensionNumbers.get(
        update_window_dims=window, inserted_window_dims=[d], input_batching_dims=[],
        scatter_indices_batching_dims=[], scattered_dims_to_operand_dims=[d],
        index_vector_dim=r)
    _scatter_add(op, x, idx, src, dn, op.location, rw)


def lower_take_along_add(op, operands, rw):
    """torch.scatter_add as stablehlo.scatter with every other dim a batching dim."""
    x, idx, src = operands
    it = ir.RankedTensorType(idx.type)
    xt = ir.RankedTensorType(x.type)
    d = _int(op, "dim")
    if [s for i, s in enumerate(it.shape) if i != d] != [s for i, s in enumerate(xt.shape)
                                                        if i != d]:
        raise NotImplementedError("take_along_add with indices smaller than x off `dim`")
    others = [i for i in range(it.rank) if i != d]
    dn = shlo.ScatterDimensionNumbers.get(
        update_window_dims=[], inserted_window_dims=[d], input_batching_dims=others,
        scatter_indices_batching_dims=others, scattered_dims_to_operand_dims=[d],
        index_vector_dim=it.rank)
    _scatter_add(op, x, idx, src, dn, op.location, rw)


# ------------------------------ scans, scatter, sort, convolution, windows, random bits
# StableHLO spec sections: reduce_window, scatter, sort, convolution, rng_bit_generator.
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
    """The pattern of cumprod/cummax/cummin/logcumsumexp: stablehlo.reduce_window."""
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
    """stablehlo.scatter of ``updates`` at the index vectors, combined by ``kind``."""
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


def lower_convolution(op, operands, rw):
    """stablehlo.convolution in NC(spatial)/OI(spatial) layout; f32/f64 at HIGHEST; bf16/f16
    accumulated in f32 and rounded once (``_accumulated_in_f32``)."""
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
             "batch_group_count": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                     _int(op, "batch_group_count"))}
    if isinstance(rt.element_type, (ir.F32Type, ir.F64Type)):
        p = shlo.PrecisionAttr.get("HIGHEST")
        attrs["precision_config"] = ir.ArrayAttr.get([p, p])
    with rw.ip:
        r = _batch_group_taps(op, operands, op.location)
        if r is None:
            r = _blocked_contraction(op, operands, attrs, op.location)
        if r is None:
            r = _accumulated_in_f32("stablehlo.convolution", operands, op.result.type, attrs,
                                    op.location)
    rw.replace_op(op, [r])


#: the length of the blocks ``_blocked_contraction`` sums apart
CONTRACTION_BLOCK = 128
#: the shortest contraction ``_blocked_contraction`` splits
MIN_BLOCKED_CONTRACTION = 512
#: the most partial sums (blocks x lhs batch x output channels) it writes
MAX_PARTIAL_SUMS = 1 << 22


def _blocked_contraction(op, operands, attrs: dict, loc) -> ir.Value | None:
    """A float32 convolution whose window is its whole unpadded input (output spatial
    sizes 1, no dilation, one group), as blocked sums, where
    ``LOWERING_OPTIONS["blocked_contractions"]`` (the CPU target's choice); else None.

    Such a convolution is a contraction: out[b, o] = sum over f, s of lhs[b, f, s] *
    rhs[o, f, s], K = F x prod(S) products per output. It is the weight gradient of a
    1 x 1 convolution (vjp_rules ``_convolution_rhs_grad``: lhs x^T (C, N, *HW), window
    g^T (O, N, *HW), K = N x H x W). Lowered: lhs (B, K) and rhs (O, K), zero-padded to
    P blocks of ``CONTRACTION_BLOCK``, one dot_general batched over the blocks -> (P, B, O),
    and a reduce over P.

    Why: XLA:CPU (jaxlib 0.10.2) sums such a contraction in one running sum per output, so
    its rounding error grows as K, where ATen's blocked GEMM grows as about sqrt(K).
    Measured against float64, the weight gradient of a 1 x 1 Conv2d(16, 144) on
    2 x 16 x H x H: 1.3x eager float32's error at H = 8 (K = 128), 2.0x at 16, 6.5x at 32,
    11.2x at 64; a [144, K] x [K, 16] dot with blocks of 128 summed apart: 0.67x eager's
    at K = 2048. XLA:GPU's gemms split their contraction themselves. Contractions shorter
    than ``MIN_BLOCKED_CONTRACTION``, and those whose partial sums would exceed
    ``MAX_PARTIAL_SUMS``, keep the convolution."""
    if not LOWERING_OPTIONS["blocked_contractions"]:
        return None
    lhs, rhs = operands
    lt, kt, rt = (ir.RankedTensorType(v.type) for v in (lhs, rhs, op.result))
    if not (isinstance(rt.element_type, ir.F32Type) and all(
            t.has_static_shape for t in (lt, kt, rt))):
        return None
    if _int(op, "feature_group_count") != 1 or _int(op, "batch_group_count") != 1 or any(
            _arr(op, "padding")) or any(d != 1 for d in _arr(op, "lhs_dilation")) or any(
            d != 1 for d in _arr(op, "rhs_dilation")):
        return None
    if list(kt.shape[2:]) != list(lt.shape[2:]) or any(d != 1 for d in rt.shape[2:]):
        return None
    B, O = lt.shape[0], kt.shape[0]
    K = math.prod(lt.shape[1:])
    P = -(-K // CONTRACTION_BLOCK)
    if K < MIN_BLOCKED_CONTRACTION or P * B * O > MAX_PARTIAL_SUMS:
        return None
    e = rt.element_type

    def typed(shape):
        return ir.RankedTensorType.get(list(shape), e)

    zero = splat(ir.RankedTensorType.get([], e), 0, loc)
    blocked = []
    for v, rows in ((lhs, B), (rhs, O)):
        v = hlo("stablehlo.reshape", [v], [typed([rows, K])], loc=loc).result
        if P * CONTRACTION_BLOCK != K:
            v = hlo("stablehlo.pad", [v, zero], [typed([rows, P * CONTRACTION_BLOCK])],
                    {"edge_padding_low": _i64s([0, 0]),
                     "edge_padding_high": _i64s([0, P * CONTRACTION_BLOCK - K]),
                     "interior_padding": _i64s([0, 0])}, loc).result
        blocked.append(hlo("stablehlo.reshape", [v], [typed([rows, P, CONTRACTION_BLOCK])],
                           loc=loc).result)
    dn = shlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=[1], rhs_batching_dimensions=[1],
        lhs_contracting_dimensions=[2], rhs_contracting_dimensions=[2])
    part = hlo("stablehlo.dot_general", blocked, [typed([P, B, O])],
               {"dot_dimension_numbers": dn,
                "precision_config": attrs["precision_config"]}, loc).result
    red = hlo("stablehlo.reduce", [part, zero], [typed([B, O])],
              {"dimensions": _i64s([0])}, loc, regions=1)
    st = ir.RankedTensorType.get([], e)
    add_combiner(red, st, loc, binary("stablehlo.add", st, loc))
    return hlo("stablehlo.reshape", [red.result], [rt], loc=loc).result


#: the most window positions (taps) ``_batch_group_taps`` unrolls
MAX_TAPS = 64
#: the fewest products per tap and group (lhs features x window) for ``_batch_group_taps``:
#: measured on 2 cores (at load ~13, noisy), a 3x3 depthwise step on 2x256x8x8 (128 per
#: tap) took 48-64 ms with taps against 13 ms with the batch-grouped convolution, on
#: 8x256x32x32 (8,192) 2.7-2.8 s against 5.6 s
MIN_TAP_PRODUCTS = 1024


def _batch_group_taps(op, operands, loc) -> ir.Value | None:
    """A convolution with ``batch_group_count`` G > 1 whose lhs batch is G (one batch row
    per group: the weight gradient of a depthwise convolution, vjp_rules
    ``_convolution_rhs_grad``), as one multiply-and-reduce per output position ("tap"),
    where ``LOWERING_OPTIONS["batch_group_taps"]`` (the CPU target's choice); else None.

    With lhs (G, F, *S) padded (and dilated) as the convolution pads it, rhs (O, F, *W),
    O = G * m: out[0, g * m + j, k] = sum over f, w of lhs[g, f, k * stride + w * dilation]
    * rhs[g * m + j, f, w], the StableHLO spec's convolution for this case. Each of the
    prod(K) <= ``MAX_TAPS`` taps is a strided slice of lhs, broadcast over m, multiplied
    by rhs and reduced over (F, *W): the products the convolution makes, no others.

    Why: XLA:CPU expands a batch-grouped convolution into a dense one over all G groups
    (G times the products). A 3x3 depthwise Conv2d of 256 channels on 8x256x32x32, one
    training step: 484 ms with the one batch-grouped convolution, 186 ms with the former
    per-group loop of convolutions, eager 23 ms (b5876d2). XLA:GPU runs the batch-grouped
    convolution as cuDNN's grouped weight gradient; the GPU keeps it. Small windows (fewer
    than ``MIN_TAP_PRODUCTS`` products per tap) keep it too. 16-bit operands are
    multiplied and summed in float32 and rounded once (as ``_accumulated_in_f32``)."""
    if not LOWERING_OPTIONS["batch_group_taps"]:
        return None
    G = _int(op, "batch_group_count")
    lhs, rhs = operands
    lt, kt, rt = (ir.RankedTensorType(v.type) for v in (lhs, rhs, op.result))
    if G == 1 or _int(op, "feature_group_count") != 1 or not all(
            t.has_static_shape for t in (lt, kt, rt)) or lt.shape[0] != G:
        return None
    e = rt.element_type
    if not _is_real_float(e):
        return None
    n = rt.rank - 2
    out_sp, win = rt.shape[2:], kt.shape[2:]
    if math.prod(out_sp) > MAX_TAPS or kt.shape[1] * math.prod(win) < MIN_TAP_PRODUCTS:
        return None
    strides, dil = _arr(op, "window_strides"), _arr(op, "rhs_dilation")
    flat, ld = _arr(op, "padding"), _arr(op, "lhs_dilation")
    O, F = kt.shape[0], kt.shape[1]
    m = O // G
    wide = ir.F32Type.get() if isinstance(e, (ir.BF16Type, ir.F16Type)) else e

    def typed(shape):
        return ir.RankedTensorType.get(list(shape), wide)

    if wide != e:
        lhs = hlo("stablehlo.convert", [lhs], [typed(lt.shape)], loc=loc).result
        rhs = hlo("stablehlo.convert", [rhs], [typed(kt.shape)], loc=loc).result
    lo, hi = flat[0::2], flat[1::2]
    sp = [_dilate_size(a, d) + l + h for a, d, l, h in zip(lt.shape[2:], ld, lo, hi)]
    if any(lo) or any(hi) or any(d != 1 for d in ld):
        zero = splat(ir.RankedTensorType.get([], wide), 0, loc)
        lhs = hlo("stablehlo.pad", [lhs, zero], [typed([G, F] + sp)],
                  {"edge_padding_low": _i64s([0, 0] + lo), "edge_padding_high":
                   _i64s([0, 0] + hi), "interior_padding": _i64s([0, 0] + [d - 1 for d in ld])},
                  loc).result
    kshape = [G, m, F] + list(win)
    rhs = hlo("stablehlo.reshape", [rhs], [typed(kshape)], loc=loc).result
    st = ir.RankedTensorType.get([], wide)
    zero = splat(st, 0, loc)
    taps = []
    for k in itertools.product(*(range(o) for o in out_sp)):
        start = [ki * s for ki, s in zip(k, strides)]
        limit = [b + (w - 1) * d + 1 for b, w, d in zip(start, win, dil)]
        x = hlo("stablehlo.slice", [lhs], [typed([G, F] + list(win))],
                {"start_indices": _i64s([0, 0] + start), "limit_indices": _i64s([G, F] + limit),
                 "strides": _i64s([1, 1] + list(dil))}, loc).result
        if m > 1:
            x = hlo("stablehlo.broadcast_in_dim", [x], [typed(kshape)],
                    {"broadcast_dimensions": _i64s([0] + list(range(2, 3 + n)))}, loc).result
        else:
            x = hlo("stablehlo.reshape", [x], [typed(kshape)], loc=loc).result
        prod = hlo("stablehlo.multiply", [x, rhs], [typed(kshape)], loc=loc).result
        red = hlo("stablehlo.reduce", [prod, zero], [typed([G, m])],
                  {"dimensions": _i64s(range(2, 3 + n))}, loc, regions=1)
        add_combiner(red, st, loc, binary("stablehlo.add", st, loc))
        taps.append(hlo("stablehlo.reshape", [red.result], [typed([O, 1])], loc=loc).result)
    i64 = ir.IntegerType.get_signless(64)
    r = taps[0] if len(taps) == 1 else hlo(
        "stablehlo.concatenate", taps, [typed([O, len(taps)])],
        {"dimension": ir.IntegerAttr.get(i64, 1)}, loc).result
    r = hlo("stablehlo.reshape", [r], [typed(rt.shape)], loc=loc).result
    if wide != e:
        r = hlo("stablehlo.convert", [r], [rt], loc=loc).result
    return r


def _dilate_size(n: int, d: int) -> int:
    return 0 if n == 0 else 1 + d * (n - 1)


def lower_reduce_window(op, operands, rw):
    """stablehlo.reduce_window with the body of ``kind`` (sum, max, min)."""
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
    """stablehlo.cholesky (spec: cholesky)."""
    with rw.ip:
        r = hlo("stablehlo.cholesky", operands, [op.result.type],
                {"lower": ir.BoolAttr.get(bool(_int(op, "lower")))}, op.location)
    rw.replace_op(op, r.results)


def lower_triangular_solve(op, operands, rw):
    """stablehlo.triangular_solve (spec: triangular_solve)."""
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


# ------------------------------------------------------------ run-time indices
# dynamic_index / dynamic_update_index (``scan``'s rows; a KV-cache write's slot): StableHLO
# "dynamic_slice" and "dynamic_update_slice", whose start indices are clamped into range.
def _starts(index: ir.Value, rank: int, dim: int, loc) -> list[ir.Value]:
    zero = splat(index.type, 0, loc)
    return [index if d == dim else zero for d in range(rank)]


def lower_dynamic_index(op, operands, rw):
    """x.select(dim, index): stablehlo.dynamic_slice of one slice, reshaped."""
    x, index = operands
    xt = ir.RankedTensorType(x.type)
    dim = attrs.get_int(op, "dim")
    loc = op.location
    with rw.ip:
        sizes = [1 if d == dim else n for d, n in enumerate(xt.shape)]
        one = ir.RankedTensorType.get(sizes, xt.element_type)
        sliced = hlo("stablehlo.dynamic_slice", [x] + _starts(index, xt.rank, dim, loc),
                     [one], {"slice_sizes": ir.DenseI64ArrayAttr.get(sizes)}, loc).result
        out = hlo("stablehlo.reshape", [sliced], [op.result.type], loc=loc)
    rw.replace_op(op, out)


def lower_dynamic_update_index(op, operands, rw):
    """x.select(dim, index) = update: stablehlo.dynamic_update_slice."""
    x, update, index = operands
    xt = ir.RankedTensorType(x.type)
    dim = attrs.get_int(op, "dim")
    loc = op.location
    with rw.ip:
        one = ir.RankedTensorType.get([1 if d == dim else n for d, n in enumerate(xt.shape)],
                                      xt.element_type)
        upd = hlo("stablehlo.reshape", [update], [one], loc=loc).result
        out = hlo("stablehlo.dynamic_update_slice",
                  [x, upd] + _starts(index, xt.rank, dim, loc), [x.type], loc=loc)
    rw.replace_op(op, out)


def lower_sharding_constraint(op, operands, rw):
    """``stablehlo.custom_call @Sharding(x) {mhlo.sharding = "..."}``: XLA's sharding
    annotation of an intermediate value (what ``jax.lax.with_sharding_constraint`` emits)."""
    mesh = sharding.parse_mesh(ir.StringAttr(op.attributes["mesh"]).value)
    spec = sharding.parse_spec(ir.StringAttr(op.attributes["spec"]).value)
    with rw.ip:
        r = hlo("stablehlo.custom_call", operands, [op.result.type],
                {"call_target_name": ir.StringAttr.get("Sharding"),
                 sharding.GSPMD_ATTR: ir.StringAttr.get(sharding.gspmd(mesh, spec))},
                loc=op.location)
    rw.replace_op(op, list(r.results))


def _bit_type(e: ir.Type) -> ir.Type | None:
    """The integer type of ``e``'s bits (``e`` itself for integers); None for types
    ``stablehlo.bitcast_convert`` cannot take to one (complex, fp8)."""
    if isinstance(e, ir.IntegerType):
        return e
    widths = {ir.F32Type: 32, ir.F64Type: 64, ir.F16Type: 16, ir.BF16Type: 16}
    w = next((n for cls, n in widths.items() if isinstance(e, cls)), None)
    return None if w is None else ir.IntegerType.get_signless(w)


def _splat_value(x: ir.Value) -> ir.Attribute | None:
    """The element attribute of ``x`` when it is a splat constant (a ``thunder.full``,
    lowered or not), else None."""
    owner = x.owner
    name = owner.name if hasattr(owner, "name") else None
    if name == "thunder.full":
        et = ir.RankedTensorType(x.type).element_type
        return scalar_attr(et, attrs.get_value(owner, "value"))
    if name == "stablehlo.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
            return attr.get_splat_value()
    return None


def _splat_after(c: ir.Attribute, m: ir.Value, xt: ir.RankedTensorType, xbits: ir.Type,
                 loc) -> ir.Value:
    """The splat constant ``c`` of type ``xt`` as a value XLA computes from ``m`` (a 0-d
    tensor of the integer type ``xbits``): ``broadcast(bitcast(((m ^ bits(c)) ^ ~m) ^ -1))``.
    With ``bits(c)`` zero, XLA's simplifier folds ``m ^ 0`` to ``m`` and stops at
    ``m ^ ~m`` (checked on jaxlib 0.10.2 and 0.11.2: both keep two xors and a not)."""
    scalar = ir.RankedTensorType.get([], xt.element_type)
    st = ir.RankedTensorType.get([], xbits)
    cst = hlo("stablehlo.constant", [], [scalar],
              {"value": ir.DenseElementsAttr.get_splat(scalar, c)}, loc).result
    bits = cst if xbits == xt.element_type else \
        hlo("stablehlo.bitcast_convert", [cst], [st], loc=loc).result
    s = hlo("stablehlo.xor", [m, bits], [st], loc=loc).result
    s = hlo("stablehlo.xor", [s, hlo("stablehlo.not", [m], [st], loc=loc).result], [st],
            loc=loc).result
    s = hlo("stablehlo.xor", [s, splat(st, -1, loc)], [st], loc=loc).result
    if xbits != xt.element_type:
        s = hlo("stablehlo.bitcast_convert", [s], [scalar], loc=loc).result
    return hlo("stablehlo.broadcast_in_dim", [s], [xt],
               {"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}, loc).result


def _first_bits(anchor: ir.Value, bits: ir.Type, loc) -> ir.Value:
    """The first element of ``anchor`` (static, non-empty), its bits as a 0-d tensor of
    the integer type ``bits`` (converted when the widths differ)."""
    at = ir.RankedTensorType(anchor.type)
    abits = _bit_type(at.element_type)
    first = anchor
    if at.rank:
        one = ir.RankedTensorType.get([1] * at.rank, at.element_type)
        first = hlo("stablehlo.slice", [anchor], [one],
                    {"start_indices": ir.DenseI64ArrayAttr.get([0] * at.rank),
                     "limit_indices": ir.DenseI64ArrayAttr.get([1] * at.rank),
                     "strides": ir.DenseI64ArrayAttr.get([1] * at.rank)}, loc).result
        first = hlo("stablehlo.reshape", [first],
                    [ir.RankedTensorType.get([], at.element_type)], loc=loc).result
    if abits != at.element_type:
        first = hlo("stablehlo.bitcast_convert", [first],
                    [ir.RankedTensorType.get([], abits)], loc=loc).result
    return first if abits == bits else hlo(
        "stablehlo.convert", [first], [ir.RankedTensorType.get([], bits)], loc=loc).result


# Options of the running lower-to-stablehlo conversion (set by ``lowering_options``;
# conversions run under ir.context.COMPILE_LOCK, one at a time).
LOWERING_OPTIONS = {"computed_once": True, "accumulate_f32": True, "narrow_dots": False,
                    "batch_group_taps": True, "blocked_contractions": True}


@contextlib.contextmanager
def lowering_options(**options):
    """Set ``LOWERING_OPTIONS`` for one conversion (``computed_once``, ``accumulate_f32``,
    ``narrow_dots``: bools; see ``lower_computed_once``, ``_accumulated_in_f32`` and
    ``_widened_16bit``)."""
    unknown = set(options) - set(LOWERING_OPTIONS)
    if unknown:
        raise ValueError(f"unknown lowering options {sorted(unknown)}")
    old = dict(LOWERING_OPTIONS)
    LOWERING_OPTIONS.update(options)
    _WIDENED_BIASES.clear()
    try:
        yield
    finally:
        LOWERING_OPTIONS.clear()
        LOWERING_OPTIONS.update(old)
        _WIDENED_BIASES.clear()


def lower_computed_once(base_op: str) -> Lowering:
    """``base_op(x)`` (``stablehlo.sine``, ``stablehlo.cosine``) for real floating ``x``,
    divided elementwise by ones that XLA cannot see are ones: ``bitcast((bits(1.0) ^ m) ^
    m)``, ``m`` the bits of ``x`` (no simplifier of XLA folds ``(a ^ m) ^ m`` for ``a``
    not zero: ``lower_after``). The quotient is the value bit for bit (IEEE 754 division by
    one is exact, NaN and signed zeros included). The divisor is not a broadcast: XLA rewrites
    ``a / broadcast(b)`` as ``a * broadcast(1 / b)``, and a product is cheap again.

    Why: XLA's fusion (jaxlib 0.10.2, ``InstructionFusion::IsExpensive``) counts sine and
    cosine as cheap for reals, so it fuses them into every consumer, including those that
    read each element many times: a broadcast (rotary embeddings' [S, D] tables read by
    every batch row and head) then evaluates them once per element read. Llama tiny's
    training step spent 565 us of its 3.3 ms there. A floating division is expensive to
    XLA, and its CPU fusion does not fuse an expensive producer into a consumer that reuses
    elements (``CpuInstructionFusion::ShouldFuse``): the function is computed once and read
    from memory there, and still fused into consumers that read each element once. (Newer
    XLA counts sine and cosine as expensive itself.) Complex ``x``: ``base_op`` alone."""
    def lower(op, operands, rw):
        x, t, loc = operands[0], op.result.type, op.location
        xt = ir.RankedTensorType(x.type)
        with rw.ip:
            y = hlo(base_op, [x], [t], loc=loc).result
            if _is_real_float(xt.element_type) and LOWERING_OPTIONS["computed_once"]:
                it = ir.RankedTensorType.get(list(xt.shape), _bit_type(xt.element_type))
                m = hlo("stablehlo.bitcast_convert", [x], [it], loc=loc).result
                one = hlo("stablehlo.bitcast_convert", [splat(t, 1.0, loc, like=x)], [it],
                          loc=loc).result
                for _ in range(2):
                    one = hlo("stablehlo.xor", [one, m], [it], loc=loc).result
                one = hlo("stablehlo.bitcast_convert", [one], [t], loc=loc).result
                y = hlo("stablehlo.divide", [y, one], [t], loc=loc).result
        rw.replace_op(op, [y])
    return lower


def lower_after(op, operands, rw):
    """``after(x, anchor)``: ``x`` bit for bit, as a value XLA computes only after
    ``anchor`` and cannot identify with ``x``: ``(bits(x) ^ m) ^ m``, where ``m`` is
    ``anchor``'s first element, its bits converted to ``x``'s width and broadcast. This is
    the job of ``stablehlo.optimization_barrier`` (what ``jax.checkpoint`` emits), but
    XLA's CPU compiler erases barriers before its last CSE and before scheduling
    (``OptimizationBarrierExpander`` in xla/service/cpu/cpu_compiler.cc); no simplifier of
    XLA folds ``(a ^ m) ^ m`` for an unknown ``a``, and the two xors fuse into the ops that
    read the result. A splat constant ``x`` (``thunder.full``: ``joint._late_constants``
    anchors the zeros a gradient scatters into) is made from ``m`` alone,
    ``broadcast(((m ^ bits(c)) ^ ~m) ^ -1)``: XLA 0.11's simplifier (jaxlib 0.11.2; not
    0.10.2) folds ``x ^ 0`` to ``x`` and ``m ^ m`` to 0, so ``(0 ^ m) ^ m`` became the
    constant 0 again, made wherever XLA liked (``_splat_after``). Operands without an
    integer view (complex, fp8), with dynamic sizes or an empty ``anchor`` take the
    barrier. On the GPU target too: lowered as the barrier, a Llama 1.1B training step
    compiled for an H100 (jaxlib 0.12.0.1) recomputed more (44 -> 66 attention calls,
    74.6 -> 105.2 ms roofline), GPT-2's 13.0 -> 18.1 ms."""
    x, anchor = operands
    xt, at = ir.RankedTensorType(x.type), ir.RankedTensorType(anchor.type)
    loc = op.location
    xbits, abits = _bit_type(xt.element_type), _bit_type(at.element_type)
    with rw.ip:
        if xbits is None or abits is None or not xt.has_static_shape or \
                not at.has_static_shape or 0 in at.shape:
            r = hlo("stablehlo.optimization_barrier", operands, [x.type, anchor.type], loc=loc)
            rw.replace_op(op, [r.results[0]])
            return
        m = _first_bits(anchor, xbits, loc)
        c = _splat_value(x)
        if c is not None:
            rw.replace_op(op, [_splat_after(c, m, xt, xbits, loc)])
            return
        it = ir.RankedTensorType.get(list(xt.shape), xbits)
        m = hlo("stablehlo.broadcast_in_dim", [m], [it],
                {"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}, loc).result
        bits = x if xbits == xt.element_type else \
            hlo("stablehlo.bitcast_convert", [x], [it], loc=loc).result
        for _ in range(2):
            bits = hlo("stablehlo.xor", [bits, m], [it], loc=loc).result
        out = bits if xbits == xt.element_type else \
            hlo("stablehlo.bitcast_convert", [bits], [x.type], loc=loc).result
    rw.replace_op(op, [out])
