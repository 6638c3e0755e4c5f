"""``decompose``: inline every ``thunder.composite`` that no executor claimed, and every
``thunder.checkpoint`` (its only effect, on what ``grad`` saves, has been applied).

A greedy rewrite pattern rooted at ``thunder.composite`` moves the region's ops before
the composite (nested composites come along and are rewritten in turn), maps block
arguments to the composite's operands, and replaces its results with the yielded values.
The same inlining the MLIR inliner does, written as a pattern because IRDL dialects have
no DialectInlinerInterface (toolchain.md §2).
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from thunder_mlir.ir.dialect import CheckpointOp, CompositeOp
from thunder_mlir.ir.regions import inline_block

NAME = "decompose"


def inline_composite(op, rewriter) -> bool | None:
    """Pattern: replace a composite (or a checkpoint) by its body. Returns None (success)
    per the bindings."""
    operation = op.operation if hasattr(op, "operation") else op
    yielded, _ = inline_block(operation, 0, list(operation.operands), operation)
    rewriter.replace_op(operation, yielded)
    return None


_FROZEN = None


def _patterns():
    global _FROZEN
    if _FROZEN is None:  # freeze once: freezing twice crashes (toolchain.md, Read first 2)
        ps = rewrite.RewritePatternSet()
        ps.add(CompositeOp, inline_composite)
        ps.add(CheckpointOp, inline_composite)
        _FROZEN = ps.freeze()
    return _FROZEN


def run(module: ir.Module) -> None:
    """Inline all composites in ``module`` (nested ones too)."""
    with module.context, ir.Location.unknown():
        _run(module)


def _run(module: ir.Module) -> None:
    rewrite.walk_and_apply_patterns(module.operation, _patterns())
    # walk_and_apply visits each op once; composites nested in inlined bodies need more rounds
    while _has_composite(module):
        rewrite.walk_and_apply_patterns(module.operation, _patterns())


def _has_composite(module: ir.Module) -> bool:
    found = []

    def cb(op):
        if op.name in ("thunder.composite", "thunder.checkpoint"):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(cb)
    return bool(found)
