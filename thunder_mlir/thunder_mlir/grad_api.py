"""Functional gradients, as in Lightning Thunder: ``grad(jfn)(*args)`` returns the gradients
of every floating-point tensor input, with a cotangent of ones for every differentiable
output (Thunder's extend notebook: ``grad(cfoo)(a, b, c, d)`` -> ``[ga, gb, gc, gd]``).

For a function, both compile one *gradient program* (the ``joint`` pass after ``grad``):
forward and backward fused, so ``grad`` computes only what the gradients need — outputs
nobody reads and their executor calls are eliminated. For a jitted ``nn.Module`` they run
its forward and backward plans through torch.autograd. Inputs are not modified (except
in-place updates the function itself makes, as eagerly) and their ``.grad`` is untouched.
"""

from __future__ import annotations

from typing import Callable

import optree
import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.error_reporting import error_boundary


def _float(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _run(jfn: Callable, args, kwargs):
    from thunder_mlir.jit import jit
    from thunder_mlir.function import ThunderFunction
    from thunder_mlir.module import ThunderModule

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


def _joint(jfn: Callable, mode: str):
    """The gradient-program ThunderFunction of ``jfn`` for ``mode``, made once per jfn."""
    from thunder_mlir.function import ThunderFunction

    if not isinstance(jfn, ThunderFunction):
        return ThunderFunction(jfn, _joint=mode)
    cache = jfn.__dict__.setdefault("_joint_functions", {})
    if mode not in cache:
        cache[mode] = ThunderFunction(jfn.fn, sharp_edges=jfn.sharp_edges,
                                      executors=jfn.executors, _joint=mode)
    return cache[mode]


def grad(jfn: Callable) -> Callable:
    """``grad(jfn)(*args, **kwargs)`` -> list of gradients, one per floating-point tensor
    input in flattened argument order (zeros for inputs the outputs do not depend on).

    Cotangents are ones for every differentiable output (the gradient of the sum of all
    outputs). ``jfn`` is a ``thunder_mlir.jit`` result or a plain function (jitted here).
    Raises thunder_mlir.errors.GradError for an op without a VJP rule.
    """
    from thunder_mlir.module import ThunderModule

    if isinstance(jfn, ThunderModule):
        return error_boundary(lambda *args, **kwargs: _run(jfn, args, kwargs)[1])
    return _gradient_program_caller(jfn, "grad")


def value_and_grad(jfn: Callable) -> Callable:
    """``value_and_grad(jfn)(*args)`` -> (outputs, gradients) (see ``grad``); the outputs
    do not require grad."""
    from thunder_mlir.module import ThunderModule

    if isinstance(jfn, ThunderModule):
        @error_boundary
        def vg(*args, **kwargs):
            out, grads = _run(jfn, args, kwargs)
            return torch_pytree.tree_map(
                lambda o: o.detach() if isinstance(o, torch.Tensor) else o, out), grads
        return vg
    return _gradient_program_caller(jfn, "value_and_grad")


def _gradient_program_caller(jfn: Callable, mode: str) -> Callable:
    from thunder_mlir.function import ThunderFunction

    program = _joint(jfn, mode)

    @error_boundary
    def call(*args, **kwargs):
        with torch.enable_grad():
            out = program(*args, **kwargs)
        if isinstance(jfn, ThunderFunction):  # last_traces(jfn) shows the gradient program
            jfn.last = program.last
        return out
    return call
