"""Convolution and pooling: conv1d/2d/3d, conv_transpose1d/2d/3d, max/avg pooling and
adaptive pooling.

Convolutions are stablehlo.convolution (spec section "convolution"); a transposed
convolution is the convolution of the stride-dilated input with the spatially flipped,
in/out-swapped kernel (the gradient of conv w.r.t. its input, as torch defines
conv_transpose). Pooling is stablehlo.reduce_window (spec "reduce_window"); output sizes,
``ceil_mode`` and ``count_include_pad`` follow the formulas of torch.nn.MaxPool2d /
AvgPool2d's documentation. Adaptive pooling uses torch's window bounds
start = floor(i L / O), end = ceil((i + 1) L / O).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import prims
from ..lang import expand_to
from .registry import register
from .nn import Fallback


def _tuple(v, n):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    return v * n if len(v) == 1 else v


def _batched(input, n):
    """(input with a batch dim, whether it was added) for n spatial dims."""
    if len(input.tshape) == n + 1:
        return prims.reshape(input, (1,) + input.tshape), True
    return input, False


def _bias(out, bias):
    if bias is None:
        return out
    return prims.elementwise("add", out, prims.broadcast_in_dim(
        prims.convert_element_type(bias, out.tdtype), out.tshape, [1]))


def _conv(n):
    def impl(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        if input.tdtype != weight.tdtype or not input.tdtype.is_floating_point:
            raise Fallback("convolution of non-float or mixed dtypes")
        x, added = _batched(input, n)
        stride, dilation = _tuple(stride, n), _tuple(dilation, n)
        ks = weight.tshape[2:]
        if isinstance(padding, str):
            if padding == "valid":
                pads = [(0, 0)] * n
            elif padding == "same":
                pads = []
                for k, d in zip(ks, dilation):
                    total = d * (k - 1)
                    pads.append((total // 2, total - total // 2))
            else:
                raise ValueError(f"Invalid padding string {padding!r}")
        else:
            pads = [(p, p) for p in _tuple(padding, n)]
        out = prims.convolution(x, weight, stride, pads, (1,) * n, dilation, groups)
        out = _bias(out, bias)
        return prims.reshape(out, out.tshape[1:]) if added else out
    return impl


conv1d = register("conv1d", F.conv1d, torch.conv1d)(_conv(1))
conv2d = register("conv2d", F.conv2d, torch.conv2d)(_conv(2))
conv3d = register("conv3d", F.conv3d, torch.conv3d)(_conv(3))


def _conv_t(n):
    def impl(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
             dilation=1):
        if input.tdtype != weight.tdtype or not input.tdtype.is_floating_point:
            raise Fallback("transposed convolution of non-float or mixed dtypes")
        if isinstance(padding, str):
            raise Fallback("conv_transpose with string padding")
        x, added = _batched(input, n)
        stride, padding = _tuple(stride, n), _tuple(padding, n)
        output_padding, dilation = _tuple(output_padding, n), _tuple(dilation, n)
        cin, coutg, *ks = weight.tshape
        g = groups
        w = prims.reshape(weight, (g, cin // g, coutg) + tuple(ks))
        w = prims.transpose(w, [0, 2, 1] + list(range(3, 3 + n)))
        w = prims.reshape(w, (g * coutg, cin // g) + tuple(ks))
        w = prims.reverse(w, list(range(2, 2 + n)))
        pads = [(d * (k - 1) - p, d * (k - 1) - p + op)
                for k, d, p, op in zip(ks, dilation, padding, output_padding)]
        out = prims.convolution(x, w, (1,) * n, pads, stride, dilation, g)
        out = _bias(out, bias)
        return prims.reshape(out, out.tshape[1:]) if added else out
    return impl


register("conv_transpose1d", F.conv_transpose1d, torch.conv_transpose1d)(_conv_t(1))
register("conv_transpose2d", F.conv_transpose2d, torch.conv_transpose2d)(_conv_t(2))
register("conv_transpose3d", F.conv_transpose3d, torch.conv_transpose3d)(_conv_t(3))


# ------------------------------------------------------------------ pooling
def _pool_sizes(L, k, s, p, d, ceil_mode):
    eff = d * (k - 1) + 1
    num = L + 2 * p - eff
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
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
            raise Fallback("max pooling with return_indices")
        k = _tuple(kernel_size, n)
        s = _tuple(stride if stride not in (None, []) else kernel_size, n)
        p, d = _tuple(padding, n), _tuple(dilation, n)
        if any(dd != 1 for dd in d):
            raise Fallback("dilated max pooling")
        lead = len(input.tshape) - n
        pads = [(0, 0)] * lead
        for i in range(n):
            _, extra = _pool_sizes(input.tshape[lead + i], k[i], s[i], p[i], 1, ceil_mode)
            pads.append((p[i], p[i] + extra))
        init = prims.full((), _lowest(input.tdtype), input.tdtype)
        return prims.reduce_window(input, init, "max", (1,) * lead + k, (1,) * lead + s, pads)
    return impl


for _n in (1, 2, 3):
    register(f"max_pool{_n}d", getattr(F, f"max_pool{_n}d"), getattr(torch, f"max_pool{_n}d"),
             getattr(F, f"max_pool{_n}d_with_indices"))(_max_pool(_n))


def _avg_pool(n):
    def impl(input, kernel_size, stride=None, padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
        if not input.tdtype.is_floating_point:
            raise Fallback("avg pooling of integers")
        k = _tuple(kernel_size, n)
        s = _tuple(stride if stride not in (None, []) else kernel_size, n)
        p = _tuple(padding, n)
        lead = len(input.tshape) - n
        sp = input.tshape[lead:]
        pads, extras = [], []
        for i in range(n):
            _, extra = _pool_sizes(sp[i], k[i], s[i], p[i], 1, ceil_mode)
            pads.append((p[i], p[i] + extra))
            extras.append(extra)
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
        return prims.elementwise("div", total, div)
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
    from .creation import _literal
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
    from .views import _const_index
    if return_indices:
        raise Fallback("adaptive max pooling with return_indices")
    sizes = _out_sizes(input, output_size, n)
    x = input
    r = len(x.tshape)
    for i in range(n):
        d = r - n + i
        L, O = x.tshape[d], sizes[i]
        bnds = _bounds(L, O)
        W = max(b - a for a, b in bnds)
        idx = [min(a + j, b - 1) for a, b in bnds for j in range(W)]
        g = prims.take(x, prims.reshape(_const_index(idx), (O, W)), d)
        x = prims.reduce("reduce_max", g, [d + 1]) if x.tdtype is not torch.bool else \
            prims.reduce("reduce_or", g, [d + 1])
    return x


for _n in (1, 2, 3):
    register(f"adaptive_avg_pool{_n}d", getattr(F, f"adaptive_avg_pool{_n}d"),
             *([torch.adaptive_avg_pool1d] if _n == 1 else []))(
        lambda input, output_size, _n=_n: adaptive_avg(input, output_size, _n))
    register(f"adaptive_max_pool{_n}d", getattr(F, f"adaptive_max_pool{_n}d"),
             getattr(F, f"adaptive_max_pool{_n}d_with_indices"))(
        lambda input, output_size, return_indices=False, _n=_n:
        adaptive_max(input, output_size, _n, return_indices))
