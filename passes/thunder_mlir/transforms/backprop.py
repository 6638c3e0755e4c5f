"""The reverse pass of ``grad``: ``backprop`` walks forward ops in reverse, applying each
op's VJP rule (``PrimDef.vjp`` per prim, ``ir/prim_defs.py``; ``vjp_composites.py`` per
composite; ``torch_vjp.py`` for torch executor calls) and accumulating cotangents of values
with several uses; the rules of the region ops (``thunder.checkpoint``, ``thunder.cond``,
``thunder.while``) are here, since they differentiate their regions with ``backprop`` in
turn.

Each region rule gets the backward trace ``bt`` (insertion point where the backward of
``op`` goes), the forward ``op``, the cotangent table ``ct`` (forward value -> proxy,
updated in place) and the ``active`` set.

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

import functools

from torch_mlir import ir

from thunder_mlir.errors import GradError
from thunder_mlir.frontend.torch_fallback import DIFFERENTIABLE
from thunder_mlir.ir import attrs, prims
from thunder_mlir.ir.dialect import CondOp, YieldOp, fits_in_runs, segment_kwargs
from thunder_mlir.ir.dtypes import is_inexact, torch_dtype
from thunder_mlir.ir.prim_defs import PRIMS
from thunder_mlir.ir.primdef import GradNotImplemented, TorchAutogradVJP
from thunder_mlir.ir.regions import (
    copy_block, free_values, replace_uses_in, values_defined_above)
from thunder_mlir.transforms.torch_vjp import (
    CUSTOM_VJP_ATTR, custom_vjp_rule, executor_call_vjp, torch_vjp)
from thunder_mlir.transforms.vjp_composites import COMPOSITE_VJP


def checkpoint_vjp(bt, op, ct: dict, active: set) -> None:
    """Recompute ``op``'s body at ``bt``'s insertion point and differentiate the copy.

    What the body read from outside and the program wrote after it is read, by the
    recomputation and its VJPs, as the final value of that memory (``bt.recompute_reads``,
    {old: final}; frontend/region_reads.py): eager's backward re-runs the function on the
    memory as it is then. The cotangents still go to ``old``'s producer."""
    final = getattr(bt, "recompute_reads", None)
    marker = ir.Operation.create("thunder_internal.marker", ip=bt.ip) if final else None
    yielded, recomputed = copy_block(op, 0, [], bt.ip)
    for r, y in zip(op.results, yielded):
        if r in ct:
            accumulate(ct, y, ct[r])
    backprop(bt, recomputed, ct, active)
    if marker is None:
        return
    ops = [o.operation for o in marker.block.operations]
    start = ops.index(marker) + 1
    ref = bt.ip.ref_operation
    end = ops.index(ref.operation) if ref is not None else len(ops)
    replace_uses_in(ops[start:end], final)
    marker.erase()


def cond_vjp(bt, op, ct: dict, active: set) -> None:
    """Emit a ``thunder.cond`` on ``op``'s predicate whose branches recompute and
    differentiate the forward branches; accumulate its results into the cotangents of the
    captured differentiable values. Raises GradError past 8 runs of their types."""
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


def accumulate(ct: dict, v: ir.Value, c) -> None:
    """Add cotangent ``c`` to ``ct[v]`` (a value with several uses gets their sum)."""
    prev = ct.get(v)
    ct[v] = c if prev is None else prims.elementwise("add", prev, c)


def differentiable_results(op: ir.Operation) -> list[ir.Value]:
    """The results of ``op`` that can carry a gradient: floating-point (or complex) ones,
    except those a torch executor call declares non-differentiable (``linalg.lu``'s
    permutation; see ``torch_fallback.DIFFERENTIABLE``); none for ``thunder.stop_gradient``."""
    if op.name == "thunder.stop_gradient":
        return []
    flags = None
    if DIFFERENTIABLE in op.attributes:
        flags = attrs.get_bools(op, DIFFERENTIABLE)
    return [r for i, r in enumerate(op.results)
            if is_inexact(torch_dtype(r.type)) and (flags is None or flags[i])]


def mark_active(body: list, active: set) -> None:
    """Extend ``active`` (values depending on a differentiated input) with the
    differentiable results of the ops of ``body`` that read an active value."""
    for op in body:
        if any(v in active for v in free_values(op)):
            active.update(differentiable_results(op))


def backprop(bt, body: list, ct: dict, active: set) -> None:
    """Emit, at ``bt``'s insertion point, the reverse pass over the forward ops ``body``.

    ``ct`` maps forward values to their cotangents (proxies) and is updated in place;
    ``active`` holds the values that depend on a differentiated input and is extended with
    the results of ``body`` (activity analysis: a backward for constant subexpressions
    would be wasted work). Region ops go to ``REGION_VJP``; the rest to VJP rules.
    """
    mark_active(body, active)
    for op in reversed(body):
        if not any(r in active for r in op.results):
            continue
        gs = [ct.get(r) for r in op.results]
        if all(g is None for g in gs):
            continue
        if op.name in REGION_VJP:
            bt.loc = op.location
            with op.location:
                REGION_VJP[op.name](bt, op, ct, active)
            continue
        short = op.name[len("thunder."):] if op.name.startswith("thunder.") else op.name
        prim = PRIMS.get(short)
        if prim is not None and prim.no_grad is not None:
            continue
        if short == "composite" and CUSTOM_VJP_ATTR in op.attributes:
            fn = custom_vjp_rule(op)
        elif short == "composite":
            short = ir.StringAttr(op.attributes["name"]).value
            fn = COMPOSITE_VJP[short]
        elif short == "executor_call":
            fn = functools.partial(executor_call_vjp, bt, active)
        elif prim is not None and isinstance(prim.vjp, TorchAutogradVJP):
            fn = _torch_autograd_rule(prim.vjp)
        else:
            fn = prim.vjp if prim is not None else None
        if fn is None:
            what = (f"the torch fallback op {ir.StringAttr(op.attributes['callee']).value}"
                    if op.name == "thunder.executor_call" else f"'{op.name}'")
            raise GradError(f"grad: no VJP rule for {what} at {op.location}")
        x = [bt.make_proxy(v) for v in op.operands]
        y = [bt.make_proxy(r) for r in op.results]
        gs = [g if g is not None else prims.full(yy.tshape, 0, yy.tdtype)
              for g, yy in zip(gs, y)]
        bt.loc = op.location
        with op.location:
            in_cts = fn(op, x, y, gs)
        for v, c in zip(op.operands, in_cts):
            if isinstance(c, GradNotImplemented):
                if v not in active:
                    continue
                bt.backward_errors.append(c.message)  # raised when the backward runs
                c = c.cotangent
            if c is not None and v in active:
                accumulate(ct, v, c)


def _torch_autograd_rule(spec: TorchAutogradVJP):
    """The VJP rule running ``torch.autograd`` through ``spec.fn`` on the torch executor."""
    return lambda op, x, y, g: torch_vjp(spec.qualname, spec.fn, x, g)
