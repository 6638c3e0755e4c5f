"""Shape symbols: views and reshapes, permutations, concatenation, stacking and splitting,
``*_copy`` forms, roll/rot90/tile/repeat_interleave, pixel shuffles, padding, dtype casts,
and metadata functions (numel, is_floating_point, set_grad_enabled).

Views are functional here (a view op yields a new value); aliasing between a view and its
base only matters for in-place updates, which ``register_inplace`` restricts.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend import lang
from thunder_mlir.ir.symbolic import SymInt
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register
from thunder_mlir.frontend.tracing import current_trace
import torch.nn.functional as F
from thunder_mlir.errors import Fallback
from thunder_mlir.frontend.symbols.registry import BY_NAME, register_inplace
from thunder_mlir.frontend.symbols.creation import index_constant


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = shape[0]
    return tuple(s if type(s) is SymInt else int(s) for s in shape)


def infer_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    """Resolve one ``-1`` in ``shape`` against ``numel`` (torch.Tensor.view rules)."""
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


@register("reshape", torch.reshape, T.reshape, T.view, view=True)
def reshape(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise NotImplementedError("Tensor.view(dtype) (a bitcast) is not supported")
    return prims.reshape(input, infer_shape(_shape_arg(shape), math.prod(input.tshape)))


@register("view_as", T.view_as, T.reshape_as, view=True)
def view_as(input, other):
    return prims.reshape(input, other.tshape)


@register("flatten", torch.flatten, T.flatten, view=True)
def flatten(input, start_dim=0, end_dim=-1):
    r = len(input.tshape)
    if r == 0:
        return prims.reshape(input, (1,))
    s, e = canonical_dim(start_dim, r), canonical_dim(end_dim, r)
    if s == e:  # (eager returns the tensor itself: ATen's flatten)
        return input
    mid = 1
    for d in input.tshape[s:e + 1]:
        mid *= d
    return prims.reshape(input, input.tshape[:s] + (mid,) + input.tshape[e + 1:])


@register("unflatten", torch.unflatten, T.unflatten, view=True)
def unflatten(input, dim, sizes):
    d = canonical_dim(dim, len(input.tshape))
    sizes = infer_shape(sizes, input.tshape[d])
    return prims.reshape(input, input.tshape[:d] + tuple(sizes) + input.tshape[d + 1:])


@register("permute", torch.permute, T.permute, view=True)
def permute(input, *dims):
    dims = _shape_arg(dims)
    r = len(input.tshape)
    if len(dims) != r:  # (eager's checks and words: ATen's permute)
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does "
                           "not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {r} is not equal to len(dims) = {len(dims)}")
    perm = [canonical_dim(d, r) for d in dims]
    if len(set(perm)) != r:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return prims.transpose(input, perm)


@register("transpose", torch.transpose, T.transpose, torch.swapaxes, T.swapaxes,
          torch.swapdims, T.swapdims, view=True)
def transpose(input, dim0, dim1):
    r = len(input.tshape)
    perm = list(range(r))
    if r == 0:
        return input
    a, b = canonical_dim(dim0, r), canonical_dim(dim1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return prims.transpose(input, perm)


@register("t", torch.t, T.t, view=True)
def t(input):
    r = len(input.tshape)
    if r > 2:  # (eager's check: ATen's t)
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {r}D")
    return T_property(input)


@register("T", T.T.__get__, view=True)
def T_property(input):
    """``x.T``: the dims reversed (deprecated by torch above 2 dims, still run)."""
    r = len(input.tshape)
    if r < 2:
        return input
    return prims.transpose(input, list(range(r))[::-1])


@register("mT", T.mT.__get__, view=True)
def mT(input):
    return transpose(input, -2, -1)


@register("movedim", torch.movedim, T.movedim, torch.moveaxis, T.moveaxis, view=True)
def movedim(input, source, destination):
    r = len(input.tshape)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [canonical_dim(d, r) for d in src]
    dst = [canonical_dim(d, r) for d in dst]
    perm = [-1] * r
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(r) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return prims.transpose(input, perm)


@register("unsqueeze", torch.unsqueeze, T.unsqueeze, view=True)
def unsqueeze(input, dim):
    d = canonical_dim(dim, len(input.tshape) + 1)
    return prims.reshape(input, input.tshape[:d] + (1,) + input.tshape[d:])


@register("squeeze", torch.squeeze, T.squeeze, view=True)
def squeeze(input, dim=None):
    r = len(input.tshape)
    if dim is None:
        dims = range(r)
    else:
        dims = [canonical_dim(d, r) for d in ([dim] if isinstance(dim, int) else dim)]
    shape = tuple(s for i, s in enumerate(input.tshape) if not (i in dims and s == 1))
    return prims.reshape(input, shape)


@register("expand", T.expand, view=True)
def expand(input, *sizes):
    sizes = _shape_arg(sizes)
    offset = len(sizes) - len(input.tshape)
    if offset < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({len(input.tshape)})")
    shape = tuple(input.tshape[i - offset] if s == -1 else s for i, s in enumerate(sizes))
    for i, s in enumerate(input.tshape):
        if s != 1 and s != shape[i + offset]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[i + offset]}) must match "
                               f"the existing size ({s}) at non-singleton dimension {i + offset}")
    return expand_to(input, shape)


@register("expand_as", T.expand_as, view=True)
def expand_as(input, other):
    return expand(input, other.tshape)


@register("broadcast_to", torch.broadcast_to, T.broadcast_to, view=True)
def broadcast_to(input, size):
    return expand(input, tuple(size))


@register("contiguous", T.contiguous, composite=False)
def contiguous(input, *args, **kwargs):
    # values are immutable SSA values: layout changes are no-ops (the same tensor). Of a
    # view, eager returns the view itself when its strides are contiguous, else a copy
    # (a new tensor, no longer an alias of the base): decided on meta tensors by
    # aliasing.view_is_contiguous
    if getattr(input, "_alias_root", None) is None:
        return input
    from thunder_mlir.frontend.aliasing import view_is_contiguous

    return input if view_is_contiguous(input) else _same_value(input)


def _same_value(input: TensorProxy) -> TensorProxy:
    return TensorProxy(input.value, input.tshape, input.tdtype, input.tdevice)


@register("clone", T.clone, torch.clone, composite=False)
def clone(input, *, memory_format=None):
    return _same_value(input)  # a new tensor: in-place updates of it must not reach `input`


@register("detach", T.detach, torch.detach, composite=False, view=True)
def detach(input):
    return _same_value(input)  # shares memory with `input`, like torch's detach


@register("data", T.data.__get__, composite=False, view=True)
def data(input):
    """``x.data``: ``x``'s memory without autograd and, unlike ``detach()``, without ``x``'s
    version counter, so eager's backward reads what was written there since
    (aliasing.note_unversioned_read). A value of its own (a stop-gradient), so that the IR
    can tell its reads from ``x``'s."""
    return prims.stop_gradient(input)


@register("cat", torch.cat, torch.concat, torch.concatenate)
def cat(tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.tshape) == 1 and t.tshape[0] == 0)] or tensors[:1]
    r = len(tensors[0].tshape)
    d = canonical_dim(dim, r)
    dtype = tensors[0].tdtype
    for x in tensors[1:]:
        dtype = torch.promote_types(dtype, x.tdtype)
    return prims.concatenate([prims.convert_element_type(x, dtype) for x in tensors], d)


@register("stack", torch.stack)
def stack(tensors, dim=0):
    d = canonical_dim(dim, len(tensors[0].tshape) + 1)
    return cat([unsqueeze(x, d) for x in tensors], d)


def _split_sizes(length: int, split_size_or_sections) -> list[int]:
    if not isinstance(split_size_or_sections, (list, tuple)):
        # (a symbolic length or piece size: the number of pieces is a Python value, so
        # both are specialized, SymInt.__int__: a guard, or a compile for static shapes)
        s, length = int(split_size_or_sections), int(length)
        return [min(s, length - i) for i in range(0, length, s)] if length else [0]
    sizes = list(split_size_or_sections)
    if sum(sizes) != length or any(s < 0 for s in sizes):
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {length} "
                           f"(input tensor's size at dimension), but got split_sizes={sizes}")
    return sizes


def _slice_along(x: TensorProxy, d: int, start: int, stop: int, step: int = 1) -> TensorProxy:
    starts = [0] * len(x.tshape)
    limits = list(x.tshape)
    strides = [1] * len(x.tshape)
    starts[d], limits[d], strides[d] = start, stop, step
    return prims.slice_(x, starts, limits, strides)


@register("split", torch.split, T.split, T.split_with_sizes, view=True)
def split(tensor, split_size_or_sections, dim=0):
    d = canonical_dim(dim, len(tensor.tshape))
    out, start = [], 0
    for s in _split_sizes(tensor.tshape[d], split_size_or_sections):
        out.append(_slice_along(tensor, d, start, start + s))
        start += s
    return tuple(out)


@register("chunk", torch.chunk, T.chunk, view=True)
def chunk(input, chunks, dim=0):
    d = canonical_dim(dim, len(input.tshape))
    n = input.tshape[d]
    size = -(-n // chunks) if n else 1
    return split(input, size, d)


@register("unbind", torch.unbind, T.unbind, view=True)
def unbind(input, dim=0):
    d = canonical_dim(dim, len(input.tshape))
    return tuple(prims.reshape(_slice_along(input, d, i, i + 1),
                               input.tshape[:d] + input.tshape[d + 1:])
                 for i in range(input.tshape[d]))


@register("narrow", torch.narrow, T.narrow, view=True, tensor_scalars=("start",))
def narrow(input, dim, start, length):
    d = canonical_dim(dim, len(input.tshape))
    if type(start) is TensorProxy:  # a 0-d tensor start: gather start + arange(length)
        n = input.tshape[d]
        s0 = prims.convert_element_type(prims.reshape(start, ()), torch.int64)
        s0 = prims.where(prims.elementwise("lt", s0, prims.full((), 0, torch.int64)),
                         prims.elementwise("add", s0, prims.full((), n, torch.int64)), s0)
        idx = prims.elementwise("add", prims.iota((length,), torch.int64, 0),
                                prims.broadcast_in_dim(s0, (length,), []))
        return prims.take(input, idx, d)
    n = input.tshape[d]
    if type(n) is int and type(start) is int and type(length) is int:  # (eager's checks)
        if not -n <= start <= n:
            raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], "
                             f"but got {start})")
        if length < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        if start % max(n, 1) + length > n if start < 0 else start + length > n:
            raise RuntimeError(f"start ({start % n if start < 0 else start}) + length "
                               f"({length}) exceeds dimension size ({n}).")
    start = start % input.tshape[d] if start < 0 else start
    return _slice_along(input, d, start, start + length)


@register("select", torch.select, T.select, view=True)
def select(input, dim, index):
    d = canonical_dim(dim, len(input.tshape))
    i = index % input.tshape[d] if index < 0 else index
    return prims.reshape(_slice_along(input, d, i, i + 1), input.tshape[:d] + input.tshape[d + 1:])


@register("flip", torch.flip, T.flip)
def flip(input, *args, dims=None):
    # torch.flip(x, (0, 1)), torch.flip(x, dims=[0]), Tensor.flip(0, 1), Tensor.flip(0)
    dims = _shape_arg(args) if dims is None else _shape_arg((dims,))
    r = len(input.tshape)
    return prims.reverse(input, sorted({canonical_dim(d, r) for d in dims}))


@register("repeat", T.repeat)
def repeat(input, *sizes):
    sizes = _shape_arg(sizes)
    x = prims.reshape(input, (1,) * (len(sizes) - len(input.tshape)) + input.tshape)
    # (s0, d0, s1, d1, ...) broadcast then merge each pair
    inter, dims = [], []
    for i, (s, d) in enumerate(zip(sizes, x.tshape)):
        inter += [s, d]
        dims.append(2 * i + 1)
    y = prims.broadcast_in_dim(x, inter, dims)
    return prims.reshape(y, tuple(s * d for s, d in zip(sizes, x.tshape)))


# --------------------------------------------------------------- dtype casts
def _to_dtype(x, dtype):
    return prims.convert_element_type(x, dtype)


@register("to", T.to, T.type)
def to(input, *args, **kwargs):
    dtype = kwargs.get("dtype")
    device = kwargs.get("device")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)):
            if isinstance(a, str) and a.startswith("torch."):
                dtype = getattr(torch, a[len("torch."):])
            else:
                device = torch.device(a)
        elif type(a) is TensorProxy:
            dtype, device = a.tdtype, a.tdevice
    if device is not None and current_trace().device_type(device) != input.tdevice.type:
        raise NotImplementedError(
            f"moving a tensor from {input.tdevice} to {device} inside a jitted function is not "
            "supported: move the inputs before the call")
    return input if dtype is None else _to_dtype(input, dtype)


def _cast(dtype):
    def impl(input, memory_format=None):
        return _to_dtype(input, dtype)
    return impl


for _n, _dt in (("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
                ("bfloat16", torch.bfloat16), ("long", torch.int64), ("int", torch.int32),
                ("short", torch.int16), ("char", torch.int8), ("byte", torch.uint8),
                ("bool", torch.bool)):
    register(_n, getattr(T, _n))(_cast(_dt))


@register("type_as", T.type_as)
def type_as(input, other):
    return _to_dtype(input, other.tdtype)


@register("cpu", T.cpu, composite=False)
def cpu(input, *args, **kwargs):
    if input.tdevice.type != "cpu":
        raise NotImplementedError("Tensor.cpu() on a non-CPU tensor inside a jitted function")
    return input


@register("diff", torch.diff, T.diff)
def diff(input, n=1, dim=-1, prepend=None, append=None):
    d = canonical_dim(dim, len(input.tshape))
    if n == 0:  # ATen returns the input as is, without prepend/append
        return input
    x = input
    if prepend is not None or append is not None:
        parts = [p if type(p) is TensorProxy else prims.full(
            input.tshape[:d] + (1,) + input.tshape[d + 1:], p, input.tdtype)
            for p in (prepend, input, append) if p is not None]
        x = cat(parts, d)
    for _ in range(n):
        m = x.tshape[d]
        if m == 0:
            break
        hi, lo = _slice_along(x, d, 1, m), _slice_along(x, d, 0, m - 1)
        if x.tdtype is torch.bool:
            x = prims.elementwise("bitwise_xor", hi, lo)
        else:
            x = prims.elementwise("sub", hi, lo)
    return x


def _opt(*fns):
    return [f for f in fns if f is not None]


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


for _name, _sym in (("expand_copy", expand), ("permute_copy", permute), ("t_copy", t),
                    ("transpose_copy", transpose), ("unsqueeze_copy", unsqueeze),
                    ("squeeze_copy", squeeze), ("unbind_copy", unbind),
                    ("split_with_sizes_copy", split), ("narrow_copy", narrow)):
    _f = getattr(torch, _name, None)
    if _f is not None:
        register(_name, *_opt(_f, getattr(T, _name, None)))(_copy_of(_sym))


@register("view_copy", torch.view_copy)
def view_copy(input, *size):
    if len(size) == 1 and isinstance(size[0], torch.dtype):
        raise Fallback("view(dtype) is a bitcast")
    return reshape(input, *size)


@register("alias_copy", torch.alias_copy)
def alias_copy(input):
    return clone(input)


@register("ravel", torch.ravel, T.ravel, view=True)  # (a copy where eager's reshape copies:
def ravel(input):                                      # aliasing._MAY_COPY)
    return prims.reshape(input, (math.prod(input.tshape),))


@register("split_with_sizes", torch.split_with_sizes, view=True)
def split_with_sizes(input, split_sizes, dim=0):
    return split(input, list(split_sizes), dim)


# ("unsafe": views that autograd does not track as views; they alias their input all the same)
register("unsafe_split", torch.unsafe_split, T.unsafe_split, view=True)(
    lambda input, split_size, dim=0: split(input, split_size, dim))
register("unsafe_chunk", torch.unsafe_chunk, T.unsafe_chunk, view=True)(
    lambda input, chunks, dim=0: chunk(input, chunks, dim))


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
    return cat(ts, 0 if len(ts[0].tshape) == 1 else 1)


@register("vstack", torch.vstack, torch.row_stack)
def vstack(tensors):
    return cat(atleast_2d(tuple(tensors)), 0)


@register("dstack", torch.dstack)
def dstack(tensors):
    return cat(atleast_3d(tuple(tensors)), 2)


@register("column_stack", torch.column_stack)
def column_stack(tensors):
    ts = [prims.reshape(t, (math.prod(t.tshape), 1)) if len(t.tshape) <= 1 else t for t in tensors]
    return cat(ts, 1)


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
    return tuple(_slice_along(input, d, a, b) for a, b in bounds)


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
    ts = list(tensors)
    if indexing == "xy" and len(ts) >= 2:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(math.prod(t.tshape) for t in ts)
    # (as ATen: each grid is ``t.view(...).expand(shape)``, through torch's view and expand
    # so that it is recorded as a view of its own input, aliasing.record_view)
    out = [T.expand(T.reshape(t, tuple(n if k == i else 1 for k, n in enumerate(shape))),
                    shape) for i, t in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2:  # as ATen: swap the inputs, then the grids back
        out[0], out[1] = out[1], out[0]
    return tuple(out)


@register("broadcast_tensors", torch.broadcast_tensors, composite=False)
def broadcast_tensors(*tensors):
    # (through torch's expand, so that each result is recorded as a view of its own input:
    # eager's results alias their inputs, aliasing.record_view)
    shape = tuple(lang.broadcast_shapes(*[t.tshape for t in tensors]))
    return tuple(T.expand(t, shape) for t in tensors)


register("fliplr", torch.fliplr, T.fliplr)(lambda input: flip(input, (1,)))
register("flipud", torch.flipud, T.flipud)(lambda input: flip(input, (0,)))


@register("sum_to_size", T.sum_to_size)
def sum_to_size(input, *size):
    from thunder_mlir.frontend.symbols.reduction import sum as rsum
    size = _shape_arg(size)
    lead = len(input.tshape) - len(size)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size)
                                if s == 1 and input.tshape[lead + i] != 1]
    if not size:  # ATen's sum_to: a 0-d target is the sum of everything
        return rsum(input)
    if not dims:  # nothing to reduce: ATen returns the tensor itself (dtype kept)
        return prims.reshape(input, size)
    return prims.reshape(rsum(input, dims, keepdim=True), size)


@register("adjoint", T.H.__get__, T.mH.__get__, T.adjoint, torch.adjoint, view=True)
def adjoint(input):
    if input.tdtype.is_complex:
        raise Fallback("complex adjoint")
    r = len(input.tshape)
    if r < 2:
        return input
    return transpose(input, -2, -1)


# --------------------------------------------------------------- roll, rot90, tile
def _roll1(x, shift, d):
    n = x.tshape[d]
    if n == 0:
        return x
    s = shift % n
    if s == 0:
        return x
    return prims.concatenate([_slice_along(x, d, n - s, n), _slice_along(x, d, 0, n - s)], d)


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
        return transpose(flip(input, (d1,)), d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return transpose(flip(input, (d0,)), d0, d1)
    return input


@register("tile", torch.tile, T.tile)
def tile(input, dims):
    dims = tuple(dims)
    if len(dims) < len(input.tshape):
        dims = (1,) * (len(input.tshape) - len(dims)) + dims
    return repeat(input, dims)


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
    if type(input.tshape[d]) is int and size > input.tshape[d]:  # (eager's checks)
        raise RuntimeError(f"maximum size for tensor at dimension {d} is "
                           f"{input.tshape[d]} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    n = (input.tshape[d] - size) // step + 1
    idx = [i * step + j for i in range(n) for j in range(size)]
    g = prims.take(input, prims.reshape(index_constant(idx), (n, size)), d)
    return movedim(g, d + 1, r)


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
        x = prims.take(x, index_constant(_pad_index(mode, n, lows[d], highs[d])), d)
    return x


register_inplace(BY_NAME["ltorch.zeros_like"], T.zero_, torch.zero_)
