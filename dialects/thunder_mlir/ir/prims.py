"""Prims: emit one ``thunder`` prim op with checked operands and an inferred result type.

Prims never broadcast or promote: operands must already have the shapes and dtypes the
op needs (``lang.py`` does that sugar). Shapes and dtypes follow the StableHLO spec of the
op each prim lowers to (https://openxla.org/stablehlo/spec), named per function.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch_mlir import ir

from thunder_mlir.ir.dialect import PRIM_OPS, RNG_STREAM_SHIFT, I64Array, pack_runs, segment_kwargs

from thunder_mlir.ir import dtypes
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.builder import current_builder

Shape = tuple[int, ...]


def _emit(name: str, operands: Sequence[TensorProxy], shape: Sequence[int],
          dtype: torch.dtype, *attrs, **kw) -> TensorProxy:
    builder = current_builder()
    rtype = dtypes.tensor_type(shape, dtype)
    with builder.ip:
        op = PRIM_OPS[name](*[p.value for p in operands], *attrs, result=rtype, **kw)
    return TensorProxy(op.result, tuple(shape), dtype, builder.device)


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _arr(v: Sequence[int]) -> I64Array:
    return I64Array.of(v)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(f"prim: {msg}")


# ---------------------------------------------------------------- elementwise
_BOOL_RESULT = {"eq", "ne", "lt", "le", "gt", "ge", "isfinite"}
_REAL_RESULT = {"real", "imag", "abs"}


def elementwise(name: str, *xs: TensorProxy) -> TensorProxy:
    """Unary/binary elementwise prim ``name``; operands of one shape and dtype."""
    x = xs[0]
    for y in xs[1:]:
        _check(y.tshape == x.tshape and y.tdtype == x.tdtype,
               f"{name}: operands differ: {x.tshape}/{x.tdtype} vs {y.tshape}/{y.tdtype}")
    dtype = x.tdtype
    if name in _BOOL_RESULT:
        dtype = torch.bool
    elif name in _REAL_RESULT and dtype.is_complex:
        dtype = dtype.to_real()
    return _emit(name, xs, x.tshape, dtype)


def where(pred: TensorProxy, a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """stablehlo.select: pred (bool) and a, b of one shape; a, b of one dtype."""
    _check(pred.tdtype == torch.bool, "where: predicate must be bool")
    _check(pred.tshape == a.tshape == b.tshape and a.tdtype == b.tdtype,
           f"where: mismatched operands {pred.tshape} {a.tshape}/{a.tdtype} {b.tshape}/{b.tdtype}")
    return _emit("where", (pred, a, b), a.tshape, a.tdtype)


def clamp(lo: TensorProxy, x: TensorProxy, hi: TensorProxy) -> TensorProxy:
    """stablehlo.clamp with lo/hi of x's shape and dtype."""
    _check(lo.tshape == x.tshape == hi.tshape, "clamp: shapes differ")
    return _emit("clamp", (lo, x, hi), x.tshape, x.tdtype)


def convert_element_type(x: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    """stablehlo.convert (float -> int truncates toward zero; x -> bool is x != 0)."""
    if x.tdtype == dtype:
        return x
    return _emit("convert_element_type", (x,), x.tshape, dtype)


def bitcast(x: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    """stablehlo.bitcast_convert to a ``dtype`` of the same bit width (bits unchanged)."""
    _check(x.tdtype.itemsize == dtype.itemsize,
           f"bitcast: {x.tdtype} and {dtype} differ in width")
    if x.tdtype == dtype:
        return x
    return _emit("bitcast", (x,), x.tshape, dtype)


# ---------------------------------------------------------------- autograd
def stop_gradient(x: TensorProxy) -> TensorProxy:
    """``x`` with a zero gradient (jax.lax.stop_gradient): torch's ``detach()``, ``.data``
    and the results of ops run under ``no_grad()``. Lowers to ``x`` itself."""
    return _emit("stop_gradient", (x,), x.tshape, x.tdtype)


def no_derivative(x: TensorProxy, message: str) -> TensorProxy:
    """``x``, whose derivative is not implemented in eager PyTorch: a backward that reaches
    it raises RuntimeError(``message``) when it runs, as torch.autograd's NotImplemented
    node does. Lowers to ``x`` itself."""
    return _emit("no_derivative", (x,), x.tshape, x.tdtype, ir.StringAttr.get(message))


# -------------------------------------------------------------------- shapes
def broadcast_in_dim(x: TensorProxy, shape: Sequence[int], dims: Sequence[int]) -> TensorProxy:
    """stablehlo.broadcast_in_dim: x.shape[i] is 1 or shape[dims[i]]; dims increasing."""
    shape = tuple(int(s) for s in shape)
    _check(len(dims) == len(x.tshape), f"broadcast_in_dim: {len(dims)} dims for rank {len(x.tshape)}")
    for i, d in enumerate(dims):
        _check(x.tshape[i] in (1, shape[d]), f"broadcast_in_dim: {x.tshape} -> {shape} via {dims}")
    if shape == x.tshape:
        return x
    return _emit("broadcast_in_dim", (x,), shape, x.tdtype, _arr(dims))


def reshape(x: TensorProxy, shape: Sequence[int]) -> TensorProxy:
    """stablehlo.reshape (row-major element order); element counts must agree."""
    shape = tuple(int(s) for s in shape)
    _check(math.prod(shape) == math.prod(x.tshape), f"reshape: {x.tshape} -> {shape}")
    if shape == x.tshape:
        return x
    return _emit("reshape", (x,), shape, x.tdtype)


def transpose(x: TensorProxy, perm: Sequence[int]) -> TensorProxy:
    """stablehlo.transpose: result.shape[i] = x.shape[perm[i]]."""
    perm = tuple(int(p) for p in perm)
    _check(sorted(perm) == list(range(len(x.tshape))), f"transpose: bad permutation {perm}")
    if perm == tuple(range(len(perm))):
        return x
    return _emit("transpose", (x,), tuple(x.tshape[p] for p in perm), x.tdtype, _arr(perm))


def slice_(x: TensorProxy, start: Sequence[int], limit: Sequence[int],
           strides: Sequence[int] | None = None) -> TensorProxy:
    """stablehlo.slice with 0 <= start <= limit <= dim and positive strides."""
    strides = strides or [1] * len(x.tshape)
    shape = []
    for s, l, st, d in zip(start, limit, strides, x.tshape):
        _check(0 <= s <= l <= d and st > 0, f"slice: [{s}:{l}:{st}] of dim {d}")
        shape.append(max(0, -(-(l - s) // st)))
    if tuple(shape) == x.tshape:
        return x
    return _emit("slice", (x,), shape, x.tdtype, _arr(start), _arr(limit), _arr(strides))


def reverse(x: TensorProxy, dims: Sequence[int]) -> TensorProxy:
    """stablehlo.reverse along dims."""
    return _emit("reverse", (x,), x.tshape, x.tdtype, _arr(dims))


def pad(x: TensorProxy, value: TensorProxy, low: Sequence[int], high: Sequence[int],
        interior: Sequence[int] | None = None) -> TensorProxy:
    """stablehlo.pad with a 0-d ``value`` of x's dtype; negative low/high crop."""
    interior = interior or [0] * len(x.tshape)
    _check(value.tshape == () and value.tdtype == x.tdtype, "pad: value must be 0-d, same dtype")
    shape = [lo + hi + d + max(d - 1, 0) * it for d, lo, hi, it in zip(x.tshape, low, high, interior)]
    return _emit("pad", (x, value), shape, x.tdtype, _arr(low), _arr(high), _arr(interior))


def concatenate(xs: Sequence[TensorProxy], dim: int) -> TensorProxy:
    """stablehlo.concatenate along ``dim``; other dims and dtypes equal."""
    _check(len(xs) > 0, "concatenate of nothing")
    if len(xs) == 1:
        return xs[0]
    x0 = xs[0]
    for y in xs[1:]:
        _check(y.tdtype == x0.tdtype and len(y.tshape) == len(x0.tshape) and all(
            a == b for i, (a, b) in enumerate(zip(y.tshape, x0.tshape)) if i != dim),
            f"concatenate: {x0.tshape} vs {y.tshape} along {dim}")
    if pack_runs([x.value for x in xs]) is None:  # too many shape runs: concatenate in halves
        half = len(xs) // 2
        return concatenate([concatenate(xs[:half], dim), concatenate(xs[half:], dim)], dim)
    shape = list(x0.tshape)
    shape[dim] = sum(x.tshape[dim] for x in xs)
    builder = current_builder()
    rtype = dtypes.tensor_type(shape, x0.tdtype)
    with builder.ip:
        op = PRIM_OPS["concatenate"](**segment_kwargs("in", [x.value for x in xs]),
                                     dimension=_i64(dim), result=rtype)
    return TensorProxy(op.result, tuple(shape), x0.tdtype, builder.device)


# ----------------------------------------------------------------- creation
def iota(shape: Sequence[int], dtype: torch.dtype, dim: int) -> TensorProxy:
    """stablehlo.iota: element = its index along ``dim``."""
    builder = current_builder()
    with builder.ip:
        op = PRIM_OPS["iota"](_i64(dim), result=dtypes.tensor_type(shape, dtype))
    return TensorProxy(op.result, tuple(shape), dtype, builder.device)


def full(shape: Sequence[int], value, dtype: torch.dtype) -> TensorProxy:
    """A tensor of ``shape`` filled with the Python number ``value`` (stablehlo.constant)."""
    if dtype.is_complex:  # no complex scalar attribute: a splat constant
        rtype = dtypes.tensor_type(shape, dtype)
        return _constant_op(dtypes.complex_splat(rtype, value), rtype, shape, dtype)
    builder = current_builder()
    if dtype.is_floating_point:
        attr = ir.FloatAttr.get_f64(float(value))
    else:
        attr = _i64(int(value))
    with builder.ip:
        op = PRIM_OPS["full"](attr, result=dtypes.tensor_type(shape, dtype))
    return TensorProxy(op.result, tuple(int(s) for s in shape), dtype, builder.device)


def constant(data: torch.Tensor) -> TensorProxy:
    """A literal tensor (``torch.tensor([...])`` written in the program)."""
    import numpy as np

    rtype = dtypes.tensor_type(data.shape, data.dtype)
    arr = data.detach().cpu()
    if data.dtype == torch.bfloat16:
        arr = arr.float()
    np_arr = np.ascontiguousarray(arr.numpy())
    attr = ir.DenseElementsAttr.get(np_arr, type=rtype.element_type, shape=list(data.shape))
    return _constant_op(attr, rtype, data.shape, data.dtype)


def _constant_op(attr: ir.Attribute, rtype: ir.Type, shape, dtype) -> TensorProxy:
    builder = current_builder()
    with builder.ip:
        op = PRIM_OPS["constant"](result=rtype)
    op.operation.attributes["value"] = attr
    return TensorProxy(op.result, tuple(int(s) for s in shape), dtype, builder.device)


def rng_bits(seed: TensorProxy, stream: int, shape: Sequence[int],
             dtype: torch.dtype) -> TensorProxy:
    """Uniformly random bits: an int32 or int64 tensor of ``shape`` from
    stablehlo.rng_bit_generator (THREE_FRY) with state ``[seed, stream << 40]``
    (``seed``: the program's 0-d int64 seed; see thunder_mlir/rng.py)."""
    _check(seed.tshape == () and seed.tdtype == torch.int64, "rng_bits: seed must be 0-d int64")
    _check(dtype in (torch.int32, torch.int64), f"rng_bits: {dtype} bits (int32 or int64)")
    _check(0 <= stream < 1 << (64 - RNG_STREAM_SHIFT), f"rng_bits: stream {stream} out of range")
    return _emit("rng_bits", (seed,), tuple(int(s) for s in shape), dtype, _i64(stream))


# --------------------------------------------------------------- reductions
def reduce(name: str, x: TensorProxy, dims: Sequence[int]) -> TensorProxy:
    """reduce_{sum,prod,max,min,and,or} over ``dims`` (removed from the shape)."""
    dims = sorted({int(d) for d in dims})
    if not dims:
        return x
    shape = [s for i, s in enumerate(x.tshape) if i not in dims]
    return _emit(name, (x,), shape, x.tdtype, _arr(dims))


def argreduce(name: str, x: TensorProxy, dim: int) -> TensorProxy:
    """argmax/argmin over ``dim``: int64 index of the first extreme element."""
    shape = [s for i, s in enumerate(x.tshape) if i != dim]
    return _emit(name, (x,), shape, torch.int64, _i64(dim))


def cumsum(x: TensorProxy, dim: int) -> TensorProxy:
    """Inclusive prefix sum along ``dim``."""
    return _emit("cumsum", (x,), x.tshape, x.tdtype, _i64(dim))


# ------------------------------------------------------------ linear algebra
def dot_general(lhs: TensorProxy, rhs: TensorProxy, lhs_batch: Sequence[int],
                rhs_batch: Sequence[int], lhs_contract: Sequence[int],
                rhs_contract: Sequence[int]) -> TensorProxy:
    """stablehlo.dot_general: result = batch dims, lhs free dims, rhs free dims."""
    _check(lhs.tdtype == rhs.tdtype, f"dot_general: dtypes {lhs.tdtype} vs {rhs.tdtype}")
    for a, b in zip(lhs_batch, rhs_batch):
        _check(lhs.tshape[a] == rhs.tshape[b], "dot_general: batch dims differ")
    for a, b in zip(lhs_contract, rhs_contract):
        _check(lhs.tshape[a] == rhs.tshape[b],
               f"dot_general: contracting dims differ: {lhs.tshape} @ {rhs.tshape}")
    shape = [lhs.tshape[d] for d in lhs_batch]
    shape += [s for i, s in enumerate(lhs.tshape) if i not in lhs_batch and i not in lhs_contract]
    shape += [s for i, s in enumerate(rhs.tshape) if i not in rhs_batch and i not in rhs_contract]
    return _emit("dot_general", (lhs, rhs), shape, lhs.tdtype, _arr(lhs_batch), _arr(rhs_batch),
                 _arr(lhs_contract), _arr(rhs_contract))


# ----------------------------------------------------------------- indexing
def take(x: TensorProxy, indices: TensorProxy, dim: int) -> TensorProxy:
    """x.shape[:dim] + indices.shape + x.shape[dim+1:]; indices in [0, x.shape[dim])."""
    _check(not indices.tdtype.is_floating_point, "take: indices must be integers")
    shape = x.tshape[:dim] + indices.tshape + x.tshape[dim + 1:]
    return _emit("take", (x, indices), shape, x.tdtype, _i64(dim))


def take_along(x: TensorProxy, indices: TensorProxy, dim: int) -> TensorProxy:
    """torch.gather: out[i][j] = x[i][indices[i][j]] along ``dim``; result of indices' shape."""
    _check(len(indices.tshape) == len(x.tshape), "take_along: ranks differ")
    return _emit("take_along", (x, indices), indices.tshape, x.tdtype, _i64(dim))


def index_add(x: TensorProxy, indices: TensorProxy, src: TensorProxy, dim: int) -> TensorProxy:
    """torch.index_add(x, dim, indices, src) with integer indices of any rank (scatter-add)."""
    _check(src.tshape == x.tshape[:dim] + indices.tshape + x.tshape[dim + 1:],
           f"index_add: src {src.tshape} for x {x.tshape}, indices {indices.tshape}")
    _check(src.tdtype == x.tdtype, "index_add: dtypes differ")
    return _emit("index_add", (x, indices, src), x.tshape, x.tdtype, _i64(dim))


def take_along_add(x: TensorProxy, indices: TensorProxy, src: TensorProxy,
                   dim: int) -> TensorProxy:
    """torch.scatter_add(x, dim, indices, src): indices and src of one shape."""
    _check(indices.tshape == src.tshape and len(src.tshape) == len(x.tshape),
           "take_along_add: indices and src must match, with x's rank")
    return _emit("take_along_add", (x, indices, src), x.tshape, x.tdtype, _i64(dim))


# ------------------------------------------------- cumulative, scatter, sort, windows
def cumulative(name: str, x: TensorProxy, dim: int) -> TensorProxy:
    """cumprod / cummax / cummin / logcumsumexp along ``dim`` (inclusive prefix), as
    stablehlo.reduce_window with a window of the whole dim padded on the low side."""
    _check(name in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"), name)
    return _emit(name, (x,), x.tshape, x.tdtype, _i64(dim))


def scatter(x: TensorProxy, indices: TensorProxy, updates: TensorProxy, kind: str) -> TensorProxy:
    """stablehlo.scatter: ``indices`` of shape B + (k,) address x's first k dims,
    ``updates`` of shape B + x.shape[k:] combine into x by ``kind`` (set, add, mul, max,
    min); out-of-range index vectors are skipped (spec: scatter, "update_scatter_dims")."""
    _check(kind in ("set", "add", "mul", "max", "min"), f"scatter kind {kind}")
    _check(indices.tdtype == torch.int64 and len(indices.tshape) >= 1, "scatter: int64 indices")
    k = indices.tshape[-1]
    _check(updates.tshape == indices.tshape[:-1] + x.tshape[k:] and updates.tdtype == x.tdtype,
           f"scatter: updates {updates.tshape}/{updates.tdtype} for x {x.tshape}/{x.tdtype}, "
           f"indices {indices.tshape}")
    return _emit("scatter", (x, indices, updates), x.tshape, x.tdtype, ir.StringAttr.get(kind))


def argsort(x: TensorProxy, dim: int, descending: bool) -> TensorProxy:
    """Stable argsort along ``dim``, NaN ordered above +inf (torch.sort's order), int64."""
    return _emit("argsort", (x,), x.tshape, torch.int64, _i64(dim), _i64(int(descending)))


def convolution(lhs: TensorProxy, rhs: TensorProxy, strides: Sequence[int],
                padding: Sequence[tuple[int, int]], lhs_dilation: Sequence[int],
                rhs_dilation: Sequence[int], groups: int) -> TensorProxy:
    """stablehlo.convolution, lhs (N, C, *spatial), rhs (O, C/groups, *kernel), result
    (N, O, *out) with out = (dilated_in + pads - dilated_kernel) // stride + 1."""
    _check(lhs.tdtype == rhs.tdtype, "convolution: dtypes differ")
    _check(lhs.tshape[1] == rhs.tshape[1] * groups, f"convolution: {lhs.tshape} * {rhs.tshape}")
    out = [lhs.tshape[0], rhs.tshape[0]]
    for i, n in enumerate(lhs.tshape[2:]):
        n_d = (n - 1) * lhs_dilation[i] + 1 if n else 0
        k_d = (rhs.tshape[2 + i] - 1) * rhs_dilation[i] + 1
        out.append(max(0, (n_d + padding[i][0] + padding[i][1] - k_d) // strides[i] + 1))
    flat = [p for pair in padding for p in pair]
    return _emit("convolution", (lhs, rhs), out, lhs.tdtype, _arr(strides), _arr(flat),
                 _arr(lhs_dilation), _arr(rhs_dilation), _i64(groups))


def reduce_window(x: TensorProxy, init: TensorProxy, kind: str, window: Sequence[int],
                  strides: Sequence[int], padding: Sequence[tuple[int, int]]) -> TensorProxy:
    """stablehlo.reduce_window with body ``kind`` (sum, max, min) and a 0-d ``init``."""
    _check(kind in ("sum", "max", "min") and init.tshape == () and init.tdtype == x.tdtype,
           "reduce_window: kind/init")
    out = [(n + lo + hi - w) // s + 1 for n, w, s, (lo, hi) in zip(x.tshape, window, strides,
                                                                   padding)]
    flat = [p for pair in padding for p in pair]
    return _emit("reduce_window", (x, init), out, x.tdtype, ir.StringAttr.get(kind),
                 _arr(window), _arr(strides), _arr(flat))


def cholesky(x: TensorProxy, lower: bool) -> TensorProxy:
    """stablehlo.cholesky of (..., n, n): the factor's other triangle is unspecified."""
    _check(len(x.tshape) >= 2 and x.tshape[-1] == x.tshape[-2], f"cholesky of {x.tshape}")
    return _emit("cholesky", (x,), x.tshape, x.tdtype, _i64(int(lower)))


def triangular_solve(a: TensorProxy, b: TensorProxy, left_side: bool, lower: bool,
                     unit_diagonal: bool, transpose_a: bool) -> TensorProxy:
    """stablehlo.triangular_solve: a (..., n, n), b (..., n, k) (left) or (..., k, n); equal
    batch dims and dtypes; result of b's shape."""
    _check(a.tdtype == b.tdtype and a.tshape[:-2] == b.tshape[:-2], "triangular_solve operands")
    return _emit("triangular_solve", (a, b), b.tshape, b.tdtype, _i64(int(left_side)),
                 _i64(int(lower)), _i64(int(unit_diagonal)), _i64(int(transpose_a)))


def dynamic_index(x: TensorProxy, index: TensorProxy) -> TensorProxy:
    """``x[index]`` along dim 0 for a 0-d int64 ``index`` computed at run time; an index
    out of range is clamped into it (stablehlo.dynamic_slice semantics). Result shape
    ``x.shape[1:]``, x's dtype (jax.lax.dynamic_index_in_dim with keepdims=False)."""
    _check(len(x.tshape) >= 1, "dynamic_index of a 0-d tensor")
    _check(index.tshape == () and index.tdtype == torch.int64, "dynamic_index: 0-d i64 index")
    return _emit("dynamic_index", (x, index), x.tshape[1:], x.tdtype)


def dynamic_update_index(x: TensorProxy, update: TensorProxy, index: TensorProxy) -> TensorProxy:
    """``x`` with ``x[index] = update`` along dim 0 (``update``: shape ``x.shape[1:]``, x's
    dtype; ``index``: 0-d int64, clamped; stablehlo.dynamic_update_slice)."""
    _check(update.tshape == x.tshape[1:] and update.tdtype == x.tdtype,
           f"dynamic_update_index: update {update.tshape}/{update.tdtype} into "
           f"{x.tshape}/{x.tdtype}")
    _check(index.tshape == () and index.tdtype == torch.int64,
           "dynamic_update_index: 0-d i64 index")
    return _emit("dynamic_update_index", (x, update, index), x.tshape, x.tdtype)
