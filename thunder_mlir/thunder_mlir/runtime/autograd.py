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

When each plan is one XLA executable (the common case), the Function runs the executables
itself and keeps the forward's residuals as the XLA buffers they are: the backward reads
those buffers instead of importing the saved torch tensors again through DLPack (one import
per residual per step), and no import cache of the backward plan keeps the residuals of
earlier steps alive. A saved tensor that a ``saved_tensors_hooks`` pack/unpack pair
replaced is imported as it comes back.
"""

from __future__ import annotations

import weakref

import torch

from thunder_mlir.runtime import dlpack
from thunder_mlir.runtime.plan import Plan, XlaStep

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


_LAYOUTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _single_xla_step(plan):
    """``(step, outputs)`` when ``plan`` is one XLA step reading only its inputs, without a
    seed: ``outputs`` gives per plan output ``(True, k)`` (the step's ``k``-th result) or
    ``(False, i)`` (input ``i`` returned as it is: a parameter saved as a residual). None
    otherwise (the plan runs itself). Cached per plan. Reads the plan's fields as
    ``Plan.run`` does (runtime/plan.py)."""
    if plan in _LAYOUTS:
        return _LAYOUTS[plan]
    layout = None
    steps = getattr(plan, "steps", ())
    # (exactly a Plan: a subclass may run its step differently, e.g. sharded)
    if type(plan) is Plan and len(steps) == 1 and type(steps[0]) is XlaStep \
            and not plan.seeded:
        step, n = steps[0], plan.n_inputs
        position = {s: k for k, s in enumerate(step.outputs)}
        if all(i < n for i in step.inputs) and \
                all(s in position or s < n for s in plan.outputs):
            layout = (step, [(True, position[s]) if s in position else (False, s)
                             for s in plan.outputs])
    _LAYOUTS[plan] = layout
    return layout


def _execute(plan, layout, buffers, inputs: list) -> tuple[list, list]:
    """Run ``layout``'s step on the XLA ``buffers`` (indexed like ``inputs``: a list, or a
    dict holding the inputs the step reads) of the plan's ``inputs`` (torch);
    returns (the plan's outputs as torch tensors, per output its XLA array or None where
    the output is an input)."""
    step, outputs = layout
    arrays = step.execute([buffers[i] for i in step.inputs], plan._jax_device)
    on_cpu = plan._on_cpu
    outs, bufs = [], []
    for is_result, k in outputs:
        if is_result:
            outs.append(dlpack.to_torch(arrays[k], on_cpu))
            bufs.append(arrays[k])
        else:
            outs.append(inputs[k])
            bufs.append(None)
    return outs, bufs


def _hooks_active() -> bool:
    """Whether a ``torch.autograd.graph.saved_tensors_hooks`` pair is in effect (its pack
    hook may move the saved tensors away, e.g. ``save_on_cpu``: then no XLA buffer of a
    residual is kept beside them)."""
    try:
        return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None
    except (AttributeError, TypeError):  # another torch: assume hooks
        return True


class ThunderAutogradFunction(torch.autograd.Function):
    """``apply(entry, *inputs) -> outputs``; see the module docstring."""

    @staticmethod
    def forward(ctx, entry, *tensors):
        n = entry.num_outputs
        plan = entry.plan
        layout = _single_xla_step(plan)
        ctx.residual_buffers = None
        if layout is None or _single_xla_step(entry.backward_plan) is None or _hooks_active():
            outs = plan.run(tensors)
        else:
            imp = plan._imports.buffer  # an argument passed again unchanged keeps its buffer
            outs, arrays = _execute(plan, layout,
                                    {i: imp(i, tensors[i]) for i in layout[0].inputs}, tensors)
            # per residual: (its XLA buffer, the data pointer of its torch tensor), or None
            # for an input saved as it is; the backward checks the pointer
            ctx.residual_buffers = [None if a is None else (a, t.data_ptr())
                                    for a, t in zip(arrays[n:], outs[n:])]
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
        saved = ctx.saved_tensors
        buffers, ctx.residual_buffers = ctx.residual_buffers, None
        if buffers is None:
            in_grads = entry.backward_plan.run(cots + list(saved))
        else:
            plan = entry.backward_plan
            dev, imp = plan._jax_device, plan._imports.buffer
            args = [dlpack.to_xla(g, dev) for g in cots]  # fresh tensors: not cached
            for t, b in zip(saved, buffers):
                if b is None:  # an input of the forward (a parameter): cached import
                    args.append(imp(len(args), t))
                else:
                    args.append(b[0] if t.data_ptr() == b[1] else dlpack.to_xla(t, dev))
            in_grads, _ = _execute(plan, _single_xla_step(plan), args, cots + list(saved))
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
