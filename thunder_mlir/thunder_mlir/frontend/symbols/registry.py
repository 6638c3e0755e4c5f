"""The symbol table: torch callables -> Symbols.

``register`` is the one way in. Every torch spelling of an op (``torch.add``,
``Tensor.add``, ``Tensor.__add__``) maps to the same Symbol, so ``last_traces`` shows one
name per op whichever spelling the user wrote.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import optree
import torch

from thunder_mlir.errors import Fallback, TraceError
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.aliasing import mark_views
from thunder_mlir.frontend.functionalization import check_overlap, write_inplace
from thunder_mlir.frontend.symbol import Symbol
from thunder_mlir.frontend.tracing import current_trace

SYMBOLS: dict[Callable, Symbol] = {}
BY_NAME: dict[str, Symbol] = {}


def register(name: str, *torch_fns: Callable, composite: bool = True, view: bool = False,
             inplace_flag: bool = False, opmath: bool = False,
             tensor_scalars: tuple[str, ...] = ()):
    """Decorator: make ``impl`` the Symbol ``ltorch.<name>`` for ``torch_fns``.

    With ``composite=False`` the impl runs inline (no composite op): for pure metadata or
    aliasing helpers whose output is one of their inputs or another symbol's output.
    ``view=True`` marks torch view ops (their outputs alias the first argument): an
    in-place update of a view is written into its base, and one of a base is read by its
    views (frontend/functionalization.py).
    An op with an ``inplace`` argument (``F.relu(x, inplace=True)``; ``inplace_flag=True``
    says so for an impl that takes it through ``**kwargs``) also writes its result into its
    first argument when that argument is true (``write_inplace``).
    ``opmath=True``: ATen computes the op in one CPU kernel whose arithmetic is in float32
    for float16/bfloat16 inputs (``at::opmath_type``), rounding once at the output; the
    decomposition then does the same (``with_opmath``).
    ``tensor_scalars``: the parameters where the impl computes with 0-d tensors given for
    numbers (``Symbol.tensor_scalars``).
    """
    def deco(impl: Callable):
        if opmath:
            impl = with_opmath(impl)
        cls = Symbol if composite else _Inline
        if view:
            cls = _ViewSymbol if composite else _InlineView
        if inplace_flag or "inplace" in inspect.signature(impl).parameters:
            cls = _InplaceFlagSymbol  # (F.relu(x, inplace=True) writes x)
        sym = cls(f"ltorch.{name}", impl, frozenset(tensor_scalars))
        BY_NAME[sym.name] = sym
        for fn in torch_fns:
            if fn in SYMBOLS and SYMBOLS[fn] is not sym:
                raise RuntimeError(f"{fn} registered twice ({SYMBOLS[fn].name}, {sym.name})")
            SYMBOLS[fn] = sym
        return sym
    return deco


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def with_opmath(impl: Callable) -> Callable:
    """``impl`` computing in float32 when its floating-point tensor arguments all have one
    16-bit dtype: those arguments are converted to float32 (exactly), and float32 results
    are rounded back to that dtype once. Calls with mixed float dtypes (where promotion
    decides the result dtype) run ``impl`` unchanged. Mirrors ATen's CPU kernels, which
    load 16-bit floats into ``at::opmath_type`` (float32) and round each output once."""
    from thunder_mlir.ir import prims

    @functools.wraps(impl)
    def wrapped(*args, **kwargs):
        floats = {x.tdtype for x in optree.tree_leaves((args, kwargs), none_is_leaf=True)
                  if type(x) is TensorProxy and x.tdtype.is_floating_point}
        if len(floats) != 1 or (low := next(iter(floats))) not in _LOW_PRECISION:
            return impl(*args, **kwargs)
        up = lambda x: prims.convert_element_type(x, torch.float32) \
            if type(x) is TensorProxy and x.tdtype is low else x  # noqa: E731
        out = impl(*optree.tree_map(up, args, none_is_leaf=True),
                   **optree.tree_map(up, kwargs, none_is_leaf=True))
        down = lambda y: prims.convert_element_type(y, low) \
            if type(y) is TensorProxy and y.tdtype is torch.float32 else y  # noqa: E731
        return optree.tree_map(down, out, none_is_leaf=True)
    return wrapped


class _Inline(Symbol):
    def __call__(self, *args, **kwargs):
        return self.impl(*args, **kwargs)


class _ViewSymbol(Symbol):
    def __call__(self, *args, **kwargs):
        return mark_views(args[0] if args else None, super().__call__(*args, **kwargs))


class _InlineView(_Inline):
    def __call__(self, *args, **kwargs):
        return mark_views(args[0] if args else None, self.impl(*args, **kwargs))


class _InplaceFlagSymbol(Symbol):
    def __call__(self, *args, **kwargs):
        try:
            inplace = self.signature.bind(*args, **kwargs).arguments.get("inplace", False)
        except TypeError:
            inplace = False  # emit_composite reports the bad call
        out = super().__call__(*args, **kwargs)
        if inplace and type(args[0]) is TensorProxy and type(out) is TensorProxy:
            return write_inplace(args[0], out, self.name)
        return out


def register_inplace(functional: Symbol, *torch_fns: Callable) -> None:
    """``Tensor.op_(self, ...)``: compute ``functional`` and rebind ``self`` to the result
    (``write_inplace``)."""
    def impl(self, *args, **kwargs):
        if type(self) is not TensorProxy:
            raise TypeError(f"{functional.name}_: expected a tensor, got {type(self).__name__}")
        check_overlap(self, (args, kwargs))
        out = functional(self, *args, **kwargs)
        if out.tdtype is torch.bool and self.tdtype is not torch.bool and any(
                type(t) is TensorProxy and t.requires_grad
                for t in optree.tree_leaves((self, args, kwargs), none_is_leaf=True)):
            # eager's x.le_(y) where x or y requires grad has a zero derivative for both
            # (derivatives.yaml), where the bool result has none: ATen runs it
            raise Fallback(f"{functional.name}_ of a tensor that requires grad")
        return write_inplace(self, out, functional.name + "_")

    inplace = _Inline(functional.name + "_", impl)
    for fn in torch_fns:
        SYMBOLS[fn] = inplace


def unsupported(msg: str):
    raise TraceError(msg)


T = torch.Tensor
