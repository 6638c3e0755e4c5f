"""More elementwise math: ``torch`` and ``torch.special`` pointwise functions.

Each decomposition mirrors the ``torch._refs`` / ``torch._refs.special`` function of the
same name (formula and type-promotion kind), built from the prims of ``prims.py`` (whose
StableHLO/CHLO lowering is named there). Functions whose CPU kernel needs more accuracy
than such a formula gives (Bessel functions other than ``i1e``) are not registered: they
run on the torch fallback. ``log_ndtr`` uses an asymptotic series in its lower tail.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.ir.dtypes import is_inexact
from thunder_mlir.frontend.lang import Kind, broadcast_shape, elementwise_unary, lift, promote
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register, register_inplace


def _fns(*names, mods=(torch, T)):
    out = []
    for n in names:
        for m in mods:
            f = getattr(m, n, None)
            if f is not None and f not in out:
                out.append(f)
    return out


def _args(*args, kind=Kind.DEFAULT):
    """(lifted operands in the computation dtype, result dtype, shape) of an elementwise op."""
    comp, res = promote(*args, kind=kind)
    shape = broadcast_shape(*args)
    return [lift(a, comp, shape) for a in args], comp, res, shape


def _c(shape, v, dtype):
    return prims.full(shape, v, dtype)


E = prims.elementwise


def _low_precision_fallback(x, name):
    """float16/bfloat16: torch's kernel rounds intermediates differently from this formula
    by more than the dtype's tolerance near the function's poles: use the fallback."""
    if type(x) is TensorProxy and x.tdtype in (torch.float16, torch.bfloat16):
        raise Fallback(f"{name} of {x.tdtype}")


# ----------------------------------------------------------------- unary
@register("sinc", *_fns("sinc"), torch.special.sinc)
def sinc(input):
    """sin(pi x) / (pi x), 1 at 0 (torch._refs.sinc); int inputs compute in float."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    zero = E("eq", x, _c(s, 0, comp))
    # (x = 0 computes with 1 instead, then is replaced: its gradient is 0 as eager's, not
    # the NaN of 0 * (the 0/0 branch's derivative))
    px = E("mul", prims.where(zero, _c(s, 1.0, comp), x), _c(s, math.pi, comp))
    out = prims.where(zero, _c(s, 1.0, comp), E("div", E("sin", px), px))
    return prims.convert_element_type(out, res)


def _scale(name, factor):
    def impl(input):
        (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
        return prims.convert_element_type(E("mul", x, _c(s, factor, comp)), res)
    return register(name, *_fns(name))(impl)


deg2rad = _scale("deg2rad", math.pi / 180)
rad2deg = _scale("rad2deg", 180 / math.pi)


@register("frac", *_fns("frac"))
def frac(input):
    """x - trunc(x) (torch.frac); floating inputs only."""
    if not input.tdtype.is_floating_point:
        raise RuntimeError(f"frac is not implemented for {input.tdtype}")
    return E("sub", input, E("trunc", input))


@register("square", *_fns("square"))
def square(input):
    """x * x with torch.square's BOOL_TO_LONG promotion: the square prim for floating-point
    and complex tensors, a multiplication for integers (chlo.square takes no integers)."""
    (x,), comp, res, s = _args(input, kind=Kind.BOOL_TO_LONG)
    if is_inexact(x.tdtype):
        return prims.convert_element_type(E("square", x), res)
    return prims.convert_element_type(E("mul", x, x), res)


@register("positive", *_fns("positive"), composite=False)
def positive(input):
    if input.tdtype is torch.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@register("conj_physical", *_fns("conj_physical", "conj", "resolve_conj", "resolve_neg"),
          composite=False)
def conj_physical(input):
    """Identity on real tensors; complex inputs run on the torch fallback."""
    if input.tdtype.is_complex:
        raise Fallback("complex conjugation")
    return input


def _signbit(x):
    """Sign bit of x: x < 0, or x == -0.0 (1/x < 0)."""
    zero = _c(x.tshape, 0, x.tdtype)
    if not x.tdtype.is_floating_point:
        return E("lt", x, zero)
    negzero = E("bitwise_and", E("eq", x, zero),
                E("lt", E("div", _c(x.tshape, 1.0, x.tdtype), x), zero))
    return E("bitwise_or", E("lt", x, zero), negzero)


@register("signbit", *_fns("signbit"))
def signbit(input):
    if input.tdtype is torch.bool:
        return _c(input.tshape, False, torch.bool)
    return _signbit(input)


@register("sgn", *_fns("sgn"))
def sgn(input):
    if input.tdtype.is_complex:
        raise Fallback("complex sgn")
    if input.tdtype is torch.bool:
        return input
    from thunder_mlir.frontend.symbols.elementwise import sign
    return sign(input)


@register("angle", *_fns("angle"))
def angle(input):
    """Real input: pi where x < 0, else 0; NaN stays NaN (torch._refs.angle)."""
    if input.tdtype.is_complex:
        raise Fallback("complex angle")
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    out = prims.where(E("lt", x, _c(s, 0, comp)), _c(s, math.pi, comp), _c(s, 0.0, comp))
    out = prims.where(E("ne", x, x), x, out)
    return prims.convert_element_type(out, res)


@register("isposinf", *_fns("isposinf"))
def isposinf(input):
    if not input.tdtype.is_floating_point:
        return _c(input.tshape, False, torch.bool)
    return E("eq", input, _c(input.tshape, math.inf, input.tdtype))


@register("isneginf", *_fns("isneginf"))
def isneginf(input):
    if not input.tdtype.is_floating_point:
        return _c(input.tshape, False, torch.bool)
    return E("eq", input, _c(input.tshape, -math.inf, input.tdtype))


@register("isreal", *_fns("isreal"))
def isreal(input):
    if input.tdtype.is_complex:
        raise Fallback("complex isreal")
    return _c(input.tshape, True, torch.bool)


@register("nan_to_num", *_fns("nan_to_num"))
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default: dtype max), -inf -> neginf (dtype lowest)."""
    if not input.tdtype.is_floating_point:
        return input
    fi = torch.finfo(input.tdtype)
    s, dt = input.tshape, input.tdtype
    x = prims.where(E("ne", input, input), _c(s, nan if nan is not None else 0.0, dt), input)
    x = prims.where(E("eq", x, _c(s, math.inf, dt)), _c(s, fi.max if posinf is None else posinf,
                                                          dt), x)
    return prims.where(E("eq", x, _c(s, -math.inf, dt)),
                       _c(s, fi.min if neginf is None else neginf, dt), x)


@register("logit", *_fns("logit"), torch.special.logit)
def logit(input, eps=None):
    """log(x / (1 - x)) with x clamped to [eps, 1 - eps] when eps is given."""
    _low_precision_fallback(input, "logit")
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    if eps is not None:
        x = E("minimum", E("maximum", x, _c(s, eps, comp)), _c(s, 1 - eps, comp))
    out = E("log", E("div", x, E("sub", _c(s, 1.0, comp), x)))
    return prims.convert_element_type(out, res)


@register("ndtr", torch.special.ndtr)
def ndtr(input):
    """Standard normal CDF: (1 + erf(x / sqrt 2)) / 2 (torch._refs.special.ndtr)."""
    _low_precision_fallback(input, "ndtr")
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    z = E("mul", x, _c(s, 1 / math.sqrt(2), comp))
    out = E("mul", _c(s, 0.5, comp), E("add", _c(s, 1.0, comp), E("erf", z)))
    return prims.convert_element_type(out, res)


@register("entr", torch.special.entr)
def entr(input):
    """-x log x; 0 at 0, -inf for x < 0, NaN stays NaN (torch._refs.special.entr)."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    zero = _c(s, 0.0, comp)
    v = E("neg", E("mul", x, E("log", x)))
    out = prims.where(E("lt", x, zero), _c(s, -math.inf, comp),
                      prims.where(E("eq", x, zero), zero, v))
    return prims.convert_element_type(out, res)


@register("i1e", torch.special.i1e)
def i1e(input):
    """Exponentially scaled modified Bessel function of order 1 (chlo.bessel_i1e)."""
    return elementwise_unary("bessel_i1e", input, Kind.INT_TO_FLOAT)


@register("mvlgamma", *_fns("mvlgamma"), torch.special.multigammaln)
def mvlgamma(input, p):
    """sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi), in ATen's order: the terms from
    i = p-1 down to 0, summed with float32 accumulation for 16-bit floats, then the
    constant added (UnaryOps.cpp ``mvlgamma``). Integer and bool inputs compute in the
    default dtype, as ATen's."""
    if input.tdtype.is_complex:
        raise RuntimeError("mvlgamma: input must be real")
    if not input.tdtype.is_floating_point:
        input = prims.convert_element_type(input, torch.get_default_dtype())
    s, dt = input.tshape, input.tdtype
    acc = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    total = None
    for i in reversed(range(p)):
        term = prims.convert_element_type(E("lgamma", E("sub", input, _c(s, i / 2, dt))), acc)
        total = term if total is None else E("add", total, term)
    total = prims.convert_element_type(total, dt)
    return E("add", total, _c(s, p * (p - 1) / 4 * math.log(math.pi), dt))


# ----------------------------------------------------------------- binary
@register("hypot", *_fns("hypot"))
def hypot(input, other):
    (a, b), comp, res, s = _args(input, other)
    return prims.convert_element_type(E("sqrt", E("add", E("mul", a, a), E("mul", b, b))), res)


@register("copysign", *_fns("copysign"))
def copysign(input, other):
    """|a| with the sign bit of b (torch._refs.copysign, INT_TO_FLOAT)."""
    comp, res = promote(input, other, kind=Kind.INT_TO_FLOAT)
    s = broadcast_shape(input, other)
    a, b = lift(input, comp, s), lift(other, comp, s)
    mag = E("abs", a)
    return prims.convert_element_type(prims.where(_signbit(b), E("neg", mag), mag), res)


@register("heaviside", *_fns("heaviside"))
def heaviside(input, values):
    (a, v), comp, res, s = _args(input, values)
    zero = _c(s, 0, comp)
    step = prims.convert_element_type(E("gt", a, zero), comp)
    return prims.convert_element_type(prims.where(E("eq", a, zero), v, step), res)


def _logaddexp(a, b, base2: bool):
    ge = E("ge", a, b)
    mx, mn = prims.where(ge, a, b), prims.where(ge, b, a)
    s, dt = a.tshape, a.tdtype
    inf_mask = E("bitwise_and", E("eq", E("abs", a), _c(s, math.inf, dt)), E("eq", a, b))
    d = E("sub", mn, mx)
    if base2:
        r = E("add", mx, E("div", E("log1p", E("exp2", d)), _c(s, math.log(2), dt)))
    else:
        r = E("add", mx, E("log1p", E("exp", d)))
    return prims.where(inf_mask, a, r)


@register("logaddexp", *_fns("logaddexp"))
def logaddexp(input, other):
    """log(e^a + e^b) = max + log1p(exp(min - max)); equal infinities give that infinity."""
    (a, b), comp, res, s = _args(input, other, kind=Kind.INT_TO_FLOAT)
    return prims.convert_element_type(_logaddexp(a, b, False), res)


@register("logaddexp2", *_fns("logaddexp2"))
def logaddexp2(input, other):
    (a, b), comp, res, s = _args(input, other, kind=Kind.INT_TO_FLOAT)
    return prims.convert_element_type(_logaddexp(a, b, True), res)


def _xlogy(log_prim):
    def impl(input, other):
        (a, b), comp, res, s = _args(input, other, kind=Kind.INT_TO_FLOAT)
        v = E("mul", a, E(log_prim, b))
        out = prims.where(E("eq", a, _c(s, 0, comp)), _c(s, 0.0, comp), v)
        out = prims.where(E("ne", b, b), b, out)
        return prims.convert_element_type(out, res)
    return impl


xlogy = register("xlogy", *_fns("xlogy"), torch.special.xlogy)(_xlogy("log"))
xlog1py = register("xlog1py", torch.special.xlog1py)(_xlogy("log1p"))


@register("nextafter", *_fns("nextafter"))
def nextafter(input, other):
    """The next representable value of the result dtype (no upcast: spacing is dtype's)."""
    comp, res = promote(input, other)
    s = broadcast_shape(input, other)
    return E("nextafter", lift(input, res, s), lift(other, res, s))


@register("zeta", torch.special.zeta)
def zeta(input, other):
    """Hurwitz zeta(x, q) (chlo.zeta) with the domain rules of Cephes' zeta, which ATen
    uses, checked in its order: x == 1 -> inf; x < 1 -> NaN; q a non-positive integer
    -> inf; q <= 0 and x not an integer -> NaN (chlo.zeta differs at some of these)."""
    (a, b), comp, res, s = _args(input, other, kind=Kind.INT_TO_FLOAT)
    and_ = lambda p, q: E("bitwise_and", p, q)  # noqa: E731
    q_le_0 = E("le", b, _c(s, 0, comp))
    out = E("zeta", a, b)
    out = prims.where(and_(q_le_0, E("ne", a, E("floor", a))), _c(s, math.nan, comp), out)
    out = prims.where(and_(q_le_0, E("eq", b, E("floor", b))), _c(s, math.inf, comp), out)
    out = prims.where(E("lt", a, _c(s, 1, comp)), _c(s, math.nan, comp), out)
    out = prims.where(E("eq", a, _c(s, 1, comp)), _c(s, math.inf, comp), out)
    return prims.convert_element_type(out, res)


@register("ldexp", *_fns("ldexp"))
def ldexp(input, other):
    """input * 2**other (torch.ldexp)."""
    from thunder_mlir.frontend.symbols.elementwise import mul, rpow
    return mul(input, rpow(other, 2.0))


def _shift(right: bool):
    def impl(input, other):
        comp, res = promote(input, other)
        if comp.is_floating_point or comp is torch.bool:
            raise RuntimeError(f"shift is not implemented for {comp}")
        (a, b), comp, res, s = _args(input, other)
        if not right:
            name = "shift_left"
        else:
            name = "shift_right_logical" if comp is torch.uint8 else "shift_right_arithmetic"
        return E(name, a, b)
    return impl


bitwise_left_shift = register("bitwise_left_shift",
                              *_fns("bitwise_left_shift", "__lshift__"))(_shift(False))
bitwise_right_shift = register("bitwise_right_shift",
                               *_fns("bitwise_right_shift", "__rshift__"))(_shift(True))


@register("float_power", *_fns("float_power"))
def float_power(input, exponent):
    """pow in float64 (complex128 for complex operands), as torch.float_power."""
    dt = torch.float64
    for a in (input, exponent):
        if (type(a) is TensorProxy and a.tdtype.is_complex) or isinstance(a, complex):
            raise Fallback("complex float_power")
    s = broadcast_shape(input, exponent)
    return E("pow", lift(input, dt, s), lift(exponent, dt, s))


# ---------------------------------------------------------------- ternary
@register("lerp", *_fns("lerp"))
def lerp(input, end, weight):
    """start + w (end - start) for |w| < 0.5, else end - (end - start)(1 - w) (torch CPU)."""
    (a, b, w), comp, res, s = _args(input, end, weight)
    d = E("sub", b, a)
    lo = E("add", a, E("mul", w, d))
    hi = E("sub", b, E("mul", d, E("sub", _c(s, 1.0, comp), w)))
    out = prims.where(E("lt", E("abs", w), _c(s, 0.5, comp)), lo, hi)
    return prims.convert_element_type(out, res)


@register("addcmul", *_fns("addcmul"))
def addcmul(input, tensor1, tensor2, *, value=1):
    (a, b, c), comp, res, s = _args(input, tensor1, tensor2)
    p = E("mul", b, c)
    if value != 1:
        p = E("mul", _c(s, value, comp), p)
    return prims.convert_element_type(E("add", a, p), res)


@register("addcdiv", *_fns("addcdiv"))
def addcdiv(input, tensor1, tensor2, *, value=1):
    (a, b, c), comp, res, s = _args(input, tensor1, tensor2)
    if not is_inexact(comp):
        raise RuntimeError("Integer division with addcdiv is no longer supported")
    p = E("div", b, c)
    if value != 1:
        p = E("mul", _c(s, value, comp), p)
    return prims.convert_element_type(E("add", a, p), res)


for _sym, _name in ((lerp, "lerp_"), (addcmul, "addcmul_"), (addcdiv, "addcdiv_"),
                    (nan_to_num, "nan_to_num_"), (square, "square_"), (hypot, "hypot_"),
                    (copysign, "copysign_"), (xlogy, "xlogy_"), (logit, "logit_"),
                    (frac, "frac_"), (sinc, "sinc_")):
    if getattr(T, _name, None) is not None:
        register_inplace(_sym, getattr(T, _name))


@register("spherical_bessel_j0", torch.special.spherical_bessel_j0)
def spherical_bessel_j0(input):
    """sin(x) / x, 1 at 0 (torch.special.spherical_bessel_j0)."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    out = prims.where(E("eq", x, _c(s, 0, comp)), _c(s, 1.0, comp), E("div", E("sin", x), x))
    return prims.convert_element_type(out, res)


@register("ndtri", torch.special.ndtri)
def ndtri(input):
    """Inverse of the standard normal CDF: sqrt(2) erfinv(2p - 1)."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    t = E("sub", E("mul", x, _c(s, 2.0, comp)), _c(s, 1.0, comp))
    return prims.convert_element_type(E("mul", E("erfinv", t), _c(s, math.sqrt(2), comp)), res)


@register("log_ndtr", torch.special.log_ndtr)
def log_ndtr(input):
    """log of the normal CDF, in three ranges:

    * x >= -1: ``log1p(-erfc(x / sqrt2) / 2)`` (ATen's ``calc_log_ndtr``);
    * lower tail down to -10 (float32) or -20 (float64):
      ``log(erfc(-x / sqrt2) / 2)`` (ATen uses erfcx here; erfc has not underflowed yet);
    * below, where erfc underflows to 0 (log 0 = -inf where eager is finite): ATen's
      ``log(erfcx(z) / 2) - t^2`` (t = x / sqrt2, z = -t) with erfcx from its asymptotic
      series (Abramowitz & Stegun 7.1.23), ``erfcx(z) = (1 + S) / (z sqrt(pi))``,
      ``S = sum_{n=1..5} (-1)^n (2n-1)!! / (2 z^2)^n`` (truncation error below 1e-8
      there). ``t^2`` is rounded as ATen rounds it, so the result (and the gradient
      computed from it, which cancels against x^2 / 2) follows eager's to the last bits.

    Each range's argument is clamped into that range (a "double where"), so no discarded
    branch computes an infinity."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    r2 = _c(s, 1 / math.sqrt(2), comp)
    half = _c(s, 0.5, comp)
    tail = _c(s, -20.0 if comp is torch.float64 else -10.0, comp)
    minus_one = _c(s, -1.0, comp)
    x_hi = E("maximum", x, minus_one)
    x_mid = E("minimum", E("maximum", x, tail), minus_one)
    x_lo = E("minimum", x, tail)
    hi = E("log1p", E("neg", E("mul", E("erfc", E("mul", x_hi, r2)), half)))
    mid = E("log", E("mul", E("erfc", E("mul", E("neg", x_mid), r2)), half))
    t = E("mul", x_lo, r2)
    z = E("neg", t)
    inv = E("div", _c(s, 1.0, comp), E("mul", E("mul", z, z), _c(s, 2.0, comp)))
    series, term = _c(s, 0.0, comp), _c(s, 1.0, comp)
    for n in range(1, 6):  # term_n = (-1)^n (2n-1)!! / (2 z^2)^n
        term = E("mul", E("mul", term, inv), _c(s, -(2.0 * n - 1.0), comp))
        series = E("add", series, term)
    log_half_erfcx = E("sub", E("log1p", series),
                       E("log", E("mul", z, _c(s, 2 * math.sqrt(math.pi), comp))))
    lo = E("sub", log_half_erfcx, E("mul", t, t))
    out = prims.where(E("lt", x, minus_one), prims.where(E("lt", x, tail), lo, mid), hi)
    return prims.convert_element_type(out, res)


@register("digamma", torch.digamma, T.digamma, torch.special.digamma, torch.special.psi)
def digamma(input):
    """chlo.digamma, with torch's digamma(0) = -inf (chlo gives NaN there)."""
    (x,), comp, res, s = _args(input, kind=Kind.INT_TO_FLOAT)
    out = prims.where(E("eq", x, _c(s, 0, comp)), _c(s, -math.inf, comp), E("digamma", x))
    return prims.convert_element_type(out, res)


register_inplace(digamma, T.digamma_)
