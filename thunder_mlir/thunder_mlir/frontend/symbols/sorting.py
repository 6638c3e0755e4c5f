"""Scans, sorting and more reductions: cumprod/cummax/cummin/logcumsumexp, sort/argsort/
msort/topk/kthvalue/median, count_nonzero, nansum/nanmean, aminmax, std_mean.

Scans lower to stablehlo.reduce_window, sorting to a stable stablehlo.sort that orders NaN
above +inf (torch.sort's documented order); semantics per the PyTorch docs of each op.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, canonical_dims
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.reduction import _acc_dtype, _keep, _sum_dtype


def _empty(x) -> bool:
    return any(s == 0 for s in x.tshape)


def _scan(name, x, dim):
    d = canonical_dim(dim, len(x.tshape))
    if len(x.tshape) == 0 or _empty(x):
        return x, None
    return prims.cumulative(name, x, d), d


@register("cumprod", torch.cumprod, T.cumprod)
def cumprod(input, dim, *, dtype=None):
    out_dtype = _sum_dtype(input, dtype)
    x = prims.convert_element_type(input, out_dtype)
    return _scan("cumprod", x, dim)[0]


def _cum_ext(name):
    def impl(input, dim):
        if input.tdtype is torch.bool or input.tdtype.is_complex:
            raise Fallback(f"{name} of {input.tdtype}")
        d = canonical_dim(dim, len(input.tshape))
        if len(input.tshape) == 0 or _empty(input):
            ret = torch.return_types.cummax if name == "cummax" else torch.return_types.cummin
            return ret((input, prims.full(input.tshape, 0, torch.int64)))
        vals = prims.cumulative(name, input, d)
        hit = prims.elementwise("eq", input, vals)
        if input.tdtype.is_floating_point:
            hit = prims.elementwise("bitwise_or", hit, prims.elementwise("ne", input, input))
        pos = prims.iota(input.tshape, torch.int64, d)
        idx = prims.where(hit, pos, prims.full(input.tshape, -1, torch.int64))
        idx = prims.cumulative("cummax", idx, d)
        ret = torch.return_types.cummax if name == "cummax" else torch.return_types.cummin
        return ret((vals, idx))
    return impl


cummax = register("cummax", torch.cummax, T.cummax)(_cum_ext("cummax"))
cummin = register("cummin", torch.cummin, T.cummin)(_cum_ext("cummin"))


def scan_acc_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The accumulation dtype of ATen's scan kernels (``at::acc_type<scalar_t, is_cuda>``):
    on CPU, float32 scans accumulate in float64 and 16-bit floats in float32; on CUDA,
    16-bit floats in float32."""
    if device.type == "cpu" and dtype is torch.float32:
        return torch.float64
    return _acc_dtype(dtype)


@register("logcumsumexp", torch.logcumsumexp, T.logcumsumexp)
def logcumsumexp(input, dim):
    """log(cumsum(exp(x))), accumulated as ATen's scan kernel (``scan_acc_dtype``: float64
    for float32 on CPU) and rounded once."""
    x = input if input.tdtype.is_floating_point else prims.convert_element_type(
        input, torch.get_default_dtype())
    acc = scan_acc_dtype(x.tdtype, x.tdevice)
    out = _scan("logcumsumexp", prims.convert_element_type(x, acc), dim)[0]
    return prims.convert_element_type(out, x.tdtype)


# ------------------------------------------------------------------- sorting
def _sort(x, d, descending):
    if x.tdtype.is_complex:
        raise Fallback("complex sort")
    if _empty(x):
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
@register("count_nonzero", torch.count_nonzero, T.count_nonzero)
def count_nonzero(input, dim=None):
    dims = canonical_dims(dim, len(input.tshape))
    nz = prims.convert_element_type(
        prims.elementwise("ne", input, prims.full(input.tshape, 0, input.tdtype)), torch.int64)
    return prims.reduce("reduce_sum", nz, dims)


def _nan_zeroed(x):
    if not x.tdtype.is_floating_point:
        return x
    return prims.where(prims.elementwise("ne", x, x), prims.full(x.tshape, 0, x.tdtype), x)


@register("nansum", torch.nansum, T.nansum)
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    from thunder_mlir.frontend.symbols.reduction import sum as rsum
    return rsum(_nan_zeroed(input), dim, keepdim, dtype=dtype)


@register("nanmean", torch.nanmean, T.nanmean)
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    from thunder_mlir.frontend.symbols.reduction import sum as rsum
    if not input.tdtype.is_floating_point:
        raise RuntimeError("nanmean(): expected input to have floating point dtype")
    out_dtype = dtype or input.tdtype
    x = prims.convert_element_type(input, _acc_dtype(out_dtype))
    notnan = prims.convert_element_type(prims.elementwise("eq", x, x), x.tdtype)
    s = rsum(_nan_zeroed(x), dim, keepdim)
    c = rsum(notnan, dim, keepdim)
    return prims.convert_element_type(prims.elementwise("div", s, c), out_dtype)


@register("aminmax", torch.aminmax, T.aminmax)
def aminmax(input, *, dim=None, keepdim=False):
    from thunder_mlir.frontend.symbols.reduction import amax, amin
    if dim is None:
        mn, mx = amin(input, (), False), amax(input, (), False)
        if keepdim:
            shape = (1,) * len(input.tshape)
            mn, mx = prims.reshape(mn, shape), prims.reshape(mx, shape)
    else:
        mn, mx = amin(input, dim, keepdim), amax(input, dim, keepdim)
    return torch.return_types.aminmax((mn, mx))


@register("std_mean", torch.std_mean)
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from thunder_mlir.frontend.symbols.reduction import _correction, _var, safe_sqrt
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    v, m = _var(input, dim, _correction(unbiased, correction), keepdim)
    return safe_sqrt(v), m
