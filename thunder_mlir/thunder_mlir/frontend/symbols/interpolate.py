"""F.interpolate (nearest, nearest-exact, linear, bilinear, trilinear, bicubic, area),
linspace/logspace, and tensor contractions (tensordot, inner, vdot, kron, einsum, addbmm,
addr, block_diag, cartesian_prod).

Interpolation is separable: each spatial dim is resampled by a gather (nearest modes) or
by 2 (linear) or 4 (cubic) gathered taps times constant weights, added in ATen's order,
the last dim first. Source coordinates follow ATen's UpSample.h (``area_pixel_compute_
source_index``, ``nearest_idx``, cubic convolution with A = -0.75), computed in float32
(float64 for float64 inputs of the linear modes) as ATen's CPU kernels do.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import promote
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.reduction import sum_accumulated


def _scale(in_size, out_size, align_corners, scale, ft=np.float32):
    """ATen's ``area_pixel_compute_scale`` in the float type ``ft`` (float32, or float64
    for float64 inputs of the linear modes: their opmath type)."""
    if align_corners:
        return float(ft(in_size - 1) / ft(out_size - 1)) if out_size > 1 else 0.0
    if scale is not None and scale > 0:  # 1.0 / scale in double, then rounded (ATen)
        return float(ft(1.0 / scale))
    return float(ft(in_size) / ft(out_size))


def _nearest_index(L, O, scale, exact):
    s = np.float32(scale)
    idx = []
    for o in range(O):
        src = np.float32((o + 0.5) * s) if exact else np.float32(np.float32(o) * s)
        idx.append(min(int(math.floor(src)), L - 1))
    return idx


def _linear_taps(L, O, scale, align_corners, cubic, ft=np.float32):
    """Source indices and weights of linear (2 taps) or cubic (4 taps) interpolation from
    L to O points, as ATen computes them (UpSample.h: ``area_pixel_compute_source_index``,
    cubic convolution with A = -0.75, indices clamped to [0, L - 1]) in the float type
    ``ft``: a list of (indices, weights) per tap, each of length O."""
    taps = [([], []) for _ in range(4 if cubic else 2)]
    s = ft(scale)
    for o in range(O):
        if align_corners:
            src = float(ft(s * ft(o)))
        else:
            src = float(ft(s * ft(o + 0.5)) - ft(0.5))
            if not cubic and src < 0:
                src = 0.0
        i0 = math.floor(src)
        t = ft(src - i0)
        if cubic:  # ATen's cubic_convolution1/2 in the opmath type
            A = ft(-0.75)

            def c1(x):
                return ((A + ft(2)) * x - (A + ft(3))) * x * x + ft(1)

            def c2(x):
                return ((A * x - ft(5) * A) * x + ft(8) * A) * x - ft(4) * A
            coeffs = [c2(t + ft(1)), c1(t), c1(ft(1) - t), c2(ft(2) - t)]
            idx = [min(max(i0 - 1 + k, 0), L - 1) for k in range(4)]
        else:
            coeffs = [ft(1) - t, t]
            idx = [min(i0, L - 1), min(i0 + 1, L - 1)]
        for k in range(len(taps)):
            taps[k][0].append(idx[k])
            taps[k][1].append(float(coeffs[k]))
    return taps


def _apply_taps(x, d, taps):
    """sum_k x[..., idx_k, ...] * w_k along dim ``d``, added left to right as ATen's
    ``interpolate`` / ``cubic_interp1d`` do."""
    from thunder_mlir.frontend.symbols.creation import _literal
    from thunder_mlir.frontend.symbols.creation import index_constant
    out = None
    for idx, w in taps:
        g = prims.take(x, index_constant(idx), d)
        wb = prims.broadcast_in_dim(_literal(w, x.tdtype), g.tshape, [d])
        term = prims.elementwise("mul", g, wb)
        out = term if out is None else prims.elementwise("add", out, term)
    return out


@register("interpolate", F.interpolate, opmath=True)
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if antialias:
        raise Fallback("antialiased interpolation")
    n = len(input.tshape) - 2
    if n < 1:
        raise Fallback("interpolate of this rank")
    sp = input.tshape[2:]
    if size is not None:
        out = list(size) if isinstance(size, (list, tuple)) else [size] * n
        scales = [None] * n
    else:
        sf = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * n
        out = [int(math.floor(float(np.float64(L) * np.float64(f)))) for L, f in zip(sp, sf)]
        scales = [None] * n if recompute_scale_factor else sf
    if mode == "area":
        from thunder_mlir.frontend.symbols.pooling import adaptive_avg
        return adaptive_avg(input, tuple(out), n)
    x = input
    if mode in ("nearest", "nearest-exact"):
        from thunder_mlir.frontend.symbols.creation import index_constant
        for i in range(n):
            d = 2 + i
            idx = _nearest_index(sp[i], out[i], _scale(sp[i], out[i], False, scales[i]),
                                 mode == "nearest-exact")
            x = prims.take(x, index_constant(idx), d)
        return x
    if mode in ("linear", "bilinear", "trilinear", "bicubic"):
        if not x.tdtype.is_floating_point:
            raise Fallback("linear interpolation of integers")
        cubic = mode == "bicubic"
        ac = bool(align_corners)
        ft = np.float64 if x.tdtype is torch.float64 else np.float32
        for i in reversed(range(n)):  # the last dim first, as ATen's kernels sum
            sc = _scale(sp[i], out[i], ac, scales[i], ft)
            if out[i] == 0 or sp[i] == 0:
                shape = list(x.tshape)
                shape[2 + i] = out[i]
                x = prims.full(shape, 0, x.tdtype)
                continue
            x = _apply_taps(x, 2 + i, _linear_taps(sp[i], out[i], sc, ac, cubic, ft))
        return x
    raise Fallback(f"interpolate mode {mode}")


@register("upsample_nearest", F.upsample_nearest)
def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, "nearest")


@register("upsample_bilinear", F.upsample_bilinear, opmath=True)
def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, "bilinear", True)


# ------------------------------------------------------------ linspace / logspace
def _num(v):
    if type(v) is TensorProxy:
        raise Fallback("linspace with tensor bounds")
    return v


@register("linspace", torch.linspace)
def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    """ATen's linspace: start + i*step for i < steps/2, end - (steps-1-i)*step after."""
    start, end = _num(start), _num(end)
    dt = dtype or torch.get_default_dtype()
    if not dt.is_floating_point or any(isinstance(v, complex) for v in (start, end)):
        raise Fallback("integer or complex linspace")
    if dt is torch.float16:  # ATen rounds the step and each product and sum to float16
        raise Fallback("float16 linspace (ATen's float16 arithmetic order)")
    if steps == 0:
        return prims.full((0,), 0, dt)
    if steps == 1:
        return prims.full((1,), start, dt)
    step = (end - start) / (steps - 1)
    i = prims.iota((steps,), dt, 0)
    lo = prims.elementwise("add", prims.full((steps,), start, dt),
                           prims.elementwise("mul", i, prims.full((steps,), step, dt)))
    hi = prims.elementwise("sub", prims.full((steps,), end, dt), prims.elementwise(
        "mul", prims.elementwise("sub", prims.full((steps,), steps - 1, dt), i),
        prims.full((steps,), step, dt)))
    first = prims.elementwise("lt", i, prims.full((steps,), steps // 2, dt))
    return prims.where(first, lo, hi)


@register("logspace", torch.logspace)
def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    dt = dtype or torch.get_default_dtype()
    if not dt.is_floating_point:
        raise Fallback("integer logspace")
    e = linspace(start, end, steps, dtype=torch.float64)
    out = prims.elementwise("pow", prims.full(e.tshape, base, torch.float64), e)
    return prims.convert_element_type(out, dt)


# ---------------------------------------------------------------- contractions
def _acc(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _same(a, b):
    if a.tdtype != b.tdtype:
        raise RuntimeError(f"expected both inputs to have the same dtype, got {a.tdtype} and "
                           f"{b.tdtype}")


@register("tensordot", torch.tensordot)
def tensordot(a, b, dims=2, out=None):
    _same(a, b)
    if type(dims) is TensorProxy:
        raise Fallback("tensordot with tensor dims")
    if isinstance(dims, int):
        da = list(range(len(a.tshape) - dims, len(a.tshape)))
        db = list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
        da = [d % max(len(a.tshape), 1) for d in da]
        db = [d % max(len(b.tshape), 1) for d in db]
    if any(a.tshape[i] != b.tshape[j] for i, j in zip(da, db)):
        raise Fallback("tensordot with broadcast contracting dims")
    return prims.dot_general(a, b, [], [], da, db)


@register("inner", torch.inner, T.inner)
def inner(input, other):
    if not input.tshape or not other.tshape:
        from thunder_mlir.frontend.symbols.elementwise import mul
        return mul(input, other)
    _same(input, other)
    return prims.dot_general(input, other, [], [], [len(input.tshape) - 1],
                             [len(other.tshape) - 1])


@register("vdot", torch.vdot, T.vdot)
def vdot(input, other):
    if input.tdtype.is_complex:
        raise Fallback("complex vdot")
    _same(input, other)
    return prims.dot_general(input, other, [], [], [0], [0])


@register("kron", torch.kron, T.kron)
def kron(input, other):
    comp, res = promote(input, other)
    r = max(len(input.tshape), len(other.tshape))
    a = prims.reshape(prims.convert_element_type(input, comp), (1,) * (r - len(input.tshape))
                      + input.tshape)
    b = prims.reshape(prims.convert_element_type(other, comp), (1,) * (r - len(other.tshape))
                      + other.tshape)
    inter = []
    for sa, sb in zip(a.tshape, b.tshape):
        inter += [sa, sb]
    ea = prims.broadcast_in_dim(a, inter, [2 * i for i in range(r)])
    eb = prims.broadcast_in_dim(b, inter, [2 * i + 1 for i in range(r)])
    out = prims.elementwise("mul", ea, eb) if comp is not torch.bool else \
        prims.elementwise("bitwise_and", ea, eb)
    out = prims.reshape(out, tuple(sa * sb for sa, sb in zip(a.tshape, b.tshape)))
    return prims.convert_element_type(out, res)


@register("addbmm", torch.addbmm, T.addbmm)
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    from thunder_mlir.frontend.symbols.linalg import _beta_alpha
    _same(batch1, batch2)
    if batch1.tdtype in (torch.float16, torch.bfloat16):
        raise Fallback("addbmm in low precision (torch rounds each batch's product)")
    acc = _acc(batch1.tdtype)  # low precision accumulates in float32 (torch CPU)
    prod = prims.convert_element_type(prims.dot_general(
        prims.convert_element_type(batch1, acc), prims.convert_element_type(batch2, acc),
        [], [], [0, 2], [0, 1]), batch1.tdtype)
    return _beta_alpha(input, prod, beta, alpha)


@register("addr", torch.addr, T.addr, opmath=True)
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    from thunder_mlir.frontend.symbols.linalg import _beta_alpha, outer
    if input.tdtype is torch.bool:
        raise Fallback("bool addr")
    return _beta_alpha(input, outer(vec1, vec2), beta, alpha)


@register("block_diag", torch.block_diag)
def block_diag(*tensors):
    ts = [prims.reshape(t, (1, math.prod(t.tshape)) if len(t.tshape) < 2 else t.tshape)
          if len(t.tshape) < 2 else t for t in tensors]
    ts = [prims.reshape(t, (1, 1)) if len(t.tshape) == 0 else t for t in ts]
    dt = ts[0].tdtype
    for t in ts[1:]:
        dt = torch.promote_types(dt, t.tdtype)
    cols = sum(t.tshape[1] for t in ts)
    rows, c0 = [], 0
    for t in ts:
        t = prims.convert_element_type(t, dt)
        c = t.tshape[1]
        rows.append(prims.pad(t, prims.full((), 0, dt), [0, c0], [0, cols - c0 - c]))
        c0 += c
    return prims.concatenate(rows, 0)


@register("cartesian_prod", torch.cartesian_prod)
def cartesian_prod(*tensors):
    from thunder_mlir.frontend.symbols.shape import meshgrid
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    n = math.prod(grids[0].tshape)
    return prims.concatenate([prims.reshape(g, (n, 1)) for g in grids], 1)


@register("rmatmul", T.__rmatmul__)
def rmatmul(input, other):
    from thunder_mlir.frontend.symbols.linalg import matmul
    return matmul(other, input)


@register("einsum", torch.einsum)
def einsum(equation, *operands):
    """Pairwise contraction left to right: each step is one dot_general whose batch dims
    are the labels both sides keep, contracting labels no later operand or output uses.
    Repeated labels within one operand (diagonals) and ellipses run on the fallback."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    if "..." in eq:
        raise Fallback("einsum with an ellipsis")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs = eq
        counts = {}
        for ch in lhs.replace(",", ""):
            counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(ch for ch, c in counts.items() if c == 1))
    specs = lhs.split(",")
    if len(specs) != len(operands) or any(len(set(s)) != len(s) for s in specs):
        raise Fallback("einsum with repeated labels in an operand")
    dt = operands[0].tdtype
    if any(o.tdtype != dt for o in operands):
        raise Fallback("einsum of mixed dtypes")
    alone = [ch for ch in set(lhs.replace(",", "")) if ch not in out
             and sum(ch in sp for sp in specs) == 1]
    if alone and not (dt.is_floating_point or dt.is_complex or dt is torch.int64):
        # ATen sums such labels with Tensor.sum, which promotes integers to int64 (and
        # then can refuse its own contraction): its dtype rules are eager's alone
        raise Fallback("integer einsum summing a label of one operand")
    sizes = {}
    for s, o in zip(specs, operands):
        for ch, n in zip(s, o.tshape):
            sizes[ch] = n
    cur, cur_s = operands[0], specs[0]
    # labels used only by the first operand and not in the output: sum them now
    for k in range(1, len(operands) + 1):
        later = set(out) | set("".join(specs[k:]))
        drop = [i for i, ch in enumerate(cur_s) if ch not in later]
        if drop and k == len(operands):
            cur = sum_accumulated(cur, drop)
            cur_s = "".join(ch for i, ch in enumerate(cur_s) if i not in drop)
        if k == len(operands):
            break
        nxt, nxt_s = operands[k], specs[k]
        later = set(out) | set("".join(specs[k + 1:]))
        # sum labels of one side that nothing else uses
        d1 = [i for i, ch in enumerate(cur_s) if ch not in later and ch not in nxt_s]
        if d1:
            cur = sum_accumulated(cur, d1)
            cur_s = "".join(ch for i, ch in enumerate(cur_s) if i not in d1)
        d2 = [i for i, ch in enumerate(nxt_s) if ch not in later and ch not in cur_s]
        if d2:
            nxt = sum_accumulated(nxt, d2)
            nxt_s = "".join(ch for i, ch in enumerate(nxt_s) if i not in d2)
        common = [ch for ch in cur_s if ch in nxt_s]
        batch = [ch for ch in common if ch in later]
        contract = [ch for ch in common if ch not in later]
        cur = prims.dot_general(cur, nxt, [cur_s.index(c) for c in batch],
                                [nxt_s.index(c) for c in batch],
                                [cur_s.index(c) for c in contract],
                                [nxt_s.index(c) for c in contract])
        cur_s = "".join(batch) + "".join(ch for ch in cur_s if ch not in common) + "".join(
            ch for ch in nxt_s if ch not in common)
    if sorted(cur_s) != sorted(out):
        raise Fallback("einsum output labels")
    return prims.transpose(cur, [cur_s.index(ch) for ch in out]) if out else cur
