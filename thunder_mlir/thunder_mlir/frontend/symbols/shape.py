"""Shape symbols: views and reshapes, permutations, concatenation, splitting, dtype casts.

Views are functional here (a view op yields a new value); aliasing between a view and its
base only matters for in-place updates, which ``register_inplace`` restricts.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from thunder_mlir.ir import prims
from thunder_mlir.frontend.lang import canonical_dim, expand_to
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import T, register


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


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
    return prims.transpose(input, [canonical_dim(d, r) for d in dims])


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


@register("t", torch.t, T.t, T.T.__get__, view=True)
def t(input):
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


@register("detach", T.detach, torch.detach, T.data.__get__, composite=False, view=True)
def detach(input):
    return _same_value(input)  # shares memory with `input`, like torch's detach


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
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
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


@register("narrow", torch.narrow, T.narrow, view=True)
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
    if device is not None and torch.device(device).type != input.tdevice.type:
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
