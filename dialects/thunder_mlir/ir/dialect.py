"""The ``thunder`` MLIR dialect, defined in Python through ``torch_mlir.dialects.ext`` (IRDL).

Three kinds of ops:

* **prims** — a small closed set with exact semantics: no implicit broadcasting or type
  promotion (operands already have the shapes and element types the op needs). Every prim
  lowers 1:n to StableHLO/CHLO. Their op classes are generated from their ``PrimDef``
  (``primdef.py``; the definitions are in ``prim_defs.py``), not written here.
* **composites** — ``thunder.composite`` records one torch-level symbol call
  (``ltorch.softmax``): its name, its non-tensor arguments as discardable attributes, its
  tensor arguments as operands and its decomposition into prims (or nested composites) as
  a single-block region whose block arguments are the operands. ``decompose`` inlines it.
* **structure** — ``thunder.executor_call`` (an op an executor runs in Python, e.g. the
  ``torch`` fallback) and ``thunder.yield`` (the region terminator).

Representation choice for mixed-type variadics. IRDL binds every element of one variadic
field to a single type variable (toolchain.md §1), so ``composite(tensor<2xf32>,
tensor<3xi64>)`` cannot verify with one ``Sequence[Operand]`` field. Instead, ops that take
a list of arbitrarily typed tensors declare ``SEGMENTS`` variadic fields ``in0..in7`` (and
``out0..out7``); a list is stored as consecutive *runs* of equal type, one run per field,
recorded in ``operandSegmentSizes``. Any list with at most ``SEGMENTS`` type runs fits
(``cat`` of 100 same-shaped tensors is one run). ``pack_runs``/``flat_operands`` convert
between a flat list and the fields. This keeps one registered, verifiable op per concept
— no unregistered namespaces and no ops generated per symbol — at the price of zero-sized
segments in the generic printed form.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Sequence
from typing import Any

from torch_mlir import ir
from torch_mlir.dialects import ext
from torch_mlir.dialects.ext import Operand, Result

Tensor = ir.RankedTensorType
SEGMENTS = 8


class Thunder(ext.Dialect, name="thunder"):
    """The thunder dialect. Load into a context with :func:`load_dialect`."""


class I64Array(ir.DenseI64ArrayAttr):
    """``array<i64: ...>`` attribute usable as an IRDL field (toolchain.md §1 workaround)."""

    attr_name = "builtin.dense_array"

    def __bool__(self) -> bool:
        # ext's generated builders drop falsy attributes (`if attr:`), and an empty array
        # has len 0; an empty dims list is still a value.
        return True

    @classmethod
    def of(cls, values) -> "I64Array":
        """``array<i64: values...>`` (may be empty)."""
        return cls(ir.DenseI64ArrayAttr.get([int(v) for v in values]))


def bind_directly(cls: type) -> type:
    """Give the op class ``cls`` (a named ``ext.Operation`` subclass) a builder that maps its
    arguments to its fields directly, in place of the one ``ext`` generates, which binds
    them with ``inspect.Signature.bind`` and ``apply_defaults`` (17 us of a binary prim's
    build, 49 us of a composite's; tracing builds every op, under the sharp-edge monitor's
    hooks, frontend/sharp_edges.py, which each Python call of the binding wakes). Same call
    semantics as ext's builder (torch_mlir/dialects/ext.py ``_generate_init_method``):
    positional arguments fill the positional-or-keyword fields in order, keywords name
    fields, keyword-only fields with a default and ``loc``/``ip`` default to None, and the
    op is built from the fields by the same processing (``process_type``,
    ``process_attr``). Any other call (too many positional arguments, an unknown, repeated
    or missing argument) goes to ext's builder, which raises its TypeError. Returns
    ``cls``."""
    slow = cls.__init__
    sig = slow.__signature__
    params = list(sig.parameters.values())[1:]  # (after self)
    positional = tuple(p.name for p in params
                       if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = frozenset(p.name for p in params)
    required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    operands, attrs, results, regions = ext.partition_fields(cls._fields)
    operand_names = tuple(o.name for o in operands)
    n_regions = len(regions) or None

    def __init__(self, *args, **kwargs):
        if len(args) > len(positional):
            return slow(self, *args, **kwargs)
        bound = dict(defaults)
        for n, v in zip(positional, args):
            bound[n] = v
        for k, v in kwargs.items():
            if k not in names or (k in bound and k not in defaults):
                return slow(self, *args, **kwargs)
            bound[k] = v
        if not required.issubset(bound):
            return slow(self, *args, **kwargs)
        super(ext.Operation, self).__init__(
            self.OPERATION_NAME, self._ODS_REGIONS, self._ODS_OPERAND_SEGMENTS,
            self._ODS_RESULT_SEGMENTS,
            attributes={a.name: a.process_attr(bound[a.name]) for a in attrs},
            results=[r.process_type(bound[r.name]) for r in results],
            operands=[bound[n] for n in operand_names], successors=None,
            regions=n_regions, loc=bound["loc"], ip=bound["ip"])

    __init__.__signature__ = sig
    cls.__init__ = __init__
    return cls


# --------------------------------------------------------------------------- prims
# The prim ops are generated from their definitions (``primdef.PrimDef``, all of them in
# ``prim_defs.py``).

# rng_bits: a stream's ThreeFry counters start at stream << RNG_STREAM_SHIFT, so each of
# up to 2^24 streams owns 2^40 counters (2^41 32-bit words) that no other stream reads.
RNG_STREAM_SHIFT = 40
# the function attribute naming the program's seed argument (its index; frontend/rng.py)
SEED_ATTR = "thunder.rng_seed"


def _segmented(prefix: str, kind) -> dict[str, Any]:
    return {f"{prefix}{i}": Sequence[kind[Tensor]] for i in range(SEGMENTS)}


# ---------------------------------------------------------------------- structure
@bind_directly
class CompositeOp(Thunder.Operation, name="composite"):
    """A torch-level symbol call with its decomposition as a region.

    Operands: the symbol's tensor arguments in call order (as type runs). Results: its
    tensor outputs. Attributes: ``name`` (e.g. ``"ltorch.softmax"``) plus one discardable
    attribute per non-tensor argument. Region: one block with one argument per operand,
    terminated by ``thunder.yield`` of the results.
    """

    __annotations__ = {**_segmented("in", Operand), **_segmented("out", Result),
                       "name": ir.StringAttr, "body": ext.Region}


@bind_directly
class ExecutorCallOp(Thunder.Operation, name="executor_call"):
    """A call into an executor's Python implementation (e.g. ``torch`` fallback).

    Attributes: ``executor`` (``"torch"``), ``callee`` (the symbol's qualified name, for
    reading), ``impl`` (the implementation's symbol, ``@torch.cumprod`` or
    ``@conftest.cumprod$3``: ir/implementations.py). A torch fallback call whose non-tensor
    arguments are plain values also carries them (``thunder.torch_call``), so any process
    rebuilds it from the IR (frontend/torch_fallback.py, ``implementation_of``).
    Not ``Pure``: an executor may have effects, so CSE/DCE leave it alone.
    """

    __annotations__ = {**_segmented("in", Operand), **_segmented("out", Result),
                       "executor": ir.StringAttr, "callee": ir.StringAttr,
                       "impl": ir.FlatSymbolRefAttr}


@bind_directly
class YieldOp(Thunder.Operation, name="yield", traits=[ir.IsTerminatorTrait]):
    """Terminator of composite regions: the values the region produces."""

    __annotations__ = _segmented("in", Operand)


# ------------------------------------------------------------- higher-order ops
# Control-flow regions capture the values they read from above (as scf.if and stablehlo.if
# do) instead of taking them as operands: a branch or a checkpointed block may read many
# tensors of distinct types (a layer's weights), more than SEGMENTS type runs could carry,
# and the lowering targets capture from above too. Only loop-carried values, which change
# per iteration, are operands and block arguments. Each region has one block ending in
# ``thunder.yield``. docs/region_ops.md says what a transform must do with them.
@bind_directly
class CondOp(Thunder.Operation, name="cond"):
    """``torch.cond`` with a tensor predicate: runs ``then_region`` if ``pred`` (a
    ``tensor<i1>``) is true, else ``else_region``; both yield values of the result types.
    Lowers to ``stablehlo.if`` (StableHLO spec, "if")."""

    __annotations__ = {"pred": Operand[Tensor], **_segmented("out", Result),
                       "then_region": ext.Region, "else_region": ext.Region}


@bind_directly
class WhileOp(Thunder.Operation, name="while"):
    """``torch._higher_order_ops.while_loop``: the carried operands (as type runs) are
    the block arguments of ``cond_region`` (yields a ``tensor<i1>``: continue?) and of
    ``body_region`` (yields the next carried values); the results are the carried values
    when ``cond_region`` yields false. Lowers to ``stablehlo.while`` (StableHLO spec,
    "while"). A discardable ``origin`` attribute names the torch operator it came from
    (``while_loop`` or ``scan``) for messages."""

    __annotations__ = {**_segmented("in", Operand), **_segmented("out", Result),
                       "cond_region": ext.Region, "body_region": ext.Region}


@bind_directly
class CheckpointOp(Thunder.Operation, name="checkpoint"):
    """``torch.utils.checkpoint.checkpoint``: the ops of ``body``, whose intermediates the
    ``grad`` pass does not save for the backward but recomputes there. Results are the
    values of the body used after it. ``decompose`` inlines it."""

    __annotations__ = {**_segmented("out", Result), "body": ext.Region}


REGION_OPS = ("thunder.cond", "thunder.while", "thunder.checkpoint")
OPS_WITH_RUNS = ("concatenate", "composite", "executor_call", "yield", "cond", "while",
                 "checkpoint")


# ------------------------------------------------------------------- type runs
def pack_runs(values: Sequence[Any], type_of=lambda v: v.type) -> list[list[Any]] | None:
    """Split ``values`` into ``SEGMENTS`` lists of consecutive equal-typed items.

    Returns None when the values need more than ``SEGMENTS`` runs. ``type_of`` maps an
    item to its MLIR type (values by default; pass ``lambda t: t`` for types).
    """
    runs: list[list[Any]] = []
    for v in values:
        if runs and type_of(runs[-1][-1]) == type_of(v):
            runs[-1].append(v)
        else:
            runs.append([v])
    if len(runs) > SEGMENTS:
        return None
    return runs + [[] for _ in range(SEGMENTS - len(runs))]


def segment_kwargs(prefix: str, values: Sequence[Any], type_of=lambda v: v.type) -> dict:
    """``{prefix0: run0, ...}`` for an op builder; raises ValueError past SEGMENTS runs."""
    runs = pack_runs(values, type_of)
    if runs is None:
        raise ValueError(f"more than {SEGMENTS} runs of distinct tensor types")
    return {f"{prefix}{i}": r for i, r in enumerate(runs)}


def fits_in_runs(types: Sequence[ir.Type]) -> bool:
    """Whether a list of types fits into the segmented fields."""
    return pack_runs(types, lambda t: t) is not None


def load_dialect(context: ir.Context | None = None) -> None:
    """Load ``thunder`` into ``context`` (the current one by default), once per context.

    Also registers StableHLO, which the lowering targets, and allows unregistered ops so that
    CHLO ops (which this torch-mlir build does not register) can be emitted for XLA, which
    parses them itself.
    """
    from torch_mlir._mlir_libs import _stablehlo

    ctx = context or ir.Context.current
    if ctx in _LOADED:
        return
    with ctx:
        Thunder.load()
        _register_dense_elements_caster()
    _stablehlo.register_dialect(ctx)
    _provide_namespace_modules()
    ctx.allow_unregistered_dialects = True
    _LOADED.append(ctx)


def _dense_elements_caster(attr: ir.Attribute) -> ir.Attribute:
    element = ir.ShapedType(attr.type).element_type
    if isinstance(element, ir.IntegerType):
        return ir.DenseIntElementsAttr(attr)
    if isinstance(element, ir.ComplexType):
        return ir.DenseElementsAttr(attr)
    return ir.DenseFPElementsAttr(attr)


def _register_dense_elements_caster() -> None:
    """Make reading a complex ``dense<...>`` attribute give a ``DenseElementsAttr``.

    The bindings' own downcast of dense elements knows integer and float element types
    only: reading a complex constant's ``value`` raises ``TypeError: Can't cast unknown
    element type`` (and aborts the process when it happens inside an attribute iterator).
    The caster is process-wide and keyed by the attribute's TypeID; registering it again
    replaces it.
    """
    import numpy as np

    with ir.Location.unknown():
        probe = ir.DenseElementsAttr.get(
            np.zeros(1, np.complex64), type=ir.RankedTensorType.get(
                [1], ir.ComplexType.get(ir.F32Type.get())))
    ir.register_type_caster(probe.typeid, replace=True)(_dense_elements_caster)


# Dialect namespaces whose ops reach Python but that have no Python module under
# ``torch_mlir.dialects``: ``thunder`` (defined here through ext.Dialect) and the StableHLO
# and CHLO ops the lowering emits (this torch-mlir ships no Python module for them).
_MODULELESS_NAMESPACES = ("thunder", "stablehlo", "chlo")
_NAMESPACE_PACKAGE = "thunder_mlir.ir.dialect_namespaces"


def _provide_namespace_modules() -> None:
    """Give each namespace of ``_MODULELESS_NAMESPACES`` an (empty) Python module, under a
    dialect search prefix of the MLIR bindings, once per process.

    Every time an op is handed to Python (iterating a block, a value's owner), the bindings
    look up its OpView class through ``PyGlobals::loadDialectModule`` (MLIR's
    ``IRModule.cpp``), which imports ``<prefix>.<namespace>`` for each search prefix and
    remembers only a success. With no module to find, each wrap of a ``thunder`` op re-ran
    a failing import through every ``sys.path`` entry, ~35 us: MiniLM's first compile
    wrapped ~6900 ops, 0.3-0.6 s. The module found makes the lookup a set hit (~0.7 us); the
    OpView classes themselves are unchanged (ext.Dialect registers thunder's; the others
    have none and stay generic OpViews).
    """
    if _NAMESPACE_PACKAGE in sys.modules:
        return
    from torch_mlir._mlir_libs import _mlir

    package = types.ModuleType(_NAMESPACE_PACKAGE, _provide_namespace_modules.__doc__)
    package.__path__ = []
    for ns in _MODULELESS_NAMESPACES:
        sys.modules[f"{_NAMESPACE_PACKAGE}.{ns}"] = types.ModuleType(f"{_NAMESPACE_PACKAGE}.{ns}")
    sys.modules[_NAMESPACE_PACKAGE] = package
    _mlir.globals.append_dialect_search_prefix(_NAMESPACE_PACKAGE)


_LOADED: list[ir.Context] = []  # contexts are long-lived; a list keeps them alive too
