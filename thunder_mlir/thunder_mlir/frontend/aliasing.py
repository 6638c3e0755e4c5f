"""Outputs that alias inputs, as in eager: ``return x``, ``x.view(-1)``, ``x[0]``,
``x.detach()``, ``x.t()``, or a view of another output.

A compiled program computes values; eager returns *views*, tensors sharing memory with
their base, so a later in-place update of the output changes the input (and the other way
round), and ``f(x) is x`` when ``f`` returns its input. To give the same objects back, the
tracer remembers how each view was made (``record_view``: the torch function, its
arguments, which of its outputs), and ``output_views`` turns every output whose chain of
views reaches an input (or an earlier output) into a *recipe*: at run time ``apply`` calls
the same torch view functions on the real base tensor, after the program has run and its
in-place write-backs are done. The result is eager's own — a view where eager gives a view,
a copy where eager copies (``reshape`` of a non-viewable tensor), with torch's autograd
view tracking when the input requires grad.

A view made with another traced tensor as an argument is replayed with that argument when
it is an input; a value computed inside the program stands in as an empty tensor of its
metadata (``expand_as``, ``view_as`` read nothing else), except as an index
(``x[computed_0d_index]`` selects by value: refused, NotImplementedError naming the line).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import optree
import torch
from torch_mlir import ir

from thunder_mlir.ir.proxy import TensorProxy

_VIEW_OF = "_view_of"  # proxy attribute: (func, args, kwargs, output index, location)
# proxy attribute of a view: its base required grad when the view was made
BASE_REQUIRED_GRAD = "_base_required_grad"

# Python's augmented assignment methods (the data model's ``object.__iadd__`` list, and
# torch's ``__idiv__``, the ``__name__`` of its ``__itruediv__``) write their first
# argument; ``__int__``, ``__index__``, ``__invert__``, ``__iter__``, ``__init__`` do not
INPLACE_DUNDERS = frozenset(f"__i{op}__" for op in (
    "add", "sub", "mul", "matmul", "truediv", "div", "floordiv", "mod", "pow", "lshift",
    "rshift", "and", "xor", "or"))


def writes_first_argument(func) -> bool:
    """The name rule of a torch op that writes its first argument: a trailing underscore
    (``Tensor.mul_``; torch's convention), ``__setitem__`` or an augmented assignment
    (``__iadd__``, ``INPLACE_DUNDERS``). Used where no meta run can tell."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name == "__setitem__" or \
        name in INPLACE_DUNDERS


# the order in which views and in-place view ops of inputs were made in the trace: proxy
# attribute VIEW_SEQ, and the last field of each ``Trace.input_restrides`` entry
# (``output_views`` makes a view made after an input's in-place view op after it)
VIEW_SEQ = "_view_seq"
_SEQ = itertools.count()


def next_seq() -> int:
    """The next number of ``VIEW_SEQ``'s order."""
    return next(_SEQ)


def mark_views(base, out):
    """Mark each proxy in ``out`` other than ``base`` as a view of ``base``'s root (the
    tensor whose memory they share): its ``_alias_root``, and a weak reference in the
    root's ``_views``, refreshed when the root is written (``refresh_views``). Returns
    ``out``."""
    if type(base) is not TensorProxy:
        return out
    root = getattr(base, "_alias_root", None)
    if root is None:  # (no `or`: bool() of a proxy is a data-dependent error)
        root = base
    for o in optree.tree_leaves(out, none_is_leaf=True):
        if type(o) is TensorProxy and o is not base:
            o._alias_root = root
            root._has_views = True
            if not hasattr(root, "_views"):
                root._views = []
            root._views.append(weakref.ref(o))  # refreshed when root is updated in place
    return out


def record_view(func, args: tuple, kwargs: dict, out) -> None:
    """Remember, on each view among ``out`` (the proxies ``mark_views`` marked), that it is
    output ``k`` of ``func(*args, **kwargs)`` with ``args[0]`` its base. An output of a call
    that may copy (``reshape`` of a tensor that is not dense, ``x[index_tensor]``) and that
    eager computes as a copy is unmarked: it is no view, and writes to its base do not
    reach it."""
    if not args or type(args[0]) is not TensorProxy:
        return
    outs = [o for o in optree.tree_leaves(out, none_is_leaf=True) if type(o) is TensorProxy]
    for k, o in enumerate(outs):
        if o is not args[0] and getattr(o, "_alias_root", None) is not None \
                and not hasattr(o, _VIEW_OF):
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            step = (func, args, kwargs, k if len(outs) > 1 else None,
                    describe_frame(user_frame()), torch.is_grad_enabled())
            if func in _MAY_COPY and _copies(step):
                _unmark(o)
                continue
            if func in _STRIDE_CHECKED:
                _check_strides(step)
            setattr(o, _VIEW_OF, step)
            o.__dict__[VIEW_SEQ] = next(_SEQ)
            # (whether eager's view got a grad_fn when made: ``rebased_view_error``)
            o.__dict__[BASE_REQUIRED_GRAD] = bool(args[0].requires_grad)
            note_unversioned_read(o)
    # (a `.data` read records itself in unversioned_reads when made: none yet, no walk)
    if _has_unversioned_reads() and _unversioned(args[0]):
        for o in outs:
            if o is not args[0] and not hasattr(o, _VIEW_OF) and o.value == args[0].value:
                # a copy of a `.data` read that shares its SSA value (clone(),
                # contiguous()): a value of its own, which the grad pass does not take for
                # the read (eager's copy keeps the value it had when copied)
                from thunder_mlir.ir import prims

                o.value = prims.stop_gradient(o).value


def _eager_meta_call(func, args: tuple, kwargs: dict):
    """``func`` run on meta tensors with eager's layout (``eager_meta``) for the call's
    proxies: ({id(proxy): its meta tensor}, the flat outputs), or None where it cannot run
    on meta (no meta kernel, symbolic sizes)."""
    metas: dict = {}

    def meta(x):
        if type(x) is not TensorProxy:
            return x
        if id(x) not in metas:
            m = eager_meta(x)
            metas[id(x)] = m if m is not None else x.meta
        return metas[id(x)]
    try:
        m_args, m_kwargs = optree.tree_map(meta, (args, kwargs), none_is_leaf=True)
        with torch._C.DisableTorchFunction():
            return metas, optree.tree_leaves(func(*m_args, **m_kwargs), none_is_leaf=True)
    except Exception:  # noqa: BLE001 - the caller keeps its default
        return None


def returns_new_tensor(func, args: tuple, kwargs: dict) -> bool:
    """Whether eager's ``func(*args, **kwargs)`` returns a tensor that is not one of its
    inputs (``x[...]`` is a new view, ``x.contiguous()`` of a dense ``x`` is ``x``), by a
    run on meta tensors; False where it cannot run on meta."""
    ran = _eager_meta_call(func, args, kwargs)
    if ran is None:
        return False
    metas, m_out = ran
    ins = {id(m) for m in metas.values()}
    return any(isinstance(m, torch.Tensor) and id(m) not in ins for m in m_out)


def separate_returned_inputs(func, args: tuple, kwargs: dict, out):
    """``out`` with each output that is one of the call's input proxies, where eager's op
    returns a new tensor (``x.to(x.dtype, copy=True)``, whose symbol returns ``x``), replaced
    by a proxy of its own holding the same value: not the input, so a later write into
    either does not reach the other, and the program does not return it as the input.
    Where eager returns a new *view* of the input (``x[...]`` is ``at::alias``:
    python_variable_indexing.cpp), the new proxy is a view of it (``mark_views``): it
    shares the input's memory and has its own autograd state, as eager's view object.
    Decided by running ``func`` on meta tensors with eager's layout (``eager_meta``); kept
    where eager returns the input itself (``x.to(x.dtype)``, ``contiguous()``, in-place
    ops) or the call cannot run on meta."""
    leaves = optree.tree_leaves(out, none_is_leaf=True)
    ins = {id(a): a for a in optree.tree_leaves((args, kwargs), none_is_leaf=True)
           if type(a) is TensorProxy}
    if not any(type(o) is TensorProxy and id(o) in ins for o in leaves):
        return out
    ran = _eager_meta_call(func, args, kwargs)
    if ran is None or len(ran[1]) != len(leaves):
        return out
    metas, m_out = ran
    fresh = list(leaves)
    for k, (o, m) in enumerate(zip(leaves, m_out)):
        if type(o) is TensorProxy and id(o) in ins and isinstance(m, torch.Tensor) and \
                m is not metas[id(o)]:
            new = TensorProxy(o.value, o.tshape, o.tdtype, o.tdevice)
            with torch._C.DisableTorchFunction():
                torch.Tensor.requires_grad.__set__(new, o.requires_grad)
            if torch._C._is_alias_of(m, metas[id(o)]):  # a new view of the input (x[...])
                mark_views(o, new)
            fresh[k] = new
    return optree.tree_unflatten(optree.tree_structure(out, none_is_leaf=True), fresh)


T = torch.Tensor
# torch calls whose result is a view of the base or a copy, depending on the base's strides
# or the index (torch.reshape's documentation; advanced indexing copies)
_MAY_COPY = {T.__getitem__, torch.reshape, T.reshape, T.reshape_as, torch.flatten, T.flatten,
             torch.unflatten, T.unflatten, torch.ravel, T.ravel}


def _copies(step) -> bool:
    """Whether eager's view step computes a copy: replayed on a meta tensor with eager's
    strides for its base (``eager_meta``). False where that cannot be judged (a 0-d integer
    tensor index reads a value): kept as a view, so a write through it is refused."""
    if step[0] is T.__getitem__:  # advanced indexing copies: any tensor index but a 0-d
        index = step[1][1]          # integer one (read as an int), or a list
        index = index if isinstance(index, tuple) else (index,)
        if any(isinstance(ix, list) or type(ix) is TensorProxy and (
                ix.tshape or ix.tdtype is torch.bool or ix.tdtype.is_floating_point)
               for ix in index):
            return True
    base = eager_meta(step[1][0])
    if base is None:
        return False
    out = replay_step(step, base)
    return out is not None and not torch._C._is_alias_of(out, base)


# views whose eager kernel refuses strides it cannot view without a copy (``view`` of a
# slice): dense here, the traced tensor would not raise
_STRIDE_CHECKED = {T.view, T.view_as}


def _check_strides(step) -> None:
    """Eager's RuntimeError for the view step run on eager's geometry of its base
    (``eager_meta``): "view size is not compatible with input tensor's size and stride",
    raised at the user's line as a TorchOpRuntimeError."""
    with torch._C.DisableTorchFunction():
        base = eager_meta(step[1][0])
    if base is None:
        return
    func, args, kwargs = step[:3]
    try:
        a, kw = optree.tree_map(lambda x: base if x is args[0] else
                                x.meta if type(x) is TensorProxy else x,
                                (args, kwargs), none_is_leaf=True)
        with torch._C.DisableTorchFunction():
            func(*a, **kw)
    except RuntimeError as e:
        if "view size is not compatible" in str(e):
            from thunder_mlir.errors import TorchOpRuntimeError

            raise TorchOpRuntimeError(f"{step[4]}\n  {e}\n  Eager PyTorch raises this "
                                      "RuntimeError too (the view's strides).") from None
    except Exception:  # noqa: BLE001 - not replayable on meta: not judged
        return


def _unmark(o: TensorProxy) -> None:
    root = o._alias_root
    del o._alias_root
    root._views = [r for r in getattr(root, "_views", ()) if r() is not o]


def replay_step(step: tuple, base_meta: torch.Tensor) -> torch.Tensor | None:
    """Output ``k`` of the view step's torch call run with ``base_meta`` (a meta tensor)
    as its base and meta tensors for its other tensor arguments; None if it cannot run on
    meta (an index read from a tensor's value)."""
    func, args, kwargs, k = step[:4]
    base = args[0]

    def meta(x):
        if x is base:
            return base_meta
        return x.meta if type(x) is TensorProxy else x
    a, kw = optree.tree_map(meta, (args, kwargs), none_is_leaf=True)
    try:
        with torch._C.DisableTorchFunction():
            out = func(*a, **kw)
    except Exception:  # noqa: BLE001 - the caller decides
        return None
    outs = [t for t in optree.tree_leaves(out, none_is_leaf=True) if isinstance(t, torch.Tensor)]
    return outs[k or 0]


def eager_meta(p: TensorProxy) -> torch.Tensor | None:
    """A meta tensor with the sizes, strides and storage offset of eager's tensor for
    ``p``: its chain of views replayed on a dense meta tensor of its root (the program's
    inputs are dense, as the runtime makes them, and so are computed tensors). None when
    a size is symbolic or a step cannot run on meta."""
    chain, q = [], p
    while getattr(q, _VIEW_OF, None) is not None:
        chain.append(getattr(q, _VIEW_OF))
        q = chain[-1][1][0]
    if any(type(n) is not int for n in q.tshape):
        return None
    m = torch.empty(q.tshape, dtype=q.tdtype, device="meta")
    for step in reversed(chain):
        m = replay_step(step, m)
        if m is None:
            return None
    return m


def _chain(p: TensorProxy, roots: dict[int, tuple[str, int]]):
    """The view steps from the nearest proper ancestor of ``p`` among ``roots`` (an input
    or another output) to ``p``, outermost last, and that root; None when ``p`` is not a
    view of one."""
    steps = []
    while True:
        made = getattr(p, _VIEW_OF, None)
        if made is None:
            return None
        steps.append(made)
        p = made[1][0]
        if id(p) in roots:
            return roots[id(p)], list(reversed(steps))


def is_view(p: TensorProxy) -> bool:
    """Whether ``p`` is eager's view of another tensor of the program (it has a chain of
    views, ``_VIEW_OF``)."""
    return getattr(p, _VIEW_OF, None) is not None


def _top(p: TensorProxy) -> TensorProxy:
    """The tensor at the top of ``p``'s chain of views (``p`` when it is no view)."""
    while (made := getattr(p, _VIEW_OF, None)) is not None:
        p = made[1][0]
    return p


class _Input:
    """Marker in a recipe step's arguments: the call's input tensor ``index``."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


_BASE = object()  # marker: the step's base (the root, or the previous step's result)


class _Like:
    """Marker: a tensor computed in the program, of which the view only reads metadata."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def shared_bases(inputs: list[TensorProxy], outputs: list[TensorProxy]) -> list[TensorProxy]:
    """The tensors computed in the program, neither inputs nor outputs, of which two or more
    outputs are views (``out = a * 3; return out[0], out[1:]``, ``*out.unbind(0)``): eager's
    outputs share that tensor's memory, so a write into one after the call shows through the
    others. Each becomes a hidden program output (a synthetic base, as AOTAutograd's
    "output aliases an intermediate"), from which ``output_views`` regenerates the views.
    An output that is the only view of its base stays a value of its own (torch.compile
    returns it so too), unless its elements share memory (``_shares_elements``)."""
    known = {id(p) for p in inputs} | {id(o) for o in outputs}
    by_top: dict[int, tuple[TensorProxy, set]] = {}
    inputs_ = {id(p) for p in inputs}
    for o in outputs:
        q, direct = o, True
        while (made := getattr(q, _VIEW_OF, None)) is not None:
            q = made[1][0]
            if id(q) in inputs_:  # a view of an input: a recipe of it
                direct = False
                break
        # (through another output too: ``v = t.t(); return v, v.as_strided(...)`` needs
        # v as eager's view of t, with t's strides)
        if direct and q is not o and id(q) not in known:
            by_top.setdefault(id(q), (q, {}))[1][id(o)] = o
    return [q for q, views in by_top.values()
            if len(views) > 1 or any(_shares_elements(o) for o in views.values())]


def _shares_elements(o: TensorProxy) -> bool:
    """Whether eager's view ``o`` has elements that share memory (an ``expand``): eager's
    in-place ops on it raise, so it is returned as a view of its base too."""
    with torch._C.DisableTorchFunction():  # (the tracer's creation ops stay away)
        m = eager_meta(o)
        return m is not None and torch._debug_has_internal_overlap(m) == 1


def output_views(inputs: list[TensorProxy], outputs: list[TensorProxy],
                 hidden: list[TensorProxy] = (), restrides: list[tuple] = ()) -> list[tuple]:
    """Recipes ``(output position, ("input" | "restrided" | "output", index), steps)`` for
    the outputs that are, or are views of, an input or another output (``hidden``: the
    shared bases, program outputs after ``outputs`` that the user does not get:
    ``shared_bases``); a step is ``(func, args, kwargs, output index)`` with its tensors
    replaced by markers (no proxy is kept). ``restrides``: the in-place view ops on inputs
    (``Trace.input_restrides``, metadata_writes.py), each a recipe ``(None, ("restride",
    input index), [(op, args, kwargs, grad mode)])`` run on the caller's tensor after the
    recipes that read the input as it was and before those that read it restrided (root
    kind "restrided"). The list is in the order ``apply`` runs it (a recipe after the one
    of its root), and ends with ``(None, ("drop", n), [])`` when there are ``n`` hidden
    outputs. Raises NotImplementedError for a view eager makes with a computed tensor as an
    argument."""
    outs = list(outputs) + list(hidden)
    roots = {id(p): ("input", i) for i, p in enumerate(inputs)}
    first_restride: dict[int, int] = {}
    for i, *_, x, seq in restrides:
        roots[id(x)] = ("restrided", i)
        first_restride[i] = min(seq, first_restride.get(i, seq))
    for pos, o in enumerate(outs):
        roots.setdefault(id(o), ("output", pos))
    inputs_by_id = {id(p): i for i, p in enumerate(inputs)}
    # SSA values of the arguments and of the outputs so far: an output that is one of them
    # without being a view in eager (x.clone(), an op that folds to its input) would come
    # back from XLA as the same buffer: it is copied
    taken = set(p.value for p in inputs if type(p.value.owner) is ir.Block)
    recipes: dict[int, tuple] = {}
    holds: list[tuple] = []
    first_made: dict[int, int] = {}  # (per recipe: its first view's VIEW_SEQ number)
    for pos, o in enumerate(outs):
        recipe = None
        if roots[id(o)] != ("output", pos):  # the same tensor returned again
            recipe = (pos, roots[id(o)], [])
        else:
            found = _chain(o, roots)
            if found is not None:
                root, steps = found
                if root[0] == "output" and o.requires_grad and not outs[root[1]].requires_grad:
                    raise NotImplementedError(
                        f"{steps[-1][4]}\n  this output is a view that requires grad of a "
                        "tensor that no longer does (detach_() after the view was made): "
                        "eager's view keeps its autograd history while sharing the detached "
                        "tensor's memory, which thunder_mlir cannot return. Return "
                        "view.clone(), or detach() into a new name instead of detach_().")
                templates = [_template(step, inputs_by_id) for step in steps]
                if all(t is not None for t in templates):  # (None: a step copies, as eager)
                    recipe = (pos, root, templates)
                    first_made[pos] = _seq_of_step(o, steps, 0)
                    split = _made_after_restride(o, steps, root, first_restride)
                    if split:  # (the steps before the input's in-place view op: held)
                        holds.append((None, ("hold", (root[1], pos)), templates[:split]))
                        recipe = (pos, ("held", (root[1], pos)), templates[split:])
        if recipe is None and o.value in taken:
            recipe = (pos, ("copy", pos), [])
        if recipe is not None:
            recipes[pos] = recipe
        taken.add(o.value)
    ordered: list[tuple] = []
    done: set[int] = set()

    def input_of(pos: int):  # the input under an output's recipe, or None
        kind, i = recipes[pos][1]
        if kind == "output":
            return input_of(i) if i in recipes and i != pos else None
        return i if kind in ("input", "restrided") else i[0] if kind == "held" else None

    def restrided(pos: int) -> bool:  # reads an input after its in-place view ops
        kind, i = recipes[pos][1]
        if kind == "output" and i in recipes and input_of(i) in first_restride and \
                first_made.get(pos, -1) > first_restride[input_of(i)]:
            return True  # (a view of another output made after the input's op)
        return kind in ("restrided", "held") or \
            kind == "output" and i in recipes and restrided(i)

    def emit(pos: int) -> None:  # a recipe after the recipe of the output it reads
        if pos in done:
            return
        done.add(pos)
        kind, i = recipes[pos][1]
        if kind == "output" and i in recipes:
            emit(i)
        ordered.append(recipes[pos])
    for pos in sorted(recipes):
        if not restrided(pos):
            emit(pos)
    ordered += holds
    for i, op, args, kwargs, grad_mode, *_ in restrides:
        ordered.append((None, ("restride", i), [(op, args, kwargs, grad_mode)]))
    for pos in sorted(recipes):
        emit(pos)
    if hidden:
        ordered.append((None, ("drop", len(hidden)), []))
    return ordered


def _seq_of_step(o: TensorProxy, steps: list, k: int) -> int:
    """The ``VIEW_SEQ`` number of the view that ``steps[k]`` made (``steps`` root first,
    ``steps[-1]`` made ``o``); -1 where it has none."""
    q = o
    for _ in range(len(steps) - 1 - k):
        q = getattr(q, _VIEW_OF)[1][0]
    return q.__dict__.get(VIEW_SEQ, -1)


def _made_after_restride(o: TensorProxy, steps: list, root: tuple,
                         first_restride: dict[int, int]) -> int:
    """For an output ``o`` made by ``steps`` (root first) from input ``root`` as it was
    before its in-place view ops (``t_``, ``squeeze_``: ``first_restride`` holds the first
    one's ``VIEW_SEQ`` number per input), the index of the first step made after that op,
    or 0 where none was (or the first was). Eager made those views after the op changed
    the input's version: made before it, a multi-output view (``v.unbind(0)[1]`` of ``v =
    x.view(-1)`` made before ``x.squeeze_()``) would count as written by it, and its
    backward raise."""
    if root[0] != "input" or root[1] not in first_restride:
        return 0
    for k in range(len(steps)):
        if _seq_of_step(o, steps, k) > first_restride[root[1]]:
            return k
    return 0


def _template(step, inputs_by_id: dict[int, int]) -> tuple:
    func, args, kwargs, k, where, grad_mode = step
    base = args[0]

    def mark(x):
        if x is base:
            return _BASE
        if type(x) is TensorProxy:
            if id(x) not in inputs_by_id:
                if not _aliases_on_meta(func, args, kwargs, k):
                    raise _Copies  # x[computed_index]: eager copies, no view to return
                if func is not torch.Tensor.__getitem__:
                    # a view's metadata comes from the other tensor's metadata alone
                    # (expand_as, view_as): an empty tensor of that metadata stands in
                    return _Like(x.tshape, x.tdtype)
                raise NotImplementedError(
                    f"{where}\n  this output is a view of an input made with a tensor "
                    "computed in the program as an argument; thunder_mlir cannot return "
                    "eager's view of it. Return .clone() of it, or pass that tensor as an "
                    "input.")
            return _Input(inputs_by_id[id(x)])
        return x
    try:
        a, kw = optree.tree_map(mark, (args, kwargs), none_is_leaf=True)
    except _Copies:
        return None
    return func, a, kw, k, grad_mode


_AS_STRIDED = (torch.Tensor.as_strided, torch.as_strided)


class _Copies(Exception):
    """A view step that eager computes as a copy (nothing aliases the base)."""


def _aliases_on_meta(func, args, kwargs, k) -> bool:
    """Whether eager's ``func(*args, **kwargs)`` (output ``k``) aliases ``args[0]``, judged
    on meta tensors of the proxies' metadata."""
    metas = {}

    def meta(x):
        if type(x) is TensorProxy:
            return metas.setdefault(id(x), x.meta)
        return x
    a, kw = optree.tree_map(meta, (args, kwargs), none_is_leaf=True)
    try:
        with torch._C.DisableTorchFunction():
            out = func(*a, **kw)
    except Exception:  # noqa: BLE001 - cannot judge: assume it aliases (refused)
        return True
    outs = [t for t in optree.tree_leaves(out, none_is_leaf=True) if isinstance(t, torch.Tensor)]
    return torch._C._is_alias_of(outs[k or 0], a[0])


def strided_recipes(recipes: list[tuple]) -> list[int]:
    """The inputs (tensor indices) of which an output recipe takes an ``as_strided`` view:
    ``check_strided_inputs`` checks them at each call."""
    return sorted({i if kind == "input" else i[0] for _, (kind, i), steps in recipes
                   if kind in ("input", "hold", "held")
                   and any(step[0] in _AS_STRIDED for step in steps)})


def check_strided_inputs(inputs: list[int], tensors) -> None:
    """Raise NotImplementedError, before the run (nothing written yet), where an output is
    an ``as_strided`` view of an input (``strided_recipes``) that is the caller's view with
    a storage offset or strides of its own: the traced sizes, strides and offset read the
    input as dense at offset 0, and on the caller's view they would address other memory
    than eager's (issue 46; the fallback's ``as_strided`` of such an input raises alike)."""
    for i in inputs:
        t = tensors[i]
        if t.storage_offset() != 0 or not t.is_contiguous():
            raise NotImplementedError(
                "an output is an as_strided view of an input that is a view with a storage "
                "offset or strides of its own: eager reads the caller's storage around the "
                "view, which the compiled program does not. Pass a contiguous tensor "
                "(x.clone()), or call as_strided outside the compiled function.")


def apply(recipes: list[tuple], outs: list[torch.Tensor], tensors) -> list[torch.Tensor]:
    """``outs`` (the program's output tensors) with each recipe's output replaced by eager's
    view of its base (an input tensor of this call, or another output), and the hidden
    shared bases at its end dropped (``output_views``)."""
    outs = list(outs)
    held: dict = {}  # (the views made before an input's in-place view op: ``output_views``)
    for pos, (kind, i), steps in recipes:
        if kind == "copy":  # a new tensor whose buffer XLA shares with another
            outs[pos] = outs[pos].clone()
            continue
        if kind == "drop":  # the shared bases (``shared_bases``): not the user's
            del outs[len(outs) - i:]
            continue
        if kind == "restride":  # an in-place view op on the caller's tensor
            for op, args, kwargs, grad_mode in steps:
                with torch.set_grad_enabled(grad_mode):
                    op(tensors[i], *args, **kwargs)
            continue
        value = outs[i] if kind == "output" else held[i] if kind == "held" else \
            tensors[i[0]] if kind == "hold" else tensors[i]
        for func, args, kwargs, k, grad_mode in steps:
            def real(x, base=value):
                if x is _BASE:
                    return base
                if type(x) is _Like:
                    return torch.empty(x.shape, dtype=x.dtype, device=base.device)
                return tensors[x.index] if type(x) is _Input else x
            a, kw = optree.tree_map(real, (args, kwargs), none_is_leaf=True)
            with torch.set_grad_enabled(grad_mode):  # the mode it was made in (no_grad views)
                value = func(*a, **kw)
            if k is not None:
                value = [t for t in optree.tree_leaves(value, none_is_leaf=True)
                         if isinstance(t, torch.Tensor)][k]
        if kind == "hold":  # (a view made before an in-place view op: ``held`` below)
            held[i] = value
        else:
            outs[pos] = value
    return outs


def keep_view_twin(v: TensorProxy) -> bool:
    """After a write into ``v``'s root: ``v`` keeps its eager twin (now of its new SSA value)
    when that twin is a view of the root's current twin, as eager's view object stays the
    same object across writes into its base (its ``grad_fn`` state included). False when
    the twin must be made again."""
    m, root = getattr(v, "_mirror", None), getattr(v, "_alias_root", None)
    if m is None or root is None or getattr(root, "_mirror_of", None) is None or \
            not root._mirror_of == root.value or not m._is_view() or m._base is not root._mirror:
        return False
    v._mirror_of = v.value
    return True


def refresh_views(base: TensorProxy) -> None:
    """After an in-place update of ``base``, recompute each of its live views (in the
    order they were made, so a view of a view sees its refreshed parent) by calling the
    torch view function that made it again: eager's views share the base's memory and see
    the update. Emits the view ops at the current insertion point."""
    import torch.utils._pytree as torch_pytree

    from thunder_mlir.frontend.tracing import _local

    for ref in list(getattr(base, "_views", ())):
        v = ref()
        made = getattr(v, _VIEW_OF, None) if v is not None else None
        if made is None:
            continue
        func, args, kwargs, k, _, grad_mode = made
        depth, _local.op_depth = getattr(_local, "op_depth", 0), 0  # a user-level op again
        try:  # (tracked: a detach() view stays a stop-gradient)
            # in the grad mode it was made in: a view made in grad mode keeps its history
            # through a write under no_grad() (eager's view of a leaf updated in place by
            # an optimizer), one made under no_grad() stays without
            with torch.set_grad_enabled(grad_mode):
                fresh = func(*args, **kwargs)
        finally:
            _local.op_depth = depth
        leaves = [t for t in torch_pytree.tree_leaves(fresh) if type(t) is TensorProxy]
        new = leaves[k or 0]
        v.value = new.value
        note_unversioned_read(v)
        # (a view keeping its history, below, keeps its own twin: eager's view object,
        # whose grad_fn the twin regenerates, as eager's does)
        kept = grad_mode and v.requires_grad and not new.requires_grad and \
            getattr(v, "_mirror", None) is not None
        if kept:
            v._mirror_of = v.value
        elif getattr(new, "_mirror_of", None) is not None and not keep_view_twin(v):
            v._mirror, v._mirror_of = new._mirror, v.value  # its eager twin, a view of the
            # base's (differentiability.py); kept where the view had one (its grad_fn state)
        # a view that had a history keeps one (eager regenerates its grad_fn on the base's
        # write, variable.cpp VariableHooks::grad_fn, even where the base no longer requires
        # grad: ``v = t[1]; t.detach_(); t.add_(1)``: v requires grad, reaching nothing)
        with torch._C.DisableTorchFunction():
            torch.Tensor.requires_grad.__set__(
                v, new.requires_grad or bool(grad_mode and v.requires_grad))
    base._views = [r for r in base._views if r() is not None]


def _has_unversioned_reads() -> bool:
    from thunder_mlir.frontend.tracing import current_trace

    return bool(current_trace().unversioned_reads)


def _unversioned(p: TensorProxy) -> bool:
    """Whether ``p``'s chain of views goes through ``.data``: memory shared with its base
    under a version counter of its own (eager's ``Tensor.data``)."""
    q = p
    while (made := getattr(q, _VIEW_OF, None)) is not None:
        if made[0] == T.data.__get__:
            return True
        q = made[1][0]
    return False


def note_unversioned_read(p: TensorProxy) -> None:
    """Record the SSA value ``p`` now holds when ``p`` reads its base through ``.data``.

    Eager saves such a tensor for backward without a version check (``.data`` has a version
    counter of its own), so a write into its memory after the save does not make the
    backward raise: the backward reads the written value. The program's backward must read
    the final value too: ``functionalization.emit_unversioned_reads`` pairs each value
    ``p`` held with the value it holds at the end of the trace, and the grad pass reads
    the latter (transforms/grad.py, ``ltorch.unversioned_read``)."""
    if not _unversioned(p):
        return
    from thunder_mlir.frontend.tracing import current_trace

    reads = current_trace().unversioned_reads
    reads.setdefault(id(p), (p, []))[1].append(p.value)


def view_is_contiguous(p: TensorProxy) -> bool:
    """Whether eager's tensor for the view ``p`` is contiguous (``eager_meta``). False when
    the chain cannot be replayed (then a copy is assumed, which ``contiguous()`` of a
    non-contiguous view is)."""
    m = eager_meta(p)
    return m is not None and m.is_contiguous()
