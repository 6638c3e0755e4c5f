"""Dynamic shapes of a jitted function: which input dimensions are traced as symbols.

As torch.compile (``torch._dynamo``: ``dynamic=``, ``torch._dynamo.mark_dynamic``,
automatic dynamic shapes):

* ``jit(fn, dynamic=True)``: every dimension of every tensor input is a symbol, except
  a module's parameters and buffers (static, as torch's ``force_parameter_static_shapes``)
  and sizes 0 and 1 (specialized, as torch does);
* ``dynamic=None`` (default): a dimension that changed between two compilations of the
  same function at the same input position (everything else in the key equal) is a symbol
  from the next compilation on ("automatic dynamic");
* ``dynamic=False``: always static; ``mark_dynamic`` is ignored;
* ``mark_dynamic(tensor, dim)``: that dimension of that tensor is a symbol (unless
  ``dynamic=False``).

A dynamic dimension stands for any size >= 2 for which the trace's guards hold
(``ir/symbolic.py``): the cache key holds ``None`` for it, and the entry's guard check runs
on each call. When the program cannot be compiled with symbols (``DynamicShapeFallback``:
a size converted to a Python int, a prim without a dynamic lowering, a gradient), the
function is compiled for static shapes from then on, and ``cache_info`` says why.
"""

from __future__ import annotations

from typing import Sequence

import torch

MARK_ATTR = "_thunder_mlir_dynamic_dims"
MARKED = [0]  # mark_dynamic calls so far: the hot path looks at tensors only once any


def mark_dynamic(t: torch.Tensor, dim: int | Sequence[int]) -> None:
    """Mark dimension(s) ``dim`` of ``t`` dynamic for the jitted functions it is passed to
    (``torch._dynamo.mark_dynamic``): they are traced as symbols, so other sizes of them
    reuse the trace. Raises TypeError for a non-tensor, IndexError for a bad dim."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a torch.Tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = set(getattr(t, MARK_ATTR, ()))
    for d in dims:
        if not -t.ndim <= d < t.ndim:
            raise IndexError(f"mark_dynamic: dim {d} of a {t.ndim}-d tensor")
        out.add(d % t.ndim)
    setattr(t, MARK_ATTR, frozenset(out))
    MARKED[0] += 1


class DynamicPolicy:
    """The dynamic-shape state of one jitted function (see the module docstring).

    ``auto``: tensor index -> {dim: reason} of dimensions made dynamic automatically;
    ``disabled``: why symbols are off for this function (a DynamicShapeFallback message),
    or None; ``static_tensors``: leading tensor inputs that stay static (a module's
    parameters and buffers)."""

    def __init__(self, dynamic: bool | None):
        if dynamic not in (True, False, None):
            raise ValueError(f"dynamic must be True, False or None, got {dynamic!r}")
        self.dynamic = dynamic
        self.auto: dict[int, dict[int, str]] = {}
        self.disabled: str | None = None
        self.static_tensors = 0

    def on(self) -> bool:
        """Whether the key needs the dynamic dims computed (cheap: the hot path asks)."""
        return self.disabled is None and self.dynamic is not False and (
            self.dynamic is True or bool(self.auto) or MARKED[0] > 0)

    def dims(self, tensors: Sequence[torch.Tensor]) -> dict[int, tuple[int, ...]]:
        """tensor index -> the dims to trace as symbols at this call (on the hot path of a
        function with dynamic dims: kept lean; ``reasons`` says why, at compile time)."""
        out: dict[int, tuple[int, ...]] = {}
        if needs_grad(tensors):  # no gradients through symbolic sizes: a static program
            return out
        every, auto, marks = self.dynamic is True, self.auto, MARKED[0] > 0
        for i in range(self.static_tensors, len(tensors)):
            t = tensors[i]
            shape = t.shape
            if every:
                ds = tuple([d for d, n in enumerate(shape) if n > 1])
            else:
                cand = set(getattr(t, MARK_ATTR, ())) if marks else set()
                if i in auto:
                    cand.update(auto[i])
                if not cand:
                    continue
                ds = tuple([d for d in sorted(cand) if d < len(shape) and shape[d] > 1])
            if ds:
                out[i] = ds
        return out

    def reasons(self, tensors: Sequence[torch.Tensor],
                dims: dict[int, tuple[int, ...]]) -> dict[int, dict[int, str]]:
        """tensor index -> {dim: why it is symbolic} for ``dims`` (``mark_dynamic`` first,
        then ``dynamic=True``, then the automatic reason)."""
        out = {}
        for i, ds in dims.items():
            marked = getattr(tensors[i], MARK_ATTR, ())
            auto = self.auto.get(i, {})
            out[i] = {d: "mark_dynamic" if d in marked else
                      "dynamic=True" if self.dynamic is True else auto[d] for d in ds}
        return out

    def observe(self, old_metas: Sequence[tuple], metas: Sequence[tuple]) -> bool:
        """Automatic dynamic: when ``metas`` differ from an earlier compiled key's only in
        the sizes of tensors of the same rank, make those dims dynamic. Returns whether
        any dim was added."""
        if self.dynamic is not None or self.disabled is not None or \
                len(old_metas) != len(metas):
            return False
        changed: dict[int, dict[int, str]] = {}
        k = -1
        for a, b in zip(old_metas, metas):
            if a[0] == "tensor" and b[0] == "tensor":
                k += 1
                if a[2:] != b[2:] or len(a[1]) != len(b[1]):
                    return False
                for d, (x, y) in enumerate(zip(a[1], b[1])):
                    if x != y and x is not None and y is not None and k >= self.static_tensors:
                        changed.setdefault(k, {})[d] = f"automatic: size changed {x} -> {y}"
            elif a != b:
                return False
        added = False
        for i, ds in changed.items():
            for d, why in ds.items():
                if d not in self.auto.get(i, {}):
                    self.auto.setdefault(i, {})[d] = why
                    added = True
        return added


GRAD_REASON = ("gradients through symbolic sizes are not supported: a call with grad mode on "
               "and an input that requires grad is compiled for static shapes")


def needs_grad(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether a call may need a backward: grad mode on and an input requiring grad."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def mask(metas: tuple, dims: dict[int, tuple[int, ...]]) -> tuple:
    """The key metadata with ``None`` for the size of each dynamic dim."""
    out, k = list(metas), -1
    for j, m in enumerate(metas):
        if m[0] == "tensor":
            k += 1
            ds = dims.get(k)
            if ds:
                shape = list(m[1])
                for d in ds:
                    shape[d] = None
                out[j] = (m[0], tuple(shape)) + m[2:]
    return tuple(out)


def sizes(tensors: Sequence[torch.Tensor], sources: Sequence[tuple[int, int]]) -> list[int]:
    """The value of each symbol at this call: the size of its (tensor, dim) source."""
    return [tensors[i].shape[d] for i, d in sources]
