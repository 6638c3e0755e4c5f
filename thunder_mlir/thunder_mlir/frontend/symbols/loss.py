"""Loss symbols: cross_entropy, nll_loss, binary cross-entropy, L1/smooth-L1/Huber.

Formulas follow PyTorch's ATen implementations (aten/src/ATen/native/LossNLL.cpp for
cross_entropy with label smoothing and class weights; Loss.cpp for the rest): ``mean``
reduction over class indices divides by the summed weight of the non-ignored targets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.nn import log_softmax


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


