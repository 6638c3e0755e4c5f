"""Fused projections under tensor parallelism: a weight whose output features concatenate
equal parts (GPT-2's ``c_attn``: q, k and v in one Conv1D, weight ``(E, 3E)``).

Megatron's column-parallel layout gives each device its own heads of q, of k and of v
(Shoeybi et al. 2019, §3). On the fused ``(E, 3E)`` weight those columns are not one
contiguous block per device, so no GSPMD tile sharding of it (or of the ``(..., 3E)``
projection output) expresses that layout; split in 4 contiguous column blocks, the q/k/v
split then needs collective-permutes. ``Fused(parts, spec)`` in a ``tp_plan`` keeps the
parameter on the devices in the shape ``(..., parts, 3E / parts)`` (a row-major reshape:
the same elements) with ``spec``'s last entry on the last dimension, and
``split_fused_projections`` rewrites the traced ``addmm(bias, x, W.reshape(E, 3E))``
followed by the split into its parts as one ``dot_general`` on the ``(E, parts, N)``
weight and slices of the ``parts`` dimension: every output element is the same dot
product plus the same bias element as before, and the head dimension stays sharded, so
XLA's partitioner needs no resharding. ``state_dict`` reshapes the parameter back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch_mlir import ir

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.ir import sharding
from thunder_mlir.ir.primdef import PRIMS
from thunder_mlir.transforms.registry import ModulePass, PassContext, register_pass

from thunder_mlir.distributed.mesh import normalize_spec


@dataclass(frozen=True)
class Fused:
    """A ``tp_plan`` value for a tensor whose LAST dimension concatenates ``parts`` equal
    parts (q, k, v: ``parts=3``), each split as ``spec`` says: ``spec`` has one entry per
    dimension of the tensor as the model holds it (an axis name, a tuple of axis names or
    None; shorter means trailing dims replicated), the last entry applying to every part.
    GPT-2: ``{"*.c_attn.weight": Fused(3, (None, "model")), "*.c_attn.bias": Fused(3,
    ("model",))}`` gives each device whole heads of q, k and v (Megatron's layout).

    On the devices the tensor is held as ``shape[:-1] + (parts, shape[-1] // parts)``;
    ``state_dict()`` returns the model's shape. Raises UnsupportedInputError when the last
    dimension does not divide into ``parts``."""

    parts: int
    spec: tuple = ()

    def stored_shape(self, shape) -> tuple[int, ...]:
        """The shape the devices hold: the last dimension split into (parts, rest)."""
        shape = tuple(shape)
        if not shape or self.parts < 1 or shape[-1] % self.parts:
            raise UnsupportedInputError(
                f"Fused({self.parts}, ...): the last dimension of a tensor of shape {shape} "
                f"does not split into {self.parts} equal parts")
        return shape[:-1] + (self.parts, shape[-1] // self.parts)

    def stored_spec(self, rank: int) -> sharding.Spec:
        """The sharding of the stored tensor (rank ``rank + 1``): the parts dimension
        replicated, the others as ``spec``."""
        s = normalize_spec(self.spec, rank)
        return s[:-1] + ((),) + s[-1:]


# ----------------------------------------------------------------- the program rewrite
_PLAIN_ATTRS = {"name", "operandSegmentSizes", "operand_names", "resultSegmentSizes"}


def _name(op) -> str | None:
    if op is None or op.name != "thunder.composite":
        return None
    return ir.StringAttr(op.attributes["name"]).value


def _owner(v) -> ir.Operation | None:
    """The operation defining ``v`` (None for a block argument). As an ``Operation``: the
    ``OpView`` of a composite has a ``name`` field of its own."""
    return None if isinstance(v.owner, ir.Block) else v.owner.operation


def _shape(v) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def _inner(op) -> list:
    return [o.operation for o in op.regions[0].blocks[0].operations][:-1]


def _uses(func_op) -> dict:
    """{value: number of operands using it} over every op of ``func_op`` (regions too)."""
    count: dict = {}

    def visit(op):
        for v in op.operands:
            count[v] = count.get(v, 0) + 1
        for r in op.regions:
            for b in r.blocks:
                for o in b.operations:
                    visit(o.operation)
    visit(func_op)
    return count


def _unfused_source(v, parts: int):
    """The ``(..., parts, N)`` value that ``v`` (``(..., parts * N)``) is a reshape of,
    or None."""
    d = _owner(v)
    if _name(d) not in ("ltorch.reshape", "ltorch.view") and \
            (d is None or d.name != "thunder.reshape"):
        return None
    src = d.operands[0]
    s, t = _shape(src), _shape(v)
    if len(s) != len(t) + 1 or s[:-2] != t[:-1] or s[-2] != parts or s[-2] * s[-1] != t[-1]:
        return None
    return src


def _split_parts(op, shape) -> int | None:
    """The number of equal parts ``op`` (an ``ltorch.split`` composite) cuts its operand's
    last dimension into, in order, when its region is exactly those slices; else None."""
    if _name(op) != "ltorch.split":
        return None
    inner = _inner(op)
    k = len(op.results)
    if k < 2 or shape[-1] % k or len(inner) != k:
        return None
    n = shape[-1] // k
    yielded = list(list(op.regions[0].blocks[0].operations)[-1].operation.operands)
    arg = op.regions[0].blocks[0].arguments[0]
    for j, s in enumerate(inner):
        if s.name != "thunder.slice" or s.operands[0] != arg or yielded[j] != s.results[0]:
            return None
        start = list(ir.DenseI64ArrayAttr(s.attributes["start_indices"]))
        limit = list(ir.DenseI64ArrayAttr(s.attributes["limit_indices"]))
        strides = list(ir.DenseI64ArrayAttr(s.attributes["strides"]))
        if start != [0] * (len(shape) - 1) + [j * n] or strides != [1] * len(shape) or \
                limit != shape[:-1] + [(j + 1) * n]:
            return None
    return k


def _emit(name, operands, shape, elem, **attrs):
    p = PRIMS[name]
    kw = {a: p.encode(a, v) for a, v in attrs.items()}
    return p.op(*operands, **kw, result=ir.RankedTensorType.get(shape, elem)).result


def split_fused_projections(func_op) -> int:
    """Rewrite, in the top-level block of ``func_op`` (a traced loss, before ``grad``),
    each ``y = addmm(bias, x, W)`` (no alpha/beta) whose weight ``W`` is a reshape of a
    ``(E, k, N)`` value ``W3`` and whose only use is ``y.view(..., k * N).split(N, -1)``
    into ``y3 = x @ W3 + bias.reshape(k, N)`` (a ``dot_general`` to ``(M, k, N)``) and
    part ``j`` = ``y3[:, j].reshape(..., N)``. Same elements, same sums; the ``(..., k *
    N)`` tensors, which no tile sharding can give Megatron's layout, are gone. Returns the
    number of projections rewritten."""
    block = func_op.regions[0].blocks[0]
    uses = _uses(func_op)
    done = 0
    # the candidates first: the loop erases ops (never another candidate), and an erased
    # op must not be looked at again
    addmms = [o.operation for o in block.operations if _name(o.operation) == "ltorch.addmm"]
    for op in addmms:
        if set(op.attributes) - _PLAIN_ATTRS:
            continue
        bias, x, w = op.operands
        y = op.results[0]
        if uses.get(y, 0) != 1 or len(_shape(x)) != 2 or len(_shape(w)) != 2:
            continue
        view = next((o.operation for o in block.operations
                     if y in list(o.operation.operands)), None)
        if _name(view) not in ("ltorch.reshape", "ltorch.view") or \
                uses.get(view.results[0], 0) != 1:
            continue
        vshape = _shape(view.results[0])
        if vshape[-1] != _shape(y)[-1]:
            continue
        split = next((o.operation for o in block.operations
                      if view.results[0] in list(o.operation.operands)), None)
        k = _split_parts(split, vshape) if split is not None else None
        w3 = _unfused_source(w, k) if k else None
        if w3 is None:
            continue
        e, _, n = _shape(w3)
        m = _shape(x)[0]
        elem = ir.RankedTensorType(y.type).element_type
        if _shape(bias) != [k * n] or any(ir.RankedTensorType(v.type).element_type != elem
                                          for v in (bias, x, w3)):
            continue  # a broadcast bias or mixed dtypes: addmm's composite does more
        with ir.InsertionPoint(split), split.location:
            b3 = _unfused_source(bias, k)
            if b3 is None:
                b3 = _emit("reshape", [bias], [k, n], elem)
            y3 = _emit("dot_general", [x, w3], [m, k, n], elem, lhs_batching_dimensions=[],
                       rhs_batching_dimensions=[], lhs_contracting_dimensions=[1],
                       rhs_contracting_dimensions=[0])
            bb = _emit("broadcast_in_dim", [b3], [m, k, n], elem,
                       broadcast_dimensions=[1, 2])
            y3 = _emit("add", [bb, y3], [m, k, n], elem)
            for j, r in enumerate(split.results):
                part = _emit("slice", [y3], [m, 1, n], elem, start_indices=[0, j, 0],
                             limit_indices=[m, j + 1, n], strides=[1, 1, 1])
                r.replace_all_uses_with(_emit("reshape", [part], vshape[:-1] + [n], elem))
        for dead in (split, view, op):
            dead.erase()
        for v in (w, bias):  # the reshapes of the stored parts, when now unused
            d = _owner(v)
            if d is not None and _unfused_source(v, k) is not None and \
                    uses.get(v, 0) == 1:
                d.erase()
        done += 1
    return done


@register_pass
@dataclass(frozen=True)
class SplitFusedProjections(ModulePass):
    """``split-fused-projections``: ``split_fused_projections`` on every function of the
    module (the ``split-fused`` stage of a distributed step with ``Fused`` parameters)."""

    name: ClassVar[str] = "split-fused-projections"
    summary: ClassVar[str] = "compute a fused projection that is split into its parts on " \
        "the (..., parts, N) weight"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        with module.context, ir.Location.unknown():
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    split_fused_projections(op.operation)
