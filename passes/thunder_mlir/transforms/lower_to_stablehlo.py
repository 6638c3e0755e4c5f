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

from thunder_mlir.errors import DynamicShapeFallback, LoweringError
from thunder_mlir.ir import hlo_dynamic, sharding, symbolic
from thunder_mlir.ir.regions import nested_ops

from thunder_mlir.ir.hlo import hlo, lowering_options, one_to_one, splat
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
            ps.add_conversion(p.op, _adapt(fn, p.name), tc)
        _STATE["tc"] = tc
        _STATE["frozen"] = ps.freeze()
    return _STATE["frozen"]


def _adapt(fn, name: str):
    static_ok = name in hlo_dynamic.DYNAMIC_AS_STATIC or isinstance(PRIMS[name].lower, str)
    dynamic_fn = hlo_dynamic.DYNAMIC_LOWERINGS.get(name)

    def pattern(op, adaptor, type_converter, rewriter):
        if hlo_dynamic.op_is_dynamic(op):  # symbolic sizes (ir/hlo_dynamic.py)
            try:
                if hlo_dynamic.has_symbolic_fields(op) and \
                        name not in hlo_dynamic.SYMBOLIC_FIELDS:
                    hlo_dynamic.check(op)  # raises: a field would be baked in
                if dynamic_fn is not None:
                    dynamic_fn(op, list(adaptor.operands), rewriter, _STATE["scope"])
                    return
                if not static_ok:
                    hlo_dynamic.check(op)
            except DynamicShapeFallback as e:
                _STATE["dynamic_error"] = e
                return True  # not matched: the conversion fails, the error is raised
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


def run(module: ir.Module, computed_once: bool = True, accumulate_f32: bool = True,
        narrow_dots: bool = False, batch_group_taps: bool = True,
        blocked_contractions: bool = True) -> None:
    """Lower every region function of ``module``; raises LoweringError naming a stuck op.
    ``computed_once``: sine and cosine take ``hlo.lower_computed_once``'s form, else their
    plain StableHLO op; ``accumulate_f32``: 16-bit dots and convolutions produce float32
    and one convert (``hlo._accumulated_in_f32``), else their 16-bit type (both the CPU
    target's choices); ``narrow_dots``: a float32 dot of values converted from 16 bits
    reads the 16-bit values (``hlo._widened_16bit``: the GPU target's choice;
    pipeline.Target); ``batch_group_taps``: a convolution with batch groups of one row
    (a depthwise weight gradient) as one multiply-and-reduce per window position
    (``hlo._batch_group_taps``: the CPU target's choice); ``blocked_contractions``: a
    float32 convolution whose window is its whole input (a 1 x 1 convolution's weight
    gradient) as sums of blocks (``hlo._blocked_contraction``: the CPU target's choice)."""
    with module.context, ir.Location.unknown(), lowering_options(
            computed_once=computed_once, accumulate_f32=accumulate_f32,
            narrow_dots=narrow_dots, batch_group_taps=batch_group_taps,
            blocked_contractions=blocked_contractions):
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
        _STATE["scope"] = _symbol_scope(module, f)
        _STATE["dynamic_error"] = None
        try:
            rewrite.apply_full_conversion(f, _target(), patterns)
        except ir.MLIRError as e:
            if _STATE["dynamic_error"] is not None:
                raise _STATE["dynamic_error"] from None
            raise LoweringError(f"lower-to-stablehlo failed: {e}") from None
        finally:
            _STATE["scope"] = None
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


def _symbol_scope(module: ir.Module, f) -> hlo_dynamic.SymbolScope:
    """The size symbols readable from region ``f``'s arguments (symbolic sizes only)."""
    args = f.regions[0].blocks[0].arguments
    if not any(hlo_dynamic.is_dynamic(a.type) for a in args):
        return hlo_dynamic.SymbolScope()
    return hlo_dynamic.SymbolScope.bind(f, symbolic_arg_shapes(module, f))


def symbolic_arg_shapes(module: ir.Module, f) -> list[list[str] | None]:
    """Per argument of region function ``f``: the expression text of each dim, from its
    own ``thunder.arg_shapes`` or its call site in a plan function (an argument of the plan
    function: its ``thunder.arg_shapes``; a prim's result: its ``thunder.shape``); None
    when unknown."""
    if symbolic.ARG_SHAPES_ATTR in f.attributes:  # a function lowered on its own
        return [[ir.StringAttr(d).value for d in ir.ArrayAttr(s)]
                for s in ir.ArrayAttr(f.attributes[symbolic.ARG_SHAPES_ATTR])]
    name = ir.StringAttr(f.attributes["sym_name"]).value
    for plan in [op.operation for op in module.body.operations]:
        if plan.name != "func.func" or \
                ir.StringAttr(plan.attributes["sym_name"]).value not in PLAN_FUNCTIONS:
            continue
        for op in plan.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "func.call" and \
                    ir.FlatSymbolRefAttr(op.attributes["callee"]).value == name:
                return [_value_shape(module, plan, v) for v in op.operands]
    return [None] * len(f.regions[0].blocks[0].arguments)


def _value_shape(module: ir.Module, fn, v: ir.Value) -> list[str] | None:
    owner = v.owner
    if isinstance(owner, ir.Block):
        if symbolic.ARG_SHAPES_ATTR not in fn.attributes:
            return None
        shapes = ir.ArrayAttr(fn.attributes[symbolic.ARG_SHAPES_ATTR])
        i = ir.BlockArgument(v).arg_number
        if i >= len(shapes):
            return None
        return [ir.StringAttr(s).value for s in ir.ArrayAttr(shapes[i])]
    op = owner.operation
    if op.name == "func.call":  # a result of an earlier region: its return operand
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        region = next(o.operation for o in module.body.operations
                      if ir.StringAttr(o.operation.attributes["sym_name"]).value == callee)
        ret = list(region.regions[0].blocks[0].operations)[-1].operation
        k = ir.OpResult(v).result_number
        inner = ret.operands[k]
        if isinstance(inner.owner, ir.Block):  # passed through: the region's call site
            shapes = symbolic_arg_shapes(module, region)
            return shapes[ir.BlockArgument(inner).arg_number]
        return _value_shape(module, region, inner)
    if symbolic.SHAPE_ATTR in op.attributes:
        return [ir.StringAttr(s).value for s in ir.ArrayAttr(op.attributes[symbolic.SHAPE_ATTR])]
    if symbolic.RESULT_SHAPES_ATTR in op.attributes:  # an executor call's result
        shapes = ir.ArrayAttr(op.attributes[symbolic.RESULT_SHAPES_ATTR])
        return [ir.StringAttr(s).value
                for s in ir.ArrayAttr(shapes[ir.OpResult(v).result_number])]
    t = ir.RankedTensorType(v.type)
    return None if not t.has_static_shape else [str(d) for d in t.shape]


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
