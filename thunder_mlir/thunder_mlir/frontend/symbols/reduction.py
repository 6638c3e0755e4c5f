"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, all/any,
logsumexp, norms, the nan-ignoring sums (nansum/nanmean), count_nonzero, aminmax, std_mean
and the statistics cov/corrcoef.

Sums of low-precision floats accumulate in float32 as torch's CPU kernels do (opmath).
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.frontend import runtime_checks
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, canonical_dims
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import div, mul, sub


def _keep(x: TensorProxy, out: TensorProxy, dims, keepdim: bool) -> TensorProxy:
    if not keepdim:
        return out
    shape = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    return prims.reshape(out, shape)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype


def sum_accumulated(x: TensorProxy, dims) -> TensorProxy:
    """``x`` summed over ``dims`` in its own dtype, 16-bit floats accumulating in float32
    and rounding once (ATen's sum kernel)."""
    acc = _acc_dtype(x.tdtype)
    s = prims.reduce("reduce_sum", prims.convert_element_type(x, acc), dims)
    return prims.convert_element_type(s, x.tdtype)


def _sum_dtype(x: TensorProxy, dtype) -> torch.dtype:
    if dtype is not None:
        return dtype
    if x.tdtype is torch.bool or (not x.tdtype.is_floating_point and not x.tdtype.is_complex):
        return torch.int64
    return x.tdtype


@register("sum", torch.sum, T.sum)
def sum(input, dim=None, keepdim=False, *, dtype=None):
    out_dtype = _sum_dtype(input, dtype)
    dims = canonical_dims(dim, len(input.tshape)) if dim != [] and dim != () else list(
        range(len(input.tshape)))
    x = prims.convert_element_type(input, _acc_dtype(out_dtype))
    out = prims.convert_element_type(prims.reduce("reduce_sum", x, dims), out_dtype)
    return _keep(input, out, dims, keepdim)


@register("mean", torch.mean, T.mean)
def mean(input, dim=None, keepdim=False, *, dtype=None):
    out_dtype = dtype or input.tdtype
    if not (out_dtype.is_floating_point or out_dtype.is_complex):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {input.tdtype}")
    dims = canonical_dims(dim, len(input.tshape)) if dim != [] and dim != () else list(
        range(len(input.tshape)))
    n = 1
    for d in dims:
        n *= input.tshape[d]
    acc = _acc_dtype(out_dtype)
    s = prims.reduce("reduce_sum", prims.convert_element_type(input, acc), dims)
    out = prims.elementwise("div", s, prims.full(s.tshape, n if n else math.nan, acc))
    return _keep(input, prims.convert_element_type(out, out_dtype), dims, keepdim)


@register("prod", torch.prod, T.prod)
def prod(input, dim=None, keepdim=False, *, dtype=None):
    out_dtype = _sum_dtype(input, dtype)
    dims = canonical_dims(dim, len(input.tshape))
    x = prims.convert_element_type(input, _acc_dtype(out_dtype))
    out = prims.convert_element_type(prims.reduce("reduce_prod", x, dims), out_dtype)
    return _keep(input, out, dims, keepdim)


def refuse_empty(name: str, x: TensorProxy, dims, shown=None) -> None:
    """Eager's IndexError for a reduction without an identity (max, min, argmax, ...) over
    a dimension of size 0: ATen's ``zero_numel_check_dims``
    (aten/src/ATen/native/ReduceOpsUtils.h). ``dims``: the reduced dims (canonical);
    ``shown``: the dims as eager's message names them (amax/amin name the user's). A
    symbolic size is compared with 0 as a decision: its guard makes a later call with a
    data-dependent size of 0 trace again and raise here, not return -inf."""
    for d, s in zip(dims, shown if shown is not None else dims):
        if d < len(x.tshape) and x.tshape[d] == 0:
            raise IndexError(f"{name}: Expected reduction dim {s} to have non-zero size.")


def _is_empty(x: TensorProxy) -> bool:
    """Whether ``x`` has no element (a decision on symbolic sizes: a guard)."""
    for s in x.tshape:  # (not ``any``: this module's ``any`` is torch.any's symbol)
        if s == 0:
            return True
    return False


def _refuse_empty_all(name: str, x: TensorProxy, error=RuntimeError) -> None:
    """Eager's error for a reduction without an identity over all dims of an empty
    tensor (ATen: "Expected reduction dim to be specified for input.numel() == 0")."""
    if _is_empty(x):
        tail = "" if error is IndexError else \
            " Specify the reduction dim with the 'dim' argument."
        raise error(f"{name}(): Expected reduction dim to be specified for input.numel() == "
                    f"0.{tail}")


def _shown_dims(dim) -> list:
    return list(dim) if isinstance(dim, (tuple, list)) else [dim]


def _extreme(name, x, dims, keepdim):
    if x.tdtype is torch.bool:
        out = prims.reduce("reduce_or" if name == "reduce_max" else "reduce_and", x, dims)
    else:
        out = prims.reduce(name, x, dims)
    return _keep(x, out, dims, keepdim)


def _all_if_empty(dim):
    """amax/amin reduce over all dims when ``dim`` is empty (``()``/``[]``); dim 0 is a dim."""
    return None if isinstance(dim, (tuple, list)) and len(dim) == 0 else dim


def _amax_amin(name: str, input, dim, keepdim):
    dim = _all_if_empty(dim)
    dims = canonical_dims(dim, len(input.tshape))
    if dim is None:
        _refuse_empty_all(name, input)
    else:
        refuse_empty(f"{name}()", input, dims, _shown_dims(dim))
    return _extreme("reduce_max" if name == "amax" else "reduce_min", input, dims, keepdim)


@register("amax", torch.amax, T.amax)
def amax(input, dim=(), keepdim=False):
    return _amax_amin("amax", input, dim, keepdim)


@register("amin", torch.amin, T.amin)
def amin(input, dim=(), keepdim=False):
    return _amax_amin("amin", input, dim, keepdim)


def _argext(name, x, dim, keepdim):
    if dim is None:
        _refuse_empty_all(name, x, IndexError)
        flat = prims.reshape(x, (max(1, math.prod(x.tshape)),))
        out = prims.argreduce(name, flat, 0)
        return prims.reshape(out, (1,) * len(x.tshape)) if keepdim else out
    d = canonical_dim(dim, len(x.tshape))
    if len(x.tshape) == 0:
        return prims.full((), 0, torch.int64)
    refuse_empty(f"{name}()", x, [d])
    return _keep(x, prims.argreduce(name, x, d), [d], keepdim)


@register("argmax", torch.argmax, T.argmax)
def argmax(input, dim=None, keepdim=False):
    return _argext("argmax", input, dim, keepdim)


@register("argmin", torch.argmin, T.argmin)
def argmin(input, dim=None, keepdim=False):
    return _argext("argmin", input, dim, keepdim)


def _max_min(kind):
    red, arg = ("reduce_max", "argmax") if kind == "max" else ("reduce_min", "argmin")

    def impl(input, dim=None, keepdim=False, *, other=None):
        if type(dim) is TensorProxy:  # torch.max(a, b) is elementwise
            from thunder_mlir.frontend.symbols.elementwise import maximum, minimum
            return (maximum if kind == "max" else minimum)(input, dim)
        if dim is None:
            _refuse_empty_all(kind, input)
            return _extreme(red, input, list(range(len(input.tshape))), False)
        d = canonical_dim(dim, len(input.tshape))
        refuse_empty(f"{kind}()", input, [d])
        if len(input.tshape) == 0:  # dim 0 / -1 of a 0-d tensor: the value, index 0
            values, indices = input, prims.full((), 0, torch.int64)
            return torch.return_types.max((values, indices)) if kind == "max" else \
                torch.return_types.min((values, indices))
        # the values are gathered at the indices: eager's gradient goes to the returned
        # index (value_selecting_reduction_backward), not shared among ties as amax's
        indices = _argext(arg, input, d, True)
        values = prims.take_along(input, indices, d)
        if not keepdim:
            shape = tuple(s for i, s in enumerate(input.tshape) if i != d)
            values, indices = prims.reshape(values, shape), prims.reshape(indices, shape)
        return torch.return_types.max((values, indices)) if kind == "max" else \
            torch.return_types.min((values, indices))
    return impl


register("max", torch.max, T.max, composite=False)(_max_min("max"))
register("min", torch.min, T.min, composite=False)(_max_min("min"))


def _var(input, dim, correction, keepdim):
    dims = canonical_dims(dim, len(input.tshape))
    n = 1
    for d in dims:
        n *= input.tshape[d]
    acc = _acc_dtype(input.tdtype)
    x = prims.convert_element_type(input, acc)
    s = prims.reduce("reduce_sum", x, dims)
    m = prims.elementwise("div", s, prims.full(s.tshape, n, acc))
    keep_shape = tuple(1 if i in dims else d for i, d in enumerate(input.tshape))
    mb = prims.broadcast_in_dim(prims.reshape(m, keep_shape), input.tshape,
                                list(range(len(input.tshape))))
    c = prims.elementwise("sub", x, mb)
    if acc.is_complex:  # |c|^2 = re^2 + im^2: the variance of complex numbers is real
        re, im = prims.elementwise("real", c), prims.elementwise("imag", c)
        sq = prims.elementwise("add", prims.elementwise("mul", re, re),
                               prims.elementwise("mul", im, im))
    else:
        sq = prims.elementwise("mul", c, c)
    ss = prims.reduce("reduce_sum", sq, dims)
    denom = max(n - correction, 0)
    v = prims.elementwise("div", ss, prims.full(ss.tshape, denom if denom else math.nan,
                                                ss.tdtype))
    v = prims.convert_element_type(v, input.tdtype.to_real())
    m = prims.convert_element_type(m, input.tdtype)
    return _keep(input, v, dims, keepdim), _keep(input, m, dims, keepdim)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


@register("var", torch.var, T.var)
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _var(input, dim, _correction(unbiased, correction), keepdim)[0]


@register("std", torch.std, T.std)
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    v = _var(input, dim, _correction(unbiased, correction), keepdim)[0]
    return safe_sqrt(v)


def safe_sqrt(v: TensorProxy) -> TensorProxy:
    """sqrt(v) whose gradient is 0 where v is 0, as PyTorch's std_backward
    (``grad / (2 * result)`` masked to 0 where the result is 0): the sqrt of the zeros is
    taken of ones instead and replaced (a "double where"), so the chain rule does not give
    0 * inf = NaN there."""
    zero = prims.elementwise("eq", v, prims.full(v.tshape, 0, v.tdtype))
    root = prims.elementwise("sqrt", prims.where(zero, prims.full(v.tshape, 1, v.tdtype), v))
    return prims.where(zero, prims.full(v.tshape, 0, v.tdtype), root)


@register("var_mean", torch.var_mean)
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _var(input, dim, _correction(unbiased, correction), keepdim)


@register("all", torch.all, T.all)
def all(input, dim=None, keepdim=False):
    from thunder_mlir.frontend.symbols.elementwise import _as_bool
    dims = canonical_dims(dim, len(input.tshape))
    out = _keep(input, prims.reduce("reduce_and", _as_bool(input), dims), dims, keepdim)
    return _uint8_stays(input, out)


@register("any", torch.any, T.any)
def any(input, dim=None, keepdim=False):
    from thunder_mlir.frontend.symbols.elementwise import _as_bool
    dims = canonical_dims(dim, len(input.tshape))
    out = _keep(input, prims.reduce("reduce_or", _as_bool(input), dims), dims, keepdim)
    return _uint8_stays(input, out)


def _uint8_stays(input, out):
    """all/any of a uint8 tensor are uint8 (0 or 1) in ATen, for NumPy-era compatibility."""
    return prims.convert_element_type(out, torch.uint8) if input.tdtype is torch.uint8 else out


@register("logsumexp", torch.logsumexp, T.logsumexp)
def logsumexp(input, dim, keepdim=False):
    dims = canonical_dims(dim, len(input.tshape))
    x = input if input.tdtype.is_floating_point else prims.convert_element_type(
        input, torch.get_default_dtype())
    m = prims.reduce("reduce_max", x, dims)
    keep_shape = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    finite = prims.elementwise("isfinite", m)
    m = prims.where(finite, m, prims.full(m.tshape, 0, x.tdtype))
    mb = prims.broadcast_in_dim(prims.reshape(m, keep_shape), x.tshape, list(range(len(x.tshape))))
    s = sum_accumulated(prims.elementwise("exp", prims.elementwise("sub", x, mb)), dims)
    out = prims.elementwise("add", prims.elementwise("log", s), m)
    return _keep(x, out, dims, keepdim)


@register("vector_norm", torch.linalg.vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.vector_norm; float16/bfloat16 compute in float32 and round once, as
    ATen's norm kernel (opmath accumulation) does: a sum of float16 squares overflows."""
    if dtype is not None:
        x = prims.convert_element_type(x, dtype)
    dims = canonical_dims(dim, len(x.tshape))
    a = prims.elementwise("abs", x)
    out_dtype = a.tdtype
    a = prims.convert_element_type(a, _acc_dtype(out_dtype))
    return _keep(x, prims.convert_element_type(_norm(a, ord, dims), out_dtype), dims, keepdim)


def _norm(a, ord, dims):
    """The ``ord``-norm over ``dims`` of the absolute values ``a``."""
    if ord == math.inf:
        return prims.reduce("reduce_max", a, dims)
    if ord == -math.inf:
        return prims.reduce("reduce_min", a, dims)
    if ord == 0:
        nz = prims.convert_element_type(
            prims.elementwise("ne", a, prims.full(a.tshape, 0, a.tdtype)), a.tdtype)
        return prims.reduce("reduce_sum", nz, dims)
    if ord == 1:
        return prims.reduce("reduce_sum", a, dims)
    if ord == 2:
        s = prims.reduce("reduce_sum", prims.elementwise("mul", a, a), dims)
        return prims.elementwise("sqrt", s)
    p = prims.full(a.tshape, float(ord), a.tdtype)
    s = prims.reduce("reduce_sum", prims.elementwise("pow", a, p), dims)
    inv = prims.full(s.tshape, 1.0 / float(ord), a.tdtype)
    return prims.elementwise("pow", s, inv)


@register("norm", torch.norm, T.norm)
def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    if out is not None:
        raise TypeError("norm: out= is not supported inside a jitted function")
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise Fallback(f"norm with p={p!r}")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


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
    return sum(_nan_zeroed(input), dim, keepdim, dtype=dtype)


@register("nanmean", torch.nanmean, T.nanmean)
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    if not input.tdtype.is_floating_point:
        raise RuntimeError("nanmean(): expected input to have floating point dtype")
    out_dtype = dtype or input.tdtype
    x = prims.convert_element_type(input, _acc_dtype(out_dtype))
    notnan = prims.convert_element_type(prims.elementwise("eq", x, x), x.tdtype)
    s = sum(_nan_zeroed(x), dim, keepdim)
    c = sum(notnan, dim, keepdim)
    return prims.convert_element_type(prims.elementwise("div", s, c), out_dtype)


@register("aminmax", torch.aminmax, T.aminmax)
def aminmax(input, *, dim=None, keepdim=False):
    if dim is None and _is_empty(input):
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    if dim is not None:
        refuse_empty("aminmax", input, [canonical_dim(dim, len(input.tshape))])
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
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    v, m = _var(input, dim, _correction(unbiased, correction), keepdim)
    return safe_sqrt(v), m


@register("cov", torch.cov)
def cov(input, *, correction=1, fweights=None, aweights=None):
    """torch.cov's formula (ATen ``cov``: weights, normalization, final squeeze) with
    dot_general. The weights keep their own dtype, as in ATen: their sums round there."""
    x = input if len(input.tshape) == 2 else prims.reshape(input, (1, math.prod(input.tshape)))
    if not x.tdtype.is_floating_point:
        x = prims.convert_element_type(x, torch.get_default_dtype())
    n = x.tshape[1]
    for weights, name in ((fweights, "fweights"), (aweights, "aweights")):
        if weights is not None:  # ATen's cov: "cov(): fweights cannot be negative"
            runtime_checks.check_values(
                weights, lambda v: prims.elementwise("ge", v, prims.full(v.tshape, 0, v.tdtype)),
                RuntimeError, f"cov(): {name} cannot be negative")
    w = fweights
    if aweights is not None:
        w = aweights if w is None else mul(w, aweights)
    if w is None:
        avg = torch.mean(x, 1, True)
        norm = prims.full((), float(n - correction), x.tdtype)
    else:
        w_sum = sum(w)
        avg = div(sum(mul(x, prims.reshape(w, (1, n))), 1, True), w_sum)
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = sub(w_sum, correction)
        else:
            norm = sub(w_sum, div(mul(sum(mul(w, aweights)), correction), w_sum))
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


def _bcast_keep(x: TensorProxy, reduced: TensorProxy, dims) -> TensorProxy:
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    return prims.broadcast_in_dim(prims.reshape(reduced, keep), x.tshape, list(range(len(x.tshape))))
