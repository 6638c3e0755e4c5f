"""Distances and similarities: cosine_similarity, pairwise_distance, dist, pdist."""

from __future__ import annotations
import torch
import torch.nn.functional as F
from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import broadcast_shape, canonical_dim, lift, promote
from thunder_mlir.frontend.symbols.registry import register
from thunder_mlir.frontend.symbols.elementwise import add, clamp, div, mul, sub
from thunder_mlir.frontend.symbols.reduction import sum as rsum, vector_norm
import itertools


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


@register("pdist", F.pdist, torch.pdist)
def pdist(input, p=2):
    n = input.tshape[0]
    pairs = list(itertools.combinations(range(n), 2))
    if not pairs:
        return prims.full((0,), 0, input.tdtype)
    from thunder_mlir.frontend.symbols.creation import index_constant
    a = prims.take(input, index_constant([i for i, _ in pairs]), 0)
    b = prims.take(input, index_constant([j for _, j in pairs]), 0)
    return vector_norm(sub(a, b), p, 1)
