"""torch.autograd integration: a compiled forward and backward plan as one
``torch.autograd.Function``, so ``loss.backward()`` fills ``.grad`` as eager would.

The forward plan returns the program's outputs followed by the residuals the backward
plan needs; those are saved with ``ctx.save_for_backward``. The backward plan maps the
cotangents of the floating-point outputs (plus the residuals) to the gradients of the
inputs that require grad. Higher-order gradients are refused (``once_differentiable``):
the backward plan is not itself differentiated.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class ThunderAutogradFunction(torch.autograd.Function):
    """``apply(entry, *inputs) -> outputs``; see the module docstring."""

    @staticmethod
    def forward(ctx, entry, *tensors):
        outs = entry.plan.run(tensors)
        n = entry.num_outputs
        ctx.entry = entry
        ctx.n_inputs = len(tensors)
        ctx.save_for_backward(*outs[n:])
        result = tuple(outs[:n])
        nondiff = [o for o, d in zip(result, entry.diff_outputs) if not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return result

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        entry = ctx.entry
        cots = []
        for g, d, o in zip(grads, entry.diff_outputs, range(len(grads))):
            if not d:
                continue
            if g is None:
                raise RuntimeError("internal: missing cotangent")  # materialize_grads is on
            cots.append(g)
        in_grads = entry.backward_plan.run(cots + list(ctx.saved_tensors))
        result = [None] * (1 + ctx.n_inputs)
        for i, g in zip(entry.wrt, in_grads):
            result[1 + i] = g
        return tuple(result)


def run_with_autograd(entry, tensors) -> list[torch.Tensor]:
    """Run ``entry``'s forward plan under autograd; returns the outputs (a list)."""
    out = ThunderAutogradFunction.apply(entry, *tensors)
    return list(out)
