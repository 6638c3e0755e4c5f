"""torch.linalg without iterative factorizations: vecdot, multi_dot, matrix_power, vander,
norm/matrix_norm (non-spectral orders), Cholesky (stablehlo.cholesky) and triangular
solves (stablehlo.triangular_solve), with cholesky_solve/cholesky_inverse built on them.

Semantics: the torch.linalg documentation of each function; batch dims broadcast as there.
SVD/eigen-based orders (2, -2, 'nuc') and complex inputs run on the torch fallback.
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.symbols.elementwise import mul
from thunder_mlir.frontend.symbols.linalg import matmul
from thunder_mlir.frontend.symbols.reduction import amax, amin, sum as rsum, vector_norm


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


# ------------------------------------------------------------ Cholesky, solves
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
    batch = tuple(torch.broadcast_shapes(a.tshape[:-2], b.tshape[:-2]))
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
