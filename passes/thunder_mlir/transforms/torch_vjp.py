"""VJPs that run torch.autograd on the torch executor, in the backward: of torch-fallback
ops (the op re-run under ``torch.autograd`` from the state of the generators its forward
started from), of prims whose derivative no prim computes (``torch_vjp``), and of custom
``torch.autograd.Function``s (their ``backward``, held in the trace's side table).
"""

from __future__ import annotations

import contextvars

import torch
from torch_mlir import ir

from thunder_mlir.errors import GradError
from thunder_mlir.frontend.torch_fallback import DIFFERENTIABLE
from thunder_mlir.ir import dtypes
from thunder_mlir.ir.dtypes import is_inexact, torch_dtype

CUSTOM_VJP_ATTR = "vjp"  # on a composite: side-table index of its VJP rule


# The trace's side table of executor implementations, set by ``grad.run`` from its
# ``side_table`` argument (jit's PassContext) while the pass runs, so torch-fallback ops can
# be differentiated by torch.autograd (see executor_call_vjp). Unset (thunder-opt), an
# executor call on the differentiated path is an error.
SIDE_TABLE: contextvars.ContextVar = contextvars.ContextVar("thunder_side_table", default=None)


def executor_call_vjp(bt, side_table, active, op, x, y, g):
    """VJP of a torch-fallback op: a backward executor call that re-runs the op's Python
    implementation under torch.autograd and returns ``torch.autograd.grad`` of it. Only
    the operands in ``active`` (those depending on a differentiated input) require grad
    in the re-run: torch refuses grad for some inputs (batch_norm's running statistics)."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.torch_fallback import replaying_rng_state

    forward = side_table[ir.IntegerAttr(op.attributes["impl"]).value]
    float_in = [is_inexact(torch_dtype(v.type)) and v in active for v in op.operands]
    float_out = [is_inexact(torch_dtype(r.type)) for r in op.results]
    cots = [c for c, f in zip(g, float_out) if f]
    result_types = [v.type for v, f in zip(op.operands, float_in) if f]
    operand_values = [p.value for p in x] + [c.value for c in cots]
    if not result_types:
        return [None] * len(x)
    state = _capture_rng_state(op, side_table)
    if state is not None:
        operand_values.append(bt.make_proxy(state).value)
    generators = getattr(forward, "generators", [])
    # the call's operands and results in type order: fewest runs of equal types (a
    # segmented variadic holds 8), restored to their order inside
    in_order = sorted(range(len(operand_values)), key=lambda i: str(operand_values[i].type))
    out_order = sorted(range(len(result_types)), key=lambda i: str(result_types[i]))
    if not (fits_in_runs([operand_values[i].type for i in in_order])
            and fits_in_runs([result_types[i] for i in out_order])):
        raise GradError(f"grad: too many distinct tensor types to differentiate "
                        f"{ir.StringAttr(op.attributes['callee']).value} at {op.location}")

    def vjp(*sorted_tensors):
        tensors = [None] * len(sorted_tensors)
        for k, i in enumerate(in_order):
            tensors[i] = sorted_tensors[k]
        grads = _vjp(tensors)
        return [grads[i] for i in out_order]

    def _vjp(tensors):
        n = len(float_in)
        # the other inputs are copied: an op that updates one in place (instance_norm's
        # running statistics) already did so in the forward
        xs = [t.detach().requires_grad_() if f else t.clone()
              for t, f in zip(tensors[:n], float_in)]
        with torch.enable_grad():
            if state is None:
                outs = forward(*xs)
            else:  # the forward's draw (see torch_fallback.with_rng_state)
                outs = replaying_rng_state(generators, tensors[-1], lambda: forward(*xs))
                tensors = tensors[:-1]
        pairs = [(o, c) for o, c in zip([o for o, f in zip(outs, float_out) if f], tensors[n:])
                 if o.requires_grad]
        wrt = [t for t, f in zip(xs, float_in) if f]
        grads = torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs],
                                    allow_unused=True) if pairs else [None] * len(wrt)
        return [torch.zeros_like(w) if gr is None else gr for w, gr in zip(wrt, grads)]

    key = len(side_table)
    side_table.append(vjp)
    callee = ir.StringAttr(op.attributes["callee"]).value
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", [operand_values[i] for i in in_order]),
                              **segment_kwargs("out", [result_types[i] for i in out_order],
                                               type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get(callee + ".vjp"),
                              impl=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key))
    results = [None] * len(result_types)
    for k, i in enumerate(out_order):
        results[i] = call.operation.results[k]
    results = iter(results)
    return [bt.make_proxy(next(results)) if f else None for f in float_in]


def torch_vjp(callee: str, fn, x: list, g: list) -> list:
    """Cotangents of the operands ``x`` (proxies) of a prim that the torch function ``fn``
    computes, given the cotangents ``g`` of its results: a backward torch executor call
    running ``torch.autograd.grad`` through ``fn`` (for prims whose derivative needs a
    function no prim computes, e.g. bessel_i1e's needs i0e). Emitted in the trace being
    built (the backward); GradError where no side table is set (thunder-opt)."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.tracing import current_trace

    side_table = SIDE_TABLE.get()
    if side_table is None:
        raise GradError(f"grad: the VJP of {callee} runs torch.autograd, which needs jit's "
                        "side table (not available under thunder-opt)")
    bt = current_trace()
    wants = [p.tdtype.is_floating_point for p in x]
    operands = [p.value for p in x] + [c.value for c in g]
    result_types = [p.value.type for p, w in zip(x, wants) if w]
    if not (fits_in_runs([v.type for v in operands]) and fits_in_runs(result_types)):
        raise GradError(f"grad: too many distinct tensor types to differentiate {callee}")

    def vjp(*tensors):
        n = len(x)
        xs = [t.detach().requires_grad_(w) for t, w in zip(tensors[:n], wants)]
        with torch.enable_grad():
            out = fn(*xs)
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        wrt = [t for t, w in zip(xs, wants) if w]
        grads = torch.autograd.grad(outs, wrt, list(tensors[n:]), allow_unused=True)
        return [torch.zeros_like(w) if gr is None else gr for w, gr in zip(wrt, grads)]

    key = len(side_table)
    side_table.append(vjp)
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", operands),
                              **segment_kwargs("out", result_types, type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get(callee + ".vjp"),
                              impl=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key))
    results = iter(call.operation.results)
    return [bt.make_proxy(next(results)) if w else None for w in wants]


def _capture_rng_state(op, side_table) -> ir.Value | None:
    """Make the forward torch executor call ``op`` also return the state of the generators
    it may draw from, taken before it runs (``torch_fallback.with_rng_state``), so that its
    backward re-runs it on the forward's random draw. The call is replaced by one with that
    extra (non-differentiable, uint8) result; the old call is erased after the backward is
    built. Returns the state value, or None where it is not needed or not possible: no
    generators (an in-place call), a call inside a region (its VJP recomputes the region),
    or results of more than 8 distinct types (then the backward draws anew)."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.torch_fallback import rng_state_size, with_rng_state

    forward = side_table[ir.IntegerAttr(op.attributes["impl"]).value]
    generators = getattr(forward, "generators", None)
    parent = op.parent
    if not generators or parent is None or parent.name != "func.func":
        return None
    state_type = dtypes.tensor_type((rng_state_size(generators),), torch.uint8)
    result_types = [r.type for r in op.results] + [state_type]
    if not fits_in_runs(result_types):
        return None
    key = len(side_table)
    side_table.append(with_rng_state(forward, generators))
    with ir.InsertionPoint(op), op.location:
        new = ExecutorCallOp(**segment_kwargs("in", list(op.operands)),
                             **segment_kwargs("out", result_types, type_of=lambda t: t),
                             executor=op.attributes["executor"],
                             callee=op.attributes["callee"],
                             impl=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key))
    flags = [True] * len(op.results)
    if DIFFERENTIABLE in op.attributes:
        flags = [ir.BoolAttr(a).value for a in ir.ArrayAttr(op.attributes[DIFFERENTIABLE])]
    new.operation.attributes[DIFFERENTIABLE] = ir.ArrayAttr.get(
        [ir.BoolAttr.get(f) for f in flags + [False]])
    results = list(new.operation.results)
    for old, r in zip(op.results, results):
        old.replace_all_uses_with(r)
    op.attributes["thunder.erase"] = ir.UnitAttr.get()
    return results[-1]


def side_table_rule(op):
    """The VJP rule a composite names by index in the trace's side table (a custom
    torch.autograd.Function's backward, thunder_mlir/custom_function.py)."""
    table = SIDE_TABLE.get()
    if table is None:
        raise GradError(f"grad: {ir.StringAttr(op.attributes['name']).value} at {op.location} "
                        "has a VJP rule only the jit that traced it holds (a custom "
                        "autograd.Function's backward); thunder-opt cannot differentiate it")
    return table[ir.IntegerAttr(op.attributes[CUSTOM_VJP_ATTR]).value]
