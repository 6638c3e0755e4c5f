"""Bounded dynamic shapes: one XLA program for every size of a region's symbolic dimensions
up to a static bound.

A region with symbolic sizes is otherwise compiled once per concrete input shape
(runtime/refine.py). Where each ``?`` dimension of its arguments has an upper bound known
when the plan is built (a prefix slice ``x[:n + 1]`` of a static tensor, ``value_guards.
slice_by_value``: its length is at most ``x``'s size), the region is rewritten into XLA's
bounded dynamism and compiled once:

- each such argument takes its bound's static shape (the unsliced tensor), and a new
  ``tensor<i32>`` argument per ``?`` dimension gives the dimension's size at this call;
  ``stablehlo.set_dimension_size`` makes the dimension dynamic at the entry;
- every ``?`` type gets its bound (``#stablehlo.bounds<...>``), propagated through the ops;
- the shape-taking ops XLA's HLO export has no translation for (``dynamic_broadcast_in_dim``,
  ``dynamic_reshape``, ``dynamic_iota``) become their static op at the bound followed by
  ``set_dimension_size`` with the size their shape operand gives.

XLA's dynamic padder (``xla/service/dynamic_padder.cc``, ``DynamicDimensionInference``)
then runs the program on the padded buffers: a reduction over a dynamic dimension reads
its init value in the padding, a dot masks the padding of a dynamic contracting dimension to
zero, and ``get_dimension_size`` returns the size at run time. That is the rule this module
relies on; it admits only ops whose handling of a dynamic operand the padder defines
(elementwise, ``dot_general``, ``reduce``, ``transpose``, broadcasts, reshapes that keep the
dynamic dimension, concatenation along a static dimension) and returns None for anything
else, so the caller keeps the per-shape compile. Outputs must be static.

Source: StableHLO's bounded dynamism (``#stablehlo.bounds``, stablehlo/docs/dynamism.md) and
``set_dimension_size`` (``xla::SetDimensionSize``, the op ``XlaBuilder::DynamicBroadcastInDim``
is built from).
"""

from __future__ import annotations

import re

from thunder_mlir.ir import attrs

#: ops computed element by element: a dynamic dimension of the result is one of an operand
ELEMENTWISE = frozenset(f"stablehlo.{n}" for n in (
    "abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros "
    "divide exponential exponential_minus_one floor imag is_finite log log_plus_one logistic "
    "maximum minimum multiply negate not or popcnt power real reduce_precision remainder "
    "round_nearest_afz round_nearest_even rsqrt select shift_left shift_right_arithmetic "
    "shift_right_logical sign sine sqrt subtract tan tanh xor").split())


class _Unsupported(Exception):
    """An op this rewrite does not bound: the caller compiles per shape."""


def bound_region(text: str, bounds: dict[int, tuple[int, ...]]):
    """``text`` (a StableHLO module, entry ``@main``) rewritten for bounded dynamic shapes.

    ``bounds``: ``@main`` argument index -> the static shape that bounds it (one int per
    dimension; at a ``?`` dimension, the largest size it takes). Every argument with a ``?``
    dimension must have one. Returns ``(text, sizes, padded)``: the new module, whose
    ``@main`` takes the bounded arguments at their static shapes and then one
    ``tensor<i32>`` per entry of ``sizes``, a list of ``(argument index, dimension)`` in
    that order; each result with a ``?`` dimension is returned padded to its bound (a static
    type; past the size, its contents are unspecified), and after the results, one
    ``tensor<i32>`` per entry of ``padded``, a list of ``(result index, dimension,
    bound)``: the result's size there. None where the module has an op this rewrite does
    not admit or a ``?`` dimension with no bound (the caller compiles per shape)."""
    from torch_mlir import ir

    from thunder_mlir.ir.context import get_context

    with get_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        main = next(op.operation for op in module.body.operations
                    if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
        if sum(1 for _ in module.body.operations) != 1:
            return None  # (a call to another function: not followed)
        try:
            sizes, padded = _Rewrite(main, bounds).run()
        except _Unsupported:
            return None
        return str(module), sizes, padded


class _Rewrite:
    """The rewrite of one ``@main`` (bound_region). ``dims[v]``: for a value with ``?``
    dimensions, the bound of each dimension (None where static); ``ints[v]``: for an
    integer tensor of at most one dimension computed from sizes, an interval ``(lo, hi)``
    per element."""

    def __init__(self, main, bounds):
        from torch_mlir import ir
        self.ir = ir
        self.main = main
        self.bounds = bounds
        self.block = main.regions[0].blocks[0]
        self.dims: dict = {}
        self.ints: dict = {}

    # -- types ------------------------------------------------------------------------

    def _type(self, v):
        try:
            return self.ir.RankedTensorType(v.type)
        except ValueError:
            return None  # (a token, a tuple)

    def _dynamic(self, v) -> bool:
        t = self._type(v)
        return t is not None and not t.has_static_shape

    def _bounded_type(self, shape, element_type, dims):
        """A tensor type with ``?`` where ``dims`` has a bound, and those bounds."""
        ir = self.ir
        if all(b is None for b in dims):
            return ir.RankedTensorType.get(list(shape), element_type)
        text = ", ".join("?" if b is None else str(b) for b in dims)
        enc = ir.Attribute.parse(f"#stablehlo.bounds<{text}>")
        dyn = ir.ShapedType.get_dynamic_size()
        return ir.RankedTensorType.get([dyn if b is not None else s
                                        for s, b in zip(shape, dims)], element_type, enc)

    def _set_size(self, value, size, d: int, shape, element_type, dims, ip):
        """``stablehlo.set_dimension_size(value, size, d)`` inserted at ``ip``; its type
        has ``shape`` with ``?`` where ``dims`` holds a bound (``_bounded_type``)."""
        ir = self.ir
        return ir.Operation.create(
            "stablehlo.set_dimension_size",
            results=[self._bounded_type(shape, element_type, dims)], operands=[value, size],
            attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)},
            ip=ip).results[0]

    def _set_result(self, r, dims):
        """Give result ``r`` the bounds ``dims`` (one per dimension, None where the
        operands are static there). A bound where ``r`` is static (the padding would turn
        into values) or a ``?`` without one refuses the rewrite."""
        t = self._type(r)
        for i, b in enumerate(dims):
            if (b is None) == t.is_dynamic_dim(i):
                raise _Unsupported
        if t.has_static_shape:
            return
        r.set_type(self._bounded_type(t.shape, t.element_type, dims))
        self.dims[r] = list(dims)

    def _operand_dims(self, v):
        """The bound of each dimension of ``v`` (None where static)."""
        if v in self.dims:
            return self.dims[v]
        if self._dynamic(v):
            raise _Unsupported
        return [None] * self._type(v).rank

    # -- the walk ----------------------------------------------------------------------

    def run(self) -> tuple[list, list]:
        ir = self.ir
        body = list(self.block.operations)  # (before the entry's set_dimension_size)
        sizes = self._entry()
        padded: list = []
        for op in body:
            op = op.operation
            self._track_ints(op)
            dyn_in = any(self._dynamic(v) for v in op.operands)
            dyn_out = any(self._dynamic(r) for r in op.results)
            if not dyn_in and not dyn_out:
                continue
            if op.name == "func.return":
                padded = self._return(op)
                continue
            rule = getattr(self, "_" + op.name.replace("stablehlo.", "").replace(".", "_"),
                           None)
            if op.name in ELEMENTWISE:
                self._elementwise(op)
            elif rule is not None:
                rule(op)
            else:
                raise _Unsupported
        # the signature: the bounded arguments' static types, then the sizes
        ret = next(op for op in self.block.operations if op.operation.name == "func.return")
        self.main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in self.block.arguments], [v.type for v in ret.operands]))
        for name, extra in (("arg_attrs", len(sizes)), ("res_attrs", len(padded))):
            if name in self.main.attributes and extra:
                old = list(ir.ArrayAttr(self.main.attributes[name]))
                self.main.attributes[name] = ir.ArrayAttr.get(
                    old + [ir.DictAttr.get({})] * extra)
        return sizes, padded

    def _return(self, op) -> list[tuple[int, int, int]]:
        """Each ``?`` operand of the ``func.return`` ``op`` padded to its bound
        (``set_dimension_size`` to the bound: a static type), its sizes appended as
        ``tensor<i32>`` results; the ``(result index, dimension, bound)`` of each."""
        ir = self.ir
        i32 = ir.IntegerType.get_signless(32)
        i64 = ir.IntegerType.get_signless(64)
        ip = ir.InsertionPoint(op)
        values, padded, extra = list(op.operands), [], []
        for k, v in enumerate(values):
            if not self._dynamic(v):
                continue
            dims = self._operand_dims(v)
            t = self._type(v)
            static = [b if b is not None else s for s, b in zip(t.shape, dims)]
            so_far = list(dims)
            for d, b in enumerate(dims):
                if b is None:
                    continue
                extra.append(ir.Operation.create(
                    "stablehlo.get_dimension_size", results=[ir.RankedTensorType.get([], i32)],
                    operands=[v], attributes={"dimension": ir.IntegerAttr.get(i64, d)},
                    ip=ip).results[0])
                padded.append((k, d, b))
            value = v
            for d, b in enumerate(dims):
                if b is None:
                    continue
                so_far[d] = None
                bound = ir.Operation.create(
                    "stablehlo.constant", results=[ir.RankedTensorType.get([], i32)],
                    attributes={"value": ir.DenseElementsAttr.get_splat(
                        ir.RankedTensorType.get([], i32), ir.IntegerAttr.get(i32, b))},
                    ip=ip).results[0]
                value = self._set_size(value, bound, d, static, t.element_type, so_far, ip)
            values[k] = value
        if padded:
            ir.Operation.create("func.return", operands=values + extra, ip=ip)
            op.erase()
        return padded

    def _entry(self) -> list[tuple[int, int]]:
        """Bounded arguments at their static shapes, a size argument per ``?`` dimension
        and ``set_dimension_size`` for each, before the first op."""
        ir = self.ir
        i32 = ir.IntegerType.get_signless(32)
        first = self.block.operations[0]
        sizes = []
        args = list(self.block.arguments)
        for i, a in enumerate(args):
            if not self._dynamic(a):
                continue
            if i not in self.bounds:
                raise _Unsupported
            t = self._type(a)
            bound = self.bounds[i]
            dyn = [k for k in range(t.rank) if t.is_dynamic_dim(k)]
            if len(bound) != t.rank or any(
                    not t.is_dynamic_dim(k) and t.shape[k] != bound[k] for k in range(t.rank)):
                raise _Unsupported
            a.set_type(ir.RankedTensorType.get(list(bound), t.element_type))
            value, dims = a, [None] * t.rank
            ops = []
            for k in dyn:
                size = self.block.add_argument(ir.RankedTensorType.get([], i32),
                                               ir.Location.unknown())
                sizes.append((i, k))
                dims = dims[:k] + [bound[k]] + dims[k + 1:]
                value = self._set_size(value, size, k, bound, t.element_type, dims,
                                       ir.InsertionPoint(first))
                ops.append(value.owner)
            a.replace_all_uses_with(value)
            ops[0].operands[0] = a
            self.dims[value] = dims
        return sizes

    # -- integer shape arithmetic (intervals) ----------------------------------------

    def _track_ints(self, op) -> None:
        """Record the interval of each element of an integer result of rank <= 1 computed
        from constants and sizes."""
        ir = self.ir
        if len(op.results) != 1:
            return
        r = op.results[0]
        t = self._type(r)
        if t is None or not t.has_static_shape or t.rank > 1 or \
                not isinstance(t.element_type, ir.IntegerType):
            return
        n = 1 if t.rank == 0 else t.shape[0]
        ins = [self.ints.get(v) for v in op.operands]
        name = op.name
        out = None
        if name == "stablehlo.constant":
            attr = ir.DenseIntElementsAttr(op.attributes["value"])
            vals = [attr[0]] * n if attr.is_splat else [attr[k] for k in range(n)]
            out = [(v, v) for v in vals]
        elif name == "stablehlo.get_dimension_size":
            v = op.operands[0]
            k = attrs.get_int(op, "dimension")
            vt = self._type(v)
            if not vt.is_dynamic_dim(k):
                out = [(vt.shape[k], vt.shape[k])]
            elif v in self.dims:
                out = [(0, self.dims[v][k])]
        elif any(x is None for x in ins):
            return
        elif name in ("stablehlo.convert", "stablehlo.reshape") and len(ins[0]) == n:
            out = ins[0]
        elif name == "stablehlo.concatenate":
            out = [x for part in ins for x in part]
        elif name == "stablehlo.slice":
            start = attrs.get_ints(op, "start_indices")
            limit = attrs.get_ints(op, "limit_indices")
            step = attrs.get_ints(op, "strides")
            out = ins[0][start[0]:limit[0]:step[0]]
        elif name in ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply",
                      "stablehlo.maximum", "stablehlo.minimum"):
            out = [_interval(name, a, b) for a, b in zip(ins[0], ins[1])]
        elif name == "stablehlo.negate":
            out = [(-hi, -lo) for lo, hi in ins[0]]
        elif name == "stablehlo.select" and len(ins[1]) == len(ins[2]) == n:
            out = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(ins[1], ins[2])]
        if out is not None and len(out) == n:
            self.ints[r] = out

    def _size_value(self, shape_value, k: int, before):
        """The ``tensor<i32>`` element ``k`` of the 1-D integer ``shape_value``, computed
        before op ``before``."""
        ir = self.ir
        ip = ir.InsertionPoint(before)
        et = self._type(shape_value).element_type
        one = ir.Operation.create(
            "stablehlo.slice", results=[ir.RankedTensorType.get([1], et)],
            operands=[shape_value],
            attributes={"start_indices": ir.DenseI64ArrayAttr.get([k]),
                        "limit_indices": ir.DenseI64ArrayAttr.get([k + 1]),
                        "strides": ir.DenseI64ArrayAttr.get([1])}, ip=ip)
        scalar = ir.Operation.create("stablehlo.reshape",
                                     results=[ir.RankedTensorType.get([], et)],
                                     operands=[one.results[0]], ip=ip)
        i32 = ir.IntegerType.get_signless(32)
        return ir.Operation.create("stablehlo.convert",
                                   results=[ir.RankedTensorType.get([], i32)],
                                   operands=[scalar.results[0]], ip=ip).results[0]

    def _static_then_sized(self, op, make):
        """Replace ``op`` (a shape-taking op with one ``?`` result, its shape operand
        last) by ``make(static_type, ip)`` at the bound and ``set_dimension_size`` for
        each ``?`` dimension, the size read from the shape operand."""
        ir = self.ir
        r = op.results[0]
        t = self._type(r)
        shape_value = op.operands[len(op.operands) - 1]
        box = self.ints.get(shape_value)
        if box is None or len(box) != t.rank:
            raise _Unsupported
        dims = [box[k][1] if t.is_dynamic_dim(k) else None for k in range(t.rank)]
        if any(b is not None and b < 0 for b in dims):
            raise _Unsupported
        static = [b if b is not None else s for s, b in zip(t.shape, dims)]
        ip = ir.InsertionPoint(op)
        value = make(ir.RankedTensorType.get(static, t.element_type), ip)
        so_far = [None] * t.rank
        for k in range(t.rank):
            if dims[k] is None:
                continue
            so_far = so_far[:k] + [dims[k]] + so_far[k + 1:]
            size = self._size_value(shape_value, k, op)
            value = self._set_size(value, size, k, static, t.element_type, so_far, ip)
        self.dims[value] = so_far
        r.replace_all_uses_with(value)
        op.erase()

    # -- rules, one per op ---------------------------------------------------------------

    def _match(self, op, pairs) -> list:
        """Make the operands' dims in each group of ``pairs`` (lists of (operand index,
        dim): dims an op needs equal) the same bound: XLA requires equal bounded shapes.
        Their sizes are equal at run time, so each is at most the smallest bound or static
        size of the group; a dynamic dim with a larger bound is cut to it (``slice`` to
        the smaller bound, then ``set_dimension_size`` with its size). Returns each group's
        bound (None where all are static). A static size above a dynamic dim's bound
        cannot be met: refused."""
        out = []
        for group in pairs:
            sizes = []
            for k, d in group:
                v = op.operands[k]
                b = self._operand_dims(v)[d]
                sizes.append((b, True) if b is not None else (self._type(v).shape[d], False))
            if not any(dyn for _, dyn in sizes):
                out.append(None)
                continue
            least = min(n for n, _ in sizes)
            if any(not dyn and n != least for n, dyn in sizes):
                raise _Unsupported
            for (k, d), (n, dyn) in zip(group, sizes):
                if dyn and n > least:
                    self._cut(op, k, d, least)
            out.append(least)
        return out

    def _cut(self, op, k: int, d: int, bound: int) -> None:
        """Operand ``k`` of ``op`` with dim ``d``'s bound lowered to ``bound``."""
        ir = self.ir
        v = op.operands[k]
        t = self._type(v)
        dims = list(self._operand_dims(v))
        i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        ip = ir.InsertionPoint(op)
        size = ir.Operation.create(
            "stablehlo.get_dimension_size", results=[ir.RankedTensorType.get([], i32)],
            operands=[v], attributes={"dimension": ir.IntegerAttr.get(i64, d)},
            ip=ip).results[0]
        limits = [b if b is not None else s for s, b in zip(t.shape, dims)]
        limits[d] = bound
        sliced_dims = dims[:d] + [None] + dims[d + 1:]
        sliced = ir.Operation.create(
            "stablehlo.slice",
            results=[self._bounded_type(limits, t.element_type, sliced_dims)],
            operands=[v], attributes={
                "start_indices": ir.DenseI64ArrayAttr.get([0] * t.rank),
                "limit_indices": ir.DenseI64ArrayAttr.get(limits),
                "strides": ir.DenseI64ArrayAttr.get([1] * t.rank)}, ip=ip).results[0]
        dims[d] = bound
        value = self._set_size(sliced, size, d, limits, t.element_type, dims, ip)
        self.dims[value] = dims
        op.operands[k] = value

    def _elementwise(self, op) -> None:
        ranks = [self._type(v).rank for v in op.operands]
        for r in op.results:
            rank = self._type(r).rank
            same = [k for k, n in enumerate(ranks) if n == rank]  # (not select's scalar)
            bounds = self._match(op, [[(k, d) for k in same] for d in range(rank)])
            self._set_result(r, bounds)

    def _dot_general(self, op) -> None:
        text = str(op.attributes["dot_dimension_numbers"])

        def field(name):
            m = re.search(name + r" = \[([0-9, ]*)\]", text)
            return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []
        lb, rb = field("lhs_batching_dimensions"), field("rhs_batching_dimensions")
        lc, rc = field("lhs_contracting_dimensions"), field("rhs_contracting_dimensions")
        batch = self._match(op, [[(0, i), (1, j)] for i, j in zip(lb, rb)])
        self._match(op, [[(0, i), (1, j)] for i, j in zip(lc, rc)])
        ld, rd = self._operand_dims(op.operands[0]), self._operand_dims(op.operands[1])
        dims = list(batch)
        dims += [ld[i] for i in range(len(ld)) if i not in lb and i not in lc]
        dims += [rd[i] for i in range(len(rd)) if i not in rb and i not in rc]
        self._set_result(op.results[0], dims)

    def _reduce(self, op) -> None:
        ir = self.ir
        reduced = attrs.get_ints(op, "dimensions")
        n = len(op.results)
        for k, r in enumerate(op.results):
            ds = self._operand_dims(op.operands[k])
            if any(self._dynamic(v) for v in op.operands[n:]):
                raise _Unsupported
            self._set_result(r, [b for i, b in enumerate(ds) if i not in reduced])

    def _transpose(self, op) -> None:
        perm = attrs.get_ints(op, "permutation")
        ds = self._operand_dims(op.operands[0])
        self._set_result(op.results[0], [ds[p] for p in perm])

    def _broadcast_in_dim(self, op) -> None:
        bdims = attrs.get_ints(op, "broadcast_dimensions")
        ds = self._operand_dims(op.operands[0])
        dims = [None] * self._type(op.results[0]).rank
        for i, d in enumerate(bdims):
            dims[d] = ds[i]
        self._set_result(op.results[0], dims)

    def _concatenate(self, op) -> None:
        axis = attrs.get_int(op, "dimension")
        if any(self._operand_dims(v)[axis] is not None for v in op.operands):
            raise _Unsupported  # (along a dynamic dimension: the padding would be inside)
        rank = self._type(op.results[0]).rank
        dims = self._match(op, [[(k, d) for k in range(len(op.operands))] if d != axis
                                else [] for d in range(rank)])
        self._set_result(op.results[0], [None if d == axis else b for d, b in enumerate(dims)])

    def _get_dimension_size(self, op) -> None:
        self._operand_dims(op.operands[0])  # (a bounded operand: its size at run time)

    def _dynamic_broadcast_in_dim(self, op) -> None:
        ir = self.ir
        x = op.operands[0]
        self._operand_dims(x)
        attrs = {"broadcast_dimensions": op.attributes["broadcast_dimensions"]}
        self._static_then_sized(op, lambda t, ip: ir.Operation.create(
            "stablehlo.broadcast_in_dim", results=[t], operands=[x], attributes=attrs,
            ip=ip).results[0])

    def _dynamic_reshape(self, op) -> None:
        ir = self.ir
        x = op.operands[0]
        ds = self._operand_dims(x)
        t = self._type(op.results[0])
        # a reshape that keeps each dynamic dimension whole and in its place among the
        # dimensions after it (splitting or merging only static ones): the padding moves
        # with it, as the padder's reshape rule needs
        xt = self._type(x)
        tail_in = [xt.shape[i] if b is None else -1 for i, b in enumerate(ds)]
        tail_out = [-1 if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank)]
        if _suffix_products(tail_in) != _suffix_products(tail_out):
            raise _Unsupported
        self._static_then_sized(op, lambda t, ip: ir.Operation.create(
            "stablehlo.reshape", results=[t], operands=[x], ip=ip).results[0])

    def _dynamic_iota(self, op) -> None:
        ir = self.ir
        attrs = {"iota_dimension": op.attributes["iota_dimension"]}
        self._static_then_sized(op, lambda t, ip: ir.Operation.create(
            "stablehlo.iota", results=[t], operands=[], attributes=attrs, ip=ip).results[0])


def _interval(name: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """The interval of ``a <op> b`` for intervals ``a``, ``b``."""
    if name == "stablehlo.add":
        return a[0] + b[0], a[1] + b[1]
    if name == "stablehlo.subtract":
        return a[0] - b[1], a[1] - b[0]
    if name == "stablehlo.maximum":
        return max(a[0], b[0]), max(a[1], b[1])
    if name == "stablehlo.minimum":
        return min(a[0], b[0]), min(a[1], b[1])
    corners = [x * y for x in a for y in b]
    return min(corners), max(corners)


def _suffix_products(dims: list[int]) -> list:
    """The markers of where dynamic dimensions (-1) sit among the static ones: for each
    dynamic dimension, the product of the static sizes after it, and the total of the
    static sizes before the first one. Two shapes with the same list lay out their
    dynamic dimensions alike."""
    out, prod = [], 1
    for d in reversed(dims):
        if d == -1:
            out.append(prod)
            prod = 1
        else:
            prod *= d
    out.append(prod)
    return out[::-1]


def argument_bounds(call, padded=()) -> dict | None:
    """The bounds of a region call's symbolic arguments, read from their producers.

    ``call``: a ``func.call`` of an XLA region in ``@computation``; ``padded``: the indices
    of its arguments that are padded results of a bounded region already (not looked at).
    Returns, for every other argument with a ``?`` dimension, its index -> ``(source,
    bound)``: the SSA value it is a prefix slice of (an executor call marked
    ``symbolic.PREFIX_SLICE_ATTR``, whose operand 0 has a static shape) and the static shape
    that bounds it. A ``?`` dimension's bound is the smallest source size among the
    arguments whose size there has the same expression (``symbolic.RESULT_SHAPES_ATTR``):
    they are one size at run time, and XLA's elementwise ops need equal bounds. None where
    an argument with a ``?`` dimension is anything else (an input of symbolic size: no
    bound)."""
    from torch_mlir import ir

    from thunder_mlir.ir import symbolic

    found = {}
    for i, v in enumerate(call.operands):
        t = ir.RankedTensorType(v.type)
        if t.has_static_shape or i in padded:
            continue
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.name != "thunder.executor_call" or \
                symbolic.PREFIX_SLICE_ATTR not in owner.attributes or \
                symbolic.RESULT_SHAPES_ATTR not in owner.attributes:
            return None
        owner = owner.operation
        source = owner.operands[0]
        st = ir.RankedTensorType(source.type)
        k = next(j for j, r in enumerate(owner.results) if r == v)
        exprs = [ir.StringAttr(e).value for e in
                 ir.ArrayAttr(ir.ArrayAttr(owner.attributes[symbolic.RESULT_SHAPES_ATTR])[k])]
        if k != 0 or not st.has_static_shape or st.rank != t.rank:
            return None
        found[i] = (source, exprs, list(st.shape))
    least: dict[str, int] = {}
    for _, exprs, shape in found.values():
        for e, n in zip(exprs, shape):
            least[e] = min(least.get(e, n), n)
    return {i: (source, tuple(least[e] if not ir.RankedTensorType(
                call.operands[i].type).is_static_dim(d) else shape[d]
                for d, e in enumerate(exprs)))
            for i, (source, exprs, shape) in found.items()}


def bounded_arguments(bounds: list[tuple[int, ...]], sizes: list[tuple[int, int]]):
    """The run-time step that feeds a bounded region (torch tensors in and out): called as
    ``fn(*slices, *sources)`` with each bounded argument's slice (as eager computed it) and
    the tensor it was sliced from, it returns each source cut to its bound (a view where the
    bound is the source's shape, made contiguous for DLPack), then one int32 scalar tensor per
    ``sizes`` entry ``(k, dim)``: slice k's size at ``dim``. ``bounds``: per bounded
    argument, its bound shape."""
    import torch

    n = len(bounds)
    cuts = [tuple(slice(0, b) for b in bound) for bound in bounds]

    def run(*tensors):
        slices, sources = tensors[:n], tensors[n:]
        out = [s[cut].contiguous() for s, cut in zip(sources, cuts)]
        out += [torch.tensor(slices[k].shape[d], dtype=torch.int32, device=slices[k].device)
                for k, d in sizes]
        return out
    return run


def unpadded(dims: list[int]):
    """The run-time step that gives a bounded region's padded result its size (torch
    tensors in and out): called as ``fn(padded, *sizes)`` with one int32 scalar per entry of
    ``dims`` (the result's ``?`` dimensions), it returns ``[padded[..., :size, ...]]``, a
    view of the first ``size`` entries along each."""
    def run(padded, *sizes):
        index = [slice(None)] * padded.dim()
        for d, n in zip(dims, sizes):
            index[d] = slice(0, int(n))
        return [padded[tuple(index)]]
    return run
