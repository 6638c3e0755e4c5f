"""IR utilities for ops with regions (``thunder.cond``/``while``/``checkpoint``, composites).

The counterparts of MLIR's ``mlir/Transforms/RegionUtils.h`` (``getUsedValuesDefinedAbove``)
and of the inliner, for the Python bindings: the passes use them to find the values a
region reads from above, to rewrite uses inside nested regions, and to inline or copy a
region's single block.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from torch_mlir import ir


def nested_ops(op: ir.Operation) -> Iterator[ir.Operation]:
    """Every op inside ``op``'s regions, at any depth, in pre-order (``op`` excluded)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                yield inner
                yield from nested_ops(inner)


def operand_sites(op: ir.Operation) -> Iterator[tuple[ir.Operation, int, ir.Value]]:
    """``(user, operand index, value)`` for ``op``'s operands and those of every op nested
    in its regions: all the places a value can be read from by ``op``."""
    for i, v in enumerate(op.operands):
        yield op, i, v
    for inner in nested_ops(op):
        for i, v in enumerate(inner.operands):
            yield inner, i, v


def defining_op(v: ir.Value) -> ir.Operation | None:
    """The op whose result ``v`` is, or the op owning the block of a block argument."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner.owner.operation
    return owner.operation


def is_inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    """Whether ``op`` is ``ancestor`` or nested in its regions (an op detached from any
    block, such as a region under construction, ends the walk)."""
    while op is not None:
        if op == ancestor:
            return True
        try:
            parent = op.parent
        except ValueError:  # "Detached operations have no parent"
            return False
        op = parent.operation if parent is not None else None
    return False


def defined_inside(v: ir.Value, op: ir.Operation) -> bool:
    """Whether ``v`` is defined within ``op``'s regions (a block argument of one of them,
    or a result of a nested op); ``op``'s own results are not."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return is_inside(owner.owner.operation, op)
    d = owner.operation
    return d != op and is_inside(d, op)


def values_defined_above(op: ir.Operation) -> list[ir.Value]:
    """The values read inside ``op``'s regions but defined outside ``op``, in order of
    first use (``mlir::getUsedValuesDefinedAbove``). ``op``'s own operands are not
    included unless a region reads them too."""
    inside = {op} | set(nested_ops(op))
    seen, out = set(), []
    for user in nested_ops(op):
        for v in user.operands:
            if v not in seen and defining_op(v) not in inside:
                seen.add(v)
                out.append(v)
    return out


def free_values(op: ir.Operation) -> list[ir.Value]:
    """Everything ``op`` reads: its operands, then the values its regions capture."""
    out = list(op.operands)
    seen = set(out)
    for v in values_defined_above(op):
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def replace_uses_in(ops, mapping: dict) -> None:
    """Replace, in ``ops`` and their nested regions, every operand found in ``mapping``."""
    for op in ops:
        for user, i, v in list(operand_sites(op)):
            if v in mapping:
                user.operands[i] = mapping[v]


def inline_block(op: ir.Operation, region_index: int, args,
                 before: ir.Operation) -> tuple[list, list]:
    """Move the ops of ``op``'s region ``region_index`` (one block) before ``before``,
    with the block arguments replaced by ``args``. Returns (the values the block yielded,
    the moved ops). The region keeps only its terminator: erase or replace ``op`` after."""
    block = op.regions[region_index].blocks[0]
    for arg, value in zip(block.arguments, args):
        arg.replace_all_uses_with(value)
    body = [o.operation for o in block.operations]
    for o in body[:-1]:
        o.move_before(before)
    return list(body[-1].operands), body[:-1]


def copy_block(op: ir.Operation, region_index: int, args,
               ip: ir.InsertionPoint) -> tuple[list, list]:
    """Like :func:`inline_block` on a copy of ``op`` made at ``ip`` (``op`` is left
    unchanged): the region's ops recomputed there, e.g. in a backward."""
    clone = op.clone(ip=ip)
    try:
        return inline_block(clone, region_index, args, clone)
    finally:
        clone.erase()


def eliminate_dead_code(block) -> int:
    """Erase, last to first, the ops of ``block`` whose results are all unused (every
    thunder op is free of side effects). Returns the number of ops erased."""
    ops = [o.operation for o in block.operations]
    uses: Counter = Counter()
    for op in ops:
        for _, _, v in operand_sites(op):
            uses[v] += 1
    erased = 0
    for op in reversed(ops[:-1]):
        if any(uses[r] for r in op.results):
            continue
        for _, _, v in operand_sites(op):
            uses[v] -= 1
        op.erase()
        erased += 1
    return erased
