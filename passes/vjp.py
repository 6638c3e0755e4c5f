"""VJP rules: one function per thunder prim, emitting the backward computation as prims.

A rule gets the forward op, proxies of its operands (``x``) and results (``y``), and the
cotangents of its results (``g``, None where zero); it returns one cotangent per operand
(None where the operand gets no gradient). Rules are the standard reverse-mode derivatives
(e.g. JAX's ``jax._src.lax`` transpose/JVP rules; PyTorch's derivatives.yaml for the
torch-level conventions such as splitting ties of max/min evenly).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from thunder_mlir import prims
from thunder_mlir.proxy import TensorProxy

Rule = Callable[..., list]
VJP: dict[str, Rule] = {}


def rule(*names: str):
    def deco(fn):
        for n in names:
            VJP[n] = fn
        return fn
    return deco


def _e(name, *xs):
    return prims.elementwise(name, *xs)


def _c(like: TensorProxy, v) -> TensorProxy:
    return prims.full(like.tshape, v, like.tdtype)


def _attr_ints(op, name) -> list[int]:
    from torch_mlir import ir

    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _attr_int(op, name) -> int:
    from torch_mlir import ir

    return ir.IntegerAttr(op.attributes[name]).value


# ----------------------------------------------------------------- elementwise
@rule("add")
def _add(op, x, y, g):
    return [g[0], g[0]]


@rule("sub")
def _sub(op, x, y, g):
    return [g[0], _e("neg", g[0])]


@rule("mul")
def _mul(op, x, y, g):
    return [_e("mul", g[0], x[1]), _e("mul", g[0], x[0])]


@rule("div")
def _div(op, x, y, g):
    ga = _e("div", g[0], x[1])
    return [ga, _e("neg", _e("mul", ga, y[0]))]


@rule("neg")
def _neg(op, x, y, g):
    return [_e("neg", g[0])]


@rule("exp")
def _exp(op, x, y, g):
    return [_e("mul", g[0], y[0])]


@rule("expm1")
def _expm1(op, x, y, g):
    return [_e("mul", g[0], _e("add", y[0], _c(y[0], 1)))]


@rule("log")
def _log(op, x, y, g):
    return [_e("div", g[0], x[0])]


@rule("log1p")
def _log1p(op, x, y, g):
    return [_e("div", g[0], _e("add", x[0], _c(x[0], 1)))]


@rule("sqrt")
def _sqrt(op, x, y, g):
    return [_e("div", g[0], _e("mul", _c(y[0], 2), y[0]))]


@rule("rsqrt")
def _rsqrt(op, x, y, g):
    # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 * y^3
    y3 = _e("mul", y[0], _e("mul", y[0], y[0]))
    return [_e("mul", g[0], _e("mul", _c(y[0], -0.5), y3))]


@rule("tanh")
def _tanh(op, x, y, g):
    return [_e("mul", g[0], _e("sub", _c(y[0], 1), _e("mul", y[0], y[0])))]


@rule("logistic")
def _logistic(op, x, y, g):
    return [_e("mul", g[0], _e("mul", y[0], _e("sub", _c(y[0], 1), y[0])))]


@rule("sin")
def _sin(op, x, y, g):
    return [_e("mul", g[0], _e("cos", x[0]))]


@rule("cos")
def _cos(op, x, y, g):
    return [_e("neg", _e("mul", g[0], _e("sin", x[0])))]


@rule("erf")
def _erf(op, x, y, g):
    d = _e("mul", _c(x[0], 2 / math.sqrt(math.pi)), _e("exp", _e("neg", _e("mul", x[0], x[0]))))
    return [_e("mul", g[0], d)]


@rule("abs")
def _abs(op, x, y, g):
    return [_e("mul", g[0], _e("sign", x[0]))]


@rule("pow")
def _pow(op, x, y, g):
    a, b = x
    one = _c(b, 1)
    ga = _e("mul", g[0], _e("mul", b, _e("pow", a, _e("sub", b, one))))
    # d/db a^b = a^b log a (0 where a == 0, as torch)
    loga = prims.where(_e("eq", a, _c(a, 0)), _c(a, 0), _e("log", a))
    gb = _e("mul", g[0], _e("mul", y[0], loga))
    return [ga, gb]


def _minmax(op, x, y, g):
    a, b = x
    eq = _e("eq", a, b)
    pick_a = _e("eq", y[0], a)
    half = _e("mul", g[0], _c(g[0], 0.5))
    zero = _c(g[0], 0)
    ga = prims.where(eq, half, prims.where(pick_a, g[0], zero))
    gb = prims.where(eq, half, prims.where(pick_a, zero, g[0]))
    return [ga, gb]


rule("maximum", "minimum")(_minmax)


@rule("where")
def _where(op, x, y, g):
    zero = _c(g[0], 0)
    return [None, prims.where(x[0], g[0], zero), prims.where(x[0], zero, g[0])]


@rule("clamp")
def _clamp(op, x, y, g):
    lo, v, hi = x
    inside = _e("bitwise_and", _e("ge", v, lo), _e("le", v, hi))
    return [None, prims.where(inside, g[0], _c(g[0], 0)), None]


@rule("convert_element_type")
def _convert(op, x, y, g):
    if not (x[0].tdtype.is_floating_point or x[0].tdtype.is_complex):
        return [None]
    return [prims.convert_element_type(g[0], x[0].tdtype)]


@rule("floor", "ceil", "round", "trunc", "sign")
def _zero_grad(op, x, y, g):
    return [_c(x[0], 0)]


# --------------------------------------------------------------------- shapes
@rule("reshape")
def _reshape(op, x, y, g):
    return [prims.reshape(g[0], x[0].tshape)]


@rule("transpose")
def _transpose(op, x, y, g):
    perm = _attr_ints(op, "permutation")
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [prims.transpose(g[0], inv)]


@rule("broadcast_in_dim")
def _broadcast(op, x, y, g):
    dims = _attr_ints(op, "broadcast_dimensions")
    xs, ys = x[0].tshape, y[0].tshape
    summed = [d for d in range(len(ys)) if d not in dims]
    summed += [dims[i] for i, s in enumerate(xs) if s == 1 and ys[dims[i]] != 1]
    r = prims.reduce("reduce_sum", g[0], sorted(summed))
    return [prims.reshape(r, xs)]


@rule("slice")
def _slice(op, x, y, g):
    start, limit, strides = (_attr_ints(op, n) for n in ("start_indices", "limit_indices",
                                                          "strides"))
    lo, hi, interior = [], [], []
    for d, (s, st, n) in enumerate(zip(start, strides, y[0].tshape)):
        last = s + (n - 1) * st if n else s
        lo.append(s)
        interior.append(st - 1 if n > 1 else 0)
        hi.append(x[0].tshape[d] - (last + 1) if n else x[0].tshape[d] - s)
    return [prims.pad(g[0], prims.full((), 0, g[0].tdtype), lo, hi, interior)]


@rule("pad")
def _pad(op, x, y, g):
    lo, hi, interior = (_attr_ints(op, n) for n in ("low", "high", "interior"))
    if any(v < 0 for v in lo + hi):
        raise NotImplementedError("VJP of pad with negative padding")
    start = lo
    limit = [ys - h for ys, h in zip(y[0].tshape, hi)]
    strides = [i + 1 for i in interior]
    gx = prims.slice_(g[0], start, limit, strides)
    gv = prims.reduce("reduce_sum", g[0], list(range(len(g[0].tshape))))
    gv = _e("sub", gv, prims.reduce("reduce_sum", gx, list(range(len(gx.tshape)))))
    return [gx, gv]


@rule("reverse")
def _reverse(op, x, y, g):
    return [prims.reverse(g[0], _attr_ints(op, "dims"))]


@rule("concatenate")
def _concatenate(op, x, y, g):
    d = _attr_int(op, "dimension")
    out, start = [], 0
    for xi in x:
        n = xi.tshape[d]
        starts = [0] * len(xi.tshape)
        limits = list(g[0].tshape)
        starts[d], limits[d] = start, start + n
        out.append(prims.slice_(g[0], starts, limits))
        start += n
    return out


# ----------------------------------------------------------------- reductions
def _unreduce(g: TensorProxy, x: TensorProxy, dims) -> TensorProxy:
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    return prims.broadcast_in_dim(prims.reshape(g, keep), x.tshape, list(range(len(x.tshape))))


@rule("reduce_sum")
def _reduce_sum(op, x, y, g):
    return [_unreduce(g[0], x[0], _attr_ints(op, "dims"))]


@rule("reduce_max", "reduce_min")
def _reduce_extreme(op, x, y, g):
    dims = _attr_ints(op, "dims")
    mask = prims.convert_element_type(_e("eq", x[0], _unreduce(y[0], x[0], dims)), x[0].tdtype)
    count = prims.reduce("reduce_sum", mask, dims)
    share = _e("div", g[0], count)  # ties share the gradient evenly (as torch.amax)
    return [_e("mul", mask, _unreduce(share, x[0], dims))]


@rule("reduce_prod")
def _reduce_prod(op, x, y, g):
    dims = _attr_ints(op, "dims")
    return [_e("div", _e("mul", _unreduce(g[0], x[0], dims), _unreduce(y[0], x[0], dims)), x[0])]


@rule("cumsum")
def _cumsum(op, x, y, g):
    d = _attr_int(op, "dim")
    return [prims.reverse(prims.cumsum(prims.reverse(g[0], [d]), d), [d])]


# -------------------------------------------------------------- linear algebra
@rule("dot_general")
def _dot_general(op, x, y, g):
    lhs, rhs = x
    lb, rb, lc, rc = (_attr_ints(op, n) for n in (
        "lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
        "rhs_contracting_dimensions"))
    nb = len(lb)
    lf = [d for d in range(len(lhs.tshape)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rhs.tshape)) if d not in rb and d not in rc]
    g_batch = list(range(nb))
    g_lf = list(range(nb, nb + len(lf)))
    g_rf = list(range(nb + len(lf), nb + len(lf) + len(rf)))
    # d lhs: g (batch, lf, rf) . rhs (batch, rc, rf) contracting rf -> (batch, lf, rc)
    dl = prims.dot_general(g[0], rhs, g_batch, rb, g_rf, rf)
    order = lb + lf + [lc[rc.index(r)] for r in [d for d in range(len(rhs.tshape)) if d in rc]]
    dl = prims.transpose(dl, _inverse(order))
    # d rhs: g (batch, lf, rf) . lhs (batch, lf, lc) contracting lf -> (batch, rf, lc)
    dr = prims.dot_general(g[0], lhs, g_batch, lb, g_lf, lf)
    order_r = rb + rf + [rc[lc.index(c)] for c in [d for d in range(len(lhs.tshape)) if d in lc]]
    dr = prims.transpose(dr, _inverse(order_r))
    return [dl, dr]


def _inverse(order: list[int]) -> list[int]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return inv


# ------------------------------------------------------------------- indexing
@rule("take")
def _take(op, x, y, g):
    d = _attr_int(op, "dim")
    zeros = _c(x[0], 0)
    return [prims.index_add(zeros, x[1], g[0], d), None]


@rule("take_along")
def _take_along(op, x, y, g):
    d = _attr_int(op, "dim")
    return [prims.take_along_add(_c(x[0], 0), x[1], g[0], d), None]


@rule("index_add")
def _index_add(op, x, y, g):
    d = _attr_int(op, "dim")
    return [g[0], None, prims.take(g[0], x[1], d)]


# ops whose results carry no gradient (integer/bool results or constants)
NO_GRAD = {"eq", "ne", "lt", "le", "gt", "ge", "isfinite", "iota", "full", "constant",
           "argmax", "argmin", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
           "shift_left", "shift_right_arithmetic", "shift_right_logical", "reduce_and",
           "reduce_or"}

_ = torch
