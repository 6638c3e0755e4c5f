"""``PrimDef``: everything about one ``thunder`` prim, defined once.

In the spirit of a JAX ``Primitive`` (``jax._src.core.Primitive`` with its abstract
evaluation, lowering and differentiation rules registered together), a ``PrimDef`` holds
a prim's

* name and fields: its operands and attributes (with their attribute kinds), from which
  the IRDL op class of the ``thunder`` dialect is generated (``PrimDef.op``);
* ``infer``: shape and dtype inference, ``(operands, attrs, result) -> TensorSpec``; it
  raises ``ValueError("prim: ...")`` on operands the prim does not accept. It is the
  check of the prim's builder (``prims.py`` builds through ``bind``) and the op's
  verifier (``verify_prim_ops``, which ``thunder-opt`` runs on every module);
* ``lower``: the StableHLO lowering, a target op name for a 1:1 lowering
  (``"stablehlo.exponential"``) or a pattern ``(op, operands, rewriter) -> None``;
* its differentiation: ``vjp``, a rule ``(op, x, y, g) -> cotangents`` (``backprop.py``
  documents the convention), or ``no_grad``, the reason the prim has no gradient
  (integer or boolean results, constants); ``TorchAutogradVJP`` names a torch function
  whose autograd gives the gradient;
* flags: ``cheap`` (the ``grad`` pass recomputes the op in the backward rather than saving
  its result: rematerialization), ``elementwise`` (an executor may claim it per element).

The definitions are in ``prim_defs.py``; ``PRIMS`` maps a name to its ``PrimDef`` and
``PRIM_OPS`` to its op class, the views other modules read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch
from torch_mlir import ir
from torch_mlir.dialects import ext
from torch_mlir.dialects.ext import Operand, Result

from thunder_mlir.ir import attrs, dtypes
from thunder_mlir.ir.dialect import SEGMENTS, I64Array, Tensor, Thunder, bind_directly


class TensorSpec(NamedTuple):
    """The abstract value of a tensor: its static shape and torch dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype


# Attribute kinds of a prim's fields: the Python value a builder passes and the MLIR
# attribute the op stores.
INTS = "ints"      # list[int] <-> array<i64: ...> (I64Array)
INT = "int"        # int <-> i64 IntegerAttr
STR = "str"        # str <-> StringAttr
NUMBER = "number"  # int | float <-> i64 IntegerAttr | f64 FloatAttr
_FIELD_TYPES = {INTS: I64Array, INT: ir.IntegerAttr, STR: ir.StringAttr,
                NUMBER: ir.IntegerAttr | ir.FloatAttr}


@dataclass(frozen=True)
class TorchAutogradVJP:
    """A VJP computed by ``torch.autograd`` through the torch function ``fn`` (named
    ``qualname``) on the torch executor (``transforms/torch_vjp.py``): for a prim whose
    derivative no prim computes."""

    qualname: str
    fn: Callable


@dataclass(frozen=True)
class GradNotImplemented:
    """What a VJP rule returns for an operand eager PyTorch does not differentiate: the
    ``message`` its autograd raises (``"the derivative for 'zeta' is not implemented."``),
    which the backward raises when it runs, and the ``cotangent`` passed on meanwhile (so
    the backward keeps its structure; None for none)."""

    message: str
    cotangent: Any = None


Rule = Callable[..., list]


@dataclass(eq=False)
class PrimDef:
    """One prim's definition (see the module docstring).

    ``operands``: operand field names, in order; ``variadic``: the operands are one list
    stored as type runs in ``SEGMENTS`` fields ``in0..in7`` (``dialect.py``).
    ``attributes``: field name -> kind (``INTS``, ``INT``, ``STR``, ``NUMBER``).
    ``results``: result field names (one result, ``result``, unless a prim computes
    several values at once, such as fused attention's output and its row statistics);
    with several, ``infer`` returns one ``TensorSpec`` per result and prims are built
    with ``prims.bind_many``.
    Exactly one of ``vjp`` and ``no_grad`` is set.
    """

    name: str
    operands: tuple[str, ...]
    infer: Callable[..., TensorSpec]
    lower: str | Callable
    vjp: Rule | TorchAutogradVJP | None = None
    no_grad: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    variadic: bool = False
    results: tuple[str, ...] = ("result",)
    cheap: bool = False
    elementwise: bool = False
    doc: str = ""
    op: type = field(init=False, repr=False)

    def __post_init__(self):
        if (self.vjp is None) == (self.no_grad is None):
            raise ValueError(f"PrimDef {self.name}: give exactly one of vjp and no_grad")
        self.op = _make_op(self)

    # ------------------------------------------------------------- attributes
    def encode(self, name: str, value: Any) -> ir.Attribute:
        """The MLIR attribute of field ``name`` holding the Python ``value``."""
        if isinstance(value, ir.Attribute):
            return value
        kind = self.attributes[name]
        if kind == INTS:
            return I64Array.of(value)
        if kind == STR:
            return ir.StringAttr.get(value)
        if kind == NUMBER and isinstance(value, float):
            return ir.FloatAttr.get_f64(value)
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))

    def decode(self, op) -> dict[str, Any]:
        """The Python values of ``op``'s attribute fields (those absent are left out)."""
        out = {}
        for name, kind in self.attributes.items():
            if name not in op.attributes:
                continue
            a = op.attributes[name]
            if kind == INTS:
                out[name] = list(ir.DenseI64ArrayAttr(a))
            elif kind == STR:
                out[name] = ir.StringAttr(a).value
            else:
                out[name] = attrs.to_python(a)  # (NUMBER: float or int, as recorded)
        return out

    # -------------------------------------------------------------- inference
    def infer_op(self, op) -> TensorSpec | tuple[TensorSpec, ...]:
        """Inference on a parsed or built op: its operand types and attributes (and its
        result type, for prims whose result is a parameter). Raises ValueError."""
        operands = [spec_of(v.type) for v in op.operands]
        return self.infer(operands, self.decode(op), spec_of(op.results[0].type))


def spec_of(t: ir.Type) -> TensorSpec:
    """The ``TensorSpec`` of a ranked tensor type."""
    return TensorSpec(dtypes.shape_of(t), dtypes.torch_dtype(t))


def _make_op(p: PrimDef) -> type:
    """The IRDL op class ``thunder.<name>``: operand fields, attribute fields, the results
    (each a field of its own: their types may differ)."""
    fields: dict[str, Any] = {}
    if p.variadic:
        fields.update({f"in{i}": Sequence[Operand[Tensor]] for i in range(SEGMENTS)})
    else:
        fields.update({n: Operand[Tensor] for n in p.operands})
    fields.update({n: _FIELD_TYPES[k] for n, k in p.attributes.items()})
    fields.update({n: Result[Tensor] for n in p.results})
    cls_name = "".join(s.capitalize() for s in p.name.split("_")) + "Op"
    ns = {"__annotations__": fields, "__module__": __name__,
          "__doc__": f"thunder.{p.name}: {p.doc or 'see prim_defs.py'}"}
    return bind_directly(type(cls_name, (Thunder.Operation,), ns, name=p.name,
                              traits=[ext.Pure]))


PRIMS: dict[str, PrimDef] = {}
PRIM_OPS: dict[str, type] = {}


def define(name: str, operands: tuple[str, ...] | list[str], infer, lower, **kw) -> PrimDef:
    """Create the ``PrimDef`` of prim ``name`` and register it (and its op class) in
    ``PRIMS`` and ``PRIM_OPS``. Raises ValueError for a name defined twice."""
    if name in PRIMS:
        raise ValueError(f"prim {name} defined twice")
    p = PrimDef(name, tuple(operands), infer, lower, **kw)
    PRIMS[name] = p
    PRIM_OPS[name] = p.op
    return p


def check(cond: bool, msg: str) -> None:
    """Raise ``ValueError("prim: <msg>")`` unless ``cond`` (the inference rules' check)."""
    if not cond:
        raise ValueError(f"prim: {msg}")


# ------------------------------------------------------------------- verifier
def _has_dynamic_type(op) -> bool:
    """An op with a ``?`` dimension (symbolic sizes, ir/symbolic.py): its sizes are
    expressions the tracer checked (``thunder.shape``), not integers ``infer`` can check."""
    return any(isinstance(v.type, ir.RankedTensorType) and
               not ir.RankedTensorType(v.type).has_static_shape
               for v in list(op.operands) + list(op.results))


def verify_prim_ops(root) -> list[tuple[ir.Location, str]]:
    """Check every ``thunder`` prim op nested in ``root`` (an operation) against its
    ``PrimDef.infer``: the operands must be accepted and the result type must be the
    inferred one. Returns one ``(location, message)`` per bad op, the message worded as
    MLIR's own verifier words them (``'thunder.add' op ...``); empty when all verify."""
    errors: list[tuple[ir.Location, str]] = []

    def visit(op):
        op = op.operation
        name = op.name
        short = name[len("thunder."):]
        if name.startswith("thunder.") and short in PRIMS and not _has_dynamic_type(op):
            try:
                wants = PRIMS[short].infer_op(op)
                wants = [wants] if isinstance(wants, TensorSpec) else list(wants)
                for want, result in zip(wants, op.results):
                    got = spec_of(result.type)
                    if tuple(want.shape) != got.shape or want.dtype != got.dtype:
                        with op.location:
                            inferred = dtypes.tensor_type(want.shape, want.dtype)
                        raise ValueError(f"result type {result.type} differs from the "
                                         f"inferred {inferred}")
            except (ValueError, KeyError, IndexError) as e:
                msg = str(e).removeprefix("prim: ").removeprefix(f"{short}: ")
                types = ", ".join(str(v.type) for v in op.operands)
                errors.append((op.location, f"'{name}' op {msg} (operands: {types}; "
                                            f"result: {op.results[0].type})"))
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return errors
