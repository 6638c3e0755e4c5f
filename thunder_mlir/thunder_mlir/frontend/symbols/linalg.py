"""Linear algebra symbols: matmul and its family, as ``dot_general`` prims.

Batched operands are broadcast to a common batch shape first (torch.matmul's rules,
https://pytorch.org/docs/stable/generated/torch.matmul.html).
"""

from __future__ import annotations

import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import expand_to, promote
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import add, mul


def _same_dtype(a, b):
    if a.tdtype != b.tdtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.tdtype} != "
                           f"{b.tdtype}")


@register("matmul", torch.matmul, T.matmul, T.__matmul__)
def matmul(input, other):
    _same_dtype(input, other)
    a, b = input, other
    ra, rb = len(a.tshape), len(b.tshape)
    if ra == 0 or rb == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D")
    if ra == 1 and rb == 1:
        return prims.dot_general(a, b, [], [], [0], [0])
    if ra == 2 and rb == 1:
        return prims.dot_general(a, b, [], [], [1], [0])
    if ra == 1 and rb == 2:
        return prims.dot_general(a, b, [], [], [0], [0])
    if ra >= 1 and rb == 2 and ra > 2:
        return prims.dot_general(a, b, [], [], [ra - 1], [0])
    # batched: broadcast batch dims
    a2 = prims.reshape(a, (1,) + a.tshape) if ra == 1 else a
    b2 = prims.reshape(b, b.tshape + (1,)) if rb == 1 else b
    batch = tuple(torch.broadcast_shapes(a2.tshape[:-2], b2.tshape[:-2]))
    a2 = expand_to(a2, batch + a2.tshape[-2:])
    b2 = expand_to(b2, batch + b2.tshape[-2:])
    nb = len(batch)
    out = prims.dot_general(a2, b2, list(range(nb)), list(range(nb)), [nb + 1], [nb])
    if ra == 1:
        out = prims.reshape(out, batch + (out.tshape[-1],))
    if rb == 1:
        out = prims.reshape(out, out.tshape[:-1])
    return out


@register("mm", torch.mm, T.mm)
def mm(input, mat2):
    if len(input.tshape) != 2 or len(mat2.tshape) != 2:
        raise RuntimeError("mm: both arguments must be 2D")
    return matmul(input, mat2)


@register("bmm", torch.bmm, T.bmm)
def bmm(input, mat2):
    if len(input.tshape) != 3 or len(mat2.tshape) != 3:
        raise RuntimeError("bmm: both arguments must be 3D")
    return matmul(input, mat2)


@register("mv", torch.mv, T.mv)
def mv(input, vec):
    return matmul(input, vec)


@register("dot", torch.dot, T.dot)
def dot(input, other):
    return matmul(input, other)


def _beta_alpha(inp, prod, beta, alpha):
    if not (prod.tdtype.is_floating_point or prod.tdtype.is_complex):
        # ATen converts the scalars to the integer type first (Scalar::to<int>, truncating)
        beta, alpha = (int(v) if isinstance(v, float) else v for v in (beta, alpha))
    p = prod if alpha == 1 else mul(prod, alpha)
    if beta == 0:
        return p
    i = inp if beta == 1 else mul(inp, beta)
    return add(i, p)


@register("addmm", torch.addmm, T.addmm, opmath=True)
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return _beta_alpha(input, mm(mat1, mat2), beta, alpha)


@register("baddbmm", torch.baddbmm, T.baddbmm, opmath=True)
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _beta_alpha(input, bmm(batch1, batch2), beta, alpha)


@register("addmv", torch.addmv, T.addmv, opmath=True)
def addmv(input, mat, vec, *, beta=1, alpha=1):
    return _beta_alpha(input, mv(mat, vec), beta, alpha)


@register("outer", torch.outer, T.outer, torch.ger, T.ger)
def outer(input, vec2):
    comp, res = promote(input, vec2)
    a = prims.reshape(prims.convert_element_type(input, comp), input.tshape + (1,))
    b = prims.reshape(prims.convert_element_type(vec2, comp), (1,) + vec2.tshape)
    n, m = input.tshape[0], vec2.tshape[0]
    out = prims.elementwise("mul", expand_to(a, (n, m)), expand_to(b, (n, m)))
    return prims.convert_element_type(out, res)


@register("linear", torch.nn.functional.linear, opmath=True)
def linear(input, weight, bias=None):
    _same_dtype(input, weight)
    if len(weight.tshape) == 1:
        out = prims.dot_general(input, weight, [], [], [len(input.tshape) - 1], [0])
    else:
        out = prims.dot_general(input, weight, [], [], [len(input.tshape) - 1], [1])
    if bias is not None:
        out = prims.elementwise("add", out, expand_to(bias, out.tshape))
    return out
