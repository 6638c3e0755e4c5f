"""Scatter symbols: scatter/scatter_add/scatter_reduce, index_add/index_copy/index_reduce,
index_put, put, masked_scatter, slice_scatter/select_scatter, index_fill, fill and index
assignment (``x[index] = value``, every index form of ``getitem``) —
functional forms, on the ``scatter`` prim (stablehlo.scatter, spec section "scatter") or
on slices.

Semantics follow the PyTorch documentation of each op (``Tensor.scatter_``,
``Tensor.index_add_``, ...). Duplicate indices under ``set`` semantics are unspecified in
torch and in StableHLO alike. Boolean-mask ``index_put`` runs on the torch fallback.
"""

from __future__ import annotations

import math
import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims, symbolic
from thunder_mlir.frontend import lang
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.frontend.runtime_checks import check_indices
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols import shape as S
from thunder_mlir.frontend.symbols.registry import SYMBOLS, _Inline, register_inplace
from thunder_mlir.frontend.symbols.indexing import _as_index_tensor, _is_advanced, \
    _sequence_as_tuple, bool_scalars_as_python, bools_as_index_tensors, getitem, unsqueezed
from thunder_mlir.frontend.symbols.creation import _literal
from thunder_mlir.frontend.functionalization import VALUE_INDEXED_WRITES, type_name, \
    check_overlap, keep_edge, update_view, write_inplace


def _wrap(idx: TensorProxy, size: int) -> TensorProxy:
    idx = prims.convert_element_type(idx, torch.int64)
    neg = prims.elementwise("lt", idx, prims.full(idx.tshape, 0, torch.int64))
    return prims.where(neg, prims.elementwise("add", idx, prims.full(idx.tshape, size,
                                                                      torch.int64)), idx)


def _coords(index: TensorProxy, dim: int, rank: int) -> TensorProxy:
    """index.shape + (rank,): (i0, ..., index[i], ..., i_{r-1}) for torch.scatter."""
    shape = index.tshape
    parts = []
    for i in range(rank):
        c = index if i == dim else prims.iota(shape, torch.int64, i)
        parts.append(prims.reshape(prims.convert_element_type(c, torch.int64), shape + (1,)))
    return prims.concatenate(parts, len(shape))


def _identity(kind, dtype):
    if kind in ("add", "sum", "mean"):
        return 0
    if kind in ("mul", "prod"):
        return 1
    if dtype.is_floating_point:
        return float("-inf") if kind in ("max", "amax") else float("inf")
    if dtype is torch.bool:
        return kind not in ("max", "amax")
    info = torch.iinfo(dtype)
    return info.min if kind in ("max", "amax") else info.max


_KIND = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max",
         "amin": "min", "mean": "add"}


def _reduce_scatter(x, coords, upd, reduce, include_self):
    """scatter_reduce/index_reduce semantics over prepared coordinates and updates."""
    dt = x.tdtype
    kind = _KIND[reduce]
    if dt is torch.bool and kind in ("add", "mul"):
        raise Fallback("bool scatter reductions")
    base = x
    if not include_self:
        touched = prims.scatter(prims.full(x.tshape, False, torch.bool), coords,
                                prims.full(upd.tshape, True, torch.bool), "set")
        base = prims.where(touched, prims.full(x.tshape, _identity(reduce, dt), dt), x)
    out = prims.scatter(base, coords, upd, kind)
    if reduce != "mean":
        return out
    ones = prims.full(upd.tshape, 1, dt)
    count = prims.scatter(prims.full(x.tshape, 1 if include_self else 0, dt), coords, ones, "add")
    safe = prims.where(prims.elementwise("eq", count, prims.full(x.tshape, 0, dt)),
                       prims.full(x.tshape, 1, dt), count)
    if dt.is_floating_point:
        return prims.elementwise("div", out, safe)
    from thunder_mlir.frontend.symbols.elementwise import floor_divide
    return floor_divide(out, safe)


def _src_like(src, index, dtype):
    if type(src) is TensorProxy:
        lim = index.tshape
        s = prims.slice_(src, [0] * len(lim), list(lim)) if src.tshape != lim else src
        return prims.convert_element_type(s, dtype)
    return prims.full(index.tshape, src, dtype)


@register("scatter", torch.scatter, T.scatter)
def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """torch.scatter(input, dim, index, src | value, reduce=None | 'add' | 'multiply')."""
    if src is None:
        src = value
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    if r == 0:
        raise Fallback("scatter on a 0-d tensor")
    if len(index.tshape) != r or (type(src) is TensorProxy and len(src.tshape) != r):
        raise RuntimeError("Index tensor must have the same number of dimensions as self "
                           "tensor" if len(index.tshape) != r else "Index tensor must have "
                           "the same number of dimensions as src tensor")
    if math.prod(index.tshape) == 0:
        return input
    check_indices(index, input.tshape[d], d, negative=False, error=RuntimeError)
    upd = _src_like(src, index, input.tdtype)
    kind = {None: "set", "add": "add", "multiply": "mul"}[reduce]
    return prims.scatter(input, _coords(index, d, r), upd, kind)


@register("scatter_add", torch.scatter_add, T.scatter_add)
def scatter_add(input, dim, index, src):
    return scatter(input, dim, index, src, reduce="add") if input.tdtype is not torch.bool \
        else _bool_fallback()


def _bool_fallback():
    raise Fallback("bool scatter_add")


@register("scatter_reduce", torch.scatter_reduce, T.scatter_reduce)
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    if r == 0:
        raise Fallback("scatter_reduce on a 0-d tensor")
    if math.prod(index.tshape) == 0:
        return input
    check_indices(index, input.tshape[d], d, negative=False, error=RuntimeError)
    upd = _src_like(src, index, input.tdtype)
    return _reduce_scatter(input, _coords(index, d, r), upd, reduce, include_self)


def _front(x, d):
    r = len(x.tshape)
    return prims.transpose(x, [d] + [i for i in range(r) if i != d])


def _back(x, d):
    r = len(x.tshape)
    perm = [i for i in range(r) if i != d]
    inv = [0] * r
    for pos, i in enumerate([d] + perm):
        inv[i] = pos
    return prims.transpose(x, inv)


def _copy_one_index(input, d, idx, source, checked: bool):
    """``input.index_copy(d, idx, source)`` for a one-element (wrapped) ``idx`` and a
    ``source`` of ``input``'s shape with size 1 at ``d`` (any other shape takes the scatter
    below, whose shape check gives eager's error): ``source`` written into slice ``idx``
    of ``input`` along ``d`` (``dynamic_update_index``: stablehlo.dynamic_update_slice).

    A KV-cache write (``StaticCache.update``: ``keys.index_copy_(2, cache_position, k)``,
    one position per decode step) is then a dynamic-update-slice, which XLA runs in place
    on the cache's buffer, writing one position, where a select over the iota along ``d``
    reads and writes the whole cache (GPT-2 batch-8 decode step, H100 target: 12 kernels
    of 9 MiB, a quarter of the step's bytes; docs/gpu.md), and no transposes around a
    scatter.

    StableHLO clamps the start index into range, so for an index out of range this writes
    ``source`` into the nearest slice, where eager raises. It is used only where the index
    check is made (``checked``: runtime_checks.check_indices said so): the check then
    raises eager's error before the result is seen, and the written inputs a failed check
    cannot leave unseen are guarded by it (runtime_checks.unless_failed; on a GPU a failed
    check is a device-side assert, Target.guard_writes). Otherwise, and for symbolic
    sizes (the dynamic-shape lowering has no dynamic_update_slice), the select over the
    iota, which leaves ``input`` unchanged for an index out of range."""
    shape = input.tshape
    if not checked or not all(type(s) is int for s in shape):
        return _select_one_index(input, d, idx, source)
    i = prims.reshape(prims.convert_element_type(idx, torch.int64), ())
    rest = tuple(s for j, s in enumerate(shape) if j != d)
    src = prims.reshape(prims.convert_element_type(source, input.tdtype), rest)
    return prims.dynamic_update_index(input, src, i, d)


def _select_one_index(input, d, idx, source):
    """``_copy_one_index`` for symbolic sizes (the dynamic-shape lowering has no
    dynamic_update_slice): a select of ``source``, broadcast along ``d``, where the iota
    along ``d`` equals the index (none does for an index out of range: ``input``
    unchanged)."""
    shape = input.tshape
    at = prims.broadcast_in_dim(prims.reshape(idx, ()), shape, [])
    hit = prims.elementwise("eq", prims.iota(shape, torch.int64, d), at)
    src = prims.broadcast_in_dim(prims.convert_element_type(source, input.tdtype), shape,
                                 list(range(len(shape))))
    return prims.where(hit, src, input)


def _index_op(input, dim, index, source, reduce, include_self=True, alpha=1):
    r = len(input.tshape)
    if r == 0:  # a 0-d tensor indexes like a 1-element vector
        canonical_dim(dim, 0)  # (eager: IndexError "index out of range in self" for any op)
        check_indices(index, 1, 0, negative=False, message="index out of range in self")
        out = _index_op(prims.reshape(input, (1,)), 0, index, prims.reshape(
            source, (1,) * len(source.tshape) or (1,)), reduce, include_self, alpha)
        return prims.reshape(out, ())
    d = canonical_dim(dim, r)
    n = input.tshape[d]
    # eager: index_add_ RuntimeError, index_copy_/index_reduce_ IndexError, both for any
    # negative index too (aten/src/ATen/native/TensorAdvancedIndexing.cpp)
    checked = check_indices(index, n, d, negative=False,
                            error=RuntimeError if reduce == "add" else IndexError)
    idx = _wrap(prims.reshape(index, (math.prod(index.tshape),)), n)
    k = idx.tshape[0]
    scatter = reduce == "set" or (reduce == "add" and input.tdtype is not torch.bool)
    # (a data-dependent k (ShapeEnv.new_unbacked) may be 0: the scatter of no update is
    # the input, without asking k == 0, a guard that would trace a program per zero count)
    if not (type(k) is symbolic.SymInt and scatter) and k == 0:
        return input
    if reduce == "set" and type(k) is int and k == 1 and len(source.tshape) == r and \
            source.tshape[d] == 1 and all(source.tshape[j] == input.tshape[j]
                                          for j in range(r) if j != d):
        # (symbolic sizes: each == holds at the traced call and is recorded as a guard)
        return _copy_one_index(input, d, idx, source, checked)
    x = _front(input, d)
    src = source
    if len(src.tshape) == 0:
        src = prims.reshape(src, (1,))
    src = prims.convert_element_type(_front(src, d) if len(source.tshape) else src, input.tdtype)
    if alpha != 1:
        from thunder_mlir.frontend.symbols.elementwise import mul
        src = prims.convert_element_type(mul(src, alpha), input.tdtype)
    coords = prims.reshape(idx, (k, 1))
    if reduce == "set":
        out = prims.scatter(x, coords, src, "set")
    elif reduce == "add" and input.tdtype is not torch.bool:
        out = prims.scatter(x, coords, src, "add")
    else:
        out = _reduce_scatter(x, coords, src, "sum" if reduce == "add" else reduce, include_self)
    return _back(out, d)


@register("index_add", torch.index_add, T.index_add)
def index_add(input, dim, index, source, *, alpha=1):
    if input.tdtype is torch.bool:
        raise Fallback("bool index_add")
    return _index_op(input, dim, index, source, "add", alpha=alpha)


@register("index_copy", torch.index_copy, T.index_copy)
def index_copy(input, dim, index, source):
    if source.tdtype != input.tdtype:  # ATen's index_copy_ check (no type promotion)
        raise RuntimeError(
            "index_copy_(): self and source expected to have the same dtype, but got (self) "
            f"{_aten_name(input.tdtype)} and (source) {_aten_name(source.tdtype)}")
    _check_index_copy_slices(input, dim, source)
    return _index_op(input, dim, index, source, "set")


def _check_index_copy_slices(input, dim, source):
    """ATen's ``index_copy_`` check that ``input`` and ``source`` without dim ``dim`` have
    the same shape (``TORCH_META_FUNC(index_copy)``, aten/src/ATen/native/
    TensorAdvancedIndexing.cpp), with eager's CPU message. Raises RuntimeError.

    Checked here, before ``_index_op`` (whose one-position shortcut would broadcast a size-1
    source dim that eager refuses), because the error boundary can only learn eager's error
    from torch's meta kernel where that kernel checks it, which torch 2.11's does not.
    Symbolic sizes: each ``==`` holds at the traced call and is recorded as a guard."""
    r, rs = len(input.tshape), len(source.tshape)
    if r == 0 or rs == 0 or rs != r:
        return  # scalars and rank mismatches: _index_op's checks
    d = canonical_dim(dim, r)
    dst = [n for j, n in enumerate(input.tshape) if j != d]
    src = [n for j, n in enumerate(source.tshape) if j != d]
    if not all(a == b for a, b in zip(dst, src)):
        raise RuntimeError(
            "index_copy_(): Source/destination tensor must have same slice shapes. "
            f"Destination slice shape: {' '.join(map(str, dst))} at dimension {d} and source "
            f"slice shape: {' '.join(map(str, src))} at dimension 0.")


def _aten_name(dtype: torch.dtype) -> str:
    """ATen's ScalarType name (``BFloat16``, ``Double``) for error messages."""
    return {torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(dtype, str(dtype))


@register("index_reduce", torch.index_reduce, T.index_reduce)
def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    return _index_op(input, dim, index, source, reduce, include_self)


@register("index_put", torch.index_put, T.index_put)
def index_put(input, indices, values, accumulate=False):
    """input[indices] = values (or +=, accumulate=True) with integer index tensors; None
    entries are full slices. Index tensors broadcast together (NumPy advanced indexing)."""
    indices = list(indices)
    r = len(input.tshape)
    for ix in indices:
        if ix is not None and (ix.tdtype is torch.bool or ix.tdtype is torch.uint8):
            raise Fallback("index_put with a boolean mask")
    while len(indices) < r:
        indices.append(None)
    dims = [i for i, ix in enumerate(indices) if ix is not None]
    if not dims:
        raise Fallback("index_put without index tensors")
    for i in dims:
        check_indices(indices[i], input.tshape[i], i)
    idx = [_wrap(indices[i], input.tshape[i]) for i in dims]
    bshape = tuple(lang.broadcast_shapes(*[i.tshape for i in idx]))
    idx = [expand_to(i, bshape) for i in idx]
    rest = [i for i in range(r) if i not in dims]
    x = prims.transpose(input, dims + rest)
    nb = len(bshape)
    coords = prims.concatenate([prims.reshape(i, bshape + (1,)) for i in idx], nb)
    # values broadcast to input[indices]'s shape, then to B + rest order
    rest_shape = tuple(input.tshape[i] for i in rest)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        first = dims[0]
        res_shape = rest_shape[:first] + bshape + rest_shape[first:]
    else:
        first, res_shape = 0, bshape + rest_shape
    v = values if type(values) is TensorProxy else prims.full((), values, input.tdtype)
    v = expand_to(prims.convert_element_type(v, input.tdtype), res_shape)
    if adjacent and first > 0:
        perm = list(range(first, first + nb)) + list(range(first)) + list(
            range(first + nb, len(res_shape)))
        v = prims.transpose(v, perm)
    if accumulate and input.tdtype is torch.bool:
        raise Fallback("bool index_put accumulate")
    out = prims.scatter(x, coords, v, "add" if accumulate else "set")
    order = dims + rest
    inv = [order.index(i) for i in range(r)]
    return prims.transpose(out, inv)


@register("put", torch.put, T.put)
def put(input, index, source, accumulate=False):
    n = math.prod(input.tshape)
    flat = prims.reshape(input, (n,))
    k = math.prod(index.tshape)
    if k == 0:
        return input
    check_indices(index, n, 0, error=IndexError, message=f"an index is out of range "
                  f"for a tensor of {n} elements")
    idx = prims.reshape(_wrap(prims.reshape(index, (k,)), n), (k, 1))
    src = prims.reshape(prims.convert_element_type(source, input.tdtype), (k,))
    if accumulate and input.tdtype is torch.bool:
        raise Fallback("bool put accumulate")
    out = prims.scatter(flat, idx, src, "add" if accumulate else "set")
    return prims.reshape(out, input.tshape)


@register("masked_scatter", torch.masked_scatter, T.masked_scatter)
def masked_scatter(input, mask, source):
    """Positions where mask is true take source's elements in order: the k-th true
    position (row-major) takes source.flatten()[k] (an inclusive cumsum of the mask)."""
    shape = tuple(lang.broadcast_shapes(input.tshape, mask.tshape))
    x = expand_to(input, shape)
    m = expand_to(mask, shape)
    n = math.prod(shape)
    ns = math.prod(source.tshape)
    if n == 0 or ns == 0:
        return x
    mf = prims.reshape(prims.convert_element_type(m, torch.int64), (n,))
    pos = prims.elementwise("sub", prims.cumsum(mf, 0), prims.full((n,), 1, torch.int64))
    pos = prims.clamp(prims.full((n,), 0, torch.int64), pos, prims.full((n,), ns - 1, torch.int64))
    vals = prims.take(prims.reshape(prims.convert_element_type(source, input.tdtype), (ns,)),
                      pos, 0)
    return prims.where(m, prims.reshape(vals, shape), x)


@register("slice_scatter", torch.slice_scatter, T.slice_scatter)
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with input[..., start:end:step, ...] (along dim) replaced by src: src padded
    into place with stablehlo.pad (interior padding = step - 1) and selected by a mask."""
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    n = input.tshape[d]
    s, e, st = slice(start, end, step).indices(n)
    k = len(range(s, max(s, e), st))
    if k == 0:
        return input
    lows, highs, inter = [0] * r, [0] * r, [0] * r
    lows[d], inter[d] = s, st - 1
    highs[d] = n - (s + (k - 1) * st + 1)
    src = prims.convert_element_type(src, input.tdtype)
    padded = prims.pad(src, prims.full((), 0, input.tdtype), lows, highs, inter)
    mask = prims.pad(prims.full(src.tshape, True, torch.bool), prims.full((), False, torch.bool),
                     lows, highs, inter)
    return prims.where(mask, padded, input)


@register("select_scatter", torch.select_scatter, T.select_scatter)
def select_scatter(input, src, dim, index):
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    i = index + input.tshape[d] if index < 0 else index
    return slice_scatter(input, S.unsqueeze(src, d), d, i, i + 1, 1)


@register("index_fill", torch.index_fill, T.index_fill)
def index_fill(input, dim, index, value):
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    n = input.tshape[d] if r else 1
    check_indices(index, n, d)  # (before the reshape: the composite's own operand)
    idx = _as_index_tensor(prims.reshape(index, (math.prod(index.tshape),)), n)
    k = idx.tshape[0]
    pos = prims.iota((n, k), torch.int64, 0)
    hit = prims.reduce("reduce_or", prims.elementwise("eq", pos, expand_to(
        prims.reshape(idx, (1, k)), (n, k))), [1])
    mask = prims.broadcast_in_dim(hit, input.tshape, [d]) if r else prims.reshape(hit, ())
    if type(value) is TensorProxy:
        v = expand_to(prims.convert_element_type(value, input.tdtype), input.tshape)
    else:
        v = prims.full(input.tshape, value, input.tdtype)
    return prims.where(mask, v, input)


@register("fill", torch.fill)
def fill(input, value):
    if type(value) is TensorProxy:
        return expand_to(prims.convert_element_type(value, input.tdtype), input.tshape)
    return prims.full(input.tshape, value, input.tdtype)


register_inplace(fill, T.fill_)
# Tensor.index_copy_ (a StaticCache's KV write) and index_add_: the functional op, self
# rebound to the result (registry.write_inplace), as ATen's in-place variants define them
register_inplace(index_copy, T.index_copy_)
register_inplace(index_add, T.index_add_)


# ------------------------------------------------------------------ index assignment
def _normalize_index(index) -> tuple:
    if _sequence_as_tuple(index):
        index = tuple(index)
    return bool_scalars_as_python(index if isinstance(index, tuple) else (index,))


def _value_to(value, shape: tuple, dtype: torch.dtype, advanced: bool) -> TensorProxy:
    """The assigned value as a tensor of ``shape`` and ``dtype``: leading size-1 dims beyond
    the target's rank are dropped and the rest broadcast (ATen's ``slicePrefix1sSize`` and
    ``copy_``); a value that does not broadcast raises eager's RuntimeError."""
    if type(value) is not TensorProxy:
        return prims.full(tuple(shape), value, dtype)
    v = value
    while len(v.tshape) > len(shape) and v.tshape[0] == 1:
        v = prims.reshape(v, v.tshape[1:])
    ok = len(v.tshape) <= len(shape) and all(
        a == b or a == 1 for a, b in zip(reversed(v.tshape), reversed(shape)))
    if not ok:
        if advanced:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.tshape)} "
                               f"cannot be broadcast to indexing result of shape {list(shape)}")
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1] if shape else 0}) "
                           f"must match the existing size ({v.tshape[-1] if v.tshape else 0}) "
                           f"at non-singleton dimension {max(len(shape) - 1, 0)}.  Target "
                           f"sizes: {list(shape)}.  Tensor sizes: {list(value.tshape)}")
    return expand_to(prims.convert_element_type(v, dtype), tuple(shape))


def _is_int0(ix) -> bool:
    """A 0-d integer tensor index, which eager reads as an int (a select)."""
    return type(ix) is TensorProxy and not ix.tshape and \
        ix.tdtype not in (torch.bool, torch.uint8)


def _is_mask(ix) -> bool:
    return type(ix) is TensorProxy and ix.tdtype in (torch.bool, torch.uint8)


@register("index_assign")
def index_assign(input, index, value):
    """The value of ``input`` after ``input[index] = value`` (``Tensor.__setitem__``), any
    index form of ``getitem``: the value is converted to ``input``'s dtype and broadcast to
    ``input[index]``'s shape; the written elements are

    * a strided box (ints, slices with steps, None, Ellipsis): padded into place under a
      mask (``functionalization.update_view`` with the meta view ``input[index]``);
    * integer index tensors over leading full slices: ``index_put`` (a scatter);
    * other mixes of basic and advanced indices: a scatter at the flat positions that
      ``getitem`` of an iota over ``input`` selects;
    * one boolean mask with a one-element value: a select.

    Duplicate positions take one of their values (unspecified in torch and StableHLO
    alike). Raises Fallback for a boolean mask with a value of several elements (its
    count depends on the data). Follows torch's ``index_put_`` and ``copy_`` semantics
    (aten/src/ATen/TensorIndexing.h, ``applySlicing`` and ``copy_to``)."""
    index = _normalize_index(index)
    bools = bools_as_index_tensors(len(input.tshape), index)
    if bools is not None:  # x[True, 5] = v: index_put_ into x unsqueezed (ATen's reading)
        new_dims, index = bools
        return prims.reshape(index_assign(unsqueezed(input, new_dims), index, value),
                             input.tshape)
    tensors = [ix for ix in index if _is_advanced(ix)]
    if not tensors:  # a strided box of the base
        with torch._C.DisableTorchFunction():
            view = torch.empty(input.tshape, dtype=input.tdtype, device="meta")[index]
        return update_view(input, view, _value_to(value, tuple(view.shape), input.tdtype,
                                                  False))
    masks = [ix for ix in index if _is_mask(ix)]
    if masks:
        return _mask_assign(input, index, value)
    rank = len(input.tshape)
    if all(_is_advanced(ix) or (isinstance(ix, slice) and ix == slice(None)) for ix in index) \
            and len(index) <= rank:
        indices = [ix if _is_advanced(ix) else None for ix in index]
        indices = [ix if ix is None or type(ix) is TensorProxy else _literal(ix)
                   for ix in indices]
        target = getitem(input, index)  # (its shape: the value broadcasts to it)
        return index_put(input, indices, _value_to(value, target.tshape, input.tdtype, True))
    n = math.prod(input.tshape)
    ids = prims.reshape(prims.iota((n,), torch.int64, 0), input.tshape)
    where = getitem(ids, index)
    m = math.prod(where.tshape)
    if m == 0:
        return input
    v = _value_to(value, where.tshape, input.tdtype, True)
    out = prims.scatter(prims.reshape(input, (n,)), prims.reshape(where, (m, 1)),
                        prims.reshape(v, (m,)), "set")
    return prims.reshape(out, input.tshape)


def _check_index_put_dtypes(input, index: tuple, value) -> None:
    """ATen's ``index_put_`` check, for an index with tensors (Python bools are index
    tensors too): a tensor value of another dtype than the written tensor's is an error,
    not a conversion, unless ``index_put_`` dispatches to ``masked_fill_``, which converts
    it: a one-element value and one boolean mask the only index tensor
    (``canDispatchToMaskedFill``, aten/src/ATen/native/TensorAdvancedIndexing.cpp). A 0-d
    integer tensor is no index tensor there: ATen reads it as an int (a select,
    ``applySlicing`` in aten/src/ATen/TensorIndexing.h), and ``copy_`` converts the value."""
    if type(value) is not TensorProxy or value.tdtype == input.tdtype:
        return
    tensors = [ix for ix in index if _is_advanced(ix) and not _is_int0(ix)
               or isinstance(ix, bool)]
    if not tensors or math.prod(value.tshape) == 1 and len(tensors) == 1 and \
            _is_mask(tensors[0]):
        return
    from thunder_mlir.errors import TorchOpRuntimeError
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    # (raised at the user's line, as eager's: a re-run on zeros, whose mask selects nothing,
    # would report a shape error instead)
    raise TorchOpRuntimeError(
        f"{describe_frame(user_frame())}\n  Index put requires the source and destination "
        f"dtypes match, got {type_name(input.tdtype)} for the destination and "
        f"{type_name(value.tdtype)} for the source.\n  Eager PyTorch raises this "
        "RuntimeError too: index_put_ does not convert the value. Convert it with "
        ".to(x.dtype) first.")


def _mask_assign(input, index, value):
    """``input[mask] = value`` (the mask possibly between full slices and one Ellipsis)
    with a one-element value: where(mask, value, input); with one value per true position
    (``x[m] = y[m]``): masked_scatter."""
    rank = len(input.tshape)
    at = [k for k, ix in enumerate(index) if _is_mask(ix)]
    lead, trail = index[:at[0]], index[at[0] + 1:]
    full = lambda ix: ix is Ellipsis or isinstance(ix, slice) and ix == slice(None)  # noqa: E731
    if len(at) != 1 or not all(full(ix) for ix in lead + trail) or \
            sum(ix is Ellipsis for ix in index) > 1:
        raise Fallback("index assignment with a boolean mask among other indices")
    mask = index[at[0]]
    k = len(mask.tshape)
    first = rank - k - len(trail) if Ellipsis in lead else len(lead)
    want = tuple(input.tshape[first:first + k])
    if tuple(mask.tshape) != want:
        raise IndexError(f"The shape of the mask {list(mask.tshape)} at index {first} does "
                         f"not match the shape of the indexed tensor {list(want)} at index "
                         f"{first}")
    m = prims.broadcast_in_dim(prims.convert_element_type(mask, torch.bool), input.tshape,
                               list(range(first, first + k)))
    if type(value) is TensorProxy and math.prod(value.tshape) != 1:
        # one value per true position (times the dims after the mask), in row-major order:
        # masked_scatter's order. The count is the mask's: a value of a size the mask's
        # count cannot have is eager's error, which needs the data (refused instead)
        rest = tuple(input.tshape[first + k:])
        if first != 0 or tuple(value.tshape[1:]) != rest or len(value.tshape) != 1 + len(rest):
            raise Fallback("index assignment of several values through a boolean mask")
        return masked_scatter(input, m, prims.convert_element_type(value, input.tdtype))
    if type(value) is TensorProxy:
        v = expand_to(prims.reshape(prims.convert_element_type(value, input.tdtype), ()),
                      input.tshape)
    else:
        v = prims.full(input.tshape, value, input.tdtype)
    return prims.where(m, v, input)


def _setitem(self, index, value):
    """``Tensor.__setitem__``: ``self`` takes ``index_assign``'s value (written through
    its views into its base, frontend/functionalization.py). Returns None, as eager."""
    if type(self) is not TensorProxy:
        raise TypeError(f"__setitem__: expected a tensor, got {type(self).__name__}")
    if index is False:  # python_variable_indexing.cpp: "do nothing for false", any value
        return
    index = _normalize_index(index)
    basic = not any(_is_advanced(ix) for ix in index)
    check_overlap(self, value, (lambda m: m[index]) if basic else None)
    _check_index_put_dtypes(self, index, value)
    try:
        new = index_assign(self, index, value)
    except Fallback:
        if not any(_is_mask(ix) for ix in index):
            raise
        new = index_assign(self, _masks_as_indices(index), value)
    write_inplace(self, keep_edge(new, value), "__setitem__")


def _masks_as_indices(index: tuple) -> tuple:
    """Each boolean mask of ``index`` as the integer index tensors of its true positions
    (one per mask dim, ``nonzero``), as ATen's ``expandTensors`` does before ``index_put``
    (aten/src/ATen/native/IndexingUtils.h): the count is data-dependent, which the trace
    specializes on and guards (frontend/value_guards.py)."""
    out = []
    for ix in index:
        if _is_mask(ix):
            nz = torch.nonzero(ix)
            out.extend(nz[:, j] for j in range(len(ix.tshape)))
        else:
            out.append(ix)
    return tuple(out)


SYMBOLS[T.__setitem__] = _Inline("ltorch.setitem", _setitem,
                                  tensor_scalars=frozenset({"index"}))


def _write_back_getitem(base, args: tuple, kwargs: dict, new):
    """``base``'s value after its view ``base[index]`` (``args == (base, index)``), whose
    position is read from a tensor's value (a 0-d integer tensor, a select in eager), takes
    the value ``new``: ``index_assign(base, index, new)``, writing the same elements. None
    for an index with other tensors (eager's result is then a copy, never written back)."""
    index = _normalize_index(args[1] if len(args) > 1 else kwargs.get("indices"))
    if any(type(ix) is TensorProxy and (ix.tshape or ix.tdtype in (torch.bool, torch.uint8))
           for ix in index):
        return None
    return index_assign(base, index, new)


VALUE_INDEXED_WRITES[T.__getitem__] = _write_back_getitem
