"""What a checkpointed function or a ``torch.cond`` branch reads from outside it, and the
autograd meaning eager gives those reads when the memory is written after the region.

* **Non-reentrant ``torch.utils.checkpoint``** keeps nothing of its function's ops for the
  backward: torch's saved-tensor hooks (``_checkpoint_hook``) drop what they would save,
  and the backward re-runs the function, reading every tensor it captured as that memory
  is *when the backward runs*, with no version check (a saved-tensor hook bypasses
  ``SavedVariable``'s check). So a write after the checkpoint into a tensor its function
  read changes eager's gradient and raises nothing. The reentrant checkpoint
  (``CheckpointFunction``) saves its tensor arguments with a version check, and re-reads
  the rest (closures, parameters) likewise. A write inside the function into a tensor
  from outside it (``batch_norm``'s running statistics) happens again when the backward
  re-runs the function: eager updates the statistics twice per step. jit refuses that
  with a clear error when a backward is needed (``trace.checkpoint_writes``).

  Here: the eager twins (frontend/differentiability.py) of the ops inside a checkpoint
  are recorded under identity saved-tensor hooks, as eager's are, so no version check is
  made for them; a reentrant checkpoint's outputs get one twin node saving its tensor
  arguments (``CheckpointFunction.save_for_backward``). Each value the function read from
  outside is paired at the end of the trace with the value its memory holds then
  (``ltorch.recompute_read(old, final)``); the grad pass's checkpoint VJP
  (transforms/backprop.py) recomputes the function from ``final`` while the cotangents
  still flow to ``old``'s producer, as eager's recomputed graph reads new memory through
  the old graph's edges.

* **``torch.cond``**'s autograd node (torch/_higher_order_ops/cond.py,
  ``CondAutogradOp.forward``: ``save_values_for_backward(ctx, operands)``) saves every
  tensor operand, those Dynamo lifts from the branches' closures included, with a version
  check: a write after the cond into anything its branches read makes eager's backward
  raise "modified by an inplace operation", whether or not the branch's own ops need it.
  Here: one opaque twin node from those tensors to the cond's results, saving them all.

A value read inside a region that cannot be paired (the region is nested in a cond or
while region, whose blocks the pair cannot reach) is refused by jit when its memory is
written later and a backward is needed (``trace.unpaired_reads``), never left silently
reading the value at the op.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from thunder_mlir.frontend import differentiability
from thunder_mlir.frontend.symbol import Symbol, emit_composite
from thunder_mlir.frontend.tracing import current_trace
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.regions import defined_inside, defining_op, operand_sites

RECOMPUTE_READ = "ltorch.recompute_read"


def _same(t):
    return t


@contextmanager
def checkpoint_reads(scope_op) -> Iterator[None]:
    """The block inside traces a checkpointed function into ``scope_op``: its ops' eager
    twins save under identity saved-tensor hooks (no version check, as eager's
    ``_checkpoint_hook``), and what it reads from outside is paired with its final value
    at the end of the trace (:func:`emit_pairs`)."""
    trace = current_trace()
    checks = trace.region_checks[-1] if trace.region_checks else trace.checks
    n_checks, n_kept = len(checks), len(trace.not_recomputed)
    trace.checkpoint_depth += 1
    try:
        with trace.recording_region_reads(scope_op) as reads, \
                torch.autograd.graph.saved_tensors_hooks(_same, _same):
            yield
    finally:
        trace.checkpoint_depth -= 1
    trace.recompute_reads.extend(reads.values())
    for p, old, where in reads.values():  # written inside: eager's recomputation writes
        if p.value != old and defined_inside(p.value, scope_op):  # it again
            trace.checkpoint_writes.append(where)
    # what the recomputation does not redo as eager does, with the outside reads it uses
    inside = [([ok.value], message.where,
               f"inside a checkpointed function, a check of tensor values ({message.what}) "
               "that eager's recomputation makes again on the memory as written, raising "
               "in the backward where it fails")
              for ok, _, message in checks[n_checks:]]
    inside += trace.not_recomputed[n_kept:]
    del trace.not_recomputed[n_kept:]
    by_value = {old: (p, old) for p, old, _ in reads.values()}
    for values, where, what in inside:
        used = [by_value[v] for v in _read_from_outside(values, scope_op) if v in by_value]
        if used:
            trace.stale_if_written.append((where, what, used))


def _read_from_outside(values, scope_op) -> set:
    """The values defined outside ``scope_op`` that ``values`` (defined inside it or not)
    are computed from: a backward slice of the use-def chains, ending at ``scope_op``."""
    seen, out, todo = set(), set(), list(values)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if not defined_inside(v, scope_op):
            out.add(v)
            continue
        todo += [w for _, _, w in operand_sites(defining_op(v))]
    return out


def stale_recomputation(trace) -> tuple[str, str] | None:
    """(where, what) of the first thing inside a checkpointed function that eager's
    recomputation does not redo as the backward here does (``trace.stale_if_written``),
    when memory it reads from outside was written after the read: refused by jit when a
    backward is needed. Eager re-checks values in the recomputation (``cov``'s weights
    written negative make its backward raise) and keeps an op's ctx tensors from the
    forward; thunder_mlir's backward recomputes from the written memory without either."""
    for where, what, used in trace.stale_if_written:
        if any(p.value != old for p, old in used):
            return where, what
    return None


def cond_twins(outs: list[TensorProxy], operands, reads: dict) -> None:
    """Eager's ``CondAutogradOp`` node in the twin graph: from the cond's tensor operands
    and what its branches read from outside (``reads``, from
    ``Trace.recording_region_reads``) to its results ``outs``, saving all of them."""
    inputs: list[TensorProxy] = []
    for p in [*(o for o in operands if type(o) is TensorProxy), *(r[0] for r in reads.values())]:
        if not any(p is q for q in inputs):
            inputs.append(p)
    differentiability.opaque_twins(outs, inputs, list(range(len(inputs))), [])


def _top_level(v, block) -> bool:
    from torch_mlir import ir

    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner == block
    owner = getattr(owner, "operation", owner)
    return owner.parent is not None and owner.block == block


def emit_pairs(trace, name: str, reads, covered=None) -> None:
    """At the end of a trace: for each ``(proxy, value, where)`` of ``reads`` (``where``: the
    location of the read, or None for that of the op defining ``value``) whose
    memory was written since (the proxy holds another value now), the composite
    ``name(old, final)`` (the identity on ``old``), which the grad pass reads; a pair
    whose values are not both in the function's top block goes to
    ``trace.unpaired_reads`` (refused by jit when a backward is needed), unless
    ``covered(old)``: ``old`` is read inside a checkpoint from memory that lives outside it,
    which the checkpoint's recomputation reads as it is at the end."""
    block = trace.entry
    sym = Symbol(name, lambda old, final: old)
    seen = set()
    for p, old, where in reads:
        if old == p.value or (id(p), old) in seen:
            continue
        seen.add((id(p), old))
        if _top_level(old, block) and _top_level(p.value, block):
            emit_composite(sym, (TensorProxy(old, p.tshape, p.tdtype, p.tdevice), p), {},
                           required=True)
        elif covered is not None and covered(old) and _top_level(p.value, block):
            pass  # (read in a checkpoint from memory outside it: recomputed from the final)
        else:  # (where None: a `.data` read, at the op that defines ``old``)
            owner = old.owner
            trace.unpaired_reads.append(
                (p, old, where or str(getattr(owner, "location", trace.loc))))


def inputs_read_unversioned(trace) -> list[int]:
    """The indices of the program's tensor inputs whose memory the backward may read as it
    is when the backward runs, in eager: read through ``.data`` or by a checkpointed
    function. The compiled backward reads them as they were at the call, so the runtime
    refuses a backward after a write into one of them between the call and the backward
    (``runtime/autograd.py``)."""
    def root(p):  # (no `or`: bool() of a proxy is a data-dependent error)
        r = getattr(p, "_alias_root", None)
        return id(p if r is None else r)

    roots = {root(p) for p, _ in trace.unversioned_reads.values()}
    roots |= {root(p) for p, _, _ in trace.recompute_reads}
    return [i for i, p in enumerate(trace.inputs) if id(p) in roots]
