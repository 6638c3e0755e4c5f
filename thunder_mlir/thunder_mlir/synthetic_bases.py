"""Synthetic bases: inputs that share memory, one of them written in place, run as eager's.

A program traces each tensor input as memory of its own, and writes its written inputs
back after the run (runtime/write_back.py). Where two inputs overlap in memory (``f(x,
x[0])``, two overlapping slices of one buffer) and one is written, eager's write shows
through the other: its later reads see it, and so do the caller's tensors. AOTAutograd
calls the remedy a *synthetic base*; this module builds it at the call boundary.

When ``runtime.write_back.inputs_overlap`` finds such a call, ``call`` runs another
program for it instead: the *members* (every tensor input over the written memory) are
replaced by one *base* input per group, a dense 1-D tensor over their storage from offset
0 to the last element any member reaches; inside the program each member is regenerated
as ``base.as_strided(size, stride, storage_offset)`` with the caller's geometry (view
replay), the user's function runs on those views, so functionalization turns every write
through one of them into a write of the base that all the others read, and the base is
the one input written back. Output views of members come back as views of the caller's
storage, and an output that *is* a member comes back as the caller's tensor itself.

The program is traced per *layout* (which inputs are members, their sizes, strides and
offsets, each base's length): ``layout`` is its key, kept on the cache entry of the call's
ordinary program (``CacheEntry.synthetic``), which the cache key (input metadata) found.
A call whose inputs do not overlap never gets here, so the common path's cost is the
overlap check it already had.

Autograd: the base is a view of the members' common base in autograd's sense (``t._base``,
or the tensor itself), made in the call's grad mode, so gradients and a write with a value
that requires grad reach the caller's tensors as eager's do (a ``CopySlices`` on the common
base; every member's ``grad_fn`` is regenerated from it). Refused with
``UnsupportedError``, before anything is written, where that cannot hold:

* members of different dtypes, or a conjugate or negative view (the base holds one dtype);
* gradients involved (a member requires grad, or, in grad mode, any input does) and the
  members are not views of one tensor with its ``requires_grad`` (a ``.detach()`` alias, two
  tensors over one storage made apart): eager's histories then differ per member;
* an in-place view op (``t_``, ``squeeze_``...) under ``no_grad()`` on a member that
  requires grad;
* a module's call, inputs held in objects, or ``thunder_mlir.grad``.
"""

from __future__ import annotations

import warnings

import optree
import torch

from thunder_mlir.errors import RecompileWarning, UnsupportedError
from thunder_mlir.frontend import aliasing, pytrees
from thunder_mlir.frontend.locations import user_stacklevel
from thunder_mlir.frontend.metadata_writes import NO_GRAD_RESTRIDE
from thunder_mlir.frontend.torch_internals import set_version
from thunder_mlir.runtime.write_back import span


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _end(t: torch.Tensor) -> int:
    """One past the last storage element (in ``t``'s dtype) ``t`` reaches."""
    return t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1


def groups(tensors: list, written) -> list[list[int]]:
    """The tensor-input indices that need a base, as lists, one per base: each written
    input that overlaps another input, with every input of its storage that starts before
    the group's end (the base spans the storage from offset 0 to there, so every input
    over that memory is regenerated from it: none is written back apart from it).
    Empty tensors hold no memory and are never members."""
    spans = {k: span(t) for k, t in enumerate(tensors) if t.numel()}
    found, seen = [], set()
    for w in written:
        if w in seen or w not in spans:
            continue
        lo, hi = spans[w]
        if not any(k != w and a < hi and lo < b for k, (a, b) in spans.items()):
            continue
        store = _storage(tensors[w])
        same = {k for k in spans if _storage(tensors[k]) == store}
        members, end = {w}, spans[w][1]
        while True:
            more = {k for k in same - members if spans[k][0] < end}
            if not more:
                break
            members |= more
            end = max(spans[k][1] for k in members)
        seen |= members
        found.append(sorted(members))
    return found


def _why_not(tensors: list, group: list[int], any_grad: bool):
    """(the tensor to make the base from, None) or (None, the reason no base can keep
    eager's meaning)."""
    ts = [tensors[k] for k in group]
    if len({t.dtype for t in ts}) > 1:
        return None, "they have different dtypes (one base holds one dtype)"
    if any(t.is_conj() or t.is_neg() for t in ts):
        return None, "one is a conjugate or negative view"
    roots = {id(t._base if t._base is not None else t): t._base if t._base is not None
             else t for t in ts}
    if len(roots) == 1:
        (root,) = roots.values()
        if root.dtype == ts[0].dtype and _storage(root) == _storage(ts[0]) and \
                all(t.requires_grad == root.requires_grad for t in ts):
            return root, None
    if any(t.requires_grad for t in ts) or any_grad:
        return None, ("gradients are involved and they are not views of one tensor with "
                      "its requires_grad (a .detach() alias, tensors over one storage made "
                      "apart, a view made under no_grad): eager's autograd histories differ "
                      "per tensor")
    return ts[0], None


def layout(tensors: list, written):
    """(key, bases) for a call whose written inputs overlap others: ``key`` the layout
    (per group: the members' (index, size, stride, storage offset, index of the first
    member that is the same object), the base's length),
    ``bases`` the base tensors of this call; or (None, (i, j, reason)) naming two inputs
    that share memory and why no base can keep eager's meaning."""
    any_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    key, bases = [], []
    for group in groups(tensors, written):
        source, why = _why_not(tensors, group, any_grad)
        if why is not None:
            w = next(k for k in group if k in set(written))
            return None, (w, next(k for k in group if k != w), why)
        n = max(_end(tensors[k]) for k in group)
        bases.append(source.as_strided((n,), (1,), 0))
        # (the first member that is the same object: f(x, x) gets one view twice)
        first = {id(tensors[k]): k for k in reversed(group)}
        key.append((tuple((k, tuple(tensors[k].shape), tuple(tensors[k].stride()),
                           tensors[k].storage_offset(), first[id(tensors[k])])
                          for k in group), n))
    return tuple(key), bases


_RESTRIDE_REFUSED = (
    "an in-place view op (t_, transpose_, squeeze_, unsqueeze_, as_strided_) under "
    "no_grad() on an input that requires grad and shares memory with another input "
    "written in place: the program regenerates it from their common base (a synthetic "
    "base) and cannot give the caller's tensor eager's history. Use the out-of-place op "
    "(x = x.t()), run it in grad mode, or pass a .clone().")


def program(fn, spec, positions, key) -> callable:
    """The function traced for a layout ``key``: ``(bases, rest)`` -> ``(fn's result,
    same, geometry)``, where ``rest`` holds the call's leaves (``pytrees.flatten`` of
    ``(args, kwargs)``, tree structure ``spec``) with None at the members, ``same`` the
    (output leaf, member leaf) pairs where ``fn`` returned a member itself, and
    ``geometry`` each member's (size, stride, storage offset) after ``fn``: an in-place
    view op changes it, replayed on the caller's tensor after the run. An in-place view
    op under no_grad() on a member that requires grad raises NotImplementedError
    (metadata_writes.py)."""
    def synthetic(bases, rest):
        leaves = list(rest)
        views = []
        made = {}
        for (members, _), base in zip(key, bases):
            for (k, size, stride, offset, first) in members:
                if first not in made:
                    made[first] = base.as_strided(size, stride, offset)
                    setattr(made[first], NO_GRAD_RESTRIDE, _RESTRIDE_REFUSED)
                leaves[positions[k]] = made[first]
                views.append((positions[k], made[first], (size, stride, offset)))
        args, kwargs = optree.tree_unflatten(spec, leaves)
        out = fn(*args, **kwargs)
        flat = optree.tree_leaves(out, none_is_leaf=True, namespace=pytrees.NAMESPACE)
        same = tuple((i, next(pos for pos, v, _ in views if o is v))
                     for i, o in enumerate(flat) if any(o is v for _, v, _ in views))
        geometry = []
        for _, v, before in views:
            with torch._C.DisableTorchFunction():  # (meta tensors: not traced)
                m = aliasing.eager_meta(v)
            after = before if m is None else (
                tuple(m.shape), tuple(m.stride()), m.storage_offset())
            geometry.append(after)
        return out, same, tuple(geometry)
    synthetic.__qualname__ = f"{getattr(fn, '__qualname__', 'fn')} (synthetic bases)"
    return synthetic


def call(jitted, entry, args: tuple, kwargs: dict, tensors: list, paths,
         module: bool = False, objects: bool = False):
    """Run ``jitted`` (a ThunderFunction) on a call whose written inputs
    (``entry.mutated_inputs``) overlap other inputs, through a synthetic base (module
    docstring); ``entry``: the cache entry the call's key found, ``tensors`` its tensor
    leaves, ``paths`` a callable giving their argument paths (messages). Returns the
    result as eager's; raises UnsupportedError (``refuse``) where no base keeps eager's
    meaning, and for a module's call (``module``) or inputs held in objects (``objects``):
    the program's inputs there are more than the call's arguments."""
    ids = [id(t) for t in tensors]
    written = sorted(set(entry.mutated_inputs) | {
        i for i in entry.restrided_inputs if ids.count(ids[i]) > 1})
    if module or objects or jitted.joint is not None:
        refuse(tensors, written, paths, None,
               "a module's parameters, buffers and attributes are inputs of their own"
               if module else "the inputs are held in objects" if objects else
               "thunder_mlir.grad has no autograd node to write a base through")
    key, bases = layout(tensors, written)
    if key is None:
        refuse(tensors, written, paths, bases[:2], bases[2])
    leaves, spec = pytrees.flatten((args, kwargs))
    positions = [k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    if len(positions) != len(tensors) or any(
            leaves[p] is not t for p, t in zip(positions, tensors)):  # (not expected)
        refuse(tensors, written, paths, None, "the inputs are held in objects")
    if entry.synthetic is None:
        entry.synthetic = {}
    inner = entry.synthetic.get(key)
    if inner is None:
        if len(entry.synthetic) == jitted.cache.recompile_limit:
            warnings.warn(
                f"{jitted.cache.name} has compiled {len(entry.synthetic) + 1} programs for "
                "inputs that share memory, one per layout (which inputs overlap, their "
                "sizes, strides and storage offsets; limit "
                f"{jitted.cache.recompile_limit}). Pass the whole buffer and slice it inside "
                "the function, or pass tensors that do not overlap.", RecompileWarning,
                stacklevel=user_stacklevel())
        inner = type(jitted)(program(jitted.fn, spec, positions, key),  # (ThunderFunction)
                                sharp_edges=jitted.sharp_edges, executors=jitted.executors,
                                dynamic=False, recompile_limit=jitted.cache.recompile_limit)
        entry.synthetic[key] = inner
    order = [k for group, _ in key for k, *_ in group]
    at = {positions[k] for k in order}
    rest = tuple(None if p in at else x for p, x in enumerate(leaves))
    had_grad = [tensors[k].requires_grad for k in order]
    out, same, geometry = inner(tuple(bases), rest)
    jitted.last = inner.last
    for k, rg, (size, stride, offset) in zip(order, had_grad, geometry):  # in-place view ops
        t = tensors[k]
        if (tuple(t.shape), tuple(t.stride()), t.storage_offset()) != (size, stride, offset):
            # (eager's ran before the writes: without history where the tensor had none,
            # and before the reads the program saved for backward, at this version)
            version = t._version
            with torch.set_grad_enabled(rg and torch.is_grad_enabled()):
                t.as_strided_(size, stride, offset)
            set_version(t, version)
    if same:
        flat, out_spec = optree.tree_flatten(out, none_is_leaf=True,
                                             namespace=pytrees.NAMESPACE)
        for i, pos in same:
            flat[i] = leaves[pos]
        out = optree.tree_unflatten(out_spec, flat)
    return out


def refuse(tensors, written, paths, pair, why: str) -> None:
    """Raise UnsupportedError naming two inputs that share memory (``pair``; None: the
    first written input that overlaps another) and ``why`` no synthetic base runs them."""
    if pair is None:
        found = groups(tensors, written)
        if found:
            w = next(k for k in found[0] if k in set(written))
            pair = (w, next(k for k in found[0] if k != w))
        else:  # (an empty tensor passed twice)
            w = written[0]
            pair = (w, next(k for k, t in enumerate(tensors) if t is tensors[w] and k != w))
    names = [f"{p} {tuple(t.shape)}" for p, t in zip(paths(), tensors)]
    i, j = pair
    raise UnsupportedError(
        f"the inputs {names[i]} and {names[j]} share memory, and the function writes "
        f"{names[i]} in place. Eager's write shows through the other input; thunder_mlir "
        f"runs such calls through a synthetic base (one input over their memory), but not "
        f"here: {why}. Pass tensors that do not overlap (e.g. a `.clone()` of one of them).")
