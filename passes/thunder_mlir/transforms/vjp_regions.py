"""VJPs of the region ops: ``thunder.checkpoint``, ``thunder.cond``, ``thunder.while``.

Each rule gets the backward trace ``bt`` (insertion point where the backward of ``op``
goes), the forward ``op``, the cotangent table ``ct`` (forward value -> proxy, updated in
place) and the ``active`` set, and differentiates the region's ops with ``grad.backprop``.

* **checkpoint**: the body is *recomputed* in the backward (a copy of its ops placed
  there) and differentiated; the backward reads only what the body captured, so its
  intermediates never become residuals (``torch.utils.checkpoint``'s contract).
* **cond**: a ``thunder.cond`` on the same predicate whose branches recompute the
  corresponding forward branch and differentiate it, yielding one cotangent per captured
  differentiable value (zeros where a branch does not use it). Residuals: the predicate
  and the captured values — the taken branch's intermediates are recomputed, as
  ``checkpoint`` does, rather than stored for both branches (JAX's ``cond`` instead
  returns the union of both branches' residuals from the forward).
* **while**: not differentiable here (the trip count is data-dependent, and reverse mode
  needs every iteration's residuals): a GradError names the loop.
"""

from __future__ import annotations

from torch_mlir import ir

from thunder_mlir.errors import GradError
from thunder_mlir.ir import prims
from thunder_mlir.ir.dtypes import is_inexact, torch_dtype
from thunder_mlir.ir.dialect import CondOp, YieldOp, fits_in_runs, segment_kwargs
from thunder_mlir.ir.regions import copy_block, values_defined_above


def checkpoint_vjp(bt, op, ct: dict, active: set) -> None:
    """Recompute ``op``'s body at ``bt``'s insertion point and differentiate the copy."""
    from thunder_mlir.transforms.grad import accumulate, backprop

    yielded, recomputed = copy_block(op, 0, [], bt.ip)
    for r, y in zip(op.results, yielded):
        if r in ct:
            accumulate(ct, y, ct[r])
    backprop(bt, recomputed, ct, active)


def cond_vjp(bt, op, ct: dict, active: set) -> None:
    """Emit a ``thunder.cond`` on ``op``'s predicate whose branches recompute and
    differentiate the forward branches; accumulate its results into the cotangents of the
    captured differentiable values. Raises GradError past 8 runs of their types."""
    from thunder_mlir.transforms.grad import accumulate, backprop

    captured = [v for v in values_defined_above(op)
                if v in active and is_inexact(torch_dtype(v.type))]
    if not captured:
        return
    captured.sort(key=lambda v: str(v.type))  # fewest runs of equal types
    types = [v.type for v in captured]
    if not fits_in_runs(types):
        raise GradError(f"grad: the branches of torch.cond at {op.location} read more than 8 "
                        "distinct types of differentiable tensors from outside")
    gs = [ct.get(r) for r in op.results]
    holder = ir.Operation.create("thunder_internal.holder", regions=2, ip=False)
    try:
        for i in range(2):
            block = holder.regions[i].blocks.append()
            with bt.insertion_point(ir.InsertionPoint(block)):
                yielded, recomputed = copy_block(op, i, [], ir.InsertionPoint(block))
                local: dict = {}
                for y, g in zip(yielded, gs):
                    if g is not None:
                        accumulate(local, y, g)
                backprop(bt, recomputed, local, set(active))
                outs = []
                for v in captured:
                    c = local.get(v)
                    if c is None:
                        p = bt.make_proxy(v)
                        c = prims.full(p.tshape, 0, p.tdtype)
                    outs.append(c.value)
            with ir.InsertionPoint(block), op.location:
                YieldOp(**segment_kwargs("in", outs))
        with bt.ip, op.location:
            new = CondOp(op.operands[0], **segment_kwargs("out", types, type_of=lambda t: t))
        for i in range(2):
            holder.regions[i].blocks[0].append_to(new.operation.regions[i])
    finally:
        holder.erase()
    for v, r in zip(captured, new.operation.results):
        accumulate(ct, v, bt.make_proxy(r))


def while_vjp(bt, op, ct: dict, active: set) -> None:
    """Raise GradError: a data-dependent loop is not differentiated (module docstring)."""

    origin = (ir.StringAttr(op.attributes["origin"]).value if "origin" in op.attributes
              else "while_loop")
    raise GradError(
        f"grad: cannot differentiate the {origin} at {op.location}: its trip count is "
        "data-dependent and reverse mode would need every iteration's values. Run the loop "
        "under torch.no_grad(), on tensors that do not require grad, or write it with a "
        "fixed number of steps (a Python for loop is unrolled while tracing)")


REGION_VJP = {"thunder.checkpoint": checkpoint_vjp, "thunder.cond": cond_vjp,
              "thunder.while": while_vjp}
