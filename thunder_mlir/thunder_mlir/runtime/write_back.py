"""Write-backs: the new values of the inputs a program writes in place, copied into the
caller's tensors after the run, and the precondition that makes that copy eager's meaning.

A program writes an input in place as functionalization left it (frontend/
functionalization.py): the trace treats each tensor input as memory of its own, computes
the input's new value, and the runtime copies it back (``write_back``). Eager runs the
writes on the memory itself, so where two inputs *share* memory (``f(x, x[0])``, two
overlapping slices of one buffer) a write into one shows through the other, and the
program's reads after it, and the order of the copies, would differ from eager's.
``inputs_overlap`` finds that case before the run; such a call runs through a synthetic
base instead (one input over the shared memory: synthetic_bases.py), as AOTAutograd's.
"""

from __future__ import annotations

import torch

from thunder_mlir.frontend.torch_internals import storage_use_count


def write_back(tensors: list, positions, values: list) -> None:
    """Copy each new value ``values[k]`` into the caller's input ``tensors[positions[k]]``
    (the roots functionalization wrote), in order, as eager's in-place ops left them: each
    tensor's version counter advances once. Many go through one ``torch._foreach_copy_``
    (a training step writes back every parameter and optimizer state tensor: one dispatch,
    not one per tensor). Shapes equal; dtypes may differ (converted as ``copy_`` does)."""
    if len(values) == 1:
        tensors[positions[0]].copy_(values[0])
    elif values:
        torch._foreach_copy_([tensors[i] for i in positions], values)


def span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte) that ``t``'s elements can occupy."""
    start = t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def overlapping_written_input(tensors: list, written) -> tuple[int, int] | None:
    """(i, j): two tensor inputs whose memory spans overlap, at least one of them in
    ``written`` (the indices the program writes back); None when every written input's
    span is apart from every other input's. Spans are conservative (strided views that
    interleave without sharing an element count as overlapping). Empty tensors hold no
    memory. Cost: one pass over the inputs and a sort, O(n log n)."""
    written = set(written)
    spans = sorted((*span(t), k) for k, t in enumerate(tensors) if t.numel())
    end_any, any_k, end_w, w_k = -1, None, -1, None
    for lo, hi, k in spans:
        if k in written and lo < end_any:
            return any_k, k
        if k not in written and lo < end_w:
            return w_k, k
        if hi > end_any:
            end_any, any_k = hi, k
        if k in written and hi > end_w:
            end_w, w_k = hi, k
    return None


def _shared(t: torch.Tensor) -> bool:
    """Whether another tensor holds ``t``'s storage (a view, its base, a ``.detach()``):
    its use count beyond ``t`` itself and the storage object this asks through."""
    try:
        return storage_use_count(t) > 2
    except (AttributeError, RuntimeError):  # (no count: check the spans)
        return True


_data_ptr = torch.Tensor.data_ptr


def inputs_overlap(entry, tensors: list) -> bool:
    """Whether an input ``entry``'s program writes in place (``entry.mutated_inputs``)
    shares memory with another tensor input (``overlapping_written_input``), or an input
    it changes by an in-place view op (``entry.restrided_inputs``) is passed twice: such a
    call runs through a synthetic base (synthetic_bases.py), the others as traced.

    Two tensors share memory only through one storage (memory torch owns; see
    docs/sharp_edges.md for buffers owned outside torch). Per call, in order:

    1. whether a written tensor object is passed twice (``f(x, x)``), then one storage
       use count per written input up to the first whose storage another tensor holds (a
       view, its base, a ``.detach()``): none, and the inputs are apart (~2.5 us for a
       decode step's 37 inputs, 6 written);
    2. otherwise the inputs' identities and data pointers are compared with those of the
       last call that passed (``entry.separate_inputs``). A training step lands here (a
       parameter that requires grad is held by its DLPack export's ``.detach()``); its
       parameters, gradients and state are the same objects at each call, its batch and
       scalar tables new ones. Unchanged: nothing to check. Changed inputs whose storage
       no other tensor holds cannot overlap anything (a new batch tensor): the spans of
       the unchanged ones were compared when they passed. Only a changed input whose
       storage is shared, or a first call, has every input's span compared (O(n log n)).

    Spans follow from the data pointers, the shapes (part of the cache key) and the
    strides: an input restrided in place at the same address between two calls
    (``as_strided_``) is not checked again."""
    written = entry.mutated_inputs
    ids = tuple(map(id, tensors))
    dup = len(set(ids)) != len(ids)
    if dup and any(ids.count(ids[i]) > 1 for i in entry.restrided_inputs):
        return True
    if not written:
        return False
    twice = dup and any(ids.count(ids[i]) > 1 for i in written)
    if not twice and not any(_shared(tensors[i]) for i in written):
        return False
    sig = (ids, tuple(map(_data_ptr, tensors)))
    last = entry.separate_inputs
    if sig == last:
        return False
    if (twice or last is None or len(last[0]) != len(ids) or any(
            _shared(tensors[k]) for k, (a, b, c, d) in enumerate(zip(ids, sig[1], *last))
            if a != c or b != d)) and overlapping_written_input(tensors, written) is not None:
        return True
    entry.separate_inputs = sig
    return False
