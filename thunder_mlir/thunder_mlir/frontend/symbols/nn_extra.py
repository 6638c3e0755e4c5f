"""More torch.nn.functional: shrink/threshold activations, prelu/rrelu, softmin, distances,
group/instance/local-response norm, bilinear, one_hot, and losses.

Formulas are those of each function's PyTorch documentation page (and its ATen
implementation for the order of clamping/epsilons); reductions ``none | mean | sum``.
Calls whose result needs random numbers raise ``Fallback`` and run on the torch executor;
instance_norm's running statistics are updated in place as batch_norm's are
(``write_inplace``: program inputs written back after the run).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import broadcast_shape, canonical_dim, expand_to, lift, promote
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.nn import softmax
from thunder_mlir.frontend.symbols.elementwise import (
    add, clamp, div, exp, log, log1p, mul, neg, sub, where)
from thunder_mlir.frontend.symbols.reduction import mean as rmean, sum as rsum, vector_norm
from thunder_mlir.frontend.symbols.nn import logsigmoid, leaky_relu


def _c(x, v):
    return prims.full(x.tshape, v, x.tdtype)


from thunder_mlir.frontend.symbols.loss import _legacy_reduction as _reduction, _reduce  # noqa: E402  (shared helpers)


# -------------------------------------------------------------- activations
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
    z = _c(input, 0)
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, z))


@register("hardshrink", F.hardshrink)
def hardshrink(input, lambd=0.5):
    keep = prims.elementwise("bitwise_or", (input > lambd), (input < -lambd))
    return where(keep, input, _c(input, 0))


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


# ---------------------------------------------------------------- distances
@register("cosine_similarity", F.cosine_similarity, torch.cosine_similarity)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1/max(|x1|, eps) * x2/max(|x2|, eps)) along dim (ATen's scipy-style form)."""
    if x1.tdtype in (torch.float16, torch.bfloat16):
        raise Fallback("cosine_similarity in low precision (torch's rounding order)")
    shape = broadcast_shape(x1, x2)
    comp, _ = promote(x1, x2)
    a, b = lift(x1, comp, shape), lift(x2, comp, shape)
    d = canonical_dim(dim, len(shape))
    na = clamp(vector_norm(a, 2, d, True), min=eps)
    nb = clamp(vector_norm(b, 2, d, True), min=eps)
    _, res = promote(x1, x2)
    return prims.convert_element_type(rsum(mul(div(a, na), div(b, nb)), d), res)


@register("pairwise_distance", F.pairwise_distance, torch.pairwise_distance)
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    r = max(len(x1.tshape), len(x2.tshape))
    return vector_norm(add(sub(x1, x2), eps), p, r - 1 if r else None, keepdim)


@register("dist", torch.dist)
def dist(input, other, p=2):
    return vector_norm(sub(input, other), p)


# -------------------------------------------------------------- normalizations
def _normalize(x, dims, eps):
    m = rmean(x, dims, True)
    c = sub(x, m)
    v = rmean(mul(c, c), dims, True)
    return mul(c, torch.rsqrt(add(v, eps)))


@register("group_norm", F.group_norm, torch.group_norm)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    from thunder_mlir.frontend.symbols.reduction import _acc_dtype
    from thunder_mlir.frontend.symbols.nn import ONE_ELEMENT_NORM
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
    from thunder_mlir.frontend.symbols.registry import check_writable, write_inplace

    shape = input.tshape
    if use_input_stats and len(shape) >= 2 and math.prod(shape[2:]) == 1:  # _verify_spatial_size
        from thunder_mlir.frontend.symbols.nn import _error

        raise _error(ValueError, f"Expected more than 1 spatial element when training, got "
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
    from thunder_mlir.frontend.symbols.nn import _batch_norm_symbol

    n, c = shape[:2]

    def repeated(t):
        return None if t is None else prims.reshape(
            prims.broadcast_in_dim(t, (n, c), [1]), (n * c,))
    x = prims.reshape(input, (1, n * c) + tuple(shape[2:]))
    params = [repeated(t) for t in (running_mean, running_var, weight, bias)]
    if use_input_stats:
        check_writable(running_mean, "instance_norm (running_mean update)")
        check_writable(running_var, "instance_norm (running_var update)")
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


@register("bilinear", F.bilinear)
def bilinear(input1, input2, weight, bias=None):
    """out[..., o] = x1 W[o] x2 + b[o]: two dot_generals."""
    lead = input1.tshape[:-1]
    b = math.prod(lead)
    x1 = prims.reshape(input1, (b, input1.tshape[-1]))
    x2 = prims.reshape(input2, (b, input2.tshape[-1]))
    t = prims.dot_general(x1, weight, [], [], [1], [1])  # (B, O, J)
    out = prims.dot_general(t, x2, [0], [0], [2], [1])  # (B, O)
    out = prims.reshape(out, lead + (weight.tshape[0],))
    return add(out, bias) if bias is not None else out


@register("one_hot", F.one_hot)
def one_hot(tensor, num_classes=-1):
    if num_classes < 0:
        raise Fallback("one_hot without num_classes has a data-dependent shape")
    shape = tensor.tshape + (num_classes,)
    x = prims.broadcast_in_dim(tensor, shape, list(range(len(tensor.tshape))))
    return prims.convert_element_type(
        prims.elementwise("eq", x, prims.iota(shape, tensor.tdtype, len(shape) - 1)), torch.int64)


# ------------------------------------------------------------------- losses
@register("kl_div", F.kl_div)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    red = _reduction(size_average, reduce, reduction)
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
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@register("hinge_embedding_loss", F.hinge_embedding_loss)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    z = _c(input, 0)
    m = where(target != 1, clamp(sub(margin, input), min=0), z)
    s = where(target != -1, input, z)
    return _reduce(add(m, s), _reduction(size_average, reduce, reduction))


@register("soft_margin_loss", F.soft_margin_loss)
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    loss = log1p(exp(mul(neg(target), input)))
    return _reduce(loss, _reduction(size_average, reduce, reduction))


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
    return _reduce(loss, _reduction(size_average, reduce, reduction))


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
    return _reduce(loss, _reduction(size_average, reduce, reduction))


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
    return _reduce(add(pos, negv), _reduction(size_average, reduce, reduction))


@register("triplet_margin_loss", F.triplet_margin_loss)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = torch.minimum(d_an, pairwise_distance(positive, negative, p, eps))
    loss = clamp(add(sub(d_ap, d_an), margin), min=0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


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
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@register("unfold_im2col", F.unfold)
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L) with blocks in row-major order (F.unfold)."""
    from thunder_mlir.frontend.symbols.conv import _tuple
    from thunder_mlir.frontend.symbols.views import _const_index
    x = input if len(input.tshape) == 4 else prims.reshape(input, (1,) + input.tshape)
    k, d, p, s = (_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    n, c, h, w = x.tshape
    g, masks = x, []
    for i, L in enumerate((h, w)):
        O = (L + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1
        tab = [o * s[i] - p[i] + j * d[i] for o in range(O) for j in range(k[i])]
        t = prims.reshape(_const_index(tab), (O, k[i]))
        masks.append(prims.elementwise("bitwise_and", prims.elementwise(
            "ge", t, prims.full(t.tshape, 0, torch.int64)), prims.elementwise(
            "lt", t, prims.full(t.tshape, L, torch.int64))))
        safe = prims.clamp(prims.full(t.tshape, 0, torch.int64), t,
                           prims.full(t.tshape, L - 1, torch.int64))
        g = prims.take(g, safe, 2 + 2 * i)  # (N, C, Oh, kh, [Ow, kw])
    full = g.tshape
    m = prims.elementwise("bitwise_and", prims.broadcast_in_dim(masks[0], full, [2, 3]),
                          prims.broadcast_in_dim(masks[1], full, [4, 5]))
    g = prims.where(m, g, prims.full(full, 0, g.tdtype))
    g = prims.transpose(g, [0, 1, 3, 5, 2, 4])
    oh, ow = full[2], full[4]
    out = prims.reshape(g, (n, c * k[0] * k[1], oh * ow))
    return out if len(input.tshape) == 4 else prims.reshape(out, out.tshape[1:])


@register("multilabel_margin_loss", F.multilabel_margin_loss)
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over target classes y (the prefix of ``target`` before the first -1) and
    non-target classes i of max(0, 1 - (x[y] - x[i])), divided by C."""
    x = input if len(input.tshape) == 2 else prims.reshape(input, (1, math.prod(input.tshape)))
    t = prims.reshape(prims.convert_element_type(target, torch.int64), x.tshape)
    nb, c = x.tshape
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
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@register("embedding_bag", F.embedding_bag, opmath=True)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Bags of embeddings reduced by sum/mean/max (F.embedding_bag); the bag of each index
    is the number of offsets at or before its position, minus one."""
    if max_norm is not None:
        raise Fallback("embedding_bag with max_norm renormalizes the weight in place")
    if len(input.tshape) == 2:
        nb, L = input.tshape
        idx = prims.reshape(input, (nb * L,))
        bag = prims.elementwise("div", prims.iota((nb * L,), torch.int64, 0),
                                prims.full((nb * L,), max(L, 1), torch.int64))
    else:
        idx = input
        nidx = idx.tshape[0]
        offs = prims.convert_element_type(offsets, torch.int64)
        nb = offs.tshape[0] - (1 if include_last_offset else 0)
        pos = prims.iota((nidx, offs.tshape[0]), torch.int64, 0)
        ob = prims.broadcast_in_dim(offs, pos.tshape, [1])
        bag = prims.elementwise("sub", prims.reduce("reduce_sum", prims.convert_element_type(
            prims.elementwise("le", ob, pos), torch.int64), [1]), prims.full((nidx,), 1,
                                                                             torch.int64))
    n = idx.tshape[0]
    D = weight.tshape[1]
    idx = prims.convert_element_type(idx, torch.int64)
    ok = prims.elementwise("bitwise_and", prims.elementwise("ge", bag, prims.full((n,), 0,
                                                                                  torch.int64)),
                           prims.elementwise("lt", bag, prims.full((n,), nb, torch.int64)))
    if padding_idx is not None:
        pi = padding_idx % weight.tshape[0]
        ok = prims.elementwise("bitwise_and", ok, prims.elementwise(
            "ne", idx, prims.full((n,), pi, torch.int64)))
    vals = prims.take(weight, idx, 0)
    if per_sample_weights is not None:
        vals = mul(vals, prims.reshape(prims.convert_element_type(per_sample_weights, vals.tdtype),
                                       (n, 1)))
    okb = prims.broadcast_in_dim(ok, (n, D), [0])
    safe_bag = prims.where(ok, bag, prims.full((n,), nb, torch.int64))  # nb: skipped
    coords = prims.reshape(safe_bag, (n, 1))
    dt = weight.tdtype
    ones = prims.convert_element_type(ok, dt)
    count = prims.scatter(prims.full((nb,), 0, dt), coords, ones, "add")
    if mode == "max":
        vals = prims.where(okb, vals, prims.full((n, D), -math.inf, dt))
        out = prims.scatter(prims.full((nb, D), -math.inf, dt), coords, vals, "max")
        empty = prims.broadcast_in_dim(prims.elementwise("eq", count, prims.full((nb,), 0, dt)),
                                       (nb, D), [0])
        return prims.where(empty, prims.full((nb, D), 0, dt), out)
    vals = prims.where(okb, vals, prims.full((n, D), 0, dt))
    out = prims.scatter(prims.full((nb, D), 0, dt), coords, vals, "add")
    if mode == "sum":
        return out
    denom = prims.broadcast_in_dim(prims.elementwise("maximum", count, prims.full((nb,), 1, dt)),
                                   (nb, D), [0])
    return prims.elementwise("div", out, denom)
