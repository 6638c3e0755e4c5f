"""The definition of every ``thunder`` prim: one ``PrimDef`` each (``primdef.py``).

Each entry holds all the facts of its prim: operands and attributes, shape and dtype
inference (which is also the op's verifier), StableHLO lowering (an op name for a 1:1
lowering, else a pattern of ``hlo.py``), the VJP rule (inline for elementwise
derivatives, else a rule of ``vjp_rules.py``) or the reason it has no gradient, and the
flags ``cheap`` (rematerialized by ``grad``) and ``elementwise``. Shapes and dtypes follow
the StableHLO spec of the op each prim lowers to (https://openxla.org/stablehlo/spec).

Prims never broadcast or promote: operands already have the shapes and dtypes the op
needs (the torch-level symbols do that). ``docs/adding_an_op.md`` shows how to add one.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.ir import hlo, prims, sharding, symbolic, vjp_rules
from thunder_mlir.ir.dialect import RNG_STREAM_SHIFT
from thunder_mlir.ir.primdef import (
    INT, INTS, NUMBER, PRIMS, STR, TensorSpec, TorchAutogradVJP, check, define)

X, LR = ("x",), ("lhs", "rhs")


def _e(name, *xs):
    return prims.elementwise(name, *xs)


def _c(like, v):
    return prims.full(like.tshape, v, like.tdtype)


# ------------------------------------------------------------------ inference
def _same_operands(name: str, ops: list[TensorSpec]) -> TensorSpec:
    x = ops[0]
    for y in ops[1:]:
        check(tuple(y.shape) == tuple(x.shape) and y.dtype == x.dtype,
              f"{name}: operands differ: {tuple(x.shape)}/{x.dtype} vs "
              f"{tuple(y.shape)}/{y.dtype}")
    return TensorSpec(tuple(x.shape), x.dtype)


def same(name: str):
    """Elementwise inference: operands of one shape and dtype; the result is of both."""
    return lambda ops, attrs, result=None: _same_operands(name, ops)


def to_bool(name: str):
    """Elementwise inference of comparisons and predicates: an ``i1`` result."""
    return lambda ops, attrs, result=None: TensorSpec(_same_operands(name, ops).shape,
                                                      torch.bool)


def to_real(name: str):
    """Elementwise inference of ``abs``/``real``/``imag``: complex operands give the real
    dtype of their width (StableHLO spec: abs, real, imag)."""
    def infer(ops, attrs, result=None):
        s = _same_operands(name, ops)
        return TensorSpec(s.shape, s.dtype.to_real() if s.dtype.is_complex else s.dtype)
    return infer


def _result(name: str, result: TensorSpec | None) -> TensorSpec:
    check(result is not None, f"{name}: the result type is a parameter of the op")
    return TensorSpec(tuple(result.shape), result.dtype)


# ---------------------------------------------------------- elementwise prims
def _unary(name, lower, *, vjp=None, no_grad=None, cheap=False, infer=None, doc=""):
    define(name, X, infer or same(name), lower, vjp=vjp, no_grad=no_grad, cheap=cheap,
           elementwise=True, doc=doc)


def _binary(name, lower, *, vjp=None, no_grad=None, cheap=False, infer=None, doc=""):
    define(name, LR, infer or same(name), lower, vjp=vjp, no_grad=no_grad, cheap=cheap,
           elementwise=True, doc=doc)


d = vjp_rules.derivative  # the rule g * f(x, y) of a unary prim with derivative f
BOOL = "boolean result"
BITS = "bitwise operation on integers or booleans: no derivative"
ZERO = vjp_rules.zero_grad  # piecewise constant: zero gradient (derivatives.yaml)

_unary("abs", "stablehlo.abs", vjp=vjp_rules.abs_, cheap=True, infer=to_real("abs"))
_unary("neg", "stablehlo.negate", vjp=vjp_rules.neg, cheap=True)
_unary("exp", "stablehlo.exponential", vjp=vjp_rules.exp, cheap=True)
_unary("exp2", hlo.lower_scaled("stablehlo.exponential", math.log(2.0), None),
       vjp=d(lambda x, y: _e("mul", y, _c(y, math.log(2.0)))), doc="exp(x ln 2)")
_unary("log", "stablehlo.log", vjp=vjp_rules.log, cheap=True)
_unary("log2", hlo.lower_scaled("stablehlo.log", None, math.log(2.0)),
       vjp=d(lambda x, y: _e("div", _c(x, 1 / math.log(2.0)), x)), doc="log(x) / ln 2")
_unary("log10", hlo.lower_scaled("stablehlo.log", None, math.log(10.0)),
       vjp=d(lambda x, y: _e("div", _c(x, 1 / math.log(10.0)), x)), doc="log(x) / ln 10")
_unary("log1p", "stablehlo.log_plus_one", vjp=vjp_rules.log1p)
_unary("expm1", "stablehlo.exponential_minus_one", vjp=vjp_rules.expm1)
_unary("sqrt", "stablehlo.sqrt", vjp=vjp_rules.sqrt, cheap=True)
_unary("rsqrt", "stablehlo.rsqrt", vjp=vjp_rules.rsqrt, cheap=True)
_unary("cbrt", "stablehlo.cbrt", vjp=d(lambda x, y: _e("div", _c(y, 1 / 3), _e("mul", y, y))))
_unary("sin", hlo.lower_computed_once("stablehlo.sine"), vjp=vjp_rules.sin, cheap=True)
_unary("cos", hlo.lower_computed_once("stablehlo.cosine"), vjp=vjp_rules.cos, cheap=True)
_unary("tan", "stablehlo.tan", vjp=d(lambda x, y: _e("add", _c(y, 1), _e("mul", y, y))))
_unary("asin", "chlo.asin", vjp=d(lambda x, y: _e("rsqrt", vjp_rules.one_minus_sq(x))))
_unary("acos", "chlo.acos",
       vjp=d(lambda x, y: _e("neg", _e("rsqrt", vjp_rules.one_minus_sq(x)))))
_unary("atan", "chlo.atan",
       vjp=d(lambda x, y: _e("div", _c(x, 1), _e("add", _c(x, 1), _e("mul", x, x)))))
_unary("sinh", "chlo.sinh", vjp=d(lambda x, y: _e("cosh", x)))
_unary("cosh", "chlo.cosh", vjp=d(lambda x, y: _e("sinh", x)))
_unary("tanh", "stablehlo.tanh", vjp=vjp_rules.tanh, cheap=True)
_unary("asinh", "chlo.asinh",
       vjp=d(lambda x, y: _e("rsqrt", _e("add", _e("mul", x, x), _c(x, 1)))))
# torch: grad * (self.pow(2) - 1).rsqrt()
_unary("acosh", "chlo.acosh",
       vjp=d(lambda x, y: _e("rsqrt", _e("sub", _e("mul", x, x), _c(x, 1)))))
_unary("atanh", "chlo.atanh",
       vjp=d(lambda x, y: _e("div", _c(x, 1), vjp_rules.one_minus_sq(x))))
_unary("logistic", "stablehlo.logistic", vjp=vjp_rules.logistic, cheap=True)
_unary("floor", "stablehlo.floor", vjp=ZERO)
_unary("ceil", "stablehlo.ceil", vjp=ZERO)
_unary("round", "stablehlo.round_nearest_even", vjp=ZERO)
_unary("trunc", hlo.lower_trunc, vjp=ZERO, doc="x < 0 ? ceil(x) : floor(x)")
_unary("sign", "stablehlo.sign", vjp=ZERO, cheap=True)
_unary("bitwise_not", "stablehlo.not", no_grad=BITS, cheap=True)
_unary("erf", "chlo.erf", vjp=vjp_rules.erf, cheap=True)
_unary("erfc", "chlo.erfc", vjp=d(lambda x, y: _e("mul", _c(x, -2 / math.sqrt(math.pi)),
                                                  _e("exp", _e("neg", _e("mul", x, x))))))
_unary("erfinv", "chlo.erf_inv",
       vjp=d(lambda x, y: _e("mul", _c(y, math.sqrt(math.pi) / 2), _e("exp", _e("mul", y, y)))))
_unary("lgamma", "chlo.lgamma", vjp=d(lambda x, y: _e("digamma", x)))
_unary("digamma", "chlo.digamma", vjp=d(lambda x, y: vjp_rules.trigamma(x)))
_unary("isfinite", "stablehlo.is_finite", no_grad=BOOL, cheap=True, infer=to_bool("isfinite"))
_unary("real", "stablehlo.real", vjp=vjp_rules.real, infer=to_real("real"))
_unary("imag", "stablehlo.imag", vjp=vjp_rules.imag, infer=to_real("imag"))
_unary("reciprocal", hlo.lower_reciprocal, vjp=d(lambda x, y: _e("neg", _e("mul", y, y))),
       doc="1 / x")


def _infer_square(ops, attrs, result=None):
    s = _same_operands("square", ops)
    check(s.dtype.is_floating_point or s.dtype.is_complex,
          f"square of {s.dtype}: floating-point or complex only (chlo.square)")
    return s


_unary("square", "chlo.square", vjp=d(lambda x, y: _e("mul", x, _c(x, 2))), infer=_infer_square,
       doc="x * x (chlo.square), floating-point or complex")
# d/dx i1e(x) = i0e(x) - i1e(x) (sgn(x) + 1/x), 0.5 at 0 (PyTorch's i1e_backward); no prim
# computes i0e, so torch.autograd differentiates torch.special.i1e on the torch executor
_unary("bessel_i1e", "chlo.bessel_i1e",
       vjp=TorchAutogradVJP("torch.special.i1e", torch.special.i1e))

_binary("add", "stablehlo.add", vjp=vjp_rules.add, cheap=True)
_binary("sub", "stablehlo.subtract", vjp=vjp_rules.sub, cheap=True)
_binary("mul", "stablehlo.multiply", vjp=vjp_rules.mul, cheap=True)
_binary("div", "stablehlo.divide", vjp=vjp_rules.div, cheap=True)
_binary("fmod", "stablehlo.remainder", vjp=vjp_rules.fmod)
_binary("pow", "stablehlo.power", vjp=vjp_rules.pow_, cheap=True)
_binary("maximum", "stablehlo.maximum", vjp=vjp_rules.minmax, cheap=True)
_binary("minimum", "stablehlo.minimum", vjp=vjp_rules.minmax, cheap=True)
_binary("atan2", "stablehlo.atan2", vjp=vjp_rules.atan2)
_binary("bitwise_and", "stablehlo.and", no_grad=BITS, cheap=True)
_binary("bitwise_or", "stablehlo.or", no_grad=BITS, cheap=True)
_binary("bitwise_xor", "stablehlo.xor", no_grad=BITS)
_binary("shift_left", "stablehlo.shift_left", no_grad=BITS)
_binary("shift_right_arithmetic", "stablehlo.shift_right_arithmetic", no_grad=BITS)
_binary("shift_right_logical", "stablehlo.shift_right_logical", no_grad=BITS)
for _name, _dir in {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT",
                    "ge": "GE"}.items():
    _binary(_name, hlo.lower_compare(_dir), no_grad=BOOL, cheap=True, infer=to_bool(_name),
            doc=f"stablehlo.compare {_dir}")
_binary("nextafter", "chlo.next_after", vjp=vjp_rules.nextafter)
_binary("zeta", "chlo.zeta", vjp=vjp_rules.zeta, doc="Hurwitz zeta(x, q)")
_binary("polygamma", "chlo.polygamma", vjp=vjp_rules.polygamma, doc="polygamma(n, x)")


# ------------------------------------------------------------------ selection
def _infer_where(ops, attrs, result=None):
    pred, a, b = ops
    check(pred.dtype == torch.bool, "where: predicate must be bool")
    check(tuple(pred.shape) == tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype,
          f"where: mismatched operands {tuple(pred.shape)} {tuple(a.shape)}/{a.dtype} "
          f"{tuple(b.shape)}/{b.dtype}")
    return TensorSpec(tuple(a.shape), a.dtype)


define("where", ("pred", "on_true", "on_false"), _infer_where, "stablehlo.select",
       vjp=vjp_rules.where, cheap=True, doc="stablehlo.select: pred (bool), a, b of one shape")


def _infer_clamp(ops, attrs, result=None):
    lo, x, hi = ops
    check(tuple(lo.shape) == tuple(x.shape) == tuple(hi.shape), "clamp: shapes differ")
    return TensorSpec(tuple(x.shape), x.dtype)


define("clamp", ("lo", "x", "hi"), _infer_clamp, "stablehlo.clamp", vjp=vjp_rules.clamp,
       doc="stablehlo.clamp(lo, x, hi) with lo/hi of x's shape")


# ------------------------------------------------------------- dtype changes
def _infer_convert(ops, attrs, result=None):
    r = _result("convert_element_type", result)
    check(r.shape == tuple(ops[0].shape), "convert_element_type: shape changes")
    return r


define("convert_element_type", X, _infer_convert, hlo.lower_convert_element_type,
       vjp=vjp_rules.convert, cheap=True,
       doc="stablehlo.convert (float -> int truncates toward zero; x -> bool is x != 0)")


def _infer_bitcast(ops, attrs, result=None):
    r = _result("bitcast", result)
    x = ops[0]
    check(x.dtype.itemsize == r.dtype.itemsize, f"bitcast: {x.dtype} and {r.dtype} differ in width")
    check(r.shape == tuple(x.shape), "bitcast: shape changes")
    return r


define("bitcast", X, _infer_bitcast, "stablehlo.bitcast_convert",
       no_grad="reinterprets the bits as another dtype", doc="stablehlo.bitcast_convert")


# ------------------------------------------------------------ autograd markers
define("stop_gradient", X, same("stop_gradient"), hlo.lower_identity,
       no_grad="zero gradient by definition (jax.lax.stop_gradient; torch's detach)",
       doc="x itself; its gradient is zero")
define("no_derivative", X, same("no_derivative"), hlo.lower_identity,
       vjp=vjp_rules.no_derivative, attributes={"message": STR},
       doc="x itself; a backward through it raises `message` (eager's NotImplemented node)")


# --------------------------------------------------------------------- shapes
def _infer_broadcast(ops, attrs, result=None):
    r = _result("broadcast_in_dim", result)
    x, dims = ops[0], attrs["broadcast_dimensions"]
    check(len(dims) == len(x.shape), f"broadcast_in_dim: {len(dims)} dims for rank {len(x.shape)}")
    for i, dd in enumerate(dims):
        check(0 <= dd < len(r.shape) and symbolic.stretches_to(x.shape[i], r.shape[dd]),
              f"broadcast_in_dim: {tuple(x.shape)} -> {r.shape} via {list(dims)}")
    return TensorSpec(r.shape, x.dtype)


define("broadcast_in_dim", X, _infer_broadcast,
       hlo.lower_with_attrs("stablehlo.broadcast_in_dim",
                            {"broadcast_dimensions": "broadcast_dimensions"}),
       vjp=vjp_rules.broadcast, cheap=True, attributes={"broadcast_dimensions": INTS},
       doc="operand dim i maps to result dim broadcast_dimensions[i]")


def _infer_reshape(ops, attrs, result=None):
    r = _result("reshape", result)
    check(math.prod(r.shape) == math.prod(ops[0].shape),
          f"reshape: {tuple(ops[0].shape)} -> {r.shape}")
    return TensorSpec(r.shape, ops[0].dtype)


define("reshape", X, _infer_reshape, "stablehlo.reshape", vjp=vjp_rules.reshape, cheap=True,
       doc="stablehlo.reshape (row-major element order)")


def _infer_transpose(ops, attrs, result=None):
    x, perm = ops[0], list(attrs["permutation"])
    check(sorted(perm) == list(range(len(x.shape))), f"transpose: bad permutation {perm}")
    return TensorSpec(tuple(x.shape[p] for p in perm), x.dtype)


define("transpose", X, _infer_transpose,
       hlo.lower_with_attrs("stablehlo.transpose", {"permutation": "permutation"}),
       vjp=vjp_rules.transpose, cheap=True, attributes={"permutation": INTS},
       doc="result.shape[i] = x.shape[permutation[i]]")


def _infer_slice(ops, attrs, result=None):
    x = ops[0]
    start, limit, strides = attrs["start_indices"], attrs["limit_indices"], attrs["strides"]
    check(len(start) == len(limit) == len(strides) == len(x.shape),
          f"slice: {len(start)} indices for rank {len(x.shape)}")
    shape = []
    for s, lim, st, n in zip(start, limit, strides, x.shape):
        check(0 <= s <= lim <= n and st > 0, f"slice: [{s}:{lim}:{st}] of dim {n}")
        shape.append(max(0, -(-(lim - s) // st)))
    return TensorSpec(tuple(shape), x.dtype)


define("slice", X, _infer_slice,
       hlo.lower_with_attrs("stablehlo.slice", {"start_indices": "start_indices",
                                                "limit_indices": "limit_indices",
                                                "strides": "strides"}),
       vjp=vjp_rules.slice_,
       attributes={"start_indices": INTS, "limit_indices": INTS, "strides": INTS},
       doc="stablehlo.slice with 0 <= start <= limit <= dim and positive strides")


def _infer_reverse(ops, attrs, result=None):
    x = ops[0]
    check(all(0 <= dd < len(x.shape) for dd in attrs["dims"]), f"reverse: dims {attrs['dims']}")
    return TensorSpec(tuple(x.shape), x.dtype)


define("reverse", X, _infer_reverse,
       hlo.lower_with_attrs("stablehlo.reverse", {"dims": "dimensions"}),
       vjp=vjp_rules.reverse, attributes={"dims": INTS}, doc="stablehlo.reverse along dims")


def _infer_pad(ops, attrs, result=None):
    x, value = ops
    low, high, interior = attrs["low"], attrs["high"], attrs["interior"]
    check(tuple(value.shape) == () and value.dtype == x.dtype,
          "pad: value must be 0-d, same dtype")
    check(len(low) == len(high) == len(interior) == len(x.shape),
          f"pad: padding of {len(low)} dims for rank {len(x.shape)}")
    shape = [lo + hi + n + max(n - 1, 0) * it
             for n, lo, hi, it in zip(x.shape, low, high, interior)]
    check(all(s >= 0 for s in shape), f"pad: negative result shape {shape}")
    return TensorSpec(tuple(shape), x.dtype)


define("pad", ("x", "padding_value"), _infer_pad,
       hlo.lower_with_attrs("stablehlo.pad", {"low": "edge_padding_low",
                                              "high": "edge_padding_high",
                                              "interior": "interior_padding"}),
       vjp=vjp_rules.pad, attributes={"low": INTS, "high": INTS, "interior": INTS},
       doc="stablehlo.pad with a 0-d padding value; negative low/high crop")


def _infer_concatenate(ops, attrs, result=None):
    dim = attrs["dimension"]
    check(len(ops) > 0, "concatenate of nothing")
    x0 = ops[0]
    check(0 <= dim < len(x0.shape), f"concatenate: dim {dim} of rank {len(x0.shape)}")
    for y in ops[1:]:
        check(y.dtype == x0.dtype and len(y.shape) == len(x0.shape) and all(
            a == b for i, (a, b) in enumerate(zip(y.shape, x0.shape)) if i != dim),
            f"concatenate: {tuple(x0.shape)} vs {tuple(y.shape)} along {dim}")
    shape = list(x0.shape)
    shape[dim] = sum(y.shape[dim] for y in ops)
    return TensorSpec(tuple(shape), x0.dtype)


define("concatenate", ("inputs",), _infer_concatenate, hlo.lower_concatenate,
       vjp=vjp_rules.concatenate, variadic=True, attributes={"dimension": INT},
       doc="stablehlo.concatenate along `dimension` (operands as type runs)")


# ------------------------------------------------------------------- creation
def _infer_iota(ops, attrs, result=None):
    r = _result("iota", result)
    check(0 <= attrs["dimension"] < max(len(r.shape), 1),
          f"iota: dimension {attrs['dimension']} of rank {len(r.shape)}")
    return r


define("iota", (), _infer_iota, hlo.lower_iota, no_grad="a constant (no operands)", cheap=True,
       attributes={"dimension": INT}, doc="stablehlo.iota: element = its index along dimension")
define("full", (), lambda ops, attrs, result=None: _result("full", result), hlo.lower_full,
       no_grad="a constant (no operands)", cheap=True, attributes={"value": NUMBER},
       doc="every element equals `value` (converted to the result element type)")
# constant: literal data held in a discardable `value` dense-elements attribute: IRDL
# cannot name DenseElementsAttr
define("constant", (), lambda ops, attrs, result=None: _result("constant", result),
       hlo.lower_constant, no_grad="a constant (no operands)",
       doc="literal data (torch.tensor([...]) in a traced program)")


def _infer_rng_bits(ops, attrs, result=None):
    r = _result("rng_bits", result)
    seed, stream = ops[0], attrs["stream"]
    check(tuple(seed.shape) == () and seed.dtype == torch.int64,
          "rng_bits: seed must be 0-d int64")
    check(r.dtype in (torch.int32, torch.int64), f"rng_bits: {r.dtype} bits (int32 or int64)")
    check(0 <= stream < 1 << (64 - RNG_STREAM_SHIFT), f"rng_bits: stream {stream} out of range")
    return r


define("rng_bits", ("seed",), _infer_rng_bits, hlo.lower_rng_bits, no_grad="random bits",
       attributes={"stream": INT},
       doc="stablehlo.rng_bit_generator (THREE_FRY) with state [seed, stream << 40]")


# ----------------------------------------------------------------- reductions
def _infer_reduce(name: str):
    def infer(ops, attrs, result=None):
        x, dims = ops[0], list(attrs["dims"])
        check(dims == sorted(set(dims)) and all(0 <= dd < len(x.shape) for dd in dims),
              f"{name}: dims {dims} of rank {len(x.shape)}")
        return TensorSpec(tuple(s for i, s in enumerate(x.shape) if i not in dims), x.dtype)
    return infer


for _name, _rule in {"reduce_sum": vjp_rules.reduce_sum, "reduce_prod": vjp_rules.reduce_prod,
                     "reduce_max": vjp_rules.reduce_extreme,
                     "reduce_min": vjp_rules.reduce_extreme, "reduce_and": None,
                     "reduce_or": None}.items():
    define(_name, X, _infer_reduce(_name), hlo.lower_reduce(_name), vjp=_rule,
           no_grad=None if _rule else BOOL, attributes={"dims": INTS},
           doc="stablehlo.reduce over dims (removed from the shape)")


def _infer_argreduce(name: str):
    def infer(ops, attrs, result=None):
        x, dim = ops[0], attrs["dim"]
        check(0 <= dim < len(x.shape), f"{name}: dim {dim} of rank {len(x.shape)}")
        return TensorSpec(tuple(s for i, s in enumerate(x.shape) if i != dim), torch.int64)
    return infer


for _name in ("argmax", "argmin"):
    define(_name, X, _infer_argreduce(_name), hlo.lower_argreduce(_name),
           no_grad="integer indices", attributes={"dim": INT},
           doc="int64 index of the first extreme element over dim (NaN is extreme)")


def _infer_along_dim(name: str):
    def infer(ops, attrs, result=None):
        x, dim = ops[0], attrs["dim"]
        check(0 <= dim < len(x.shape), f"{name}: dim {dim} of rank {len(x.shape)}")
        return TensorSpec(tuple(x.shape), x.dtype)
    return infer


define("cumsum", X, _infer_along_dim("cumsum"), hlo.lower_cumsum, vjp=vjp_rules.cumsum,
       attributes={"dim": INT}, doc="inclusive prefix sum along dim (stablehlo.reduce_window)")
for _name, _rule in {"cumprod": vjp_rules.cumprod, "cummax": vjp_rules.cum_extreme,
                     "cummin": vjp_rules.cum_extreme,
                     "logcumsumexp": vjp_rules.logcumsumexp}.items():
    define(_name, X, _infer_along_dim(_name), hlo.lower_cumulative(_name), vjp=_rule,
           attributes={"dim": INT}, doc="inclusive scan along dim (stablehlo.reduce_window)")


# ------------------------------------------------------------ linear algebra
def _infer_dot_general(ops, attrs, result=None):
    lhs, rhs = ops
    lb, rb = attrs["lhs_batching_dimensions"], attrs["rhs_batching_dimensions"]
    lc, rc = attrs["lhs_contracting_dimensions"], attrs["rhs_contracting_dimensions"]
    check(lhs.dtype == rhs.dtype, f"dot_general: dtypes {lhs.dtype} vs {rhs.dtype}")
    check(len(lb) == len(rb) and len(lc) == len(rc), "dot_general: dimension lists differ")
    for a, b in zip(lb, rb):
        check(lhs.shape[a] == rhs.shape[b], "dot_general: batch dims differ")
    for a, b in zip(lc, rc):
        check(lhs.shape[a] == rhs.shape[b],
              f"dot_general: contracting dims differ: {tuple(lhs.shape)} @ {tuple(rhs.shape)}")
    shape = [lhs.shape[dd] for dd in lb]
    shape += [s for i, s in enumerate(lhs.shape) if i not in lb and i not in lc]
    shape += [s for i, s in enumerate(rhs.shape) if i not in rb and i not in rc]
    return TensorSpec(tuple(shape), lhs.dtype)


define("dot_general", LR, _infer_dot_general, hlo.lower_dot_general,
       vjp=vjp_rules.dot_general,
       attributes={"lhs_batching_dimensions": INTS, "rhs_batching_dimensions": INTS,
                   "lhs_contracting_dimensions": INTS, "rhs_contracting_dimensions": INTS},
       doc="stablehlo.dot_general: result = batch dims, lhs free dims, rhs free dims")


def _infer_convolution(ops, attrs, result=None):
    lhs, rhs = ops
    strides, flat = attrs["window_strides"], attrs["padding"]
    ld, rd, groups = attrs["lhs_dilation"], attrs["rhs_dilation"], attrs["feature_group_count"]
    batch_groups = attrs["batch_group_count"]
    check(lhs.dtype == rhs.dtype, "convolution: dtypes differ")
    n = len(lhs.shape) - 2
    check(n >= 0 and len(rhs.shape) == n + 2 and len(strides) == len(ld) == len(rd) == n
          and len(flat) == 2 * n, f"convolution: {tuple(lhs.shape)} * {tuple(rhs.shape)}")
    # StableHLO's constraints (spec "convolution", C10-C13, C18)
    check(groups >= 1 and batch_groups >= 1 and (groups == 1 or batch_groups == 1),
          f"convolution: feature_group_count {groups}, batch_group_count {batch_groups}")
    check(lhs.shape[1] == rhs.shape[1] * groups and rhs.shape[0] % groups == 0,
          f"convolution: {tuple(lhs.shape)} * {tuple(rhs.shape)}, {groups} feature groups")
    check(lhs.shape[0] % batch_groups == 0 and rhs.shape[0] % batch_groups == 0,
          f"convolution: {tuple(lhs.shape)} * {tuple(rhs.shape)}, {batch_groups} batch groups")
    out = [lhs.shape[0] // batch_groups, rhs.shape[0]]
    for i, m in enumerate(lhs.shape[2:]):
        m_d = (m - 1) * ld[i] + 1 if m else 0
        k_d = (rhs.shape[2 + i] - 1) * rd[i] + 1
        out.append(max(0, (m_d + flat[2 * i] + flat[2 * i + 1] - k_d) // strides[i] + 1))
    return TensorSpec(tuple(out), lhs.dtype)


define("convolution", LR, _infer_convolution, hlo.lower_convolution,
       vjp=vjp_rules.convolution,
       attributes={"window_strides": INTS, "padding": INTS, "lhs_dilation": INTS,
                   "rhs_dilation": INTS, "feature_group_count": INT,
                   "batch_group_count": INT},
       doc="stablehlo.convolution, lhs (N, C, *spatial), rhs (O, C/feature_groups, *kernel) "
           "-> (N/batch_groups, O, *out)")


def _infer_cholesky(ops, attrs, result=None):
    x = ops[0]
    check(len(x.shape) >= 2 and x.shape[-1] == x.shape[-2], f"cholesky of {tuple(x.shape)}")
    return TensorSpec(tuple(x.shape), x.dtype)


define("cholesky", X, _infer_cholesky, hlo.lower_cholesky, vjp=vjp_rules.cholesky,
       attributes={"lower": INT},
       doc="stablehlo.cholesky of (..., n, n): the other triangle is unspecified")


def _infer_triangular_solve(ops, attrs, result=None):
    a, b = ops
    check(a.dtype == b.dtype and len(a.shape) >= 2 and len(b.shape) >= 2
          and tuple(a.shape[:-2]) == tuple(b.shape[:-2]) and a.shape[-1] == a.shape[-2],
          "triangular_solve operands")
    n = b.shape[-2] if attrs["left_side"] else b.shape[-1]
    check(n == a.shape[-1], f"triangular_solve: a {tuple(a.shape)}, b {tuple(b.shape)}")
    return TensorSpec(tuple(b.shape), b.dtype)


define("triangular_solve", ("a", "b"), _infer_triangular_solve, hlo.lower_triangular_solve,
       vjp=vjp_rules.triangular_solve,
       attributes={"left_side": INT, "lower": INT, "unit_diagonal": INT, "transpose_a": INT},
       doc="stablehlo.triangular_solve: op(a) x = b (left) or x op(a) = b")


# ------------------------------------------------------------------ indexing
def _integer(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _infer_take(ops, attrs, result=None):
    x, indices = ops
    dim = attrs["dim"]
    check(_integer(indices.dtype), "take: indices must be integers")
    check(0 <= dim < len(x.shape), f"take: dim {dim} of rank {len(x.shape)}")
    return TensorSpec(tuple(x.shape[:dim]) + tuple(indices.shape) + tuple(x.shape[dim + 1:]),
                      x.dtype)


define("take", ("x", "indices"), _infer_take, hlo.lower_take, vjp=vjp_rules.take,
       attributes={"dim": INT},
       doc="torch.index_select: x.shape[:dim] + indices.shape + x.shape[dim+1:]")


def _infer_take_along(ops, attrs, result=None):
    x, indices = ops
    check(len(indices.shape) == len(x.shape) and _integer(indices.dtype),
          "take_along: ranks differ")
    return TensorSpec(tuple(indices.shape), x.dtype)


define("take_along", ("x", "indices"), _infer_take_along, hlo.lower_take_along,
       vjp=vjp_rules.take_along, attributes={"dim": INT},
       doc="torch.gather along dim: a result of the indices' shape")


def _infer_index_add(ops, attrs, result=None):
    x, indices, src = ops
    dim = attrs["dim"]
    want = tuple(x.shape[:dim]) + tuple(indices.shape) + tuple(x.shape[dim + 1:])
    check(tuple(src.shape) == want,
          f"index_add: src {tuple(src.shape)} for x {tuple(x.shape)}, indices "
          f"{tuple(indices.shape)}")
    check(src.dtype == x.dtype, "index_add: dtypes differ")
    return TensorSpec(tuple(x.shape), x.dtype)


define("index_add", ("x", "indices", "src"), _infer_index_add, hlo.lower_index_add,
       vjp=vjp_rules.index_add, attributes={"dim": INT},
       doc="torch.index_add: x with src's slices added at indices along dim")


def _infer_take_along_add(ops, attrs, result=None):
    x, indices, src = ops
    check(tuple(indices.shape) == tuple(src.shape) and len(src.shape) == len(x.shape),
          "take_along_add: indices and src must match, with x's rank")
    check(src.dtype == x.dtype, "take_along_add: dtypes differ")
    return TensorSpec(tuple(x.shape), x.dtype)


define("take_along_add", ("x", "indices", "src"), _infer_take_along_add,
       hlo.lower_take_along_add, vjp=vjp_rules.take_along_add, attributes={"dim": INT},
       doc="torch.scatter_add: indices and src of one shape")


def _infer_scatter(ops, attrs, result=None):
    x, indices, updates = ops
    kind = attrs["kind"]
    check(kind in ("set", "add", "mul", "max", "min"), f"scatter kind {kind}")
    check(indices.dtype == torch.int64 and len(indices.shape) >= 1, "scatter: int64 indices")
    k = indices.shape[-1]
    check(tuple(updates.shape) == tuple(indices.shape[:-1]) + tuple(x.shape[k:])
          and updates.dtype == x.dtype,
          f"scatter: updates {tuple(updates.shape)}/{updates.dtype} for x "
          f"{tuple(x.shape)}/{x.dtype}, indices {tuple(indices.shape)}")
    return TensorSpec(tuple(x.shape), x.dtype)


define("scatter", ("x", "indices", "updates"), _infer_scatter, hlo.lower_scatter,
       vjp=vjp_rules.scatter, attributes={"kind": STR},
       doc="stablehlo.scatter: indices B + (k,) address x's first k dims; updates combine "
           "by kind (set, add, mul, max, min)")


def _infer_argsort(ops, attrs, result=None):
    x, dim = ops[0], attrs["dim"]
    check(0 <= dim < max(len(x.shape), 1), f"argsort: dim {dim} of rank {len(x.shape)}")
    return TensorSpec(tuple(x.shape), torch.int64)


define("argsort", X, _infer_argsort, hlo.lower_argsort, no_grad="integer indices",
       attributes={"dim": INT, "descending": INT},
       doc="stable argsort along dim, NaN largest (stablehlo.sort), int64")


def _infer_reduce_window(ops, attrs, result=None):
    x, init = ops
    kind, window = attrs["kind"], attrs["window_dimensions"]
    strides, flat = attrs["window_strides"], attrs["padding"]
    check(kind in ("sum", "max", "min") and tuple(init.shape) == () and init.dtype == x.dtype,
          "reduce_window: kind/init")
    check(len(window) == len(strides) == len(x.shape) and len(flat) == 2 * len(x.shape),
          f"reduce_window: window of {len(window)} dims for rank {len(x.shape)}")
    out = [(n + flat[2 * i] + flat[2 * i + 1] - w) // s + 1
           for i, (n, w, s) in enumerate(zip(x.shape, window, strides))]
    return TensorSpec(tuple(out), x.dtype)


define("reduce_window", ("x", "init"), _infer_reduce_window, hlo.lower_reduce_window,
       vjp=vjp_rules.reduce_window,
       attributes={"kind": STR, "window_dimensions": INTS, "window_strides": INTS,
                   "padding": INTS},
       doc="stablehlo.reduce_window with body kind (sum, max, min) and a 0-d init")


def _infer_dynamic_index(ops, attrs, result=None):
    x, index = ops
    dim = attrs["dim"]
    check(0 <= dim < len(x.shape), f"dynamic_index: dim {dim} of a {len(x.shape)}-d tensor")
    check(tuple(index.shape) == () and index.dtype == torch.int64,
          "dynamic_index: 0-d i64 index")
    return TensorSpec(tuple(x.shape[:dim]) + tuple(x.shape[dim + 1:]), x.dtype)


define("dynamic_index", ("x", "index"), _infer_dynamic_index, hlo.lower_dynamic_index,
       vjp=vjp_rules.dynamic_index, attributes={"dim": INT},
       doc="x.select(dim, index), index clamped (stablehlo.dynamic_slice + reshape)")


def _infer_dynamic_update_index(ops, attrs, result=None):
    x, update, index = ops
    dim = attrs["dim"]
    check(0 <= dim < len(x.shape),
          f"dynamic_update_index: dim {dim} of a {len(x.shape)}-d tensor")
    check(tuple(update.shape) == tuple(x.shape[:dim]) + tuple(x.shape[dim + 1:]) and
          update.dtype == x.dtype,
          f"dynamic_update_index: update {tuple(update.shape)}/{update.dtype} into "
          f"{tuple(x.shape)}/{x.dtype} at dim {dim}")
    check(tuple(index.shape) == () and index.dtype == torch.int64,
          "dynamic_update_index: 0-d i64 index")
    return TensorSpec(tuple(x.shape), x.dtype)


define("dynamic_update_index", ("x", "update", "index"), _infer_dynamic_update_index,
       hlo.lower_dynamic_update_index, vjp=vjp_rules.dynamic_update_index,
       attributes={"dim": INT},
       doc="x with x.select(dim, index) = update (stablehlo.dynamic_update_slice)")


# ------------------------------------------------------------------- sharding
def _infer_sharding_constraint(ops, attrs, result=None):
    x = ops[0]
    try:
        sharding.check_spec(sharding.parse_mesh(attrs["mesh"]),
                            sharding.parse_spec(attrs["spec"]), x.shape)
    except ValueError as e:
        check(False, f"sharding_constraint: {e}")
    return TensorSpec(tuple(x.shape), x.dtype)


def _sharding_constraint_vjp(op, x, y, g):
    """The cotangent gets the same sharding (jax.lax.with_sharding_constraint's
    transpose rule)."""
    from torch_mlir import ir

    return [prims.bind("sharding_constraint", (g[0],),
                       mesh=ir.StringAttr(op.attributes["mesh"]).value,
                       spec=ir.StringAttr(op.attributes["spec"]).value)]


define("sharding_constraint", X, _infer_sharding_constraint, hlo.lower_sharding_constraint,
       vjp=_sharding_constraint_vjp, attributes={"mesh": STR, "spec": STR},
       doc="x, laid out as `spec` on `mesh` (ir/sharding.py): stablehlo.custom_call "
           "@Sharding with mhlo.sharding, as jax.lax.with_sharding_constraint lowers")


# ---------------------------------------------------------------- scheduling
def _infer_after(ops, attrs, result=None):
    return TensorSpec(tuple(ops[0].shape), ops[0].dtype)


define("after", ("x", "anchor"), _infer_after, hlo.lower_after,
       vjp=lambda op, x, y, g: [g[0], None],
       doc="x's value, computed only once `anchor` is: what the ops the grad pass recomputes "
           "in a joint program read, so that XLA neither merges them with the forward's "
           "nor runs them early (hlo.lower_after)")


# cuDNN's fused attention (its own module: the custom calls and what cuDNN takes)
from thunder_mlir.ir import cudnn_attention  # noqa: E402, F401 (defines its two prims)


# ---------------------------------------------------------------------- views
UNARY_PRIMS = tuple(n for n, p in PRIMS.items() if p.elementwise and p.operands == X)
BINARY_PRIMS = tuple(n for n, p in PRIMS.items() if p.elementwise and p.operands == LR)
CHEAP = frozenset(n for n, p in PRIMS.items() if p.cheap)
