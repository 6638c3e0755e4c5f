"""``lower-to-stablehlo``: a dialect conversion of each XLA region to StableHLO (+ CHLO).

Runs on every ``func.func`` except the plan's ``@computation`` (whose executor calls stay).
The target marks ``thunder`` illegal and StableHLO/CHLO/func legal, so an op with no
lowering (``PrimDef.lower``, ``ir/prim_defs.py``) fails the full conversion; that failure is
reported as a ``LoweringError`` naming the op and the user's source line it came from.

Control-flow ops are rewritten first, outside the conversion driver (whose rewriter cannot
move blocks, toolchain.md §2): ``thunder.cond`` becomes ``stablehlo.if`` and
``thunder.while`` ``stablehlo.while``, their blocks moved over with ``thunder.yield`` turned
into ``stablehlo.return``; values captured from above stay captured (XLA accepts implicit
captures in both). The conversion then lowers the ops inside the moved regions.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from thunder_mlir.errors import LoweringError
from thunder_mlir.ir import sharding
from thunder_mlir.ir.regions import nested_ops

from thunder_mlir.ir.hlo import hlo, one_to_one, splat
from thunder_mlir.ir.prim_defs import PRIMS

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
        for p in PRIMS.values():
            fn = one_to_one(p.lower) if isinstance(p.lower, str) else p.lower
            ps.add_conversion(p.op, _adapt(fn), tc)
        _STATE["tc"] = tc
        _STATE["frozen"] = ps.freeze()
    return _STATE["frozen"]


def _adapt(fn):
    def pattern(op, adaptor, type_converter, rewriter):
        if _empty_result(op):
            with rewriter.ip:
                empty = splat(op.results[0].type, 0, op.location)
            rewriter.replace_op(op, [empty])
            return
        fn(op, list(adaptor.operands), rewriter)
    return pattern


def _empty_result(op) -> bool:
    """One result with no elements: it lowers to an empty constant, whatever the op (XLA
    rejects some ops on empty operands, e.g. a gather with slice size 1 from a 0-length
    dim, and an empty result holds no values to compute)."""
    results = list(op.results)
    return len(results) == 1 and isinstance(results[0].type, ir.RankedTensorType) and \
        0 in ir.RankedTensorType(results[0].type).shape


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
        _lower_control_flow(f)
        _check_lowerable(f)
        try:
            rewrite.apply_full_conversion(f, _target(), patterns)
        except ir.MLIRError as e:
            raise LoweringError(f"lower-to-stablehlo failed: {e}") from None
        _lower_shardings(f)


def _lower_shardings(f) -> None:
    """``thunder.sharding`` argument and result attributes of a function with a
    ``thunder.mesh`` become GSPMD ``mhlo.sharding`` strings (ir/sharding.py)."""
    if sharding.MESH_ATTR not in f.attributes:
        return
    try:
        _gspmd_attributes(f)
    except ValueError as e:
        raise LoweringError(f"lower-to-stablehlo: {e} (on @"
                            f"{ir.StringAttr(f.attributes['sym_name']).value})") from None


def _gspmd_attributes(f) -> None:
    """Raises ValueError for malformed text or a spec that does not fit its value."""
    mesh = sharding.parse_mesh(ir.StringAttr(f.attributes[sharding.MESH_ATTR]).value)
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    for key, types in (("arg_attrs", ftype.inputs), ("res_attrs", ftype.results)):
        if key not in f.attributes:
            continue
        new = []
        for d, t in zip(ir.ArrayAttr(f.attributes[key]), types):
            entries = {n.name: n.attr for n in ir.DictAttr(d)}
            if sharding.SHARDING_ATTR in entries:
                text = ir.StringAttr(entries.pop(sharding.SHARDING_ATTR)).value
                spec = sharding.parse_spec(text)
                sharding.check_spec(mesh, spec, ir.RankedTensorType(t).shape)
                entries[sharding.GSPMD_ATTR] = ir.StringAttr.get(sharding.gspmd(mesh, spec))
            new.append(ir.DictAttr.get(entries))
        f.attributes[key] = ir.ArrayAttr.get(new)
    del f.attributes[sharding.MESH_ATTR]


_CONTROL_FLOW = {"thunder.cond": "stablehlo.if", "thunder.while": "stablehlo.while"}


def _lower_control_flow(f) -> None:
    """cond -> stablehlo.if (operand: the predicate), while -> stablehlo.while (operands:
    the carried values); innermost first."""
    for op in reversed([o for o in nested_ops(f) if o.name in _CONTROL_FLOW]):
        with ir.InsertionPoint(op):
            new = hlo(_CONTROL_FLOW[op.name], list(op.operands), [r.type for r in op.results],
                      loc=op.location, regions=2)
        for i in range(2):
            block = op.regions[i].blocks[0]
            block.append_to(new.regions[i])
            terminator = list(block.operations)[-1].operation
            with ir.InsertionPoint(terminator):
                hlo("stablehlo.return", list(terminator.operands), [], loc=terminator.location)
            terminator.erase()
        for old, value in zip(op.results, new.results):
            old.replace_all_uses_with(value)
        op.erase()


def _check_lowerable(f) -> None:
    bad = []

    def cb(op):
        if op.name.startswith("thunder.") and op.name[len("thunder."):] not in PRIMS:
            bad.append(op)
        return ir.WalkResult.ADVANCE

    # Pre-order, so that the outermost stuck op is named (a composite, not the yield
    # inside it, which a post-order walk reaches first).
    f.walk(cb, ir.WalkOrder.PRE_ORDER)
    if bad:
        op = bad[0]
        error = LoweringError(
            f"lower-to-stablehlo: no lowering for '{op.name}' at {op.location} "
            f"(composites must be decomposed and executor calls partitioned out first)")
        error.location = op.location
        raise error
