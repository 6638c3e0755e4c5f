"""TensorProxy: the stand-in for a torch.Tensor while a program is traced.

A proxy *is* a ``torch.Tensor`` (a storage-less wrapper subclass, as in toolchain.md §8), so
``isinstance(x, torch.Tensor)`` checks in user and Hugging Face code pass, and it can stand
in for parameters under ``torch.func.functional_call``. It holds the SSA value it stands
for and a meta tensor with its metadata. Every torch call that sees a proxy reaches the
frontend's dispatch (frontend/dispatch.py, registered here with ``register_dispatch`` so
that the ir layer names no frontend module) through ``__torch_function__``; anything that
escapes to ATen dispatch is a bug and raises.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch_mlir import ir

Dispatch = Callable[[Callable, tuple, dict], Any]
_dispatch: list[Dispatch] = []


def register_dispatch(fn: Dispatch) -> None:
    """Set the function that handles every torch call on a proxy (and, while tracing, every
    torch call): the frontend's ``dispatch``, registered when frontend/dispatch.py is
    imported."""
    _dispatch[:] = [fn]


class TensorProxy(torch.Tensor):
    """A traced tensor: an ``ir.Value`` of type ``tensor<shape x dtype>`` plus metadata.

    Attributes: ``value`` (the MLIR SSA value), ``shape`` (torch.Size), ``dtype``
    (torch.dtype), ``device`` (torch.device of the real tensors it stands for),
    ``ndim``, ``requires_grad``. Proxies exist only while a trace is being built.
    """

    value: ir.Value
    tshape: tuple[int, ...]
    tdtype: torch.dtype
    tdevice: torch.device

    @staticmethod
    def __new__(cls, value: ir.Value, shape, dtype: torch.dtype, device: torch.device,
                requires_grad: bool = False):
        shape = tuple(shape)
        if any(type(s) is not int for s in shape) or any(s < 0 for s in shape):
            # symbolic sizes (ir/symbolic.py): the wrapper holds the traced call's sizes;
            # metadata queries read ``tshape`` (frontend/dispatch.py). A negative size is
            # an IR ``?`` whose expression is unknown here.
            from thunder_mlir.ir.symbolic import hints

            concrete = hints(shape)
        else:
            concrete = shape
        r = torch.Tensor._make_wrapper_subclass(
            cls, concrete, dtype=dtype, device=device, requires_grad=requires_grad)
        r.value = value
        # Plain attributes: reading them does not go through __torch_function__.
        r.tshape = shape
        r.tdtype = dtype
        r.tdevice = device
        return r

    def __init__(self, *args, **kwargs):
        pass

    @property
    def meta(self) -> torch.Tensor:
        """A meta-device tensor of the same shape and dtype, for running torch meta kernels."""
        if any(type(s) is not int for s in self.tshape):
            from thunder_mlir.errors import DynamicShapeFallback

            raise DynamicShapeFallback("a torch meta kernel (the torch fallback executor, "
                                       "view tracking) cannot take symbolic sizes")
        with torch._C.DisableTorchFunction():  # modes too: symbols may be called directly
            return torch.empty(self.tshape, dtype=self.tdtype, device="meta")

    @property
    def dtype_meta(self) -> torch.Tensor:
        """A meta tensor of the same dtype and rank (sizes: the traced call's), for rules
        that read only those (type promotion)."""
        with torch._C.DisableTorchFunction():
            return torch.empty(self.tshape_hint(), dtype=self.tdtype,
                               device="meta")

    def tshape_hint(self) -> tuple[int, ...]:
        from thunder_mlir.ir.symbolic import hints

        return hints(self.tshape)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if not _dispatch:
            raise RuntimeError(f"{getattr(func, '__name__', func)} was called on a TensorProxy, "
                               "but no tracer is loaded (import thunder_mlir)")
        return _dispatch[0](func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _dispatch and hasattr(_dispatch[0], "refuse_aten"):  # a user-facing refusal
            _dispatch[0].refuse_aten(func)  # (``Tensor.set_``, which skips torch-function)
        raise RuntimeError(
            f"internal error: {func} reached ATen dispatch with a TensorProxy; the "
            "thunder_mlir symbol table should have intercepted it at the torch-function level")

    def __repr__(self, *, tensor_contents=None):
        with torch._C.DisableTorchFunctionSubclass():
            return f"TensorProxy(shape={self.tshape}, dtype={self.tdtype}, device={self.tdevice})"


# Tensor methods taking sizes, whose C argument parser rejects a symbolic size
# (ir/symbolic.SymInt is not an int) before __torch_function__ is consulted: with a SymInt
# among the arguments they go to dispatch directly, as __torch_function__ would.
_SIZE_METHODS = ("view", "reshape", "expand", "new_zeros", "new_ones", "new_empty",
                 "new_full", "repeat", "narrow", "unflatten", "split", "tile")


def _size_method(name: str):
    base = getattr(torch.Tensor, name)

    def method(self, *args, **kwargs):
        from thunder_mlir.ir.symbolic import SymInt

        def has_sym(v):
            return type(v) is SymInt or (isinstance(v, (tuple, list)) and
                                         any(type(x) is SymInt for x in v))
        if any(has_sym(a) for a in args) or any(has_sym(v) for v in kwargs.values()):
            return _dispatch[0](base, (self, *args), kwargs)
        return base(self, *args, **kwargs)
    method.__name__ = name
    return method


for _name in _SIZE_METHODS:
    setattr(TensorProxy, _name, _size_method(_name))


def is_proxy(x) -> bool:
    return type(x) is TensorProxy
