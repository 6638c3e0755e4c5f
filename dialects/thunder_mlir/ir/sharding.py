"""Shardings in the ``thunder`` dialect: a device mesh and per-dimension partition specs,
as text attributes, and their GSPMD form (``mhlo.sharding``) for XLA.

Notation (Shardy's, ``sdy``, without the quotes):

* a mesh is ``"[data=2, model=4]"``: named axes and their sizes, major to minor; device
  (partition) ``p`` sits at the mesh position ``numpy.unravel_index(p, sizes)``;
* a spec is ``"[{data}, {}]"``: for each tensor dimension, the mesh axes it is split over
  (major to minor; ``{}`` for none). Axes no dimension uses replicate the tensor.

In the IR: ``thunder.mesh`` (a function attribute) and ``thunder.sharding`` (an argument or
result attribute of that function) hold these strings; the ``thunder.sharding_constraint``
prim carries both as its ``mesh`` and ``spec`` attributes. ``lower-to-stablehlo`` turns
them into GSPMD ``mhlo.sharding`` strings (toolchain.md §7: torch-mlir has no ``sdy``
dialect, and XLA's GSPMD partitioner reads these), computed by ``gspmd``.

GSPMD's tile-assignment form (XLA ``HloSharding::ToString``, xla/hlo/ir/hlo_sharding.cc):
``{devices=[t0,...,t(r-1)(,R)]d0,d1,... (last_tile_dim_replicate)}``: tile ``i`` of the
row-major tile array runs on partition ``d_i``; a trailing dimension ``R`` replicates each
tile over ``R`` partitions.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

MESH_ATTR = "thunder.mesh"          # function attribute: the mesh text
SHARDING_ATTR = "thunder.sharding"  # argument / result attribute: the spec text
GSPMD_ATTR = "mhlo.sharding"        # what lower-to-stablehlo writes

Mesh = tuple[tuple[str, int], ...]   # ((axis, size), ...), major to minor
Spec = tuple[tuple[str, ...], ...]   # per tensor dimension: the axes it is split over

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def format_mesh(mesh: Mesh) -> str:
    """``(("data", 2), ("model", 4))`` -> ``"[data=2, model=4]"``."""
    return "[" + ", ".join(f"{a}={n}" for a, n in mesh) + "]"


def parse_mesh(text: str) -> Mesh:
    """The inverse of ``format_mesh``; raises ValueError on malformed text."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError(f"mesh {text!r}: expected '[axis=size, ...]'")
    out = []
    for part in filter(None, (p.strip() for p in body[1:-1].split(","))):
        m = re.fullmatch(rf"({_NAME})\s*=\s*(\d+)", part)
        if m is None or int(m.group(2)) < 1:
            raise ValueError(f"mesh {text!r}: bad axis {part!r} (expected name=size)")
        out.append((m.group(1), int(m.group(2))))
    if len({a for a, _ in out}) != len(out):
        raise ValueError(f"mesh {text!r}: an axis is named twice")
    return tuple(out)


def format_spec(spec: Spec) -> str:
    """``(("data",), ())`` -> ``"[{data}, {}]"``."""
    return "[" + ", ".join("{" + ", ".join(d) + "}" for d in spec) + "]"


def parse_spec(text: str) -> Spec:
    """The inverse of ``format_spec``; raises ValueError on malformed text."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError(f"sharding {text!r}: expected '[{{axes}}, ...]'")
    dims = re.findall(r"\{([^{}]*)\}", body[1:-1])
    if re.sub(r"\{[^{}]*\}", "", body[1:-1]).replace(",", "").strip():
        raise ValueError(f"sharding {text!r}: expected '[{{axes}}, ...]'")
    out = []
    for d in dims:
        axes = tuple(a.strip() for a in d.split(",") if a.strip())
        if not all(re.fullmatch(_NAME, a) for a in axes):
            raise ValueError(f"sharding {text!r}: bad axis name in {{{d}}}")
        out.append(axes)
    return tuple(out)


def check_spec(mesh: Mesh, spec: Spec, shape: Sequence[int]) -> None:
    """Raise ValueError unless ``spec`` fits a tensor of ``shape`` on ``mesh``: one entry
    per dimension, known axes used at most once, each dimension divisible by the product
    of its axes' sizes (XLA pads uneven shards; thunder_mlir requires even ones so that
    every device holds the same share)."""
    sizes = dict(mesh)
    if len(spec) != len(shape):
        raise ValueError(f"sharding {format_spec(spec)} has {len(spec)} dimensions; the "
                         f"tensor has shape {tuple(shape)}")
    used = [a for d in spec for a in d]
    for a in used:
        if a not in sizes:
            raise ValueError(f"sharding {format_spec(spec)}: no axis {a!r} in mesh "
                             f"{format_mesh(mesh)}")
    if len(set(used)) != len(used):
        raise ValueError(f"sharding {format_spec(spec)}: an axis splits two dimensions")
    for n, d in zip(shape, spec):
        k = math.prod(sizes[a] for a in d)
        if n % k:
            raise ValueError(f"sharding {format_spec(spec)} of shape {tuple(shape)}: "
                             f"dimension of size {n} does not split evenly over {k} devices")


def gspmd(mesh: Mesh, spec: Spec) -> str:
    """The GSPMD ``mhlo.sharding`` string of ``spec`` on ``mesh`` (module docstring), e.g.
    ``[{data}, {}]`` on ``[data=8]`` -> ``{devices=[8,1]0,1,2,3,4,5,6,7}``, and
    ``{replicated}`` when no dimension is split."""
    names = [a for a, _ in mesh]
    sizes = dict(mesh)
    tiles = [math.prod(sizes[a] for a in d) for d in spec]
    used = [a for d in spec for a in d]
    if not used:
        return "{replicated}"
    unused = [a for a in names if a not in used]
    replicas = math.prod(sizes[a] for a in unused)
    perm = [names.index(a) for a in used + unused]
    # partition ids laid out as the mesh, axes reordered as the tiles enumerate them
    devices = np.arange(math.prod(n for _, n in mesh)).reshape([n for _, n in mesh])
    devices = devices.transpose(perm).ravel().tolist()
    dims = tiles + ([replicas] if replicas > 1 else [])
    tail = " last_tile_dim_replicate" if replicas > 1 else ""
    return "{devices=[" + ",".join(map(str, dims)) + "]" + ",".join(map(str, devices)) + tail + "}"
