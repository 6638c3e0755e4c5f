"""Elementwise symbols: arithmetic, comparisons (isclose included), math functions,
where/clamp/masked_fill, real.

Promotion kinds are those of the corresponding ``torch._refs`` functions.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import (
    Kind, broadcast_shape, elementwise_binary, elementwise_unary, lift, promote)
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register, register_inplace
from thunder_mlir.errors import Fallback

_r = lambda name: getattr(T, name, None)  # noqa: E731  (reflected dunders vary by version)


def _fns(*fns):
    return [f for f in fns if f is not None]


def _scaled(x, alpha):
    return x if alpha is None or alpha == 1 else mul(x, alpha)


def _scalar_in_tensor_dtype(tensor, scalar):
    """A Python float operand of add/sub on a float16/bfloat16 tensor, rounded to the
    tensor's dtype: ATen's CPU add/sub kernels read a scalar operand as the tensor's
    ``scalar_t`` (``original_scalar_value<scalar_t>``) before computing in float32, so
    bfloat16 ``x + 301`` adds 300 (mul and div read it as float32 and keep 301)."""
    if type(tensor) is TensorProxy and tensor.tdtype in (torch.float16, torch.bfloat16) \
            and type(scalar) in (int, float):
        return torch.tensor(scalar, dtype=tensor.tdtype).item()
    return scalar


def _low_precision_scaled(prim: str, a, b, alpha):
    """``a <prim> alpha * b`` for a floating-point result, as ATen's add/sub compute it:
    the operands promoted first (``alpha * b`` is not computed in ``b``'s own dtype), then
    ``a + alpha * b`` in the computation dtype; for a float16/bfloat16 result alpha is read
    in that dtype and the expression computed in float32, rounded once (ATen fuses the
    multiply-add: 1-ulp differences in a few elements in 1000 remain). None for integer
    and complex results (the caller's path)."""
    comp, res = promote(a, b)
    low = res in (torch.float16, torch.bfloat16)
    if not res.is_floating_point:
        return None
    if type(b) is not TensorProxy and not low:  # eager multiplies the two Scalars in double
        return elementwise_binary(prim, a, b * alpha)
    if low:
        alpha = torch.tensor(alpha, dtype=res).item()
    up = lambda x: prims.convert_element_type(x, comp) if type(x) is TensorProxy \
        else prims.full((), x, comp)  # noqa: E731
    out = elementwise_binary(prim, up(a), elementwise_binary("mul", up(b), alpha))
    return prims.convert_element_type(out, res)


# ------------------------------------------------------------------ arithmetic
@register("add", *_fns(torch.add, T.add, T.__add__, _r("__radd__")))
def add(input, other, *, alpha=None):
    other = _scalar_in_tensor_dtype(input, other)
    input = _scalar_in_tensor_dtype(other, input)
    if alpha is not None and alpha != 1 and \
            (out := _low_precision_scaled("add", input, other, alpha)) is not None:
        return out
    return elementwise_binary("add", input, _scaled(other, alpha))


@register("sub", *_fns(torch.sub, torch.subtract, T.sub, T.subtract, T.__sub__))
def sub(input, other, *, alpha=None):
    if input is not None and getattr(input, "tdtype", None) is torch.bool:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported.")
    other = _scalar_in_tensor_dtype(input, other)
    if alpha is not None and alpha != 1 and \
            (out := _low_precision_scaled("sub", input, other, alpha)) is not None:
        return out
    return elementwise_binary("sub", input, _scaled(other, alpha))


@register("rsub", *_fns(torch.rsub, _r("__rsub__")))
def rsub(input, other, *, alpha=None):
    other = _scalar_in_tensor_dtype(input, other)
    if alpha is not None and alpha != 1 and \
            (out := _low_precision_scaled("sub", other, input, alpha)) is not None:
        return out
    return elementwise_binary("sub", other, _scaled(input, alpha))


@register("mul", *_fns(torch.mul, torch.multiply, T.mul, T.multiply, T.__mul__, _r("__rmul__")))
def mul(input, other):
    return elementwise_binary("mul", input, other)


def _floor_div_floating(a, b):
    """Python's float floor division, as ATen computes it (c10 ``div_floor_floating``):
    (a - fmod(a, b)) / b, stepped down where fmod's sign differs from b's, then floored and
    rounded to the nearest integer; a / b where b == 0. 16-bit floats compute in float32."""
    dt = a.tdtype
    if dt in (torch.float16, torch.bfloat16):
        a, b = (prims.convert_element_type(t, torch.float32) for t in (a, b))
    E = prims.elementwise
    c = lambda v: prims.full(a.tshape, v, a.tdtype)  # noqa: E731
    quotient = E("div", a, b)
    mod = E("fmod", a, b)
    div = E("div", E("sub", a, mod), b)
    step = E("bitwise_and", E("ne", mod, c(0)), E("ne", E("lt", b, c(0)), E("lt", mod, c(0))))
    div = prims.where(step, E("sub", div, c(1)), div)
    floor = E("floor", div)
    floor = prims.where(E("gt", E("sub", div, floor), c(0.5)), E("add", floor, c(1)), floor)
    zero = prims.where(E("lt", quotient, c(0)), c(-0.0), c(0.0))  # copysign(0, a / b)
    out = prims.where(E("ne", div, c(0)), floor, zero)
    out = prims.where(E("eq", b, c(0)), quotient, out)
    return prims.convert_element_type(out, dt)


def _floor_div(a, b):
    comp, res = promote(a, b)
    shape = broadcast_shape(a, b)
    a, b = lift(a, comp, shape), lift(b, comp, shape)
    if comp.is_floating_point:
        q = _floor_div_floating(a, b)
    else:  # stablehlo.divide truncates; step down where the signs differ and it is inexact
        q = prims.elementwise("div", a, b)
        r = prims.elementwise("fmod", a, b)
        zero = prims.full(shape, 0, comp)
        inexact = prims.elementwise("ne", r, zero)
        neg = prims.elementwise("ne", prims.elementwise("lt", r, zero),
                                prims.elementwise("lt", b, zero))
        fix = prims.elementwise("bitwise_and", inexact, neg)
        q = prims.where(fix, prims.elementwise("sub", q, prims.full(shape, 1, comp)), q)
    return prims.convert_element_type(q, res)


@register("div", *_fns(torch.div, torch.divide, torch.true_divide, T.div, T.divide,
                       T.true_divide, T.__truediv__, _r("__div__")), opmath=True)
def div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return elementwise_binary("div", input, other, Kind.INT_TO_FLOAT)
    if rounding_mode == "floor":
        return _floor_div(input, other)
    if rounding_mode == "trunc":
        comp, res = promote(input, other)
        shape = broadcast_shape(input, other)
        q = prims.elementwise("div", lift(input, comp, shape), lift(other, comp, shape))
        if comp.is_floating_point:
            q = _trunc(q)
        return prims.convert_element_type(q, res)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                     f"found '{rounding_mode}'")


@register("rdiv", *_fns(_r("__rtruediv__"), _r("__rdiv__")))
def rdiv(input, other):
    return elementwise_binary("div", other, input, Kind.INT_TO_FLOAT)


@register("floor_divide", *_fns(torch.floor_divide, T.floor_divide, T.__floordiv__))
def floor_divide(input, other):
    return _floor_div(input, other)


@register("rfloordiv", *_fns(_r("__rfloordiv__")))
def rfloordiv(input, other):
    return _floor_div(other, input)


def _remainder(a, b):
    comp, res = promote(a, b)
    shape = broadcast_shape(a, b)
    a, b = lift(a, comp, shape), lift(b, comp, shape)
    r = prims.elementwise("fmod", a, b)
    zero = prims.full(shape, 0, comp)
    fix = prims.elementwise("bitwise_and", prims.elementwise("ne", r, zero), prims.elementwise(
        "ne", prims.elementwise("lt", r, zero), prims.elementwise("lt", b, zero)))
    return prims.convert_element_type(prims.where(fix, prims.elementwise("add", r, b), r), res)


@register("remainder", *_fns(torch.remainder, T.remainder, T.__mod__))
def remainder(input, other):
    return _remainder(input, other)


@register("rmod", *_fns(_r("__rmod__")))
def rmod(input, other):
    return _remainder(other, input)


@register("fmod", torch.fmod, T.fmod)
def fmod(input, other):
    return elementwise_binary("fmod", input, other)


@register("pow", *_fns(torch.pow, T.pow, T.__pow__))
def pow(input, exponent):
    if type(input) is TensorProxy and not (input.tdtype.is_floating_point
                                           or input.tdtype.is_complex) and \
            type(exponent) is int and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if type(input) is TensorProxy and isinstance(exponent, (int, float)) and \
            not isinstance(exponent, bool) and exponent == 2:
        comp, res = promote(input, exponent, kind=Kind.BOOL_TO_LONG)
        x = prims.convert_element_type(input, comp)
        return prims.convert_element_type(prims.elementwise("mul", x, x), res)
    return elementwise_binary("pow", input, exponent, Kind.BOOL_TO_LONG)


@register("rpow", *_fns(_r("__rpow__")))
def rpow(input, other):
    return elementwise_binary("pow", other, input, Kind.BOOL_TO_LONG)


@register("maximum", torch.maximum, T.maximum)
def maximum(input, other):
    """Elementwise max; NaN if either operand is NaN (stablehlo.maximum propagates NaN)."""
    return elementwise_binary("maximum", input, other)


@register("minimum", torch.minimum, T.minimum)
def minimum(input, other):
    """Elementwise min; NaN if either operand is NaN."""
    return elementwise_binary("minimum", input, other)


def _fmax_fmin(prim):
    def impl(input, other):
        comp, res = promote(input, other)
        shape = broadcast_shape(input, other)
        a, b = lift(input, comp, shape), lift(other, comp, shape)
        out = prims.elementwise(prim, a, b)
        if comp.is_floating_point:  # NaN only where both are NaN
            out = prims.where(prims.elementwise("ne", a, a), b,
                              prims.where(prims.elementwise("ne", b, b), a, out))
        return prims.convert_element_type(out, res)
    return impl


fmax = register("fmax", torch.fmax, T.fmax)(_fmax_fmin("maximum"))
fmin = register("fmin", torch.fmin, T.fmin)(_fmax_fmin("minimum"))


@register("atan2", torch.atan2, T.atan2, torch.arctan2, T.arctan2)
def atan2(input, other):
    return elementwise_binary("atan2", input, other, Kind.INT_TO_FLOAT)


# ------------------------------------------------------------- comparisons, logic
def _cmp(prim):
    def impl(input, other):
        return elementwise_binary(prim, input, other, Kind.ALWAYS_BOOL)
    return impl


eq = register("eq", torch.eq, T.eq, T.__eq__)(_cmp("eq"))
ne = register("ne", torch.ne, torch.not_equal, T.ne, T.not_equal, T.__ne__)(_cmp("ne"))
lt = register("lt", torch.lt, torch.less, T.lt, T.less, T.__lt__)(_cmp("lt"))
le = register("le", torch.le, torch.less_equal, T.le, T.less_equal, T.__le__)(_cmp("le"))
gt = register("gt", torch.gt, torch.greater, T.gt, T.greater, T.__gt__)(_cmp("gt"))
ge = register("ge", torch.ge, torch.greater_equal, T.ge, T.greater_equal, T.__ge__)(_cmp("ge"))


def _bitwise(prim):
    def impl(input, other):
        comp, res = promote(input, other)
        if comp.is_floating_point:
            raise RuntimeError(f"bitwise ops are not implemented for {comp}")
        return elementwise_binary(prim, input, other)
    return impl


bitwise_and = register("bitwise_and", *_fns(torch.bitwise_and, T.bitwise_and, T.__and__,
                                             _r("__rand__")))(_bitwise("bitwise_and"))
bitwise_or = register("bitwise_or", *_fns(torch.bitwise_or, T.bitwise_or, T.__or__,
                                          _r("__ror__")))(_bitwise("bitwise_or"))
bitwise_xor = register("bitwise_xor", *_fns(torch.bitwise_xor, T.bitwise_xor, T.__xor__,
                                            _r("__rxor__")))(_bitwise("bitwise_xor"))


def _as_bool(x):
    if type(x) is TensorProxy:
        if x.tdtype is torch.bool:
            return x
        return prims.elementwise("ne", x, prims.full(x.tshape, 0, x.tdtype))
    return bool(x)


def _logical(prim):
    def impl(input, other):
        shape = broadcast_shape(input, other)
        a, b = lift(_as_bool(input), torch.bool, shape), lift(_as_bool(other), torch.bool, shape)
        return prims.elementwise(prim, a, b)
    return impl


logical_and = register("logical_and", torch.logical_and, T.logical_and)(_logical("bitwise_and"))
logical_or = register("logical_or", torch.logical_or, T.logical_or)(_logical("bitwise_or"))
logical_xor = register("logical_xor", torch.logical_xor, T.logical_xor)(_logical("bitwise_xor"))


@register("logical_not", torch.logical_not, T.logical_not)
def logical_not(input):
    return prims.elementwise("bitwise_not", _as_bool(input))


@register("bitwise_not", torch.bitwise_not, T.bitwise_not, T.__invert__)
def bitwise_not(input):
    if input.tdtype.is_floating_point:
        raise RuntimeError("bitwise_not is not implemented for floating point tensors")
    return prims.elementwise("bitwise_not", input)


# ---------------------------------------------------------------- unary math
def _unary(prim, kind=Kind.INT_TO_FLOAT):
    def impl(input):
        if prim == "neg" and type(input) is TensorProxy and input.tdtype is torch.bool:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported.")
        return elementwise_unary(prim, input, kind)
    return impl


_UNARY = {
    # name: (prim, promotion kind, extra torch spellings)
    "exp": ("exp", Kind.INT_TO_FLOAT, ()), "exp2": ("exp2", Kind.INT_TO_FLOAT, (torch.special.exp2,)),
    "log": ("log", Kind.INT_TO_FLOAT, ()), "log2": ("log2", Kind.INT_TO_FLOAT, ()),
    "log10": ("log10", Kind.INT_TO_FLOAT, ()),
    "log1p": ("log1p", Kind.INT_TO_FLOAT, (torch.special.log1p,)),
    "expm1": ("expm1", Kind.INT_TO_FLOAT, (torch.special.expm1,)),
    "sqrt": ("sqrt", Kind.INT_TO_FLOAT, ()), "rsqrt": ("rsqrt", Kind.INT_TO_FLOAT, ()),
    "sin": ("sin", Kind.INT_TO_FLOAT, ()), "cos": ("cos", Kind.INT_TO_FLOAT, ()),
    "tan": ("tan", Kind.INT_TO_FLOAT, ()),
    "asin": ("asin", Kind.INT_TO_FLOAT, (torch.arcsin, T.arcsin)),
    "acos": ("acos", Kind.INT_TO_FLOAT, (torch.arccos, T.arccos)),
    "atan": ("atan", Kind.INT_TO_FLOAT, (torch.arctan, T.arctan)),
    "sinh": ("sinh", Kind.INT_TO_FLOAT, ()), "cosh": ("cosh", Kind.INT_TO_FLOAT, ()),
    "tanh": ("tanh", Kind.INT_TO_FLOAT, (torch.nn.functional.tanh,)),
    "asinh": ("asinh", Kind.INT_TO_FLOAT, (torch.arcsinh, T.arcsinh)),
    "acosh": ("acosh", Kind.INT_TO_FLOAT, (torch.arccosh, T.arccosh)),
    "atanh": ("atanh", Kind.INT_TO_FLOAT, (torch.arctanh, T.arctanh)),
    "sigmoid": ("logistic", Kind.INT_TO_FLOAT, (torch.special.expit, torch.nn.functional.sigmoid)),
    "erf": ("erf", Kind.INT_TO_FLOAT, (torch.special.erf,)),
    "erfc": ("erfc", Kind.INT_TO_FLOAT, (torch.special.erfc,)),
    "erfinv": ("erfinv", Kind.INT_TO_FLOAT, (torch.special.erfinv,)),
    "lgamma": ("lgamma", Kind.INT_TO_FLOAT, (torch.special.gammaln,)),
    "neg": ("neg", Kind.DEFAULT, (torch.negative, T.negative, T.__neg__)),
    "reciprocal": ("reciprocal", Kind.INT_TO_FLOAT, ()),
}
for _name, (_prim, _kind, _extra) in _UNARY.items():
    _fn_list = [f for f in (getattr(torch, _name, None), getattr(T, _name, None)) if f]
    _sym = register(_name, *_fn_list, *_extra)(_unary(_prim, _kind))
    globals()[_name] = _sym
    if getattr(T, _name + "_", None) is not None:
        register_inplace(_sym, getattr(T, _name + "_"))


@register("sign", torch.sign, T.sign)
def sign(input):
    """-1, 0 or 1; torch maps NaN to 0 (stablehlo.sign keeps NaN) and bool to itself."""
    if input.tdtype is torch.bool:
        return input
    if input.tdtype is torch.uint8:  # stablehlo.sign is for signed types: 0 or 1
        return prims.convert_element_type(
            prims.elementwise("ne", input, prims.full(input.tshape, 0, input.tdtype)),
            input.tdtype)
    out = prims.elementwise("sign", input)
    if input.tdtype.is_floating_point:
        out = prims.where(prims.elementwise("ne", input, input),
                          prims.full(input.tshape, 0, input.tdtype), out)
    return out


register_inplace(sign, T.sign_)


@register("abs", torch.abs, T.abs, torch.absolute, T.absolute, T.__abs__)
def abs(input):
    if input.tdtype in (torch.bool, torch.uint8):  # (stablehlo.abs is for signed types)
        return input
    return prims.elementwise("abs", input)


def _rounding(prim):
    def impl(input):
        if not input.tdtype.is_floating_point:
            return input
        return prims.elementwise(prim, input)
    return impl


floor = register("floor", torch.floor, T.floor)(_rounding("floor"))
ceil = register("ceil", torch.ceil, T.ceil)(_rounding("ceil"))


def _trunc(x):
    return prims.elementwise("trunc", x)


trunc = register("trunc", torch.trunc, T.trunc, torch.fix, T.fix)(_rounding("trunc"))


@register("round", torch.round, T.round)
def round(input, *, decimals=0):
    if not input.tdtype.is_floating_point:
        return input
    if decimals == 0:
        return prims.elementwise("round", input)
    scale = prims.full(input.tshape, 10.0 ** decimals, input.tdtype)
    scaled = prims.elementwise("mul", input, scale)
    return prims.elementwise("div", prims.elementwise("round", scaled), scale)


@register("isnan", torch.isnan, T.isnan)
def isnan(input):
    if not (input.tdtype.is_floating_point or input.tdtype.is_complex):
        return prims.full(input.tshape, False, torch.bool)
    return prims.elementwise("ne", input, input)


@register("isfinite", torch.isfinite, T.isfinite)
def isfinite(input):
    if not input.tdtype.is_floating_point:
        return prims.full(input.tshape, True, torch.bool)
    return prims.elementwise("isfinite", input)


@register("isinf", torch.isinf, T.isinf)
def isinf(input):
    if not input.tdtype.is_floating_point:
        return prims.full(input.tshape, False, torch.bool)
    inf = prims.full(input.tshape, math.inf, input.tdtype)
    return prims.elementwise("eq", prims.elementwise("abs", input), inf)


# ------------------------------------------------------------ where, clamp, fill
@register("where", torch.where)
def where(condition, input=None, other=None):
    if input is None and other is None:
        raise NotImplementedError("torch.where(condition) has a data-dependent output shape")
    if type(condition) is TensorProxy and condition.tdtype not in (torch.bool, torch.uint8):
        with torch._C.DisableTorchFunction():  # torch's name for the dtype (Long, Float)
            kind = torch.empty(0, dtype=condition.tdtype, device="meta").type().split(".")[-1]
        raise RuntimeError("where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {kind.removesuffix('Tensor')}")
    comp, res = promote(input, other)
    shape = broadcast_shape(condition, input, other)
    pred = lift(_as_bool(condition), torch.bool, shape)
    return prims.where(pred, lift(input, res, shape), lift(other, res, shape))


@register("tensor_where", T.where, composite=False)
def tensor_where(self, condition, other):
    """``self.where(condition, other)``: ``torch.where(condition, self, other)`` (the
    method's first argument is the input, not the condition)."""
    return where(condition, self, other)


@register("masked_fill", torch.masked_fill, T.masked_fill)
def masked_fill(input, mask, value):
    if type(mask) is TensorProxy and mask.tdtype is not torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{mask.tdtype}")
    if type(value) is TensorProxy:
        value = prims.convert_element_type(value, input.tdtype)
    shape = broadcast_shape(input, mask)
    return prims.where(lift(mask, torch.bool, shape), lift(value, input.tdtype, shape),
                       lift(input, input.tdtype, shape))


register_inplace(masked_fill, T.masked_fill_)


@register("clamp", torch.clamp, T.clamp, torch.clip, T.clip)
def clamp(input, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    # min(max(x, lo), hi) as in torch: a NaN in x or in a bound gives NaN
    comp, res = promote(input, min, max)
    shape = broadcast_shape(input, min, max)
    x = lift(input, comp, shape)
    if min is not None:
        x = prims.elementwise("maximum", x, lift(min, comp, shape))
    if max is not None:
        x = prims.elementwise("minimum", x, lift(max, comp, shape))
    return prims.convert_element_type(x, res)


register("clamp_min", torch.clamp_min, T.clamp_min)(lambda input, min: clamp(input, min=min))
register("clamp_max", torch.clamp_max, T.clamp_max)(lambda input, max: clamp(input, max=max))

for _sym, _names in ((add, ("add_", "__iadd__")), (sub, ("sub_", "__isub__")),
                     (mul, ("mul_", "__imul__")), (div, ("div_", "__itruediv__")),
                     (pow, ("pow_", "__ipow__")), (clamp, ("clamp_", "clip_"))):
    register_inplace(_sym, *_fns(*[getattr(T, n, None) for n in _names]))


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
    close = abs(sub(a, b)) <= add(mul(abs(b), rtol), atol)
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
