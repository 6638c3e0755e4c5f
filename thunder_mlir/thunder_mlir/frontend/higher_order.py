"""Higher-order operators: user callables traced reentrantly into regions.

``torch.cond``, ``torch._higher_order_ops.while_loop``/``scan`` and
``torch.utils.checkpoint.checkpoint`` take Python functions. While a program is traced,
the tracer calls those functions itself, with proxies, at an insertion point inside the
region of a ``thunder.cond``/``thunder.while``/``thunder.checkpoint`` op — the same
tracer, re-entered — so grad, executors and the lowering see the callables' insides as IR.
Values the callables read from the enclosing program (their operands, closures, module
parameters) are captured from above, as in ``scf.if``; loop-carried values are block
arguments.

How the torch entry points reach this module: ``torch.cond``/``while_loop``/``scan`` call
their higher-order operator (``torch.ops.higher_order.*``), which reaches
``dispatch.dispatch`` through the torch-function protocol once ``compat`` has made their
eager path skip ``torch.compile`` while tracing; the symbols in
``symbols/control_flow.py`` call :func:`cond`, :func:`while_loop` and :func:`scan`.
``checkpoint`` brackets the user's call with torch's own code, which ``compat`` makes open
a :func:`checkpoint_scope`; :func:`close_regions` turns scopes into ops when the trace
ends. See docs/region_ops.md.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable, Sequence

import torch
import torch.utils._pytree as torch_pytree
from torch_mlir import ir

from thunder_mlir.ir.dialect import (
    CheckpointOp, CondOp, WhileOp, YieldOp, fits_in_runs, segment_kwargs)

from thunder_mlir.ir import dtypes, prims
from thunder_mlir.errors import TraceError
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.regions import defined_inside, is_inside, nested_ops, operand_sites
from thunder_mlir.frontend import region_reads, runtime_checks
from thunder_mlir.frontend.tracing import current_trace, user_code_mode
from thunder_mlir.frontend.locations import describe_frame, user_frame

_HOLDER = "thunder_internal.holder"
SCOPE = "thunder_internal.checkpoint_scope"


def _where() -> str:
    return describe_frame(user_frame())


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__name__}"


def _as_predicate(pred: TensorProxy, what: str) -> TensorProxy:
    """A one-element tensor as the ``tensor<i1>`` a region op branches on (nonzero)."""
    if type(pred) is not TensorProxy or pred.numel() != 1:
        raise TraceError(f"{_where()}\n  {what} must be a Python bool or a one-element tensor, "
                         f"got {_describe(pred)}")
    p = prims.reshape(pred, ())
    if p.tdtype is not torch.bool:
        p = prims.elementwise("ne", p, prims.full((), 0, p.tdtype))
    return p


def _trace_into(block: ir.Block, fn: Callable, args: Sequence, role: str):
    """Call ``fn(*args)`` with the trace's insertion point in ``block``. Returns (outputs,
    pytree spec, the index checks made inside: runtime_checks.region_scope); the caller
    terminates the block (``_yield``)."""
    trace = current_trace()
    with trace.insertion_point(ir.InsertionPoint(block)), user_code_mode(), \
            runtime_checks.region_scope() as checks:
        out = fn(*args)
        leaves, spec = torch_pytree.tree_flatten(out)
        for i, x in enumerate(leaves):
            if type(x) is not TensorProxy:
                raise TraceError(
                    f"{_where()}\n  output {i} of {role} is {_describe(x)}; the functions of "
                    "a higher-order operator must return tensors computed in the program")
        types = [x.value.type for x in leaves] + ([_code_type()] if checks else [])
        if not fits_in_runs(types):
            raise TraceError(f"{_where()}\n  {role} returns more than 8 runs of distinct "
                             "tensor types (an index checked inside counts as one int32 "
                             "more); return fewer distinct shapes/dtypes")
    return leaves, spec, checks


def _code_type() -> ir.Type:
    """The type of a region's index-check code (runtime_checks.region_code)."""
    return ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))


def _yield(block: ir.Block, outputs: Sequence[TensorProxy], code=None) -> None:
    """Terminate ``block`` with ``thunder.yield`` of ``outputs`` (and the region's
    index-check ``code``, last)."""
    values = [x.value for x in outputs] + ([code.value] if code is not None else [])
    with ir.InsertionPoint(block):
        YieldOp(**segment_kwargs("in", values))


def _code_result(op, checks: list) -> None:
    """The region op's last result is its index-check code: checks outside it."""
    if checks:
        trace = current_trace()
        code = TensorProxy(op.operation.results[-1], (), torch.int32, trace.device, False)
        runtime_checks.add_region_code(code, checks)


def _meta(x: TensorProxy) -> tuple:
    return (x.tshape, x.tdtype)


def _holder(n_regions: int):
    trace = current_trace()
    return ir.Operation.create(_HOLDER, regions=n_regions, loc=trace.loc, ip=False)


def _results(op, like: Sequence[TensorProxy], *sources: Sequence[TensorProxy]
             ) -> list[TensorProxy]:
    """Proxies of ``op``'s results, typed like ``like``. A result requires grad (eager's
    rule, in grad mode) when the value it comes from does in any of ``sources`` (the
    branch outputs; the carried inputs and the loop body's outputs), whose ops were
    tracked where they were traced (captured tensors that require grad included)."""
    trace = current_trace()
    grad_on = torch.is_grad_enabled()
    out = []
    for k, (r, x) in enumerate(zip(op.operation.results, like)):
        rg = grad_on and (x.tdtype.is_floating_point or x.tdtype.is_complex) and \
            any(src[k].requires_grad for src in sources)
        out.append(TensorProxy(r, x.tshape, x.tdtype, trace.device, rg))
    return out


def cond(pred, true_fn: Callable, false_fn: Callable, operands: Sequence = ()):
    """``torch.cond(pred, true_fn, false_fn, operands)`` while tracing.

    A Python predicate (``x.shape[0] > 4``) is known at trace time: the taken branch is
    traced inline. A one-element tensor predicate (nonzero = true) becomes
    ``thunder.cond`` with both branches traced into its regions. Both branches must return
    the same pytree of tensors with equal shapes and dtypes (torch.cond's contract).
    Returns the branch outputs (proxies). Raises TraceError naming the user's line and
    the first output that differs.
    """
    operands = tuple(operands)
    if not isinstance(pred, torch.Tensor):
        with user_code_mode():
            return true_fn(*operands) if pred else false_fn(*operands)
    p = _as_predicate(pred, "the predicate of torch.cond")
    holder = _holder(2)
    try:
        branches, blocks = [], []
        with current_trace().recording_region_reads(holder) as reads:
            for i, (fn, role) in enumerate(((true_fn, "true_fn"), (false_fn, "false_fn"))):
                blocks.append(holder.regions[i].blocks.append())
                branches.append(_trace_into(blocks[-1], fn, operands, role))
        (t_out, t_spec, t_checks), (f_out, f_spec, f_checks) = branches
        if t_spec != f_spec:
            raise TraceError(f"{_where()}\n  the branches of torch.cond return different "
                             f"structures: true_fn {t_spec}, false_fn {f_spec}")
        for i, (a, b) in enumerate(zip(t_out, f_out)):
            if _meta(a) != _meta(b):
                raise TraceError(
                    f"{_where()}\n  output {i} of the branches of torch.cond differs: true_fn "
                    f"returns {_describe(a)}, false_fn {_describe(b)}; both must return "
                    "tensors of the same shape and dtype")
        trace = current_trace()
        # each branch's index checks: one code result numbering both branches' checks
        checks = t_checks + f_checks
        for block, out, own, first in ((blocks[0], t_out, t_checks, 0),
                                       (blocks[1], f_out, f_checks, len(t_checks))):
            code = None
            if checks:
                with trace.insertion_point(ir.InsertionPoint(block)):
                    code = runtime_checks.region_code(own, first=first, n=len(checks))
            _yield(block, out, code)
        types = [x.value.type for x in t_out] + ([_code_type()] if checks else [])
        _region_opened(trace)
        with trace.ip:
            op = CondOp(p.value, **segment_kwargs("out", types, type_of=lambda t: t))
        for i in range(2):
            holder.regions[i].blocks[0].append_to(op.operation.regions[i])
    finally:
        holder.erase()
    _code_result(op, checks)
    outs = _results(op, t_out, t_out, f_out)
    region_reads.cond_twins(outs, operands, reads)  # (eager's node saves what it reads)
    return torch_pytree.tree_unflatten(outs, t_spec)


def while_loop(cond_fn: Callable, body_fn: Callable, carried: Sequence,
               additional: Sequence = (), origin: str = "while_loop") -> tuple:
    """``torch._higher_order_ops.while_loop(cond_fn, body_fn, carried_inputs)`` while
    tracing: ``thunder.while`` with ``cond_fn`` and ``body_fn`` traced into its regions
    on proxies of the carried values (block arguments); ``additional`` values are passed
    through unchanged. ``cond_fn`` must return a one-element tensor; ``body_fn`` the
    carried tensors with unchanged shapes and dtypes. Returns the final carried values
    (a tuple of proxies). Python ints as carried values are not supported (TraceError:
    carry a 0-d tensor instead). ``origin`` (the torch operator) is recorded on the op for
    messages about it."""
    carried, additional = tuple(carried), tuple(additional)
    for i, c in enumerate(carried):
        if type(c) is not TensorProxy:
            raise TraceError(f"{_where()}\n  carried value {i} of while_loop is {_describe(c)}; "
                             "thunder_mlir carries tensors only (use a 0-d tensor for a counter)")
    types = [c.value.type for c in carried]
    if not fits_in_runs(types):
        raise TraceError(f"{_where()}\n  while_loop carries more than 8 runs of distinct "
                         "tensor types; carry fewer distinct shapes/dtypes")
    trace = current_trace()
    holder = _holder(2)
    try:
        blocks = [holder.regions[i].blocks.append(*types) for i in range(2)]
        cond_args = [trace.make_proxy(a) for a in blocks[0].arguments]
        with trace.insertion_point(ir.InsertionPoint(blocks[0])), user_code_mode(), \
                runtime_checks.region_scope(enabled=False):  # (not checked: the docstring)
            keep_going = cond_fn(*cond_args, *additional)
            if not isinstance(keep_going, torch.Tensor):
                raise TraceError(
                    f"{_where()}\n  cond_fn of while_loop returned {_describe(keep_going)}, a "
                    "value known while tracing; it must return a one-element tensor computed "
                    "from the carried values")
            p = _as_predicate(keep_going, "the result of while_loop's cond_fn")
        with ir.InsertionPoint(blocks[0]):
            YieldOp(**segment_kwargs("in", [p.value]))
        body_args = [trace.make_proxy(a) for a in blocks[1].arguments]
        out, _, checks = _trace_into(blocks[1], lambda *a: body_fn(*a, *additional),
                                     body_args, "while_loop's body_fn")
        if len(out) != len(carried) or any(_meta(o) != _meta(c) for o, c in zip(out, carried)):
            got = [_describe(o) for o in out]
            want = [_describe(c) for c in carried]
            raise TraceError(f"{_where()}\n  body_fn of while_loop must return the carried "
                             f"values with unchanged shapes and dtypes: expected {want}, "
                             f"got {got}")
        inputs, code = [c.value for c in carried], None
        if checks:  # the body's index checks: a carried code, the first failure kept
            loc = trace.loc
            for b in blocks:
                b.add_argument(_code_type(), loc)
            types = types + [_code_type()]
            with trace.insertion_point(ir.InsertionPoint(blocks[1])):
                code = runtime_checks.region_code(
                    checks, previous=trace.make_proxy(blocks[1].arguments[-1]))
            with trace.ip:
                inputs.append(prims.full((), len(checks), torch.int32).value)
        _yield(blocks[1], out, code)
        _region_opened(trace)
        with trace.ip:
            op = WhileOp(**segment_kwargs("in", inputs),
                         **segment_kwargs("out", types, type_of=lambda t: t))
        op.operation.attributes["origin"] = ir.StringAttr.get(origin)
        for i in range(2):
            blocks[i].append_to(op.operation.regions[i])
    finally:
        holder.erase()
    _code_result(op, checks)
    return tuple(_results(op, carried, carried, out))


def scan(combine_fn: Callable, init: Sequence, xs: Sequence, additional: Sequence = ()):
    """``torch._higher_order_ops.scan`` while tracing, as a ``thunder.while`` over the
    leading dim of ``xs`` (torch's ``scan`` has already moved the scanned dim to 0 and
    flipped ``xs`` for ``reverse``): the loop carries a 0-d int64 counter, the carry, and
    one buffer per output ``y`` that iteration ``i`` fills at row ``i``
    (``dynamic_index``/``dynamic_update_index``). ``combine_fn(*carry, *x_i)`` is traced once
    on its own first, to learn the output types the buffers need. Returns
    ``(carry, ys)`` with the structure ``combine_fn`` returns, ``ys`` stacked along dim 0."""
    init, xs, additional = tuple(init), tuple(xs), tuple(additional)
    for what, leaves in (("init", init), ("xs", xs)):
        for i, t in enumerate(leaves):
            if type(t) is not TensorProxy:
                raise TraceError(f"{_where()}\n  {what}[{i}] of scan is {_describe(t)}; "
                                 "scan takes tensors")
    n = xs[0].tshape[0]
    trace = current_trace()
    probe = _holder(1)  # the types combine_fn returns, from a trace that is then dropped
    try:
        block = probe.regions[0].blocks.append(
            *[c.value.type for c in init],
            *[dtypes.tensor_type(x.tshape[1:], x.tdtype) for x in xs])
        args = [trace.make_proxy(a) for a in block.arguments]
        out, spec, _ = _trace_into(block, lambda *a: combine_fn(*a, *additional), args,
                                   "scan's combine_fn")  # (its checks: the loop's trace)
        carry_out, ys = out[:len(init)], out[len(init):]
        if [_meta(c) for c in carry_out] != [_meta(c) for c in init]:
            raise TraceError(f"{_where()}\n  combine_fn of scan must return the carry with "
                             f"unchanged shapes and dtypes: expected "
                             f"{[_describe(c) for c in init]}, got "
                             f"{[_describe(c) for c in carry_out]}")
        y_metas = [_meta(y) for y in ys]
    finally:
        probe.erase()

    def keep_going(i, *rest):
        return i < n

    def step(i, *rest):
        carry, buffers = rest[:len(init)], rest[len(init):]
        x_i = [prims.dynamic_index(x, i) for x in xs]
        out = torch_pytree.tree_leaves(combine_fn(*carry, *x_i, *additional))
        new_carry, y = out[:len(init)], out[len(init):]
        filled = [prims.dynamic_update_index(b, v, i) for b, v in zip(buffers, y)]
        return (i + 1, *new_carry, *filled)

    counter = prims.full((), 0, torch.int64)
    buffers = [prims.full((n, *shape), 0, dtype) for shape, dtype in y_metas]
    final = while_loop(keep_going, step, (counter, *init, *buffers), origin="scan")
    return torch_pytree.tree_unflatten(list(final[1:]), spec)


@contextmanager
def checkpoint_scope():
    """Ops emitted inside go into a checkpoint scope; :func:`close_regions`
    turns it into ``thunder.checkpoint`` once the trace knows which of its values are used
    after it (the user's function returns them through torch's own checkpoint code)."""
    trace = current_trace()
    f = user_frame()
    loc = ir.Location.file(f.f_code.co_filename, f.f_lineno, 0) if f is not None else trace.loc
    with trace.ip:
        scope = ir.Operation.create(SCOPE, regions=1, loc=loc)
    block = scope.regions[0].blocks.append()
    _region_opened(trace)
    with trace.insertion_point(ir.InsertionPoint(block)), region_reads.checkpoint_reads(scope):
        yield


def in_checkpoint_scope(v: ir.Value) -> bool:
    """Whether ``v`` is defined inside a checkpoint scope, with no cond/while region
    between (a checkpoint's recomputation in the backward recomputes it)."""
    owner = v.owner
    op = owner.owner if isinstance(owner, ir.Block) else getattr(owner, "operation", owner)
    op = op.parent
    while op is not None and op.name not in ("thunder.cond", "thunder.while", "func.func",
                                             _HOLDER):
        if op.name == SCOPE:
            return True
        op = op.parent
    return False


def _escaping(func_op, region_op) -> tuple[list, list]:
    """(uses outside ``region_op`` as (user, index, value), the distinct values among them
    that are defined inside it)."""
    outside = [(u, i, v) for u, i, v in operand_sites(func_op.operation)
               if not is_inside(u, region_op)]
    escaping = []
    for _, _, v in outside:
        if defined_inside(v, region_op) and v not in escaping:
            escaping.append(v)
    return outside, escaping


def _region_opened(trace) -> None:
    """Count a cond/while/checkpoint scope of ``trace``; the first one schedules
    ``close_regions`` for when the trace's function is finished."""
    if not trace.region_ops:
        trace.on_finish.append(close_regions)
    trace.region_ops += 1


def close_regions(func_op) -> None:
    """After a trace: turn every checkpoint scope of ``func_op`` into
    ``thunder.checkpoint``, whose results are the scope's values used after it (innermost
    scopes first), and check that no value computed inside a cond/while region is used
    outside it — which an in-place update, inside a branch, of a tensor from outside
    would do. Raises TraceError naming both places."""
    region_ops = [o for o in nested_ops(func_op.operation)
                  if o.name in (SCOPE, "thunder.cond", "thunder.while")]
    for op in reversed(region_ops):  # pre-order: an inner op comes after its outer one
        outside, escaping = _escaping(func_op, op)
        if op.name == SCOPE:
            _make_checkpoint(op, outside, escaping)
            continue
        if op.name == "thunder.while" and any(o.name == "thunder.rng_bits"
                                              for o in nested_ops(op)):
            origin = ir.StringAttr(op.attributes["origin"]).value
            raise TraceError(
                f"a random op is inside the {origin} at {op.location}: its program would "
                "draw the same numbers in every iteration (one stream per op, not per "
                "iteration). Draw them before the loop (e.g. one tensor with a leading "
                "iteration dim, passed in as xs) instead")
        if escaping:
            user = next(u for u, _, v in outside if v in escaping)
            what = "torch.cond" if op.name == "thunder.cond" else "while_loop"
            where = ("the program's outputs (an updated input)" if user.name == "func.return"
                     else str(user.location))
            raise TraceError(
                f"a value computed inside {what} (at {op.location}) is used outside it, in "
                f"{where}: only the values the functions return leave them. An "
                "in-place update inside the function of a tensor from outside does this: "
                "return the new value instead")


def _make_checkpoint(scope, outside, escaping) -> None:
    escaping.sort(key=lambda v: str(v.type))  # fewest type runs
    block = scope.regions[0].blocks[0]
    if not fits_in_runs([v.type for v in escaping]):
        warnings.warn("torch.utils.checkpoint: the checkpointed function's outputs have "
                      "more than 8 distinct tensor types; its ops are kept without "
                      "checkpointing (their intermediates are saved for the backward)")
        for o in [o.operation for o in block.operations]:
            o.move_before(scope)
        scope.erase()
        return
    with ir.InsertionPoint(block), scope.location:
        YieldOp(**segment_kwargs("in", escaping))
    with ir.InsertionPoint(scope), scope.location:
        op = CheckpointOp(**segment_kwargs("out", [v.type for v in escaping],
                                           type_of=lambda t: t))
    block.append_to(op.operation.regions[0])
    new = dict(zip(escaping, op.operation.results))
    for user, i, v in outside:
        if v in new:
            user.operands[i] = new[v]
    scope.erase()
