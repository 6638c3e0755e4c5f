"""``partition``: outline maximal groups of XLA-lowerable ops into region functions.

Input: ``func.func @computation`` holding prims and ``thunder.executor_call`` ops (after
``decompose``). Output: ``@computation`` calls ``@xla_region_<k>`` functions and keeps the
executor calls between them:

    %0:2 = call @xla_region_0(%arg0, %arg1)
    %1 = "thunder.executor_call"(%0#1) {executor = "torch", ...}
    %2 = call @xla_region_1(%0#0, %1)

Grouping rule (a topological level assignment): an XLA op joins region
max(region of its XLA producers, 1 + level of its executor-call producers); an executor
call gets level max(region of its XLA producers, level of its executor-call producers) and
runs after region ``level``. Executing R0, E0, R1, E1, ... respects every dependency, and
the number of regions is one more than the longest chain of executor calls — so a fallback
op splits the program only where the data flow forces it.

Control-flow ops (``thunder.cond``, ``thunder.while``) are XLA ops whose dependencies
include the values their regions capture from above; they move into a region function
whole. An executor call inside their regions cannot run inside XLA control flow: that is
an error naming both ops. Composites and ``thunder.checkpoint`` must be decomposed first.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.errors import PassError
from thunder_mlir.ir.regions import free_values, nested_ops, replace_uses_in

NAME = "partition"
EXECUTOR_OPS = ("thunder.executor_call",)


def _is_xla(op: ir.Operation) -> bool:
    return op.name not in EXECUTOR_OPS and op.name != "func.return"


PLAN_FUNCTIONS = ("computation", "forward", "backward")


def run(module: ir.Module) -> None:
    """Partition each plan function (``@computation``, or ``@forward`` and ``@backward``
    after ``grad``) of ``module``. Region functions are numbered across the module."""
    with module.context, ir.Location.unknown():
        for f in [op.operation for op in module.body.operations
                  if op.operation.name == "func.func"]:
            if ir.StringAttr(f.attributes["sym_name"]).value in PLAN_FUNCTIONS:
                _partition(module, f)


def _partition(module: ir.Module, f) -> None:
    block = f.regions[0].blocks[0]
    ops = list(block.operations)
    terminator = ops[-1]
    body = ops[:-1]
    if any(o.name == "func.call" for o in body):
        return  # already partitioned
    body = [o.operation for o in body]
    for o in body:
        _check_region_op(o)

    reads = {o: free_values(o) for o in body}
    level: dict[ir.Operation, int] = {}  # region index (XLA op) or level (executor call)
    for o in body:
        lv = 0
        for v in reads[o]:
            p = v.owner
            if isinstance(p, ir.Block):
                continue
            p = p.operation
            pl = level[p]
            if _is_xla(o):
                lv = max(lv, pl if _is_xla(p) else pl + 1)
            else:
                lv = max(lv, pl)
        level[o] = lv

    # Operand-free XLA ops (constants, iota) sink to the earliest region that uses them,
    # instead of becoming outputs of region 0 passed to later regions.
    users_of: dict[ir.Value, list[ir.Operation]] = {}
    for o in body:
        for v in reads[o]:
            users_of.setdefault(v, []).append(o)
    for v in terminator.operands:
        users_of.setdefault(v, []).append(terminator.operation)
    for o in reversed(body):
        if _is_xla(o) and len(o.operands) == 0:
            users = [u for r in o.results for u in users_of.get(r, [])]
            lv = [level[u] for u in users if u in level and _is_xla(u)]
            if lv and len(lv) == len(users):
                level[o] = min(lv)

    n_regions = 1 + max(level.values(), default=0)
    # number regions after those already in the module (from another plan function)
    taken = [ir.StringAttr(op.operation.attributes["sym_name"]).value
             for op in module.body.operations]
    first = 1 + max((int(n[len("xla_region_"):]) for n in taken
                     if n.startswith("xla_region_") and n[len("xla_region_"):].isdigit()),
                    default=-1)
    groups: list[list[ir.Operation]] = [[] for _ in range(n_regions)]
    executors: list[list[ir.Operation]] = [[] for _ in range(n_regions)]
    for o in body:
        (groups if _is_xla(o) else executors)[level[o]].append(o)
    for k in range(n_regions):
        if groups[k]:
            _outline(module, f, groups[k], first + k, terminator)
        for e in executors[k]:
            e.move_before(terminator)


def _check_region_op(o: ir.Operation) -> None:
    if o.name in ("thunder.composite", "thunder.checkpoint"):
        error = PassError(f"partition: {o.name} at {o.location} must be decomposed first "
                          "(run decompose before partition)")
        error.location = o.location
        raise error
    for inner in nested_ops(o):
        if inner.name in EXECUTOR_OPS:
            callee = ir.StringAttr(inner.attributes["callee"]).value
            error = PassError(
                f"partition: {callee} at {inner.location} runs on the "
                f"{ir.StringAttr(inner.attributes['executor']).value} executor, inside the "
                f"region of {o.name} at {o.location}; the ops of a control-flow region must "
                "all lower to XLA (see thunder_mlir.examine for why an op falls back)")
            error.location = inner.location
            raise error


def _outline(module, f, group, k, terminator) -> None:
    inside = set(group)
    inputs: list[ir.Value] = []
    seen = set()
    for o in group:
        for v in free_values(o):
            d = v.owner
            if (isinstance(d, ir.Block) or d.operation not in inside) and v not in seen:
                seen.add(v)
                inputs.append(v)
    # Values used after the group: found by scanning operands, not Value.uses (whose
    # iteration skipped uses in our tests while operands were being rewritten).
    rest = [o.operation for o in f.regions[0].blocks[0].operations if o.operation not in inside]
    used_outside = {v for o in rest for v in free_values(o)}
    outputs = [r for o in group for r in o.results if r in used_outside]

    name = f"xla_region_{k}"
    with ir.InsertionPoint(module.body), f.location:
        region_fn = func_d.FuncOp(name, ([v.type for v in inputs], [v.type for v in outputs]))
        region_fn.sym_visibility = ir.StringAttr.get("private")
        entry = region_fn.add_entry_block()
    with ir.InsertionPoint(entry), f.location:
        ret = func_d.ReturnOp(outputs)
    for o in group:
        o.move_before(ret)
    replace_uses_in(group, dict(zip(inputs, entry.arguments)))
    with ir.InsertionPoint(terminator), f.location:
        call = func_d.CallOp([v.type for v in outputs], ir.FlatSymbolRefAttr.get(name), inputs)
    replace_uses_in(rest, dict(zip(outputs, call.results)))
