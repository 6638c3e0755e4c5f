"""VJPs that run torch.autograd on the torch executor, in the backward: of torch-fallback
ops (the op re-run under ``torch.autograd`` from the state of the generators its forward
started from), of prims whose derivative no prim computes (``torch_vjp``), and of custom
``torch.autograd.Function``s (their ``backward``, named by symbol). The backward calls'
implementations are registered in ir/implementations.py.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from thunder_mlir.errors import GradError
from thunder_mlir.frontend.torch_fallback import CALL_ATTR, CONNECTED, DIFFERENTIABLE, \
    RNG_STATE_ATTR, STORAGE_ATTR, TRIAL_ATTR, implementation_of
from thunder_mlir.ir import attrs, dtypes, implementations
from thunder_mlir.ir.dtypes import is_inexact, torch_dtype

CUSTOM_VJP_ATTR = "vjp"  # on a composite: the symbol of its VJP rule


def executor_call_vjp(bt, active, op, x, y, g):
    """VJP of a torch-fallback op: a backward executor call that re-runs the op's Python
    implementation under torch.autograd and returns ``torch.autograd.grad`` of it. Only
    the operands in ``active`` (those depending on a differentiated input) require grad
    in the re-run: torch refuses grad for some inputs (batch_norm's running statistics).
    Raises MissingImplementationError where this process holds no implementation of
    ``op``."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.torch_fallback import replaying_rng_state

    forward = implementation_of(op)
    # an operand eager's autograd graph does not reach (torch_fallback.CONNECTED) gets no
    # cotangent: eager leaves its .grad None
    connected = attrs.get_bools(op, CONNECTED, [True] * len(op.operands))
    float_in = [is_inexact(torch_dtype(v.type)) and v in active and c
                for v, c in zip(op.operands, connected)]
    float_out = [is_inexact(torch_dtype(r.type)) for r in op.results]
    cots = [c for c, f in zip(g, float_out) if f]
    result_types = [v.type for v, f in zip(op.operands, float_in) if f]
    operand_values = [p.value for p in x] + [c.value for c in cots]
    if not result_types:
        return [None] * len(x)
    state = _capture_rng_state(op, forward)
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

    callee = ir.StringAttr(op.attributes["callee"]).value
    impl = implementations.register_attr(callee + ".vjp", vjp)
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", [operand_values[i] for i in in_order]),
                              **segment_kwargs("out", [result_types[i] for i in out_order],
                                               type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get(callee + ".vjp"), impl=impl)
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
    built (the backward)."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.tracing import current_trace

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

    impl = implementations.register_attr(callee + ".vjp", vjp)
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", operands),
                              **segment_kwargs("out", result_types, type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get(callee + ".vjp"), impl=impl)
    results = iter(call.operation.results)
    return [bt.make_proxy(next(results)) if w else None for w in wants]


def _capture_rng_state(op, forward) -> ir.Value | None:
    """Make the forward torch executor call ``op`` also return the state of the generators
    it may draw from, taken before it runs (``torch_fallback.with_rng_state``), so that its
    backward re-runs it on the forward's random draw. The call is replaced by one with that
    extra (non-differentiable, uint8) result; the old call is erased after the backward is
    built. Returns the state value, or None where it is not needed or not possible: no
    generators (an in-place call), a call inside a region (its VJP recomputes the region),
    or results of more than 8 distinct types (then the backward draws anew). ``forward``:
    the op's implementation. A call rebuilt from the IR (``thunder.torch_call``) stays
    so, marked ``thunder.rng_state``; another's state-returning form is registered."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.frontend.torch_fallback import rng_state_size, with_rng_state

    generators = getattr(forward, "generators", None)
    parent = op.parent
    if not generators or parent is None or parent.name != "func.func":
        return None
    state_type = dtypes.tensor_type((rng_state_size(generators),), torch.uint8)
    result_types = [r.type for r in op.results] + [state_type]
    if not fits_in_runs(result_types):
        return None
    encoded = CALL_ATTR in op.attributes
    impl = op.attributes["impl"] if encoded else implementations.register_attr(
        ir.StringAttr(op.attributes["callee"]).value, with_rng_state(forward, generators))
    with ir.InsertionPoint(op), op.location:
        new = ExecutorCallOp(**segment_kwargs("in", list(op.operands)),
                             **segment_kwargs("out", result_types, type_of=lambda t: t),
                             executor=op.attributes["executor"],
                             callee=op.attributes["callee"], impl=impl)
    if encoded:
        # (STORAGE_ATTR: a view of a computed tensor whose buffer may be the input's, as
        # a folded clone's is, is copied at the run: torch_fallback._make_run)
        for name in (CALL_ATTR, TRIAL_ATTR, STORAGE_ATTR):
            if name in op.attributes:
                new.operation.attributes[name] = op.attributes[name]
        new.operation.attributes[RNG_STATE_ATTR] = ir.UnitAttr.get()
    if CONNECTED in op.attributes:
        new.operation.attributes[CONNECTED] = op.attributes[CONNECTED]
    flags = [True] * len(op.results)
    if DIFFERENTIABLE in op.attributes:
        flags = attrs.get_bools(op, DIFFERENTIABLE)
    new.operation.attributes[DIFFERENTIABLE] = ir.ArrayAttr.get(
        [ir.BoolAttr.get(f) for f in flags + [False]])
    results = list(new.operation.results)
    for old, r in zip(op.results, results):
        old.replace_all_uses_with(r)
    op.attributes["thunder.erase"] = ir.UnitAttr.get()
    return results[-1]


def custom_vjp_rule(op):
    """The VJP rule a composite names by symbol (a custom torch.autograd.Function's
    backward, frontend/custom_function.py). Raises MissingImplementationError where this
    process holds no such symbol (the rule is a closure of the process that traced it)."""
    return implementations.lookup_attr(op.attributes[CUSTOM_VJP_ATTR], op.location)
