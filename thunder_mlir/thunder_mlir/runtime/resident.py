"""Resident written inputs: tensors a program writes in place, kept in XLA's own memory
and donated to it, so that the program's new values are computed into that memory instead
of being copied back (``write_back``) from separate result buffers.

A compiled training step (train_step.py) writes every parameter and optimizer state
tensor. Copied back, its results are a second set of parameters and state beside the first
until the copy ends (peak memory 1.2-2.5x torch.compile's: docs/optim.md), and the copy
moves every byte once more. XLA can compute a result into an argument's buffer
(``tf.aliasing_output``, HloInputOutputAliasConfig) when the caller donates that buffer,
but PJRT's CPU client does not donate memory it imported through DLPack: a torch tensor's
buffer donated to a run is replaced by a copy (measured with jaxlib 0.10.2). So a written
tensor is made *resident*: its storage becomes the DLPack export of an XLA buffer of
jax's own, and each call

1. releases the tensor's hold on that storage (``t.data = <empty>``): when nothing else
   holds it, its DLPack deleter drops PJRT's external reference and the buffer becomes
   donatable;
2. passes the XLA buffer itself, donated, at the argument the program aliases with the
   tensor's new value (``mark_aliased_writes``);
3. gives the tensor the exported result (``t.data = export``): the same memory, now
   holding the new value, with its version counter advanced as an in-place write's.

Correctness never depends on the release: PJRT refuses to donate a buffer that still has
an external reference (a view, ``.detach()``, ``.numpy()``, ``state_dict()`` entry or
storage object someone holds) and runs on a copy instead; the run then leaves the old
buffer alive, and the tensor gets it back with the new value copied in, which every other
holder of that memory sees, as eager's in-place write. A tensor becomes resident at
the first call that writes it (``_make_resident``: its values copied into a new buffer of
jax's own, never an import of torch's memory, which the run would hold) only if no other
tensor, array or storage object holds its old storage (checked through a weak reference:
the storage must be freed by the swap), so nothing can observe the move except
``data_ptr()``, which changes once, at that first call, and then stays. The storage of a
resident tensor is a DLPack one: not resizable, not shareable across processes. Another
compiled program reading a resident tensor (an evaluation forward between steps) imports
it at each call and keeps no import (dlpack.ArgumentImports), so the steps stay in place;
one that read the tensor before its first step holds its old memory in its import cache,
so the tensor does not become resident and its steps copy (correct, without the saving).

Only CPU programs of one XLA region without value guards or a backward (the shape of a
training step's program) use it, index checks only where the program keeps the old values
on a failure (``runtime_checks.unless_failed``); elsewhere the write-backs copy.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch_mlir import ir

from thunder_mlir.runtime import dlpack
from thunder_mlir.runtime.plan import ALIAS_ATTR, DONOR_ATTR, Plan, draw_seed
from thunder_mlir.runtime.residency import RESIDENT as _RESIDENT
from thunder_mlir.runtime.write_back import write_back

_EMPTY: dict = {}  # dtype -> the 0-element tensor a released tensor holds during a run
_set_versions = torch._C._autograd._unsafe_set_version_counter


def mark_aliased_writes(module: ir.Module, written: Sequence[int], trailing: int = 0,
                        func_name: str = "computation") -> dict[int, tuple[int, int]]:
    """Mark, in the XLA region of ``@func_name``, the argument reading each written input
    ``written[w]`` (an argument index of ``@func_name``) with ``tf.aliasing_output`` = the
    region result holding its new value: of the values ``@func_name`` returns, the
    ``len(written)`` before the last ``trailing`` (the index checks' code) are the new
    values, in order. XLA then computes that result into the argument's buffer when the
    caller donates it.
    Run before the region is compiled (runtime/plan.py ``build_plan``).

    Returns {written input: (region argument, region result)} for the inputs marked.
    Nothing is marked unless ``@func_name`` is one ``func.call`` of an XLA region and its
    ``func.return``; an input is marked only where it is exactly one argument of the call,
    its new value is a result of the call returned once, and the two have one type."""
    with module.context:
        funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
                 for op in module.body.operations if op.operation.name == "func.func"}
        ops = [op.operation for op in funcs[func_name].regions[0].blocks[0].operations]
        if len(ops) != 2 or ops[0].name != "func.call" or ops[1].name != "func.return":
            return {}
        call, ret = ops
        block = funcs[func_name].regions[0].blocks[0]
        operands, returned = list(call.operands), list(ret.operands)
        results = list(call.results)
        region = funcs.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
        if region is None:
            return {}
        marked: dict[int, tuple[int, int]] = {}
        first = len(returned) - trailing - len(written)
        for w, i in enumerate(written):
            value, arg = returned[first + w], block.arguments[i]
            places = [q for q, v in enumerate(operands) if v == arg]
            if len(places) != 1 or returned.count(value) != 1 or value not in results:
                continue
            r = results.index(value)
            if operands[places[0]].type == value.type:
                marked[i] = (places[0], r)
        if not marked:
            return {}
        old = list(ir.ArrayAttr(region.attributes["arg_attrs"])) \
            if "arg_attrs" in region.attributes else [ir.DictAttr.get({})] * len(operands)
        aliased = {q: r for q, r in marked.values()}
        new = []
        for q, d in enumerate(old):
            entries = {n.name: n.attr for n in ir.DictAttr(d)}
            if q in aliased:
                entries.pop(DONOR_ATTR, None)
                entries[ALIAS_ATTR] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(32), aliased[q])
            new.append(ir.DictAttr.get(entries))
        region.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
        return marked


class ResidentWrites:
    """The run of a single-region CPU ``plan`` whose written inputs ``written`` (program
    input indices, in the order of their new values, which end the plan's outputs but for
    ``trailing`` more) are kept resident where ``marked`` (``mark_aliased_writes``'s
    result) aliases them (module docstring). ``run(tensors)`` returns what ``plan.run``
    returns, with every written input already holding its new value: the caller does no
    write-back. Raises ValueError for another plan; an XLA runtime error as
    ``ExecutionError`` (``XlaStep.execute``), after putting the released tensors back."""

    def __init__(self, plan: Plan, written: Sequence[int], marked: dict[int, tuple[int, int]],
                 trailing: int = 0):
        if not plan._single or not plan._on_cpu:
            raise ValueError("internal: resident writes need a single-region CPU plan")
        self.plan = plan
        self.written = list(written)
        self.trailing = trailing  # outputs after the new values (the checks' code)
        self.marked = dict(marked)  # written input -> (region argument, region result)

    def run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan, marked = self.plan, self.marked
        step = plan._step
        inputs = [*tensors, draw_seed(plan.device)] if plan.seeded else list(tensors)
        order = plan._order
        region_inputs = inputs if order is None else [inputs[i] for i in order]
        # written input -> its residency entry (residency.ResidencyTable); the entry's
        # array is passed donated
        released = {}
        get = _RESIDENT.get
        for i in marked:
            t = tensors[i]
            held = get(t)
            if held is not None and held[2] == t.data_ptr() and held[3] == t.shape \
                    and held[4] == t.stride() and not held[1].is_deleted():
                released[i] = held
            else:
                held = _make_resident(t, plan._jax_device, held)
                if held is not None:
                    released[i] = held
        imp = plan._imports.buffer
        try:
            args = [imp(q, t) for q, t in enumerate(region_inputs)] if not released else \
                self._arguments(region_inputs, tensors, released)
            outs = step.execute(args, plan._jax_device)
        except BaseException:
            _restore(tensors, released)
            raise
        del args  # (the imports of torch memory: released before the swaps below)
        exported = dlpack.to_torch_many(outs, True)
        pick = plan._pick
        result = exported if pick is None else \
            [exported[j] if j >= 0 else inputs[~j] for j in pick]
        self._write(tensors, released, outs, exported, result)
        return result

    def _arguments(self, region_inputs, tensors, released) -> list:
        """The region's arguments with each released written input's resident array at its
        aliased argument, the tensor emptied (its storage's external reference dropped)."""
        args = list(region_inputs)
        at = {q: i for i, (q, _) in self.marked.items() if i in released}
        imp = self.plan._imports.buffer
        for q, t in enumerate(region_inputs):
            i = at.get(q)
            if i is None:
                args[q] = imp(q, t)
            else:
                t = tensors[i]
                empty = _EMPTY.get(t.dtype)
                if empty is None:
                    empty = _EMPTY[t.dtype] = torch.empty(0, dtype=t.dtype)
                t.data = empty
                args[q] = released[i][1]
        return args

    def _write(self, tensors, released, outs, exported, result) -> None:
        """Give every written input its new value: a donated resident one the exported
        result (its own memory), a resident one PJRT did not donate its array back with
        the value copied in, and the others a copy (``write_back``)."""
        k = len(self.written)
        first = len(result) - self.trailing - k
        copies, dsts, bumped = [], [], []
        for w, i in enumerate(self.written):
            t = tensors[i]
            held = released.get(i)
            if held is not None:
                a = held[1]
                r = self.marked[i][1]
                if a.is_deleted():  # donated: the result is that memory, written in place
                    t.data = exported[r]
                    held[1:] = outs[r], t.data_ptr(), t.shape, t.stride()
                    bumped.append(t)
                    continue
                t.data = dlpack.to_torch(a, True)  # held elsewhere: a copy ran; copy back
            dsts.append(t)
            copies.append(result[first + w])
        if bumped:
            _set_versions(tuple(bumped), tuple(t._version + 1 for t in bumped))
        if dsts:
            with torch.no_grad():
                write_back(dsts, range(len(dsts)), copies)


def _make_resident(t: torch.Tensor, device, entry: list | None = None):
    """Move ``t`` into a new XLA buffer of jax's own on ``device`` (its values copied;
    ``t.data`` = the buffer's export) and return its residency entry (``entry``: ``t``'s
    stale one, renewed), if nothing but ``t`` holds ``t``'s storage: the old storage must
    be freed by the swap (a weak reference says), else ``t`` gets it back and None. None
    also for a tensor that is not a plain dense contiguous one filling its storage."""
    if t.grad_fn is not None or not t.is_contiguous() or t.numel() == 0 \
            or t.storage_offset() != 0 or t.is_conj() or t.is_neg() or not t.is_cpu:
        return None
    storage = t.untyped_storage()
    if storage.nbytes() != t.numel() * t.element_size():
        return None
    import jax

    # a buffer of jax's own, copied from a scratch tensor's import (never an import of
    # t's memory, which PJRT could hold past the run); the export waits for the copy
    scratch = dlpack.to_xla(torch.empty(t.shape, dtype=t.dtype), device)
    array = jax.device_put(scratch, device, may_alias=False)
    new = dlpack.to_torch(array, True)
    del scratch
    with torch.no_grad():
        new.copy_(t)
    weak = storage._weak_ref()
    del storage
    try:
        t.data = new
        if torch.UntypedStorage._expired(weak):
            return _RESIDENT.set(t, array, entry)
        old = torch.UntypedStorage._new_with_weak_ptr(weak)
        t.data = torch.empty(0, dtype=t.dtype).set_(old, 0, new.shape, new.stride())
        return None
    finally:
        torch.UntypedStorage._free_weak_ref(weak)


def _restore(tensors, released) -> None:
    """After a failed import or run: each released tensor back on its array's memory (one
    not yet released gets a second storage object of its own memory). A donated array is
    gone with its values; such a tensor is left empty and a warning says so."""
    lost = []
    for i, held in released.items():
        a = held[1]
        if a.is_deleted():
            lost.append(i)
            _RESIDENT.pop(tensors[i])
        else:
            tensors[i].data = dlpack.to_torch(a, True)
    if lost:
        import warnings

        warnings.warn(f"thunder_mlir: the compiled program failed after its inputs "
                      f"{lost} were donated to it; their values are lost (the tensors are "
                      "left empty). Reload them (load_state_dict) before the next step.",
                      RuntimeWarning, stacklevel=3)
