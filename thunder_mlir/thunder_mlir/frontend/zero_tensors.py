"""ATen's ZeroTensors while tracing: zeros that no kernel reads and no op may write.

``torch._efficientzerotensor(size)`` (``aten._efficientzerotensor``, what autograd formulas
make for an undefined gradient) is a tensor with no memory: its data pointer is null and
the ``ZeroTensor`` dispatch key routes it to kernels that never read it. Eager's meaning:

* its value is zeros: ``x + z`` is ``x``;
* ops with a ZeroTensor kernel return a ZeroTensor, zeros *whatever the other operand
  holds*: ``z * x`` and ``z / x`` are 0 where ``x`` is inf or NaN, ``dot(z, x)`` is 0;
  views of it (``z[1:]``, ``z.t()``) are ZeroTensors;
* writing one raises ("ZeroTensors are immutable ...": ZeroTensorFallback.cpp).

The torch fallback runs the factory and hands XLA zeros in its place
(``torch_fallback._materialized``: DLPack of a null pointer crashed the process). A proxy
whose eager tensor is a ZeroTensor carries ``_zero_tensor``: an op reading one is replayed
on a CPU ZeroTensor and zero-filled CPU tensors for its other tensors (``propagate``), and
where eager's result is a ZeroTensor the traced result becomes zeros (an edge to the op's
own result keeps the autograd graph's shape: its gradient, eager's too, is zero); a write
into one, or through a view of one, raises eager's error (``check_write``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import optree
import torch

from thunder_mlir.ir.proxy import TensorProxy

# eager's message for a write into a ZeroTensor (aten/src/ATen/ZeroTensorFallback.cpp)
ZERO_TENSOR_WRITE = ("ZeroTensors are immutable. Please use the materialized zero tensor "
                     "obtained using .clone() if you want a mutable tensor.")


def is_zero(p) -> bool:
    """Whether traced tensor ``p`` is, in eager, a ZeroTensor (or a view of one)."""
    if type(p) is not TensorProxy:
        return False
    root = getattr(p, "_alias_root", None)
    return bool(p.__dict__.get("_zero_tensor") or
                (root is not None and root.__dict__.get("_zero_tensor")))


def reads_zero(args: tuple, kwargs: dict) -> bool:
    """Whether a call's arguments hold a traced ZeroTensor."""
    return any(is_zero(x) for x in optree.tree_leaves((args, kwargs), none_is_leaf=True))


def check_write(p: TensorProxy) -> None:
    """Raise eager's RuntimeError (at the user's line) for a write into ``p``, a ZeroTensor
    or a view of one."""
    if is_zero(p):
        from thunder_mlir.errors import TorchOpRuntimeError
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise TorchOpRuntimeError(f"{describe_frame(user_frame())}\n  {ZERO_TENSOR_WRITE}")


def _eager_stand_in(x):
    if type(x) is not TensorProxy:
        return x
    shape, dtype = tuple(int(n) for n in x.tshape), x.tdtype
    with torch._C.DisableTorchFunction():
        return torch._efficientzerotensor(shape, dtype=dtype) if is_zero(x) else \
            torch.zeros(shape, dtype=dtype)


@functools.cache
def _zero_grad_edge():
    """The composite ``ltorch.zero_grad_edge`` (the identity on ``value``; its VJP gives
    ``source`` zeros: vjp_composites.py), as ``functionalization.keep_edge`` emits it;
    defined here too, not imported, so that functionalization, which imports this module,
    is not imported back (tests/test_layers.py: no import cycles)."""
    from thunder_mlir.frontend.symbol import Symbol

    return Symbol("ltorch.zero_grad_edge", lambda value, source: value)


def propagate(func: Callable, args: tuple, kwargs: dict, out: Any) -> Any:
    """``out``, the traced result of ``func(*args, **kwargs)`` whose arguments hold a
    ZeroTensor, with each tensor that eager's call returns as a ZeroTensor replaced by
    zeros marked as one. Eager's answer comes from the call on CPU stand-ins (a ZeroTensor
    for each traced one, zeros for the other tensors); where that call fails (an op with
    no CPU kernel, symbolic sizes) ``out`` is kept as computed."""
    from thunder_mlir.frontend.symbol import emit_composite
    from thunder_mlir.ir import prims

    try:
        a, k = optree.tree_map(_eager_stand_in, (args, kwargs), none_is_leaf=True)
        with torch._C.DisableTorchFunction():
            eager = func(*a, **k)
    except Exception:  # noqa: BLE001 - no eager answer: the traced result stands
        return out
    eager_leaves = optree.tree_leaves(eager, none_is_leaf=True)
    leaves, spec = optree.tree_flatten(out, none_is_leaf=True)
    if len(eager_leaves) != len(leaves):
        return out
    for i, (e, p) in enumerate(zip(eager_leaves, leaves)):
        if type(p) is not TensorProxy or not isinstance(e, torch.Tensor) or is_zero(p):
            continue
        if e._is_zerotensor():
            value = 0
        elif func in _DIVISIONS and kwargs.get("rounding_mode") is None and e.numel() and \
                len(args) > 1 and is_zero(args[1]):
            # ATen's div_zerotensor: x / zero is full of inf (zero / zero: NaN), whatever
            # x holds (its sign, NaN): the stand-in's result is eager's
            value = e.reshape(-1)[0].item()
        else:
            continue
        filled = prims.full(tuple(p.tshape), value, p.tdtype)
        # (the identity on the filled tensor, with an edge to the op's result: the graph
        # eager records, whose gradient through here is zero)
        filled = emit_composite(_zero_grad_edge(), (filled, p), {}, required=True)
        if e._is_zerotensor():
            filled._zero_tensor = True
        leaves[i] = filled
    return optree.tree_unflatten(spec, leaves)


_T = torch.Tensor
# the calls that reach ATen's div.Tensor, whose ZeroTensor kernel gives a constant for a
# ZeroTensor divisor (without rounding_mode: div.Tensor_mode reads materialized zeros)
_DIVISIONS = frozenset({torch.div, torch.divide, torch.true_divide, _T.div, _T.divide,
                        _T.true_divide, _T.__truediv__})
