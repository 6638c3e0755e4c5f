"""Symbols: torch-level operations recorded as ``thunder.composite`` ops.

A ``Symbol`` pairs a name (``ltorch.softmax``) with a Python decomposition written in
terms of prims and other symbols. Calling it while tracing records one composite whose
region is the decomposition traced with fresh proxies for the block arguments — Thunder's
``torch.softmax`` → ``ltorch.softmax`` → ``prims.*`` nesting, in IR.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import optree
import torch
from torch_mlir import ir

from thunder_mlir.ir.dialect import CompositeOp, YieldOp, fits_in_runs, segment_kwargs

from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.differentiability import user_op
from thunder_mlir.frontend.tracing import current_trace
from thunder_mlir.frontend.value_guards import COMPOSITE_HOLDER, ValueNeeded


def to_attribute(value: Any) -> ir.Attribute | None:
    """A readable MLIR attribute for a non-tensor argument (None for ``None``), typed by
    the Python value as the user passed it: ``0`` is an i64 where the schema may say float,
    since the type is part of what eager computes (``x_int + 1`` vs ``x_int + 1.0``).
    Readers convert to the type they need through ``thunder_mlir.ir.attrs``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get_f64(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, torch.dtype):
        from thunder_mlir.ir.dtypes import element_type

        return ir.TypeAttr.get(element_type(value))
    if isinstance(value, (tuple, list)):
        if any(type(v) is TensorProxy for v in optree.tree_leaves(value, none_is_leaf=True)):
            return None
        items = [to_attribute(v) for v in value]
        if any(i is None for i in items):
            return ir.StringAttr.get(repr(value))
        return ir.ArrayAttr.get(items)
    if isinstance(value, TensorProxy):
        return None
    return ir.StringAttr.get(repr(value))


# Called as hook(sym, op, args, kwargs, out) after each composite is recorded
# (thunder_mlir.extend records the calls executors may claim).
ON_COMPOSITE: list[Callable] = []


@dataclass(eq=False)
class Symbol:
    """A torch-level operation.

    ``name``: printed in the ``name`` attribute of its composite (``ltorch.add``).
    ``impl``: the decomposition; takes the torch call's arguments (proxies for tensors)
    and returns its outputs. ``inplace_of``: for ``Tensor.add_`` and friends, the
    functional symbol whose result is written back into the first argument.
    ``tensor_scalars``: the parameters where the decomposition computes with a 0-d tensor
    given for a number that torch reads (``narrow``'s start, an index): the tracer keeps it
    a tensor there instead of specializing on its value (frontend/scalar_args.py).
    """

    name: str
    impl: Callable
    tensor_scalars: frozenset[str] = frozenset()
    signature: inspect.Signature = field(init=False)

    def __post_init__(self):
        self.signature = inspect.signature(self.impl)

    def __call__(self, *args, **kwargs):
        return user_op(None, args, kwargs, lambda: emit_composite(self, args, kwargs))

    def __repr__(self):
        return f"Symbol({self.name})"


def _operand_names(sym: Symbol, bound, positions: list[int]) -> list[str]:
    """The parameter name of each tensor operand (flattened like ``(args, kwargs)``)."""
    params = list(sym.signature.parameters.values())
    name_args = []
    for i, val in enumerate(bound.args):
        p = params[min(i, len(params) - 1)]
        name = p.name if p.kind != p.VAR_POSITIONAL else f"{p.name}[{i - params.index(p)}]"
        name_args.append(optree.tree_map(lambda _, n=name: n, val, none_is_leaf=True))
    name_kwargs = {k: optree.tree_map(lambda _, n=k: n, v, none_is_leaf=True)
                   for k, v in bound.kwargs.items()}
    names = optree.tree_leaves((tuple(name_args), name_kwargs), none_is_leaf=True)
    return [names[i] for i in positions]


def emit_composite(sym: Symbol, args: tuple, kwargs: dict, required: bool = False) -> Any:
    """Record ``sym(*args, **kwargs)`` as a composite at the current insertion point.

    ``required``: the op must exist (it carries a VJP rule of its own: a custom
    autograd.Function), even when its decomposition is empty; NotImplementedError when it
    cannot be recorded (more than 8 runs of distinct tensor types)."""
    trace = current_trace()
    try:
        bound = sym.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{sym.name}: {e}") from None
    leaves, spec = optree.tree_flatten((bound.args, bound.kwargs), none_is_leaf=True)
    positions = [i for i, leaf in enumerate(leaves) if type(leaf) is TensorProxy]
    outer = [leaves[i] for i in positions]
    types = [p.value.type for p in outer]
    if not fits_in_runs(types):
        if required:
            raise NotImplementedError(f"{sym.name}: more than 8 runs of distinct tensor types "
                                      "among its tensor arguments")
        return sym.impl(*args, **kwargs)  # too many type runs: record the decomposition only

    holder = ir.Operation.create("thunder_internal.holder", regions=1, ip=False)
    holder.attributes[COMPOSITE_HOLDER] = ir.UnitAttr.get()
    block = holder.regions[0].blocks.append(*types)
    inner_leaves = list(leaves)
    for i, pos in enumerate(positions):
        p = outer[i]
        inner_leaves[pos] = TensorProxy(block.arguments[i], p.tshape, p.tdtype, p.tdevice,
                                        p.requires_grad)
    inner_args, inner_kwargs = optree.tree_unflatten(spec, inner_leaves)
    try:
        with trace.insertion_point(ir.InsertionPoint(block)):
            out = sym.impl(*inner_args, **inner_kwargs)
    except BaseException as e:
        if type(e) is ValueNeeded:  # a value of the composite's operands: the outer ones
            inner = list(block.arguments)
            e.tensors = [outer[inner.index(t.value)] if t.value in inner else t
                         for t in e.tensors]
        holder.erase()  # nothing of a failed decomposition stays in the module
        trace.pending_checks = []  # (nor its checks; a retrace or a fallback follows)
        raise
    out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    out_positions = [i for i, leaf in enumerate(out_leaves) if type(leaf) is TensorProxy]
    yielded = [out_leaves[i].value for i in out_positions]

    # A decomposition that emitted nothing and returns its inputs needs no op.
    block_args = list(block.arguments)
    if trace.pending_checks:  # index checks of its operands (frontend/runtime_checks.py)
        from thunder_mlir.frontend.runtime_checks import lift
        with trace.ip:
            lift(trace, block_args, outer)
    if not required and len(block.operations) == 0 and all(v in block_args for v in yielded):
        holder.erase()
        for i in out_positions:
            out_leaves[i] = outer[block_args.index(out_leaves[i].value)]
        return optree.tree_unflatten(out_spec, out_leaves)

    result_types = [v.type for v in yielded]
    if not fits_in_runs(result_types):
        raise NotImplementedError(f"{sym.name}: too many distinct result types")
    with ir.InsertionPoint(block):
        YieldOp(**segment_kwargs("in", yielded))
    with trace.ip:
        op = CompositeOp(**segment_kwargs("in", [p.value for p in outer]),
                         **segment_kwargs("out", result_types, type_of=lambda t: t),
                         name=ir.StringAttr.get(sym.name))
    attrs = op.operation.attributes
    for pname, pval in bound.arguments.items():
        a = to_attribute(pval)
        if a is not None and pname not in ("name", "operand_names"):
            attrs[pname] = a
    # which parameter each operand came from (grad rules and executors match on it)
    attrs["operand_names"] = ir.ArrayAttr.get(
        [ir.StringAttr.get(n) for n in _operand_names(sym, bound, positions)])
    block.append_to(op.operation.regions[0])
    holder.erase()
    results = list(op.operation.results)
    for k, i in enumerate(out_positions):
        inner = out_leaves[i]
        out_leaves[i] = TensorProxy(results[k], inner.tshape, inner.tdtype, inner.tdevice)
    out = optree.tree_unflatten(out_spec, out_leaves)
    for hook in ON_COMPOSITE:
        hook(sym, op.operation, args, kwargs, out)
    return out
