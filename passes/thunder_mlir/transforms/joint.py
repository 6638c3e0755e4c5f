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

from thunder_mlir.ir import attrs
from thunder_mlir.ir.dtypes import nbytes
from thunder_mlir.ir.primdef import PRIM_OPS, PRIMS
from thunder_mlir.ir.prim_defs import CHEAP
from thunder_mlir.ir.regions import eliminate_dead_code

from thunder_mlir.transforms.grad import DIFF_OUTPUTS, REACHED, RECOMPUTED, WRITE_BACKS, \
    _func

NAME = "joint"
# False: every recomputation is left to XLA, which merges it with the forward's copy (the
# baseline of tests/test_recomputation.py)
_SEPARATE = True
# the backward's constant buffers (``full``, ``iota``) of at least this many bytes that an
# op writes into are made after a value that op needs (``_late_constants``)
_LATE_CONSTANT_BYTES = 16 << 10
_CONSTANT_PRIMS = ("thunder.full", "thunder.iota")
# prims that write into their first operand (XLA: a scatter or dynamic-update-slice in place)
_BASE_WRITERS = ("thunder.index_add", "thunder.take_along_add", "thunder.scatter",
                 "thunder.dynamic_update_index")
_COPIED_ATTRS = ("thunder.device", "thunder.rng_seed")
_FUSIBLE = CHEAP | {n for n, p in PRIMS.items() if p.elementwise} | {"slice", "after"}


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
    n_out = attrs.get_int(fwd, "thunder.num_outputs")
    n_wb = attrs.get_int(fwd, WRITE_BACKS, 0)
    diff = attrs.get_bools(fwd, DIFF_OUTPUTS)
    cot_types = [v.type for v, d in zip(list(fret.operands)[:n_out], diff) if d]
    _separate_recomputation(bwd, list(bblock.arguments)[len(cot_types):])
    _late_constants(bwd)

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
    wrt = [a for a, w in zip(block.arguments, attrs.get_bools(fwd, "thunder.requires_grad"))
           if w]
    reached = iter(bret.operands)
    zero = ir.FloatAttr.get_f64(0.0)
    with ir.InsertionPoint(end):
        grads = [next(reached) if r else PRIM_OPS["full"](zero, result=a.type).result
                 for a, r in zip(wrt, attrs.get_bools(bwd, REACHED))]
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


def _key(op, func):
    """The op of ``func``'s body that is ``op`` or holds it in a region, as a dict key:
    its first result (ir.Operation hashes change with the op; None for the return)."""
    op = op.operation
    while op.parent.operation != func:
        op = op.parent.operation
    return op.results[0] if len(op.results) else None


def _separate_recomputation(bwd, residuals: list) -> None:
    """Keep the backward's recomputed ops (``RECOMPUTED``, grad's rematerialization) from
    being merged back into the forward's copies once the two share one program: XLA's CSE
    would find the same op on the same operand, and the value the backward was to recompute
    would stay alive from the forward on, undoing the rematerialization.

    A recomputed op read at separate points of the backward is first copied, one copy per
    point (``_copy_per_reader``). Each recomputed op then moves to just before its first
    reader that is not recomputed, and each residual it reads is taken through
    ``thunder.after(residual, anchor)`` (``hlo.lower_after``: a dependency XLA keeps), one
    per residual and copy, where ``jax.checkpoint(prevent_cse=True)`` puts an optimization
    barrier (jax/_src/ad_checkpoint.py). The anchor is a backward value the first reader of
    the recomputation needs (``_anchor``), so XLA recomputes when the backward reaches that
    reader, not at its start. Marks are removed."""
    block = bwd.regions[0].blocks[0]
    if not any(RECOMPUTED in o.operation.attributes for o in block.operations):
        return
    if not _SEPARATE:
        for o in block.operations:
            if RECOMPUTED in o.operation.attributes:
                del o.operation.attributes[RECOMPUTED]
        return
    copy_of = _copy_per_reader(bwd)
    ops = [o.operation for o in block.operations][:-1]
    end = len(ops)
    pos = {r: i for i, op in enumerate(ops) for r in op.results}
    marked = {i for i, op in enumerate(ops) if RECOMPUTED in op.attributes}
    target: dict[int, int] = {}  # recomputed op -> index of its first reader not recomputed
    for i in sorted(marked, reverse=True):
        firsts = []
        for r in ops[i].results:
            for use in r.uses:
                k = pos.get(_key(use.owner, bwd), end)
                firsts.append(target.get(k, end) if k in marked else k)
        target[i] = min(firsts, default=end)
    ret = list(block.operations)[-1].operation
    readers: dict = {}  # (residual, copy) -> [(recomputed op index, operand index)]
    args = set(residuals)
    for i in sorted(marked):  # (forward order: a clone's operands land before it)
        op = ops[i]
        op.move_before(ops[target[i]] if target[i] < end else ret)
        del op.attributes[RECOMPUTED]
        for j, v in enumerate(op.operands):
            if v in args:
                readers.setdefault((v, copy_of.get(op.results[0])), []).append((i, j))
    taken: dict = {}  # (residual, anchor) -> the last after made of them
    for (v, _), sites in sorted(readers.items(),
                                key=lambda kv: min(target[i] for i, _ in kv[1])):
        # the reader placed first: the earliest target, and among those the first in order
        first = min(i for i, _ in sites if target[i] == min(target[k] for k, _ in sites))
        anchor = _anchor(ops, target[first], marked, pos) or v
        # two copies' reads of one residual after one anchor would be one value to XLA's
        # CSE, and the copies one again: the later copy's read comes after the earlier's
        later = taken.get((v, anchor), anchor)
        after = PRIM_OPS["after"](v, later, result=v.type, ip=ir.InsertionPoint(ops[first]))
        taken[(v, anchor)] = after.result
        for i, j in sites:
            ops[i].operands[j] = after.result


def _copy_per_reader(bwd) -> dict:
    """Copy each recomputed op whose value the backward reads at more than one point: one
    copy per point, each read by that point only. Returns {result of a recomputed op or
    copy: its point}.

    A point is a set of readers that are not recomputed (reading directly, or through
    other recomputed ops): the fusible ops between two ops XLA cannot fuse with
    elementwise producers (dots, reductions) are one point (XLA fuses them into one loop),
    and the unfusible readers together are one point (the value is a buffer for them
    anyway: one copy, not one per dot; merge_dots.py then finds the weight-gradient dots
    of one layer input reading the same value).

    Why: XLA does not duplicate an expensive elementwise op (erf, tanh, exp) into several
    fusions; one recomputed ``erf`` read by a weight-gradient dot's operand (the GELU
    output) and by the GELU derivative was a buffer of its own, alive from the first
    reader to the last (the nanoGPT block's MLP: 2 MiB at the step's peak, XLA
    temporaries 14,341 -> 13,316 KiB with the copies). The copies recompute only cheap
    ops (``grad.RECOMPUTABLE``)."""
    block = bwd.regions[0].blocks[0]
    ops = [o.operation for o in block.operations][:-1]
    end = len(ops)
    pos = {r: i for i, op in enumerate(ops) for r in op.results}
    loop, n = [], 0  # ops[i] is in fusible run loop[i]
    for op in ops:
        loop.append(n)
        n += not _fusible(op)
    point: dict = {}  # result of a recomputed op or copy -> (point, its first reader)
    for op in reversed(ops):  # (readers first)
        if RECOMPUTED not in op.attributes or len(op.results) != 1:
            continue
        value = op.results[0]
        uses: dict = {}  # point -> [first reader, [(owner, operand index)]]
        for use in list(value.uses):
            owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if len(owner.results) == 1 and owner.results[0] in point:
                key, k = point[owner.results[0]]
            else:
                k = pos.get(_key(use.owner, bwd), end)
                key = ("return",) if k == end else ("loop", loop[k]) \
                    if _fusible(ops[k]) else ("materialized",)
            entry = uses.setdefault(key, [k, []])
            entry[0] = min(entry[0], k)
            entry[1].append((owner, use.operand_number))
        by_first = sorted(uses.items(), key=lambda kv: kv[1][0])
        for j, (key, (k, sites)) in enumerate(by_first):
            copy = value if j == 0 else op.clone(ip=ir.InsertionPoint(op)).results[0]
            point[copy] = (key, k)
            if j:
                for owner, operand in sites:
                    owner.operands[operand] = copy
    return {v: key for v, (key, _) in point.items()}


def _fusible(op) -> bool:
    """Whether XLA fuses ``op`` with elementwise producers and readers: an elementwise or
    cheap prim (``prim_defs.CHEAP``), a slice, ``thunder.after``."""
    short = op.name[len("thunder."):] if op.name.startswith("thunder.") else None
    return short in _FUSIBLE and len(op.regions) == 0


def _late_constants(bwd) -> None:
    """Keep XLA from making the backward's large constant buffers early. A ``full`` or
    ``iota`` has no operands, so XLA's scheduler may place it anywhere; where it is the
    base an op writes into (``index_add``, ``scatter``: XLA updates that buffer in place,
    so it is materialized, not fused), in one program with the forward XLA placed it among
    the forward's first ops, alive until the scatter at the backward's end: in Llama tiny
    the embedding gradient's zeros (1000 x 128 floats), 0.49 MiB of the step's 3.5 MiB of
    temporaries. Such a base of at least ``_LATE_CONSTANT_BYTES`` is read through
    ``thunder.after(constant, anchor)``, the anchor a backward value the writing op needs
    (``_anchor``), so it is made when the backward reaches that op. Constants read only
    elementwise are fused into their readers by XLA (no buffer) and left as they are:
    anchoring them changed XLA's schedule for the worse (nanoGPT block: temporaries
    14,341 -> 18,948 KiB)."""
    block = bwd.regions[0].blocks[0]
    ops = [o.operation for o in block.operations][:-1]
    pos = {r: i for i, op in enumerate(ops) for r in op.results}
    for op in ops:
        if op.name not in _CONSTANT_PRIMS or len(op.results) != 1:
            continue
        value = op.results[0]
        t = value.type
        if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape or \
                nbytes(t) < _LATE_CONSTANT_BYTES:
            continue
        for use in list(value.uses):
            writer = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            k = pos.get(writer.results[0]) if len(writer.results) else None
            if writer.name not in _BASE_WRITERS or use.operand_number != 0 or k is None:
                continue
            anchor = _anchor(ops, k, set(), pos)
            if anchor is not None:
                after = PRIM_OPS["after"](value, anchor, result=t,
                                          ip=ir.InsertionPoint(writer))
                writer.operands[0] = after.result


def _anchor(ops: list, before: int, marked: set, pos: dict):
    """A backward value computed before ``ops[before]``, the first reader of a
    recomputation: an operand of that reader computed by a backward op that is not
    recomputed (it must exist before the reader anyway, so the recomputation waits for no
    other branch), else the first result of the closest such op before it that has
    operands (a constant orders nothing); None if there is none."""
    def computed(i):  # (ops[i] is a backward op that is not recomputed, not a constant)
        return i not in marked and len(ops[i].operands) > 0

    if before < len(ops):
        for v in ops[before].operands:
            i = pos.get(v)
            if i is not None and i < before and computed(i):
                return v
    for i in range(before - 1, -1, -1):
        if computed(i) and len(ops[i].results) and \
                isinstance(ops[i].results[0].type, ir.RankedTensorType):
            return ops[i].results[0]
    return None
