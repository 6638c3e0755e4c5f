"""Losses: cross_entropy, nll_loss, binary cross-entropy, L1/smooth-L1/Huber/MSE, KL
divergence, the margin and embedding losses, Poisson and Gaussian NLL.

Formulas follow PyTorch's ATen implementations (aten/src/ATen/native/LossNLL.cpp for
cross_entropy with label smoothing and class weights; Loss.cpp for the rest): ``mean``
reduction over class indices divides by the summed weight of the non-ignored targets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.frontend import runtime_checks
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.activations import log_softmax
import math
from thunder_mlir.frontend.symbols.elementwise import add, mul
from thunder_mlir.frontend.symbols.elementwise import clamp, div, exp, log, log1p, neg, sub, where
from thunder_mlir.frontend.symbols.reduction import sum as rsum
from thunder_mlir.frontend.symbols.activations import logsigmoid
from thunder_mlir.frontend.lang import full_like
from thunder_mlir.frontend.symbols.distance import pairwise_distance


def _class_dim(x: TensorProxy) -> int:
    return 0 if len(x.tshape) == 1 else 1


def _reduce(loss: TensorProxy, reduction: str) -> TensorProxy:
    from thunder_mlir.frontend.symbols.reduction import mean, sum
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum(loss)
    if reduction == "mean":
        return mean(loss)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


def _nll(logp, target, weight, ignore_index, reduction):
    """Weighted negative log-likelihood of class-index targets; returns (loss, weight sum)."""
    cd = _class_dim(logp)
    n_classes = logp.tshape[cd]
    # ATen's nll_loss: "Target k is out of bounds." (LossNLL.cpp), ignore_index excepted
    runtime_checks.check_values(
        target, lambda t: runtime_checks.in_range(t, 0, n_classes, allowed=ignore_index),
        IndexError, f"a target is out of bounds for {n_classes} classes")
    t = prims.convert_element_type(target, torch.int64)
    ignore = prims.elementwise("eq", t, prims.full(t.tshape, ignore_index, torch.int64))
    safe = prims.where(ignore, prims.full(t.tshape, 0, torch.int64), t)
    idx = prims.reshape(safe, safe.tshape[:cd] + (1,) + safe.tshape[cd:])
    picked = prims.reshape(prims.take_along(logp, idx, cd), safe.tshape)
    w = prims.full(safe.tshape, 1.0, logp.tdtype) if weight is None else prims.take(
        prims.convert_element_type(weight, logp.tdtype), safe, 0)
    zero = prims.full(safe.tshape, 0.0, logp.tdtype)
    w = prims.where(ignore, zero, w)
    loss = prims.elementwise("neg", prims.elementwise("mul", picked, w))
    return loss, w, ignore


def _reduce_nll(loss, w, reduction):
    dims = list(range(len(loss.tshape)))
    if reduction == "none":
        return loss
    s = prims.reduce("reduce_sum", loss, dims)
    if reduction == "sum":
        return s
    return prims.elementwise("div", s, prims.reduce("reduce_sum", w, dims))


@register("nll_loss", F.nll_loss, opmath=True)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss, w, _ = _nll(input, target, weight, ignore_index, reduction)
    return _reduce_nll(loss, w, reduction)


@register("cross_entropy", F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input.tdtype is torch.float16:
        # ATen rounds log_softmax's row sums and its output to float16 before nll_loss
        raise Fallback("float16 cross_entropy (ATen's float16 rounding order)")
    cd = _class_dim(input)
    n_classes = input.tshape[cd]
    logp = log_softmax(input, cd)
    if target.tdtype.is_floating_point:  # class probabilities
        tgt = prims.convert_element_type(target, logp.tdtype)
        if label_smoothing > 0:
            tgt = prims.elementwise("add", prims.elementwise(
                "mul", tgt, prims.full(tgt.tshape, 1 - label_smoothing, tgt.tdtype)),
                prims.full(tgt.tshape, label_smoothing / n_classes, tgt.tdtype))
        prod = prims.elementwise("mul", logp, tgt)
        if weight is not None:
            wb = prims.broadcast_in_dim(prims.convert_element_type(weight, logp.tdtype),
                                        logp.tshape, [cd])
            prod = prims.elementwise("mul", prod, wb)
        loss = prims.elementwise("neg", prims.reduce("reduce_sum", prod, [cd]))
        if reduction == "mean":
            n = 1
            for s in loss.tshape:
                n *= s
            s = prims.reduce("reduce_sum", loss, list(range(len(loss.tshape))))
            return prims.elementwise("div", s, prims.full((), max(n, 1), loss.tdtype))
        return _reduce(loss, reduction)
    loss, w, ignore = _nll(logp, target, weight, ignore_index, reduction)
    nll = _reduce_nll(loss, w, reduction)
    if label_smoothing <= 0:
        return nll
    if weight is not None:
        wb = prims.broadcast_in_dim(prims.convert_element_type(weight, logp.tdtype),
                                    logp.tshape, [cd])
        smooth = prims.reduce("reduce_sum", prims.elementwise("mul", logp, wb), [cd])
    else:
        smooth = prims.reduce("reduce_sum", logp, [cd])
    smooth = prims.elementwise("neg", smooth)
    smooth = prims.where(ignore, prims.full(smooth.tshape, 0.0, smooth.tdtype), smooth)
    dims = list(range(len(smooth.tshape)))
    if reduction == "mean":
        denom = prims.reduce("reduce_sum", w, dims) if weight is not None else \
            prims.reduce("reduce_sum", prims.convert_element_type(
                prims.elementwise("bitwise_not", ignore), smooth.tdtype), dims)
        ret = prims.elementwise("div", prims.reduce("reduce_sum", smooth, dims), denom)
    elif reduction == "sum":
        ret = prims.reduce("reduce_sum", smooth, dims)
    else:
        ret = smooth
    a = prims.elementwise("mul", nll, prims.full(nll.tshape, 1 - label_smoothing, nll.tdtype))
    b = prims.elementwise("mul", ret, prims.full(ret.tshape, label_smoothing / n_classes,
                                                 ret.tdtype))
    return prims.elementwise("add", a, b)


@register("binary_cross_entropy", F.binary_cross_entropy, opmath=True)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    lo = prims.full(input.tshape, -100.0, input.tdtype)  # torch clamps log at -100
    log_x = prims.elementwise("maximum", prims.elementwise("log", input), lo)
    one = prims.full(input.tshape, 1.0, input.tdtype)
    log_1mx = prims.elementwise("maximum", prims.elementwise(
        "log", prims.elementwise("sub", one, input)), lo)
    t = expand_to(prims.convert_element_type(target, input.tdtype), input.tshape)
    loss = prims.elementwise("neg", prims.elementwise("add", prims.elementwise(
        "mul", t, log_x), prims.elementwise("mul", prims.elementwise("sub", one, t), log_1mx)))
    if weight is not None:
        loss = prims.elementwise("mul", loss, expand_to(weight, loss.tshape))
    return _reduce(loss, reduction)


@register("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    x = input
    t = expand_to(prims.convert_element_type(target, x.tdtype), x.tshape)
    one = prims.full(x.tshape, 1.0, x.tdtype)
    # log(1 + exp(-|x|)) + max(-x, 0): the stable form torch uses
    softplus_neg = prims.elementwise("add", prims.elementwise("log1p", prims.elementwise(
        "exp", prims.elementwise("neg", prims.elementwise("abs", x)))), prims.elementwise(
        "maximum", prims.elementwise("neg", x), prims.full(x.tshape, 0.0, x.tdtype)))
    if pos_weight is not None:
        lw = prims.elementwise("add", one, prims.elementwise("mul", prims.elementwise(
            "sub", expand_to(pos_weight, x.tshape), one), t))
        loss = prims.elementwise("add", prims.elementwise("mul", prims.elementwise(
            "sub", one, t), x), prims.elementwise("mul", lw, softplus_neg))
    else:
        loss = prims.elementwise("add", prims.elementwise("mul", prims.elementwise(
            "sub", one, t), x), softplus_neg)
    if weight is not None:
        loss = prims.elementwise("mul", loss, expand_to(weight, loss.tshape))
    return _reduce(loss, reduction)


def _pointwise_loss(kind):
    def impl(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0,
             delta=1.0, weight=None):
        from thunder_mlir.frontend.symbols.elementwise import sub
        red = _legacy_reduction(size_average, reduce, reduction)
        low = input.tdtype if input.tdtype in (torch.float16, torch.bfloat16) and \
            target.tdtype is input.tdtype else None
        if low is not None:  # ATen's pointwise kernel computes in float32 (opmath)
            input, target = (prims.convert_element_type(t, torch.float32)
                             for t in (input, target))
        d = sub(input, target)
        a = prims.elementwise("abs", d)
        if kind == "l1":
            loss = a
        else:
            k = beta if kind == "smooth_l1" else delta
            if k == 0:
                loss = a
            else:
                # ATen's order (PointwiseOpsKernel.cpp): 0.5 * z * z [/ beta],
                # delta * (z - 0.5 * delta)
                quad = prims.elementwise("mul", prims.elementwise(
                    "mul", prims.full(a.tshape, 0.5, a.tdtype), a), a)
                lin = prims.elementwise("sub", a, prims.full(a.tshape, 0.5 * k, a.tdtype))
                if kind == "smooth_l1":
                    quad = prims.elementwise("div", quad, prims.full(a.tshape, k, a.tdtype))
                else:
                    lin = prims.elementwise("mul", prims.full(a.tshape, k, a.tdtype), lin)
                loss = prims.where(prims.elementwise("lt", a, prims.full(a.tshape, k, a.tdtype)),
                                   quad, lin)
        if low is not None:  # rounded once per element, then reduced as ATen does
            loss = prims.convert_element_type(loss, low)
        return _reduce(loss, red)
    return impl


register("l1_loss", F.l1_loss)(_pointwise_loss("l1"))
register("smooth_l1_loss", F.smooth_l1_loss)(_pointwise_loss("smooth_l1"))
register("huber_loss", F.huber_loss)(_pointwise_loss("huber"))


@register("mse_loss", F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    from thunder_mlir.frontend.symbols.elementwise import sub
    from thunder_mlir.frontend.symbols.reduction import mean, sum
    d = sub(input, target)
    sq = prims.elementwise("mul", d, d)
    if reduction == "none":
        return sq
    return mean(sq) if reduction == "mean" else sum(sq)


@register("kl_div", F.kl_div)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    red = _legacy_reduction(size_average, reduce, reduction)
    if log_target:
        loss = mul(exp(target), sub(target, input))
    else:
        loss = sub(torch.xlogy(target, target), mul(target, input))
    if red == "batchmean":
        return div(rsum(loss), input.tshape[0]) if input.tshape else rsum(loss)
    return _reduce(loss, red)


@register("margin_ranking_loss", F.margin_ranking_loss)
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    loss = clamp(add(mul(neg(target), sub(input1, input2)), margin), min=0)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("hinge_embedding_loss", F.hinge_embedding_loss)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    z = full_like(input, 0)
    m = where(target != 1, clamp(sub(margin, input), min=0), z)
    s = where(target != -1, input, z)
    return _reduce(add(m, s), _legacy_reduction(size_average, reduce, reduction))


@register("soft_margin_loss", F.soft_margin_loss)
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    loss = log1p(exp(mul(neg(target), input)))
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("multilabel_soft_margin_loss", F.multilabel_soft_margin_loss)
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    if input.tdtype in (torch.float16, torch.bfloat16):
        raise Fallback("multilabel_soft_margin_loss in low precision")
    loss = neg(add(mul(target, logsigmoid(input)),
                   mul(sub(1, target), logsigmoid(neg(input)))))
    if weight is not None:
        loss = mul(loss, weight)
    c = input.tshape[-1] if input.tshape else 1
    loss = div(rsum(loss, len(input.tshape) - 1 if input.tshape else None), c)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("poisson_nll_loss", F.poisson_nll_loss)
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    if log_input:
        loss = sub(exp(input), mul(target, input))
    else:
        loss = sub(input, mul(target, log(add(input, eps))))
    if full:
        st = add(sub(mul(target, log(target)), target),
                 mul(log(mul(target, 2 * math.pi)), 0.5))
        loss = add(loss, where(target > 1, st, prims.full(st.tshape, 0, st.tdtype)))
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("cosine_embedding_loss", F.cosine_embedding_loss)
def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    eps = 1e-12
    d = len(input1.tshape) - 1
    prod = rsum(mul(input1, input2), d)
    m1 = add(rsum(mul(input1, input1), d), eps)
    m2 = add(rsum(mul(input2, input2), d), eps)
    cos = div(prod, torch.sqrt(mul(m1, m2)))
    z = prims.full(cos.tshape, 0, cos.tdtype)
    pos = where(target == 1, sub(1, cos), z)
    negv = where(target == -1, clamp(sub(cos, margin), min=0), z)
    return _reduce(add(pos, negv), _legacy_reduction(size_average, reduce, reduction))


@register("triplet_margin_loss", F.triplet_margin_loss)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = torch.minimum(d_an, pairwise_distance(positive, negative, p, eps))
    loss = clamp(add(sub(d_ap, d_an), margin), min=0)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("triplet_margin_with_distance_loss", F.triplet_margin_with_distance_loss)
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    dist_fn = distance_function or pairwise_distance
    d_ap, d_an = dist_fn(anchor, positive), dist_fn(anchor, negative)
    if swap:
        d_an = torch.minimum(d_an, dist_fn(positive, negative))
    return _reduce(clamp(add(sub(d_ap, d_an), margin), min=0), reduction)


@register("gaussian_nll_loss", F.gaussian_nll_loss)
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps)) (+ 0.5 log 2 pi).
    torch's check that var >= 0 needs the data and is skipped."""
    if type(var) is not TensorProxy:
        raise Fallback("gaussian_nll_loss with a float var")
    if var.tshape != input.tshape:
        if len(var.tshape) == len(input.tshape) - 1 and input.tshape[:-1] == var.tshape:
            var = prims.reshape(var, var.tshape + (1,))
        elif not (len(var.tshape) == len(input.tshape) and var.tshape[-1] == 1):
            raise Fallback("gaussian_nll_loss var shape")
    v = clamp(var, min=eps)
    d = sub(input, target)
    loss = mul(add(log(v), div(mul(d, d), v)), 0.5)
    if full:
        loss = add(loss, 0.5 * math.log(2 * math.pi))
    return _reduce(loss, reduction)


@register("multi_margin_loss", F.multi_margin_loss)
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """sum_{j != y} max(0, margin - x[y] + x[j])^p / C per sample (weight[y] scales)."""
    x = input if len(input.tshape) == 2 else prims.reshape(input, (1, math.prod(input.tshape)))
    n, c = x.tshape
    runtime_checks.check_values(  # ATen (LossMultiMargin.cpp): "target out of range"
        target, lambda t: runtime_checks.in_range(t, 0, c), RuntimeError,
        f"a target is out of range for {c} classes")
    t = prims.reshape(prims.convert_element_type(target, torch.int64), (n, 1))
    xy = prims.take_along(x, t, 1)
    z = clamp(add(sub(margin, xy), x), min=0)
    if p == 2:
        z = mul(z, z)
    if weight is not None:
        z = mul(z, prims.reshape(prims.take(weight, prims.reshape(t, (n,)), 0), (n, 1)))
    notself = prims.elementwise("ne", prims.iota((n, c), torch.int64, 1), expand_to(t, (n, c)))
    z = where(notself, z, prims.full(z.tshape, 0, z.tdtype))
    loss = div(rsum(z, 1), c)
    if len(input.tshape) < 2:
        loss = prims.reshape(loss, ())
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@register("multilabel_margin_loss", F.multilabel_margin_loss)
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over target classes y (the prefix of ``target`` before the first -1) and
    non-target classes i of max(0, 1 - (x[y] - x[i])), divided by C."""
    x = input if len(input.tshape) == 2 else prims.reshape(input, (1, math.prod(input.tshape)))
    nb, c = x.tshape
    runtime_checks.check_values(  # ATen (LossMultiLabelMargin.cpp), every element
        target, lambda t: runtime_checks.in_range(t, -1, c), RuntimeError,
        f"a target is out of range: a class in [0, {c}) or -1")
    t = prims.reshape(prims.convert_element_type(target, torch.int64), x.tshape)
    valid = prims.convert_element_type(prims.elementwise(
        "ne", t, prims.full(t.tshape, -1, torch.int64)), torch.int64)
    valid = prims.elementwise("eq", prims.cumulative("cummin", valid, 1),
                              prims.full(t.tshape, 1, torch.int64))
    shape3 = (nb, c, c)  # (n, k, j)
    tk = prims.broadcast_in_dim(t, shape3, [0, 1])
    j = prims.iota(shape3, torch.int64, 2)
    vk = prims.broadcast_in_dim(valid, shape3, [0, 1])
    is_t = prims.reduce("reduce_or", prims.elementwise("bitwise_and", vk, prims.elementwise(
        "eq", tk, j)), [1])  # (n, j)
    safe_t = prims.clamp(prims.full(t.tshape, 0, torch.int64), t,
                         prims.full(t.tshape, c - 1, torch.int64))
    xy = prims.take_along(x, safe_t, 1)  # (n, k)
    term = clamp(add(sub(1.0, prims.broadcast_in_dim(xy, shape3, [0, 1])),
                     prims.broadcast_in_dim(x, shape3, [0, 2])), min=0)
    mask = prims.elementwise("bitwise_and", vk, prims.broadcast_in_dim(
        prims.elementwise("bitwise_not", is_t), shape3, [0, 2]))
    loss = div(rsum(where(mask, term, prims.full(shape3, 0, term.tdtype)), [1, 2]), c)
    if len(input.tshape) < 2:
        loss = prims.reshape(loss, ())
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))
