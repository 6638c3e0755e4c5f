"""Functionalization: every write into a tensor becomes a new SSA value of that tensor, and
a write through a view becomes a write into the view's base.

This is torch's functionalization (``torch._subclasses.functional_tensor.FunctionalTensor``
and ATen's ``FunctionalTensorWrapper``: view replay), done while tracing. A traced tensor
is a proxy holding an SSA value; an in-place op computes the new value out of place and
*rebinds* the proxy (``write_inplace``), so later reads of the same Python object see the
write and the IR is pure dataflow: passes after tracing may reorder freely.

A view (``y[:, 0]``, ``y.t()``, ``y.view(-1)``, ``x.unfold(...)``) remembers the torch call
that made it from its base (``aliasing.record_view``). Writing a view:

1. walks up its chain of views to the root (an input or a computed tensor that is no view);
2. at each step puts the view's new value into the step's base (``_into_base``). Every
   view of a dense tensor is an ``as_strided`` view of it; its sizes, strides and storage
   offset come from replaying the step on a meta tensor of the base's shape:

   - when its strides factor over the base's (slices with steps, selects, transposes,
     permutes, squeezes, reshapes of a dense block) the new value is transposed into the
     base's dim order and padded into place (``stablehlo.pad`` with interior padding for
     steps) under a mask: a select, which XLA fuses;
   - otherwise (``diagonal``, ``unfold``, ``as_strided``) it is scattered at the view's
     positions ``offset + sum_i iota_i * stride_i`` (``stablehlo.scatter``);
   - a view in which several elements share one memory location (``expand``, overlapping
     ``unfold`` windows) raises eager's error: eager refuses to write it;
   - a view whose position is read from a tensor's value (``t[i]`` with ``i`` a 0-d
     integer tensor, which eager reads as an int: a select) cannot be replayed on meta;
     it is written back by the functional form of the call that made it
     (``VALUE_INDEXED_WRITES``: ``base[i] = new``);

3. rebinds the root and recomputes every live view of it from the new value
   (``aliasing.refresh_views``): the base, other views and views made before the write all
   read the new value, as they share memory in eager.

An input written directly or through a view becomes an extra program output, copied back
into the caller's tensor after the run (``Trace.mutated_inputs``).

Where a step's view is not a view in eager (``reshape`` of a tensor that is not dense
copies), the write stops there: the copy is its own root, as in eager. Views that
reinterpret dtype (``view(dtype)``, ``.real`` of a complex tensor) are refused with an
error naming the line.
"""

from __future__ import annotations

import math

import optree
import torch

from thunder_mlir.errors import DynamicShapeFallback
from thunder_mlir.frontend.aliasing import _VIEW_OF, eager_meta, refresh_views, replay_step
from thunder_mlir.frontend import zero_tensors
from thunder_mlir.frontend.symbol import Symbol, emit_composite
from thunder_mlir.ir import prims, symbolic
from thunder_mlir.ir.proxy import TensorProxy

# eager's messages for writes that overlap (aten/src/ATen/MemoryOverlap.cpp): a written
# tensor in which elements share memory (assert_no_internal_overlap), and a written tensor
# that partially overlaps one it reads (assert_no_partial_overlap)
INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation.")
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the "
                   "written-to tensor refer to a single memory location. Please clone() the "
                   "tensor before performing the operation.")


def _eager_refuses(message: str) -> None:
    """Raise eager's RuntimeError ``message`` at the user's line (a TorchOpRuntimeError,
    which the error boundary keeps: a re-run on fresh tensors cannot reproduce it)."""
    from thunder_mlir.errors import TorchOpRuntimeError
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    raise TorchOpRuntimeError(f"{describe_frame(user_frame())}\n  {message}\n  Eager "
                              "PyTorch raises this RuntimeError too: the tensors share memory.")


def _dense(m: torch.Tensor) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: some order of the dims makes the strides
    those of a contiguous tensor (size-1 dims aside)."""
    expected = 1
    for n, st in sorted(((n, st) for n, st in zip(m.shape, m.stride()) if n != 1),
                        key=lambda d: d[1]):
        if st != expected:
            return False
        expected *= n
    return True


def _root(p: TensorProxy) -> TensorProxy:
    root = getattr(p, "_alias_root", None)
    return p if root is None else root  # (no `or`: bool() of a proxy reads its data)


def check_overlap(written: TensorProxy, read, region=None) -> None:
    """Raise eager's RuntimeError where an in-place op writing ``written`` reads a tensor
    among ``read`` (any pytree) that partially overlaps it in memory: ATen's
    ``get_overlap_status`` on eager's sizes, strides and offsets (``aliasing.eager_meta``):
    both dense and non-overlapping, in one storage, with byte ranges that intersect without
    being the same tensor (``y[1:].copy_(y[:-1])``). Views that are not dense (``y[:, 0]``
    and ``y[:, 1]``) are "too hard" for ATen, which lets them through; so does this.
    ``region``: a function of ``written``'s eager meta tensor giving the part the op writes
    (``x[index] = v`` writes ``x[index]``)."""
    root = _root(written)
    for r in optree.tree_leaves(read, none_is_leaf=True):
        if type(r) is not TensorProxy or r is written or _root(r) is not root:
            continue
        a, b = eager_meta(written), eager_meta(r)
        if a is not None and region is not None:
            with torch._C.DisableTorchFunction():
                a = region(a)
        if a is None or b is None or a.numel() == 0 or b.numel() == 0 or \
                not _dense(a) or not _dense(b):
            continue
        span = lambda m: (m.storage_offset(), m.storage_offset() + sum(  # noqa: E731
            (n - 1) * st for n, st in zip(m.shape, m.stride())) + 1)
        (a0, a1), (b0, b1) = span(a), span(b)
        if (a0, a1) == (b0, b1) and a.stride() == b.stride():
            continue  # MemoryOverlap::Full: x.add_(x)
        if a0 < b1 and b0 < a1:
            _eager_refuses(PARTIAL_OVERLAP)


def write_inplace(self: TensorProxy, out: TensorProxy, what: str) -> TensorProxy:
    """The in-place update ``what`` (named in errors): the traced tensor ``self`` takes the
    value ``out``, converted to ``self``'s dtype, and every tensor sharing memory with it
    (its base, the base's other views) reads the write. Returns ``self``.

    Raises RuntimeError with eager's message where eager refuses the write: ``out``'s
    shape differs from ``self``'s ("output with shape ... doesn't match the broadcast
    shape"), ``out``'s dtype cannot be cast to ``self``'s (torch.can_cast, "result type
    Float can't be cast to the desired output type Long"), or ``self`` has elements that
    share memory (an ``expand``ed view). NotImplementedError (naming the line) for a view
    that reinterprets its base's dtype.
    """
    if tuple(out.tshape) != tuple(self.tshape):
        raise RuntimeError(f"output with shape {list(self.tshape)} doesn't match the "
                           f"broadcast shape {list(out.tshape)}")
    if out.tdtype != self.tdtype and not torch.can_cast(out.tdtype, self.tdtype):
        raise RuntimeError(f"result type {type_name(out.tdtype)} can't be cast to the "
                           f"desired output type {type_name(self.tdtype)}")
    global _uniform_write
    _uniform_write = what in _UNIFORM
    try:
        assign(self, prims.convert_element_type(out, self.tdtype))
    finally:
        _uniform_write = False
    return self


def type_name(dtype: torch.dtype) -> str:
    """ATen's ScalarType name (Float, Long, ComplexFloat), as eager's messages spell it."""
    with torch._C.DisableTorchFunction():
        return torch.empty((), dtype=dtype, device="meta").type().split(".")[-1] \
            .replace("Tensor", "")


def assign(p: TensorProxy, value: TensorProxy) -> None:
    """Rebind the traced tensor ``p`` to ``value`` (same shape and dtype), writing through
    its chain of views into its root, then refresh every view of the root; an input root
    is recorded as written (written back to the caller's tensor after the run)."""
    from thunder_mlir.frontend.tracing import current_trace

    zero_tensors.check_write(p)  # eager refuses writes into a ZeroTensor
    root, new = p, value
    chain = _chain(p)
    direct = _direct_geometry(p, chain)
    if direct is not None:  # (a chain through a view whose elements share memory)
        root = chain[-1][1][0]
        new = update_view(root, direct, new)
    else:
        for step in chain:
            base = step[1][0]
            new = _into_base(base, step, new)
            root = base
    # a write through ``detach()`` changes the memory and not the root's autograd graph,
    # as a write under no_grad() does
    detached = any(step[0] in _DETACHING for step in chain)
    if root.requires_grad and (not torch.is_grad_enabled() or detached):
        # eager writes the memory and leaves the autograd graph as it was: the gradient
        # flows to the tensor before the write (a momentum update, an EMA under no_grad)
        new = emit_composite(_NO_GRAD_WRITE, (root, new), {}, required=True)
        # (an input only so written is written back without grad: pipeline.py; one also
        # written in grad mode, before or after, is eager's write with history)
        root._no_grad_written = not getattr(root, "_grad_written", False)
    elif root.requires_grad:
        # a write over every element (fill_, zero_, copy_, t[...] = v): eager's graph keeps
        # the tensor before the write (its node gives it a zero gradient, derivatives.yaml
        # ``self: zeros_like(grad)``), so the inputs behind it still get a .grad
        new = keep_edge(new, root)
    if torch.is_grad_enabled() and not detached:
        root._no_grad_written, root._grad_written = False, True
    old, root.value = root.value, new.value
    if getattr(root, "_has_views", False):  # (eager's check of views made before: later)
        from thunder_mlir.frontend.differentiability import note_base_written

        note_base_written(root, p)
    twin_of = getattr(root, "_mirror_of", None)
    if twin_of is not None and twin_of == old:  # its eager twin was written through the
        root._mirror_of = root.value  # view's (differentiability.py): it stays the twin
    if getattr(root, "_has_views", False):  # its views see the update, as in eager
        refresh_views(root)
    trace = current_trace()
    for i, q in enumerate(trace.inputs):
        if q is root:  # an input: written back to the caller's tensor after the run
            trace.mutated_inputs[i] = root


_NO_GRAD_WRITE = Symbol("ltorch.no_grad_write", lambda base, value: value)
_ZERO_GRAD_EDGE = Symbol("ltorch.zero_grad_edge", lambda value, source: value)


def keep_edge(value: TensorProxy, source: TensorProxy) -> TensorProxy:
    """``value``, with an edge of eager's autograd graph to ``source`` kept where the IR's
    dataflow has none: a write that overwrites every element of ``source``, or writes an
    empty index with ``source`` as its value. Eager's node for such a write gives
    ``source`` a zero gradient, so the inputs behind it get a zero ``.grad``, not none.
    The edge is the composite ``ltorch.zero_grad_edge`` (the identity on ``value``; its
    VJP gives ``source`` zeros), emitted only when ``source`` requires grad and
    ``value`` is not computed from it."""
    if type(source) is not TensorProxy or not source.requires_grad or \
            not torch.is_grad_enabled() or _reads(value.value, source.value):
        return value
    return emit_composite(_ZERO_GRAD_EDGE, (value, source), {}, required=True)


def _empty_write(base: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``base`` after a write of ``new`` into an empty view of it: no element changes, and
    eager's graph still reads ``new`` (the op's node on the empty view, under the base's
    ``CopySlices``), so the inputs behind ``new`` get a zero ``.grad``, not none
    (``x[1:].add_(w)`` on one row: ``w.grad`` is ``tensor(0.)``). The edge is kept
    (``ltorch.zero_grad_edge``) in grad mode for a floating-point ``new`` whatever its
    ``requires_grad`` flag says: ``new`` is the op's internal value, whose flag the
    tracking of the user's op sets only after the write; where nothing behind it requires
    grad, the gradient pass finds no input to give the zeros to."""
    if not torch.is_grad_enabled() or not new.tdtype.is_floating_point and \
            not new.tdtype.is_complex or _reads(base.value, new.value):
        return base
    return emit_composite(_ZERO_GRAD_EDGE, (base, new), {}, required=True)


def _reads(value, old, limit: int = 4096) -> bool:
    """Whether the SSA ``value`` is computed from ``old``: a walk up its operands that
    enters composites (a composite's result reads an operand only if its body's yielded
    value reads the block argument: ``fill``'s result does not read its input). True past
    ``limit`` ops, the answer that adds a node to the graph, never drops one."""
    from torch_mlir import ir

    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v == old:
            return True
        if isinstance(v.owner, ir.Block):
            arg = ir.BlockArgument(v)
            parent = v.owner.owner  # the block's op
            parent = getattr(parent, "operation", parent)
            if parent.name == "thunder.composite":
                stack.append(parent.operands[arg.arg_number])
            elif parent.name != "func.func":
                stack.extend(parent.operands)
            continue
        res = ir.OpResult(v)
        op = res.owner
        op = getattr(op, "operation", op)
        key = (op, res.result_number)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > limit:
            return True
        if op.name == "thunder.composite":
            body = op.regions[0].blocks[0]
            yielded = list(body.operations)[-1]
            stack.append(yielded.operands[res.result_number])
        else:
            stack.extend(op.operands)
    return False


def _chain(p: TensorProxy) -> list[tuple]:
    """The view steps from ``p`` up to its root, innermost first (``aliasing.record_view``
    keeps only steps whose result eager aliases)."""
    chain, q = [], p
    while getattr(q, "_alias_root", None) is not None:
        made = getattr(q, _VIEW_OF, None)
        if made is None:
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            raise NotImplementedError(
                f"{describe_frame(user_frame())}\n  an in-place update of a view whose "
                "origin was not recorded: thunder_mlir cannot write it into its base. "
                "Use the out-of-place form.")
        chain.append(made)
        q = made[1][0]
    return chain


_DETACHING = frozenset({torch.Tensor.detach, torch.detach})


def _direct_geometry(p: TensorProxy, chain: list[tuple]) -> torch.Tensor | None:
    """Eager's geometry of ``p`` over its root (``aliasing.eager_meta``) where the write
    must go there in one step: a chain through an intermediate view whose elements share
    memory (``t[0].expand(2, -1)[0] = 7``). Step by step, the intermediate view's new value
    would hold the written row and the old one for the same memory; eager writes only the
    elements of ``p``. None otherwise (the steps are taken one by one), and where the
    geometry is not a plain one of the root's elements (a dtype view, a conjugate)."""
    if len(chain) < 2:
        return None
    from thunder_mlir.frontend.aliasing import _AS_STRIDED, eager_meta

    with torch._C.DisableTorchFunction():  # (the tracer's creation ops stay away)
        bases = [eager_meta(step[1][0]) for step in chain[:-1]]
        # (an as_strided of an intermediate view addresses the root's storage, not the
        # view's: ``b[1:5].as_strided((2, 2), (1, 3), 1)`` is elements 1, 4, 2, 5 of b)
        if not any(b is not None and torch._debug_has_internal_overlap(b) == 1
                   for b in bases) and not any(step[0] in _AS_STRIDED for step in chain[:-1]):
            return None
        m = eager_meta(p)
    root = chain[-1][1][0]
    if m is None or m.dtype != root.tdtype or m.is_conj() or m.is_neg() or \
            tuple(m.shape) != tuple(p.tshape):
        return None
    return m


# Write-backs of views whose position is read from a tensor's value, which ``replay_step``
# cannot place on a meta tensor: the torch call that made the view -> (base, the step's
# args, kwargs, new value of the view) -> the base's new value. Filled by the symbol modules
# that give the call's functional form (symbols/scatter.py: ``Tensor.__getitem__`` with a
# 0-d integer tensor index, written back as ``base[index] = new``).
VALUE_INDEXED_WRITES: dict = {}


def _into_base(base: TensorProxy, step: tuple, new: TensorProxy) -> TensorProxy:
    """``base``'s value after the view the step made from it takes the value ``new``."""
    if symbolic.is_symbolic(base.tshape) or symbolic.is_symbolic(new.tshape):
        raise DynamicShapeFallback("an in-place update of a view of a tensor with symbolic "
                                   "sizes")
    m = torch.empty(base.tshape, dtype=base.tdtype, device="meta")
    v = replay_step(step, m)
    if v is None and step[0] in VALUE_INDEXED_WRITES:  # t[i], i a 0-d integer tensor
        out = VALUE_INDEXED_WRITES[step[0]](base, step[1], step[2], new)
        if out is not None:
            return out
    if v is not None and (v.is_conj() or v.is_neg()):
        # a conjugate or negative view (``x.conj()`` of a complex x): eager's write stores
        # the value's conjugate (negation) in the base's memory
        if v.is_conj():
            new = torch.conj_physical(new)
        if v.is_neg():
            new = torch.neg(new)
    if v is None or v.dtype != base.tdtype or tuple(v.shape) != tuple(new.tshape):
        raise NotImplementedError(
            f"{step[4]}\n  "
            "an in-place update of a view that thunder_mlir cannot map back into its base "
            f"({getattr(step[0], '__name__', step[0])}: a view that reinterprets the dtype, "
            "or one whose position is read from a tensor's value). Update a clone, or "
            "compute the new value out of place.")
    return update_view(base, v, new)


def update_view(base: TensorProxy, view: torch.Tensor, new: TensorProxy) -> TensorProxy:
    """``base``'s value after its view ``view`` takes the value ``new``; ``view`` is a meta
    tensor whose sizes, strides and storage offset are the view's over a dense meta tensor
    of ``base``'s shape (``base_meta[index]``, ``base_meta.diagonal()``). A box of the base
    is padded into place under a mask, any other view scattered at its positions (module
    docstring). Raises eager's RuntimeError (``INTERNAL_OVERLAP``) where elements of the
    view share memory."""
    sizes, strides, offset = tuple(view.shape), tuple(view.stride()), view.storage_offset()
    if math.prod(sizes) == 0:
        return _empty_write(base, new)
    uniform = _uniform_write
    if torch._debug_has_internal_overlap(view) == 1 and _made_by(new) == "ltorch.index_assign":
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  an indexed assignment into a view whose "
            "elements share memory (an expand): eager writes the indexed elements alone, "
            "which thunder_mlir's write of the whole view does not reproduce. Assign into "
            "the tensor the view was expanded from, or into a clone of the view.")
    if torch._debug_has_internal_overlap(view) == 1 and uniform and base.requires_grad and \
            torch.is_grad_enabled():
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  fill_/zero_ of a view whose elements share "
            "memory (an expand) of a tensor that requires grad: eager runs it and raises at "
            "the backward (\"more than one element of the written-to tensor refers to a "
            "single memory location\"), which thunder_mlir does not reproduce. Write the "
            "tensor the view was expanded from, or under torch.no_grad().")
    if torch._debug_has_internal_overlap(view) == 1 and not uniform:
        # (MemoryOverlap::Yes: a stride 0; fill_ and zero_ do not check it, and write one
        # value into every element, as the scatter below does)
        _eager_refuses(INTERNAL_OVERLAP)
    box = _as_box(base.tshape, sizes, strides, offset)
    if box is not None:
        return _box_update(base, new, *box)
    return _scatter_update(base, new, sizes, strides, offset, uniform)


# in-place ops that write one value into every element and that eager runs on a view whose
# elements share memory (no internal-overlap check): every copy of an element gets that
# value, as in eager. ``_uniform_write``: one of them is being written (``write_inplace``)
_UNIFORM = frozenset({"ltorch.fill_", "ltorch.zeros_like_"})  # (fill_, zero_)
_uniform_write = False


def _made_by(new: TensorProxy) -> str | None:
    """The name of the composite whose result ``new`` is, or None."""
    from torch_mlir import ir

    if isinstance(new.value.owner, ir.Block):
        return None
    op = new.value.owner
    op = getattr(op, "operation", op)
    if op.name != "thunder.composite" or "name" not in op.attributes:
        return None
    return ir.StringAttr(op.attributes["name"]).value



def _contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return list(reversed(strides))


def _as_box(shape, sizes, strides, offset):
    """The view (``sizes``, ``strides``, ``offset`` over a dense tensor of ``shape``) as a
    strided box of the base: ``(starts, steps, dims)`` with ``dims[i]`` the base dim view
    dim ``i`` runs along (None for a size-1 dim), or None when its strides do not factor
    over the base's (a diagonal, overlapping windows)."""
    R = _contiguous_strides(shape)
    starts, rest = [], offset
    for r in R:  # the offset's coordinates in the base
        starts.append(rest // r)
        rest %= r
    steps = [1] * len(shape)
    dims: list[int | None] = []
    used: set[int] = set()
    for z, s in zip(sizes, strides):
        if z == 1:
            dims.append(None)
            continue
        found = None
        for d in sorted(range(len(shape)), key=lambda d: -R[d]):
            if d in used or shape[d] == 1 or s <= 0 or s % R[d]:
                continue
            st = s // R[d]
            if starts[d] + (z - 1) * st < shape[d]:
                found = (d, st)
                break
        if found is None:
            return None
        d, st = found
        used.add(d)
        steps[d] = st
        dims.append(d)
    return starts, steps, dims


def _box_update(base: TensorProxy, new: TensorProxy, starts, steps, dims) -> TensorProxy:
    """``base`` with the strided box (``starts``, ``steps``; view dim ``i`` along base dim
    ``dims[i]``) replaced by ``new`` (the view's shape): ``new`` moved into the base's dim
    order and padded into place (interior padding = step - 1), then selected by a mask
    padded the same way."""
    shape = tuple(base.tshape)
    kept = [i for i, d in enumerate(dims) if d is not None]
    order = sorted(kept, key=lambda i: dims[i])  # view dims in base dim order
    x = prims.reshape(new, tuple(new.tshape[i] for i in kept))
    perm = [kept.index(i) for i in order]
    if perm != sorted(perm):
        x = prims.transpose(x, perm)
    box = [1] * len(shape)
    for i in kept:
        box[dims[i]] = new.tshape[i]
    x = prims.reshape(x, tuple(box))
    if tuple(box) == shape:  # the view covers the base (a reshape or a permutation)
        return x
    lows = list(starts)
    inter = [st - 1 for st in steps]
    highs = [n - (s + (b - 1) * st + 1) for n, s, b, st in zip(shape, starts, box, steps)]
    zero = prims.full((), 0, base.tdtype)
    padded = prims.pad(x, zero, lows, highs, inter)
    mask = prims.pad(prims.full(tuple(box), True, torch.bool),
                     prims.full((), False, torch.bool), lows, highs, inter)
    return prims.where(mask, padded, base)


def _scatter_update(base: TensorProxy, new: TensorProxy, sizes, strides, offset,
                    uniform: bool = False) -> TensorProxy:
    """``base`` with the elements at the view's positions ``offset + sum_i iota_i *
    stride_i`` (row-major over a dense ``base``) replaced by ``new``: a scatter into the
    flattened base. Raises NotImplementedError when two view elements share a position,
    unless ``new`` holds one value (``uniform``: any order of the writes gives it)."""
    n = math.prod(base.tshape)
    m = math.prod(sizes)
    with torch._C.DisableTorchFunction():  # eager refuses overlapping writes (unfold windows)
        pos = torch.arange(n).as_strided(sizes, strides, offset) if n else None
        if pos is not None and not uniform and torch.unique(pos).numel() != m:
            # ATen finds this overlap "too hard" to check and writes each element once per
            # view element that shares it, in its kernel's order: not reproducible here
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            raise NotImplementedError(
                f"{describe_frame(user_frame())}\n  an in-place update of a view whose "
                "elements share memory (unfold with a step below its size, as_strided): "
                "eager's result depends on the order its kernel visits them, which "
                "thunder_mlir cannot reproduce. Update a clone of the view instead.")
    idx = prims.full(tuple(sizes), offset, torch.int64)
    for i, s in enumerate(strides):
        if sizes[i] > 1:
            idx = prims.elementwise("add", idx, prims.elementwise(
                "mul", prims.iota(tuple(sizes), torch.int64, i),
                prims.full(tuple(sizes), s, torch.int64)))
    flat = prims.reshape(base, (n,))
    out = prims.scatter(flat, prims.reshape(idx, (m, 1)), prims.reshape(new, (m,)), "set")
    return prims.reshape(out, tuple(base.tshape))


UNVERSIONED_READ = "ltorch.unversioned_read"


def emit_unversioned_reads(trace) -> None:
    """At the end of a trace: for each earlier value of a ``.data`` read whose memory was
    written since (``aliasing.note_unversioned_read``), the composite
    ``ltorch.unversioned_read(old, final)`` (the identity on ``old``): the grad pass gives
    the backward ``final`` where it reads ``old``, as eager's backward reads the memory as
    it is when the backward runs. A value read inside a checkpoint from memory outside it
    needs no pair (the recomputation reads that memory as it is at the end: region_reads.py);
    one made inside a cond/while region cannot be paired: jit refuses it when a backward is
    needed (``region_reads.emit_pairs``)."""
    from thunder_mlir.frontend.higher_order import in_checkpoint_scope
    from thunder_mlir.frontend.region_reads import emit_pairs

    emit_pairs(trace, UNVERSIONED_READ, [(p, v, None) for p, values in
                                         trace.unversioned_reads.values() for v in values],
               covered=in_checkpoint_scope)
