"""The backward of an exported program as a second program (``Exported.vjp()``, after
``jax.export.Exported.vjp``; docs/export.md).

``vjp_function`` returns a function of ``(inputs, cotangents)`` (two lists of tensors)
that recomputes the exported program's forward from its inputs (as jax's VJP of an
exported function does: no residuals cross between two artifacts) and returns the
cotangent of each floating-point input: ``J(inputs)^T @ cotangents``. The gradient is the
jit's own: ``train_step.gradients``, the in-trace ``loss.backward()`` of a compiled
training step (transforms/inline_backward.py), of ``sum_k (output_k * cotangent_k).sum()``,
whose gradient with respect to ``output_k`` is exactly ``cotangent_k``. export.py exports
that function with the primal's input names.
"""

from __future__ import annotations

from collections.abc import Callable

import optree
import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.frontend import pytrees
from thunder_mlir.frontend.reparametrize import reparametrized
from thunder_mlir.train_step import gradients


def is_float(t: torch.Tensor) -> bool:
    """Whether ``t`` has a cotangent (floating point; complex is not exported)."""
    return t.is_floating_point()


def vjp_function(fn: Callable | torch.nn.Module, weight_names: list[str], args, kwargs,
                 float_outputs: list[int]) -> Callable:
    """The VJP program of ``fn(*args, **kwargs)``: a function ``vjp(inputs, cotangents)``.

    ``inputs``: the primal's tensor inputs in its ``input_names`` order (for a module,
    ``weight_names``' weights first, ``params.<name>``/``buffers.<name>``, then the
    tensors of ``(args, kwargs)`` in pytree order; Python values of ``(args, kwargs)``
    stay as given); ``cotangents``: one tensor per floating-point tensor of the output
    tree, ``float_outputs`` being their positions among the output tree's tensors.
    Returns the list of the floating-point inputs' cotangents (zeros for an input the
    outputs do not depend on), in ``inputs`` order, same shapes and dtypes."""
    leaves, spec = pytrees.flatten((args, kwargs))
    n_w = len(weight_names)

    def vjp(inputs, cotangents):
        weights, user = inputs[:n_w], iter(inputs[n_w:])
        a, k = optree.tree_unflatten(spec, [next(user) if isinstance(x, torch.Tensor) else x
                                            for x in leaves])
        with torch.enable_grad():
            if isinstance(fn, torch.nn.Module):
                state = {n.split(".", 1)[1]: w for n, w in zip(weight_names, weights)}
                with reparametrized(fn, state):
                    out = fn(*a, **k)
            else:
                out = fn(*a, **k)
            outs = [x for x in torch_pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
            terms = [(outs[i] * ct).sum() for i, ct in zip(float_outputs, cotangents)
                     if outs[i].requires_grad]
            wrt = [x for x in inputs if is_float(x)]
            if terms:
                loss = terms[0]
                for t in terms[1:]:
                    loss = loss + t
                grads = gradients(loss, wrt)
            else:
                grads = [None] * len(wrt)
        return [torch.zeros_like(x) if g is None else g for x, g in zip(wrt, grads)]
    return vjp
