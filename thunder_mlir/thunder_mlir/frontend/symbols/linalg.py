"""Linear algebra: matmul and its family (``dot_general`` prims), vecdot, multi_dot,
matrix_power, vander, cross, matrix and vector norms, diagonals and trace, Cholesky
(stablehlo.cholesky) and triangular solves (stablehlo.triangular_solve); torch.linalg
without iterative factorizations.

Batched operands are broadcast to a common batch shape first (torch.matmul's rules,
https://pytorch.org/docs/stable/generated/torch.matmul.html).
"""

from __future__ import annotations

import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend import lang
from thunder_mlir.frontend.lang import expand_to, promote
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import add, mul
import math
from thunder_mlir.errors import Fallback
from thunder_mlir.frontend.lang import canonical_dim
from thunder_mlir.frontend.symbols.elementwise import sub
from thunder_mlir.frontend.symbols.reduction import sum as rsum, vector_norm
from thunder_mlir.frontend.symbols.reduction import amax, amin
from thunder_mlir.frontend.symbols import shape as S


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
    batch = tuple(lang.broadcast_shapes(a2.tshape[:-2], b2.tshape[:-2]))
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


@register("cross", torch.cross, T.cross, torch.linalg.cross)
def cross(input, other, dim=None):
    shape = tuple(lang.broadcast_shapes(input.tshape, other.tshape))
    a, b = expand_to(input, shape), expand_to(other, shape)
    if dim is None:
        dim = -1 if torch.linalg.cross is None else next(i for i, s in enumerate(shape) if s == 3)
    d = canonical_dim(dim, len(shape))

    def comp(x, i):
        lo = [0] * len(shape)
        hi = list(shape)
        lo[d], hi[d] = i, i + 1
        return prims.slice_(x, lo, hi)
    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    c0 = sub(mul(a1, b2), mul(a2, b1))
    c1 = sub(mul(a2, b0), mul(a0, b2))
    c2 = sub(mul(a0, b1), mul(a1, b0))
    return prims.concatenate([c0, c1, c2], d)


def _real(*xs):
    for x in xs:
        if x.tdtype.is_complex:
            raise Fallback("complex linear algebra")


@register("vecdot", torch.linalg.vecdot)
def vecdot(x, y, *, dim=-1):
    _real(x, y)
    return rsum(mul(x, y), dim)


def _chain_order(p: list[int]) -> list[list[int]]:
    """ATen's ``multi_dot`` order (LinearAlgebra.cpp): for three matrices the cheaper of
    (AB)C and A(BC), (AB)C on a tie; for more, the matrix-chain dynamic program (split[i][j]
    = the first k of least cost). Each product rounds in the input dtype, so the order
    decides 16-bit results."""
    n = len(p) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    if n == 3:
        ab_c = p[0] * p[1] * p[2] + p[0] * p[2] * p[3]
        a_bc = p[1] * p[2] * p[3] + p[0] * p[1] * p[3]
        split[0][2] = 1 if ab_c <= a_bc else 0
        split[0][1], split[1][2] = 0, 1
        return split
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def _chain(ts, split, i, j):
    if i == j:
        return ts[i]
    k = split[i][j]
    return matmul(_chain(ts, split, i, k), _chain(ts, split, k + 1, j))


@register("multi_dot", torch.linalg.multi_dot)
def multi_dot(tensors):
    ts = list(tensors)
    first_vec, last_vec = len(ts[0].tshape) == 1, len(ts[-1].tshape) == 1
    if first_vec:
        ts[0] = prims.reshape(ts[0], (1,) + ts[0].tshape)
    if last_vec:
        ts[-1] = prims.reshape(ts[-1], ts[-1].tshape + (1,))
    out = _chain(ts, _chain_order([t.tshape[0] for t in ts] + [ts[-1].tshape[1]]), 0,
                 len(ts) - 1)
    if first_vec and last_vec:
        return prims.reshape(out, ())
    if first_vec:
        return prims.reshape(out, out.tshape[1:])
    if last_vec:
        return prims.reshape(out, out.tshape[:-1])
    return out


@register("matrix_power", torch.linalg.matrix_power, torch.matrix_power, T.matrix_power)
def matrix_power(A, n):
    if n < 0:
        raise Fallback("negative matrix power (an inverse)")
    m = A.tshape[-1]
    if n == 0:
        r = prims.iota((m, m), torch.int64, 0)
        c = prims.iota((m, m), torch.int64, 1)
        return expand_to(prims.convert_element_type(prims.elementwise("eq", r, c), A.tdtype),
                         A.tshape)
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


@register("vander", torch.linalg.vander)
def vander(x, *, N=None):
    if len(x.tshape) == 0:
        raise Fallback("vander of a 0-d tensor")
    if x.tdtype is torch.bool:
        raise RuntimeError("linalg.vander supports floating point, complex, and integer "
                           "tensors, but got Bool")
    if not (x.tdtype.is_floating_point or x.tdtype.is_complex):
        x = prims.convert_element_type(x, torch.int64)  # ATen's cumprod promotes integers
    n = x.tshape[-1]
    N = n if N is None else N
    if N == 0:
        return prims.full(x.tshape + (0,), 0, x.tdtype)
    cols = [prims.full(x.tshape, 1, x.tdtype)]
    for _ in range(N - 1):
        cols.append(prims.elementwise("mul", cols[-1], x))
    return prims.concatenate([prims.reshape(c, c.tshape + (1,)) for c in cols], len(x.tshape))


@register("matrix_norm", torch.linalg.matrix_norm)
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    _real(A)
    if dtype is not None:
        A = prims.convert_element_type(A, dtype)
    r = len(A.tshape)
    d0, d1 = canonical_dim(dim[0], r), canonical_dim(dim[1], r)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in (math.inf, -math.inf, 1, -1):
        sum_dim, red_dim = (d1, d0) if ord in (math.inf, -math.inf) else (d0, d1)
        s = rsum(prims.elementwise("abs", A), sum_dim, True)
        if A.tshape[red_dim] == 0:  # ATen: 0 for a max over nothing, an error for a min
            if ord < 0:
                raise RuntimeError(f"amin(): Expected reduction dim {red_dim} to have "
                                   "non-zero size.")
            out = prims.full(tuple(1 if i == red_dim else n for i, n in enumerate(s.tshape)),
                             0, s.tdtype)
        else:
            out = (amax if ord > 0 else amin)(s, red_dim, True)
        if not keepdim:
            out = prims.reshape(out, tuple(x for i, x in enumerate(A.tshape) if i not in (d0, d1)))
        return out
    raise Fallback(f"matrix_norm with ord={ord!r} needs singular values")


@register("linalg_norm", torch.linalg.norm)
def linalg_norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 1:
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if dim is not None and len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        x = prims.reshape(A, (math.prod(A.tshape),))
        out = vector_norm(x, 2, None, False, dtype=dtype)
        return prims.reshape(out, (1,) * len(A.tshape)) if keepdim else out
    if len(A.tshape) == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if len(A.tshape) == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise RuntimeError("linalg.norm: input must be 1-D or 2-D when ord is given and dim is None")


def _tri_mask(x, lower):
    from thunder_mlir.frontend.symbols.creation import tril, triu
    return tril(x) if lower else triu(x)


def _chol(A, upper):
    _real(A)
    if not A.tdtype.is_floating_point:
        raise RuntimeError("cholesky: expected a floating point tensor")
    L = _tri_mask(prims.cholesky(A, True), True)
    if upper:
        r = len(L.tshape)
        L = prims.transpose(L, list(range(r - 2)) + [r - 1, r - 2])
    return L


@register("linalg_cholesky", torch.linalg.cholesky)
def linalg_cholesky(A, *, upper=False, out=None):
    """A = L L^T with L lower triangular (positive-definite A; torch raises otherwise, the
    compiled program returns NaNs)."""
    return _chol(A, upper)


@register("cholesky", torch.cholesky, T.cholesky)
def cholesky(A, upper=False):
    return _chol(A, upper)


@register("cholesky_ex", torch.linalg.cholesky_ex)
def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    L = _chol(A, upper)
    return torch.return_types.linalg_cholesky_ex((L, prims.full(A.tshape[:-2], 0, torch.int32)))


def _bcast_batch(a, b):
    batch = tuple(lang.broadcast_shapes(a.tshape[:-2], b.tshape[:-2]))
    return expand_to(a, batch + a.tshape[-2:]), expand_to(b, batch + b.tshape[-2:])


def _solve_tri(A, B, upper, left, unit, transpose=False):
    _real(A, B)
    A, B = _bcast_batch(A, B)
    return prims.triangular_solve(A, B, left, not upper, unit, transpose)


@register("solve_triangular", torch.linalg.solve_triangular)
def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    return _solve_tri(A, B, upper, left, unitriangular)


@register("triangular_solve", torch.triangular_solve, T.triangular_solve)
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    x = _solve_tri(A, b, upper, True, unitriangular, transpose)
    Ab, _ = _bcast_batch(A, b)
    return torch.return_types.triangular_solve((x, Ab))


@register("cholesky_solve", torch.cholesky_solve, T.cholesky_solve)
def cholesky_solve(B, L, upper=False):
    """Solve (L L^T) X = B (or (U^T U) X = B): two triangular solves."""
    if upper:
        y = _solve_tri(L, B, True, True, False, transpose=True)
        return _solve_tri(L, y, True, True, False)
    y = _solve_tri(L, B, False, True, False)
    return _solve_tri(L, y, False, True, False, transpose=True)


@register("cholesky_inverse", torch.cholesky_inverse, T.cholesky_inverse)
def cholesky_inverse(L, upper=False):
    n = L.tshape[-1]
    r = prims.iota((n, n), torch.int64, 0)
    c = prims.iota((n, n), torch.int64, 1)
    eye = expand_to(prims.convert_element_type(prims.elementwise("eq", r, c), L.tdtype), L.tshape)
    return cholesky_solve(eye, L, upper)


def _to_end(x, d1, d2):
    r = len(x.tshape)
    rest = [i for i in range(r) if i not in (d1, d2)]
    return prims.transpose(x, rest + [d1, d2])


@register("diagonal", torch.diagonal, T.diagonal, view=True)
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal at ``offset`` of the (dim1, dim2) matrices, appended as the last dim."""
    r = len(input.tshape)
    d1, d2 = canonical_dim(dim1, r), canonical_dim(dim2, r)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = _to_end(input, d1, d2)
    R, C = x.tshape[-2:]
    batch = x.tshape[:-2]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    n = max(0, min(R - r0, C - c0))
    if n == 0:
        return prims.full(batch + (0,), 0, input.tdtype)
    nb = len(batch)
    sub = prims.slice_(x, [0] * nb + [r0, c0], list(batch) + [r0 + n, c0 + n])
    flat = prims.reshape(sub, batch + (n * n,))
    return prims.slice_(flat, [0] * (nb + 1), list(batch) + [n * n], [1] * nb + [n + 1])


@register("linalg_diagonal", torch.linalg.diagonal, view=True)
def linalg_diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return diagonal(A, offset, dim1, dim2)


def _diag_values(src, rows, cols, offset):
    """(rows, cols) matrices with src[..., k] at (k, k+offset) (k = row or col index)."""
    batch, n = src.tshape[:-1], src.tshape[-1]
    r = prims.iota((rows, cols), torch.int64, 0)
    c = prims.iota((rows, cols), torch.int64, 1)
    mask = prims.elementwise("eq", prims.elementwise("sub", c, r),
                             prims.full((rows, cols), offset, torch.int64))
    k = r if offset >= 0 else c
    k = prims.elementwise("minimum", k, prims.full((rows, cols), max(n - 1, 0), torch.int64))
    if n == 0:
        vals = prims.full(batch + (rows, cols), 0, src.tdtype)
    else:
        vals = prims.take(src, k, len(batch))
    shape = batch + (rows, cols)
    return expand_to(mask, shape), vals


@register("diag_embed", torch.diag_embed, T.diag_embed)
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    n = input.tshape[-1]
    m = n + abs(offset)
    mask, vals = _diag_values(input, m, m, offset)
    out = prims.where(mask, vals, prims.full(vals.tshape, 0, input.tdtype))
    r = len(out.tshape)
    d1, d2 = canonical_dim(dim1, r), canonical_dim(dim2, r)
    return S.movedim(out, (r - 2, r - 1), (d1, d2))


@register("diag", torch.diag, T.diag)
def diag(input, diagonal=0):
    if len(input.tshape) == 1:
        return diag_embed(input, diagonal, 0, 1)
    if len(input.tshape) != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{len(input.tshape)}D")
    return _diagonal_copy(input, diagonal, 0, 1)


def _diagonal_copy(input, offset=0, dim1=0, dim2=1):
    return diagonal(input, offset, dim1, dim2)


register("diagonal_copy", torch.diagonal_copy)(_diagonal_copy)


@register("diagflat", torch.diagflat, T.diagflat)
def diagflat(input, offset=0):
    return diag_embed(prims.reshape(input, (math.prod(input.tshape),)), offset, 0, 1)


@register("diagonal_scatter", torch.diagonal_scatter, T.diagonal_scatter)
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    r = len(input.tshape)
    d1, d2 = canonical_dim(dim1, r), canonical_dim(dim2, r)
    x = _to_end(input, d1, d2)
    R, C = x.tshape[-2:]
    mask, vals = _diag_values(prims.convert_element_type(src, input.tdtype), R, C, offset)
    out = prims.where(mask, vals, x)
    return S.movedim(out, (r - 2, r - 1), (d1, d2))


@register("trace", torch.trace, T.trace)
def trace(input):
    from thunder_mlir.frontend.symbols.reduction import sum as rsum
    if len(input.tshape) != 2:
        raise RuntimeError("trace: expected a matrix")
    return rsum(diagonal(input, 0, 0, 1))
