"""``grad``: reverse-mode automatic differentiation of ``@computation`` as a pass.

Input: ``func.func @computation`` (composites allowed: those with a composite-level rule in
``vjp_composites.py`` are differentiated whole, the others are inlined first). Output:

* ``@forward(inputs) -> (outputs..., residuals...)`` — the original ops, plus the values the
  backward needs;
* ``@backward(cotangents..., residuals...) -> (input grads...)`` — one cotangent per
  differentiable output (``thunder.diff_outputs``; by default the floating-point outputs
  except the trailing ``thunder.num_write_backs`` results, the new values of inputs
  updated in place), one gradient per differentiated input some output depends on
  (``thunder.reached`` says which).

Random ops (``thunder.rng_bits``) have no gradient; a value computed from random bits (a
dropout mask) reaches the backward as a residual, so it is the forward's value. The seed
input is an integer: never differentiated.

The backward is built by walking the forward ops in reverse and applying each prim's VJP
rule (``PrimDef.vjp``, ``ir/prim_defs.py``), accumulating cotangents of values with several
uses. Rules first refer to forward values directly; the split then turns every forward
value the backward uses into a residual. Before that, **rematerialization** chooses the residuals
as the minimum cut of torch.compile's partitioner (``min_cut_rematerialization_partition``):
the fewest bytes from which cheap ops (elementwise, broadcasts, reshapes, slices, constants)
recompute, in the backward, every forward value it reads (``_saved_values``). Which inputs are differentiated: ``thunder.requires_grad``
on the function (an ``array<i1>``), else every floating-point input.
"""

from __future__ import annotations

import torch
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.errors import PassError
from thunder_mlir.frontend.functionalization import UNVERSIONED_READ
from thunder_mlir.frontend.region_reads import RECOMPUTE_READ
from thunder_mlir.ir import attrs, dtypes, prim_defs
from thunder_mlir.ir.dtypes import is_inexact, nbytes, torch_dtype
from thunder_mlir.ir.dialect import REGION_OPS
from thunder_mlir.ir.regions import (
    eliminate_dead_code, free_values, inline_block, nested_ops, operand_sites)

from thunder_mlir.transforms.backprop import accumulate, backprop, differentiable_results, \
    mark_active
from thunder_mlir.transforms.torch_vjp import CUSTOM_VJP_ATTR
from thunder_mlir.transforms.vjp_composites import APPLIES, COMPOSITE_VJP

NAME = "grad"
WRITE_BACKS = "thunder.num_write_backs"  # set by jit: trailing results that update inputs
DIFF_OUTPUTS = "thunder.diff_outputs"  # set by jit: array<i1>, the outputs that get cotangents
BACKWARD_ERROR = "thunder.backward_error"  # on @backward: raised when the backward runs
REACHED = "thunder.reached"  # on @backward: per differentiated input, has a gradient
# on @backward, where some differentiated output does not reach every reached input: per
# differentiated output, the positions (among the reached inputs) it depends on
OUTPUT_REACH = "thunder.output_reach"
# on an op of @backward: a clone of a forward op, recomputed from the residuals (``joint``
# keeps XLA from merging it back into the forward's op)
RECOMPUTED = "thunder.recomputed"
CHEAP = prim_defs.CHEAP  # cheap prims (``PrimDef.cheap``)
# prims the backward may recompute instead of saving their results: the cheap ones and
# slices (views, which torch's partitioner recomputes too)
RECOMPUTABLE = CHEAP | {"slice"}


def _func(module: ir.Module, name: str):
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def run(module: ir.Module, remat: bool = True, save_materialized: bool = False) -> None:
    """Differentiate ``@computation`` (see module docstring). ``remat``: rematerialize
    cheap ops in the backward (False: every forward value the backward reads is a
    residual). ``save_materialized``: never recompute a value a gemm, convolution or
    custom call of the backward reads (``_materialized_backward``; pipeline.Target: the
    GPU's choice). VJPs that run torch.autograd register their backward callables in
    ir/implementations.py (torch_vjp.py). Raises PassError if the module has no
    ``@computation``, MissingImplementationError if an executor call or custom VJP rule
    on the differentiated path names a symbol this process does not hold."""
    with module.context, ir.Location.unknown():
        fwd = _func(module, "computation")
        if fwd is None:
            error = PassError("grad: the module has no func.func @computation")
            error.location = module.operation.location
            raise error
        _differentiate(module, fwd, remat, save_materialized)


def _differentiate(module: ir.Module, fwd, remat: bool, save_materialized: bool) -> None:
    from thunder_mlir.frontend.tracing import Trace

    block = fwd.regions[0].blocks[0]
    # (the ops whose results are the user's ops' results, marked before the decompositions
    # are inlined; the reads' pairs stay ops until then, so that inlining updates them)
    reads = _mark_user_results(block)
    _inline_composites_without_rules(block)
    final_reads = _take_read_pairs(block, UNVERSIONED_READ) if reads else {}
    recompute_reads = _take_read_pairs(block, RECOMPUTE_READ)
    ops = [o.operation for o in block.operations]
    ret = ops[-1]
    body = ops[:-1]
    args = list(block.arguments)
    if "thunder.requires_grad" in fwd.attributes:
        wrt = attrs.get_bools(fwd, "thunder.requires_grad")
    else:
        wrt = [is_inexact(torch_dtype(a.type)) for a in args]
    outputs = list(ret.operands)
    active = {a for a, w in zip(args, wrt) if w}
    if DIFF_OUTPUTS in fwd.attributes:  # set by jit: the outputs eager's autograd tracks
        diff_out = attrs.get_bools(fwd, DIFF_OUTPUTS)
    else:
        # outputs that depend on a differentiated input get a cotangent, except the trailing
        # write-backs (inputs updated in place, e.g. running statistics)
        n_diff = len(outputs) - attrs.get_int(fwd, WRITE_BACKS, 0)
        mark_active(body, active)
        diff_out = [is_inexact(torch_dtype(v.type)) and i < n_diff and v in active
                    for i, v in enumerate(outputs)]
    device = torch.device(ir.StringAttr(fwd.attributes["thunder.device"]).value) \
        if "thunder.device" in fwd.attributes else torch.device("cpu")

    bt = Trace(device, module=module)
    bt.recompute_reads = recompute_reads  # (checkpoint_vjp: recompute from the final memory)
    with bt.building():
        cots = bt.begin([v.type for v, d in zip(outputs, diff_out) if d], name="backward")
        ct: dict[ir.Value, object] = {}
        for v, c in zip([v for v, d in zip(outputs, diff_out) if d], cots):
            accumulate(ct, v, bt.make_proxy(c))
        # (before backprop, whose rules may replace forward ops: an executor call's saved
        # values become results of a new op)
        masks = _output_masks(body, [a for a, w in zip(args, wrt) if w],
                              [v for v, d in zip(outputs, diff_out) if d])
        backprop(bt, body, ct, active)
        # a differentiated input no output depends on gets no gradient (eager leaves its
        # .grad None): @backward returns the gradients of the reached inputs only
        grads, reached = [], []
        for a, w in zip(args, wrt):
            if w:
                g = ct.get(a)
                reached.append(g is not None)
                if g is not None:
                    grads.append(g.value)
        bt.finish(grads)
        bt.func_op.attributes[REACHED] = ir.ArrayAttr.get([ir.BoolAttr.get(r) for r in reached])
        reach = _output_reach(masks, reached)
        if reach is not None:
            i64 = ir.IntegerType.get_signless(64)
            bt.func_op.attributes[OUTPUT_REACH] = ir.ArrayAttr.get([
                ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in r]) for r in reach])
    # grad transforms (thunder_mlir.extend) emit their own forward and mark the op they
    # replace: drop it (in a region too, or in a region's copy recomputed in the backward),
    # and take the forward's ops and outputs as they are now
    for f in (fwd, bt.func_op.operation):
        for op in [o for o in nested_ops(f) if "thunder.erase" in o.attributes]:
            op.erase()
    body = [o.operation for o in block.operations][:-1]
    outputs = list(ret.operands)

    bwd = bt.func_op.operation
    # rules emit cotangents for every operand; those of inactive operands are unused
    eliminate_dead_code(bwd.regions[0].blocks[0])
    _read_final_values(bwd, block, final_reads)
    if reads:  # (a region's VJP may have copied marked ops into the backward)
        for op in [*nested_ops(fwd), *nested_ops(bwd)]:
            if USER_RESULT in op.attributes:
                del op.attributes[USER_RESULT]
    residuals = _split(fwd, bwd, body, remat, save_materialized)
    # forward returns outputs + residuals
    with ir.InsertionPoint(ret):
        func_d.ReturnOp(outputs + residuals)
    ret.erase()
    fwd.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in args], [v.type for v in outputs + residuals]))
    fwd.attributes["sym_name"] = ir.StringAttr.get("forward")
    fwd.attributes["thunder.num_outputs"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), len(outputs))
    fwd.attributes["thunder.requires_grad"] = ir.ArrayAttr.get([ir.BoolAttr.get(w) for w in wrt])
    fwd.attributes[DIFF_OUTPUTS] = ir.ArrayAttr.get([ir.BoolAttr.get(d) for d in diff_out])
    bwd.attributes["thunder.device"] = ir.StringAttr.get(str(device))
    if bt.backward_errors:
        bwd.attributes[BACKWARD_ERROR] = ir.StringAttr.get(bt.backward_errors[0])


def _take_read_pairs(block, name: str) -> dict:
    """Erase the ``name(old, final)`` composites of ``block`` (``ltorch.unversioned_read``,
    frontend/functionalization.py ``emit_unversioned_reads``; ``ltorch.recompute_read``,
    frontend/region_reads.py); returns {old: final}."""
    final = {}
    for op in [o.operation for o in block.operations]:
        if _composite_name(op) == name:
            final[op.operands[0]] = op.operands[1]
            op.erase()
    return final


USER_RESULT = "thunder.user_result"  # (while grad runs) the op computes a user op's result


def _mark_user_results(block) -> bool:
    """Where ``block`` pairs ``.data`` reads with their final values (``_take_read_pairs``):
    mark with ``USER_RESULT`` each op computing the result of one of the user's
    ops (a top-level op, or inside a composite the op its result is yielded from), so
    that they are known after the composites are inlined. Returns whether there are
    pairs."""
    ops = [o.operation for o in block.operations]
    if not any(_composite_name(o) == UNVERSIONED_READ for o in ops):
        return False

    def mark(op):
        if op.name != "thunder.composite":
            op.attributes[USER_RESULT] = ir.UnitAttr.get()
            return
        body = op.regions[0].blocks[0]
        for v in list(body.operations)[-1].operation.operands:
            if not isinstance(v.owner, ir.Block):
                mark(getattr(v.owner, "operation", v.owner))

    for op in ops[:-1]:
        mark(op)
    return True


def _read_final_values(bwd, fblock, final: dict) -> None:
    """Make the backward read ``final[old]`` wherever it reads ``old`` (a ``.data`` read
    whose memory the program wrote after it: eager saved it without a version check, and
    its backward reads the memory as written). A forward value computed from ``old``
    inside the decomposition of an op (an op not marked ``USER_RESULT``) is recomputed in
    the backward from ``final[old]``: eager's node for that op saved ``old`` and computes
    from it when the backward runs. The results of the user's ops are new tensors in eager
    (``exp`` saves its result): read as they were."""
    if not final:
        return
    bblock = bwd.regions[0].blocks[0]
    before = ir.InsertionPoint(list(bblock.operations)[0].operation)
    memo: dict = {}

    def final_of(v):
        if v in memo:
            return memo[v]
        memo[v] = f = final.get(v)
        owner = v.owner
        if f is None and not isinstance(owner, ir.Block):
            op = getattr(owner, "operation", owner)
            if USER_RESULT not in op.attributes and op.block == fblock:
                new = [final_of(x) for x in op.operands]
                if any(x is not None for x in new):
                    clone = op.clone(ip=before)
                    for i, x in enumerate(new):
                        if x is not None:
                            clone.operands[i] = x
                    for r, c in zip(op.results, clone.results):
                        memo[r] = c
                    f = memo[v]
        return f

    sites = [(user, i, v) for op in bblock.operations
             for user, i, v in operand_sites(op.operation)]
    for user, i, v in sites:
        f = final_of(v)
        if f is not None:
            user.operands[i] = f


def _composite_name(op) -> str | None:
    if op.name != "thunder.composite":
        return None
    return ir.StringAttr(op.attributes["name"]).value


def _inline_composites_without_rules(block) -> None:
    """Inline (one level at a time) every composite that has no applicable VJP rule, so
    its decomposition is differentiated instead; composites with a rule stay whole. The
    blocks of control-flow ops are processed too (their VJPs differentiate their ops)."""
    changed = True
    while changed:
        changed = False
        for op in [o.operation for o in block.operations]:
            if op.name in REGION_OPS:
                for region in op.regions:
                    _inline_composites_without_rules(region.blocks[0])
                continue
            name = _composite_name(op)
            if name is None or (name in COMPOSITE_VJP and APPLIES[name](op)) \
                    or CUSTOM_VJP_ATTR in op.attributes or name in (UNVERSIONED_READ,
                                                                     RECOMPUTE_READ):
                continue
            yielded, _ = inline_block(op, 0, list(op.operands), op)
            for r, v in zip(op.results, yielded):
                r.replace_all_uses_with(v)
            op.erase()
            changed = True


def _split(fwd, bwd, body, remat: bool, save_materialized: bool = False) -> list[ir.Value]:
    """Choose the residuals (the min cut of ``_saved_values`` if ``remat``, with the values
    of ``_materialized_backward`` banned from recomputation if ``save_materialized``; else
    every forward value the backward reads), clone the ops between them and the values the
    backward reads into the backward, and make the residuals arguments of ``@backward``.

    ``uses`` maps each forward value the backward reads to its (op, operand index) sites,
    built once and kept up to date, so each rewrite touches only its own uses.
    """
    bblock = bwd.regions[0].blocks[0]
    fblock = fwd.regions[0].blocks[0]
    forward_values = set(fblock.arguments)
    for o in body:
        forward_values.update(o.results)
    uses: dict[ir.Value, list[tuple[ir.Operation, int]]] = {}
    for op in bblock.operations:  # (the regions of backward control-flow ops read them too)
        for user, i, v in operand_sites(op.operation):
            if v in forward_values:
                uses.setdefault(v, []).append((user, i))
    needed = list(uses)
    if remat and needed:
        banned = _materialized_backward(uses) if save_materialized else frozenset()
        needed = _rematerialize(bblock, body, _saved_values(needed, banned), uses)
    residuals = []
    for v in needed:
        arg = bblock.add_argument(v.type, v.location)
        for op, i in uses[v]:
            op.operands[i] = arg
        residuals.append(v)
    bwd.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in bblock.arguments],
        [r.type for r in list(bblock.operations)[-1].operation.operands]))
    bwd.attributes["thunder.num_residuals"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), len(residuals))
    return residuals


def _recomputable(op) -> bool:
    short = op.name[len("thunder."):] if op.name.startswith("thunder.") else op.name
    return short in RECOMPUTABLE and len(op.results) == 1 and len(op.regions) == 0


# backward ops that read their operands from memory whole (a gemm, a convolution, a custom
# call): a value one of them reads is written to memory in the backward if recomputed there
# (torch's partitioner: not ``is_fusible``); layout ops are followed to their users
_NOT_FUSIBLE = {"dot_general", "convolution", "cudnn_attention", "cudnn_attention_backward",
                "triangular_solve", "cholesky", "scatter", "index_add", "take_along_add"}
_LAYOUT = {"reshape", "transpose"}
# ops a gemm reads through without writing their results (XLA's gemm fusion takes them into
# its operands; a widening convert is how ATen's opmath dot of 16-bit values reads them,
# which the GPU lowering turns back into a 16-bit dot: ``hlo._widened_16bit``): never
# banned from recomputation, so that the backward reads their narrow operand
_OPERAND_OPS = {"thunder.convert_element_type", "thunder.reshape", "thunder.transpose",
                "thunder.broadcast_in_dim"}


def _fusible(op) -> bool:
    """Whether ``op`` can read an operand computed in the same fusion: a prim other than
    ``_NOT_FUSIBLE``, or a composite whose decomposition has only such prims."""
    if op.name == "thunder.composite":
        return all(_fusible(inner) for inner in nested_ops(op)
                   if inner.name not in ("thunder.yield", "func.return"))
    short = op.name[len("thunder."):] if op.name.startswith("thunder.") else None
    return short is not None and short in prim_defs.PRIMS and short not in _NOT_FUSIBLE


def _materialized_backward(uses: dict) -> set:
    """The forward values of ``uses`` (value -> its (op, operand) sites in the backward)
    that a backward op which cannot fuse its operands reads (a gemm of the weight's
    gradient, a convolution, a custom call; through reshapes and transposes), except the
    results of ``_OPERAND_OPS``: recomputing one in the backward writes it to memory there
    as well, so it is never free (torch's
    ``min_cut_rematerialization_partition``, ``ban_if_materialized_backward``:
    ``is_materialized_backwards``, torch/_functorch/partitioners.py)."""
    out = set()
    for v, sites in uses.items():
        if not isinstance(v.owner, ir.Block) and v.owner.operation.name in _OPERAND_OPS:
            continue
        stack, seen = [op for op, _ in sites], set()
        while stack:
            op = stack.pop()
            if op in seen:
                continue
            seen.add(op)
            if not _fusible(op):
                out.add(v)
                break
            if op.name[len("thunder."):] in _LAYOUT:
                stack.extend(u.owner for r in op.results for u in r.uses)
    return out


def _saved_values(needed: list, banned: set = frozenset()) -> set:
    """The forward values to save so that the backward can read (or recompute) every
    value of ``needed`` with the fewest bytes saved: the minimum s-t cut of torch's
    ``min_cut_rematerialization_partition`` (torch/_functorch/partitioners.py), where each
    value is an edge ``in -> out`` whose capacity is its bytes (element size times
    elements, so a bool mask costs a quarter of its float source and a broadcast more than
    its operand), the source feeds the inputs and every op that is not ``RECOMPUTABLE``
    (dots, reductions, random bits, composites, region ops: computed once, in the
    forward), a recomputable op's operands feed it, and every value the backward reads
    feeds the sink. The cut edges are the saved values; the recomputable ops between
    them and the sink are recomputed in the backward. Inputs cost 0: the caller keeps
    them alive anyway (parameters), so saving one adds no memory. ``banned``: values never
    recomputed (fed by the source, as torch bans the recomputation of a value the
    backward materializes: ``_materialized_backward``). Unlike torch's, no 1.1**distance
    weight is added (ties go to networkx's max-flow order)."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_node("source")  # (no edge from it when every value is a constant's)
    index: dict[ir.Value, int] = {}

    def node(v, side):
        return (index.setdefault(v, len(index)), side)

    # only the values the backward reads and what they can be recomputed from take part:
    # walk back from them through recomputable ops (the rest cannot be in a minimum cut)
    stack, seen = list(needed), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = None if isinstance(v.owner, ir.Block) else v.owner.operation
        cost = 0 if op is None else nbytes(v.type)  # an input: alive anyway
        graph.add_edge(node(v, "in"), node(v, "out"), capacity=cost)
        if op is None or not _recomputable(op) or v in banned:
            graph.add_edge("source", node(v, "in"))  # no capacity: infinite
            continue
        for o in set(op.operands):
            graph.add_edge(node(o, "out"), node(v, "in"))
            stack.append(o)
    for v in needed:
        graph.add_edge(node(v, "out"), "sink")
    _, (reachable, _) = nx.minimum_cut(graph, "source", "sink")
    return {v for v, i in index.items()
            if (i, "in") in reachable and (i, "out") not in reachable}


def _rematerialize(bblock, body, saved: set, uses: dict) -> list[ir.Value]:
    """Clone into the backward (before its first op, in forward order, each marked
    ``RECOMPUTED``) the ops computing the values of ``uses`` that are not ``saved`` from
    the saved ones; ``uses`` is updated
    (recomputed values drop out, the clones' reads of saved values come in). Returns the
    saved values in the order the backward first reads them."""
    order = [v for v in uses if v in saved]
    recompute, stack = set(), [v for v in uses if v not in saved]
    while stack:
        v = stack.pop()
        if v in recompute:
            continue
        recompute.add(v)
        stack.extend(o for o in v.owner.operation.operands if o not in saved)
    first = next(iter(bblock.operations)).operation
    clones: dict[ir.Value, ir.Value] = {}
    for op in body:
        if not any(r in recompute for r in op.results):
            continue
        clone = op.clone(ip=ir.InsertionPoint(first))
        clone.attributes[RECOMPUTED] = ir.UnitAttr.get()
        for j, o in enumerate(clone.operands):
            if o in clones:
                clone.operands[j] = clones[o]
            else:  # a saved value
                if o not in uses:
                    uses[o] = []
                    order.append(o)
                uses[o].append((clone, j))
        clones[op.results[0]] = clone.results[0]
        for user, i in uses.pop(op.results[0], []):
            user.operands[i] = clone.results[0]
    return order


def _output_masks(body: list, diff_args: list, diff_outputs: list) -> list[int]:
    """Per differentiated output, the bit set of the differentiated inputs (bit i: the i-th)
    it depends on through differentiable results (``_output_reach``)."""
    deps = {a: 1 << i for i, a in enumerate(diff_args)}
    for op in body:
        bits = 0
        for v in free_values(op):
            bits |= deps.get(v, 0)
        if bits:
            for r in differentiable_results(op):
                deps[r] = bits
    return [deps.get(v, 0) for v in diff_outputs]


def _output_reach(masks: list[int], reached: list[bool]) -> list[list[int]] | None:
    """Per differentiated output, the positions among the reached inputs (``@backward``'s
    gradients, in order) that ``masks`` (``_output_masks``) says it depends on; None when
    every output reaches every one (the attribute is then left out).

    Eager gives an input no ``.grad`` (None) when the outputs that received a gradient do
    not reach it, even if another output of the same call does (torch.autograd's graph
    has one node per op, not one per program), so the runtime needs this to return None
    instead of zeros. An over-approximation (a region op's results depend on every value
    it reads) only gives zeros where eager gives None, never None for a real gradient."""
    positions = [i for i, r in enumerate(reached) if r]  # reached position -> input bit
    if not positions:
        return None
    reach = [[k for k, i in enumerate(positions) if m >> i & 1] for m in masks]
    if all(len(r) == len(positions) for r in reach):
        return None
    return reach


def output_reach(module: ir.Module) -> list[frozenset[int]] | None:
    """``@backward``'s ``thunder.output_reach``: per differentiated output, the positions of
    its gradients (among ``reached_inputs``) that the output depends on; None when every
    output reaches every reached input."""
    with module.context:
        bwd = _func(module, "backward")
        if bwd is None or OUTPUT_REACH not in bwd.attributes:
            return None
        return [frozenset(r) for r in attrs.get_value(bwd, OUTPUT_REACH)]


def reached_inputs(module: ir.Module) -> list[bool]:
    """Per differentiated input of ``@forward``, whether ``@backward`` returns its gradient
    (False: no output depends on it)."""
    with module.context:
        return attrs.get_bools(_func(module, "backward"), REACHED)


def backward_error(module: ir.Module) -> str | None:
    """The message of eager's error for differentiating through a ``thunder.no_derivative``
    that ``@backward`` reaches (raised when the backward runs), or None."""
    with module.context:
        bwd = _func(module, "backward")
        if bwd is None or BACKWARD_ERROR not in bwd.attributes:
            return None
        return ir.StringAttr(bwd.attributes[BACKWARD_ERROR]).value


def differentiable_outputs(module: ir.Module) -> list[bool]:
    """Per output of ``@forward`` (program outputs, then write-backs; not residuals),
    whether it is differentiable: it gets a cotangent in ``@backward``."""
    with module.context:
        fwd = _func(module, "forward")
        return attrs.get_bools(fwd, DIFF_OUTPUTS)


def residual_bytes(module: ir.Module) -> int:
    """Bytes of the residuals ``@forward`` saves for ``@backward`` (for reports)."""
    with module.context:
        fwd = _func(module, "forward")
        n = attrs.get_int(fwd, "thunder.num_outputs")
        ret = list(fwd.regions[0].blocks[0].operations)[-1].operation
        return sum(nbytes(v.type) for v in list(ret.operands)[n:])
