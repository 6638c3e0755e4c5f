"""Tensors held as plain attributes of a jitted module, and of objects it holds, as
program inputs (issue 48).

Models keep tensors outside their parameters and buffers: litgpt's ``mask_cache``
(``GPT.set_kv_cache``), RoPE ``cos``/``sin`` caches, a KV cache object's tensors, lists and
dicts of tensors. Such a tensor belongs to the jitted module as much as a buffer does, so
it gets a buffer's treatment: it is an *input* of the program, read afresh from the
attribute at every call (its shape, dtype, device and ``requires_grad`` are part of the
cache key), and an in-place write the program makes to it is written back into it after
the run, as eager writes it. Reassigning the attribute between calls is seen by the next
call (a new tensor of the same metadata is read by the same program; another shape is a
recompile), never a stale value.

How: the attribute reads of the module tree and of the objects reached from it are
recorded while tracing (``guards.AttributeRecorder``), each watched object with its
*path* from the jitted module (``("transformer", "h", "0", "kv", "k")``). An attribute read
whose value holds tensors that are not the trace's (a tensor, or a list, tuple or dict of
tensors and plain values) is a *candidate*. Where a candidate tensor reaches an op
(``dispatch._check_no_foreign_tensors``), or when the trace ends with candidates read
(their metadata may have steered it: ``if self.mask_cache.shape[-1] < n``), the trace
stops with ``LiftNeeded``; the module (``module._ModuleState``) adds the paths to its
*lifted* attributes, whose values it reads at every call as program inputs after the
parameters and buffers, and the call is traced again. While a trace runs, each lifted
attribute holds the input proxies (``module._install``; an input list or dict refuses mutation
as every input container does) and holds its own value again afterwards.

Tensors the program assigns to attributes of the module tree or of objects reached from
it (``self.cache = torch.cat([self.cache, k])``) are recorded by path
(``guards.AttributeRecorder.tensor_writes``), returned as state outputs and set on their
holders after every run (``function._object_results``), as eager leaves them.

Tensors reached otherwise keep the foreign-tensor error: globals, closure cells,
attributes of objects reached from them (their value is not re-read at each call by
anything the caller controls through the module), tensors inside lists of objects.
"""

from __future__ import annotations

from typing import Any

import torch

MISSING = object()
_TENSORS = (torch.Tensor, torch.nn.Parameter)


class NotLifted:
    """The value of a lifted attribute that holds no liftable value at this call (it was
    deleted, replaced by another kind of value, or registered as a parameter or buffer):
    nothing is installed for it, and the program reads the attribute as it is. A class,
    so that a cache key holds it by identity."""


class LiftNeeded(BaseException):
    """Raised while tracing a module's forward: the attributes at ``paths`` (from the
    jitted module) hold tensors the program reads. A BaseException, like
    ``value_guards.ValueNeeded``: user code's ``except Exception`` does not swallow it.
    ``module.ThunderModule`` lifts them (program inputs) and traces again."""

    def __init__(self, paths):
        super().__init__(", ".join(".".join(p) for p in paths))
        self.paths = tuple(paths)


def is_foreign_tensor(x) -> bool:
    """A plain tensor or Parameter (not a proxy of the trace, not a tensor subclass,
    which a program input cannot be)."""
    return type(x) in _TENSORS


def _plain(x) -> bool:
    return isinstance(x, (bool, int, float, complex, str, type(None), torch.dtype,
                          torch.device))


def _tensors_of(value) -> list | None:
    """The tensors of ``value`` if it is a tensor, or a tuple, list or dict (plain keys) of
    tensors and plain values, nested; else None."""
    out: list = []

    def walk(v) -> bool:
        t = type(v)
        if t in _TENSORS:
            out.append(v)
            return True
        if t in (list, tuple):
            return all(walk(x) for x in v)
        if t is dict:
            return all(_plain(k) and walk(x) for k, x in v.items())
        return _plain(v)

    return out if walk(value) else None


def tensor_leaves(value) -> list | None:
    """The tensors of a liftable attribute value (``_tensors_of``: a tensor, or a tuple,
    list or dict of tensors and plain values; tensors are plain tensors or Parameters, not
    proxies of the trace or tensor subclasses), or None if ``value`` is not liftable or
    holds no tensor."""
    out = _tensors_of(value)
    return out or None


def holds_traced_tensors(value) -> bool:
    """Whether ``value`` is a proxy of the trace, or a tuple, list or dict (plain keys) of
    proxies, tensors and plain values holding one: what a program may assign to an
    attribute of its module (a state output set after every run)."""
    from thunder_mlir.ir.proxy import TensorProxy

    found = []

    def walk(v) -> bool:
        t = type(v)
        if t is TensorProxy:
            found.append(v)
            return True
        if isinstance(v, torch.Tensor):
            return True
        if isinstance(v, (list, tuple)):
            return all(walk(x) for x in v)
        if isinstance(v, dict):
            return all(_plain(k) and walk(x) for k, x in v.items())
        return _plain(v)

    return walk(value) and bool(found)


def resolve(root, names) -> Any:
    """The object at attribute path ``names`` from ``root``, read from instance
    dictionaries and submodule tables (no property or ``__getattr__`` runs), or MISSING."""
    obj = root
    for n in names:
        obj = attribute(obj, n)
        if obj is MISSING:
            return MISSING
    return obj


def attribute(obj, name: str) -> Any:
    """``obj.name`` from ``obj``'s submodules (an nn.Module) or its instance dictionary, or
    MISSING."""
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return MISSING
    if isinstance(obj, torch.nn.Module):
        sub = d.get("_modules", {}).get(name, MISSING)
        if sub is not MISSING:
            return sub
    return d.get(name, MISSING)


def current_value(root, path) -> Any:
    """The value of lifted attribute ``path`` at this call: the attribute's value, or
    ``NotLifted`` where it is missing, not liftable, or a registered parameter, buffer or
    submodule (those are inputs of their own: module.py)."""
    holder = resolve(root, path[:-1])
    if holder is MISSING:
        return NotLifted
    name = path[-1]
    if isinstance(holder, torch.nn.Module) and any(
            name in getattr(holder, t, ()) for t in ("_parameters", "_buffers", "_modules")):
        return NotLifted
    try:
        value = object.__getattribute__(holder, "__dict__").get(name, MISSING)
    except AttributeError:
        return NotLifted
    if type(value) in _TENSORS:  # (the common case, first)
        return value
    if value is MISSING or not _tensors_of(value):
        return NotLifted
    return value


def module_tensor_attributes(root: torch.nn.Module) -> list[tuple[str, ...]]:
    """The paths of the liftable attributes (``tensor_leaves``) of every module of
    ``root``'s tree, except private ones (``_flat_weights``: a module's own bookkeeping)
    and those holding a parameter or buffer of the tree (inputs of their own). A module
    reachable under two names is visited once, under its first (``named_modules()``, as
    the recorder's paths): one input per attribute, not two overlapping ones."""
    registered = {id(t) for t in root.parameters()} | {id(t) for t in root.buffers()}
    out = []
    for qual, sub in root.named_modules():
        prefix = tuple(qual.split(".")) if qual else ()
        for name, value in vars(sub).items():
            if name[0] == "_":
                continue
            tensors = tensor_leaves(value)
            if tensors and not any(id(t) in registered for t in tensors):
                out.append(prefix + (name,))
    return out
