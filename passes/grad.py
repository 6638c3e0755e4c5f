"""``grad``: reverse-mode automatic differentiation of ``@computation`` as a pass.

Input: ``func.func @computation`` (composites allowed: those with a composite-level rule in
``vjp_composites.py`` are differentiated whole, the others are inlined first). Output:

* ``@forward(inputs) -> (outputs..., residuals...)`` — the original ops, plus the values the
  backward needs;
* ``@backward(cotangents..., residuals...) -> (input grads...)`` — one cotangent per
  floating-point output (except the trailing ``thunder.num_write_backs`` results, the new
  values of inputs updated in place), one gradient per differentiated input.

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

from thunder_mlir import dtypes, prims
from thunder_mlir.dialects import REGION_OPS
from thunder_mlir.region_utils import free_values, inline_block, nested_ops, operand_sites

from .vjp import NO_GRAD, VJP
from .vjp_composites import APPLIES, COMPOSITE_VJP

NAME = "grad"
WRITE_BACKS = "thunder.num_write_backs"  # set by jit: trailing results that update inputs
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
    implementation under torch.autograd from the generator state its forward started from
    (``torch_fallback.replay_vjp``) and returns ``torch.autograd.grad`` for its operands in
    ``active``. The forward op is replaced by one that also returns that state (a
    residual); the original is marked ``thunder.erase``."""
    from thunder_mlir.dialects import ExecutorCallOp, fits_in_runs, segment_kwargs
    from thunder_mlir.executors.torch_fallback import (permuted, recording_rng, replay_vjp,
                                                       rng_state_size, type_order, unpermute)

    forward = side_table[ir.IntegerAttr(op.attributes["impl"]).value]
    diff_in = [_is_float(v.type) and v in active for v in op.operands]
    float_out = [_is_float(r.type) for r in op.results]
    cots = [c for c, f in zip(g, float_out) if f]
    result_types = [v.type for v, d in zip(op.operands, diff_in) if d]
    if not result_types:
        return [None] * len(x)
    state_type = dtypes.tensor_type((rng_state_size(bt.device),), torch.uint8)
    fwd_types = [r.type for r in op.results] + [state_type]
    operands = [p.value for p in x] + [c.value for c in cots]
    operands.append(None)  # the recorded generator state, below
    operand_types = [v.type for v in operands[:-1]] + [state_type]
    fwd_order, in_order, out_order = (type_order(t) for t in (fwd_types, operand_types,
                                                               result_types))
    callee = ir.StringAttr(op.attributes["callee"]).value
    if not (fits_in_runs([operand_types[i] for i in in_order])
            and fits_in_runs([result_types[i] for i in out_order])
            and fits_in_runs([fwd_types[i] for i in fwd_order])):
        raise GradError(f"grad: more than 8 distinct tensor types to differentiate the torch "
                        f"fallback op {callee} at {op.location}")
    i64 = ir.IntegerType.get_signless(64)
    identity = list(range(len(op.operands)))
    side_table.append(permuted(recording_rng(forward, bt.device), identity, fwd_order))
    with ir.InsertionPoint(op):
        recorded = ExecutorCallOp(**segment_kwargs("in", list(op.operands)),
                                  **segment_kwargs("out", [fwd_types[i] for i in fwd_order],
                                                   type_of=lambda t: t),
                                  executor=op.attributes["executor"],
                                  callee=op.attributes["callee"],
                                  impl=ir.IntegerAttr.get(i64, len(side_table) - 1))
    new_results = unpermute(list(recorded.operation.results), fwd_order)
    for old, new in zip(op.results, new_results):
        old.replace_all_uses_with(new)
    op.attributes["thunder.erase"] = ir.UnitAttr.get()
    operands[-1] = new_results[-1]
    side_table.append(permuted(replay_vjp(forward, diff_in, float_out, bt.device), in_order,
                               out_order))
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", [operands[i] for i in in_order]),
                              **segment_kwargs("out", [result_types[i] for i in out_order],
                                               type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get(callee + ".vjp"),
                              impl=ir.IntegerAttr.get(i64, len(side_table) - 1))
    results = iter(unpermute(list(call.operation.results), out_order))
    return [bt.make_proxy(next(results)) if d else None for d in diff_in]


class GradError(NotImplementedError):
    """An op the grad pass cannot differentiate (named with its source location)."""


def _func(module: ir.Module, name: str):
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _is_float(t: ir.Type) -> bool:
    d = dtypes.torch_dtype(t)
    return d.is_floating_point or d.is_complex


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
    from thunder_mlir.tracing import Trace

    block = fwd.regions[0].blocks[0]
    _inline_composites_without_rules(block)
    ops = [o.operation for o in block.operations]
    ret = ops[-1]
    body = ops[:-1]
    args = list(block.arguments)
    if "thunder.requires_grad" in fwd.attributes:
        wrt = [bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(fwd.attributes["thunder.requires_grad"])]
    else:
        wrt = [_is_float(a.type) for a in args]
    outputs = list(ret.operands)
    # trailing write-backs (inputs updated in place, e.g. running statistics) get no cotangent
    n_diff = len(outputs) - (ir.IntegerAttr(fwd.attributes[WRITE_BACKS]).value
                             if WRITE_BACKS in fwd.attributes else 0)
    diff_out = [_is_float(v.type) and i < n_diff for i, v in enumerate(outputs)]
    device = torch.device(ir.StringAttr(fwd.attributes["thunder.device"]).value) \
        if "thunder.device" in fwd.attributes else torch.device("cpu")

    bt = Trace(device, module=module)
    with bt.building():
        cots = bt.begin([v.type for v, d in zip(outputs, diff_out) if d], name="backward")
        ct: dict[ir.Value, object] = {}
        for v, c in zip([v for v, d in zip(outputs, diff_out) if d], cots):
            accumulate(ct, v, bt.make_proxy(c))
        backprop(bt, body, ct, {a for a, w in zip(args, wrt) if w})
        grads = []
        for a, w in zip(args, wrt):
            if not w:
                continue
            g = ct.get(a)
            if g is None:
                p = bt.make_proxy(a)
                g = prims.full(p.tshape, 0, p.tdtype)
            grads.append(g.value)
        bt.finish(grads)
    # grad transforms (thunder_mlir.extend) emit their own forward and mark the op they
    # replace: drop it (in a region too, or in a region's copy recomputed in the backward),
    # and take the forward's ops and outputs as they are now
    for f in (fwd, bt.func_op.operation):
        for op in [o for o in nested_ops(f) if "thunder.erase" in o.attributes]:
            op.erase()
    body = [o.operation for o in block.operations][:-1]
    outputs = list(ret.operands)

    bwd = bt.func_op.operation
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
    bwd.attributes["thunder.device"] = ir.StringAttr.get(str(device))


def accumulate(ct: dict, v: ir.Value, c) -> None:
    """Add cotangent ``c`` to ``ct[v]`` (a value with several uses gets their sum)."""
    prev = ct.get(v)
    ct[v] = c if prev is None else prims.elementwise("add", prev, c)


def backprop(bt, body: list, ct: dict, active: set) -> None:
    """Emit, at ``bt``'s insertion point, the reverse pass over the forward ops ``body``.

    ``ct`` maps forward values to their cotangents (proxies) and is updated in place;
    ``active`` holds the values that depend on a differentiated input and is extended with
    the results of ``body`` (activity analysis: a backward for constant subexpressions
    would be wasted work). Region ops go to ``vjp_regions``; the rest to VJP rules.
    """
    from .vjp_regions import REGION_VJP

    for op in body:
        if any(v in active for v in free_values(op)):
            active.update(r for r in op.results if _is_float(r.type))
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
        if short == "composite":
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
            if name is None or (name in COMPOSITE_VJP and APPLIES[name](op)):
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


def residual_bytes(module: ir.Module) -> int:
    """Bytes of the residuals ``@forward`` saves for ``@backward`` (for reports)."""
    with module.context:
        fwd = _func(module, "forward")
        n = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
        ret = list(fwd.regions[0].blocks[0].operations)[-1].operation
        return sum(_nbytes(v.type) for v in list(ret.operands)[n:])
