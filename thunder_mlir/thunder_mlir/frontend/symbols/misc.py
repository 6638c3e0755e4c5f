"""Assorted ops with static output shapes: isclose, real, trapezoid family, renorm, cross,
bucketize/searchsorted/isin (all-pairs comparisons), pdist, cov/corrcoef, combinations,
native_layer_norm/native_group_norm, softmax internals, median along a dim, quantile,
max pooling with indices.

Each follows the PyTorch documentation of the op (and ``torch._refs`` /
``torch._decomp`` where a reference decomposition exists).
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import abs as tabs, add, div, mul, sub, where
from thunder_mlir.frontend.symbols.reduction import sum as rsum, vector_norm


@register("isclose", torch.isclose, T.isclose)
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b|, or a == b (equal infinities), or both NaN if equal_nan."""
    if input.tdtype is torch.bool or not input.tdtype.is_floating_point:
        if input.tdtype.is_complex:
            raise Fallback("complex isclose")
    eq = input == other
    if not input.tdtype.is_floating_point:
        a, b = input.to(torch.float64), other.to(torch.float64)
    else:
        a, b = input, other
    close = tabs(sub(a, b)) <= add(mul(tabs(b), rtol), atol)
    out = prims.elementwise("bitwise_or", eq, close)
    if equal_nan and input.tdtype.is_floating_point:
        out = prims.elementwise("bitwise_or", out, prims.elementwise(
            "bitwise_and", torch.isnan(input), torch.isnan(other)))
    return out


@register("real", torch.real, T.real.__get__, composite=False)
def real(input):
    if input.tdtype.is_complex:
        raise Fallback("complex real")
    return input


def _trap_parts(y, dim):
    d = canonical_dim(dim, len(y.tshape))
    n = y.tshape[d]
    lo = [0] * len(y.tshape)
    hi = list(y.tshape)
    hi[d] = n - 1
    a = prims.slice_(y, lo, hi)
    lo2 = list(lo)
    lo2[d] = 1
    b = prims.slice_(y, lo2, list(y.tshape))
    return a, b, d


def _trap_dx(y, x, d):
    """x.diff() along ``d``, a 1-D ``x`` viewed along ``d`` first (ATen ``trapezoid``)."""
    if len(x.tshape) == 1:
        shape = [1] * len(y.tshape)
        shape[d] = x.tshape[0]
        x = prims.reshape(x, shape)
    xa, xb, _ = _trap_parts(x, d)
    return sub(xb, xa)


def _trap_args(x, dx):
    if type(x) is not TensorProxy and x is not None:
        dx, x = x, None
    return x, 1.0 if dx is None else dx


# The formulas are ATen's (Integration.cpp), op for op: integer inputs wrap and promote where
# its ops do, and float results round the same way.
@register("trapezoid", torch.trapezoid)
def trapezoid(y, x=None, *, dx=None, dim=-1):
    x, dx = _trap_args(x, dx)
    a, b, d = _trap_parts(y, dim)
    if x is not None:  # ((left + right) * dx).sum(dim) / 2.
        return div(rsum(mul(add(a, b), _trap_dx(y, x, d)), d), 2.0)
    # (y.sum(dim) - (y.select(dim, 0) + y.select(dim, -1)) * 0.5) * dx
    if y.tshape[d] == 0:
        return mul(rsum(y, d), dx)
    first, last = torch.select(y, d, 0), torch.select(y, d, -1)
    return mul(sub(rsum(y, d), mul(add(first, last), 0.5)), dx)


@register("trapz", torch.trapz)
def trapz(y, x=None, *, dx=None, dim=-1):
    return trapezoid(y, x, dx=dx, dim=dim)


@register("cumulative_trapezoid", torch.cumulative_trapezoid)
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    x, dx = _trap_args(x, dx)
    a, b, d = _trap_parts(y, dim)
    if x is not None:  # ((left + right) * dx).cumsum(dim) / 2.
        return div(torch.cumsum(mul(add(a, b), _trap_dx(y, x, d)), d), 2.0)
    return torch.cumsum(mul(dx / 2.0, add(a, b)), d)  # (dx / 2. * (left + right)).cumsum


@register("renorm", torch.renorm, T.renorm, opmath=True)
def renorm(input, p, dim, maxnorm):
    d = canonical_dim(dim, len(input.tshape))
    others = [i for i in range(len(input.tshape)) if i != d]
    n = vector_norm(input, p, others, True)
    factor = where(n > maxnorm, div(maxnorm, add(n, 1e-7)), prims.full(n.tshape, 1.0, n.tdtype))
    return mul(input, factor)


@register("cross", torch.cross, T.cross, torch.linalg.cross)
def cross(input, other, dim=None):
    shape = tuple(torch.broadcast_shapes(input.tshape, other.tshape))
    a, b = expand_to(input, shape), expand_to(other, shape)
    if dim is None:
        dim = -1 if torch.linalg.cross is None else next(i for i, s in enumerate(shape) if s == 3)
    d = canonical_dim(dim, len(shape))

    def comp(x, i):
        lo = [0] * len(shape)
        hi = list(shape)
        lo[d], hi[d] = i, i + 1
        return prims.slice_(x, lo, hi)
    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    c0 = sub(mul(a1, b2), mul(a2, b1))
    c1 = sub(mul(a2, b0), mul(a0, b2))
    c2 = sub(mul(a0, b1), mul(a1, b0))
    return prims.concatenate([c0, c1, c2], d)


# ----------------------------------------------------------- all-pairs compares
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


# ------------------------------------------------------------------ statistics
@register("pdist", F.pdist, torch.pdist)
def pdist(input, p=2):
    n = input.tshape[0]
    pairs = list(itertools.combinations(range(n), 2))
    if not pairs:
        return prims.full((0,), 0, input.tdtype)
    from thunder_mlir.frontend.symbols.views import _const_index
    a = prims.take(input, _const_index([i for i, _ in pairs]), 0)
    b = prims.take(input, _const_index([j for _, j in pairs]), 0)
    return vector_norm(sub(a, b), p, 1)


@register("cov", torch.cov)
def cov(input, *, correction=1, fweights=None, aweights=None):
    """torch.cov's formula (ATen ``cov``: weights, normalization, final squeeze) with
    dot_general. The weights keep their own dtype, as in ATen: their sums round there."""
    x = input if len(input.tshape) == 2 else prims.reshape(input, (1, math.prod(input.tshape)))
    if not x.tdtype.is_floating_point:
        x = prims.convert_element_type(x, torch.get_default_dtype())
    n = x.tshape[1]
    w = fweights
    if aweights is not None:
        w = aweights if w is None else mul(w, aweights)
    if w is None:
        avg = torch.mean(x, 1, True)
        norm = prims.full((), float(n - correction), x.tdtype)
    else:
        w_sum = rsum(w)
        avg = div(rsum(mul(x, prims.reshape(w, (1, n))), 1, True), w_sum)
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = sub(w_sum, correction)
        else:
            norm = sub(w_sum, div(mul(rsum(mul(w, aweights)), correction), w_sum))
    norm = torch.clamp(norm, min=0)
    c = sub(x, avg)
    cw = c if w is None else mul(c, prims.reshape(w, (1, n)))
    out = div(prims.dot_general(c, cw, [], [], [1], [1]), norm)
    return torch.squeeze(out)


@register("corrcoef", torch.corrcoef)
def corrcoef(input):
    c = cov(input)
    if len(c.tshape) == 0:
        return div(c, c)
    if len(c.tshape) == 1:
        raise Fallback("corrcoef of this shape")
    d = torch.diagonal(c)
    sd = torch.sqrt(d)
    c = div(div(c, prims.reshape(sd, (sd.tshape[0], 1))), prims.reshape(sd, (1, sd.tshape[0])))
    return torch.clamp(c, -1, 1)


@register("combinations", torch.combinations)
def combinations(input, r=2, with_replacement=False):
    n = input.tshape[0]
    gen = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    combos = list(gen(range(n), r))
    if not combos:
        return prims.full((0, r) if r else (0,), 0, input.tdtype)
    from thunder_mlir.frontend.symbols.views import _const_index
    idx = prims.reshape(_const_index([i for c in combos for i in c]), (len(combos), r))
    return prims.take(input, idx, 0)


# ---------------------------------------------------------- normalization internals
@register("native_layer_norm", torch.native_layer_norm)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    from thunder_mlir.frontend.symbols.nn import layer_norm
    r, k = len(input.tshape), len(tuple(normalized_shape))
    dims = list(range(r - k, r))
    acc = torch.float32 if input.tdtype in (torch.float16, torch.bfloat16) else input.tdtype
    x = prims.convert_element_type(input, acc)
    m = torch.mean(x, dims, True)
    c = sub(x, m)
    rstd = torch.rsqrt(add(torch.mean(mul(c, c), dims, True), eps))
    dt = input.tdtype
    return (layer_norm(input, normalized_shape, weight, bias, eps),
            prims.convert_element_type(m, dt), prims.convert_element_type(rstd, dt))


@register("native_group_norm", torch.native_group_norm)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    from thunder_mlir.frontend.symbols.nn_extra import group_norm
    x = prims.reshape(input, (N, group, math.prod(input.tshape) // max(N * group, 1)))
    m = torch.mean(x, 2)
    c = sub(x, prims.reshape(m, (N, group, 1)))
    rstd = torch.rsqrt(add(torch.mean(mul(c, c), 2), eps))
    return group_norm(input, group, weight, bias, eps), m, rstd


@register("safe_softmax", torch.ops.aten._safe_softmax.default)
def safe_softmax(input, dim, dtype=None):
    """softmax whose fully -inf rows give 0 instead of NaN (``aten._safe_softmax``, what
    attention uses for padded rows).

    The fully masked rows are replaced by zeros *before* the softmax as well as after it
    (the "double where"): otherwise those rows compute 0 / 0 = NaN in the softmax, and the
    backward of the discarded NaN branch (0 * NaN) turns the rows' gradients into NaN,
    where eager's gradient (``_softmax_backward_data`` of the zero result) is 0."""
    from thunder_mlir.frontend.symbols.nn import softmax
    d = canonical_dim(dim, len(input.tshape))
    ninf = prims.elementwise("eq", input, prims.full(input.tshape, -math.inf, input.tdtype))
    allinf = prims.reduce("reduce_and", ninf, [d]) if input.tshape else ninf
    mask = prims.broadcast_in_dim(allinf, input.tshape, [i for i in range(len(input.tshape))
                                                         if i != d]) if input.tshape else allinf
    safe_in = where(mask, prims.full(input.tshape, 0, input.tdtype), input)
    out = softmax(safe_in, dim, dtype=dtype)
    return where(mask, prims.full(out.tshape, 0, out.tdtype), out)


@register("softmax_backward_data", torch.ops.aten._softmax_backward_data.default,
          torch.ops.aten._softmax_backward_data, torch._softmax_backward_data, opmath=True)
def softmax_backward_data(grad_output, output, dim, input_dtype):
    """grad_input = output * (grad - sum(grad * output, dim)) (torch._decomp)."""
    g = mul(grad_output, output)
    out = sub(g, mul(output, rsum(g, dim, True)))
    return prims.convert_element_type(out, input_dtype)


# ------------------------------------------------------------- median, quantile
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
