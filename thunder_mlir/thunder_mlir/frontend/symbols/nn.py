"""torch.nn.functional symbols: normalization, softmax, attention, embedding, activations.

Decompositions follow the formulas of the PyTorch documentation page of each function;
normalizations of low-precision inputs compute in float32 as torch's CPU kernels do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.symbol import Symbol
from thunder_mlir.frontend.lang import canonical_dim, expand_to, lift
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import add, mul
from thunder_mlir.frontend.symbols.linalg import matmul
from thunder_mlir.frontend.symbols.reduction import _acc_dtype


# Normalizing over one element: x - mean is 0, so the exact gradient of the input and the
# weight is 0, but ATen's CPU kernels compute it as x * rstd - mean * rstd with a fused
# multiply-add, giving the rounding error of x * rstd times rstd = 1 / sqrt(eps) (about
# 1e-4 for x of order 1) instead. No formula of prims reproduces those bits: such calls run
# on the torch fallback, whose backward is eager's.
ONE_ELEMENT_NORM = ("normalization over one element: eager's gradient is the rounding "
                    "error of its fused kernel")


def _bcast_keep(x: TensorProxy, reduced: TensorProxy, dims) -> TensorProxy:
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    return prims.broadcast_in_dim(prims.reshape(reduced, keep), x.tshape, list(range(len(x.tshape))))


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


@register("layer_norm", F.layer_norm, torch.layer_norm)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    k = len(tuple(normalized_shape))
    r = len(input.tshape)
    if tuple(input.tshape[r - k:]) != tuple(normalized_shape):
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with "
                           f"shape [*, {', '.join(map(str, normalized_shape))}], but got input "
                           f"of size{list(input.tshape)}")
    dims = list(range(r - k, r))
    acc = _acc_dtype(input.tdtype)
    x = prims.convert_element_type(input, acc)
    n = 1
    for d in dims:
        n *= input.tshape[d]
    if n == 1:
        raise Fallback(ONE_ELEMENT_NORM)
    mean = prims.elementwise("div", prims.reduce("reduce_sum", x, dims),
                             prims.full(input.tshape[:r - k], n, acc))
    c = prims.elementwise("sub", x, _bcast_keep(x, mean, dims))
    var = prims.elementwise("div", prims.reduce("reduce_sum", prims.elementwise("mul", c, c), dims),
                            prims.full(input.tshape[:r - k], n, acc))
    rstd = prims.elementwise("rsqrt", prims.elementwise(
        "add", var, prims.full(var.tshape, eps, acc)))
    out = prims.elementwise("mul", c, _bcast_keep(x, rstd, dims))
    if weight is not None:
        out = prims.elementwise("mul", out, expand_to(prims.convert_element_type(weight, acc),
                                                      out.tshape))
    if bias is not None:
        out = prims.elementwise("add", out, expand_to(prims.convert_element_type(bias, acc),
                                                      out.tshape))
    return prims.convert_element_type(out, input.tdtype)


@register("rms_norm", F.rms_norm, torch.rms_norm)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    k = len(tuple(normalized_shape))
    r = len(input.tshape)
    dims = list(range(r - k, r))
    acc = _acc_dtype(input.tdtype)
    if eps is None:  # the machine epsilon of the computation dtype (float32 for f16/bf16)
        eps = torch.finfo(acc).eps
    x = prims.convert_element_type(input, acc)
    n = 1
    for d in dims:
        n *= input.tshape[d]
    ms = prims.elementwise("div", prims.reduce("reduce_sum", prims.elementwise("mul", x, x), dims),
                           prims.full(input.tshape[:r - k], n, acc))
    rstd = prims.elementwise("rsqrt", prims.elementwise("add", ms, prims.full(ms.tshape, eps, acc)))
    out = prims.elementwise("mul", x, _bcast_keep(x, rstd, dims))
    if weight is not None:
        out = prims.elementwise("mul", out, expand_to(prims.convert_element_type(weight, acc),
                                                      out.tshape))
    return prims.convert_element_type(out, input.tdtype)


def _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps):
    """Batch norm over channel dim 1, as ATen's CPU kernel (``batch_norm_cpu``).

    ``out = x * alpha + beta`` per channel with ``alpha = invstd * weight`` and
    ``beta = bias - mean * alpha``, in float32 for 16-bit inputs. Eval: ``mean``,
    ``invstd = 1 / sqrt(var + eps)`` from the running statistics. Training: the batch's
    mean and biased variance; returns ``(out, new_running_mean, new_running_var)`` with
    ``new = momentum * batch + (1 - momentum) * running``, the variance term unbiased
    (var_sum / (n - 1)) — just ``out`` without running statistics. ``momentum`` is a number,
    or a 0-d tensor (the cumulative average's ``1 / num_batches_tracked``, see
    ``compat.py``) with which the update is computed in float64, as ATen computes it with
    a double factor. When a 16-bit input's
    parameters share its dtype, ATen keeps the batch statistics in that dtype: they are
    rounded where it rounds them (mean, the variance sum, var_sum / n, invstd)."""
    acc = _acc_dtype(input.tdtype)
    shape = input.tshape
    c = shape[1]
    x = prims.convert_element_type(input, acc)
    params = [t for t in (weight, bias, running_mean, running_var) if t is not None]
    low = input.tdtype != acc and all(t.tdtype == input.tdtype for t in params)

    def stat(v):  # a statistic as ATen stores it
        return prims.convert_element_type(prims.convert_element_type(v, input.tdtype), acc) \
            if low else v

    def vec(t, default):
        if t is None:
            return prims.full((c,), default, acc)
        return prims.convert_element_type(t, acc)

    def div(a, n):
        return prims.elementwise("div", a, prims.full(a.tshape, n, acc))

    def invstd(var):
        return prims.elementwise("div", prims.full(var.tshape, 1.0, acc), prims.elementwise(
            "sqrt", prims.elementwise("add", var, prims.full(var.tshape, eps, acc))))
    if training:
        dims = [d for d in range(len(shape)) if d != 1]
        n = math.prod(shape) // c
        mean_f = div(prims.reduce("reduce_sum", x, dims), n)
        centered = prims.elementwise("sub", x, prims.broadcast_in_dim(mean_f, shape, [1]))
        var_sum = stat(prims.reduce("reduce_sum", prims.elementwise("mul", centered, centered),
                                    dims))
        mean = stat(mean_f)
        rstd = stat(invstd(stat(div(var_sum, n))))
    else:
        mean, rstd = vec(running_mean, 0), invstd(vec(running_var, 1))
    alpha = prims.elementwise("mul", rstd, vec(weight, 1))
    beta = prims.elementwise("sub", vec(bias, 0), prims.elementwise("mul", mean, alpha))
    out = prims.elementwise("add", prims.elementwise(
        "mul", x, prims.broadcast_in_dim(alpha, shape, [1])), prims.broadcast_in_dim(beta, shape, [1]))
    out = prims.convert_element_type(out, input.tdtype)
    if not training or running_mean is None:
        return out

    def update(running, batch):
        if isinstance(momentum, TensorProxy):  # a 0-d float64 factor: ATen's double update
            f64 = torch.float64
            m = prims.broadcast_in_dim(prims.convert_element_type(momentum, f64),
                                       running.tshape, [])
            new = prims.elementwise("add", prims.elementwise(
                "mul", m, prims.convert_element_type(batch, f64)), prims.elementwise(
                "mul", prims.elementwise("sub", prims.full(running.tshape, 1, f64), m),
                prims.convert_element_type(running, f64)))
            return prims.convert_element_type(new, running.tdtype)
        r = prims.convert_element_type(running, acc)
        new = prims.elementwise("add", prims.elementwise(
            "mul", batch, prims.full(r.tshape, momentum, acc)), prims.elementwise(
            "mul", r, prims.full(r.tshape, 1 - momentum, acc)))
        return prims.convert_element_type(new, running.tdtype)
    return out, update(running_mean, mean), update(running_var, stat(div(var_sum, n - 1)))


_batch_norm_symbol = Symbol("ltorch.batch_norm", _batch_norm)


@register("batch_norm", F.batch_norm, composite=False)
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """F.batch_norm. In training mode the running statistics (when given) are updated in
    place, like eager: the composite returns their new values and the traced tensors are
    rebound to them (``write_inplace``), so program inputs (module buffers) are written back
    after the run."""
    from thunder_mlir.frontend.symbols.registry import check_writable, write_inplace

    shape = input.tshape
    if math.prod(shape) == 0:  # ATen: nothing to normalize, statistics unchanged
        return input
    if not training:
        if eps < 0:
            raise _error(ValueError, f"batch_norm eps must be non-negative, but got {eps}")
        if running_mean is None or running_var is None:
            raise _error(RuntimeError, "batch_norm: running_mean and running_var must be "
                                       "defined in evaluation mode")
        return _batch_norm_symbol(input, running_mean, running_var, weight, bias, False,
                                  momentum, eps)
    if shape[0] * math.prod(shape[2:]) == 1:  # F.batch_norm's _verify_batch_size
        raise _error(ValueError, f"Expected more than 1 value per channel when training, got "
                                 f"input size {list(shape)}")
    if eps <= 0:
        raise _error(ValueError, f"batch_norm eps must be positive during training, but got "
                                 f"{eps}")
    if momentum is None:
        raise Fallback("batch_norm with momentum=None (a cumulative average needs the batch "
                       "count as a number)")
    if (running_mean is None) != (running_var is None):
        raise Fallback("batch_norm with only one of running_mean and running_var")
    if running_mean is None:
        return _batch_norm_symbol(input, None, None, weight, bias, True, momentum, eps)
    check_writable(running_mean, "batch_norm (running_mean update)")
    check_writable(running_var, "batch_norm (running_var update)")
    out, new_mean, new_var = _batch_norm_symbol(input, running_mean, running_var, weight, bias,
                                                True, momentum, eps)
    write_inplace(running_mean, new_mean, "batch_norm (running_mean update)")
    write_inplace(running_var, new_var, "batch_norm (running_var update)")
    return out


def _error(cls, msg: str):
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    return cls(f"{describe_frame(user_frame())}\n  {msg}")


@register("embedding", F.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise Fallback("embedding with max_norm renormalizes the weight in place")
    if scale_grad_by_freq:
        raise Fallback("embedding with scale_grad_by_freq (its gradient counts indices)")
    return prims.take(weight, input, 0)


@register("embedding_aten", torch.embedding)
def embedding_aten(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq:
        raise Fallback("embedding with scale_grad_by_freq (its gradient counts indices)")
    return prims.take(weight, indices, 0)


def attention_probs(q: TensorProxy, k: TensorProxy, attn_mask, is_causal: bool,
                    scale_factor: float) -> TensorProxy:
    """softmax(q k^T * scale + mask) of scaled_dot_product_attention (PyTorch's reference
    formula in the F.scaled_dot_product_attention docs), shape broadcast(..., L, S); fully
    masked rows give zeros, as torch's math backend ("safe softmax")."""
    L, S = q.tshape[-2], k.tshape[-2]
    kt = prims.transpose(k, list(range(len(k.tshape) - 2)) + [len(k.tshape) - 1, len(k.tshape) - 2])
    scores = matmul(q, kt)
    scores = prims.elementwise("mul", scores, prims.full(scores.tshape, scale_factor, scores.tdtype))
    if is_causal:
        row = prims.iota((L, S), torch.int64, 0)
        col = prims.iota((L, S), torch.int64, 1)
        keep = expand_to(prims.elementwise("le", col, row), scores.tshape)
        scores = prims.where(keep, scores, prims.full(scores.tshape, -math.inf, scores.tdtype))
    if attn_mask is not None:
        shape = tuple(torch.broadcast_shapes(scores.tshape, attn_mask.tshape))
        scores = expand_to(scores, shape)
        if attn_mask.tdtype is torch.bool:
            scores = prims.where(expand_to(attn_mask, shape), scores,
                                 prims.full(shape, -math.inf, scores.tdtype))
        else:
            scores = prims.elementwise("add", scores, lift(attn_mask, scores.tdtype, shape))
    if not (is_causal or attn_mask is not None):
        return _softmax(scores, -1, None, log=False)
    # fully masked rows are zeroed before the softmax too (the "double where"): a row of
    # -inf would compute 0 / 0 = NaN there, and the backward of that discarded branch
    # (0 * NaN) would make the row's gradients NaN where eager's are 0
    last = len(scores.tshape) - 1
    neg_inf = prims.full(scores.tshape, -math.inf, scores.tdtype)
    masked = _bcast_keep(scores, prims.reduce(
        "reduce_and", prims.elementwise("eq", scores, neg_inf), [last]), [last])
    scores = prims.where(masked, prims.full(scores.tshape, 0, scores.tdtype), scores)
    attn = _softmax(scores, -1, None, log=False)
    return prims.where(masked, prims.full(attn.tshape, 0, attn.tdtype), attn)


@register("scaled_dot_product_attention", F.scaled_dot_product_attention)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    q, k, v = query, key, value
    L, S, E = q.tshape[-2], k.tshape[-2], q.tshape[-1]
    if enable_gqa and len(q.tshape) >= 3 and q.tshape[-3] != k.tshape[-3]:
        from thunder_mlir.frontend.symbols.shape import reshape
        rep = q.tshape[-3] // k.tshape[-3]

        def _rep(t):
            b = t.tshape[:-3]
            h, s, e = t.tshape[-3:]
            t5 = prims.broadcast_in_dim(t, b + (h, rep, s, e), [*range(len(b)), len(b), len(b) + 2,
                                                               len(b) + 3])
            return reshape(t5, b + (h * rep, s, e))
        k, v = _rep(k), _rep(v)
    scale_factor = 1.0 / math.sqrt(E) if scale is None else scale
    # low-precision inputs compute in float32 and round once, as torch's CPU kernels (and
    # flash attention's fp32 accumulation) do
    out_dtype = q.tdtype
    acc = _acc_dtype(out_dtype)
    q, k, v = (prims.convert_element_type(t, acc) for t in (q, k, v))
    attn = attention_probs(q, k, attn_mask, is_causal, scale_factor)
    if dropout_p > 0:
        from thunder_mlir.frontend.symbols.random import attention_dropout

        attn = attention_dropout(attn, dropout_p)
    return prims.convert_element_type(matmul(attn, v), out_dtype)


# ---------------------------------------------------------------- activations
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
    from thunder_mlir.frontend.symbols.elementwise import clamp
    # the bounds take the input's dtype (integer inputs stay integer, as in torch)
    return prims.convert_element_type(clamp(input, min_val, max_val), input.tdtype)


@register("relu6", F.relu6)
def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0)


@register("hardsigmoid", F.hardsigmoid)
def hardsigmoid(input, inplace=False):
    from thunder_mlir.frontend.symbols.elementwise import clamp
    return prims.elementwise("div", clamp(add(input, 3.0), 0.0, 6.0),
                             prims.full(input.tshape, 6.0, input.tdtype))


@register("hardswish", F.hardswish)
def hardswish(input, inplace=False):
    return prims.elementwise("mul", input, hardsigmoid(input))


@register("softsign", F.softsign)
def softsign(input):
    from thunder_mlir.frontend.symbols.elementwise import abs, div
    return div(input, add(abs(input), 1))  # true division: integer inputs give floats


@register("logsigmoid", F.logsigmoid)
def logsigmoid(input):
    return prims.elementwise("neg", softplus(prims.elementwise("neg", input)))


@register("glu", F.glu, opmath=True)
def glu(input, dim=-1):
    from thunder_mlir.frontend.symbols.shape import chunk
    a, b = chunk(input, 2, dim)
    return prims.elementwise("mul", a, prims.elementwise("logistic", b))


@register("normalize", F.normalize)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    from thunder_mlir.frontend.symbols.elementwise import clamp
    from thunder_mlir.frontend.symbols.reduction import vector_norm
    n = vector_norm(input, p, dim, True)
    return prims.elementwise("div", input, expand_to(clamp(n, min=eps), input.tshape))


@register("mse_loss", F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    from thunder_mlir.frontend.symbols.elementwise import sub
    from thunder_mlir.frontend.symbols.reduction import mean, sum
    d = sub(input, target)
    sq = prims.elementwise("mul", d, d)
    if reduction == "none":
        return sq
    return mean(sq) if reduction == "mean" else sum(sq)


