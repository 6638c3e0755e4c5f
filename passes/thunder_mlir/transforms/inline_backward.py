"""``loss.backward()`` inside a traced program: the gradients of a scalar with respect to
chosen values of the program under construction, computed by the ``grad`` and ``joint``
passes and inlined where the call is (docs/optim.md, "the whole training step").

``inline_gradients`` runs while the program is traced (its ``@computation`` has no
terminator yet). It clones the module, turns each leaf value into a fresh argument of the
clone (a leaf may be an input or a computed value: a parameter updated in place by an
earlier optimizer step is a leaf as eager's ``p`` is), returns the loss from the clone,
differentiates it (``grad{remat=true}``, then ``joint{keep-outputs=false}`` with a
cotangent of one, as ``Tensor.backward()`` seeds a scalar), and moves the gradient
program's operations to the end of the traced block, its arguments mapped back to the
traced values. The forward operations the gradient needs are recomputed there (the
clone's copies); XLA's common-subexpression elimination merges them with the traced ones
(random ops included: their streams are attributes of the op and the seed an argument,
so a copy draws the same bits).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.errors import UnsupportedError
from thunder_mlir.transforms import grad, joint

_DROPPED_ATTRS = (grad.WRITE_BACKS, grad.DIFF_OUTPUTS, "thunder.requires_grad")


def _position(block, v: ir.Value):
    """("arg", k) or ("op", op index in ``block``, result number) of a value of ``block``'s
    top level; None for a value defined elsewhere (inside a region)."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return ("arg", ir.BlockArgument(v).arg_number) if owner == block else None
    op = owner.operation if hasattr(owner, "operation") else owner
    if op.parent is None or op.block != block:
        return None
    for i, o in enumerate(block.operations):
        if o.operation == op:
            return ("op", i, ir.OpResult(v).result_number)
    return None


def _value_at(block, ops, pos) -> ir.Value:
    if pos[0] == "arg":
        return block.arguments[pos[1]]
    return ops[pos[1]].results[pos[2]]


def inline_gradients(module: ir.Module, func_op, loss: ir.Value,
                     leaves: list[ir.Value], before_grad=None,
                     save_materialized: bool = False) -> list[ir.Value | None]:
    """Append to ``func_op``'s (unterminated) entry block the computation of d``loss``/d
    ``leaf`` for each of ``leaves`` (values of that block's top level); -> per leaf its
    gradient value, or None where ``loss`` does not depend on the leaf (eager leaves its
    ``.grad`` untouched). ``loss``: a 0-d floating-point value of the block. Raises
    UnsupportedError for a loss or leaf defined inside a region (a ``torch.cond`` branch),
    and eager's RuntimeError where the gradient path crosses an operation without a
    derivative. ``before_grad``: a callable run on the clone before it is differentiated,
    the target's passes that precede ``grad`` (pipeline.Target: ``fused-attention``, whose
    composites carry their own VJP rule); the traced program gets them later, with the
    rest of the pipeline, and XLA's CSE merges its forward ops with the clone's copies.
    ``save_materialized``: ``grad``'s option of the same name (pipeline.Target)."""
    block = func_op.regions[0].blocks[0]
    loss_pos = _position(block, loss)
    leaf_pos = [_position(block, v) for v in leaves]
    if loss_pos is None or any(p is None for p in leaf_pos):
        raise UnsupportedError("loss.backward() on a value computed inside a torch.cond, "
                               "while_loop or checkpoint region is not supported")
    ctx = module.context
    with ctx, ir.Location.unknown():
        work = ir.Module.create()
        with ir.InsertionPoint(work.body):
            clones = [op.operation.clone() for op in module.body.operations]
        wfunc = next(c for c, o in zip(clones, module.body.operations)
                     if o.operation == func_op)
        wblock = wfunc.regions[0].blocks[0]
        wops = [o.operation for o in wblock.operations]
        n_args = len(wblock.arguments)
        wloss = _value_at(wblock, wops, loss_pos)
        for pos, v in zip(leaf_pos, leaves):
            old = _value_at(wblock, wops, pos)
            new = wblock.add_argument(v.type, ir.Location.unknown())
            old.replace_all_uses_with(new)
            if old == wloss:
                wloss = new
        with ir.InsertionPoint(wblock):
            func_d.ReturnOp([wloss])
        for k in _DROPPED_ATTRS:
            if k in wfunc.attributes:
                del wfunc.attributes[k]
        wfunc.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in wblock.arguments], [wloss.type]))
        wfunc.attributes["thunder.requires_grad"] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(False)] * n_args + [ir.BoolAttr.get(True)] * len(leaves))
        wfunc.attributes[grad.DIFF_OUTPUTS] = ir.ArrayAttr.get([ir.BoolAttr.get(True)])
        if before_grad is not None:
            before_grad(work)
        grad.run(work, remat=True, save_materialized=save_materialized)
        error = grad.backward_error(work)
        if error is not None:
            raise RuntimeError(error)
        reached = grad.reached_inputs(work)
        joint.run(work, keep_outputs=False)
        comp = grad._func(work, "computation")
        cblock = comp.regions[0].blocks[0]
        cops = [o.operation for o in cblock.operations]
        cret = cops[-1]
        mapping = list(block.arguments)[:n_args] + list(leaves)
        for a, v in zip(cblock.arguments, mapping):
            a.replace_all_uses_with(v)
        results = list(cret.operands)
        cret.erase()
        for op in cops[:-1]:
            op.detach_from_parent()
            ir.InsertionPoint(block).insert(op)
        comp.erase()
        # (the clone's other functions reference nothing of ``module``)
    return [g if r else None for g, r in zip(results, reached)]
