"""Functional gradients, as in Lightning Thunder: ``grad(jfn)(*args)`` returns the gradients
of every floating-point tensor input, with a cotangent of ones for every floating-point
output (Thunder's extend notebook: ``grad(cfoo)(a, b, c, d)`` -> ``[ga, gb, gc, gd]``).

Both run the compiled forward and backward plans of ``jfn`` (the grad pass) through
torch.autograd; inputs are not modified and their ``.grad`` is left untouched.
"""

from __future__ import annotations

from typing import Callable

import optree
import torch
import torch.utils._pytree as torch_pytree

from .error_reporting import error_boundary


def _float(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _run(jfn: Callable, args, kwargs):
    from . import jit
    from .jit import ThunderFunction
    from .module import ThunderModule

    if not isinstance(jfn, (ThunderFunction, ThunderModule)):
        jfn = jit(jfn)
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    inputs = [x.detach().requires_grad_() if _float(x) else x for x in leaves]
    a, k = optree.tree_unflatten(spec, inputs)
    with torch.enable_grad():
        out = jfn(*a, **k)
        outs = [o for o in torch_pytree.tree_leaves(out) if _float(o) and o.requires_grad]
        diff_inputs = [x for x in inputs if _float(x)]
        grads = torch.autograd.grad(outs, diff_inputs, [torch.ones_like(o) for o in outs],
                                    allow_unused=True) if outs else [None] * len(diff_inputs)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(diff_inputs, grads)]
    return out, grads


def grad(jfn: Callable) -> Callable:
    """``grad(jfn)(*args, **kwargs)`` -> list of gradients, one per floating-point tensor
    input in flattened argument order (zeros for inputs the outputs do not depend on).

    Cotangents are ones for every floating-point output (the gradient of the sum of all
    outputs). ``jfn`` is a ``thunder_mlir.jit`` result or a plain function (jitted here).
    Raises thunder_mlir.passes.grad.GradError for an op without a VJP rule.
    """
    @error_boundary
    def grad_fn(*args, **kwargs):
        return _run(jfn, args, kwargs)[1]
    return grad_fn


def value_and_grad(jfn: Callable) -> Callable:
    """``value_and_grad(jfn)(*args)`` -> (outputs, gradients) (see ``grad``)."""
    @error_boundary
    def vg(*args, **kwargs):
        out, grads = _run(jfn, args, kwargs)
        return torch_pytree.tree_map(lambda o: o.detach() if isinstance(o, torch.Tensor) else o,
                                     out), grads
    return vg
