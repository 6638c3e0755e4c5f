"""Mixture-of-experts ops: grouped matrix multiplies (``torch._grouped_mm``,
``torch.nn.functional.grouped_mm``), ``torch.histc`` and the XLA computation of
``torch.bincount`` for a given output length.

**grouped_mm.** StableHLO has no ragged dot, and XLA:CPU refuses ``chlo.ragged_dot``
(checked with jax 0.10.2 forcing its ``chlo.ragged_dot`` lowering on CPU: "HLO opcode
`ragged-dot` is not supported by XLA:CPU ThunkEmitter"). jax itself lowers
``lax.ragged_dot`` on CPU densely (``_ragged_dot_general_impl`` in
jax/_src/lax/lax.py: a group axis of size G, a mask ``start_g <= i < end_g`` and one
``dot_general``), G times the multiply-adds of eager's loop (every token through every
expert). Here, with static sizes, the product is computed in *tiles* (the tiled ragged
product of MegaBlocks, Gale et al. 2022): each group's positions of the jagged dim are
placed into tiles of up to ``TILE`` rows, and one batched ``dot_general`` multiplies each
tile by its own group's matrix, about ``(M + G*TILE)*K*N`` multiply-adds for M rows
(:func:`_rows_tiled`, :func:`_contraction_tiled`). With symbolic sizes (the tile count is
a function of them) the dense form remains (:func:`_dense`). Both keep eager's meaning
where jax's is not exact:

* the offsets give each position of the jagged dim an *owner*: the last group whose slice
  contains it, with ``at::slice``'s clamping, exactly the groups the kernel's loop writes
  last (aten/src/ATen/native/GroupedMMUtils.h, ``_grouped_mm_fallback``: ``mm_out`` into
  ``out.slice(0, start, end)`` per group, ``start`` the previous offset);
* a row (2d x 3d; columns for 3d x 2d) is multiplied by its owner's matrix only (a tile
  holds one group's rows; the dense form selects the owner's product), never by a 0/1
  mask: a non-finite value in another group's weights cannot reach it as ``0 * inf =
  nan``. A jagged *contracting* dim (2d x 2d) pads or masks both operands (0 * 0).

Each output element of 2d x 3d and 3d x 2d is then the same K-long sum of products as
eager's ``mm``, in XLA's accumulation order (float32 accumulation for 16-bit inputs,
rounded once, as ATen's CPU ``mm``); 2d x 2d sums a group's tiles in float32, rounded once.

Positions owned by no group (past ``offs[-1]``) are 0 here; eager leaves them
uninitialized (``at::empty_strided``), so no program may read them.

The VJP (``transforms/vjp_composites.py``, ``ltorch.grouped_mm``) is derivatives.yaml's:
``_grouped_mm_mat1_backward`` = ``grouped_mm(grad, mat2^T, offs)``,
``_grouped_mm_mat2_backward`` = ``grouped_mm(mat1^T, grad, offs)``, each a grouped
product of another form (2d x 3d <-> 2d x 2d, 3d x 2d <-> 2d x 2d), computed by
:func:`grouped_product`.
"""

from __future__ import annotations

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register

__all__ = ["grouped_mm", "grouped_product", "histc", "bincount", "bincount_length",
           "bincount_sized"]

_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_SCALAR_NAME = {torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
                torch.bfloat16: "BFloat16"}


def _e(name, *xs):
    return prims.elementwise(name, *xs)


def _full_like(t: TensorProxy, v) -> TensorProxy:
    return prims.full(t.tshape, v, t.tdtype)


# ---------------------------------------------------------------- grouped_mm
def _slice_bounds(offs: TensorProxy, n: int) -> tuple[TensorProxy, TensorProxy]:
    """(start, end), int64 (G,): the slice ``[start_g, end_g)`` of a dim of size ``n`` that
    group g writes, with at::slice's bounds rules (a negative bound wraps once, then start
    is clamped to [0, n] and end to [start, n]); ``start_g`` is the raw previous offset (0
    for the first group), as the kernel's loop passes it."""
    e = prims.convert_element_type(offs, torch.int64)
    g = e.tshape[0]
    zero = prims.full((1,), 0, torch.int64)
    s = prims.concatenate([zero, prims.slice_(e, [0], [g - 1])], 0) if g > 1 else zero
    size = _full_like(e, n)

    def wrap(v):
        return prims.where(_e("lt", v, _full_like(v, 0)), _e("add", v, size), v)

    s = _e("minimum", _e("maximum", wrap(s), _full_like(s, 0)), size)
    e = _e("minimum", _e("maximum", wrap(e), s), size)
    return s, e


def _cover(offs: TensorProxy, n: int) -> TensorProxy:
    """bool (G, n): position i of the jagged dim lies in group g's slice."""
    s, e = _slice_bounds(offs, n)
    g = s.tshape[0]
    pos = prims.iota((g, n), torch.int64, 1)
    s2 = prims.broadcast_in_dim(s, (g, n), [0])
    e2 = prims.broadcast_in_dim(e, (g, n), [0])
    return _e("bitwise_and", _e("ge", pos, s2), _e("lt", pos, e2))


def _owner_index(offs: TensorProxy, n: int) -> TensorProxy:
    """int64 (n,): the last group whose slice holds position i, i.e. the group whose
    ``mm_out`` the kernel writes there last; -1 for positions no slice holds."""
    cover = _cover(offs, n)
    g = cover.tshape[0]
    gid = prims.iota((g, n), torch.int64, 0)
    return prims.reduce("reduce_max", prims.where(cover, gid, _full_like(gid, -1)), [0])


def _owner(offs: TensorProxy, n: int) -> TensorProxy:
    """bool (G, n): group g owns position i (:func:`_owner_index`)."""
    g = offs.tshape[0]
    return _e("eq", prims.iota((g, n), torch.int64, 0),
              prims.broadcast_in_dim(_owner_index(offs, n), (g, n), [1]))


def _select_groups(prod: TensorProxy, mask: TensorProxy, mask_dims) -> TensorProxy:
    """sum over the leading group axis of ``prod`` (G, ...) of ``where(mask, prod, 0)``: the
    owner's value exactly (one term, the others exact zeros)."""
    m = prims.broadcast_in_dim(mask, prod.tshape, mask_dims)
    picked = prims.where(m, prod, _full_like(prod, 0))
    return prims.reduce("reduce_sum", picked, [0])


# ------------------------------------------------------- grouped_mm in tiles
TILE = 32  # rows per tile at most (tile_size); 32 measured fastest of 16-128 for MoE sizes


def tile_size(rows: int, groups: int) -> int:
    """Rows per tile for ``rows`` positions of the jagged dim split into ``groups``: TILE,
    or the smallest power of two >= rows / groups where that is smaller (small groups
    waste less padding)."""
    per_group = -(-rows // max(groups, 1))
    return max(1, min(TILE, 1 << max(per_group - 1, 0).bit_length()))


def _int_div(x: TensorProxy, d: int) -> TensorProxy:
    return _e("div", x, _full_like(x, d))  # x >= 0: truncation is floor


def _tile_groups(tiles: TensorProxy, nt: int) -> tuple[TensorProxy, TensorProxy]:
    """(ends, group), int64: ``ends`` (G,) the cumulative tile counts, ``group`` (nt,) the
    group of each tile, G for tiles past ``ends[-1]`` (no group's)."""
    g = tiles.tshape[0]
    ends = prims.cumsum(tiles, 0)
    past = _e("le", prims.broadcast_in_dim(ends, (g, nt), [0]),
              prims.iota((g, nt), torch.int64, 1))
    return ends, prims.reduce("reduce_sum", prims.convert_element_type(past, torch.int64), [0])


def _rows_tiled(a: TensorProxy, b: TensorProxy, offs: TensorProxy, t: int) -> TensorProxy:
    """2d x 3d: a (M, K), b (G, K, N) -> (M, N), row i ``a[i] @ b[owner(i)]``, 0 where no
    group owns row i (the owner as :func:`_owner_index`, for any offsets).

    The rows each group owns are placed, in order, into tiles of ``t`` rows, a group's rows
    filling ``ceil(count / t)`` whole tiles (the rest of its last tile: zero rows); at most
    ``(M + G*(t-1)) // t`` tiles. One batched ``dot_general`` multiplies each tile by its
    group's (gathered) weights, and each row is gathered back from its tile: the row's
    K-long sum of products is the one the dense form computes, at ``(M + G*t)*K*N``
    multiply-adds instead of ``G*M*K*N`` (the tiled ragged product of MegaBlocks, Gale et
    al. 2022, "MegaBlocks: Efficient Sparse Training with Mixture-of-Experts")."""
    m, k = a.tshape
    g, _, n = b.tshape
    nt = (m + g * (t - 1)) // t
    i64 = torch.int64
    owner = _owner_index(offs, m)  # (M,)
    hot = _e("eq", prims.iota((g, m), i64, 0), prims.broadcast_in_dim(owner, (g, m), [1]))
    hot_i = prims.convert_element_type(hot, i64)
    # rank of row i among its group's rows (0-based), and the rows of each group
    rank = prims.reduce("reduce_sum", prims.where(hot, prims.cumsum(hot_i, 1),
                                                  _full_like(hot_i, 0)), [0])
    rank = _e("sub", rank, _full_like(rank, 1))
    count = prims.reduce("reduce_sum", hot_i, [1])  # (G,)
    tiles = _int_div(_e("add", count, _full_like(count, t - 1)), t)
    ends, group = _tile_groups(tiles, nt)
    first = _e("sub", ends, tiles)  # each group's first tile
    owned = _e("ge", owner, _full_like(owner, 0))
    own = prims.where(owned, owner, _full_like(owner, 0))
    pos = _e("add", _e("mul", prims.take(first, own, 0), _full_like(own, t)), rank)
    pos = prims.where(owned, pos, _full_like(pos, nt * t))  # unowned: out of range
    # the row each tile slot reads (M: the appended zero row)
    slot_row = prims.scatter(prims.full((nt * t,), m, i64), prims.reshape(pos, (m, 1)),
                             prims.iota((m,), i64, 0), "set")
    a_pad = prims.concatenate([a, prims.full((1, k), 0, a.tdtype)], 0)
    x = prims.reshape(prims.take(a_pad, slot_row, 0), (nt, t, k))
    w = prims.take(b, prims.where(_e("lt", group, _full_like(group, g)), group,
                                  _full_like(group, g - 1)), 0)  # (nt, K, N)
    y = prims.reshape(prims.dot_general(x, w, [0], [0], [2], [1]), (nt * t, n))
    out = prims.take(y, _e("minimum", pos, _full_like(pos, nt * t - 1)), 0)
    return prims.where(prims.broadcast_in_dim(owned, (m, n), [0]), out, _full_like(out, 0))


def _contraction_tiled(a: TensorProxy, b: TensorProxy, offs: TensorProxy,
                       t: int) -> TensorProxy:
    """2d x 2d: a (M, K), b (K, N) -> (G, M, N), ``out[g] = a[:, s_g:e_g] @ b[s_g:e_g]``.

    Each group's slice of the contracting dim is cut into tiles of ``t`` positions (the
    rest of its last tile: zero columns of a and zero rows of b, products 0 * 0); one
    batched ``dot_general`` gives each tile's (M, N) partial product, in float32 for 16-bit
    inputs (their products are exact in float32), and a scatter-add sums a group's tiles
    in order, rounded once to the dtype: float32 accumulation, as ATen's ``mm``.

    At most ``(K + G*(t-1)) // t`` tiles, enough when the slices' lengths sum to at most
    K, which holds for every nondecreasing ``offs`` (torch's documented contract:
    "monotonically increasing", torch.nn.functional.grouped_mm). Decreasing offsets give
    overlapping slices; a group whose tiles do not all fit gets NaN (never a wrong number;
    eager's CPU loop computes such slices)."""
    m, k = a.tshape
    n = b.tshape[1]
    g = offs.tshape[0]
    nt = (k + g * (t - 1)) // t
    i64 = torch.int64
    s, e = _slice_bounds(offs, k)
    length = _e("sub", e, s)
    tiles = _int_div(_e("add", length, _full_like(length, t - 1)), t)
    ends, group = _tile_groups(tiles, nt)
    used = _e("lt", group, _full_like(group, g))
    gi = prims.where(used, group, _full_like(group, g - 1))
    first = _e("sub", ends, tiles)

    def per_tile(v):  # (G,) -> (nt, t), the value of each tile's group
        return prims.broadcast_in_dim(prims.take(v, gi, 0), (nt, t), [0])

    tile = prims.iota((nt, t), i64, 0)
    pos = _e("add", _e("add", per_tile(s), _e("mul", _e("sub", tile, per_tile(first)),
                                               prims.full((nt, t), t, i64))),
             prims.iota((nt, t), i64, 1))
    valid = _e("bitwise_and", prims.broadcast_in_dim(used, (nt, t), [0]),
               _e("lt", pos, per_tile(e)))
    pos = prims.reshape(prims.where(valid, pos, prims.full((nt, t), k, i64)), (nt * t,))
    wide = torch.float32 if a.tdtype in (torch.bfloat16, torch.float16) else a.tdtype

    def gather(v):  # (K, X) -> (nt, t, X), position K: the appended zero row
        v = prims.convert_element_type(v, wide)
        v = prims.concatenate([v, prims.full((1, v.tshape[1]), 0, wide)], 0)
        return prims.reshape(prims.take(v, pos, 0), (nt, t, v.tshape[1]))

    x = gather(prims.transpose(a, [1, 0]))  # (nt, t, M)
    y = gather(b)  # (nt, t, N)
    part = prims.dot_general(x, y, [0], [0], [1], [1])  # (nt, M, N)
    # tiles of no group: index G, out of range, skipped by the scatter
    out = prims.index_add(prims.full((g, m, n), 0, wide), group, part, 0)
    lost = prims.broadcast_in_dim(_e("gt", ends, _full_like(ends, nt)), (g, m, n), [0])
    out = prims.where(lost, _full_like(out, float("nan")), out)
    return prims.convert_element_type(out, a.tdtype)


def grouped_product(a: TensorProxy, b: TensorProxy, offs: TensorProxy | None,
                    tiled: bool = True) -> TensorProxy:
    """The grouped product of ``a`` and ``b`` (same floating dtype) in prims, no checks:

    * 2d x 3d, a (M, K), b (G, K, N), offs (G,): (M, N); row i is ``a[i] @ b[g]`` for the
      group g owning row i;
    * 3d x 2d, a (G, M, K), b (K, N): (M, N); column j is ``a[g] @ b[:, j]`` for the owner g
      of column j;
    * 2d x 2d, a (M, K), b (K, N): (G, M, N); ``out[g] = a[:, s_g:e_g] @ b[s_g:e_g]``;
    * 3d x 3d, offs None: ``bmm``.

    Positions owned by no group are 0. With static sizes (and ``tiled``), in tiles
    (:func:`_rows_tiled`, :func:`_contraction_tiled`; 3d x 2d is the transpose of the
    2d x 3d product of the transposes); otherwise the dense forms (:func:`_dense`). See
    the module docstring for the sources."""
    ra, rb = len(a.tshape), len(b.tshape)
    if ra == 3 and rb == 3:
        return prims.dot_general(a, b, [0], [0], [2], [1])
    g = offs.tshape[0]
    if g == 0:  # no group writes anything
        shape = (a.tshape[0], b.tshape[1]) if ra == 2 and rb == 2 else \
            (a.tshape[-2] if ra == 3 else a.tshape[0], b.tshape[-1])
        return prims.full(((0,) + shape) if ra == 2 and rb == 2 else shape, 0, a.tdtype)
    if not tiled or not all(type(s) is int for s in (*a.tshape, *b.tshape)):
        return _dense(a, b, offs)
    if ra == 2 and rb == 3:
        return _rows_tiled(a, b, offs, tile_size(a.tshape[0], g))
    if ra == 3 and rb == 2:
        out = _rows_tiled(prims.transpose(b, [1, 0]), prims.transpose(a, [0, 2, 1]), offs,
                          tile_size(b.tshape[1], g))
        return prims.transpose(out, [1, 0])
    return _contraction_tiled(a, b, offs, tile_size(a.tshape[1], g))


def _dense(a: TensorProxy, b: TensorProxy, offs: TensorProxy) -> TensorProxy:
    """:func:`grouped_product` of the offset forms, every group over every position (G
    times the multiply-adds): the owner's product selected, or both operands masked for
    a jagged contraction (0 * 0, never 0 * inf). Sizes may be symbolic."""
    ra, rb = len(a.tshape), len(b.tshape)
    g = offs.tshape[0]
    if ra == 2 and rb == 3:
        m = a.tshape[0]
        prod = prims.dot_general(b, a, [], [], [1], [1])  # (G, N, M)
        prod = prims.transpose(prod, [0, 2, 1])  # (G, M, N)
        return _select_groups(prod, _owner(offs, m), [0, 1])
    if ra == 3 and rb == 2:
        n = b.tshape[1]
        prod = prims.dot_general(a, b, [], [], [2], [0])  # (G, M, N)
        return _select_groups(prod, _owner(offs, n), [0, 2])
    m, k = a.tshape
    n = b.tshape[1]
    cover = _cover(offs, k)  # (G, K)
    am = prims.where(prims.broadcast_in_dim(cover, (g, m, k), [0, 2]),
                     prims.broadcast_in_dim(a, (g, m, k), [1, 2]),
                     prims.full((g, m, k), 0, a.tdtype))
    bm = prims.where(prims.broadcast_in_dim(cover, (g, k, n), [0, 1]),
                     prims.broadcast_in_dim(b, (g, k, n), [1, 2]),
                     prims.full((g, k, n), 0, b.tdtype))
    return prims.dot_general(am, bm, [0], [0], [2], [1])


@register("grouped_mm", torch._grouped_mm, torch.nn.functional.grouped_mm)
def grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None)``.

    Shapes (G groups): 2d x 3d (M, K) x (G, K, N) -> (M, N) with offs (G,); 3d x 2d
    (G, M, K) x (K, N) -> (M, N) with offs (G,); 2d x 2d (M, K) x (K, N) -> (G, M, N) with
    offs (G,); 3d x 3d (G, M, K) x (G, K, N) -> (G, M, N) without offs. Dtypes: float32,
    bfloat16, float16; offs int32; the result has mat_a's dtype.

    Raises eager's RuntimeErrors (aten/src/ATen/native/GroupedMMUtils.h,
    ``_grouped_mm_validate_inputs``, ``_resolve_grouped_mm_out_dtype``,
    ``create_grouped_gemm_output_tensor``) for dtypes, ranks, contraction sizes, offs
    presence/dtype/rank, group counts, bias, and an out_dtype other than mat_a's. Not
    checked: the kernel's 16-byte stride alignment, a property of eager's memory layout
    that a traced tensor does not have (the XLA result is the product eager computes on
    aligned inputs). Computed by :func:`grouped_product`.
    """
    for name, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        if m.tdtype not in _GROUPED_DTYPES:
            raise RuntimeError(f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got "
                               f"{_SCALAR_NAME.get(m.tdtype, m.tdtype)}")
    ra, rb = len(mat_a.tshape), len(mat_b.tshape)
    if ra not in (2, 3):
        raise RuntimeError("mat_a has to be 2 or 3d")
    if rb not in (2, 3):
        raise RuntimeError("mat_b has to be 2 or 3d")
    if (ra == 3 or rb == 3) and mat_a.tshape[-1] != mat_b.tshape[-2]:
        raise RuntimeError("contraction dimension of mat_a and mat_b must match")
    if (offs is not None) != (ra == 2 or rb == 2):
        raise RuntimeError("Have to provide offsets if there is a 2d matrix, or no offset if "
                           "both matrices are 3d")
    if offs is not None:
        if len(offs.tshape) != 1:
            raise RuntimeError("offs has to be 1D")
        if offs.tdtype != torch.int32:
            raise RuntimeError("Offsets have to be int32")
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    if out_dtype is not None and out_dtype != mat_a.tdtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    if ra == 2 and rb == 3 and offs.tshape[0] != mat_b.tshape[0]:
        raise RuntimeError("matrix batch sizes have to match")
    if ra == 3 and rb == 2 and offs.tshape[0] != mat_a.tshape[0]:
        raise RuntimeError("matrix batch sizes have to match")
    if ra == 3 and rb == 3 and mat_a.tshape[0] != mat_b.tshape[0]:
        raise RuntimeError("batched dimension has to match")
    if ra == 2 and rb == 2 and mat_a.tshape[1] != mat_b.tshape[0]:
        # eager slices both by the same offsets; sizes that differ give its mm's error
        raise Fallback("2d x 2d grouped_mm with different jagged sizes")
    if mat_a.tdtype != mat_b.tdtype:
        raise Fallback(f"grouped_mm of {mat_a.tdtype} and {mat_b.tdtype}")
    return grouped_product(mat_a, mat_b, offs)


# --------------------------------------------------------------------- histc
def _as_dtype(v: float, dtype: torch.dtype) -> float:
    """The Python number ``v`` converted as ATen's ``Scalar::to<scalar_t>`` does (double ->
    float -> 16-bit: c10's BFloat16/Half constructors take a float)."""
    t = torch.tensor(v, dtype=torch.float64)
    if dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)
    return t.to(dtype).item()


# 2**p: above it, counting 1s in the dtype (eager's per-thread accumulation) saturates
_EXACT_COUNT = {torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8, torch.float32: 2 ** 24,
                torch.float64: 2 ** 53}


@register("histc", torch.histc, T.histc)
def histc(input, bins=100, min=0, max=0):
    """``torch.histc(input, bins=100, min=0, max=0)``: float (bins,) of input's dtype,
    counts of the values in ``bins`` equal-width bins over [min, max]; not differentiable
    (the result does not require grad, as eager's).

    The rule is ATen's CPU kernel (aten/src/ATen/native/cpu/HistogramKernel.cpp,
    ``LINEAR_INTERPOLATION``; edges from Histogram.cpp ``histc_select_outer_bin_edges`` and
    ``linspace``): with ``lo``, ``hi`` min and max in the input dtype, a value x with
    ``lo <= x <= hi`` (NaN never) goes to bin ``trunc((x - lo) * bins / (hi - lo))``,
    computed in the input dtype one rounded operation at a time (c10's 16-bit operators
    round each result), and bin ``bins`` becomes ``bins - 1`` (the last bin includes its
    right edge); other values are ignored. Counts are exact integers converted once.

    Falls back to torch (where eager's result is not a static function of the values):
    ``min == max`` (the range is the data's aminmax, and eager raises when it is not
    finite), non-number min/max, invalid arguments (eager raises its own error),
    non-floating inputs (eager: "histogram_cpu" not implemented), and inputs with more
    values than the dtype counts exactly (2**8 for bfloat16, 2**11 for float16, 2**24 for
    float32): eager accumulates counts in the input dtype per thread, which saturates, a
    result that depends on the thread split.
    """
    dt = input.tdtype
    if not dt.is_floating_point:
        raise Fallback(f"histc of {dt}: eager raises (histogram_cpu not implemented)")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (min, max)) \
            or not isinstance(bins, int) or isinstance(bins, bool):
        raise Fallback("histc with non-number bins/min/max")
    lo_d, hi_d = float(min), float(max)
    if lo_d == hi_d:
        raise Fallback("histc with min == max takes its range from the values (aminmax) and "
                       "raises when they are not finite: a data-dependent range")
    import math

    if not (math.isfinite(lo_d) and math.isfinite(hi_d)) or not lo_d < hi_d or bins <= 0:
        raise Fallback("histc with an invalid range or bin count: eager raises")
    n = 1
    for s in input.tshape:
        n *= s
    if n > _EXACT_COUNT[dt]:
        raise Fallback(f"histc of {n} {dt} values: eager's per-thread counts in {dt} saturate")
    lo, hi = _as_dtype(lo_d, dt), _as_dtype(hi_d, dt)
    # (hi - lo) and the bin count in the dtype, rounded as the kernel's input_t arithmetic
    width = (torch.tensor(hi, dtype=dt) - torch.tensor(lo, dtype=dt)).item()
    nb = torch.tensor(bins, dtype=torch.int64).to(
        torch.float32 if dt in (torch.bfloat16, torch.float16) else dt).to(dt).item()
    if width == 0:
        raise Fallback("histc whose range rounds to one value in the input dtype")
    x = prims.reshape(prims.stop_gradient(input), (n,))
    inside = _e("bitwise_and", _e("ge", x, _full_like(x, lo)), _e("le", x, _full_like(x, hi)))
    t = _e("div", _e("mul", _e("sub", x, _full_like(x, lo)), _full_like(x, nb)),
           _full_like(x, width))
    pos = prims.convert_element_type(prims.where(inside, t, _full_like(t, 0)), torch.int64)
    pos = prims.where(_e("eq", pos, _full_like(pos, bins)), _full_like(pos, bins - 1), pos)
    # ignored values get index `bins`, out of range: no bin counts them
    pos = prims.where(inside, pos, _full_like(pos, bins))
    return prims.convert_element_type(_count(pos, bins, None, torch.int64), dt)


# ------------------------------------------------------------------ bincount
_ONE_HOT_MAX = 1 << 20


def _count(idx: TensorProxy, length, updates: TensorProxy | None,
           dtype: torch.dtype) -> TensorProxy:
    """(length,) of ``dtype``: ``out[v]`` = the number of i with ``idx[i] == v`` (or the
    sum of ``updates[i]`` over them); indices outside [0, length) are skipped. A
    scatter-add (stablehlo.scatter), or, where a size is symbolic (the scatter prim has no
    lowering for symbolic sizes) or the (n, length) table is small, a one-hot comparison
    summed over n: exact for counts, a different summation order for weights."""
    n = idx.tshape[0]
    idx = prims.convert_element_type(idx, torch.int64)
    if type(n) is int and type(length) is int and n * length > _ONE_HOT_MAX:
        upd = prims.full((n,), 1, dtype) if updates is None else updates
        return prims.scatter(prims.full((length,), 0, dtype), prims.reshape(idx, (n, 1)), upd,
                             "add")
    hot = _e("eq", prims.broadcast_in_dim(idx, (n, length), [0]),
             prims.iota((n, length), torch.int64, 1))
    if updates is None:
        return prims.reduce("reduce_sum", prims.convert_element_type(hot, dtype), [0])
    w = prims.broadcast_in_dim(updates, (n, length), [0])
    return prims.reduce("reduce_sum", prims.where(hot, w, prims.full((n, length), 0, dtype)),
                        [0])


def bincount_length(input: TensorProxy, minlength: int = 0) -> TensorProxy:
    """int64 0-d: the length of ``torch.bincount(input, minlength=minlength)``,
    ``max(max(input) + 1, minlength)`` (``minlength`` for an empty input), computed in the
    program. This is the value a data-dependent size (an unbacked size) takes at run time;
    the program that produces it comes before the one that uses it
    (aten/src/ATen/native/SummaryOps.cpp, ``_bincount_cpu_template``)."""
    x = prims.convert_element_type(input, torch.int64)
    ml = prims.full((), minlength, torch.int64)
    if input.tshape[0] == 0:
        return ml
    top = _e("add", prims.reduce("reduce_max", x, [0]), prims.full((), 1, torch.int64))
    return _e("maximum", top, ml)


def bincount_sized(input: TensorProxy, weights: TensorProxy | None, length) -> TensorProxy:
    """``torch.bincount(input, weights)`` given its output length ``length`` (an int, or a
    size symbol of the data-dependent-size machinery): ``out[v]`` = the number of
    occurrences of v in ``input`` (int64), or the sum of ``weights`` at them: float32 for
    float32 weights, float64 for any other weights (SummaryOps.cpp, ``_bincount_cpu``).

    ``input``: 1-d, integral, values in [0, length); a value outside is skipped
    (stablehlo.scatter's rule) where eager raises "bincount only supports 1-d non-negative
    integral inputs." for a negative value, so a caller must pass eager's length. Not
    differentiable in ``weights``: a backward that reaches it raises eager's error. Sums
    are in XLA's order (eager adds in input order). ``length`` may be a size symbol: the
    count is then a one-hot comparison (``_count``), which lowers with symbolic sizes."""
    if weights is None:
        return _count(input, length, None, torch.int64)
    dt = torch.float32 if weights.tdtype == torch.float32 else torch.float64
    w = prims.no_derivative(prims.convert_element_type(weights, dt),
                            "the derivative for 'bincount' is not implemented.")
    return _count(input, length, w, dt)


@register("bincount", torch.bincount, T.bincount)
def bincount(input, weights=None, minlength=0):
    """``torch.bincount(input, weights=None, minlength=0)``: eager's argument errors
    (SummaryOps.cpp); an empty input has the static length ``minlength`` and is computed
    here. Any other input has the data-dependent length ``max(max(input) + 1, minlength)``:
    the call falls back to torch (the run-time check of its shape then names it) until the
    data-dependent-size machinery gives :func:`bincount_sized` a size from
    :func:`bincount_length`."""
    if len(input.tshape) != 1 or input.tdtype.is_floating_point or input.tdtype.is_complex \
            or input.tdtype == torch.bool:
        raise Fallback("bincount of a non-1-d or non-integral input: eager raises")
    if not isinstance(minlength, int) or minlength < 0:
        raise Fallback("bincount with an invalid minlength: eager raises")
    if weights is not None and (len(weights.tshape) != 1
                                or weights.tshape[0] != input.tshape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if input.tshape[0] == 0:  # eager: at::zeros({minlength}, kLong), whatever the weights
        return prims.full((minlength,), 0, torch.int64)
    raise Fallback("bincount's output length max(input) + 1 depends on the values "
                   "(a data-dependent size)")
