"""In-place variants: ``Tensor.op_`` for every functional symbol ``op``, and ``copy_``.

ATen defines ``self.op_(*args)`` as ``op(self, *args)`` written into ``self``: the result's
dtype must be castable to ``self``'s (``torch.can_cast``) and its shape must be ``self``'s
(TensorIterator's checks for in-place ops, aten/src/ATen/TensorIterator.cpp). So one rule,
``registry.register_inplace`` (the functional symbol, then
``functionalization.write_inplace``), gives every in-place variant whose functional form
has a symbol; ``register_all`` applies it to each ``Tensor`` method ``<name>_`` (and the
augmented operators ``__i<op>__``) not registered by hand, after every symbol module has
registered its functional forms. An in-place variant without such a symbol runs on the
torch fallback, which returns what it wrote.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunder_mlir.frontend.functionalization import assign, check_overlap
from thunder_mlir.frontend.lang import expand_to
from thunder_mlir.frontend.metadata_writes import INPLACE_VIEWS, restride
from thunder_mlir.frontend.symbols.registry import SYMBOLS, T, _Inline, register_inplace
from thunder_mlir.ir import prims
from thunder_mlir.ir.proxy import TensorProxy

# In-place methods whose meaning is not "the functional op, written into self": they
# change self's shape (squeeze_, t_), draw differently (bernoulli_(p) fills with draws of
# p, torch.bernoulli(x) draws with probabilities x), or check more than TensorIterator
# does (float_power_ refuses a result dtype other than self's).
_NOT_FUNCTIONAL_WRITES = {
    "squeeze_", "unsqueeze_", "t_", "transpose_", "swapaxes_", "swapdims_", "as_strided_",
    "resize_", "resize_as_", "set_", "detach_", "requires_grad_", "float_power_",
    "bernoulli_", "normal_", "random_", "exponential_", "geometric_", "cauchy_",
    "log_normal_", "dropout_", "alpha_dropout_", "feature_dropout_",
    "feature_alpha_dropout_", "rrelu_",
}
# augmented assignment operators and the binary operator they update with
_AUGMENTED = {"__iand__": "__and__", "__ior__": "__or__", "__ixor__": "__xor__",
              "__ilshift__": "__lshift__", "__irshift__": "__rshift__",
              "__imod__": "__mod__", "__ifloordiv__": "__floordiv__"}


def register_all() -> list[str]:
    """Register the in-place variant of every functional symbol that has none yet; returns
    the method names registered (``tests/test_ops.py`` checks a sample against eager)."""
    done = []
    for owner in (T, torch, F):  # Tensor.relu_, torch.relu_, F.relu_
        names = [n for n in dir(owner) if n.endswith("_") and not n.endswith("__")
                 and not n.startswith("_")]
        pairs = [(n, n[:-1]) for n in names if n not in _NOT_FUNCTIONAL_WRITES]
        if owner is T:
            pairs += list(_AUGMENTED.items())
        for name, functional in pairs:
            fn, base = getattr(owner, name, None), getattr(owner, functional, None)
            if fn is None or not callable(fn) or fn in SYMBOLS or base not in SYMBOLS:
                continue
            register_inplace(SYMBOLS[base], fn)
            done.append(name if owner is T else f"{owner.__name__}.{name}")
    return done


def copy_(self, src, non_blocking=False):
    """``Tensor.copy_``: ``self`` takes ``src`` converted to its dtype (any cast, as
    eager's copy) and broadcast to its shape. Raises eager's RuntimeError when ``src`` does
    not broadcast to ``self``'s shape."""
    if type(self) is not TensorProxy:
        raise TypeError(f"copy_: expected a tensor, got {type(self).__name__}")
    if type(src) is not TensorProxy:
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    shape, got = tuple(self.tshape), tuple(src.tshape)
    if len(got) > len(shape) or not all(a == b or a == 1 for a, b in zip(reversed(got),
                                                                         reversed(shape))):
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast "
                           f"shape {list(got)}" if len(got) <= len(shape) else
                           f"The size of tensor a ({shape[-1] if shape else 1}) must match "
                           f"the size of tensor b ({got[-1]}) at non-singleton dimension "
                           f"{len(got) - 1}")
    check_overlap(self, src)
    assign(self, expand_to(prims.convert_element_type(src, self.tdtype), shape))
    return self


SYMBOLS[T.copy_] = _Inline("ltorch.copy_", copy_)


def _inplace_view(op):
    def impl(self, *args, **kwargs):
        if type(self) is not TensorProxy:
            raise TypeError(f"{op.__name__}: expected a tensor, got {type(self).__name__}")
        return restride(self, op, args, kwargs)
    return impl


for _op in INPLACE_VIEWS:  # t_, transpose_, squeeze_, ...: metadata_writes.py
    SYMBOLS[_op] = _Inline(f"ltorch.{_op.__name__}", _inplace_view(_op))


def _refuse_storage_change(what: str, why: str):
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    raise NotImplementedError(f"{describe_frame(user_frame())}\n  {what}: {why}")


def set_(self, source=None, *args, **kwargs):
    """``x.set_(...)``: refused (NotImplementedError naming the line). Eager makes ``x``
    share ``source``'s storage (or an empty one), so later writes to either reach the
    other; thunder_mlir's values cannot be rebound to another tensor's memory."""
    _refuse_storage_change(
        "set_() is not supported", "eager makes the tensor share another tensor's storage, "
        "which thunder_mlir's traced values cannot express. Use the other tensor itself "
        "(x = source), or copy its values (x.copy_(source)).")


def resize_(self, *size, **kwargs):
    """``x.resize_(size)`` / ``x.resize_as_(other)``: to the same shape, ``x``; a tensor the
    program computed made smaller, the torch executor (its leading elements, as eager's);
    refused (NotImplementedError naming the line) where eager's result has elements it
    never wrote (a larger size: uninitialized memory) or the caller's tensor would change
    its shape (an input)."""
    if type(self) is not TensorProxy:
        raise TypeError(f"resize_: expected a tensor, got {type(self).__name__}")
    other = size[0] if size and type(size[0]) is TensorProxy else None
    shape = tuple(other.tshape) if other is not None else tuple(
        size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size))
        else size) if size else tuple(kwargs.get("size", ()))
    if shape == tuple(self.tshape):
        return self
    from thunder_mlir.errors import Fallback
    from thunder_mlir.frontend.tracing import current_trace

    n_old, n_new = 1, 1
    for d in self.tshape:
        n_old *= d
    for d in shape:
        n_new *= d
    if any(self is p for p in current_trace().inputs):
        _refuse_storage_change("resize_ of an input", "the caller's tensor would change its "
                               "shape, which thunder_mlir does not write back. Resize it "
                               "before the call, or return x.reshape(...) / a new tensor.")
    if n_new > n_old:
        _refuse_storage_change("resize_ to more elements", "eager's new elements are "
                               "uninitialized memory. Use torch.zeros(...) and copy into it.")
    raise Fallback("resize_ to fewer elements: the torch executor")


SYMBOLS[T.set_] = _Inline("ltorch.set_", set_)
SYMBOLS[T.resize_] = _Inline("ltorch.resize_", resize_)
SYMBOLS[T.resize_as_] = _Inline("ltorch.resize_as_", resize_)
INPLACE_VARIANTS = register_all()
