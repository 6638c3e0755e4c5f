"""Sorting and order statistics: sort/argsort/msort, topk, kthvalue, median, quantile, and
searching sorted sequences (bucketize, searchsorted, isin).

Sorting is a stable stablehlo.sort that orders NaN above +inf (torch.sort's documented
order); searches compare all pairs. Semantics per the PyTorch docs of each op.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.reduction import _keep
from thunder_mlir.frontend.lang import expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.elementwise import add, mul, sub, where


# ------------------------------------------------------------------- sorting
def _sort(x, d, descending):
    if x.tdtype.is_complex:
        raise Fallback("complex sort")
    if 0 in x.tshape:
        return x, prims.full(x.tshape, 0, torch.int64)
    idx = prims.argsort(x, d, descending)
    return prims.take_along(x, idx, d), idx


@register("sort", torch.sort, T.sort)
def sort(input, dim=-1, descending=False, stable=False):
    if isinstance(dim, bool):  # sort(x, stable=..., dim, descending) keyword-only form
        dim = -1
    if len(input.tshape) == 0:
        return torch.return_types.sort((input, prims.full((), 0, torch.int64)))
    d = canonical_dim(dim, len(input.tshape))
    return torch.return_types.sort(_sort(input, d, descending))


@register("argsort", torch.argsort, T.argsort)
def argsort(input, dim=-1, descending=False, stable=False):
    if len(input.tshape) == 0:
        return prims.full((), 0, torch.int64)
    return _sort(input, canonical_dim(dim, len(input.tshape)), descending)[1]


@register("msort", torch.msort, T.msort)
def msort(input):
    if len(input.tshape) == 0:
        return input
    return _sort(input, 0, False)[0]


@register("topk", torch.topk, T.topk)
def topk(input, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) along dim, from a stable sort: ties keep the lower index."""
    if len(input.tshape) == 0:
        return torch.return_types.topk((input, prims.full((), 0, torch.int64)))
    d = canonical_dim(dim, len(input.tshape))
    v, i = _sort(input, d, largest)
    start = [0] * len(v.tshape)
    lim = list(v.tshape)
    lim[d] = k
    return torch.return_types.topk((prims.slice_(v, start, lim), prims.slice_(i, start, lim)))


def _select_kth(input, k, dim, keepdim):
    d = canonical_dim(dim, len(input.tshape))
    if len(input.tshape) == 0:
        return input, prims.full((), 0, torch.int64)
    v, i = _sort(input, d, False)
    start = [0] * len(v.tshape)
    lim = list(v.tshape)
    start[d], lim[d] = k, k + 1
    shape = tuple(s for j, s in enumerate(v.tshape) if j != d)
    vk = prims.reshape(prims.slice_(v, start, lim), shape)
    ik = prims.reshape(prims.slice_(i, start, lim), shape)
    return _keep(input, vk, [d], keepdim), _keep(input, ik, [d], keepdim)


@register("kthvalue", torch.kthvalue, T.kthvalue)
def kthvalue(input, k, dim=-1, keepdim=False):
    """k-th smallest (1-based). NaN sorts last; with ties torch's index choice is
    unspecified, so inputs with NaN or ties may report another index of an equal value."""
    n = input.tshape[canonical_dim(dim, len(input.tshape))] if input.tshape else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    return torch.return_types.kthvalue(_select_kth(input, k - 1, dim, keepdim))


@register("median", torch.median, T.median)
def median(input, dim=None, keepdim=False):
    """Lower median; NaN propagates (a NaN sorts last, so it is picked only if present:
    torch returns NaN when any element is NaN)."""
    if dim is None:
        n = 1
        for s in input.tshape:
            n *= s
        if n == 0:
            raise Fallback("median of an empty tensor")
        flat = prims.reshape(input, (n,))
        v, _ = _select_kth(flat, (n - 1) // 2, 0, False)
        if input.tdtype.is_floating_point:
            anynan = prims.reduce("reduce_or", prims.elementwise("ne", flat, flat), [0])
            v = prims.where(anynan, prims.full((), math.nan, input.tdtype), v)
        return v
    d = canonical_dim(dim, len(input.tshape))
    if input.tdtype.is_floating_point:
        raise Fallback("median along a dim with possible NaN (index of the NaN)")
    n = input.tshape[d] if input.tshape else 1
    return torch.return_types.median(_select_kth(input, (n - 1) // 2, dim, keepdim))


# --------------------------------------------------------------- reductions


def _count_less(seq, vals, right):
    """For seq (..., M) sorted and vals (..., K): number of seq elements < v (<= if right)."""
    K, M = vals.tshape[-1], seq.tshape[-1]
    batch = vals.tshape[:-1]
    shape = batch + (K, M)
    s = prims.broadcast_in_dim(seq, shape, list(range(len(batch))) + [len(batch) + 1])
    v = prims.broadcast_in_dim(vals, shape, list(range(len(batch) + 1)))
    c = prims.elementwise("le" if right else "lt", s, v)
    return prims.reduce("reduce_sum", prims.convert_element_type(c, torch.int64), [len(shape) - 1])


@register("bucketize", torch.bucketize)
def bucketize(input, boundaries, *, out_int32=False, right=False):
    if type(input) is not TensorProxy or len(boundaries.tshape) != 1:
        raise Fallback("bucketize of a scalar")
    dt = torch.promote_types(input.tdtype, boundaries.tdtype)
    flat = prims.reshape(prims.convert_element_type(input, dt), (math.prod(input.tshape),))
    out = prims.reshape(_count_less(prims.convert_element_type(boundaries, dt), flat, right),
                        input.tshape)
    return prims.convert_element_type(out, torch.int32 if out_int32 else torch.int64)


@register("searchsorted", torch.searchsorted)
def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    if type(input) is not TensorProxy:
        raise Fallback("searchsorted with a scalar")
    if sorted_sequence.tshape[-1] == 0:
        return prims.full(input.tshape, 0, torch.int32 if out_int32 else torch.int64)
    if sorter is not None:
        sorted_sequence = torch.gather(sorted_sequence, -1, sorter)
    right = right or side == "right"
    dt = torch.promote_types(sorted_sequence.tdtype, input.tdtype)
    seq = prims.convert_element_type(sorted_sequence, dt)
    vals = prims.convert_element_type(input, dt)
    if len(seq.tshape) == 1:
        flat = prims.reshape(vals, (math.prod(vals.tshape),))
        out = prims.reshape(_count_less(seq, flat, right), vals.tshape)
    else:
        if len(vals.tshape) == 0:
            raise Fallback("searchsorted of a 0-d input")
        out = _count_less(seq, vals, right)
    return prims.convert_element_type(out, torch.int32 if out_int32 else torch.int64)


@register("isin", torch.isin)
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    if type(elements) is not TensorProxy or type(test_elements) is not TensorProxy:
        raise Fallback("isin with a scalar")
    dt = torch.promote_types(elements.tdtype, test_elements.tdtype)
    e = prims.reshape(prims.convert_element_type(elements, dt), (math.prod(elements.tshape), 1))
    t = prims.reshape(prims.convert_element_type(test_elements, dt),
                      (1, math.prod(test_elements.tshape)))
    shape = (e.tshape[0], t.tshape[1])
    hit = prims.reduce("reduce_or", prims.elementwise("eq", expand_to(e, shape),
                                                      expand_to(t, shape)), [1])
    if invert:
        hit = prims.elementwise("bitwise_not", hit)
    return prims.reshape(hit, elements.tshape)


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan):
    if ignore_nan or not input.tdtype.is_floating_point:
        raise Fallback("nanquantile or quantile of integers")
    x = input if input.tshape else prims.reshape(input, (1,))
    if dim is None:
        x, d = prims.reshape(x, (math.prod(x.tshape),)), 0
    else:
        d = canonical_dim(dim, len(x.tshape))
    if len(x.tshape) == 0:
        raise Fallback("quantile of a 0-d tensor")
    n = x.tshape[d]
    if n == 0:
        raise Fallback("quantile of an empty tensor")
    srt = torch.sort(x, d).values
    scalar_q = not isinstance(q, TensorProxy)
    qv = prims.full((1,), float(q), x.tdtype) if scalar_q else \
        prims.reshape(prims.convert_element_type(q, x.tdtype), (math.prod(q.tshape),))
    pos = mul(qv, float(n - 1))
    if interpolation == "lower":
        pos = torch.floor(pos)
    elif interpolation == "higher":
        pos = torch.ceil(pos)
    elif interpolation == "nearest":
        pos = torch.round(pos)
    lo = torch.floor(pos)
    hi = torch.ceil(pos)
    w = sub(pos, lo)
    if interpolation == "midpoint":
        w = where(hi != lo, prims.full(w.tshape, 0.5, w.tdtype),
                  prims.full(w.tshape, 0.0, w.tdtype))
    li, hi_ = lo.to(torch.int64), hi.to(torch.int64)
    vlo = prims.take(srt, li, d)
    vhi = prims.take(srt, hi_, d)
    shape = vlo.tshape
    wb = prims.broadcast_in_dim(w, shape, [d])
    out = add(vlo, mul(sub(vhi, vlo), wb))
    # torch puts the q dim first
    out = prims.transpose(out, [d] + [i for i in range(len(shape)) if i != d])
    anynan = prims.reduce("reduce_or", prims.elementwise("ne", x, x), [d])
    out = where(expand_to(anynan, out.tshape), prims.full(out.tshape, math.nan, out.tdtype), out)
    if keepdim:
        ks = list(input.tshape) if dim is not None else [1] * len(input.tshape)
        if dim is not None and ks:
            ks[d] = 1
        out = prims.reshape(out, (out.tshape[0],) + tuple(ks))
    if scalar_q or len(q.tshape) == 0:
        out = prims.reshape(out, out.tshape[1:])
    return out


@register("quantile", torch.quantile, T.quantile)
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    return _quantile(input, q, dim, keepdim, interpolation, False)
