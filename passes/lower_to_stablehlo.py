"""``lower-to-stablehlo``: a dialect conversion of each XLA region to StableHLO (+ CHLO).

Runs on every ``func.func`` except the plan's ``@computation`` (whose executor calls stay).
The target marks ``thunder`` illegal and StableHLO/CHLO/func legal, so an op with no
pattern in ``lowerings.LOWERINGS`` fails the full conversion; that failure is reported as a
``LoweringError`` naming the op and the user's source line it came from.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from thunder_mlir.dialects import PRIM_OPS
from thunder_mlir.errors import LoweringError

from .lowerings import LOWERINGS

NAME = "lower-to-stablehlo"
PLAN_FUNCTIONS = ("computation", "forward", "backward")

# The type converter and its conversion callback must outlive every conversion
# (toolchain.md, Read first 1 and 7); the frozen pattern set is built once (item 2).
_IDENTITY = lambda t: t  # noqa: E731
_STATE: dict = {}


def _patterns():
    if "frozen" not in _STATE:
        tc = rewrite.TypeConverter()
        tc.add_conversion(_IDENTITY)
        ps = rewrite.RewritePatternSet()
        for name, fn in LOWERINGS.items():
            ps.add_conversion(PRIM_OPS[name], _adapt(fn), tc)
        _STATE["tc"] = tc
        _STATE["frozen"] = ps.freeze()
    return _STATE["frozen"]


def _adapt(fn):
    def pattern(op, adaptor, type_converter, rewriter):
        fn(op, list(adaptor.operands), rewriter)
    return pattern


def _target() -> rewrite.ConversionTarget:
    tg = rewrite.ConversionTarget()
    tg.add_legal_dialect("builtin", "func", "stablehlo", "chlo")
    tg.add_illegal_dialect("thunder")
    return tg


def run(module: ir.Module) -> None:
    """Lower every region function of ``module``; raises LoweringError naming a stuck op."""
    with module.context, ir.Location.unknown():
        _run(module)


def _run(module: ir.Module) -> None:
    patterns = _patterns()
    for f in [op.operation for op in module.body.operations]:
        if f.name != "func.func":
            continue
        if ir.StringAttr(f.attributes["sym_name"]).value in PLAN_FUNCTIONS:
            continue
        _check_lowerable(f)
        try:
            rewrite.apply_full_conversion(f, _target(), patterns)
        except ir.MLIRError as e:
            raise LoweringError(f"lower-to-stablehlo failed: {e}") from None


def _check_lowerable(f) -> None:
    bad = []

    def cb(op):
        if op.name.startswith("thunder.") and op.name[len("thunder."):] not in LOWERINGS:
            bad.append(op)
        return ir.WalkResult.ADVANCE

    # Pre-order, so that the outermost stuck op is named (a composite, not the yield
    # inside it, which a post-order walk reaches first).
    f.walk(cb, ir.WalkOrder.PRE_ORDER)
    if bad:
        op = bad[0]
        raise LoweringError(
            f"lower-to-stablehlo: no lowering for '{op.name}' at {op.location} "
            f"(composites must be decomposed and executor calls partitioned out first)")
