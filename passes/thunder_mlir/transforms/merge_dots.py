"""``merge-dots``: horizontal fusion of the dots that share an operand.

``thunder.dot_general`` ops of one block that read the same SSA value on the same side,
with the same dimension numbers, and whose other operands are computed values that differ
only in the size of their one free dimension, become one dot of the shared operand with
those others concatenated along that dimension; each old result is a slice of the new one
(the slices are views XLA fuses into their readers). This is the horizontal fusion of
GEMMs that read one input (TVM's ``CombineParallelDense`` pass; Inductor's freezing
pattern that concatenates the weights of matmuls sharing an input), applied where a
training step's backward needs it:

* Per decoder layer, the weight gradients of the query, key and value projections, and of
  the gate and up projections of a gated MLP, are dots of each output's gradient with the
  same layer input (``g_i^T x``). XLA's CPU dots read their left operand with the
  contracted dimension innermost, so each ``g_i`` was transposed by its own copy, fused
  with the elementwise ops computing ``g_i`` (XLA's loop emitter ran such a transposing
  fusion at 2-3 ns an element on this project's AMD EPYC). Merged, the gradients are
  concatenated once (XLA keeps a concatenation along the innermost dimension a plain copy,
  ``cpu_instruction_fusion.cc``) and transposed once by a plain copy. Measured on the
  whole-step rows of benchmarks/optimizer_step.py (AMD EPYC, 1 thread, in-process A/B):
  Llama tiny's XLA kernels 3.65 -> 3.37 ms, its layout copies 640 -> 350 us, the step
  4.53 -> 4.21 ms; BERT tiny's kernels 2.83 -> 2.76 ms, the step within noise.
* Dots whose other operands are arguments of the function (the projections' weights in
  the forward) are left as they are: their concatenation would copy the weights at every
  call (measured on Llama tiny: 6% slower than not merging them), and a decode step, whose
  dots are matrix-vector products bound by reading the weights, would read them twice.

Each merged dot is placed before the first member when every member's operands exist
there, else before the last member with the members whose results are read only after it;
a dot that fits neither stays as it is. Each result element contracts the same operands
as before, with the same dimension numbers (only the dot kernel's blocking may differ).
"""

from __future__ import annotations

from torch_mlir import ir

from thunder_mlir.ir.dialect import I64Array, segment_kwargs
from thunder_mlir.ir.primdef import PRIM_OPS

NAME = "merge-dots"
_DIMS = ("lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
         "rhs_contracting_dimensions")


def run(module: ir.Module) -> int:
    """Merge the dots in the body of every function of ``module`` (ops nested in regions
    are left as they are). Returns how many dots were merged away."""
    merged = 0
    with module.context, ir.Location.unknown():
        for op in module.body.operations:
            if op.operation.name == "func.func" and len(op.regions[0].blocks):
                merged += _merge_block(op.regions[0].blocks[0])
    return merged


def _ints(op, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _keys(op) -> list:
    """For each side of ``op`` whose operand is computed and has one free dimension:
    (group key, side, that dimension)."""
    types = [ir.RankedTensorType(v.type) for v in op.operands]
    if not all(t.has_static_shape for t in types):
        return []
    dims = tuple(tuple(_ints(op, n)) for n in _DIMS)
    out = []
    for side in (0, 1):
        if isinstance(op.operands[side].owner, ir.Block):  # an argument: left alone
            continue
        t = types[side]
        free = [d for d in range(t.rank) if d not in dims[side] and d not in dims[2 + side]]
        if len(free) != 1:
            continue
        shape = list(t.shape)
        shape[free[0]] = -1
        key = (side, op.operands[1 - side], dims, tuple(shape), str(t.element_type))
        out.append((key, side, free[0]))
    return out


def _merge_block(block) -> int:
    merged, tried = 0, set()
    while (group := _next_group(block, tried)) is not None:
        _merge(*group)
        merged += len(group[0]) - 1
    return merged


def _next_group(block, tried: set):
    """(members, the op to place the merged dot before) of the next group of at least two
    dots, or None. ``tried``: group keys already taken (updated)."""
    ops = [o.operation for o in block.operations]
    pos = {op: i for i, op in enumerate(ops)}
    body = block.owner.operation

    def def_pos(v):
        return -1 if isinstance(v.owner, ir.Block) else pos[v.owner.operation]

    def use_pos(use):  # (of the top-level op that holds the reader)
        op = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        while op.parent is not None and op.parent.operation != body:
            op = op.parent.operation
        return pos.get(op, -1)

    groups: dict = {}
    for op in ops:
        if op.name == "thunder.dot_general":
            for key, side, dim in _keys(op):
                groups.setdefault(key, []).append((op, side, dim))
    for key, members in groups.items():
        if len(members) < 2 or key in tried:
            continue
        tried.add(key)
        first, last = members[0][0], members[-1][0]
        ready = [m for m in members if all(def_pos(v) < pos[first] for v in m[0].operands)]
        if len(ready) >= 2:
            return ready, first
        ready = [m for m in members
                 if all(use_pos(u) > pos[last] for u in m[0].results[0].uses)]
        if len(ready) >= 2:
            return ready, last
    return None


def _merge(members: list, before) -> None:
    op0, side, dim = members[0]
    ip, loc = ir.InsertionPoint(before), op0.location  # (the new ops: the first dot's line)
    varying = [op.operands[side] for op, _, _ in members]
    sizes = [ir.RankedTensorType(v.type).shape[dim] for v in varying]
    vt = ir.RankedTensorType(varying[0].type)
    shape = list(vt.shape)
    shape[dim] = sum(sizes)
    cat = PRIM_OPS["concatenate"](
        **segment_kwargs("in", varying),
        dimension=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim),
        result=ir.RankedTensorType.get(shape, vt.element_type), loc=loc, ip=ip).result
    # the free dim's place in the result: batch dims, then lhs free dims, then rhs free dims
    nb = len(_ints(op0, _DIMS[0]))
    lhs_rank = ir.RankedTensorType(op0.operands[0].type).rank
    at = nb if side == 0 else nb + lhs_rank - nb - len(_ints(op0, _DIMS[2]))
    rt = ir.RankedTensorType(op0.results[0].type)
    rshape = list(rt.shape)
    rshape[at] = sum(sizes)
    shared = op0.operands[1 - side]
    dot = PRIM_OPS["dot_general"](
        *([cat, shared] if side == 0 else [shared, cat]),
        **{n: I64Array.of(_ints(op0, n)) for n in _DIMS},
        result=ir.RankedTensorType.get(rshape, rt.element_type), loc=loc, ip=ip).result
    slices, start = [], 0
    for (op, _, _), n in zip(members, sizes):
        lo, hi = [0] * len(rshape), list(rshape)
        lo[at], hi[at] = start, start + n
        slices.append(PRIM_OPS["slice"](dot, start_indices=I64Array.of(lo),
                                        limit_indices=I64Array.of(hi),
                                        strides=I64Array.of([1] * len(rshape)),
                                        result=op.results[0].type, loc=op.location,
                                        ip=ip).result)
        start += n
    for (op, _, _), s in zip(members, slices):  # (``before`` is a member: erased last)
        op.results[0].replace_all_uses_with(s)
        op.erase()
