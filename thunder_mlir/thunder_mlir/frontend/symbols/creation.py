"""Factory symbols: arange, zeros/ones/full/empty and ``*_like``, tensor literals, eye.

Output shape and dtype come from running the same torch factory on the meta device, so
defaults (``torch.get_default_dtype()``, integer ``arange``, ``full`` dtype inference)
are torch's own. ``empty`` is zero-filled: uninitialized memory has no functional meaning.
"""

from __future__ import annotations

import torch

from thunder_mlir.errors import DynamicShapeFallback
from thunder_mlir.ir import prims
from thunder_mlir.ir.symbolic import SymInt, has_symint as _has_symint
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbols.registry import BY_NAME, T, register


def _meta_factory(fn, *args, **kwargs) -> torch.Tensor:
    if _has_symint(args):
        raise DynamicShapeFallback(f"{getattr(fn, '__name__', fn)} with these arguments "
                                   "and symbolic sizes")
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout",
                                                             "requires_grad", "memory_format")}
    with torch._C.DisableTorchFunction():
        return fn(*args, device="meta", **kwargs)


def _check_device(device):
    from thunder_mlir.frontend.tracing import current_trace
    trace = current_trace()
    if device is not None and trace.device_type(device) != trace.device.type:
        raise NotImplementedError(f"creating a tensor on {device} inside a program that runs on "
                                  f"{trace.device}")


def _symbolic_shape(size) -> tuple | None:
    """A factory's size arguments as a shape, when a size is symbolic (ir/symbolic.py)."""
    shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    if not _has_symint(shape):
        return None
    return tuple(s if type(s) is SymInt else int(s) for s in shape)


def _filled(fn, value):
    def impl(*size, **kwargs):
        _check_device(kwargs.get("device"))
        shape = _symbolic_shape(size)
        if shape is not None and set(kwargs) <= {"dtype", "device", "layout", "pin_memory",
                                                 "requires_grad"}:
            return prims.full(shape, value, kwargs.get("dtype") or torch.get_default_dtype())
        m = _meta_factory(fn, *size, **kwargs)
        return prims.full(m.shape, value, m.dtype)
    return impl


register("zeros", torch.zeros)(_filled(torch.zeros, 0))
register("ones", torch.ones)(_filled(torch.ones, 1))
register("empty", torch.empty)(_filled(torch.empty, 0))


@register("full", torch.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=False,
         requires_grad=False):
    _check_device(device)
    m = _meta_factory(torch.full, size, fill_value, dtype=dtype)
    return prims.full(m.shape, fill_value, m.dtype)


def _like(value):
    def impl(input, *, dtype=None, layout=None, device=None, requires_grad=False,
             memory_format=None, pin_memory=False):
        return prims.full(input.tshape, value, dtype or input.tdtype)
    return impl


register("zeros_like", torch.zeros_like)(_like(0))
register("ones_like", torch.ones_like)(_like(1))
register("empty_like", torch.empty_like)(_like(0))


@register("full_like", torch.full_like)
def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=None, pin_memory=False):
    return prims.full(input.tshape, fill_value, dtype or input.tdtype)


def _new(value):
    def impl(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
             pin_memory=False, **kw):
        if set(kw) - {"size"} or (size and kw):  # eager's error for another keyword
            raise TypeError(f"got an unexpected keyword argument {next(iter(kw))!r}")
        size = (kw["size"],) if kw else size  # x.new_ones(size=(2, 3))
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return prims.full(tuple(shape), value, dtype or self.tdtype)
    return impl


register("new_zeros", T.new_zeros)(_new(0))
register("new_ones", T.new_ones)(_new(1))
register("new_empty", T.new_empty)(_new(0))


@register("new_full", T.new_full)
def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False,
             layout=None, pin_memory=False):
    return prims.full(tuple(size), fill_value, dtype or self.tdtype)


@register("arange", torch.arange)
def arange(*args, start=None, end=None, step=None, dtype=None, device=None, layout=None,
           requires_grad=False, pin_memory=False, out=None):
    """torch.arange(end), (start, end[, step]), positional or by keyword."""
    _check_device(device)
    if len(args) == 1 and end is None:
        args = (0, args[0])
    nums = list(args) + [None] * (3 - len(args))
    start = nums[0] if start is None else start
    end = nums[1] if end is None else end
    step = (nums[2] if nums[2] is not None else 1) if step is None else step
    start = 0 if start is None else start
    n, out_dtype = _arange_size(start, end, step, dtype)
    if n is None and _has_symint((start, end, step)) and \
            all(type(v) in (int, SymInt) for v in (start, end, step)) and \
            type(step) is int and step > 0 and (dtype is None or not dtype.is_floating_point):
        n, out_dtype = -((start - end) // step), dtype or torch.int64  # symbolic length
        if n < 0:
            raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    if n is None:  # unusual arguments: ask torch's meta kernel
        m = _meta_factory(torch.arange, start, end, step, dtype=dtype)
        n, out_dtype = m.shape[0], m.dtype
    if out_dtype.is_floating_point:
        idx = prims.iota((n,), torch.float64, 0)
        vals = prims.elementwise("add", prims.elementwise(
            "mul", idx, prims.full((n,), step, torch.float64)), prims.full((n,), start, torch.float64))
        return prims.convert_element_type(vals, out_dtype)
    # integer dtypes: ATen converts start and step to int64 first (truncating), the length
    # comes from the unconverted values
    start, step = int(start), int(step)
    idx = prims.iota((n,), torch.int64, 0)
    if step != 1:
        idx = prims.elementwise("mul", idx, prims.full((n,), step, torch.int64))
    if start != 0:
        idx = prims.elementwise("add", idx, prims.full((n,), start, torch.int64))
    return prims.convert_element_type(idx, out_dtype)


def _arange_size(start, end, step, dtype):
    """(length, dtype) of ``torch.arange(start, end, step, dtype=dtype)`` for Python number
    arguments, by ATen's formula ``ceil((end - start) / step)``; (None, None) for anything
    else. (On the meta device, float arguments go through torch._refs.arange, whose first
    call imports torch._dynamo: seconds.)"""
    vals = (start, end, step)
    if not all(type(v) in (int, float) for v in vals):
        return None, None
    any_float = any(type(v) is float for v in vals)
    out_dtype = dtype or (torch.get_default_dtype() if any_float else torch.int64)
    if any_float and not out_dtype.is_floating_point:
        return None, None
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if any_float:
        import math

        n = math.ceil((end - start) / step)
    else:
        n = -((start - end) // step)  # exact integer ceil division
    if n < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    return n, out_dtype


def _literal(data, dtype=None):
    if any(type(x) is TensorProxy for x in _flatten(data)):
        if type(data) is TensorProxy:
            return data if dtype is None else prims.convert_element_type(data, dtype)
        stack = BY_NAME["ltorch.stack"]  # shape.py's symbol (shape.py builds on this one)
        return stack([_literal(d, dtype) for d in data])
    with torch._C.DisableTorchFunction():
        t = torch.tensor(data, dtype=dtype)
    if t.numel() == 1 or (t.numel() > 0 and bool((t == t.reshape(-1)[0]).all())):
        return prims.full(t.shape, t.reshape(-1)[0].item(), t.dtype)
    return prims.constant(t)


def index_constant(values) -> TensorProxy:
    """A 1-d int64 constant holding ``values`` (Python ints): gather indices."""
    return _literal(list(values), torch.int64) if len(values) else prims.full((0,), 0, torch.int64)


def _flatten(data):
    if isinstance(data, (list, tuple)):
        for d in data:
            yield from _flatten(d)
    else:
        yield data


@register("tensor", torch.tensor, torch.as_tensor)
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    _check_device(device)
    return _literal(data, dtype)


@register("scalar_tensor", torch.scalar_tensor)
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=False,
                  requires_grad=False):
    return prims.full((), s, dtype or torch.get_default_dtype())


@register("eye", torch.eye)
def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=False,
        requires_grad=False):
    m = n if m is None else m
    r = prims.iota((n, m), torch.int64, 0)
    c = prims.iota((n, m), torch.int64, 1)
    return prims.convert_element_type(prims.elementwise("eq", r, c),
                                      dtype or torch.get_default_dtype())


def _tri(input, diagonal, lower: bool):
    *_, rows, cols = input.tshape
    r = prims.iota((rows, cols), torch.int64, 0)
    c = prims.iota((rows, cols), torch.int64, 1)
    d = prims.elementwise("sub", c, r)
    diag = prims.full((rows, cols), diagonal, torch.int64)
    keep = prims.elementwise("le" if lower else "ge", d, diag)
    from thunder_mlir.frontend.lang import expand_to
    keep = expand_to(keep, input.tshape)
    return prims.where(keep, input, prims.full(input.tshape, 0, input.tdtype))


@register("tril", torch.tril, T.tril)
def tril(input, diagonal=0):
    return _tri(input, diagonal, True)


@register("triu", torch.triu, T.triu)
def triu(input, diagonal=0):
    return _tri(input, diagonal, False)


@register("new_tensor", T.new_tensor)
def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    _check_device(device)
    return _literal(data, dtype or self.tdtype)


@register("device", torch.device, composite=False)
def device(*args, **kwargs):
    """``torch.device(...)`` written in the program: a Python value, not an op."""
    with torch._C.DisableTorchFunction():
        return torch.device(*args, **kwargs)
