"""Pooling: max/avg pooling, adaptive pooling, and max pooling with indices.

Pooling is stablehlo.reduce_window (spec "reduce_window"); output sizes, ``ceil_mode`` and
``count_include_pad`` follow the formulas of torch.nn.MaxPool2d / AvgPool2d's
documentation. Adaptive pooling uses torch's window bounds
start = floor(i L / O), end = ceil((i + 1) L / O).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import expand_to
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.conv import _tuple, _up


# ------------------------------------------------------------------ pooling
def _pool_sizes(L, k, s, p, d, ceil_mode):
    eff = d * (k - 1) + 1
    num = L + 2 * p - eff
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    if out < 1:  # eager: "Output size is too small"
        raise RuntimeError(f"pooling: input size {L}, kernel {k}, stride {s}, padding {p}, "
                           f"dilation {d}: calculated output size {out} is too small")
    extra = max(0, (out - 1) * s + eff - (L + 2 * p))
    return out, extra


def _lowest(dtype):
    if dtype.is_floating_point:
        return -math.inf
    if dtype is torch.bool:
        return False
    return torch.iinfo(dtype).min


def _max_pool(n):
    def impl(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
        if return_indices:
            return _max_pool_with_indices(n)(input, kernel_size, stride, padding, dilation,
                                              ceil_mode)
        k = _tuple(kernel_size, n)
        s = _tuple(stride if stride not in (None, [], ()) else kernel_size, n)
        p, d = _tuple(padding, n), _tuple(dilation, n)
        if any(dd != 1 for dd in d):
            return _max_pool_with_indices(n)(input, kernel_size, stride, padding, dilation,
                                              ceil_mode)[0]
        lead = len(input.tshape) - n
        pads = [(0, 0)] * lead
        for i in range(n):
            _, extra = _pool_sizes(input.tshape[lead + i], k[i], s[i], p[i], 1, ceil_mode)
            pads.append((p[i], p[i] + extra))
        init = prims.full((), _lowest(input.tdtype), input.tdtype)
        return prims.reduce_window(input, init, "max", (1,) * lead + k, (1,) * lead + s, pads)
    return impl


for _n in (1, 2, 3):
    register(f"max_pool{_n}d", getattr(F, f"max_pool{_n}d"),
             getattr(torch, f"max_pool{_n}d"))(_max_pool(_n))


def _avg_pool(n):
    def impl(input, kernel_size, stride=None, padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
        if not input.tdtype.is_floating_point:
            raise Fallback("avg pooling of integers")
        k = _tuple(kernel_size, n)
        s = _tuple(stride if stride not in (None, [], ()) else kernel_size, n)
        p = _tuple(padding, n)
        lead = len(input.tshape) - n
        sp = input.tshape[lead:]
        pads, extras = [], []
        for i in range(n):
            _, extra = _pool_sizes(sp[i], k[i], s[i], p[i], 1, ceil_mode)
            pads.append((p[i], p[i] + extra))
            extras.append(extra)
        out_dt = input.tdtype
        input = _up(input)
        dt = input.tdtype
        zero = prims.full((), 0, dt)
        total = prims.reduce_window(input, zero, "sum", (1,) * lead + k, (1,) * lead + s,
                                    [(0, 0)] * lead + pads)
        if divisor_override:
            div = prims.full(total.tshape, divisor_override, dt)
        else:
            ones = prims.full(sp, 1, dt)
            if count_include_pad:
                ones = prims.pad(ones, prims.full((), 1, dt), p, p)
                cpads = [(0, e) for e in extras]
            else:
                cpads = pads
            cnt = prims.reduce_window(ones, zero, "sum", k, s, cpads)
            div = expand_to(cnt, total.tshape)
        return prims.convert_element_type(prims.elementwise("div", total, div), out_dt)
    return impl


register("avg_pool1d", F.avg_pool1d, torch.avg_pool1d)(_avg_pool(1))
register("avg_pool2d", F.avg_pool2d, torch._C._nn.avg_pool2d)(_avg_pool(2))
register("avg_pool3d", F.avg_pool3d, torch._C._nn.avg_pool3d)(_avg_pool(3))


# ---------------------------------------------------------------- adaptive pooling
def _bounds(L, O):
    return [((i * L) // O, -(-((i + 1) * L) // O)) for i in range(O)]


def _out_sizes(input, output_size, n):
    sizes = _tuple(output_size, n)
    sp = input.tshape[len(input.tshape) - n:]
    return [sp[i] if sizes[i] is None else sizes[i] for i in range(n)]


def adaptive_avg(input, output_size, n):
    """Per spatial dim, a (L, O) averaging matrix contracted with stablehlo.dot_general."""
    from thunder_mlir.frontend.symbols.creation import _literal
    if not input.tdtype.is_floating_point:
        raise Fallback("adaptive avg pooling of integers")
    sizes = _out_sizes(input, output_size, n)
    x = input
    r = len(x.tshape)
    for i in range(n):
        d = r - n + i
        L, O = x.tshape[d], sizes[i]
        w = [[0.0] * O for _ in range(L)]
        for o, (a, b) in enumerate(_bounds(L, O)):
            for j in range(a, b):
                w[j][o] = 1.0 / (b - a)
        m = _literal(w, x.tdtype) if L and O else prims.full((L, O), 0, x.tdtype)
        y = prims.dot_general(x, m, [], [], [d], [0])  # d moved to the end
        perm = list(range(d)) + [r - 1] + list(range(d, r - 1))
        x = prims.transpose(y, perm)
    return x


def adaptive_max(input, output_size, n, return_indices=False):
    """Per spatial dim, gather each window (padded by repeating its last index) and max."""
    from thunder_mlir.frontend.symbols.creation import index_constant
    if return_indices:
        return _adaptive_max_with_indices(n)(input, output_size)
    sizes = _out_sizes(input, output_size, n)
    x = input
    r = len(x.tshape)
    for i in range(n):
        d = r - n + i
        L, O = x.tshape[d], sizes[i]
        bnds = _bounds(L, O)
        W = max(b - a for a, b in bnds)
        idx = [min(a + j, b - 1) for a, b in bnds for j in range(W)]
        g = prims.take(x, prims.reshape(index_constant(idx), (O, W)), d)
        x = prims.reduce("reduce_max", g, [d + 1]) if x.tdtype is not torch.bool else \
            prims.reduce("reduce_or", g, [d + 1])
    return x


for _n in (1, 2, 3):
    register(f"adaptive_avg_pool{_n}d", getattr(F, f"adaptive_avg_pool{_n}d"),
             *([torch.adaptive_avg_pool1d] if _n == 1 else []), opmath=True)(
        lambda input, output_size, _n=_n: adaptive_avg(input, output_size, _n))
    register(f"adaptive_max_pool{_n}d", getattr(F, f"adaptive_max_pool{_n}d"))(
        lambda input, output_size, return_indices=False, _n=_n:
        adaptive_max(input, output_size, _n, return_indices))


# ------------------------------------------------------- max pooling with indices
def _window_argmax(x, tables, n):
    """Max over windows given per spatial dim as (O, K) tables of input positions (-1:
    outside the input), and the argmax as a flat index into the spatial dims (torch's
    ``return_indices``; the first maximum in row-major window order, NaN counts as max)."""
    from thunder_mlir.frontend.symbols.creation import index_constant
    lead = len(x.tshape) - n
    sp = x.tshape[lead:]
    consts, g = [], x
    for i, tab in enumerate(tables):
        O, K = len(tab), len(tab[0])
        t = prims.reshape(index_constant([p for row in tab for p in row]), (O, K))
        consts.append(t)
        safe = prims.elementwise("maximum", t, prims.full((O, K), 0, torch.int64))
        g = prims.take(g, safe, lead + 2 * i)
    full = g.tshape
    mask = None
    for i, t in enumerate(consts):
        ok = prims.elementwise("ge", t, prims.full(t.tshape, 0, torch.int64))
        ok = prims.broadcast_in_dim(ok, full, [lead + 2 * i, lead + 2 * i + 1])
        mask = ok if mask is None else prims.elementwise("bitwise_and", mask, ok)
    g = prims.where(mask, g, prims.full(full, _lowest(x.tdtype), x.tdtype))
    perm = list(range(lead)) + [lead + 2 * i for i in range(n)] + [lead + 2 * i + 1
                                                                   for i in range(n)]
    g = prims.transpose(g, perm)
    Os = tuple(len(t) for t in tables)
    Ks = [len(t[0]) for t in tables]
    kk = 1
    for k in Ks:
        kk *= k
    g = prims.reshape(g, x.tshape[:lead] + Os + (kk,))
    last = len(g.tshape) - 1
    vals = prims.reduce("reduce_max", g, [last])
    arg = prims.argreduce("argmax", g, last)
    shape = arg.tshape
    flat = prims.full(shape, 0, torch.int64)
    rem, stride = arg, 1
    for i in reversed(range(n)):
        K = prims.full(shape, Ks[i], torch.int64)
        k_i = prims.elementwise("fmod", rem, K)
        rem = prims.elementwise("div", rem, K)
        o_i = prims.iota(shape, torch.int64, lead + i)
        tflat = prims.reshape(consts[i], (Os[i] * Ks[i],))
        pos = prims.take(tflat, prims.elementwise("add", prims.elementwise("mul", o_i, K), k_i), 0)
        flat = prims.elementwise("add", flat, prims.elementwise(
            "mul", pos, prims.full(shape, stride, torch.int64)))
        stride *= sp[i]
    return vals, flat


def _max_pool_with_indices(n):
    def impl(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=True):
        k = _tuple(kernel_size, n)
        s = _tuple(stride if stride not in (None, [], ()) else kernel_size, n)
        p, d = _tuple(padding, n), _tuple(dilation, n)
        lead = len(input.tshape) - n
        tables = []
        for i in range(n):
            L = input.tshape[lead + i]
            O, _ = _pool_sizes(L, k[i], s[i], p[i], d[i], ceil_mode)
            tables.append([[pos if 0 <= pos < L else -1
                            for pos in (o * s[i] - p[i] + j * d[i] for j in range(k[i]))]
                           for o in range(O)])
        if any(len(t) == 0 for t in tables):
            raise Fallback("empty max pooling")
        return _window_argmax(input, tables, n)
    return impl


def _adaptive_max_with_indices(n):
    def impl(input, output_size, return_indices=True):
        sizes = _out_sizes(input, output_size, n)
        lead = len(input.tshape) - n
        tables = []
        for i in range(n):
            L = input.tshape[lead + i]
            bnds = _bounds(L, sizes[i])
            W = max(b - a for a, b in bnds)
            tables.append([[a + j if a + j < b else -1 for j in range(W)] for a, b in bnds])
        return _window_argmax(input, tables, n)
    return impl


for _n in (1, 2, 3):
    register(f"max_pool{_n}d_with_indices", getattr(F, f"max_pool{_n}d_with_indices"))(
        _max_pool_with_indices(_n))
    register(f"adaptive_max_pool{_n}d_with_indices",
             getattr(F, f"adaptive_max_pool{_n}d_with_indices"))(_adaptive_max_with_indices(_n))
