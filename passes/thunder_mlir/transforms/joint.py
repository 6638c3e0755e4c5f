"""``joint``: the gradient program of ``thunder_mlir.grad`` / ``value_and_grad``.

Input: the ``grad`` pass's ``@forward`` (outputs, then residuals) and ``@backward``
(cotangents, then residuals -> input gradients). Output: one ``@computation`` that runs the
forward, feeds a cotangent of ones to every differentiated output (the gradient of the sum
of the outputs, as ``jax.grad`` does for a scalar), runs the backward on the forward's
residuals, and returns

    [the outputs (keep_outputs=True only)] + [the gradients] + [the write-backs]

(write-backs: new values of inputs updated in place, ``thunder.num_write_backs``; they are
side effects eager's call has too). Dead code is then eliminated: forward results nothing
reads — the outputs themselves under ``grad`` — and their executor calls are not computed
(Thunder's extend notebook: ``grad`` of a multiplication with a grad transform runs one
``multimul``). Every thunder op is free of side effects (executor calls included: the torch
fallback copies before an in-place op), so any op whose results are unused is removed.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.ir.primdef import PRIM_OPS
from thunder_mlir.ir.regions import eliminate_dead_code

from thunder_mlir.transforms.grad import DIFF_OUTPUTS, REACHED, WRITE_BACKS, _func

NAME = "joint"
_COPIED_ATTRS = ("thunder.device", "thunder.rng_seed")


def run(module: ir.Module, keep_outputs: bool = False) -> None:
    """Fuse ``@forward`` and ``@backward`` of ``module`` into ``@computation`` (see the
    module docstring). Raises ValueError if the module has not been through ``grad``."""
    with module.context, ir.Location.unknown():
        fwd, bwd = _func(module, "forward"), _func(module, "backward")
        if fwd is None or bwd is None:
            raise ValueError("joint: the module needs @forward and @backward (run grad first)")
        _fuse(module, fwd, bwd, keep_outputs)


def _ones(t: ir.Type) -> ir.Value:
    e = ir.RankedTensorType(t).element_type
    value = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1) \
        if isinstance(e, ir.IntegerType) else ir.FloatAttr.get_f64(1.0)
    return PRIM_OPS["full"](value, result=t).result


def _fuse(module: ir.Module, fwd, bwd, keep_outputs: bool) -> None:
    fblock, bblock = fwd.regions[0].blocks[0], bwd.regions[0].blocks[0]
    fret = list(fblock.operations)[-1].operation
    bret = list(bblock.operations)[-1].operation
    n_out = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
    n_wb = ir.IntegerAttr(fwd.attributes[WRITE_BACKS]).value \
        if WRITE_BACKS in fwd.attributes else 0
    diff = [bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(fwd.attributes[DIFF_OUTPUTS])]
    cot_types = [v.type for v, d in zip(list(fret.operands)[:n_out], diff) if d]

    with ir.InsertionPoint(module.body):
        comp = func_d.FuncOp("computation", ([a.type for a in fblock.arguments], []))
    for k in _COPIED_ATTRS:
        if k in fwd.attributes:
            comp.attributes[k] = fwd.attributes[k]
    block = comp.add_entry_block()
    with ir.InsertionPoint(block):
        end = func_d.ReturnOp([])  # the ops are moved before it; replaced at the end
    for old, new in zip(fblock.arguments, block.arguments):
        old.replace_all_uses_with(new)
    # read after the replacement: an output or residual may be an argument
    outputs, residuals = list(fret.operands)[:n_out], list(fret.operands)[n_out:]
    for op in [o.operation for o in fblock.operations][:-1]:
        op.move_before(end)
    with ir.InsertionPoint(end):
        cots = [_ones(t) for t in cot_types]
    for arg, value in zip(bblock.arguments, cots + residuals):
        arg.replace_all_uses_with(value)
    for op in [o.operation for o in bblock.operations][:-1]:
        op.move_before(end)
    # zeros for the differentiated inputs no output depends on (thunder_mlir.grad's contract)
    wrt = [a for a, w in zip(block.arguments,
                             ir.ArrayAttr(fwd.attributes["thunder.requires_grad"]))
           if ir.BoolAttr(w).value]
    reached = iter(bret.operands)
    zero = ir.FloatAttr.get_f64(0.0)
    with ir.InsertionPoint(end):
        grads = [next(reached) if ir.BoolAttr(r).value else
                 PRIM_OPS["full"](zero, result=a.type).result
                 for a, r in zip(wrt, ir.ArrayAttr(bwd.attributes[REACHED]))]
    kept = outputs[:n_out - n_wb] if keep_outputs else []
    results = kept + grads + outputs[n_out - n_wb:]
    with ir.InsertionPoint(end):
        func_d.ReturnOp(results)
    end.erase()
    comp.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in results]))
    if n_wb:
        comp.attributes[WRITE_BACKS] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n_wb)
    fwd.erase()
    bwd.erase()
    eliminate_dead_code(block)
