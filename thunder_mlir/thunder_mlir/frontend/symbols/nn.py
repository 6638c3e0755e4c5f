"""Layers of torch.nn.functional without a family of their own: embedding and
embedding_bag, scaled_dot_product_attention, bilinear, one_hot, and unfold (im2col).

Decompositions follow the formulas of the PyTorch documentation page of each function.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend import lang
from thunder_mlir.frontend import runtime_checks
from thunder_mlir.frontend.runtime_checks import check_indices
from thunder_mlir.frontend.lang import expand_to, lift
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.elementwise import add, mul
from thunder_mlir.frontend.symbols.linalg import matmul
from thunder_mlir.frontend.symbols.reduction import _acc_dtype
from thunder_mlir.frontend.symbols.reduction import _bcast_keep
from thunder_mlir.frontend.symbols.activations import _softmax



@register("embedding", F.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise Fallback("embedding with max_norm renormalizes the weight in place")
    if scale_grad_by_freq:
        raise Fallback("embedding with scale_grad_by_freq (its gradient counts indices)")
    check_indices(input, weight.tshape[0], 0, negative=False,
                  message="index out of range in self: an index is not in [0, num_embeddings)")
    return prims.take(weight, input, 0)


@register("embedding_aten", torch.embedding)
def embedding_aten(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq:
        raise Fallback("embedding with scale_grad_by_freq (its gradient counts indices)")
    check_indices(indices, weight.tshape[0], 0, negative=False,
                  message="index out of range in self: an index is not in [0, num_embeddings)")
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
        shape = tuple(lang.broadcast_shapes(scores.tshape, attn_mask.tshape))
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


@register("unfold_im2col", F.unfold)
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L) with blocks in row-major order (F.unfold)."""
    from thunder_mlir.frontend.symbols.conv import _tuple
    from thunder_mlir.frontend.symbols.creation import index_constant
    x = input if len(input.tshape) == 4 else prims.reshape(input, (1,) + input.tshape)
    k, d, p, s = (_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    n, c, h, w = x.tshape
    g, masks = x, []
    for i, L in enumerate((h, w)):
        O = (L + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1
        tab = [o * s[i] - p[i] + j * d[i] for o in range(O) for j in range(k[i])]
        t = prims.reshape(index_constant(tab), (O, k[i]))
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


@register("embedding_bag", F.embedding_bag, opmath=True)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Bags of embeddings reduced by sum/mean/max (F.embedding_bag); the bag of each index
    is the number of offsets at or before its position, minus one."""
    if max_norm is not None:
        raise Fallback("embedding_bag with max_norm renormalizes the weight in place")
    rows = weight.tshape[0]
    runtime_checks.check_values(  # ATen (EmbeddingBag.cpp): "Index i of input takes value"
        input, lambda i: runtime_checks.in_range(i, 0, rows), RuntimeError,
        f"an index is not in the valid range [0, {rows})")
    if len(input.tshape) == 2:
        nb, L = input.tshape
        idx = prims.reshape(input, (nb * L,))
        bag = prims.elementwise("div", prims.iota((nb * L,), torch.int64, 0),
                                prims.full((nb * L,), max(L, 1), torch.int64))
    else:
        idx = input
        nidx = idx.tshape[0]

        def first_zero_last_in(o):  # ATen (EmbeddingBag.cpp): offsets[0] == 0, the last
            at = prims.iota(o.tshape, torch.int64, 0)  # <= the input's length
            o = prims.convert_element_type(o, torch.int64)
            bad_first = prims.elementwise("bitwise_and", prims.elementwise(
                "eq", at, prims.full(o.tshape, 0, torch.int64)), prims.elementwise(
                "ne", o, prims.full(o.tshape, 0, torch.int64)))
            bad_last = prims.elementwise("bitwise_and", prims.elementwise(
                "eq", at, prims.full(o.tshape, o.tshape[0] - 1, torch.int64)),
                prims.elementwise("gt", o, prims.full(o.tshape, nidx, torch.int64)))
            return prims.elementwise("bitwise_not", prims.elementwise(
                "bitwise_or", bad_first, bad_last))
        runtime_checks.check_values(offsets, first_zero_last_in, RuntimeError,
                                    f"offsets[0] has to be 0 and offsets[-1] at most the "
                                    f"input's length ({nidx})")
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
