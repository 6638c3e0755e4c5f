"""The symbol table: torch callables -> Symbols.

``register`` is the one way in. Every torch spelling of an op (``torch.add``,
``Tensor.add``, ``Tensor.__add__``) maps to the same Symbol, so ``last_traces`` shows one
name per op whichever spelling the user wrote.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import TraceError
from ..proxy import TensorProxy
from ..symbol import Symbol
from ..tracing import current_trace

SYMBOLS: dict[Callable, Symbol] = {}
BY_NAME: dict[str, Symbol] = {}


def register(name: str, *torch_fns: Callable, composite: bool = True):
    """Decorator: make ``impl`` the Symbol ``ltorch.<name>`` for ``torch_fns``.

    With ``composite=False`` the impl runs inline (no composite op): for pure metadata or
    aliasing helpers whose output is one of their inputs or another symbol's output.
    """
    def deco(impl: Callable):
        sym = Symbol(f"ltorch.{name}", impl) if composite else _Inline(f"ltorch.{name}", impl)
        BY_NAME[sym.name] = sym
        for fn in torch_fns:
            if fn in SYMBOLS and SYMBOLS[fn] is not sym:
                raise RuntimeError(f"{fn} registered twice ({SYMBOLS[fn].name}, {sym.name})")
            SYMBOLS[fn] = sym
        return sym
    return deco


class _Inline(Symbol):
    def __call__(self, *args, **kwargs):
        return self.impl(*args, **kwargs)


def register_inplace(functional: Symbol, *torch_fns: Callable) -> None:
    """``Tensor.op_(self, ...)``: compute ``functional`` and rebind ``self`` to the result.

    A proxy is rebound in place (its SSA value replaced), so later uses of the same Python
    object see the update, as torch's in-place semantics require. In-place updates of
    program inputs are refused (they would need a write-back to the caller's tensor).
    """
    def impl(self, *args, **kwargs):
        if type(self) is not TensorProxy:
            raise TypeError(f"{functional.name}_: expected a tensor, got {type(self).__name__}")
        trace = current_trace()
        if self.value.owner == trace.entry:
            from ..tracing import describe_frame, user_frame

            raise NotImplementedError(
                f"{describe_frame(user_frame())}\n  in-place {functional.name}_ on an input "
                "of the jitted function: thunder_mlir does not modify its inputs. Use the "
                "out-of-place form and return the result.")
        out = functional(self, *args, **kwargs)
        from .. import prims

        out = prims.convert_element_type(out, self.tdtype)
        if out.tshape != self.tshape:
            raise RuntimeError(f"output with shape {list(out.tshape)} doesn't match the "
                               f"broadcast shape {list(self.tshape)}")
        self.value = out.value
        return self

    inplace = _Inline(functional.name + "_", impl)
    for fn in torch_fns:
        SYMBOLS[fn] = inplace


def unsupported(msg: str):
    raise TraceError(msg)


T = torch.Tensor
