"""The sugar between torch-level symbols and prims: broadcasting, type promotion, scalars.

Type promotion is torch's own (``torch._prims_common.elementwise_dtypes``, the rule
PyTorch's reference implementations use), evaluated on meta tensors, so Python scalars,
0-d tensors and integer division follow torch exactly.
"""

from __future__ import annotations

from numbers import Number
from typing import Sequence

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes

from thunder_mlir.ir import prims, symbolic
from thunder_mlir.ir.proxy import TensorProxy

__all__ = ["Kind", "full_like", "promote", "broadcast_shape", "broadcast_shapes", "expand_to",
           "lift", "canonical_dim", "canonical_dims", "elementwise_binary", "elementwise_unary"]


def _meta(x):
    # type promotion reads dtypes and ranks only: a proxy's traced-call sizes will do
    return x.dtype_meta if type(x) is TensorProxy else x


def promote(*args, kind: Kind = Kind.DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op over ``args`` (torch rules)."""
    return elementwise_dtypes(*[_meta(a) for a in args if a is not None],
                              type_promotion_kind=kind)


def broadcast_shape(*args) -> tuple[int, ...]:
    """torch.broadcast_shapes over the tensor arguments (numbers are 0-d)."""
    shapes = [a.tshape for a in args if type(a) is TensorProxy]
    return broadcast_shapes(*shapes) if shapes else ()


def broadcast_shapes(*shapes) -> tuple:
    """``torch.broadcast_shapes``, also for shapes with symbolic sizes (ir/symbolic.py)."""
    if not any(symbolic.is_symbolic(s) for s in shapes):
        return tuple(torch.broadcast_shapes(*shapes))
    return _broadcast_symbolic(shapes)


def _broadcast_symbolic(shapes) -> tuple:
    """torch.broadcast_shapes for shapes with symbolic sizes (ir/symbolic.py): a size 1
    stretches; other sizes must be equal (a comparison of symbols becomes a guard).

    A dim whose sizes are the literal 1 and one same expression (``(u,) (u, 1)``) is that
    expression with no comparison: the result holds whatever the size is, 1 included
    (torch's size-oblivious broadcast). A data-dependent size may be 0 or 1
    (``ShapeEnv.new_unbacked``): asking it ``== 1`` would record a guard that a size of 1
    fails, and the program would be traced again for it."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    settled = set()
    for i in range(rank):
        sizes = [s[i - rank + len(s)] for s in shapes if i >= rank - len(s)]
        others = [n for n in sizes if not (type(n) is int and n == 1)]
        if others and any(type(n) is symbolic.SymInt for n in others) and \
                all(symbolic.same_shape((n,), (others[0],)) for n in others[1:]):
            out[i] = others[0]
            settled.add(i)
    for s in shapes:
        for i, n in enumerate(s, rank - len(s)):
            if i in settled or n == 1:
                continue
            if out[i] == 1:
                out[i] = n
            elif not (out[i] == n):
                raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} cannot be broadcast "
                                   f"(dim {i}: {out[i]} vs {n})")
    return tuple(out)


def expand_to(x: TensorProxy, shape: Sequence[int]) -> TensorProxy:
    """Broadcast ``x`` to ``shape`` with numpy/torch alignment (trailing dims)."""
    shape = tuple(shape)
    if symbolic.same_shape(x.tshape, shape):
        return x
    offset = len(shape) - len(x.tshape)
    if offset < 0:
        raise ValueError(f"cannot broadcast shape {x.tshape} to {shape}")
    # drop size-1 dims that expand, so broadcast_in_dim sees exact sizes or 1s only
    return prims.broadcast_in_dim(x, shape, list(range(offset, len(shape))))


def lift(x, dtype: torch.dtype, shape: Sequence[int]) -> TensorProxy:
    """A proxy of ``dtype`` and ``shape`` from a proxy (convert + broadcast) or a number."""
    if type(x) is TensorProxy:
        return expand_to(prims.convert_element_type(x, dtype), shape)
    if isinstance(x, Number):
        return prims.full(shape, x, dtype)
    raise TypeError(f"expected a tensor or a number, got {type(x).__name__}")


def canonical_dim(dim: int, rank: int) -> int:
    """A dim in [-rank, rank) as a non-negative index (rank 0 accepts -1 and 0)."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], "
                         f"but got {dim})")
    return dim % r


def canonical_dims(dims, rank: int) -> list[int]:
    """Sorted, deduplicated non-negative dims (``None``: all dims). For a 0-d tensor the
    accepted dims (-1, 0) name no real dim, so the result is empty (nothing to reduce)."""
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    canon = [canonical_dim(d, rank) for d in dims]
    out = sorted(set(canon))
    if rank > 0 and len(out) != len(canon):  # eager refuses (sum, amax, flip, ...)
        dup = next(d for d in canon if canon.count(d) > 1)
        raise RuntimeError(f"dim {dup} appears multiple times in the list of dims")
    return out if rank > 0 else []


def elementwise_binary(prim: str, a, b, kind: Kind = Kind.DEFAULT) -> TensorProxy:
    """Promote, broadcast and apply binary prim ``prim``; cast to torch's result dtype."""
    comp, res = promote(a, b, kind=kind)
    shape = broadcast_shape(a, b)
    out = prims.elementwise(prim, lift(a, comp, shape), lift(b, comp, shape))
    return prims.convert_element_type(out, res)


def elementwise_unary(prim: str, a: TensorProxy, kind: Kind = Kind.DEFAULT) -> TensorProxy:
    """Apply unary prim ``prim`` in torch's computation dtype; cast to the result dtype."""
    comp, res = promote(a, kind=kind)
    out = prims.elementwise(prim, prims.convert_element_type(a, comp))
    return prims.convert_element_type(out, res)


def full_like(x: TensorProxy, value) -> TensorProxy:
    """A tensor of ``x``'s shape and dtype filled with the Python scalar ``value``."""
    return prims.full(x.tshape, value, x.tdtype)
