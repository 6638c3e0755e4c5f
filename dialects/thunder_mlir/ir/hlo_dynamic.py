"""Lowering of prims whose types have ``?`` dimensions (symbolic sizes, ir/symbolic.py).

StableHLO ops whose result shape is an attribute or the result type (broadcast_in_dim,
reshape, iota, slice, a splat constant) have dynamic-shape forms taking the shape as a
1-D integer tensor operand (StableHLO spec: ``dynamic_broadcast_in_dim``,
``dynamic_reshape``, ``dynamic_iota``, ``real_dynamic_slice``). The shape tensor is
computed from the op's ``thunder.shape`` expressions over the size symbols, each symbol
read once at the top of the region function with ``stablehlo.get_dimension_size`` of an
argument that has it (``SymbolScope``). ``stablehlo-refine-shapes`` later folds all of
this into static shapes for each concrete input shape (runtime/refine.py).

Ops whose lowering reads nothing but operand and result types (elementwise, dot_general,
reductions, transpose, ...) lower as in the static case (``DYNAMIC_AS_STATIC``); any other
prim with a ``?`` raises ``DynamicShapeFallback`` (the program is then compiled for static
shapes): never a lowering that would bake one traced size in.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo as shlo

from thunder_mlir.errors import DynamicShapeFallback
from thunder_mlir.ir import attrs, symbolic
from thunder_mlir.ir.hlo import _i64s, _int, hlo

def _i64():
    return ir.IntegerType.get_signless(64)


def is_dynamic(t: ir.Type) -> bool:
    """Whether ``t`` is a ranked tensor type with a ``?`` dimension."""
    return isinstance(t, ir.RankedTensorType) and not ir.RankedTensorType(t).has_static_shape


def op_is_dynamic(op) -> bool:
    """A ``?`` in a type, or a symbolic integer field (``thunder.sym.<field>``)."""
    return any(is_dynamic(v.type) for v in list(op.results) + list(op.operands)) or \
        has_symbolic_fields(op)


def has_symbolic_fields(op) -> bool:
    return any(name.startswith(symbolic.SYM_ATTR_PREFIX) for name in op.attributes)


class SymbolScope:
    """The size symbols available in one region function: ``values[name]`` is a
    ``tensor<i64>`` holding the symbol's size, read from an argument at function entry."""

    def __init__(self):
        self.values: dict[str, ir.Value] = {}

    @classmethod
    def bind(cls, f, arg_shapes: list[list[str] | None]) -> "SymbolScope":
        """Emit ``get_dimension_size`` + ``convert`` at the top of function ``f`` for each
        argument dim whose expression is a bare symbol (``arg_shapes``: per argument, the
        text of each dim, or None when unknown). A symbol no dim holds bare is read from a
        dim ``s<k> + c`` or ``c - s<k>`` (c an integer): the length of a slice to or from
        an int read from a tensor (``x[:n + 1]``, ``x[n:]``: frontend/value_guards.py
        ``slice_by_value``), whose region has no argument of size ``n`` itself."""
        scope = cls()
        block = f.regions[0].blocks[0]
        first = next(iter(block.operations), None)
        ip = ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(block)
        scalar_i32 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))
        scalar_i64 = ir.RankedTensorType.get([], _i64())

        def size(arg, d):
            n = hlo("stablehlo.get_dimension_size", [arg], [scalar_i32],
                    {"dimension": ir.IntegerAttr.get(_i64(), d)}).result
            return hlo("stablehlo.convert", [n], [scalar_i64]).result

        offset = []  # (argument, dim, symbol name, a, c) of dims a * s<k> + c, a = +-1
        with ip, f.location:
            for arg, dims in zip(block.arguments, arg_shapes):
                for d, text in enumerate(dims or ()):
                    if text.startswith("s") and text[1:].isdigit():
                        if text not in scope.values:
                            scope.values[text] = size(arg, d)
                    elif "s" in text:
                        found = _shifted_symbol(text)
                        if found is not None:
                            offset.append((arg, d, *found))
            for arg, d, name, a, c in offset:
                if name not in scope.values:
                    constant = hlo("stablehlo.constant", [], [scalar_i64], {
                        "value": ir.DenseElementsAttr.get_splat(
                            scalar_i64, ir.IntegerAttr.get(_i64(), c))}).result
                    # s = size - c, or c - size
                    operands = [size(arg, d), constant] if a == 1 else [constant, size(arg, d)]
                    scope.values[name] = hlo("stablehlo.subtract", operands,
                                             [scalar_i64]).result
        return scope

    def value(self, expr, loc) -> ir.Value:
        """A ``tensor<i64>`` computing ``expr`` (a sympy expression; at the current insertion
        point)."""
        import sympy  # (imported only where symbolic sizes are used: ir/symbolic.py)

        t = ir.RankedTensorType.get([], _i64())

        def const(v: int):
            return hlo("stablehlo.constant", [], [t], {"value": ir.DenseElementsAttr.get_splat(
                t, ir.IntegerAttr.get(_i64(), int(v)))}, loc).result

        def binary(name, a, b):
            return hlo(name, [a, b], [t], loc=loc).result

        def floor_div(num, den):
            # (den > 0.) stablehlo.divide truncates: floor for num >= 0, which the symbols
            # at least 2 give; a data-dependent size may be 0 or 1 (ShapeEnv.new_unbacked),
            # so unless num >= 0 for every symbol >= 0, floor(num/den) =
            # (num - (den - 1) * [num < 0]) / den, [num < 0] = -min(sign(num), 0)
            a, b = emit(num), emit(den)
            if symbolic._sign(num, frozenset(num.free_symbols)) in (0, 1):
                return binary("stablehlo.divide", a, b)
            sign = hlo("stablehlo.sign", [a], [t], loc=loc).result
            neg = binary("stablehlo.subtract", const(0),
                         binary("stablehlo.minimum", sign, const(0)))
            shift = binary("stablehlo.multiply", neg, binary("stablehlo.subtract", b, const(1)))
            return binary("stablehlo.divide", binary("stablehlo.subtract", a, shift), b)

        def emit(e):
            if e.is_Integer:
                return const(int(e))
            if e.is_Symbol:
                if e.name not in self.values:
                    raise DynamicShapeFallback(
                        f"size symbol {e.name} is not readable from the arguments of a "
                        "region that needs it")
                return self.values[e.name]
            if e.is_Add:
                terms = [emit(a) for a in e.args]
                out = terms[0]
                for x in terms[1:]:
                    out = binary("stablehlo.add", out, x)
                return out
            if e.is_Mul:
                if any(a.is_Rational and not a.is_Integer for a in e.args):
                    raise DynamicShapeFallback(f"size expression {e} is not an integer product")
                terms = [emit(a) for a in e.args]
                out = terms[0]
                for x in terms[1:]:
                    out = binary("stablehlo.multiply", out, x)
                return out
            if e.is_Pow and e.exp.is_Integer and e.exp > 0:
                base = emit(e.base)
                out = base
                for _ in range(int(e.exp) - 1):
                    out = binary("stablehlo.multiply", out, base)
                return out
            if isinstance(e, sympy.floor):
                num, den = sympy.fraction(sympy.together(e.args[0]))
                if symbolic._sign(num) not in (0, 1) or symbolic._sign(den) != 1:
                    raise DynamicShapeFallback(f"size expression {e}: floor of a value of "
                                               "unknown sign")
                return floor_div(num, den)
            if isinstance(e, sympy.Mod):
                a, b = e.args
                if symbolic._sign(a) not in (0, 1) or symbolic._sign(b) != 1:
                    raise DynamicShapeFallback(f"size expression {e}: Mod of a value of "
                                               "unknown sign")
                if symbolic._sign(a, frozenset(a.free_symbols)) in (0, 1):
                    return binary("stablehlo.remainder", emit(a), emit(b))
                return binary("stablehlo.subtract", emit(a),
                              binary("stablehlo.multiply", emit(b), floor_div(a, b)))
            raise DynamicShapeFallback(f"size expression {e} has no StableHLO lowering")

        return emit(expr)

    def shape(self, texts: list[str], loc) -> ir.Value:
        """A ``tensor<rank x i64>`` of the dims given by their expression texts."""
        one = ir.RankedTensorType.get([1], _i64())
        parts = [hlo("stablehlo.reshape", [self.value(symbolic.parse_dim(s), loc)], [one],
                     loc=loc).result for s in texts]
        rt = ir.RankedTensorType.get([len(texts)], _i64())
        if not parts:
            return hlo("stablehlo.constant", [], [rt], {"value": ir.DenseElementsAttr.get_splat(
                rt, ir.IntegerAttr.get(_i64(), 0))}, loc).result
        if len(parts) == 1:
            return parts[0]
        return hlo("stablehlo.concatenate", parts, [rt],
                   {"dimension": ir.IntegerAttr.get(_i64(), 0)}, loc).result


def _shifted_symbol(text: str) -> tuple[str, int, int] | None:
    """(``s<k>``, a, c) for a dimension text ``a * s<k> + c`` with a = 1 or -1 and c an
    integer (``s3 + 1``, ``12 - s3``), else None."""
    expr = symbolic.parse_dim(text)
    if not expr.is_Add or len(expr.free_symbols) != 1:
        return None
    sym = next(iter(expr.free_symbols))
    a = expr.coeff(sym)
    c = expr - a * sym
    if a not in (1, -1) or not c.is_Integer or c.free_symbols:
        return None
    return sym.name, int(a), int(c)


def _texts(op, name: str) -> list[str]:
    if name not in op.attributes:
        raise DynamicShapeFallback(f"{op.name} has a dynamic type but no {name} attribute")
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[name])]


def _result_shape(op, scope: SymbolScope) -> ir.Value:
    return scope.shape(_texts(op, symbolic.SHAPE_ATTR), op.location)


def lower_broadcast_in_dim(op, operands, rw, scope):
    """stablehlo.dynamic_broadcast_in_dim to the symbolic result shape."""
    with rw.ip:
        r = hlo("stablehlo.dynamic_broadcast_in_dim",
                [operands[0], _result_shape(op, scope)], [op.result.type],
                {"broadcast_dimensions": op.attributes["broadcast_dimensions"]}, op.location)
    rw.replace_op(op, r.results)


def lower_reshape(op, operands, rw, scope):
    """stablehlo.dynamic_reshape to the symbolic result shape."""
    with rw.ip:
        r = hlo("stablehlo.dynamic_reshape", [operands[0], _result_shape(op, scope)],
                [op.result.type], loc=op.location)
    rw.replace_op(op, r.results)


def lower_iota(op, operands, rw, scope):
    """stablehlo.dynamic_iota of the symbolic result shape."""
    with rw.ip:
        r = hlo("stablehlo.dynamic_iota", [_result_shape(op, scope)], [op.result.type],
                {"iota_dimension": op.attributes["dimension"]}, op.location)
    rw.replace_op(op, r.results)


def splat(t: ir.Type, value, shape: ir.Value, loc) -> ir.Value:
    """A tensor of dynamic type ``t`` and shape ``shape`` filled with ``value``: a 0-d
    constant broadcast by stablehlo.dynamic_broadcast_in_dim."""
    from thunder_mlir.ir.hlo import splat as static_splat

    t = ir.RankedTensorType(t)
    scalar = static_splat(ir.RankedTensorType.get([], t.element_type), value, loc)
    return hlo("stablehlo.dynamic_broadcast_in_dim", [scalar, shape], [t],
               {"broadcast_dimensions": _i64s([])}, loc).result


def lower_full(op, operands, rw, scope):
    """full of a symbolic shape (a broadcast 0-d constant) or of a symbolic size as its
    value (that size, converted to the element type, broadcast)."""
    t, loc = ir.RankedTensorType(op.result.type), op.location
    key = symbolic.SYM_ATTR_PREFIX + "value"
    with rw.ip:
        if key in op.attributes:
            n = scope.value(symbolic.parse_dim(_texts(op, key)[0]), loc)
            scalar = hlo("stablehlo.convert", [n],
                         [ir.RankedTensorType.get([], t.element_type)], loc=loc).result
            if t.has_static_shape:
                r = hlo("stablehlo.broadcast_in_dim", [scalar], [t],
                        {"broadcast_dimensions": _i64s([])}, loc).result
            else:
                r = hlo("stablehlo.dynamic_broadcast_in_dim", [scalar, _result_shape(op, scope)],
                        [t], {"broadcast_dimensions": _i64s([])}, loc).result
        else:
            value = attrs.get_value(op, "value")  # (float or int, as recorded)
            r = splat(t, value, _result_shape(op, scope), loc)
    rw.replace_op(op, [r])


def lower_slice(op, operands, rw, scope):
    """stablehlo.real_dynamic_slice with symbolic start/limit indices."""
    def field(name):
        key = symbolic.SYM_ATTR_PREFIX + name
        if key in op.attributes:
            return _texts(op, key)
        return [str(v) for v in ir.DenseI64ArrayAttr(op.attributes[name])]
    with rw.ip:
        start = scope.shape(field("start_indices"), op.location)
        limit = scope.shape(field("limit_indices"), op.location)
        strides = scope.shape(field("strides"), op.location)
        r = hlo("stablehlo.real_dynamic_slice", [operands[0], start, limit, strides],
                [op.result.type], loc=op.location)
    rw.replace_op(op, r.results)


def lower_cumsum(op, operands, rw, scope):
    """cumsum. Along a static dim: the static lowering (its reduce_window reads that dim's
    size only). Along a symbolic dim, of integers: ``x`` contracted with the upper
    triangular 0/1 matrix ``iota_i <= iota_j`` (dot_general), exact for integers; a
    floating-point cumsum there would sum in another order than eager's: static instead."""
    from thunder_mlir.ir.hlo import compare, lower_cumsum as static_cumsum

    t, loc = ir.RankedTensorType(op.result.type), op.location
    d = _int(op, "dim")
    if not t.is_dynamic_dim(d):
        static_cumsum(op, operands, rw)
        return
    e = t.element_type
    if not isinstance(e, ir.IntegerType) or ir.IntegerType(e).width == 1:
        raise DynamicShapeFallback("cumsum of a non-integer tensor along a symbolic dim")
    texts = _texts(op, symbolic.SHAPE_ATTR)
    dyn = ir.ShapedType.get_dynamic_size()
    square = ir.RankedTensorType.get([dyn, dyn], _i64())
    with rw.ip:
        shape2 = scope.shape([texts[d], texts[d]], loc)
        rows = hlo("stablehlo.dynamic_iota", [shape2], [square],
                   {"iota_dimension": ir.IntegerAttr.get(_i64(), 0)}, loc).result
        cols = hlo("stablehlo.dynamic_iota", [shape2], [square],
                   {"iota_dimension": ir.IntegerAttr.get(_i64(), 1)}, loc).result
        upper = hlo("stablehlo.convert", [compare(rows, cols, "LE", loc)],
                    [ir.RankedTensorType.get([dyn, dyn], e)], loc=loc).result
        rank = t.rank
        moved = [t.get_dim_size(i) if not t.is_dynamic_dim(i) else dyn
                 for i in range(rank) if i != d] + [dyn]
        dn = shlo.DotDimensionNumbers.get(
            lhs_batching_dimensions=[], rhs_batching_dimensions=[],
            lhs_contracting_dimensions=[d], rhs_contracting_dimensions=[0])
        y = hlo("stablehlo.dot_general", [operands[0], upper],
                [ir.RankedTensorType.get(moved, e)], {"dot_dimension_numbers": dn}, loc).result
        perm = [i if i < d else (rank - 1 if i == d else i - 1) for i in range(rank)]
        if perm != list(range(rank)):
            y = hlo("stablehlo.transpose", [y], [t], {"permutation": _i64s(perm)}, loc).result
    rw.replace_op(op, [y])


def _static_except(op, operand: int, dims_ok) -> None:
    t = ir.RankedTensorType(op.operands[operand].type)
    for d in range(t.rank):
        if t.is_dynamic_dim(d) and d not in dims_ok(op):
            raise DynamicShapeFallback(f"{op.name}: dim {d} of operand {operand} is symbolic")


DYNAMIC_LOWERINGS = {
    "broadcast_in_dim": lower_broadcast_in_dim, "reshape": lower_reshape,
    "iota": lower_iota, "full": lower_full, "slice": lower_slice, "cumsum": lower_cumsum,
}

# Prims whose static lowering is also right with ``?`` dims: it reads only operand and
# result types and attributes that do not depend on a size (one_to_one targets accept
# dynamic types). Elementwise prims lowered 1:1 are added by lower-to-stablehlo.
DYNAMIC_AS_STATIC = {
    "where", "clamp", "convert_element_type", "bitcast", "stop_gradient", "no_derivative",
    "transpose", "concatenate", "dot_general", "reverse", "pad",
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or",
    "eq", "ne", "lt", "le", "gt", "ge",
    # their constants and iotas take the operand's shape (hlo.splat(like=), hlo.shape_of)
    "exp2", "log2", "log10", "trunc", "reciprocal", "argmax", "argmin", "sin", "cos",
}

def _gather_dim(op) -> set[int]:
    return {_int(op, "dim")}


def _batch_dims(op) -> set[int]:
    return set(range(ir.RankedTensorType(op.operands[1].type).rank - 1))


# Prims whose static lowering is right when the named operands' dims are static except
# those listed: the gather of ``take`` reads the table's sizes as slice sizes, that of
# ``take_along`` compares the sizes of both operands outside ``dim``; ``scatter`` reads the
# size of the index vectors' last dim (the number of indexed dims), not their number.
DYNAMIC_IF_STATIC = {
    "take": ((0, _gather_dim),),
    "take_along": ((0, _gather_dim), (1, _gather_dim)),
    "scatter": ((1, _batch_dims),),
}


# Prims whose dynamic lowering reads symbolic integer fields (thunder.sym.<field>)
SYMBOLIC_FIELDS = {"slice", "full"}


def check(op) -> None:
    """Raise DynamicShapeFallback unless ``op`` (with a ``?`` type) lowers correctly."""
    name = op.name[len("thunder."):]
    if has_symbolic_fields(op):
        raise DynamicShapeFallback(f"the prim {name} has no lowering for symbolic fields")
    if name in DYNAMIC_IF_STATIC:
        for operand, ok in DYNAMIC_IF_STATIC[name]:
            _static_except(op, operand, ok)
        return
    raise DynamicShapeFallback(f"the prim {name} has no lowering for symbolic sizes")
