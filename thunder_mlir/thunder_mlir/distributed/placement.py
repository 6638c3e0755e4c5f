"""Moving torch tensors onto a mesh as sharded jax Arrays and back, and choosing each
parameter's sharding from the strategy (ddp, fsdp) and a tensor-parallel plan."""

from __future__ import annotations

import fnmatch
from typing import Sequence

import torch

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.ir import sharding
from thunder_mlir.runtime import dlpack

from thunder_mlir.distributed.fused import Fused
from thunder_mlir.distributed.mesh import DeviceMesh, normalize_spec

DATA = "data"  # the mesh axis the batch (and, under fsdp, the parameters) is split over
STRATEGIES = ("ddp", "fsdp")


def _plan_entry(name: str, tp_plan: dict | None):
    """The value of the first glob of ``tp_plan`` (``fnmatch``, in the dict's order) that
    matches ``name``, else None."""
    for pattern, spec in (tp_plan or {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            return spec
    return None


def stored_shape(name: str, shape: Sequence[int], tp_plan: dict | None) -> tuple[int, ...]:
    """The shape parameter ``name`` (``shape`` in the model) is held in on the devices:
    ``shape`` itself, or for a ``Fused`` plan entry its last dimension split into parts
    (fused.py)."""
    entry = _plan_entry(name, tp_plan)
    return entry.stored_shape(shape) if isinstance(entry, Fused) else tuple(shape)


def tp_spec(name: str, shape: Sequence[int], tp_plan: dict | None) -> sharding.Spec:
    """The tensor-parallel spec of parameter ``name`` (``shape`` in the model), for its
    stored shape (``stored_shape``): the value of the first glob of ``tp_plan`` that
    matches it, else replicated."""
    entry = _plan_entry(name, tp_plan)
    if isinstance(entry, Fused):
        entry.stored_shape(shape)  # validates
        return entry.stored_spec(len(shape))
    if entry is None:
        return tuple(() for _ in shape)
    return normalize_spec(entry, len(shape))


def param_spec(name: str, shape: Sequence[int], mesh: DeviceMesh, strategy: str,
               tp_plan: dict | None) -> sharding.Spec:
    """The sharding of parameter ``name`` (``shape`` in the model; the spec is of its
    stored shape) and of its gradient and optimizer state.

    ``ddp``: the tensor-parallel spec (replicated without one). ``fsdp`` (ZeRO-3): also
    split over ``"data"``, on the first dimension that the tensor-parallel spec leaves
    free and that divides evenly (dimension 0 first, as torch FSDP2's ``fully_shard``);
    a parameter with no such dimension stays replicated over ``"data"``. Raises
    UnsupportedInputError for a tensor-parallel spec that does not fit."""
    spec = tp_spec(name, shape, tp_plan)
    shape = stored_shape(name, shape, tp_plan)
    try:
        sharding.check_spec(mesh.axes, spec, shape)
    except ValueError as e:
        raise UnsupportedInputError(f"tp_plan for parameter {name!r}: {e}") from None
    n = mesh.axis_size(DATA)
    if strategy != "fsdp" or n == 1 or any(DATA in d for d in spec):
        return spec
    for i, (size, axes) in enumerate(zip(shape, spec)):
        if not axes and size % n == 0:
            return spec[:i] + ((DATA,),) + spec[i + 1:]
    return spec


def batch_spec(t: torch.Tensor, mesh: DeviceMesh, rows: int) -> sharding.Spec:
    """Dimension 0 (``rows`` long, the global batch) split over ``"data"``; the rest
    replicated. Raises UnsupportedInputError for a 0-d tensor or an uneven split."""
    if t.dim() == 0:
        raise UnsupportedInputError("a batch tensor is 0-d; the batch is split on dim 0")
    n = mesh.axis_size(DATA)
    if n == 1:
        return tuple(() for _ in t.shape)
    if rows % n:
        raise UnsupportedInputError(
            f"the batch's dim 0 ({rows}) does not split evenly over the {n} devices of "
            f"the mesh axis {DATA!r}")
    return ((DATA,),) + tuple(() for _ in t.shape[1:])


def put(t: torch.Tensor, mesh: DeviceMesh, spec: sharding.Spec, *, local: bool = False,
        copy: bool = True):
    """A jax Array of ``t`` laid out as ``spec`` on ``mesh``, built from per-device
    shards imported by DLPack (toolchain.md §6, §7). ``local``: ``t`` is this process's
    share of a tensor split on dim 0 (a ``jax.distributed`` run: the global dim 0 is the
    sum over processes); otherwise ``t`` is the whole tensor, held by every process.
    ``copy``: copy the shards (the array must not alias the tensor, e.g. when donated)."""
    import jax

    shape = list(t.shape)
    nproc = jax.process_count()
    if local and nproc > 1:
        shape[0] *= nproc
    named = mesh.named_sharding(spec)
    index_map = named.addressable_devices_indices_map(tuple(shape))
    offset = 0
    if local and nproc > 1:
        offset = min(idx[0].start or 0 for idx in index_map.values())
        end = max(shape[0] if idx[0].stop is None else idx[0].stop
                  for idx in index_map.values())
        if end - offset != t.shape[0]:
            raise UnsupportedInputError(
                f"this process's devices hold rows {offset}:{end} of the global batch, not "
                f"a block of its {t.shape[0]} local rows: order the mesh so that each "
                "process's devices lie along 'data' (e.g. {'data': ..., 'model': ...} with "
                "the model axis within a process)")
    shards = []
    for dev, idx in index_map.items():
        if offset:
            s0 = idx[0]
            idx = (slice((s0.start or 0) - offset, (s0.stop or shape[0]) - offset),) + idx[1:]
        piece = t[idx].contiguous()
        if copy:
            piece = piece.clone()
        shards.append(dlpack.to_xla(dlpack.prepare(piece), dev))
    return jax.make_array_from_single_device_arrays(tuple(shape), named, shards)


def gather(arr, dtype: torch.dtype) -> torch.Tensor:
    """The whole of jax Array ``arr`` as a new torch CPU tensor of ``dtype`` (from every
    process's shards under ``jax.distributed``: ``multihost_utils.process_allgather``)."""
    import jax
    import numpy as np

    if not arr.is_fully_addressable:
        from jax.experimental import multihost_utils

        arr = multihost_utils.process_allgather(arr, tiled=True)
    out = torch.empty(tuple(arr.shape), dtype=dtype)
    for s in (arr.addressable_shards if isinstance(arr, jax.Array) else []):
        if s.replica_id == 0:
            out[s.index] = dlpack.to_torch(s.data, dlpack.is_cpu_array(s.data))
    if not isinstance(arr, jax.Array):
        out.copy_(torch.from_numpy(np.array(arr)))
    return out


def local_value(arr) -> torch.Tensor:
    """A replicated jax Array's value, from this process's first shard (no communication)."""
    data = arr.addressable_shards[0].data
    return dlpack.to_torch(data, dlpack.is_cpu_array(data)).clone()


def device_bytes(arrays, device=None) -> int:
    """Bytes the ``arrays`` hold on ``device`` (default: the first device of the first
    array), from their device buffers."""
    total = 0
    for a in arrays:
        for s in a.addressable_shards:
            if device is None:
                device = s.device
            if s.device == device:
                total += s.data.nbytes
    return total


def check_strategy(strategy: str, mesh: DeviceMesh) -> None:
    """Raise UnsupportedInputError for an unknown strategy. (A mesh without a ``"data"``
    axis is accepted: the batch is then replicated and fsdp shards nothing.)"""
    if strategy not in STRATEGIES:
        raise UnsupportedInputError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
