"""Scale-out: one program, sharded by XLA's SPMD partitioner (docs/distributed.md).

```python
import thunder_mlir.distributed as dist
mesh = dist.mesh({"data": 8})                    # or {"data": 2, "model": 4}
step = dist.train_step(model, loss_fn, torch.optim.AdamW, mesh, strategy="fsdp",
                       tp_plan=None, lr=1e-3, weight_decay=0.01)
loss = step(*batch)                              # loss_fn(model, *batch) -> scalar
sd = step.state_dict(); step.load_state_dict(sd)
```

The forward, the backward and the optimizer update are traced into one ``thunder``
program whose arguments and results carry shardings (``thunder.mesh`` /
``thunder.sharding``, ir/sharding.py); lowering writes GSPMD ``mhlo.sharding`` and XLA
compiles it with ``num_partitions`` equal to the mesh size, inserting the collectives.
Several processes join one mesh through ``jax.distributed`` (toolchain.md §9): call
``jax.distributed.initialize`` first; each process then passes its local share of the
batch.
"""

from __future__ import annotations

from typing import Callable

import torch

from thunder_mlir.distributed.collectives import Collective, collectives_of
from thunder_mlir.distributed.fused import Fused
from thunder_mlir.distributed.mesh import DeviceMesh, normalize_spec
from thunder_mlir.distributed.step import ShardedModule, TrainStep

__all__ = ["mesh", "train_step", "shard", "with_sharding_constraint", "DeviceMesh", "Fused",
           "TrainStep", "ShardedModule", "Collective", "collectives_of"]


def mesh(axes: dict[str, int], devices=None) -> DeviceMesh:
    """A device mesh with named axes, ``{"data": 8}`` or ``{"data": 2, "model": 4}``, over
    ``devices`` (default ``jax.devices()``: every process's under ``jax.distributed``).
    The sizes must multiply to the number of devices (UnsupportedInputError)."""
    return DeviceMesh(axes, devices)


def train_step(model: torch.nn.Module, loss_fn: Callable, optimizer_cls: type,
               mesh: DeviceMesh, strategy: str = "ddp", tp_plan: dict | None = None,
               **optimizer_kwargs) -> TrainStep:
    """A callable training step: ``step(*batch)`` computes ``loss = loss_fn(model, *batch)``
    (a 0-d float tensor) on the global batch, its gradient with respect to every
    parameter, and ``optimizer_cls(model.parameters(), **optimizer_kwargs).step()``'s
    update — all in one SPMD program — and returns the loss.

    ``strategy``: ``"ddp"`` (parameters replicated, batch split on dim 0 over ``"data"``)
    or ``"fsdp"`` (ZeRO-3: parameters, gradients and optimizer state also split over
    ``"data"``). ``tp_plan``: {parameter-name glob (fnmatch): per-dimension mesh axis,
    tuple of axes or None} — Megatron column parallel is ``{"*.c_attn.weight": (None,
    "model")}`` for an HF Conv1D (weight (in, out)) or ``("model", None)`` for a Linear
    (weight (out, in)); row parallel splits the other dimension; a fused q/k/v projection
    takes ``Fused(3, spec)`` (fused.py: each device gets its own q, k and v heads).
    Optimizers:
    ``torch.optim.SGD`` (momentum, dampening, nesterov, weight_decay, maximize),
    ``torch.optim.AdamW`` and ``torch.optim.Adam`` (amsgrad, maximize), with torch.optim's
    formulas (``thunder_mlir/ir/optimizers.py``, shared with ``jit(opt.step)``).

    The model's tensors are read once and not modified; ``step.state_dict()`` returns
    the trained ones. Raises UnsupportedInputError for programs that cannot be sharded
    (random ops such as dropout with p > 0, torch-fallback ops, in-place buffer updates,
    uneven splits)."""
    return TrainStep(model, loss_fn, optimizer_cls, mesh, strategy, tp_plan,
                     **optimizer_kwargs)


def shard(model: torch.nn.Module, mesh: DeviceMesh, tp_plan: dict | None = None
          ) -> ShardedModule:
    """``model``'s forward for inference as an SPMD program on ``mesh``: parameters split
    by ``tp_plan`` (see ``train_step``), inputs split on dim 0 over ``"data"`` when the
    mesh has that axis, outputs gathered (replicated) and returned as torch tensors."""
    return ShardedModule(model, mesh, tp_plan)


def with_sharding_constraint(x: torch.Tensor, spec, mesh: DeviceMesh | None = None):
    """``x`` constrained to the layout ``spec`` (per dimension: a mesh axis, a tuple of
    axes or None, as ``jax.lax.with_sharding_constraint``'s PartitionSpec) inside a traced
    program: a ``thunder.sharding_constraint`` op, lowered to ``stablehlo.custom_call
    @Sharding``. ``mesh`` defaults to the mesh of the step being traced. On a plain torch
    tensor (eager code) it returns ``x``: a layout has no meaning there."""
    from thunder_mlir.distributed.program import current_mesh, sharding_constraint
    from thunder_mlir.ir import sharding
    from thunder_mlir.ir.proxy import TensorProxy

    if type(x) is not TensorProxy:
        return x
    if mesh is None:
        mesh = current_mesh()
    s = normalize_spec(spec, len(x.tshape))
    sharding.check_spec(mesh.axes, s, x.tshape)
    return sharding_constraint(x, mesh, s)
