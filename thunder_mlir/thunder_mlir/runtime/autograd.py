"""torch.autograd integration: a compiled forward and backward plan as one
``torch.autograd.Function``, so ``loss.backward()`` fills ``.grad`` as eager would.

The forward plan returns the program's outputs (then the write-backs of inputs updated in
place, which are not differentiable) followed by the residuals the backward plan needs;
those are saved with ``ctx.save_for_backward``. The backward plan maps the
cotangents of the floating-point outputs (plus the residuals) to the gradients of the
inputs that require grad. Higher-order gradients are refused: the backward plan is not
itself differentiated, so under ``create_graph=True`` the gradients it returns carry a
node that raises a clear error when differentiated again (as ``once_differentiable``
does, but also when the cotangents themselves do not require grad, which
``once_differentiable`` would let through as silently constant gradients).
"""

from __future__ import annotations

import torch

HIGHER_ORDER_ERROR = (
    b"thunder_mlir: higher-order gradients are not supported: the backward of a jitted "
    b"function is not differentiable (torch.autograd.grad(..., create_graph=True) followed "
    b"by a second backward through it). Compute the higher-order gradient eagerly.")


def _refuse_higher_order(grads: tuple) -> tuple:
    """Under create_graph (grad mode on in backward), alias the gradients behind a node
    that raises HIGHER_ORDER_ERROR when differentiated."""
    err_fn = torch._C._functions.DelayedError(HIGHER_ORDER_ERROR, len(grads))

    def fake(v):
        if v is None:
            return None
        v = v.detach()
        v.requires_grad = True
        return v

    out = err_fn(*[fake(v) for v in grads])
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


class ThunderAutogradFunction(torch.autograd.Function):
    """``apply(entry, *inputs) -> outputs``; see the module docstring."""

    @staticmethod
    def forward(ctx, entry, *tensors):
        outs = entry.plan.run(tensors)
        n = entry.num_outputs
        ctx.entry = entry
        ctx.n_inputs = len(tensors)
        residuals = outs[n:]
        if entry.mutated_inputs:  # an input saved as it was, then written back: keep a copy
            updated = [tensors[i] for i in entry.mutated_inputs]
            residuals = [r.clone() if any(r is u for u in updated) else r for r in residuals]
        ctx.save_for_backward(*residuals)
        result = tuple(outs[:n])
        nondiff = [o for o, d in zip(result, entry.diff_outputs) if not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return result

    @staticmethod
    def backward(ctx, *grads):
        with torch.no_grad():
            result = ThunderAutogradFunction._backward(ctx, *grads)
        if torch.is_grad_enabled():  # create_graph=True
            return (None,) + _refuse_higher_order(result[1:])
        return result

    @staticmethod
    def _backward(ctx, *grads):
        entry = ctx.entry
        if entry.backward_error is not None:
            raise RuntimeError(entry.backward_error)
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
    # grad mode was on where the program's outputs were computed (the call's mode, or an
    # enable_grad() region inside the program): the Function must record its node
    with torch.enable_grad():
        out = ThunderAutogradFunction.apply(entry, *tensors)
    return list(out)
