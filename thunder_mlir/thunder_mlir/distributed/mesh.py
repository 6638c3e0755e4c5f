"""``DeviceMesh``: named axes over the devices jax sees (all processes' devices under
``jax.distributed``), and the placement of sharded arrays on it."""

from __future__ import annotations

import math
from typing import Sequence

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.ir import sharding


class DeviceMesh:
    """A logical mesh ``{"data": 2, "model": 4}`` over ``devices`` (default
    ``jax.devices()``, whose order spans the processes of a ``jax.distributed`` run),
    laid out row-major: partition ``p`` of the compiled SPMD program runs on
    ``devices[p]``, at mesh position ``numpy.unravel_index(p, sizes)`` (ir/sharding.py).

    Attributes: ``axes`` (((name, size), ...)), ``devices`` (the flat device list),
    ``jax_mesh`` (``jax.sharding.Mesh``). Raises UnsupportedInputError when the sizes do
    not multiply to the number of devices."""

    def __init__(self, axes: dict[str, int], devices: Sequence | None = None):
        import jax
        import numpy as np

        if not axes or not all(isinstance(k, str) and isinstance(v, int) and v >= 1
                               for k, v in axes.items()):
            raise UnsupportedInputError(f"mesh({axes!r}): give {{axis name: size >= 1}}")
        devices = list(jax.devices() if devices is None else devices)
        self.axes: sharding.Mesh = tuple((k, int(v)) for k, v in axes.items())
        n = math.prod(v for _, v in self.axes)
        if n != len(devices):
            raise UnsupportedInputError(
                f"mesh({axes!r}) has {n} positions but there are {len(devices)} devices; "
                "on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax "
                "starts to get N devices")
        sharding.parse_mesh(self.text)  # validates the names
        self.devices = devices
        self.jax_mesh = jax.sharding.Mesh(
            np.array(devices, dtype=object).reshape([v for _, v in self.axes]),
            tuple(k for k, _ in self.axes))

    @property
    def size(self) -> int:
        """The number of devices (partitions)."""
        return len(self.devices)

    @property
    def text(self) -> str:
        """The mesh in the IR's notation, ``[data=2, model=4]``."""
        return sharding.format_mesh(self.axes)

    def axis_size(self, name: str) -> int:
        """The size of axis ``name`` (1 for an axis the mesh does not have)."""
        return dict(self.axes).get(name, 1)

    def named_sharding(self, spec: sharding.Spec):
        """The ``jax.sharding.NamedSharding`` of ``spec`` on this mesh."""
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.jax_mesh,
                             PartitionSpec(*[d if len(d) > 1 else (d[0] if d else None)
                                             for d in spec]))

    def __repr__(self) -> str:
        return f"DeviceMesh({dict(self.axes)!r})"


def normalize_spec(spec, rank: int) -> sharding.Spec:
    """A user's per-dimension spec — a sequence with, per dimension, an axis name, a tuple
    of axis names or None; shorter than ``rank`` means the trailing dimensions are
    replicated (as ``jax.sharding.PartitionSpec``) — as a ``sharding.Spec``."""
    if isinstance(spec, str):
        spec = (spec,)
    spec = list(spec)
    if len(spec) > rank:
        raise UnsupportedInputError(f"sharding spec {spec!r} has more entries than the "
                                    f"tensor's {rank} dimensions")
    out = []
    for d in spec + [None] * (rank - len(spec)):
        if d is None:
            out.append(())
        elif isinstance(d, str):
            out.append((d,))
        else:
            out.append(tuple(d))
    return tuple(out)
