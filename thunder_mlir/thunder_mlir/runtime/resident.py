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
tensor is made *resident*: its storage becomes the memory of an XLA buffer of jax's own
(``_Memory``: a torch storage made through numpy's ``__array_interface__``, which keeps
the array that owns the memory alive and is no PJRT export, so PJRT knows of no external
reference to the buffer), and each call

1. passes that buffer, donated, at the argument the program aliases with the tensor's new
   value (``mark_aliased_writes``): XLA computes the new value into the same memory;
2. gives the residency entry the result's array, which owns that memory now, and advances
   the tensor's version counter as an in-place write's.

The tensor, its views and every other holder of its memory (``.detach()``, ``.numpy()``,
``state_dict()`` entries, storage objects) see the new values in place, as after eager's
in-place update; nothing is swapped or exported per call (BERT tiny, 126 written tensors:
the release, export and swap of each took ~2.5 us of a ~4 ms step). The result's address
is checked to be the argument's (once per argument: the executable's aliasing). A tensor
becomes resident at the first call that writes it (``_make_resident``: its values copied
into a new buffer of jax's own, never an import of torch's memory, which PJRT would not
donate) only if no other tensor, array or storage object holds its old storage (checked
through a weak reference: the storage must be freed by the swap), so nothing can observe
the move except ``data_ptr()``, which changes once, at that first call, and then stays.
The storage of a resident tensor is not resizable and not shareable across processes. Another compiled program reading a resident tensor (an
evaluation forward between steps) imports its memory as any torch tensor's; one that read
the tensor before its first step holds its old memory in its import cache, so the tensor
does not become resident and its steps copy (correct, without the saving). A run that
fails after its inputs were donated loses their memory (``_lost``: a warning says so).

Programs of one XLA region without value guards or a backward use it (a training step's
program on the CPU; every such program on a GPU, pipeline.Target.resident_writes), index
checks only where the program keeps the old values on a failure
(``runtime_checks.unless_failed``); elsewhere the write-backs copy.

**On a GPU** the storage is made through ``__cuda_array_interface__`` (``torch.as_tensor``
keeps the interface object, and so the entry, alive) instead of numpy's interface, and
PJRT's GPU client, which refuses to donate memory torch owns, donates this memory of its
own. torch and XLA run on different streams, and a resident tensor reaches XLA without a
DLPack import (whose stream protocol orders the others): a run with resident arguments
first waits on the host for torch's current stream (torch's writes and reads of the
memory are done), and after it waits for the resident results (XLA's writes are done
before torch reads them). Checked without a GPU for the CPU path only; tests/test_cuda.py
checks the GPU path on a device.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import torch
from torch_mlir import ir

from thunder_mlir.runtime import dlpack
from thunder_mlir.runtime.plan import ALIAS_ATTR, DONOR_ATTR, Plan, draw_seed
from thunder_mlir.runtime.write_back import write_back

_set_versions = torch._C._autograd._unsafe_set_version_counter


class ResidencyTable:
    """tensor -> (the jax array whose memory its storage is, that memory's address, the
    tensor's shape and strides then); an entry leaves the table with its tensor, and the
    buffer goes with the last storage object of that memory.

    A dict keyed by ``id(t)`` holding a weak reference to ``t``: a training step looks up
    and renews one entry per written tensor at each call (BERT tiny: 126), and
    ``torch.utils.weak.WeakIdKeyDictionary`` builds a ``WeakIdRef`` per lookup (~1.4 us of
    lookup per tensor, against ~0.3 us here). A tensor whose weak reference reads None (a
    resurrected Python object) is simply not resident: its next step makes it resident
    again."""

    def __init__(self):
        self._entries: dict[int, list] = {}  # id -> [weakref, array, address, shape, strides]

    def get(self, t: torch.Tensor):
        e = self._entries.get(id(t))
        return e if e is not None and e[0]() is t else None

    def set(self, t: torch.Tensor, entry: list) -> list:
        """Record ``entry`` = ``[None, array, None, None, None]`` (``array``: the jax array
        ``t``'s memory is) as ``t``'s entry, replacing any earlier one, and return it with
        ``t``'s weak reference, address, shape and strides filled in. The list itself is
        what the storage of that memory keeps alive (``_Memory``): a step renews
        ``entry[1]`` in place, and an entry replaced here stays with the storage that
        still holds its array."""
        key = id(t)
        entry[0] = weakref.ref(t, lambda r, key=key: self._drop(key, r))
        entry[2:] = t.data_ptr(), t.shape, t.stride()
        self._entries[key] = entry
        return entry

    def _drop(self, key: int, ref) -> None:
        e = self._entries.get(key)
        if e is not None and e[0] is ref:
            del self._entries[key]

    def pop(self, t: torch.Tensor) -> None:
        if self.get(t) is not None:
            del self._entries[id(t)]

    def __contains__(self, t) -> bool:
        return self.get(t) is not None

    def __len__(self) -> int:
        return len(self._entries)


_RESIDENT = ResidencyTable()  # the resident tensors


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
    """The run of a single-region ``plan`` (CPU or GPU) whose written inputs ``written`` (program
    input indices, in the order of their new values, which end the plan's outputs but for
    ``trailing`` more) are kept resident where ``marked`` (``mark_aliased_writes``'s
    result) aliases them (module docstring). ``run(tensors)`` returns what ``plan.run``
    returns, with every written input already holding its new value: the caller does no
    write-back. Raises ValueError for another plan; an XLA runtime error as
    ``ExecutionError`` (``XlaStep.execute``)."""

    def __init__(self, plan: Plan, written: Sequence[int], marked: dict[int, tuple[int, int]],
                 trailing: int = 0):
        if not plan._single:
            raise ValueError("internal: resident writes need a single-region plan")
        self.plan = plan
        self.written = list(written)
        self.trailing = trailing  # outputs after the new values (the checks' code)
        self.marked = dict(marked)  # written input -> (region argument, region result)
        self._at = {q: i for i, (q, _) in self.marked.items()}  # region argument -> input
        self._into = {r: i for i, (_, r) in self.marked.items()}  # region result -> input
        # the region results no written input's memory holds (exported at each call)
        self._others = [r for r in range(len(plan._step.outputs)) if r not in self._into]
        # written inputs whose donated run put the result at the argument's address: the
        # executable's input/output aliasing, the same at every run
        self._checked: set[int] = set()
        # The region's own import cache, by region argument: only the arguments the
        # executable donates are imported at every call. (The plan's cache serves program
        # input positions too, so it leaves out every position either numbering donates:
        # a model's buffers, the batch and the scalar tables would be imported again at
        # each call, ~65 us of BERT tiny's step.)
        step = plan._step
        self._imports = dlpack.ArgumentImports(
            plan._jax_device, len(step.inputs), plan._on_cpu,
            fixed_shapes=plan._imports._fixed, uncached=step.donated)
        self._gpu = None if plan._on_cpu else plan.device  # (stream ordering, module doc)
        self._gpu_failed = False

    def _resident(self, t: torch.Tensor):
        """``_make_resident`` for this plan's device. On a GPU, where the path has not run
        in CI, a failure to make the memory (``__cuda_array_interface__``, PJRT's buffer
        pointer) turns residency off for this program with a warning: its writes are then
        copied back, as before residency (the values are the same)."""
        if self._gpu is None:
            return _make_resident(t, self.plan._jax_device, self.plan.device)
        if self._gpu_failed:
            return None
        try:
            return _make_resident(t, self.plan._jax_device, self.plan.device)
        except Exception as e:  # noqa: BLE001 (any failure: the copying path is kept)
            import warnings

            self._gpu_failed = True
            warnings.warn(f"thunder_mlir: written inputs are not kept resident on "
                          f"{self.plan.device} ({type(e).__name__}: {e}); their new values "
                          "are copied back after each call instead", RuntimeWarning,
                          stacklevel=3)
            return None

    def run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan, marked = self.plan, self.marked
        step = plan._step
        inputs = [*tensors, draw_seed(plan.device)] if plan.seeded else list(tensors)
        order = plan._order
        region_inputs = inputs if order is None else [inputs[i] for i in order]
        held_by = {}  # written input -> its residency entry, whose array is donated
        get = _RESIDENT.get
        for i in marked:
            t = tensors[i]
            held = get(t)
            if held is None or held[2] != t.data_ptr() or held[3] != t.shape \
                    or held[4] != t.stride() or held[1].is_deleted():
                held = self._resident(t)
                if held is None:
                    continue
            held_by[i] = held
        gpu = self._gpu
        try:
            if held_by and gpu is not None:  # torch's work on the memory is done
                torch.cuda.current_stream(gpu).synchronize()
            args = self._imports.buffers(region_inputs) if not held_by else \
                self._arguments(region_inputs, held_by)
            outs = step.execute(args, plan._jax_device)
        except BaseException:
            _lost(tensors, held_by)
            raise
        del args
        if held_by and gpu is not None:  # XLA's writes are done before torch reads them
            for i in held_by:
                outs[self.marked[i][1]].block_until_ready()
        # the results computed into resident memory are not exported: the written tensor
        # already is that memory (the caller drops these outputs)
        on_cpu = gpu is None
        exported = [None] * len(outs)
        for r, x in zip(self._others,
                        dlpack.to_torch_many([outs[r] for r in self._others], on_cpu)):
            exported[r] = x
        for r, i in self._into.items():
            exported[r] = tensors[i] if i in held_by else dlpack.to_torch(outs[r], on_cpu)
        pick = plan._pick
        result = exported if pick is None else \
            [exported[j] if j >= 0 else inputs[~j] for j in pick]
        self._write(tensors, held_by, outs, result)
        return result

    def _arguments(self, region_inputs, held_by) -> list:
        """The region's arguments, each resident written input's array (donated) at its
        aliased argument."""
        args = list(region_inputs)
        at = self._at
        imp = self._imports.buffer
        for q, t in enumerate(region_inputs):
            i = at.get(q)
            held = None if i is None else held_by.get(i)
            args[q] = imp(q, t) if held is None else held[1]
        return args

    def _write(self, tensors, held_by, outs, result) -> None:
        """Give every written input its new value: a resident one whose array was donated
        has it in its own memory already (XLA computed the aliased result there: the
        entry takes the result's array, which owns that memory now), a resident one PJRT
        did not donate and the others a copy (``write_back``)."""
        k = len(self.written)
        first = len(result) - self.trailing - k
        copies, dsts, bumped = [], [], []
        checked = self._checked
        for w, i in enumerate(self.written):
            t = tensors[i]
            held = held_by.get(i)
            if held is not None:
                out = outs[self.marked[i][1]]
                if held[1].is_deleted():  # donated: computed in place
                    if i not in checked:  # (the executable's aliasing: checked once each)
                        if out.unsafe_buffer_pointer() != held[2]:
                            raise RuntimeError(
                                "internal: XLA computed an aliased result of a donated "
                                "buffer into other memory (thunder_mlir/runtime/resident.py)")
                        checked.add(i)
                    held[1] = out
                    bumped.append(t)
                    continue
                copies.append(dlpack.to_torch(out, self._gpu is None))  # a copy ran
            else:
                copies.append(result[first + w])
            dsts.append(t)
        if bumped:  # (an in-place write's version bump, as eager's optimizer makes)
            _set_versions(tuple(bumped), tuple(t._version + 1 for t in bumped))
        if dsts:
            with torch.no_grad():
                write_back(dsts, range(len(dsts)), copies)


class _CudaMemory:
    """``_Memory`` on a GPU: the memory as ``__cuda_array_interface__`` (version 3, no
    stream: the callers order it, module docstring); ``torch.as_tensor`` keeps this object
    alive as long as the storage it makes."""

    __slots__ = ("entry", "__cuda_array_interface__")

    def __init__(self, entry: list, address: int, nbytes: int):
        self.entry = entry
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                         "typestr": "|u1", "version": 3, "stream": None}


class _Memory:
    """What the torch storage of a resident tensor holds: its residency entry, whose
    array owns the memory (``entry[1]``, renewed by each step with the result computed
    there), and that memory as numpy's ``__array_interface__`` (the storage is made by
    ``torch.from_numpy``, numpy's array keeping this object as its base). So the memory
    lives while any tensor, view or storage object of it lives, and PJRT knows of no
    external reference to the array: it donates it to each run."""

    __slots__ = ("entry", "__array_interface__")

    def __init__(self, entry: list, address: int, nbytes: int):
        self.entry = entry
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _make_resident(t: torch.Tensor, device, torch_device: torch.device):
    """Move ``t`` into a new XLA buffer of jax's own on ``device``, the jax device of the
    program's ``torch_device`` (its values copied;
    ``t.data`` = a tensor on that memory, ``_Memory``) and return its new residency
    entry, if nothing but ``t`` holds ``t``'s storage: the old storage must be freed by
    the swap (a weak reference says), else ``t`` gets it back and None. None also for a
    tensor that is not a plain dense contiguous one filling its storage, or not on the
    program's device (a CPU scalar beside a GPU's tensors, frontend/cpu_scalars.py)."""
    if t.grad_fn is not None or not t.is_contiguous() or t.numel() == 0 \
            or t.storage_offset() != 0 or t.is_conj() or t.is_neg() \
            or t.device.type != torch_device.type \
            or (t.is_cuda and t.device.index != torch_device.index):
        return None
    storage = t.untyped_storage()
    nbytes = t.numel() * t.element_size()
    if storage.nbytes() != nbytes:
        return None
    import jax
    import numpy as np

    # a buffer of jax's own, copied from a scratch tensor's import (never an import of
    # t's memory, which PJRT could hold past the run)
    scratch = dlpack.to_xla(torch.empty(t.shape, dtype=t.dtype, device=t.device), device)
    array = jax.device_put(scratch, device, may_alias=False)
    del scratch
    array.block_until_ready()
    entry = [None, array, None, None, None]
    if t.is_cpu:
        memory = torch.from_numpy(np.asarray(_Memory(entry, array.unsafe_buffer_pointer(),
                                                     nbytes)))
    else:
        memory = torch.as_tensor(_CudaMemory(entry, array.unsafe_buffer_pointer(), nbytes),
                                 device=t.device)
    new = memory.view(t.dtype).view(t.shape)
    with torch.no_grad():
        new.copy_(t)
    weak = storage._weak_ref()
    del storage
    try:
        t.data = new
        if torch.UntypedStorage._expired(weak):
            return _RESIDENT.set(t, entry)
        old = torch.UntypedStorage._new_with_weak_ptr(weak)
        t.data = torch.empty(0, dtype=t.dtype, device=t.device).set_(old, 0, new.shape,
                                                                     new.stride())
        return None
    finally:
        torch.UntypedStorage._free_weak_ref(weak)


def _lost(tensors, held_by) -> None:
    """After a failed import or run: a resident written input whose array the run had
    been given (donated) has lost its memory and values; such a tensor is left empty and
    a warning says so. The others are as before the call."""
    lost = []
    for i, held in held_by.items():
        if held[1].is_deleted():
            lost.append(i)
            _RESIDENT.pop(tensors[i])
            tensors[i].data = torch.empty(0, dtype=tensors[i].dtype, device=tensors[i].device)
    if lost:
        import warnings

        warnings.warn(f"thunder_mlir: the compiled program failed after its inputs "
                      f"{lost} were donated to it; their values are lost (the tensors are "
                      "left empty, and views of them taken earlier must not be read). "
                      "Reload them (load_state_dict) before the next step.",
                      RuntimeWarning, stacklevel=3)
