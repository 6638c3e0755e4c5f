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

The residuals the forward executable computes for the backward alone (not a program input,
not also an output the user gets, returned once) are not exported to torch at all: they are
donated to the backward executable (``mark_donated_residuals`` marks its arguments
``jax.buffer_donor``), so XLA writes gradients of the same byte size into their memory
instead of holding both at once. Under ``retain_graph=True`` the backward donates copies
and keeps the residuals for the next backward.
"""

from __future__ import annotations

import weakref

import torch

from torch_mlir import ir

from thunder_mlir.frontend import torch_internals
from thunder_mlir.runtime import dlpack
from thunder_mlir.runtime.plan import DONOR_ATTR, Plan, XlaStep

FREED_ERROR = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")

HIGHER_ORDER_ERROR = (
    b"thunder_mlir: higher-order gradients are not supported: the backward of a jitted "
    b"function is not differentiable (torch.autograd.grad(..., create_graph=True) followed "
    b"by a second backward through it). Compute the higher-order gradient eagerly.")


def _refuse_higher_order(grads: tuple) -> tuple:
    """Under create_graph (grad mode on in backward), alias the gradients behind a node
    that raises HIGHER_ORDER_ERROR when differentiated."""
    err_fn = torch_internals.delayed_error(HIGHER_ORDER_ERROR, len(grads))

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


def mark_donated_residuals(module: ir.Module, forward_plan, n_outputs: int,
                           backward: str = "backward") -> None:
    """Mark with ``jax.buffer_donor`` the arguments of the backward's XLA region that
    receive a residual only the backward reads: a result of the forward's executable that
    is not also one of its first ``n_outputs`` outputs (what the user gets) and is returned
    once. Run before the backward region is compiled (runtime/plan.py ``build_plan``).
    Nothing is marked unless the forward plan and the backward function ``@backward`` of
    ``module`` are each one XLA region reading only their arguments (the plans
    ``ThunderAutogradFunction`` runs itself). XLA's CPU compiler then aliases such an
    argument with a result of the same byte size (``HloBufferDonorConfig``), and an aliased
    argument's buffer holds temporaries once the argument is dead; an argument that no
    result matches is not reused, and where a result is written before the argument's last
    read XLA copies the argument first (measured: GPT-2 4x512's backward aliases 22 MB of
    its 54 MB of results and its temporaries grow by 14 MB). On a GPU too: a donated
    residual reaches the backward as the forward's own XLA buffer (never exported to torch,
    ``ThunderAutogradFunction.forward``'s ``hold``); where it comes back from torch instead
    (a saved_tensors_hooks unpack, the plan's ``run``), PJRT's GPU client would refuse to
    donate memory torch backs (the CPU client copies it), so ``ArgumentImports`` hands the
    executable a copy of jax's own at donated positions on a GPU."""
    layout = _single_xla_step(forward_plan)
    if layout is None:
        return
    _, outputs = layout
    uses: dict = {}
    for o in outputs:
        uses[o] = uses.get(o, 0) + 1
    residuals = outputs[n_outputs:]
    donors = {j for j, (is_result, k) in enumerate(residuals)
              if is_result and uses[(True, k)] == 1}
    if not donors:
        return
    funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
             for op in module.body.operations if op.operation.name == "func.func"}
    block = funcs[backward].regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    n_cots = len(block.arguments) - len(residuals)
    if len(ops) != 2 or ops[0].name != "func.call" or ops[1].name != "func.return" \
            or n_cots < 0:
        return
    call = ops[0]
    args = {a: k for k, a in enumerate(block.arguments)}
    operands = list(call.operands)
    if any(v not in args for v in operands) or any(v in args for v in ops[1].operands):
        return
    region = funcs[ir.FlatSymbolRefAttr(call.attributes["callee"]).value]
    positions = [args[v] for v in operands]
    marked = {p for p, a in enumerate(positions)
              if a - n_cots in donors and positions.count(a) == 1}
    if not marked:
        return
    with module.context:
        old = list(ir.ArrayAttr(region.attributes["arg_attrs"])) \
            if "arg_attrs" in region.attributes else [ir.DictAttr.get({})] * len(operands)
        new = []
        for p, d in enumerate(old):
            entries = {n.name: n.attr for n in ir.DictAttr(d)}
            if p in marked:
                entries[DONOR_ATTR] = ir.BoolAttr.get(True)
            new.append(ir.DictAttr.get(entries))
        region.attributes["arg_attrs"] = ir.ArrayAttr.get(new)


_DONATED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _donated_residuals(entry) -> frozenset:
    """The residual indices whose XLA buffers the backward executable donates (cached per
    backward plan; see ``mark_donated_residuals``)."""
    bwd = entry.backward_plan
    got = _DONATED.get(bwd)
    if got is None:
        n_res = len(entry.plan.outputs) - entry.num_outputs
        n_cots = bwd.n_inputs - n_res
        step = bwd.steps[0]
        got = frozenset(step.inputs[p] - n_cots for p in step.donated)
        _DONATED[bwd] = got
    return got


def _copy(array, device):
    """A new XLA buffer holding ``array``'s values (a residual kept under retain_graph)."""
    import jax

    return jax.device_put(array, device, may_alias=False)


def _keep_graph() -> bool:
    """Whether the running backward keeps the graph (``retain_graph=True``)."""
    try:
        return torch_internals.keep_graph()
    except (AttributeError, RuntimeError):  # another torch: assume it does (copies)
        return True


def _execute(plan, layout, buffers, inputs: list, hold=frozenset()) -> tuple[list, list]:
    """Run ``layout``'s step on the XLA ``buffers`` (indexed like ``inputs``: a list, or a
    dict holding the inputs the step reads) of the plan's ``inputs`` (torch);
    returns (the plan's outputs as torch tensors, None at the positions in ``hold``,
    outputs kept only as XLA buffers; per output its XLA array or None where the output
    is an input)."""
    step, outputs = layout
    arrays = step.execute([buffers[i] for i in step.inputs], plan._jax_device)
    on_cpu = plan._on_cpu
    outs, bufs = [], []
    for j, (is_result, k) in enumerate(outputs):
        if is_result:
            outs.append(None if j in hold else dlpack.to_torch(arrays[k], on_cpu))
            bufs.append(arrays[k])
        else:
            outs.append(inputs[k])
            bufs.append(None)
    return outs, bufs


def note_input_versions(outs: list) -> None:
    """After the call's write-backs: the version of each input whose memory eager's
    backward reads as it is then (``CacheEntry.unversioned_inputs``), on the backward node
    of ``outs`` (the program's outputs), so that only writes after the call count."""
    node = next((o.grad_fn for o in outs if isinstance(o, torch.Tensor) and
                 getattr(o.grad_fn, "unversioned", None) is not None), None)
    if node is not None:
        node.unversioned = [(t, t._version) for t, _ in node.unversioned]


def copy_outputs(outs: list, positions: tuple) -> list:
    """``outs`` with a copy of each tensor at ``positions`` (``CacheEntry.fresh_outputs``:
    an input tensor the plan returns where eager returns a new tensor)."""
    outs = list(outs)
    for j in positions:
        outs[j] = outs[j].clone()
    return outs


def _hooks_active() -> bool:
    """Whether a ``torch.autograd.graph.saved_tensors_hooks`` pair is in effect (its pack
    hook may move the saved tensors away, e.g. ``save_on_cpu``: then no XLA buffer of a
    residual is kept beside them)."""
    try:
        return torch_internals.saved_tensors_hooks_active()
    except (AttributeError, TypeError):  # another torch: assume hooks
        return True


def _storage(t: torch.Tensor) -> int:
    """The address of ``t``'s storage: equal for a tensor and its views."""
    return t.untyped_storage().data_ptr()


class ThunderAutogradFunction(torch.autograd.Function):
    """``apply(entry, *inputs) -> outputs``; see the module docstring."""

    @staticmethod
    def forward(ctx, entry, *tensors):
        n = entry.num_outputs
        plan = entry.plan
        layout = _single_xla_step(plan)
        ctx.residual_buffers = None
        ctx.direct = False
        if layout is None or _single_xla_step(entry.backward_plan) is None or _hooks_active():
            outs = plan.run(tensors)
            residuals = outs[n:]
        else:
            donated = _donated_residuals(entry)
            imp = plan._imports.buffer  # an argument passed again unchanged keeps its buffer
            outs, arrays = _execute(plan, layout,
                                    {i: imp(i, tensors[i]) for i in layout[0].inputs}, tensors,
                                    hold=frozenset(n + j for j in donated))
            # per residual: (its XLA buffer, None) when donated (no torch tensor), (its XLA
            # buffer, the data pointer of its torch tensor: the backward checks it) for a
            # result also saved in torch, or None for an input saved as it is
            ctx.residual_buffers = [
                None if a is None else (a, None) if j in donated else (a, t.data_ptr())
                for j, (a, t) in enumerate(zip(arrays[n:], outs[n:]))]
            ctx.direct = True
            residuals = [t for j, t in enumerate(outs[n:]) if j not in donated]
        ctx.entry = entry
        ctx.n_inputs = len(tensors)
        if entry.unversioned_inputs:  # (read as they are at the backward, in eager;
            ctx.unversioned = [(tensors[i], tensors[i]._version)  # after the call's own
                               for i in entry.unversioned_inputs]  # write-backs: below)
        if entry.mutated_inputs:  # an input (or a view of one: an as_strided or other
            # fallback view) saved as it was, then written back: keep a copy
            updated = {_storage(tensors[i]) for i in entry.mutated_inputs}
            residuals = [r.clone() if _storage(r) in updated else r for r in residuals]
        result = tuple(copy_outputs(outs[:n], entry.fresh_outputs) if entry.fresh_outputs
                       else outs[:n])
        # (then the outputs eager's graph saves: unpacked by the backward, which checks
        # their versions as eager's does: a write into one after the call raises there)
        ctx.save_for_backward(*residuals, *(result[k] for k in entry.saved_outputs))
        ctx.n_saved = len(residuals)
        nondiff = [o for o, d in zip(result, entry.diff_outputs) if not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        if entry.output_reach is not None:  # an output that gets no gradient: None, not 0
            ctx.set_materialize_grads(False)
            ctx.out_metas = [(o.shape, o.dtype, o.device) for o in result]
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
            # torch's ``not_implemented()`` (autograd/FunctionsManual.cpp: "the derivative
            # for 'op' is not implemented.", derivatives.yaml's not_implemented) raises
            # NotImplementedError; a ``NotImplemented`` node raises RuntimeError
            msg = entry.backward_error
            raise (NotImplementedError if msg.startswith("the derivative for '")
                   else RuntimeError)(msg)
        if entry.unversioned_inputs and any(t._version != v for t, v in ctx.unversioned):
            raise RuntimeError(
                "an input of the jitted function read through `.data` or by a checkpointed "
                "function was written in place after the call and before this backward. "
                "Eager's backward would read the written memory; the compiled backward "
                "read it as it was at the call. Write it after the backward, or read a "
                "copy (`x.data.clone()`) in the function.")
        if entry.reentrant_checkpoint and not torch.autograd._is_checkpoint_valid():
            # torch/utils/checkpoint.py, CheckpointFunction.backward: its words
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with "
                ".grad() or passing an `inputs` parameter to .backward(). To resolve this "
                "error, you can either set use_reentrant=False, or call .backward() without "
                "passing the `inputs` argument.")
        cots = []
        reach = entry.output_reach
        reached: set = set()  # (output_reach) gradients reached by an output that got one
        for g, d, o in zip(grads, entry.diff_outputs, range(len(grads))):
            if not d:
                continue
            if g is None:
                if reach is None:
                    raise RuntimeError("internal: missing cotangent")  # materialize_grads on
                shape, dtype, device = ctx.out_metas[o]
                g = torch.zeros(shape, dtype=dtype, device=device)
            elif reach is not None:
                reached |= reach[len(cots)]
            cots.append(g)
        # raises torch's error when freed by an earlier backward; none saved: nothing is
        # freed, and a second backward runs as eager's does (``(x + 1).sum()``)
        saved = ctx.saved_tensors[:ctx.n_saved] if ctx.n_saved or entry.saved_outputs \
            else ()
        if not ctx.direct:
            in_grads = entry.backward_plan.run(cots + list(saved))
        else:
            buffers = ctx.residual_buffers
            if buffers is None:  # consumed by an earlier backward without retain_graph
                raise RuntimeError(FREED_ERROR)
            plan = entry.backward_plan
            dev, imp = plan._jax_device, plan._imports.buffer
            keep = _keep_graph()
            if not keep and buffers:  # the donated buffers live on only in this call's
                ctx.residual_buffers = None  # arguments (none saved: eager frees nothing,
                # and a second backward runs: ``(x + 1).sum()``)
            args = [dlpack.to_xla(g, dev) for g in cots]  # fresh tensors: not cached
            inputs = list(cots)
            torch_saved = iter(saved)
            for b in buffers:
                if b is not None and b[1] is None:  # donated: XLA's only
                    args.append(_copy(b[0], dev) if keep else b[0])
                    inputs.append(None)
                    continue
                t = next(torch_saved)
                inputs.append(t)
                if b is None:  # an input of the forward (a parameter): cached import
                    args.append(imp(len(args), t))
                else:
                    args.append(b[0] if t.data_ptr() == b[1] else dlpack.to_xla(t, dev))
            del buffers
            in_grads, _ = _execute(plan, _single_xla_step(plan), args, inputs)
        result = [None] * (1 + ctx.n_inputs)
        for k, (i, g) in enumerate(zip(entry.wrt, in_grads)):
            if reach is None or k in reached:  # eager: no .grad where no used output reaches
                result[1 + i] = g
        return tuple(result)


def run_with_autograd(entry, tensors) -> list[torch.Tensor]:
    """Run ``entry``'s forward plan under autograd; returns the outputs (a list)."""
    # grad mode was on where the program's outputs were computed (the call's mode, or an
    # enable_grad() region inside the program): the Function must record its node
    with torch.enable_grad():
        out = ThunderAutogradFunction.apply(entry, *tensors)
    return list(out)
