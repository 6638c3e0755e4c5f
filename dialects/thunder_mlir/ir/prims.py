"""Prims: emit one ``thunder`` prim op with checked operands and an inferred result type.

Every builder goes through ``bind``, which applies the prim's ``PrimDef.infer`` (the
check and the shape/dtype inference of ``prim_defs.py``) and builds its op. Prims never
broadcast or promote: operands must already have the shapes and dtypes the op needs
(``lang.py`` does that sugar). Raises ValueError("prim: ...") on operands a prim does
not accept.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch_mlir import ir

from thunder_mlir.ir.dialect import pack_runs, segment_kwargs
from thunder_mlir.ir.primdef import PRIMS, TensorSpec, check as _check

from thunder_mlir.ir import dtypes, symbolic
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.builder import current_builder

Shape = tuple[int, ...]


def bind(name: str, operands: Sequence[TensorProxy], result: TensorSpec | None = None,
         **attrs) -> TensorProxy:
    """Emit prim ``name`` on ``operands`` with attribute fields ``attrs`` (Python values,
    ``PrimDef.encode``) at the current trace's insertion point. ``result``: the result's
    shape and dtype, for prims whose result is a parameter (reshape, convert_element_type,
    creation ops). Raises ValueError when ``PrimDef.infer`` rejects the operands."""
    p = PRIMS[name]
    spec = p.infer([TensorSpec(tuple(o.tshape), o.tdtype) for o in operands], attrs, result)
    builder = current_builder()
    rtype = dtypes.tensor_type(spec.shape, spec.dtype)
    # symbolic sizes in integer-list fields: the field holds the traced call's values and
    # thunder.sym.<field> the expressions (ir/symbolic.py)
    sym_fields = {n: v for n, v in attrs.items()
                  if type(v) is symbolic.SymInt or
                  (isinstance(v, (list, tuple)) and symbolic.is_symbolic(v))}
    kw = {n: p.encode(n, v if n not in sym_fields else v.hint
                      if type(v) is symbolic.SymInt else symbolic.hints(v))
          for n, v in attrs.items()}
    values = [o.value for o in operands]
    with builder.ip:
        if p.variadic:
            op = p.op(**segment_kwargs("in", values), **kw, result=rtype)
        else:
            op = p.op(*values, **kw, result=rtype)
    if symbolic.is_symbolic(spec.shape) or sym_fields:
        _annotate(op.operation, spec.shape, sym_fields)
    return TensorProxy(op.result, tuple(spec.shape), spec.dtype, builder.device)


def bind_many(name: str, operands: Sequence[TensorProxy], **attrs) -> tuple[TensorProxy, ...]:
    """Emit prim ``name``, one with several results (``PrimDef.results``), on ``operands``
    with attribute fields ``attrs`` at the current trace's insertion point; one proxy per
    result. Static shapes only. Raises ValueError when ``PrimDef.infer`` rejects the
    operands."""
    p = PRIMS[name]
    specs = p.infer([TensorSpec(tuple(o.tshape), o.tdtype) for o in operands], attrs, None)
    builder = current_builder()
    kw = {n: p.encode(n, v) for n, v in attrs.items()}
    kw.update({r: dtypes.tensor_type(s.shape, s.dtype) for r, s in zip(p.results, specs)})
    with builder.ip:
        op = p.op(*[o.value for o in operands], **kw)
    return tuple(TensorProxy(getattr(op, r), tuple(s.shape), s.dtype, builder.device)
                 for r, s in zip(p.results, specs))


def _annotate(op: ir.Operation, shape, sym_fields: dict) -> None:
    """The expressions of a symbolic result shape and symbolic integer fields, as
    discardable attributes (ir/symbolic.py)."""
    def texts(values):
        return ir.ArrayAttr.get([ir.StringAttr.get(symbolic.dim_text(v)) for v in values])
    op.attributes[symbolic.SHAPE_ATTR] = texts(shape)
    for n, v in sym_fields.items():
        op.attributes[symbolic.SYM_ATTR_PREFIX + n] = texts(
            [v] if type(v) is symbolic.SymInt else v)


def _dims(shape: Sequence) -> tuple:
    """A shape's sizes as ints, symbolic sizes kept (ir/symbolic.py)."""
    return tuple(s if type(s) is symbolic.SymInt else int(s) for s in shape)


# ---------------------------------------------------------------- elementwise
def elementwise(name: str, *xs: TensorProxy) -> TensorProxy:
    """Unary/binary elementwise prim ``name``; operands of one shape and dtype."""
    _check(PRIMS[name].elementwise, f"{name} is not an elementwise prim")
    return bind(name, xs)


def where(pred: TensorProxy, a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """stablehlo.select: pred (bool) and a, b of one shape; a, b of one dtype."""
    return bind("where", (pred, a, b))


def clamp(lo: TensorProxy, x: TensorProxy, hi: TensorProxy) -> TensorProxy:
    """stablehlo.clamp with lo/hi of x's shape and dtype."""
    return bind("clamp", (lo, x, hi))


def convert_element_type(x: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    """stablehlo.convert (float -> int truncates toward zero; x -> bool is x != 0)."""
    if x.tdtype == dtype:
        return x
    return bind("convert_element_type", (x,), TensorSpec(x.tshape, dtype))


def bitcast(x: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    """stablehlo.bitcast_convert to a ``dtype`` of the same bit width (bits unchanged)."""
    _check(x.tdtype.itemsize == dtype.itemsize,
           f"bitcast: {x.tdtype} and {dtype} differ in width")
    if x.tdtype == dtype:
        return x
    return bind("bitcast", (x,), TensorSpec(x.tshape, dtype))


# ---------------------------------------------------------------- autograd
def stop_gradient(x: TensorProxy) -> TensorProxy:
    """``x`` with a zero gradient (jax.lax.stop_gradient): torch's ``detach()``, ``.data``
    and the results of ops run under ``no_grad()``. Lowers to ``x`` itself."""
    return bind("stop_gradient", (x,))


def no_derivative(x: TensorProxy, message: str) -> TensorProxy:
    """``x``, whose derivative is not implemented in eager PyTorch: a backward that reaches
    it raises RuntimeError(``message``) when it runs, as torch.autograd's NotImplemented
    node does. Lowers to ``x`` itself."""
    return bind("no_derivative", (x,), message=message)


# -------------------------------------------------------------------- shapes
def broadcast_in_dim(x: TensorProxy, shape: Sequence[int], dims: Sequence[int]) -> TensorProxy:
    """stablehlo.broadcast_in_dim: x.shape[i] is 1 or shape[dims[i]]; dims increasing."""
    shape = _dims(shape)
    _check(len(dims) == len(x.tshape),
           f"broadcast_in_dim: {len(dims)} dims for rank {len(x.tshape)}")
    for i, d in enumerate(dims):
        _check(symbolic.stretches_to(x.tshape[i], shape[d]),
               f"broadcast_in_dim: {x.tshape} -> {shape} via {dims}")
    if symbolic.same_shape(shape, x.tshape):
        return x
    return bind("broadcast_in_dim", (x,), TensorSpec(shape, x.tdtype),
                broadcast_dimensions=list(dims))


def reshape(x: TensorProxy, shape: Sequence[int]) -> TensorProxy:
    """stablehlo.reshape (row-major element order); element counts must agree."""
    shape = _dims(shape)
    _check(math.prod(shape) == math.prod(x.tshape), f"reshape: {x.tshape} -> {shape}")
    if symbolic.same_shape(shape, x.tshape):
        return x
    return bind("reshape", (x,), TensorSpec(shape, x.tdtype))


def transpose(x: TensorProxy, perm: Sequence[int]) -> TensorProxy:
    """stablehlo.transpose: result.shape[i] = x.shape[perm[i]]."""
    perm = tuple(int(p) for p in perm)
    _check(sorted(perm) == list(range(len(x.tshape))), f"transpose: bad permutation {perm}")
    if perm == tuple(range(len(perm))):
        return x
    return bind("transpose", (x,), permutation=list(perm))


def slice_(x: TensorProxy, start: Sequence[int], limit: Sequence[int],
           strides: Sequence[int] | None = None) -> TensorProxy:
    """stablehlo.slice with 0 <= start <= limit <= dim and positive strides."""
    strides = list(strides or [1] * len(x.tshape))
    start, limit = list(start), list(limit)
    spec = PRIMS["slice"].infer([TensorSpec(x.tshape, x.tdtype)], {
        "start_indices": start, "limit_indices": limit, "strides": strides})
    if symbolic.same_shape(spec.shape, x.tshape):
        return x
    return bind("slice", (x,), start_indices=start, limit_indices=limit, strides=strides)


def reverse(x: TensorProxy, dims: Sequence[int]) -> TensorProxy:
    """stablehlo.reverse along dims."""
    return bind("reverse", (x,), dims=list(dims))


def pad(x: TensorProxy, value: TensorProxy, low: Sequence[int], high: Sequence[int],
        interior: Sequence[int] | None = None) -> TensorProxy:
    """stablehlo.pad with a 0-d ``value`` of x's dtype; negative low/high crop."""
    interior = interior or [0] * len(x.tshape)
    return bind("pad", (x, value), low=list(low), high=list(high), interior=list(interior))


def concatenate(xs: Sequence[TensorProxy], dim: int) -> TensorProxy:
    """stablehlo.concatenate along ``dim``; other dims and dtypes equal."""
    _check(len(xs) > 0, "concatenate of nothing")
    if len(xs) == 1:
        return xs[0]
    if pack_runs([x.value for x in xs]) is None:  # too many shape runs: concatenate in halves
        half = len(xs) // 2
        return concatenate([concatenate(xs[:half], dim), concatenate(xs[half:], dim)], dim)
    return bind("concatenate", xs, dimension=dim)


# ----------------------------------------------------------------- creation
def iota(shape: Sequence[int], dtype: torch.dtype, dim: int) -> TensorProxy:
    """stablehlo.iota: element = its index along ``dim``."""
    return bind("iota", (), TensorSpec(_dims(shape), dtype), dimension=dim)


def full(shape: Sequence[int], value, dtype: torch.dtype) -> TensorProxy:
    """A tensor of ``shape`` filled with the Python number ``value`` (stablehlo.constant)."""
    shape = _dims(shape)
    if dtype.is_complex:  # no complex scalar attribute: a splat constant
        rtype = dtypes.tensor_type(shape, dtype)
        return _constant_op(dtypes.complex_splat(rtype, value), shape, dtype)
    if type(value) is symbolic.SymInt:  # a symbolic size as a value: computed at run time
        v = value if dtype != torch.bool else value != 0
    else:
        v = float(value) if dtype.is_floating_point else int(value)
    return bind("full", (), TensorSpec(shape, dtype), value=v)


def constant(data: torch.Tensor) -> TensorProxy:
    """A literal tensor (``torch.tensor([...])`` written in the program)."""
    import numpy as np

    rtype = dtypes.tensor_type(data.shape, data.dtype)
    arr = data.detach().cpu()
    if data.dtype == torch.bfloat16:
        arr = arr.float()
    np_arr = np.ascontiguousarray(arr.numpy())
    attr = ir.DenseElementsAttr.get(np_arr, type=rtype.element_type, shape=list(data.shape))
    return _constant_op(attr, data.shape, data.dtype)


def _constant_op(attr: ir.Attribute, shape, dtype) -> TensorProxy:
    out = bind("constant", (), TensorSpec(tuple(int(s) for s in shape), dtype))
    out.value.owner.attributes["value"] = attr
    return out


def rng_bits(seed: TensorProxy, stream: int, shape: Sequence[int],
             dtype: torch.dtype) -> TensorProxy:
    """Uniformly random bits: an int32 or int64 tensor of ``shape`` from
    stablehlo.rng_bit_generator (THREE_FRY) with state ``[seed, stream << 40]``
    (``seed``: the program's 0-d int64 seed; see thunder_mlir/rng.py)."""
    return bind("rng_bits", (seed,), TensorSpec(tuple(int(s) for s in shape), dtype),
                stream=stream)


# --------------------------------------------------------------- reductions
def reduce(name: str, x: TensorProxy, dims: Sequence[int]) -> TensorProxy:
    """reduce_{sum,prod,max,min,and,or} over ``dims`` (removed from the shape)."""
    dims = sorted({int(d) for d in dims})
    if not dims:
        return x
    return bind(name, (x,), dims=dims)


def argreduce(name: str, x: TensorProxy, dim: int) -> TensorProxy:
    """argmax/argmin over ``dim``: int64 index of the first extreme element."""
    return bind(name, (x,), dim=dim)


def cumsum(x: TensorProxy, dim: int) -> TensorProxy:
    """Inclusive prefix sum along ``dim``."""
    return bind("cumsum", (x,), dim=dim)


# ------------------------------------------------------------ linear algebra
def dot_general(lhs: TensorProxy, rhs: TensorProxy, lhs_batch: Sequence[int],
                rhs_batch: Sequence[int], lhs_contract: Sequence[int],
                rhs_contract: Sequence[int]) -> TensorProxy:
    """stablehlo.dot_general: result = batch dims, lhs free dims, rhs free dims."""
    return bind("dot_general", (lhs, rhs), lhs_batching_dimensions=list(lhs_batch),
                rhs_batching_dimensions=list(rhs_batch),
                lhs_contracting_dimensions=list(lhs_contract),
                rhs_contracting_dimensions=list(rhs_contract))


# ----------------------------------------------------------------- indexing
def take(x: TensorProxy, indices: TensorProxy, dim: int) -> TensorProxy:
    """x.shape[:dim] + indices.shape + x.shape[dim+1:]; indices in [0, x.shape[dim])."""
    return bind("take", (x, indices), dim=dim)


def take_along(x: TensorProxy, indices: TensorProxy, dim: int) -> TensorProxy:
    """torch.gather: out[i][j] = x[i][indices[i][j]] along ``dim``; result of indices' shape."""
    return bind("take_along", (x, indices), dim=dim)


def index_add(x: TensorProxy, indices: TensorProxy, src: TensorProxy, dim: int) -> TensorProxy:
    """torch.index_add(x, dim, indices, src) with integer indices of any rank (scatter-add)."""
    return bind("index_add", (x, indices, src), dim=dim)


def take_along_add(x: TensorProxy, indices: TensorProxy, src: TensorProxy,
                   dim: int) -> TensorProxy:
    """torch.scatter_add(x, dim, indices, src): indices and src of one shape."""
    return bind("take_along_add", (x, indices, src), dim=dim)


# ------------------------------------------------- cumulative, scatter, sort, windows
def cumulative(name: str, x: TensorProxy, dim: int) -> TensorProxy:
    """cumprod / cummax / cummin / logcumsumexp along ``dim`` (inclusive prefix), as
    stablehlo.reduce_window with a window of the whole dim padded on the low side."""
    _check(name in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"), name)
    return bind(name, (x,), dim=dim)


def scatter(x: TensorProxy, indices: TensorProxy, updates: TensorProxy, kind: str) -> TensorProxy:
    """stablehlo.scatter: ``indices`` of shape B + (k,) address x's first k dims,
    ``updates`` of shape B + x.shape[k:] combine into x by ``kind`` (set, add, mul, max,
    min); out-of-range index vectors are skipped (spec: scatter, "update_scatter_dims")."""
    return bind("scatter", (x, indices, updates), kind=kind)


def argsort(x: TensorProxy, dim: int, descending: bool) -> TensorProxy:
    """Stable argsort along ``dim``, NaN ordered above +inf (torch.sort's order), int64."""
    return bind("argsort", (x,), dim=dim, descending=int(descending))


def convolution(lhs: TensorProxy, rhs: TensorProxy, strides: Sequence[int],
                padding: Sequence[tuple[int, int]], lhs_dilation: Sequence[int],
                rhs_dilation: Sequence[int], groups: int, batch_groups: int = 1) -> TensorProxy:
    """stablehlo.convolution, lhs (N, C, *spatial), rhs (O, C/groups, *kernel), result
    (N/batch_groups, O, *out) with out = (dilated_in + pads - dilated_kernel) // stride + 1.

    ``groups`` is ``feature_group_count`` (torch's ``groups``: input channels and output
    channels in as many contiguous blocks, block g of the output reading block g of the
    input); ``batch_groups`` is ``batch_group_count``: the batch N and the output channels
    O in as many contiguous blocks, block g of the output channels reading block g of the
    batch (the weight gradient of a grouped convolution; StableHLO spec "convolution").
    At most one of them may exceed 1; the inference raises ValueError otherwise."""
    flat = [p for pair in padding for p in pair]
    return bind("convolution", (lhs, rhs), window_strides=list(strides), padding=flat,
                lhs_dilation=list(lhs_dilation), rhs_dilation=list(rhs_dilation),
                feature_group_count=groups, batch_group_count=batch_groups)


def reduce_window(x: TensorProxy, init: TensorProxy, kind: str, window: Sequence[int],
                  strides: Sequence[int], padding: Sequence[tuple[int, int]]) -> TensorProxy:
    """stablehlo.reduce_window with body ``kind`` (sum, max, min) and a 0-d ``init``."""
    flat = [p for pair in padding for p in pair]
    return bind("reduce_window", (x, init), kind=kind, window_dimensions=list(window),
                window_strides=list(strides), padding=flat)


def cholesky(x: TensorProxy, lower: bool) -> TensorProxy:
    """stablehlo.cholesky of (..., n, n): the factor's other triangle is unspecified."""
    return bind("cholesky", (x,), lower=int(lower))


def triangular_solve(a: TensorProxy, b: TensorProxy, left_side: bool, lower: bool,
                     unit_diagonal: bool, transpose_a: bool) -> TensorProxy:
    """stablehlo.triangular_solve: a (..., n, n), b (..., n, k) (left) or (..., k, n); equal
    batch dims and dtypes; result of b's shape."""
    return bind("triangular_solve", (a, b), left_side=int(left_side), lower=int(lower),
                unit_diagonal=int(unit_diagonal), transpose_a=int(transpose_a))


def dynamic_index(x: TensorProxy, index: TensorProxy, dim: int = 0) -> TensorProxy:
    """``x.select(dim, index)`` for a 0-d int64 ``index`` computed at run time; an index
    out of range is clamped into it (stablehlo.dynamic_slice semantics). Result shape
    ``x.shape`` without ``dim``, x's dtype (jax.lax.dynamic_index_in_dim with
    keepdims=False)."""
    return bind("dynamic_index", (x, index), dim=dim)


def dynamic_update_index(x: TensorProxy, update: TensorProxy, index: TensorProxy,
                         dim: int = 0) -> TensorProxy:
    """``x`` with ``x.select(dim, index) = update`` (``update``: ``x.shape`` without
    ``dim``, x's dtype; ``index``: 0-d int64, clamped; stablehlo.dynamic_update_slice,
    which XLA runs in place on a buffer it may overwrite: only the slice is written)."""
    return bind("dynamic_update_index", (x, update, index), dim=dim)
