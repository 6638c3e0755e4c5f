"""More shape symbols: ``*_copy`` forms, stacking/splitting helpers, diagonals, roll/rot90,
tile, padding, pixel shuffles, slice/select/diagonal scatters, and metadata functions.

Each mirrors the ``torch._refs`` decomposition of the same name (shapes, argument
defaults, error cases) and uses only the structural prims (slice, reshape, transpose,
pad, concatenate, take, where), which lower to the StableHLO ops of the same names.
"""

from __future__ import annotations

import math
import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import BY_NAME, T, register, register_inplace
from thunder_mlir.frontend.symbols import shape as S


def _opt(*fns):
    return [f for f in fns if f is not None]


def _const_index(values) -> TensorProxy:
    from thunder_mlir.frontend.symbols.creation import _literal
    return _literal(list(values), torch.int64) if len(values) else prims.full((0,), 0, torch.int64)


# ----------------------------------------------------------- metadata functions
@register("is_floating_point", torch.is_floating_point, composite=False)
def is_floating_point(input):
    return input.tdtype.is_floating_point


@register("is_complex", torch.is_complex, composite=False)
def is_complex(input):
    return input.tdtype.is_complex


@register("numel", torch.numel, composite=False)
def numel(input):
    return math.prod(input.tshape)


@register("set_grad_enabled", torch._C._set_grad_enabled, composite=False)
def set_grad_enabled(mode):
    """Grad mode is part of the cache key and the program has no autograd: apply it."""
    with torch._C.DisableTorchFunction():
        return torch._C._set_grad_enabled(mode)


# ----------------------------------------------------------------- copies
def _copy_of(sym):
    def impl(input, *args, **kwargs):
        return sym(input, *args, **kwargs)
    return impl


for _name, _sym in (("expand_copy", S.expand), ("permute_copy", S.permute), ("t_copy", S.t),
                    ("transpose_copy", S.transpose), ("unsqueeze_copy", S.unsqueeze),
                    ("squeeze_copy", S.squeeze), ("unbind_copy", S.unbind),
                    ("split_with_sizes_copy", S.split), ("narrow_copy", S.narrow)):
    _f = getattr(torch, _name, None)
    if _f is not None:
        register(_name, *_opt(_f, getattr(T, _name, None)))(_copy_of(_sym))


@register("view_copy", torch.view_copy)
def view_copy(input, *size):
    if len(size) == 1 and isinstance(size[0], torch.dtype):
        raise Fallback("view(dtype) is a bitcast")
    return S.reshape(input, *size)


@register("alias_copy", torch.alias_copy)
def alias_copy(input):
    return S.clone(input)


@register("ravel", torch.ravel, T.ravel)
def ravel(input):
    return prims.reshape(input, (math.prod(input.tshape),))


@register("split_with_sizes", torch.split_with_sizes, view=True)
def split_with_sizes(input, split_sizes, dim=0):
    return S.split(input, list(split_sizes), dim)


register("unsafe_split", torch.unsafe_split, T.unsafe_split)(
    lambda input, split_size, dim=0: S.split(input, split_size, dim))
register("unsafe_chunk", torch.unsafe_chunk, T.unsafe_chunk)(
    lambda input, chunks, dim=0: S.chunk(input, chunks, dim))


# --------------------------------------------------------------- atleast / stacks
def _atleast(n):
    def one(x):
        r = len(x.tshape)
        if r >= n:
            return x
        if n == 3 and r == 2:
            return prims.reshape(x, x.tshape + (1,))
        if n == 3 and r == 1:
            return prims.reshape(x, (1,) + x.tshape + (1,))
        return prims.reshape(x, (1,) * (n - r) + x.tshape)

    def impl(*tensors):
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            return tuple(one(t) for t in tensors[0])
        if len(tensors) == 1:
            return one(tensors[0])
        return tuple(one(t) for t in tensors)
    return impl


atleast_1d = register("atleast_1d", torch.atleast_1d, composite=False)(_atleast(1))
atleast_2d = register("atleast_2d", torch.atleast_2d, composite=False)(_atleast(2))
atleast_3d = register("atleast_3d", torch.atleast_3d, composite=False)(_atleast(3))


@register("hstack", torch.hstack)
def hstack(tensors):
    ts = atleast_1d(tuple(tensors))
    return S.cat(ts, 0 if len(ts[0].tshape) == 1 else 1)


@register("vstack", torch.vstack, torch.row_stack)
def vstack(tensors):
    return S.cat(atleast_2d(tuple(tensors)), 0)


@register("dstack", torch.dstack)
def dstack(tensors):
    return S.cat(atleast_3d(tuple(tensors)), 2)


@register("column_stack", torch.column_stack)
def column_stack(tensors):
    ts = [prims.reshape(t, (math.prod(t.tshape), 1)) if len(t.tshape) <= 1 else t for t in tensors]
    return S.cat(ts, 1)


@register("tensor_split", torch.tensor_split, T.tensor_split, view=True)
def tensor_split(input, indices_or_sections, dim=0):
    """torch.tensor_split with an int or a list of split indices (a tensor of indices whose
    values are data runs on the torch fallback)."""
    if type(indices_or_sections) is TensorProxy:
        raise Fallback("tensor_split with a tensor of indices")
    d = canonical_dim(dim, len(input.tshape))
    n = input.tshape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        bounds, acc = [], 0
        for s in sizes:
            bounds.append((acc, acc + s))
            acc += s
    else:
        idx = [int(i) for i in indices_or_sections]
        starts = [0] + idx
        stops = idx + [n]
        bounds = []
        for a, b in zip(starts, stops):
            a = min(max(a + n if a < 0 else a, 0), n)
            b = min(max(b + n if b < 0 else b, 0), n)
            bounds.append((a, max(a, b)))
    return tuple(S._slice_along(input, d, a, b) for a, b in bounds)


def _nsplit(dim_of, name):
    def impl(input, indices_or_sections):
        d = dim_of(input)
        if isinstance(indices_or_sections, int) and input.tshape[d] % indices_or_sections:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but the "
                               f"size of the dimension {input.tshape[d]} is not divisible by "
                               f"the split_size {indices_or_sections}!")
        return tensor_split(input, indices_or_sections, d)
    return impl


register("hsplit", torch.hsplit, T.hsplit, view=True)(
    _nsplit(lambda x: 0 if len(x.tshape) == 1 else 1, "hsplit"))
register("vsplit", torch.vsplit, T.vsplit, view=True)(_nsplit(lambda x: 0, "vsplit"))
register("dsplit", torch.dsplit, T.dsplit, view=True)(_nsplit(lambda x: 2, "dsplit"))


@register("meshgrid", torch.meshgrid, composite=False)
def meshgrid(*tensors, indexing=None):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [prims.reshape(t, (math.prod(t.tshape),)) for t in tensors]
    if indexing == "xy" and len(ts) >= 2:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.tshape[0] for t in ts)
    out = [prims.broadcast_in_dim(t, shape, [i]) for i, t in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2:  # as ATen: swap the inputs, then the grids back
        out[0], out[1] = out[1], out[0]
    return tuple(out)


@register("broadcast_tensors", torch.broadcast_tensors, composite=False)
def broadcast_tensors(*tensors):
    shape = tuple(torch.broadcast_shapes(*[t.tshape for t in tensors]))
    return tuple(expand_to(t, shape) for t in tensors)


register("fliplr", torch.fliplr, T.fliplr)(lambda input: S.flip(input, (1,)))
register("flipud", torch.flipud, T.flipud)(lambda input: S.flip(input, (0,)))


@register("sum_to_size", T.sum_to_size)
def sum_to_size(input, *size):
    from thunder_mlir.frontend.symbols.reduction import sum as rsum
    size = S._shape_arg(size)
    lead = len(input.tshape) - len(size)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size)
                                if s == 1 and input.tshape[lead + i] != 1]
    if not size:  # ATen's sum_to: a 0-d target is the sum of everything
        return rsum(input)
    if not dims:  # nothing to reduce: ATen returns the tensor itself (dtype kept)
        return prims.reshape(input, size)
    return prims.reshape(rsum(input, dims, keepdim=True), size)


@register("adjoint", T.H.__get__, T.mH.__get__, T.adjoint, torch.adjoint)
def adjoint(input):
    if input.tdtype.is_complex:
        raise Fallback("complex adjoint")
    r = len(input.tshape)
    if r < 2:
        return input
    return S.transpose(input, -2, -1)


# ------------------------------------------------------------------ diagonals
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


@register("linalg_diagonal", torch.linalg.diagonal)
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


# --------------------------------------------------------------- roll, rot90, tile
def _roll1(x, shift, d):
    n = x.tshape[d]
    if n == 0:
        return x
    s = shift % n
    if s == 0:
        return x
    return prims.concatenate([S._slice_along(x, d, n - s, n), S._slice_along(x, d, 0, n - s)], d)


@register("roll", torch.roll, T.roll)
def roll(input, shifts, dims=None):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        flat = prims.reshape(input, (math.prod(input.tshape),))
        return prims.reshape(_roll1(flat, shifts[0], 0), input.tshape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                           f"{len(dims)}")
    x = input
    for s, d in zip(shifts, dims):
        x = _roll1(x, s, canonical_dim(d, len(input.tshape)))
    return x


@register("rot90", torch.rot90, T.rot90)
def rot90(input, k=1, dims=(0, 1)):
    r = len(input.tshape)
    d0, d1 = canonical_dim(dims[0], r), canonical_dim(dims[1], r)
    if len(dims) != 2 or d0 == d1:
        raise RuntimeError("expected rotation dims to be different")
    k %= 4
    if k == 1:
        return S.transpose(S.flip(input, (d1,)), d0, d1)
    if k == 2:
        return S.flip(input, (d0, d1))
    if k == 3:
        return S.transpose(S.flip(input, (d0,)), d0, d1)
    return input


@register("tile", torch.tile, T.tile)
def tile(input, dims):
    dims = tuple(dims)
    if len(dims) < len(input.tshape):
        dims = (1,) * (len(input.tshape) - len(dims)) + dims
    return S.repeat(input, dims)


@register("take", torch.take, T.take)
def take(input, index):
    from thunder_mlir.frontend.symbols.indexing import _as_index_tensor
    n = math.prod(input.tshape)
    flat = prims.reshape(input, (n,))
    return prims.take(flat, _as_index_tensor(index, n), 0)


@register("unfold", T.unfold, view=True)
def unfold(input, dimension, size, step):
    r = len(input.tshape)
    if r == 0:
        return prims.reshape(input, (1,))
    d = canonical_dim(dimension, r)
    n = (input.tshape[d] - size) // step + 1
    idx = [i * step + j for i in range(n) for j in range(size)]
    g = prims.take(input, prims.reshape(_const_index(idx), (n, size)), d)
    return S.movedim(g, d + 1, r)


register("unfold_copy", torch.unfold_copy)(lambda input, dimension, size, step:
                                           unfold(input, dimension, size, step))


@register("repeat_interleave", torch.repeat_interleave, T.repeat_interleave)
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if type(repeats) is TensorProxy or repeats is None or type(input) is not TensorProxy:
        raise Fallback("repeat_interleave with tensor repeats has a data-dependent shape")
    x = input
    if dim is None:
        x, d = prims.reshape(x, (math.prod(x.tshape),)), 0
    else:
        d = canonical_dim(dim, len(x.tshape))
    shape = x.tshape
    b = prims.broadcast_in_dim(x, shape[:d + 1] + (repeats,) + shape[d + 1:],
                               list(range(d + 1)) + list(range(d + 2, len(shape) + 1)))
    return prims.reshape(b, shape[:d] + (shape[d] * repeats,) + shape[d + 1:])


# ----------------------------------------------------------------- shuffles
@register("pixel_shuffle", F.pixel_shuffle, torch.pixel_shuffle)
def pixel_shuffle(input, upscale_factor):
    r = upscale_factor
    *b, c, h, w = input.tshape
    b = tuple(b)
    x = prims.reshape(input, b + (c // (r * r), r, r, h, w))
    n = len(b)
    x = prims.transpose(x, list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
    return prims.reshape(x, b + (c // (r * r), h * r, w * r))


@register("pixel_unshuffle", F.pixel_unshuffle, torch.pixel_unshuffle)
def pixel_unshuffle(input, downscale_factor):
    r = downscale_factor
    *b, c, h, w = input.tshape
    b = tuple(b)
    x = prims.reshape(input, b + (c, h // r, r, w // r, r))
    n = len(b)
    x = prims.transpose(x, list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
    return prims.reshape(x, b + (c * r * r, h // r, w // r))


@register("channel_shuffle", F.channel_shuffle, torch.channel_shuffle)
def channel_shuffle(input, groups):
    n, c, *rest = input.tshape
    x = prims.reshape(input, (n, groups, c // groups, *rest))
    x = prims.transpose(x, [0, 2, 1] + list(range(3, len(x.tshape))))
    return prims.reshape(x, input.tshape)


# -------------------------------------------------------------------- padding
def _pad_index(mode, n, lo, hi):
    idx = []
    for j in range(-lo, n + hi):
        if mode == "reflect":
            period = 2 * (n - 1)
            k = j % period if period else 0
            idx.append(period - k if k >= n else k)
        elif mode == "replicate":
            idx.append(min(max(j, 0), n - 1))
        else:  # circular
            idx.append(j % n)
    return idx


@register("pad", F.pad, torch.constant_pad_nd)
def pad(input, pad, mode="constant", value=None):
    """F.pad: ``pad`` lists (low, high) pairs from the last dim backwards. constant:
    stablehlo.pad (negative amounts crop); reflect/replicate/circular: a gather with the
    padded positions' source indices (torch.nn.functional.pad docs)."""
    pad = list(pad)
    if isinstance(mode, (int, float)) and value is None:  # constant_pad_nd(input, pad, value)
        mode, value = "constant", mode
    r = len(input.tshape)
    if len(pad) % 2 or len(pad) // 2 > r:
        raise RuntimeError("Padding length must be divisible by 2 and at most twice the rank")
    lows, highs = [0] * r, [0] * r
    for i in range(len(pad) // 2):
        lows[r - 1 - i], highs[r - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if mode == "constant":
        v = prims.full((), 0 if value is None else value, input.tdtype)
        return prims.pad(input, v, lows, highs)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad mode {mode!r}")
    if mode == "circular" and min(pad) < 0:
        raise Fallback("circular padding with negative (cropping) amounts")
    x = input
    for d in range(r):
        if lows[d] == 0 and highs[d] == 0:
            continue
        n = x.tshape[d]
        if mode == "reflect" and (lows[d] >= n or highs[d] >= n):
            raise RuntimeError("Padding size should be less than the corresponding input "
                               "dimension")
        x = prims.take(x, _const_index(_pad_index(mode, n, lows[d], highs[d])), d)
    return x


# ------------------------------------------------------------------ scatters
@register("slice_scatter", torch.slice_scatter, T.slice_scatter)
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with input[..., start:end:step, ...] (along dim) replaced by src: src padded
    into place with stablehlo.pad (interior padding = step - 1) and selected by a mask."""
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    n = input.tshape[d]
    s, e, st = slice(start, end, step).indices(n)
    k = len(range(s, max(s, e), st))
    if k == 0:
        return input
    lows, highs, inter = [0] * r, [0] * r, [0] * r
    lows[d], inter[d] = s, st - 1
    highs[d] = n - (s + (k - 1) * st + 1)
    src = prims.convert_element_type(src, input.tdtype)
    padded = prims.pad(src, prims.full((), 0, input.tdtype), lows, highs, inter)
    mask = prims.pad(prims.full(src.tshape, True, torch.bool), prims.full((), False, torch.bool),
                     lows, highs, inter)
    return prims.where(mask, padded, input)


@register("select_scatter", torch.select_scatter, T.select_scatter)
def select_scatter(input, src, dim, index):
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    i = index + input.tshape[d] if index < 0 else index
    return slice_scatter(input, S.unsqueeze(src, d), d, i, i + 1, 1)


@register("index_fill", torch.index_fill, T.index_fill)
def index_fill(input, dim, index, value):
    from thunder_mlir.frontend.symbols.indexing import _as_index_tensor
    r = len(input.tshape)
    d = canonical_dim(dim, r)
    n = input.tshape[d] if r else 1
    idx = _as_index_tensor(prims.reshape(index, (math.prod(index.tshape),)), n)
    k = idx.tshape[0]
    pos = prims.iota((n, k), torch.int64, 0)
    hit = prims.reduce("reduce_or", prims.elementwise("eq", pos, expand_to(
        prims.reshape(idx, (1, k)), (n, k))), [1])
    mask = prims.broadcast_in_dim(hit, input.tshape, [d]) if r else prims.reshape(hit, ())
    if type(value) is TensorProxy:
        v = expand_to(prims.convert_element_type(value, input.tdtype), input.tshape)
    else:
        v = prims.full(input.tshape, value, input.tdtype)
    return prims.where(mask, v, input)


@register("fill", torch.fill)
def fill(input, value):
    if type(value) is TensorProxy:
        return expand_to(prims.convert_element_type(value, input.tdtype), input.tshape)
    return prims.full(input.tshape, value, input.tdtype)


register_inplace(BY_NAME["ltorch.zeros_like"], T.zero_, torch.zero_)
register_inplace(fill, T.fill_)
