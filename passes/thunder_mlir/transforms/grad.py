"""``grad``: reverse-mode automatic differentiation of ``@computation`` as a pass.

Input: ``func.func @computation`` (composites allowed: those with a composite-level rule in
``vjp_composites.py`` are differentiated whole, the others are inlined first). Output:

* ``@forward(inputs) -> (outputs..., residuals...)`` — the original ops, plus the values the
  backward needs;
* ``@backward(cotangents..., residuals...) -> (input grads...)`` — one cotangent per
  differentiable output (``thunder.diff_outputs``; by default the floating-point outputs
  except the trailing ``thunder.num_write_backs`` results, the new values of inputs
  updated in place), one gradient per differentiated input some output depends on
  (``thunder.reached`` says which).

Random ops (``thunder.rng_bits``) have no gradient; a value computed from random bits (a
dropout mask) reaches the backward as a residual, so it is the forward's value. The seed
input is an integer: never differentiated.

The backward is built by walking the forward ops in reverse and applying each prim's VJP
rule (``vjp.py``), accumulating cotangents of values with several uses. Rules first refer
to forward values directly; the split then turns every forward value the backward uses
into a residual. Before that, **rematerialization** moves cheap ops (elementwise,
broadcasts, reshapes, constants) into the backward whenever recomputing them does not
increase the bytes saved — the greedy form of the min-cut rule of Thunder's and
torch.compile's partitioners. Which inputs are differentiated: ``thunder.requires_grad``
on the function (an ``array<i1>``), else every floating-point input.
"""

from __future__ import annotations

import contextvars
import functools

import torch
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.errors import GradError
from thunder_mlir.ir import dtypes, prims
from thunder_mlir.ir.dtypes import is_inexact, torch_dtype
from thunder_mlir.ir.dialect import REGION_OPS
from thunder_mlir.frontend.torch_fallback import DIFFERENTIABLE
from thunder_mlir.ir.regions import (
    eliminate_dead_code, free_values, inline_block, nested_ops, operand_sites)

from thunder_mlir.transforms.vjp import NO_GRAD, VJP
from thunder_mlir.transforms.vjp_composites import APPLIES, COMPOSITE_VJP

NAME = "grad"
WRITE_BACKS = "thunder.num_write_backs"  # set by jit: trailing results that update inputs
DIFF_OUTPUTS = "thunder.diff_outputs"  # set by jit: array<i1>, the outputs that get cotangents
BACKWARD_ERROR = "thunder.backward_error"  # on @backward: raised when the backward runs
CUSTOM_VJP_ATTR = "vjp"  # on a composite: side-table index of its VJP rule
REACHED = "thunder.reached"  # on @backward: per differentiated input, has a gradient
CHEAP = {"add", "sub", "mul", "div", "neg", "exp", "log", "tanh", "logistic", "sqrt", "rsqrt",
         "abs", "sign", "maximum", "minimum", "where", "convert_element_type", "eq", "ne",
         "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_not", "isfinite",
         "broadcast_in_dim", "reshape", "transpose", "full", "iota", "pow", "erf", "sin",
         "cos"}


# The trace's side table of executor implementations, set by ``jit`` while the pass runs,
# so torch-fallback ops can be differentiated by torch.autograd (see _executor_call_vjp).
# Unset (e.g. under thunder-opt), an executor call on the differentiated path is an error.
SIDE_TABLE: contextvars.ContextVar = contextvars.ContextVar("thunder_side_table", default=None)


def _executor_call_vjp(bt, side_table, active, op, x, y, g):
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


def _side_table_rule(op):
    """The VJP rule a composite names by index in the trace's side table (a custom
    torch.autograd.Function's backward, thunder_mlir/custom_function.py)."""
    table = SIDE_TABLE.get()
    if table is None:
        raise GradError(f"grad: {ir.StringAttr(op.attributes['name']).value} at {op.location} "
                        "has a VJP rule only the jit that traced it holds (a custom "
                        "autograd.Function's backward); thunder-opt cannot differentiate it")
    return table[ir.IntegerAttr(op.attributes[CUSTOM_VJP_ATTR]).value]


def _func(module: ir.Module, name: str):
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _nbytes(t: ir.Type) -> int:
    rt = ir.RankedTensorType(t)
    n = 1
    for s in rt.shape:
        n *= s
    return n * torch.empty((), dtype=dtypes.torch_dtype(t)).element_size()


def run(module: ir.Module) -> None:
    """Differentiate ``@computation`` (see module docstring)."""
    with module.context, ir.Location.unknown():
        fwd = _func(module, "computation")
        if fwd is None:
            raise ValueError("grad: the module has no func.func @computation")
        _differentiate(module, fwd)


def _differentiate(module: ir.Module, fwd) -> None:
    from thunder_mlir.frontend.tracing import Trace

    block = fwd.regions[0].blocks[0]
    _inline_composites_without_rules(block)
    ops = [o.operation for o in block.operations]
    ret = ops[-1]
    body = ops[:-1]
    args = list(block.arguments)
    if "thunder.requires_grad" in fwd.attributes:
        wrt = [bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(fwd.attributes["thunder.requires_grad"])]
    else:
        wrt = [is_inexact(torch_dtype(a.type)) for a in args]
    outputs = list(ret.operands)
    active = {a for a, w in zip(args, wrt) if w}
    if DIFF_OUTPUTS in fwd.attributes:  # set by jit: the outputs eager's autograd tracks
        diff_out = [bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(fwd.attributes[DIFF_OUTPUTS])]
    else:
        # outputs that depend on a differentiated input get a cotangent, except the trailing
        # write-backs (inputs updated in place, e.g. running statistics)
        n_diff = len(outputs) - (ir.IntegerAttr(fwd.attributes[WRITE_BACKS]).value
                                 if WRITE_BACKS in fwd.attributes else 0)
        mark_active(body, active)
        diff_out = [is_inexact(torch_dtype(v.type)) and i < n_diff and v in active
                    for i, v in enumerate(outputs)]
    device = torch.device(ir.StringAttr(fwd.attributes["thunder.device"]).value) \
        if "thunder.device" in fwd.attributes else torch.device("cpu")

    bt = Trace(device, module=module)
    with bt.building():
        cots = bt.begin([v.type for v, d in zip(outputs, diff_out) if d], name="backward")
        ct: dict[ir.Value, object] = {}
        for v, c in zip([v for v, d in zip(outputs, diff_out) if d], cots):
            accumulate(ct, v, bt.make_proxy(c))
        backprop(bt, body, ct, active)
        # a differentiated input no output depends on gets no gradient (eager leaves its
        # .grad None): @backward returns the gradients of the reached inputs only
        grads, reached = [], []
        for a, w in zip(args, wrt):
            if w:
                g = ct.get(a)
                reached.append(g is not None)
                if g is not None:
                    grads.append(g.value)
        bt.finish(grads)
        bt.func_op.attributes[REACHED] = ir.ArrayAttr.get([ir.BoolAttr.get(r) for r in reached])
    # grad transforms (thunder_mlir.extend) emit their own forward and mark the op they
    # replace: drop it (in a region too, or in a region's copy recomputed in the backward),
    # and take the forward's ops and outputs as they are now
    for f in (fwd, bt.func_op.operation):
        for op in [o for o in nested_ops(f) if "thunder.erase" in o.attributes]:
            op.erase()
    body = [o.operation for o in block.operations][:-1]
    outputs = list(ret.operands)

    bwd = bt.func_op.operation
    # rules emit cotangents for every operand; those of inactive operands are unused
    eliminate_dead_code(bwd.regions[0].blocks[0])
    residuals = _split(fwd, bwd, body)
    # forward returns outputs + residuals
    with ir.InsertionPoint(ret):
        func_d.ReturnOp(outputs + residuals)
    ret.erase()
    fwd.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in args], [v.type for v in outputs + residuals]))
    fwd.attributes["sym_name"] = ir.StringAttr.get("forward")
    fwd.attributes["thunder.num_outputs"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), len(outputs))
    fwd.attributes["thunder.requires_grad"] = ir.ArrayAttr.get([ir.BoolAttr.get(w) for w in wrt])
    fwd.attributes[DIFF_OUTPUTS] = ir.ArrayAttr.get([ir.BoolAttr.get(d) for d in diff_out])
    bwd.attributes["thunder.device"] = ir.StringAttr.get(str(device))
    if bt.backward_errors:
        bwd.attributes[BACKWARD_ERROR] = ir.StringAttr.get(bt.backward_errors[0])


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
        flags = [ir.BoolAttr(a).value for a in ir.ArrayAttr(op.attributes[DIFFERENTIABLE])]
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
    would be wasted work). Region ops go to ``vjp_regions``; the rest to VJP rules.
    """
    from thunder_mlir.transforms.vjp_regions import REGION_VJP

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
        if short in NO_GRAD:
            continue
        if short == "no_derivative":  # eager raises when its backward reaches this op
            bt.backward_errors.append(ir.StringAttr(op.attributes["message"]).value)
            for v in op.operands:
                if v in active:
                    accumulate(ct, v, ct[op.results[0]])
            continue
        if short == "composite" and CUSTOM_VJP_ATTR in op.attributes:
            fn = _side_table_rule(op)
        elif short == "composite":
            short = ir.StringAttr(op.attributes["name"]).value
            fn = COMPOSITE_VJP[short]
        elif short == "executor_call" and SIDE_TABLE.get() is not None:
            fn = functools.partial(_executor_call_vjp, bt, SIDE_TABLE.get(), active)
        else:
            fn = VJP.get(short)
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
            if c is not None and v in active:
                accumulate(ct, v, c)


def _composite_name(op) -> str | None:
    if op.name != "thunder.composite":
        return None
    return ir.StringAttr(op.attributes["name"]).value


def _inline_composites_without_rules(block) -> None:
    """Inline (one level at a time) every composite that has no applicable VJP rule, so
    its decomposition is differentiated instead; composites with a rule stay whole. The
    blocks of control-flow ops are processed too (their VJPs differentiate their ops)."""
    changed = True
    while changed:
        changed = False
        for op in [o.operation for o in block.operations]:
            if op.name in REGION_OPS:
                for region in op.regions:
                    _inline_composites_without_rules(region.blocks[0])
                continue
            name = _composite_name(op)
            if name is None or (name in COMPOSITE_VJP and APPLIES[name](op)) \
                    or CUSTOM_VJP_ATTR in op.attributes:
                continue
            yielded, _ = inline_block(op, 0, list(op.operands), op)
            for r, v in zip(op.results, yielded):
                r.replace_all_uses_with(v)
            op.erase()
            changed = True


def _split(fwd, bwd, body) -> list[ir.Value]:
    """Rematerialize cheap values, then turn remaining forward values into residuals.

    ``uses`` maps each forward value the backward reads to its (op, operand index) sites,
    built once and kept up to date, so each rewrite touches only its own uses.
    """
    bblock = bwd.regions[0].blocks[0]
    fblock = fwd.regions[0].blocks[0]
    forward_values = set(fblock.arguments)
    for o in body:
        forward_values.update(o.results)
    uses: dict[ir.Value, list[tuple[ir.Operation, int]]] = {}
    for op in bblock.operations:  # (the regions of backward control-flow ops read them too)
        for user, i, v in operand_sites(op.operation):
            if v in forward_values:
                uses.setdefault(v, []).append((user, i))
    needed = list(uses)
    changed = True
    while changed:
        changed = False
        for v in list(needed):
            d = v.owner
            if isinstance(d, ir.Block):
                continue
            d = d.operation
            short = d.name[len("thunder."):] if d.name.startswith("thunder.") else d.name
            if short not in CHEAP or len(d.results) != 1:
                continue
            extra = [o for o in set(d.operands) if o not in uses]
            if sum(_nbytes(o.type) for o in extra) > _nbytes(v.type):
                continue
            first = next(iter(bblock.operations)).operation
            clone = d.clone(ip=ir.InsertionPoint(first))
            for op, i in uses.pop(v):
                op.operands[i] = clone.results[0]
            needed.remove(v)
            for j, o in enumerate(clone.operands):
                if o not in uses:
                    uses[o] = []
                    needed.append(o)
                uses[o].append((clone, j))
            changed = True
    residuals = []
    for v in needed:
        arg = bblock.add_argument(v.type, v.location)
        for op, i in uses[v]:
            op.operands[i] = arg
        residuals.append(v)
    bwd.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in bblock.arguments],
        [r.type for r in list(bblock.operations)[-1].operation.operands]))
    bwd.attributes["thunder.num_residuals"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), len(residuals))
    return residuals


def reached_inputs(module: ir.Module) -> list[bool]:
    """Per differentiated input of ``@forward``, whether ``@backward`` returns its gradient
    (False: no output depends on it)."""
    with module.context:
        return [bool(ir.BoolAttr(a).value)
                for a in ir.ArrayAttr(_func(module, "backward").attributes[REACHED])]


def backward_error(module: ir.Module) -> str | None:
    """The message of eager's error for differentiating through a ``thunder.no_derivative``
    that ``@backward`` reaches (raised when the backward runs), or None."""
    with module.context:
        bwd = _func(module, "backward")
        if bwd is None or BACKWARD_ERROR not in bwd.attributes:
            return None
        return ir.StringAttr(bwd.attributes[BACKWARD_ERROR]).value


def differentiable_outputs(module: ir.Module) -> list[bool]:
    """Per output of ``@forward`` (program outputs, then write-backs; not residuals),
    whether it is differentiable: it gets a cotangent in ``@backward``."""
    with module.context:
        fwd = _func(module, "forward")
        return [ir.BoolAttr(a).value for a in ir.ArrayAttr(fwd.attributes[DIFF_OUTPUTS])]


def residual_bytes(module: ir.Module) -> int:
    """Bytes of the residuals ``@forward`` saves for ``@backward`` (for reports)."""
    with module.context:
        fwd = _func(module, "forward")
        n = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
        ret = list(fwd.regions[0].blocks[0].operations)[-1].operation
        return sum(_nbytes(v.type) for v in list(ret.operands)[n:])
