"""Normalization: layer/rms/batch/group/instance/local-response norm, ``F.normalize`` and
``torch.renorm``, with ATen's ``native_*`` forms.

Low-precision inputs compute in float32 as torch's CPU kernels do.
"""

from __future__ import annotations
import math
import torch
import torch.nn.functional as F
from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.symbol import Symbol
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import add, mul
from thunder_mlir.frontend.symbols.reduction import _acc_dtype
from thunder_mlir.frontend.symbols.elementwise import clamp, div, sub, where
from thunder_mlir.frontend.symbols.reduction import mean as rmean, sum as rsum, vector_norm
from thunder_mlir.frontend.symbols.reduction import _bcast_keep
from thunder_mlir.frontend.locations import user_error


# Normalizing over one element: x - mean is 0, so the exact gradient of the input and the
# weight is 0, but ATen's CPU kernels compute it as x * rstd - mean * rstd with a fused
# multiply-add, giving the rounding error of x * rstd times rstd = 1 / sqrt(eps) (about
# 1e-4 for x of order 1) instead. No formula of prims reproduces those bits: such calls run
# on the torch fallback, whose backward is eager's.
ONE_ELEMENT_NORM = ("normalization over one element: eager's gradient is the rounding "
                    "error of its fused kernel")


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


@register("batch_norm", F.batch_norm, composite=False, tensor_scalars=("momentum",))
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """F.batch_norm. In training mode the running statistics (when given) are updated in
    place, like eager: the composite returns their new values and the traced tensors are
    rebound to them (``write_inplace``), so program inputs (module buffers) are written back
    after the run."""
    from thunder_mlir.frontend.functionalization import write_inplace

    shape = input.tshape
    if math.prod(shape) == 0:  # ATen: nothing to normalize, statistics unchanged
        return input
    if not training:
        if eps < 0:
            raise user_error(ValueError, f"batch_norm eps must be non-negative, but got {eps}")
        if running_mean is None or running_var is None:
            raise user_error(RuntimeError, "batch_norm: running_mean and running_var must be "
                                       "defined in evaluation mode")
        return _batch_norm_symbol(input, running_mean, running_var, weight, bias, False,
                                  momentum, eps)
    if shape[0] * math.prod(shape[2:]) == 1:  # F.batch_norm's _verify_batch_size
        raise user_error(ValueError, f"Expected more than 1 value per channel when training, got "
                                 f"input size {list(shape)}")
    if eps <= 0:
        raise user_error(ValueError, f"batch_norm eps must be positive during training, but got "
                                 f"{eps}")
    if momentum is None:
        raise Fallback("batch_norm with momentum=None (a cumulative average needs the batch "
                       "count as a number)")
    if (running_mean is None) != (running_var is None):
        raise Fallback("batch_norm with only one of running_mean and running_var")
    if running_mean is None:
        return _batch_norm_symbol(input, None, None, weight, bias, True, momentum, eps)
    out, new_mean, new_var = _batch_norm_symbol(input, running_mean, running_var, weight, bias,
                                                True, momentum, eps)
    write_inplace(running_mean, new_mean, "batch_norm (running_mean update)")
    write_inplace(running_var, new_var, "batch_norm (running_var update)")
    return out


@register("normalize", F.normalize)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    from thunder_mlir.frontend.symbols.reduction import vector_norm
    n = vector_norm(input, p, dim, True)
    return prims.elementwise("div", input, expand_to(clamp(n, min=eps), input.tshape))


def _normalize(x, dims, eps):
    m = rmean(x, dims, True)
    c = sub(x, m)
    v = rmean(mul(c, c), dims, True)
    return mul(c, torch.rsqrt(add(v, eps)))


@register("group_norm", F.group_norm, torch.group_norm)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    from thunder_mlir.frontend.symbols.reduction import _acc_dtype
    n, c = input.tshape[:2]
    group_size = math.prod(input.tshape) // max(n * num_groups, 1)
    if group_size == 1:
        raise Fallback(ONE_ELEMENT_NORM)
    x = prims.convert_element_type(input, _acc_dtype(input.tdtype))
    g = prims.reshape(x, (n, num_groups, group_size))
    out = prims.reshape(_normalize(g, [2], eps), input.tshape)
    if weight is not None:
        out = mul(out, prims.broadcast_in_dim(prims.convert_element_type(weight, out.tdtype),
                                              out.tshape, [1]))
    if bias is not None:
        out = add(out, prims.broadcast_in_dim(prims.convert_element_type(bias, out.tdtype),
                                              out.tshape, [1]))
    return prims.convert_element_type(out, input.tdtype)


@register("instance_norm", F.instance_norm, composite=False)
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """F.instance_norm. With running statistics, as ATen's ``instance_norm``
    (Normalization.cpp): batch norm of the input viewed as (1, N * C, *) with the
    statistics, weight and bias repeated N times — batch statistics in training
    (``use_input_stats``), the running ones otherwise —, then each running statistic is
    set to the mean over N of its (updated) copies, in place."""
    from thunder_mlir.frontend.functionalization import write_inplace

    shape = input.tshape
    if use_input_stats and len(shape) >= 2 and math.prod(shape[2:]) == 1:  # _verify_spatial_size

        raise user_error(ValueError, f"Expected more than 1 spatial element when training, got "
                                 f"input size {list(shape)}")
    if use_input_stats and running_mean is None and running_var is None:
        out = _normalize(input, list(range(2, len(input.tshape))), eps)
        if weight is not None:
            out = mul(out, prims.broadcast_in_dim(weight, out.tshape, [1]))
        if bias is not None:
            out = add(out, prims.broadcast_in_dim(bias, out.tshape, [1]))
        return out
    if running_mean is None or running_var is None or momentum is None or \
            len(shape) < 2 or math.prod(shape) == 0:
        raise Fallback("instance_norm with one running statistic, without momentum or empty")
    if input.tdtype in (torch.float16, torch.bfloat16):
        # ATen rounds this path's 16-bit statistics where batch_norm's emulation does not
        # (1-3 ulps off on the OpInfo sample)
        raise Fallback("16-bit instance_norm with running statistics")

    n, c = shape[:2]

    def repeated(t):
        return None if t is None else prims.reshape(
            prims.broadcast_in_dim(t, (n, c), [1]), (n * c,))
    x = prims.reshape(input, (1, n * c) + tuple(shape[2:]))
    params = [repeated(t) for t in (running_mean, running_var, weight, bias)]
    if use_input_stats:
        out, new_mean, new_var = _batch_norm_symbol(x, *params, True, momentum, eps)
    else:
        out = _batch_norm_symbol(x, *params, False, momentum, eps)
        new_mean, new_var = params[:2]

    def mean_over_batch(v):  # ATen: running_mean.copy_(running_mean_.view({b, c}).mean(0))
        return div(rsum(prims.reshape(v, (n, c)), [0]), n)
    write_inplace(running_mean, mean_over_batch(new_mean), "instance_norm (running_mean update)")
    write_inplace(running_var, mean_over_batch(new_var), "instance_norm (running_var update)")
    return prims.reshape(out, shape)


@register("local_response_norm", F.local_response_norm)
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta (zero-padded)."""
    if len(input.tshape) < 3 or math.prod(input.tshape) == 0 or not input.tdtype.is_floating_point:
        raise Fallback("local_response_norm of this shape or dtype (integer pooling)")
    sq = mul(input, input)
    r = len(input.tshape)
    pads = [(0, 0)] * r
    pads[1] = (size // 2, (size - 1) // 2)
    window = [1] * r
    window[1] = size
    s = prims.reduce_window(sq, prims.full((), 0, input.tdtype), "sum", window, [1] * r, pads)
    d = torch.pow(add(mul(div(s, float(size)), alpha), k), beta)
    return div(input, d)


@register("renorm", torch.renorm, T.renorm, opmath=True)
def renorm(input, p, dim, maxnorm):
    d = canonical_dim(dim, len(input.tshape))
    others = [i for i in range(len(input.tshape)) if i != d]
    n = vector_norm(input, p, others, True)
    factor = where(n > maxnorm, div(maxnorm, add(n, 1e-7)), prims.full(n.tshape, 1.0, n.tdtype))
    return mul(input, factor)


@register("native_layer_norm", torch.native_layer_norm)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    r, k = len(input.tshape), len(tuple(normalized_shape))
    dims = list(range(r - k, r))
    acc = torch.float32 if input.tdtype in (torch.float16, torch.bfloat16) else input.tdtype
    x = prims.convert_element_type(input, acc)
    m = torch.mean(x, dims, True)
    c = sub(x, m)
    rstd = torch.rsqrt(add(torch.mean(mul(c, c), dims, True), eps))
    dt = input.tdtype
    return (layer_norm(input, normalized_shape, weight, bias, eps),
            prims.convert_element_type(m, dt), prims.convert_element_type(rstd, dt))


@register("native_group_norm", torch.native_group_norm)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    x = prims.reshape(input, (N, group, math.prod(input.tshape) // max(N * group, 1)))
    m = torch.mean(x, 2)
    c = sub(x, prims.reshape(m, (N, group, 1)))
    rstd = torch.rsqrt(add(torch.mean(mul(c, c), 2), eps))
    return group_norm(input, group, weight, bias, eps), m, rstd
