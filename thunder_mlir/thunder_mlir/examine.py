"""``thunder_mlir.examine(fn, *args, **kwargs)``: which torch ops of a program run on XLA,
which run on the torch fallback executor, and why.

The program is traced exactly as ``jit`` traces it (same proxies, symbols and fallback
rules; nothing is compiled or run). Each torch-level call recorded at the top level of the
trace, or inside the regions of ``thunder.cond``/``while``/``checkpoint``, is reported once per name with its count and the user's source lines: symbols
(``ltorch.*`` composites, lowered to StableHLO) run on XLA; ``thunder.executor_call`` ops
run on the torch fallback, with the reason — the op has no thunder_mlir symbol, or its
symbol declined this call (the ``Fallback`` message, e.g. "einsum with an ellipsis").
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import torch

from thunder_mlir.errors import Fallback
from thunder_mlir.ir.dialect import REGION_OPS

__all__ = ["examine", "Examination", "OpReport"]

_local = threading.local()


@dataclass
class OpReport:
    """One torch-level op of the program: ``name`` (``ltorch.softmax`` or the torch
    function's qualified name), ``executor`` ("xla" or "torch"), ``count`` (calls),
    ``reason`` (why it falls back; None on XLA) and ``locations`` (user source lines)."""

    name: str
    executor: str
    count: int = 0
    reason: str | None = None
    locations: list[str] = field(default_factory=list)


@dataclass
class Examination:
    """The result of :func:`examine`: ``ops`` (OpReports, XLA ops first, in first-call
    order) and, for a ``thunder_mlir.distributed`` step, ``collectives`` (the
    ``distributed.Collective`` instructions XLA's SPMD partitioner inserted, with the bytes
    each moves per step per device). ``str()`` gives a readable table."""

    ops: list[OpReport]
    collectives: list = field(default_factory=list)

    @property
    def xla_ops(self) -> list[OpReport]:
        return [o for o in self.ops if o.executor == "xla"]

    @property
    def fallback_ops(self) -> list[OpReport]:
        return [o for o in self.ops if o.executor == "torch"]

    @property
    def all_on_xla(self) -> bool:
        return not self.fallback_ops

    def __str__(self) -> str:
        x, f = self.xla_ops, self.fallback_ops
        lines = [f"thunder_mlir.examine: {sum(o.count for o in x)} call(s) of {len(x)} op(s) "
                 f"on XLA, {sum(o.count for o in f)} call(s) of {len(f)} op(s) on the torch "
                 "fallback"]
        if x:
            lines.append("on XLA:")
            lines += [f"  {o.name:40} x{o.count}" for o in x]
        if f:
            lines.append("on the torch fallback:")
            for o in f:
                lines.append(f"  {o.name:40} x{o.count}  why: {o.reason}")
                lines += [f"      at {loc}" for loc in o.locations[:3]]
        if self.collectives:
            lines.append(f"collectives inserted by XLA: {len(self.collectives)}, "
                         f"{sum(c.bytes for c in self.collectives)} bytes per step per device")
            lines += [f"  {c}" for c in self.collectives]
        return "\n".join(lines)


def _record_fallback_reasons():
    """Patch the Fallback exception and the fallback emitter to record reasons (restored
    by the returned undo function)."""
    from thunder_mlir.frontend import torch_fallback
    from thunder_mlir.frontend.symbols import SYMBOLS

    orig_init, orig_emit = Fallback.__init__, torch_fallback.emit_fallback

    def init(self, *args):
        orig_init(self, *args)
        _local.last_reason = str(args[0]) if args else "the symbol declined this call"

    def emit(trace, func, args, kwargs):
        out = orig_emit(trace, func, args, kwargs)
        if func in SYMBOLS:
            reason = getattr(_local, "last_reason", None) or "the symbol declined this call"
            reason = f"symbol {SYMBOLS[func].name} declined: {reason}"
        else:
            reason = "no thunder_mlir symbol for this op"
        _local.last_reason = None
        _local.reasons.append(reason)
        return out

    Fallback.__init__ = init
    torch_fallback.emit_fallback = emit

    def undo():
        Fallback.__init__ = orig_init
        torch_fallback.emit_fallback = orig_emit
    return undo


def _location(op) -> str:
    s = str(op.location)
    return s[4:-1] if s.startswith("loc(") else s


def _calls(block, region_op=None):
    """(op, innermost enclosing region op) for the top-level ops of ``block`` and, inside
    control-flow and checkpoint ops, of their regions, in program order."""
    for op in block.operations:
        op = op.operation
        yield op, region_op
        if op.name in REGION_OPS:
            for region in op.regions:
                yield from _calls(region.blocks[0], op)


def examine(fn, *args, **kwargs) -> Examination:
    """Trace ``fn(*args, **kwargs)`` as ``thunder_mlir.jit`` would and report, per torch op,
    whether it runs on XLA or on the torch fallback and why.

    ``fn``: a function or an ``nn.Module`` (its parameters and buffers become inputs, as in
    ``jit``). ``args``/``kwargs``: inputs of the types ``jit`` accepts. Returns an
    :class:`Examination`. Raises what ``jit`` raises while tracing (``TraceError`` naming
    the user's line, ``UnsupportedInputError`` for unsupported input types). Nothing is
    compiled or executed, and no cache entry is created.

    A ``thunder_mlir.distributed`` step (``train_step``/``shard``) is examined on its
    batch: its program is compiled (not run) and the Examination also lists the
    collectives XLA inserted.
    """
    from thunder_mlir.frontend import pytrees
    from thunder_mlir.function import _metas, _paths, _unsupported
    from thunder_mlir.pipeline import trace_function

    if getattr(type(fn), "thunder_distributed", False):  # distributed.TrainStep/ShardedModule
        return fn.examine(*args, **kwargs)

    if isinstance(fn, torch.nn.Module):
        from thunder_mlir.module import _functional_forward

        m = fn
        state = dict(m.named_parameters(remove_duplicate=False))
        state.update(m.named_buffers(remove_duplicate=False))
        flags = tuple(sub.training for sub in m.modules())
        fn = functools.partial(_functional_forward, m)
        args, kwargs = (flags, state, {}, args, kwargs), {}  # ({}: no lifted attributes)
    leaves, spec = pytrees.flatten((args, kwargs))
    while _metas(leaves) is None and pytrees.register_types(leaves):  # input objects
        leaves, spec = pytrees.flatten((args, kwargs))
    if _metas(leaves) is None:
        paths = _paths(args, kwargs)
        bad = next(i for i, x in enumerate(leaves)
                   if not isinstance(x, torch.Tensor) and _metas([x]) is None)
        _unsupported(leaves[bad], paths[bad])
    _local.reasons, _local.last_reason = [], None
    undo = _record_fallback_reasons()
    try:
        trace, *_ = trace_function(fn, leaves, spec, "allow")
    finally:
        undo()
    reasons = iter(_local.reasons)
    reports: dict[tuple[str, str], OpReport] = {}
    for op, region_op in _calls(trace.entry):
        name = op.operation.name
        if name in REGION_OPS:
            key, reason = (name, "xla"), None
        elif name == "thunder.composite":
            key = (str(op.attributes["name"]).strip('"'), "xla")
            reason = None
        elif name == "thunder.executor_call":
            key = (str(op.attributes["callee"]).strip('"'), "torch")
            reason = next(reasons, "unknown")
            if region_op is not None and region_op.name != "thunder.checkpoint":
                reason += (f"; it is inside the region of {region_op.name} at "
                           f"{_location(region_op)}, which must run whole on XLA: jit "
                           "refuses this program")
        else:
            continue
        r = reports.get(key)
        if r is None:
            r = reports[key] = OpReport(key[0], key[1], reason=reason)
        elif reason and r.reason and reason not in r.reason:
            r.reason += f"; {reason}"
        r.count += 1
        loc = _location(op)
        if loc not in r.locations:
            r.locations.append(loc)
    ops = sorted(reports.values(), key=lambda r: r.executor != "xla")
    return Examination(ops)
