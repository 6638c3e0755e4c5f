"""Indexing symbols: ``__getitem__`` (basic and advanced), index_select, gather,
combinations.

Basic indexing (ints, slices, None, Ellipsis) becomes slice/reshape prims. Advanced indexing
with integer tensors follows NumPy/torch rules
(https://numpy.org/doc/stable/user/basics.indexing.html#advanced-indexing): index tensors
broadcast together; if they are adjacent their result dims replace the indexed dims in
place, otherwise they go first. Boolean-mask indexing has a data-dependent shape and is
refused.
"""

from __future__ import annotations

import math
import optree
import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend import lang
from thunder_mlir.ir.symbolic import slice_indices
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.frontend.runtime_checks import check_indices
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
import itertools


def _is_advanced(ix) -> bool:
    return type(ix) is TensorProxy or isinstance(ix, (list, tuple))


def _as_index_tensor(ix, size: int, dim: int | str = "?", negative: bool = True) -> TensorProxy:
    """``ix`` (an integer tensor, list or number) as int64 indices into a dimension of
    ``size`` elements, negative ones counted from the end; an index out of range raises
    IndexError at run time, as eager's (frontend/runtime_checks.py), and so does a negative
    one without ``negative`` (``index_select``)."""
    if not (type(ix) is TensorProxy):
        from thunder_mlir.frontend.symbols.creation import _literal
        if isinstance(ix, (list, tuple)):  # eager makes a list of numbers int64 indices,
            # floats truncated (indexing_tensor_from_data): x[[1.7, 2]] is x[[1, 2]]
            ix = optree.tree_map(lambda v: int(v) if type(v) is float else v, ix)
        ix = _literal(ix)
    if ix.tdtype is torch.bool:
        raise NotImplementedError(
            "indexing with a boolean mask has a data-dependent shape; use torch.where or "
            "masked_fill instead")
    if ix.tdtype.is_floating_point:
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    check_indices(ix, size, dim, negative=negative)
    ix = prims.convert_element_type(ix, torch.int64)
    neg = prims.elementwise("lt", ix, prims.full(ix.tshape, 0, torch.int64))
    wrapped = prims.elementwise("add", ix, prims.full(ix.tshape, size, torch.int64))
    return prims.where(neg, wrapped, ix)


def _sequence_as_tuple(index) -> bool:
    """torch's (and old NumPy's) rule: a list shorter than 32 that holds a tensor, a
    sequence, a slice, None or Ellipsis indexes like a tuple (``x[[i, j]]`` is ``x[i, j]``);
    other lists are one integer index tensor."""
    if not isinstance(index, list) or len(index) >= 32:
        return False
    return any(type(i) is TensorProxy or isinstance(i, (list, tuple, slice)) or i is None
               or i is Ellipsis for i in index)


def bool_scalars_as_python(index: tuple) -> tuple:
    """0-d boolean tensors in an index as Python bools: torch's indexing reads them with
    ``item()`` (``applySlicing``, aten/src/ATen/TensorIndexing.h): True adds a dim of size 1,
    False one of size 0. The value is specialized on and guarded (frontend/value_guards.py)."""
    return tuple(bool(ix) if type(ix) is TensorProxy and ix.tdtype is torch.bool
                 and not ix.tshape else ix for ix in index)


def bools_as_index_tensors(rank: int, index: tuple) -> tuple[list[int], tuple] | None:
    """ATen's reading of Python bools in an index (``applySlicing``,
    aten/src/ATen/TensorIndexing.h): each one unsqueezes a dim at its place and indexes it
    with an index tensor, ``[0]`` for True and an empty one for False
    (``boolToIndexingTensor``), so ``x[True, 5]`` is advanced indexing: a copy, and in a
    write an ``index_put_``. Returns (the positions of the new size-1 dims, the index with
    those dims indexed explicitly: a None becomes a full slice of its new dim, a bool its
    index tensor), or None for an index without bools."""
    if not any(isinstance(ix, bool) for ix in index):
        return None
    consumed = sum(len(ix.tshape) if type(ix) is TensorProxy and ix.tdtype in (
        torch.bool, torch.uint8) else 0 if ix is None or ix is Ellipsis or isinstance(
        ix, bool) else 1 for ix in index)
    if any(ix is Ellipsis for ix in index):
        i = next(k for k, ix in enumerate(index) if ix is Ellipsis)
        index = index[:i] + (slice(None),) * max(rank - consumed, 0) + index[i + 1:]
    new_dims, out, d = [], [], 0
    for ix in index:
        if ix is None or isinstance(ix, bool):
            new_dims.append(d)
            out.append(slice(None) if ix is None else
                       prims.full((1,) if ix else (0,), 0, torch.int64))
            d += 1
        elif type(ix) is TensorProxy and ix.tdtype in (torch.bool, torch.uint8):
            out.append(ix)
            d += len(ix.tshape)
        else:
            out.append(ix)
            d += 1
    return new_dims, tuple(out)


def unsqueezed(x: TensorProxy, new_dims: list[int]) -> TensorProxy:
    """``x`` with size-1 dims at ``new_dims`` (positions in the result), as a reshape."""
    shape = list(x.tshape)
    for d in new_dims:
        shape.insert(d, 1)
    return prims.reshape(x, tuple(shape))


@register("getitem", T.__getitem__, view=True, tensor_scalars=("index",))
def getitem(input, index):
    if _sequence_as_tuple(index):
        index = tuple(index)
    if not isinstance(index, tuple):
        index = (index,)
    index = bool_scalars_as_python(index)
    if any(ix is False for ix in index):  # a new dim of size 0: an empty result
        meta = tuple(ix.meta if type(ix) is TensorProxy else ix for ix in index)
        with torch._C.DisableTorchFunction():
            shape = torch.empty(input.tshape, dtype=input.tdtype, device="meta")[meta].shape
        return prims.full(tuple(shape), 0, input.tdtype)
    if any(ix is True for ix in index):  # index tensors [0], broadcast with the others
        new_dims, index = bools_as_index_tensors(len(input.tshape), index)
        return getitem(unsqueezed(input, new_dims), index)
    consumed = sum(1 for ix in index if ix is not None and ix is not Ellipsis
                   and not isinstance(ix, bool))
    if any(ix is Ellipsis for ix in index):
        i = next(k for k, ix in enumerate(index) if ix is Ellipsis)
        index = index[:i] + (slice(None),) * (len(input.tshape) - consumed) + index[i + 1:]
    else:
        index = index + (slice(None),) * (len(input.tshape) - consumed)
    if sum(1 for ix in index if ix is not None and not isinstance(ix, bool)) > len(input.tshape):
        raise IndexError(f"too many indices for tensor of dimension {len(input.tshape)}")

    # Pass 1: basic indexing. Track which result dim each advanced index applies to.
    starts, limits, strides = [], [], []
    out_shape: list[int] = []
    advanced: list[tuple[int, object]] = []  # (dim in out_shape, index)
    d = 0
    for ix in index:
        if ix is None or isinstance(ix, bool):
            out_shape.append(1)
            if ix is False:
                raise NotImplementedError("indexing with False gives an empty tensor")
            continue
        size = input.tshape[d]
        if isinstance(ix, int):
            i = ix + size if ix < 0 else ix
            if not 0 <= i < size:
                raise IndexError(f"index {ix} is out of bounds for dimension {d} with size {size}")
            starts.append(i), limits.append(i + 1), strides.append(1)
        elif isinstance(ix, slice):
            s, e, st = slice_indices(ix, size)
            if st <= 0:
                raise ValueError("step must be greater than zero")
            e = max(e, s)
            starts.append(s), limits.append(e), strides.append(st)
            out_shape.append(-((s - e) // st))  # len(range(s, e, st)) for e >= s, st > 0
        elif _is_advanced(ix):
            starts.append(0), limits.append(size), strides.append(1)
            advanced.append((len(out_shape), ix, size))
            out_shape.append(size)
        else:
            raise IndexError(f"unsupported index of type {type(ix).__name__}")
        d += 1
    x = prims.slice_(input, starts, limits, strides) if input.tshape else input
    x = prims.reshape(x, out_shape)
    if not advanced:
        return x
    return _advanced(x, advanced)


def _advanced(x: TensorProxy, advanced) -> TensorProxy:
    dims = [d for d, _, _ in advanced]
    idx = [_as_index_tensor(ix, size, d) for d, ix, size in advanced]
    bshape = tuple(lang.broadcast_shapes(*[i.tshape for i in idx]))
    idx = [expand_to(i, bshape) for i in idx]
    # linear index over the advanced dims (row-major), after moving them to the front
    flat = None
    for dim, i in zip(dims, idx):
        flat = i if flat is None else prims.elementwise("add", prims.elementwise(
            "mul", flat, prims.full(bshape, x.tshape[dim], torch.int64)), i)
    rest = [k for k in range(len(x.tshape)) if k not in dims]
    moved = prims.transpose(x, dims + rest)
    n = 1
    for dim in dims:
        n *= x.tshape[dim]
    moved = prims.reshape(moved, (n,) + tuple(x.tshape[k] for k in rest))
    out = prims.take(moved, flat, 0)  # bshape + rest
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        nb = len(bshape)
        first = dims[0]
        perm = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, len(out.tshape)))
        out = prims.transpose(out, perm)
    return out


@register("index_select", torch.index_select, T.index_select)
def index_select(input, dim, index):
    d = canonical_dim(dim, len(input.tshape))
    if len(input.tshape) == 0:  # (a 0-d tensor indexes like a 1-element vector)
        check_indices(index, 1, d, negative=False, message="index out of range in self")
        return input
    idx = _as_index_tensor(index, input.tshape[d], d, negative=False)
    if idx.tshape == ():  # a 0-d index selects a dim of size 1 (torch keeps the dim)
        idx = prims.reshape(idx, (1,))
    return prims.take(input, idx, d)


@register("gather", torch.gather, T.gather)
def gather(input, dim, index, *, sparse_grad=False):
    if math.prod(index.tshape) == 0:  # ATen skips its checks (rank included) for an empty index
        return prims.full(index.tshape, 0, input.tdtype)
    if index.tdtype not in (torch.int32, torch.int64):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if len(input.tshape) == 0:  # a 0-d input gathers as one element of a 1-d tensor
        n = math.prod(index.tshape)
        flat = prims.take_along(prims.reshape(input, (1,)), prims.reshape(
            prims.convert_element_type(index, torch.int64), (n,)), 0)
        return prims.reshape(flat, index.tshape)
    d = canonical_dim(dim, len(input.tshape))
    check_indices(index, input.tshape[d], d, negative=False, error=RuntimeError)
    return prims.take_along(input, prims.convert_element_type(index, torch.int64), d)


@register("take_along_dim", torch.take_along_dim, T.take_along_dim)
def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: negative indices count from the end (ATen wraps them)."""
    if dim is None:
        n = math.prod(input.tshape)
        flat = prims.reshape(input, (max(1, n),))
        return prims.take(flat, _as_index_tensor(
            prims.reshape(indices, (math.prod(indices.tshape),)), n), 0)
    d = canonical_dim(dim, len(input.tshape))
    shape = list(lang.broadcast_shapes(
        tuple(1 if i == d else s for i, s in enumerate(input.tshape)),
        tuple(1 if i == d else s for i, s in enumerate(indices.tshape))))
    xs = list(shape); xs[d] = input.tshape[d]
    ishape = list(shape); ishape[d] = indices.tshape[d]
    return prims.take_along(expand_to(input, xs),
                            expand_to(_as_index_tensor(indices, input.tshape[d]), ishape), d)


@register("combinations", torch.combinations)
def combinations(input, r=2, with_replacement=False):
    n = input.tshape[0]
    gen = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    combos = list(gen(range(n), r))
    if not combos:
        return prims.full((0, r) if r else (0,), 0, input.tdtype)
    from thunder_mlir.frontend.symbols.creation import index_constant
    idx = prims.reshape(index_constant([i for c in combos for i in c]), (len(combos), r))
    return prims.take(input, idx, 0)
