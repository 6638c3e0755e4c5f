"""Activation functions: relu and its family, gelu, silu, softplus, the shrink and threshold
functions, prelu/rrelu, glu, and softmax/log_softmax/softmin.

Decompositions follow the formulas of the PyTorch documentation page of each function.
"""

from __future__ import annotations
import math
import torch
import torch.nn.functional as F
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import add, mul
from thunder_mlir.frontend.symbols.reduction import _acc_dtype
from thunder_mlir.frontend.symbols.elementwise import clamp, div, neg, sub, where
from thunder_mlir.frontend.symbols.reduction import sum as rsum
from thunder_mlir.frontend.symbols.reduction import _bcast_keep
from thunder_mlir.frontend.lang import full_like


def _softmax(x, dim, dtype, log: bool):
    if dtype is not None:
        x = prims.convert_element_type(x, dtype)
    elif not x.tdtype.is_floating_point:
        raise RuntimeError(f"softmax not implemented for '{x.tdtype}'")
    out_dtype = x.tdtype
    x = prims.convert_element_type(x, _acc_dtype(out_dtype))
    if len(x.tshape) == 0:
        return prims.full((), 0.0 if log else 1.0, out_dtype)
    d = canonical_dim(dim, len(x.tshape))
    m = prims.reduce("reduce_max", x, [d])
    # rows that are all -inf: use 0 as the shift so the result is nan, as in torch (a row
    # holding +inf keeps its shift: inf - inf is nan, as in torch)
    neg_inf = prims.full(m.tshape, -math.inf, x.tdtype)
    m = prims.where(prims.elementwise("eq", m, neg_inf), prims.full(m.tshape, 0.0, x.tdtype), m)
    shifted = prims.elementwise("sub", x, _bcast_keep(x, m, [d]))
    e = prims.elementwise("exp", shifted)
    s = prims.reduce("reduce_sum", e, [d])
    if log:
        out = prims.elementwise("sub", shifted, _bcast_keep(x, prims.elementwise("log", s), [d]))
    else:
        out = prims.elementwise("div", e, _bcast_keep(x, s, [d]))
    return prims.convert_element_type(out, out_dtype)


def _dim_dtype(dim, _stacklevel, dtype):
    if isinstance(_stacklevel, torch.dtype):
        dtype = _stacklevel
    if dim is None:
        raise NotImplementedError("softmax with dim=None (implicit dim) is deprecated in torch; "
                                  "pass dim explicitly")
    return dim, dtype


@register("softmax", F.softmax, torch.softmax, T.softmax, torch.special.softmax)
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    dim, dtype = _dim_dtype(dim, _stacklevel, dtype)
    return _softmax(input, dim, dtype, log=False)


@register("log_softmax", F.log_softmax, torch.log_softmax, T.log_softmax,
          torch.special.log_softmax, opmath=True)
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    dim, dtype = _dim_dtype(dim, _stacklevel, dtype)
    return _softmax(input, dim, dtype, log=True)


def _zero(x):
    return prims.full(x.tshape, 0, x.tdtype)


@register("relu", F.relu, torch.relu, T.relu)
def relu(input, inplace=False):
    # max(x, 0) with NaN propagating, as torch's relu (clamp_min) does
    return prims.where(prims.elementwise("lt", input, _zero(input)), _zero(input), input)


@register("gelu", F.gelu)
def gelu(input, approximate="none"):
    x = input
    acc = _acc_dtype(x.tdtype)
    x = prims.convert_element_type(x, acc)

    def c(v):
        return prims.full(x.tshape, v, acc)
    if approximate == "tanh":
        inner = prims.elementwise("mul", c(math.sqrt(2 / math.pi)), prims.elementwise(
            "add", x, prims.elementwise("mul", c(0.044715), prims.elementwise(
                "mul", x, prims.elementwise("mul", x, x)))))
        out = prims.elementwise("mul", prims.elementwise("mul", c(0.5), x), prims.elementwise(
            "add", c(1.0), prims.elementwise("tanh", inner)))
    elif approximate == "none":
        cdf = prims.elementwise("mul", c(0.5), prims.elementwise("add", c(1.0), prims.elementwise(
            "erf", prims.elementwise("mul", x, c(1 / math.sqrt(2))))))
        out = prims.elementwise("mul", x, cdf)
    else:
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    return prims.convert_element_type(out, input.tdtype)


@register("silu", F.silu)
def silu(input, inplace=False):
    return prims.elementwise("mul", input, prims.elementwise("logistic", input))


@register("softplus", F.softplus)
def softplus(input, beta=1.0, threshold=20.0):
    bx = mul(input, beta)
    soft = prims.elementwise("div", prims.elementwise("log1p", prims.elementwise("exp", bx)),
                             prims.full(input.tshape, beta, input.tdtype))
    return prims.where(prims.elementwise("gt", bx, prims.full(input.tshape, threshold,
                                                              input.tdtype)), input, soft)


@register("mish", F.mish)
def mish(input, inplace=False):
    return prims.elementwise("mul", input, prims.elementwise("tanh", softplus(input)))


@register("leaky_relu", F.leaky_relu)
def leaky_relu(input, negative_slope=0.01, inplace=False):
    neg = prims.elementwise("mul", input, prims.full(input.tshape, negative_slope, input.tdtype))
    return prims.where(prims.elementwise("gt", input, _zero(input)), input, neg)


@register("elu", F.elu)
def elu(input, alpha=1.0, inplace=False):
    neg = prims.elementwise("mul", prims.full(input.tshape, alpha, input.tdtype),
                            prims.elementwise("expm1", input))
    return prims.where(prims.elementwise("gt", input, _zero(input)), input, neg)


@register("selu", F.selu, torch.selu)
def selu(input, inplace=False):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return mul(elu(input, alpha), scale)


@register("celu", F.celu, torch.celu)
def celu(input, alpha=1.0, inplace=False):
    neg = prims.elementwise("mul", prims.full(input.tshape, alpha, input.tdtype),
                            prims.elementwise("expm1", prims.elementwise(
                                "div", input, prims.full(input.tshape, alpha, input.tdtype))))
    return prims.where(prims.elementwise("gt", input, _zero(input)), input, neg)


@register("hardtanh", F.hardtanh)
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    # the bounds take the input's dtype (integer inputs stay integer, as in torch)
    return prims.convert_element_type(clamp(input, min_val, max_val), input.tdtype)


@register("relu6", F.relu6)
def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0)


@register("hardsigmoid", F.hardsigmoid)
def hardsigmoid(input, inplace=False):
    return prims.elementwise("div", clamp(add(input, 3.0), 0.0, 6.0),
                             prims.full(input.tshape, 6.0, input.tdtype))


@register("hardswish", F.hardswish)
def hardswish(input, inplace=False):
    return prims.elementwise("mul", input, hardsigmoid(input))


@register("softsign", F.softsign)
def softsign(input):
    from thunder_mlir.frontend.symbols.elementwise import abs
    return div(input, add(abs(input), 1))  # true division: integer inputs give floats


@register("logsigmoid", F.logsigmoid)
def logsigmoid(input):
    return prims.elementwise("neg", softplus(prims.elementwise("neg", input)))


@register("glu", F.glu, opmath=True)
def glu(input, dim=-1):
    from thunder_mlir.frontend.symbols.shape import chunk
    a, b = chunk(input, 2, dim)
    return prims.elementwise("mul", a, prims.elementwise("logistic", b))


@register("softmin", F.softmin)
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-input, dim, dtype): negated in the input's dtype first, as F.softmin does
    (an unsigned input wraps)."""
    return softmax(neg(input), dim, dtype=dtype)


@register("tanhshrink", F.tanhshrink)
def tanhshrink(input):
    return sub(input, torch.tanh(input))


@register("softshrink", F.softshrink)
def softshrink(input, lambd=0.5):
    z = full_like(input, 0)
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, z))


@register("hardshrink", F.hardshrink)
def hardshrink(input, lambd=0.5):
    keep = prims.elementwise("bitwise_or", (input > lambd), (input < -lambd))
    return where(keep, input, full_like(input, 0))


@register("threshold", F.threshold, torch.threshold)
def threshold(input, threshold, value, inplace=False):
    return where(input <= threshold, prims.full(input.tshape, value, input.tdtype), input)


@register("prelu", F.prelu, torch.prelu)
def prelu(input, weight):
    w = weight
    if len(w.tshape) == 1 and w.tshape[0] != 1 and len(input.tshape) >= 2:
        w = prims.broadcast_in_dim(w, input.tshape, [1])
    else:
        w = expand_to(prims.reshape(w, ()) if w.tshape == (1,) else w, input.tshape)
    w = prims.convert_element_type(w, input.tdtype)
    return where(input > 0, input, prims.elementwise("mul", w, input))


@register("rrelu", F.rrelu, torch.rrelu)
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    if training:
        from thunder_mlir.frontend.symbols.random import rrelu_training

        return rrelu_training(input, lower, upper)
    return leaky_relu(input, (lower + upper) / 2)


@register("safe_softmax", torch.ops.aten._safe_softmax.default)
def safe_softmax(input, dim, dtype=None):
    """softmax whose fully -inf rows give 0 instead of NaN (``aten._safe_softmax``, what
    attention uses for padded rows).

    The fully masked rows are replaced by zeros *before* the softmax as well as after it
    (the "double where"): otherwise those rows compute 0 / 0 = NaN in the softmax, and the
    backward of the discarded NaN branch (0 * NaN) turns the rows' gradients into NaN,
    where eager's gradient (``_softmax_backward_data`` of the zero result) is 0."""
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
