"""Scans: cumsum, cumprod, cummax/cummin, logcumsumexp, and the trapezoid rule
(trapezoid/trapz and cumulative_trapezoid).

Scans lower to stablehlo.reduce_window; semantics per the PyTorch docs of each op.
"""

from __future__ import annotations
import torch
from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.reduction import _acc_dtype, _sum_dtype
from thunder_mlir.ir.dtypes import scan_acc_dtype
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.elementwise import add, div, mul, sub
from thunder_mlir.frontend.symbols.reduction import sum as rsum


def _scan(name, x, dim):
    d = canonical_dim(dim, len(x.tshape))
    if len(x.tshape) == 0 or 0 in x.tshape:
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
        if len(input.tshape) == 0 or 0 in input.tshape:
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


@register("logcumsumexp", torch.logcumsumexp, T.logcumsumexp)
def logcumsumexp(input, dim):
    """log(cumsum(exp(x))), accumulated as ATen's scan kernel (``scan_acc_dtype``: float64
    for float32 on CPU) and rounded once."""
    x = input if input.tdtype.is_floating_point else prims.convert_element_type(
        input, torch.get_default_dtype())
    acc = scan_acc_dtype(x.tdtype, x.tdevice)
    out = _scan("logcumsumexp", prims.convert_element_type(x, acc), dim)[0]
    return prims.convert_element_type(out, x.tdtype)


@register("cumsum", torch.cumsum, T.cumsum)
def cumsum(input, dim, *, dtype=None):
    out_dtype = _sum_dtype(input, dtype)
    d = canonical_dim(dim, len(input.tshape))
    if len(input.tshape) == 0:
        return prims.convert_element_type(input, out_dtype)
    # low-precision floats accumulate in float32, as torch's CPU kernel does
    acc = prims.cumsum(prims.convert_element_type(input, _acc_dtype(out_dtype)), d)
    return prims.convert_element_type(acc, out_dtype)


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
