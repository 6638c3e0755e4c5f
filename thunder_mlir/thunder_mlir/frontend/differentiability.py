"""Eager autograd's meaning, applied while tracing: which traced tensors require grad, and
where gradients stop.

Eager PyTorch decides per op whether its outputs require grad: grad mode on, some input
requiring grad, a floating-point output, and an op whose derivative exists (derivatives.yaml
``output_differentiability``; ``NotImplemented`` nodes raise in the backward). ``track``
applies the same decision to every torch call the tracer dispatches, by asking torch
itself: the call is replayed on meta tensors whose ``requires_grad`` mirror the proxies',
under the current grad mode, and the meta outputs' ``requires_grad`` and ``grad_fn`` are
read back. The result is written into the IR, so the ``grad`` pass needs no Python state:

* an output eager would not track (computed under ``no_grad()``/``inference_mode()``, or
  by a non-differentiable op such as ``histc``) from an input that requires grad becomes
  ``thunder.stop_gradient`` of itself;
* an output whose derivative eager does not implement (``floor_divide``) becomes
  ``thunder.no_derivative`` of itself, carrying eager's error message for the backward;
* the proxy's ``requires_grad`` is eager's, so user code reading ``x.requires_grad`` sees
  what it sees eagerly, and ``jit`` knows which outputs are differentiable;
* results computed under ``inference_mode()`` are marked as inference tensors, so a later
  op that would save one for backward raises eager's RuntimeError.

Only calls with an input that requires grad are replayed (nothing else can produce a
tensor that requires grad), so inference traces pay nothing.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

import optree
import torch

from thunder_mlir.ir.dtypes import is_inexact
from thunder_mlir.frontend.aliasing import writes_first_argument
from thunder_mlir.frontend.tracing import _local, current_trace
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.symbolic import hints

_T = torch.Tensor


def _proxies(tree) -> list[TensorProxy]:
    return [x for x in optree.tree_leaves(tree, none_is_leaf=True) if type(x) is TensorProxy]


def _calls_user_code(args, kwargs) -> bool:
    """Higher-order calls (torch.cond, checkpoint): replaying them would run user code."""
    return any(callable(x) and not isinstance(x, (torch.Tensor, type, torch.dtype))
               for x in optree.tree_leaves((args, kwargs), none_is_leaf=True))


def _meta_inputs(args, kwargs, inputs: list[TensorProxy]):
    """``(args, kwargs)`` with each proxy replaced by a meta tensor of its metadata whose
    ``requires_grad`` is the proxy's: a leaf for a program input (as the caller's tensor is),
    a non-leaf (a clone) for a value computed inside the program. Returns the meta tree and
    the meta tensor of each proxy, by identity."""
    metas: dict[int, torch.Tensor] = {}

    def to_meta(x):
        if type(x) is not TensorProxy:
            return x
        m = metas.get(id(x))
        if m is None and getattr(x, "_mirror_of", None) is not None and x._mirror_of == x.value:
            m = metas[id(x)] = x._mirror  # its eager twin: the autograd graph continues
        if m is None and getattr(x, "_view_of", None) is not None and \
                _twin_of_view(x, new_root=True):
            # a view: its twin a view of its base's, sharing its version counter, so that a
            # write into the base after an op saved the view makes eager's backward raise
            # (a buffer's detach() saved by `a * buf.detach()`, then `buf.mul_(0.5)`)
            m = metas[id(x)] = x._mirror
        if m is None:
            m = metas[id(x)] = _fresh_twin(x, inputs)
        return m

    tree = optree.tree_map(to_meta, (args, kwargs), none_is_leaf=True)
    return tree, metas


def _fresh_twin(x: TensorProxy, inputs: list[TensorProxy]) -> torch.Tensor:
    """A meta tensor of ``x``'s metadata whose ``requires_grad`` is ``x``'s, starting a new
    autograd graph: a leaf for a program input that is a leaf (as the caller's tensor is),
    a non-leaf (a clone) for a value computed inside the program or an input that is no
    leaf (``_nonleaf``: eager lets it be written in place)."""
    if getattr(x, "_inference", False):  # made under inference_mode(), as eager's
        with torch.inference_mode():
            m = torch.empty(hints(x.tshape), dtype=x.tdtype, device="meta")
    else:  # (a normal tensor even when the op runs under inference_mode)
        with torch.inference_mode(False):
            # (symbolic sizes: the traced call's; the replay reads autograd flags)
            m = torch.empty(hints(x.tshape), dtype=x.tdtype, device="meta")
    if x.requires_grad:
        m.requires_grad_()
        if getattr(x, "_nonleaf", False) or not any(x is i for i in inputs):
            with torch.enable_grad(), torch.inference_mode(False):
                m = m.clone()
    return m


def _not_implemented_message(out: torch.Tensor, leaves: list[torch.Tensor]) -> str:
    """Eager's error for differentiating through ``out`` (a NotImplemented grad_fn)."""
    try:
        torch.autograd.grad(out, [x for x in leaves if x.requires_grad],
                            torch.zeros_like(out), allow_unused=True)
    except RuntimeError as e:
        return str(e)
    return f"derivative for {out.grad_fn.name()} is not implemented"


# errors torch's autograd raises where eager would (replayed on meta tensors)
_AUTOGRAD_ERRORS = ("requires grad", "leaf Variable", "Inference tensors",
                    "inference tensor", "is being modified inplace")


class _Replay:
    """What eager autograd says about one call: per output tensor leaf, whether it requires
    grad and the error its backward raises (or None); per input proxy, its requires_grad
    after the call (in-place ops)."""

    def __init__(self, outs, inputs_after: dict[int, bool], errors, tensors, metas, flows):
        self.outs, self.inputs_after, self.errors = outs, inputs_after, errors
        self.flows = flows  # per output: whether a gradient flows through it
        self.tensors, self.metas = tensors, metas  # the meta outputs and inputs


def _grad_fn(t: torch.Tensor):
    """``t.grad_fn``; None for a view made under no_grad() and written in place since,
    whose grad_fn torch refuses to rebuild (eager's user never asks for it there)."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _replay(func: Callable, args, kwargs, inputs: list[TensorProxy]) -> _Replay | None:
    (m_args, m_kwargs), metas = _meta_inputs(args, kwargs, inputs)
    leaves = list(metas.values())
    try:
        with torch._C.DisableTorchFunction(), torch.device("meta"):
            out = func(*m_args, **m_kwargs)
    except RuntimeError as e:
        if any(m in str(e) for m in _AUTOGRAD_ERRORS):
            # eager's autograd error (an in-place op on a leaf that requires grad), as a
            # TorchOpError: the error boundary's re-run on tensors that do not require
            # grad cannot reproduce it
            from thunder_mlir.errors import TorchOpRuntimeError
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            raise TorchOpRuntimeError(
                f"{describe_frame(user_frame())}\n  {e}\n  Eager PyTorch raises this "
                "RuntimeError too (autograd: the tensor requires grad).") from None
        return _replay_on_zeros(func, args, kwargs, inputs)
    except Exception:  # noqa: BLE001 - no meta kernel: replayed on small CPU tensors
        return _replay_on_zeros(func, args, kwargs, inputs)
    return _read_flags(out, metas, lambda o, f: _not_implemented_message(o, leaves)
                       if type(f).__name__ == "NotImplemented" else None, keep=True)


def _read_flags(out, inputs: dict[int, torch.Tensor], error_of, keep: bool) -> _Replay:
    """The ``_Replay`` of a replayed call's results ``out`` and its replayed ``inputs`` (by
    proxy identity): per output, ``requires_grad``, ``error_of(output, grad_fn)`` for one
    that requires grad, and whether a gradient flows; ``keep``: the tensors are kept as
    the proxies' eager twins."""
    outs = [o for o in optree.tree_leaves(out, none_is_leaf=True) if isinstance(o, torch.Tensor)]
    fns = [_grad_fn(o) for o in outs]
    errors = [error_of(o, f) if o.requires_grad else None for o, f in zip(outs, fns)]
    # a view made under no_grad() of a tensor that requires grad requires grad too, but has
    # no grad_fn: no gradient flows through it (a stop-gradient whose flag stays True)
    flows = [f is not None or not o._is_view() for o, f in zip(outs, fns)]
    return _Replay([o.requires_grad for o in outs],
                   {k: m.requires_grad for k, m in inputs.items()}, errors,
                   outs if keep else [], inputs if keep else {}, flows)


#: The most elements a tensor replayed on real CPU memory may have (``_replay_on_zeros``).
_ZEROS_REPLAY_NUMEL = 1 << 16


def _replay_on_zeros(func: Callable, args, kwargs, inputs: list[TensorProxy]) -> _Replay | None:
    """The replay of a call that has no meta kernel, or whose output sizes depend on values
    (``unique``, ``nonzero``), on zero-filled CPU tensors of the proxies' shapes, dtypes and
    ``requires_grad``: only its autograd flags are read (``requires_grad``, a
    ``NotImplemented`` grad_fn's error, as ``_unique2``'s), never its values, and no eager
    twin is kept. None where a tensor has more than ``_ZEROS_REPLAY_NUMEL`` elements or the
    call fails on zeros: the caller then applies the plain rule."""
    if _calls_user_code(args, kwargs):
        return None
    zeros: dict[int, torch.Tensor] = {}

    def to_zeros(x):
        if type(x) is not TensorProxy:
            return x
        z = zeros.get(id(x))
        if z is None:
            shape = hints(x.tshape)
            n = 1
            for d in shape:
                n *= d
            if n > _ZEROS_REPLAY_NUMEL:
                raise OverflowError
            with torch.inference_mode(False):
                z = torch.zeros(shape, dtype=x.tdtype, device="cpu")
                if x.requires_grad:
                    z.requires_grad_()
                    if getattr(x, "_nonleaf", False) or not any(x is i for i in inputs):
                        with torch.enable_grad():
                            z = z.clone()
            zeros[id(x)] = z
        return z

    try:
        z_args, z_kwargs = optree.tree_map(to_zeros, (args, kwargs), none_is_leaf=True)
        # (a random op would advance torch's generator: its state is restored)
        with torch._C.DisableTorchFunction(), torch.random.fork_rng(devices=[]):
            out = func(*z_args, **z_kwargs)
    except Exception:  # noqa: BLE001 - too large, or zeros are not a valid input
        return None
    leaves = [z for z in zeros.values() if z.requires_grad]
    return _read_flags(out, zeros, lambda o, f: None if f is None else
                       _backward_error(o, leaves), keep=False)


def _backward_error(out: torch.Tensor, leaves: list[torch.Tensor]) -> str | None:
    """The error eager's backward raises through ``out`` for a derivative that is not
    implemented (derivatives.yaml's ``not_implemented``: ``_unique2``'s grad_fn is a
    ``Unique2Backward0`` that raises when applied), or None."""
    try:
        torch.autograd.grad(out, leaves, torch.zeros_like(out), allow_unused=True,
                            retain_graph=True)
    except RuntimeError as e:  # (NotImplementedError is one)
        return str(e) if "not implemented" in str(e) else None
    return None


def user_op(func: Callable | None, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
    """Run ``run()``, the traced form of an op the *user's code* called (``func(*args,
    **kwargs)``: a torch function, or None for a thunder Symbol called directly), giving
    its results eager's autograd meaning (``track``). Ops that ops call in
    turn (a symbol's decomposition) are not user-level and are not tracked again."""
    if getattr(_local, "op_depth", 0):
        return run()
    _local.op_depth = 1
    try:
        return track(func, args, kwargs, run)
    finally:
        _local.op_depth = 0


def track(func: Callable | None, args: tuple, kwargs: dict, call: Callable[[], Any]) -> Any:
    """Run ``call()`` (the traced op for ``func(*args, **kwargs)``) and give its results
    eager's autograd meaning (see the module docstring). Returns ``call()``'s result.
    With ``func`` None (a thunder Symbol called directly), outputs follow the plain rule:
    a floating-point output of an input that requires grad requires grad in grad mode.

    Raises NotImplementedError for an in-place update, under ``no_grad()``, of a tensor
    that requires grad (eager keeps that tensor's gradient path while changing its value,
    which the functional IR cannot express), and eager's RuntimeError for an in-place
    update of a leaf that requires grad with grad mode on.
    """
    inputs = _proxies((args, kwargs))
    trace = current_trace()
    # a view whose base was written since it was made: eager's error, before the op's
    # own argument checks where eager's op reads the view's grad_fn first (its autograd
    # kernel collects the edges before it dispatches: ``rebased_view_error_first``), else
    # after them (``_raise_rebased_view_error``)
    rebased = [p for p in inputs if p.__dict__.get(REWRITTEN_VIEW) and p.requires_grad] \
        if torch.is_grad_enabled() else ()
    if rebased:
        first = rebased_view_error_first(func, args, kwargs, rebased)
        if first is not None:
            _raise_rebased_view_error(first)
        call_ = call

        def call():
            from thunder_mlir.frontend.aliasing import returns_new_tensor

            out = call_()
            if all(any(o is p for p in inputs) for o in _proxies(out)) and \
                    not returns_new_tensor(func, args, kwargs):
                return out  # (eager returns its input itself: no node reads its grad_fn)
            for p in rebased:
                _raise_rebased_view_error(p)
            return out
    if trace.region_reads:  # (what a cond branch or a checkpoint reads from outside)
        trace.note_region_reads(inputs)
    if torch.is_inference_mode_enabled():  # eager's results are inference tensors
        out = _track(func, args, kwargs, call, inputs)
        for o in _proxies(out):
            if not any(o is p for p in inputs):
                o._inference = True
        return out
    return _track(func, args, kwargs, call, inputs)


# proxy attribute: a view whose base (or another view of it) was written in place after
# the view was made (``functionalization.assign``, ``metadata_writes.restride``)
REWRITTEN_VIEW = "_rewritten_view"


def note_base_written(root: TensorProxy, written: TensorProxy | None) -> None:
    """After an in-place write into ``root``'s memory (through ``written``, one of its
    views, or ``root`` itself): every other view of ``root`` made so far is marked
    (``REWRITTEN_VIEW``), for ``_raise_rebased_view_error``."""
    for r in getattr(root, "_views", ()):
        v = r()
        if v is not None and v is not written:
            v.__dict__[REWRITTEN_VIEW] = True


def _raise_rebased_view_error(p: TensorProxy) -> None:
    """Raise ``rebased_view_error(p)`` (at the user's line) where there is one."""
    from thunder_mlir.errors import TorchOpRuntimeError
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    message = rebased_view_error(p)
    if message is not None:
        raise TorchOpRuntimeError(f"{describe_frame(user_frame())}\n  {message}\n  Eager "
                                  "PyTorch raises this RuntimeError too.")


def rebased_view_error(p: TensorProxy) -> str | None:
    """Eager's RuntimeError where an op reads the view ``p`` (which requires grad, in grad
    mode) after its base was written in place and ``p``'s creation forbids that: an output
    of an op that returns several views (``split``, ``unbind``, ``chunk``: "Output 1 of
    Split is a view and its base or another view of its base has been modified inplace"),
    and views of it. Eager raises when it rebuilds the view's ``grad_fn``
    (``handle_view_on_rebase``, torch/csrc/autograd/variable.cpp); here the view is
    replayed on meta (``_rebased_meta``) and its ``grad_fn`` read, so the rule and the
    message are eager's. None where eager does not raise (or it cannot be replayed on
    meta)."""
    m = _rebased_meta(p)
    if m is None:
        return None
    try:
        m.grad_fn
    except RuntimeError as e:
        return str(e)
    return None


def rebased_view_error_first(func: Callable | None, args: tuple, kwargs: dict,
                             rebased: list[TensorProxy]) -> TensorProxy | None:
    """The view among ``rebased`` (arguments of ``func(*args, **kwargs)`` marked
    ``REWRITTEN_VIEW``) whose ``rebased_view_error`` eager raises *before* the op's own
    argument checks, or None. Eager's autograd kernel of an op with a derivative reads its
    inputs' ``grad_fn`` (``collect_next_edges``) before it dispatches to the kernel that
    checks the arguments (``v.diagonal()`` of a 1-D rebased ``v``: the rebased-view
    RuntimeError, not diagonal's IndexError); a composite op checks its arguments first
    (``v.flatten(3)``: flatten's IndexError). Decided by running ``func`` on meta tensors:
    each rebased view replayed on a written meta base (``_rebased_meta``), the other
    tensors with eager's layout (``aliasing.eager_meta``); the first error it raises is
    eager's. None where it cannot run (a thunder Symbol, no meta kernel, symbolic sizes):
    the check then follows the op's (``track``)."""
    if func is None:
        return None
    from thunder_mlir.frontend.aliasing import eager_meta

    replayed = {}
    for p in rebased:
        m = _rebased_meta(p)
        if m is not None:
            replayed[id(p)] = (p, m)
    if not replayed:
        return None

    def meta(x):
        if type(x) is not TensorProxy:
            return x
        if id(x) in replayed:
            return replayed[id(x)][1]
        m = eager_meta(x)
        m = x.meta if m is None else m
        if x.requires_grad and is_inexact(x.tdtype):
            m = m.detach().requires_grad_()
        return m
    try:
        m_args, m_kwargs = optree.tree_map(meta, (args, kwargs), none_is_leaf=True)
    except Exception:  # noqa: BLE001 - not judged: the check follows the op's
        return None
    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad(), \
                torch.random.fork_rng(devices=[]):
            func(*m_args, **m_kwargs)
    except RuntimeError as e:
        for p, _ in replayed.values():
            if str(e) == rebased_view_error(p):
                return p
    except Exception:  # noqa: BLE001 - the op's own error (or no meta kernel): not first
        return None
    return None


def _rebased_meta(p: TensorProxy) -> torch.Tensor | None:
    """The view ``p`` (``rebased_view_error``) as eager's tensor is now: its chain of views
    replayed on a meta base that requires grad, then the base written in place. Where
    every view of the chain was made while its base did not require grad (``t = x * 2; v =
    t.chunk(2)[0]``), ``p`` requires grad because a write in grad mode put the root into
    the graph (``t.add_(w)``): the replay's base then starts without grad and is written
    with a value that requires grad ("A view was created in no_grad mode and its base ...
    modified inplace with grad mode enabled"). None where ``p`` is no view, a size is
    symbolic, its dtype cannot require grad, or a step cannot run on meta."""
    from thunder_mlir.frontend.aliasing import _VIEW_OF, BASE_REQUIRED_GRAD, replay_step

    chain, q, made_with_grad = [], p, False
    while (made := getattr(q, _VIEW_OF, None)) is not None:
        chain.append(made)
        made_with_grad |= q.__dict__.get(BASE_REQUIRED_GRAD, True)
        q = made[1][0]
    if not chain or any(type(n) is not int for n in q.tshape) or not is_inexact(q.tdtype):
        return None
    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            base = torch.empty(q.tshape, dtype=q.tdtype, device="meta")
            if made_with_grad:
                base = base.requires_grad_().clone()
            m = base
            for step in reversed(chain):
                with torch.set_grad_enabled(step[5]):
                    m = replay_step(step, m)
                if m is None:
                    return None
            if made_with_grad:
                with torch.no_grad():
                    base.add_(0)
            else:
                base.add_(torch.zeros((), dtype=q.tdtype, device="meta", requires_grad=True))
    except Exception:  # noqa: BLE001 - not replayable on meta: not judged
        return None
    return m


def _mutates_a_twin(func, args, grad: bool) -> bool:
    """An in-place op on a tensor whose meta twin is in an autograd graph, or on a view of
    such a tensor (the view's twin is made from the base's): replayed so the twins' version
    counters move as eager's do. ``grad``: an input of the call requires grad, so a view
    whose base has no twin yet gets one made from a new twin of its base (the write puts
    the base into the graph: its other views, made before, must read it there)."""
    if not args or type(args[0]) is not TensorProxy or not writes_first_argument(func):
        return False
    return getattr(args[0], "_mirror_of", None) is not None or _twin_of_view(args[0], grad)


def _is_current(q: TensorProxy) -> bool:
    """``q`` has an eager twin of its present SSA value."""
    return getattr(q, "_mirror_of", None) is not None and q._mirror_of == q.value


def _view_twins_before_write(p, inputs: list[TensorProxy]) -> None:
    """Before a write that may make ``p``'s root require grad (an input of the call does):
    every view of a root that does not require grad yet gets its twin *now*, a view of the
    root's twin made before the write, as eager's view objects were.

    Eager regenerates a view's ``grad_fn`` lazily, when an op that records a node reads it
    (``VariableHooks::grad_fn``, torch/csrc/autograd/variable.cpp). A view made while its
    base did not require grad has none, and ``check_inplace`` (torch/csrc/autograd/
    VariableTypeUtils.h) reads ``is_leaf()``, the raw field, before anything regenerates
    it: ``t = y[0]; y.add_(w); t.mul_(2)`` (w requiring grad) raises "a leaf Variable that
    requires grad is being used in an in-place operation", and ``u = t * 1`` before the
    ``mul_`` makes it run. Twins made before the write and kept across it
    (``aliasing.keep_view_twin``) give the meta replay of the later op that state, so it
    raises where eager raises (torch.compile raises it too, from its fake-tensor run)."""
    if type(p) is not TensorProxy:
        return
    root = getattr(p, "_alias_root", None)
    root = p if root is None else root
    if root.requires_grad or not is_inexact(root.tdtype) or \
            not any(r() is not None for r in getattr(root, "_views", ())):
        return
    if not _is_current(root):
        root._mirror, root._mirror_of = _fresh_twin(root, inputs), root.value
    for ref in getattr(root, "_views", ()):
        v = ref()
        if v is not None and not _is_current(v):
            _twin_of_view(v)


def _twin_of_view(p: TensorProxy, new_root: bool = False) -> bool:
    """Give the view ``p`` a twin: its chain of views replayed, on meta tensors under the
    grad mode each step was made in, from the nearest base whose twin is current (a buffer
    that a differentiated op saved: ``buf[1].add_(1)`` must bump its version). When no
    base has one: False, or with ``new_root`` the chain's root gets a new twin (see
    ``_fresh_twin``) for a view ``p`` of it."""
    from thunder_mlir.frontend.aliasing import _VIEW_OF, replay_step

    chain, q = [], p
    while getattr(q, "_mirror_of", None) is None or not q._mirror_of == q.value:
        made = getattr(q, _VIEW_OF, None)
        if made is None:
            if not new_root or not chain:
                return False
            q._mirror, q._mirror_of = _fresh_twin(q, current_trace().inputs), q.value
            break
        chain.append(made)
        q = made[1][0]
    m = q._mirror
    for step in reversed(chain):
        with torch.set_grad_enabled(step[5]):
            m = replay_step(step, m)
        if m is None:
            return False
    p._mirror, p._mirror_of = m, p.value
    return True


def _base_requires_grad(p: TensorProxy) -> None:
    """A tensor written with a value that requires grad: its autograd root (its base, or
    the ``detach()`` it is a view of: ``_autograd_root``) and every view of that root
    require grad from then on, as eager's (the base's grad_fn becomes CopySlices), and
    each such view's eager twin is a view of the base's. A ``detach()`` view shares the
    memory, not the autograd history: it and its views are apart (nor do they require
    grad after a write into the base)."""
    from thunder_mlir.frontend.aliasing import keep_view_twin

    root = getattr(p, "_alias_root", None)
    root = p if root is None else root
    top = _autograd_root(p)
    if not is_inexact(root.tdtype):
        return
    if top is not root:  # (written through a detach() view: its own graph)
        for v in [top] + [r() for r in getattr(root, "_views", ())]:
            if v is not None and is_inexact(v.tdtype) and not v.requires_grad and \
                    _autograd_root(v) is top:
                _set_requires_grad(v, True)
        return
    if not root.requires_grad:
        _set_requires_grad(root, True)
    rooted = getattr(root, "_mirror_of", None) is not None and root._mirror_of == root.value
    for ref in getattr(root, "_views", ()):
        v = ref()
        if v is not None and is_inexact(v.tdtype) and not v.requires_grad and \
                _autograd_root(v) is root:
            _set_requires_grad(v, True)
            if rooted and not keep_view_twin(v):  # its twin, a view of the base's written
                _twin_of_view(v)  # twin (refresh_views ran before the base required grad)


def _refuse_graded_write_into_detached(p: TensorProxy) -> None:
    """Raise NotImplementedError where ``p``, a ``detach()``/``.data`` view of a tensor
    (or a view of one), was written with a value that requires grad: eager gives the
    detached tensor a history of its own (it requires grad from the write) while its base
    keeps its history with the written values; functionalization writes into the base,
    whose history would take the write's gradient."""
    root = getattr(p, "_alias_root", None)
    if root is None or _autograd_root(p) is root:
        return
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    raise NotImplementedError(
        f"{describe_frame(user_frame())}\n  an in-place write with a value that requires "
        "grad into a detach() (or .data) view of another tensor is not supported: eager "
        "gives the detached tensor its own autograd history while the tensor it shares "
        "memory with keeps its own, which the compiled program cannot reproduce. Write "
        "into a copy (v = t.detach().clone()) or compute the new value out of place.")


def _autograd_root(v: TensorProxy) -> TensorProxy:
    """The tensor whose autograd history ``v`` shares: the innermost ``detach()`` (or
    ``.data``) result on ``v``'s chain of views, else the chain's root. Eager's detach()
    shares its base's memory but starts a history of its own."""
    from thunder_mlir.frontend.aliasing import _VIEW_OF

    q = v
    while (made := getattr(q, _VIEW_OF, None)) is not None:
        if made[0] in (_T.detach, torch.detach, _T.data.__get__):
            return q
        q = made[1][0]
    return q


def _current_twins(inputs: list[TensorProxy]) -> list[tuple]:
    """(tensor, its SSA value, its eager twin's version counter) of each input, and each
    input view's root, whose eager twin is current: taken before a call, so that
    ``_drop_unwritten_twins`` can tell whether the call's replay wrote the twins. (A twin
    made under ``torch.inference_mode()`` has no version counter: it is not checked.)"""
    twins, seen = [], set()
    for p in inputs:
        root = getattr(p, "_alias_root", None)
        for q in (p,) if root is None else (p, root):
            if id(q) not in seen and getattr(q, "_mirror_of", None) is not None and \
                    q._mirror_of == q.value and not q._mirror.is_inference():
                seen.add(id(q))
                twins.append((q, q.value, q._mirror._version))
    return twins


def _drop_unwritten_twins(twins: list[tuple]) -> None:
    """After a traced call: a tensor the call wrote (its SSA value changed) whose eager twin
    is still marked current (``functionalization.assign`` keeps a root's twin current when
    the write went through a view, trusting the replay to have written it through the
    view's twin) but whose twin the replay did not write (its version counter did not
    move: the meta replay failed and the call was replayed on zeros, or not at all) loses
    its twin. A stale twin would give later ops the autograd flags of the tensor before
    the write: an index_add_ of a tensor that requires grad into zeros_like(x, device=...)
    left the zeros' twin, which does not require grad, and every op after it cut the
    gradient (GPT-OSS's eager experts). Without a twin, later replays start from the
    proxy's own flags (``_meta_inputs``). The dropped twin's version counter advances, as
    the write advanced eager's: a node that saved it makes the backward raise "modified by
    an inplace operation" (``buf * b`` then ``buf[torch.tensor(True)] = v``, a 0-d bool
    index no meta replay can run: fuzzer programs 999-1000)."""
    for q, value, version in twins:
        if q.value != value and q._mirror_of == q.value and q._mirror._version == version:
            torch.autograd.graph.increment_version(q._mirror)
            q._mirror_of = None


def _leaf_write_accepted(func, args, kwargs, p: TensorProxy) -> bool:
    """Whether eager runs the in-place op ``func(*args, **kwargs)`` writing ``p`` when
    ``p`` is a leaf that requires grad: replayed on meta tensors, ``p`` such a leaf. Eager
    refuses every op with a derivative ("a leaf Variable that requires grad is being used
    in an in-place operation"); ops without one (``logical_or_``) run. False where the
    replay fails otherwise (unknown: the write stays refused), and where the replay does
    not write ``p`` itself (its version unchanged: ``p`` is a view of the written tensor,
    refreshed, as ``x[1:]`` in ``x[1:] += 1``'s ``x.__setitem__(slice, x[1:])``)."""
    twin = []

    def to_meta(x):
        if type(x) is not TensorProxy:
            return x
        m = torch.empty(hints(x.tshape), dtype=x.tdtype, device="meta",
                        requires_grad=x is p)
        if x is p:
            twin.append(m)
        return m

    try:
        m_args, m_kwargs = optree.tree_map(to_meta, (args, kwargs), none_is_leaf=True)
        before = [m._version for m in twin]
        with torch._C.DisableTorchFunction(), torch.device("meta"), torch.enable_grad():
            func(*m_args, **m_kwargs)
    except Exception:  # noqa: BLE001 - refused, or not replayable on meta
        return False
    return any(m._version != v for m, v in zip(twin, before))


def _nodes_of_op(outs: list[torch.Tensor], inputs: list) -> Iterator:
    """The autograd nodes one op added: those between its outputs ``outs`` and its
    ``inputs`` (meta twins: a composite op such as ``tensorsolve`` adds several)."""
    stop = {id(f) for m in inputs if isinstance(m, torch.Tensor)
            and (f := _grad_fn(m)) is not None}
    seen = set(stop)
    todo = [_grad_fn(o) for o in outs if isinstance(o, torch.Tensor)]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen or type(fn).__name__ == "AccumulateGrad":
            continue
        seen.add(id(fn))
        todo += [f for f, _ in fn.next_functions]
        yield fn


def _kept_on_ctx(fn) -> list[torch.Tensor]:
    """The tensors a Python node (an ``autograd.Function``, a custom op's
    ``register_autograd``) keeps as attributes of its ctx, outside ``save_for_backward``:
    linear_cross_entropy's chunked path keeps the gradient it computed in the forward
    (``ctx._gi``). Neither version-checked nor replaced by a checkpoint's recomputation
    (``torch.utils.checkpoint`` hooks only the saved tensors)."""
    if not isinstance(fn, torch.autograd.function.BackwardCFunction):
        return []
    return [v for v in vars(fn).values() if isinstance(v, torch.Tensor)]


def _saved_tensors(outs: list[torch.Tensor], inputs: list) -> list[torch.Tensor]:
    """The tensors the autograd nodes one op added keep for its backward
    (:func:`_nodes_of_op`): C++ nodes' ``_saved_*`` fields, and Python nodes'
    ``saved_tensors`` and the tensors on their ctx (:func:`_kept_on_ctx`)."""
    saved = []
    for fn in _nodes_of_op(outs, inputs):
        for name in dir(fn):
            if name.startswith("_saved_"):
                v = getattr(fn, name)
                saved += [t for t in (v if isinstance(v, (list, tuple)) else [v])
                          if isinstance(t, torch.Tensor)]
        if isinstance(fn, torch.autograd.function.BackwardCFunction):
            try:
                saved += [t for t in fn.saved_tensors if isinstance(t, torch.Tensor)]
            except RuntimeError:  # (unpacking checks versions: a twin written since)
                pass
            saved += _kept_on_ctx(fn)
    return saved


def _storage(t: torch.Tensor):
    return t.untyped_storage()._cdata


def _reads_at_op(func, inputs: list[TensorProxy], replay) -> list[tuple]:
    """The ``.data`` reads among an op's ``inputs`` (aliasing.note_unversioned_read) whose
    value the op's backward must read as it is at the op: eager's node (its meta twin's
    grad_fn) does not save them. Each gets a value of its own for this op (a stop-gradient,
    which the grad pass does not take for the read); returns (proxy, its value, the op's
    value). Where eager's node saves such a read together with a tensor it computed (a
    result, an LU factor), its backward reads the read's memory as written later and the
    computed tensor as it was: ``trace.unversioned_mixed`` records the read, refused by
    jit if the memory is written after the op and a backward is needed."""
    from thunder_mlir.frontend.aliasing import _unversioned
    from thunder_mlir.ir import prims

    reads = [p for p in inputs if _unversioned(p)]
    if not reads:
        return []
    if replay is None or not replay.tensors:  # (no meta replay: what eager saves is unknown)
        saved, computed, metas = set(), True, []
    else:
        metas = [m for p in inputs if (m := replay.metas.get(id(p))) is not None]
        saved = {_storage(t) for t in _saved_tensors(replay.tensors, metas)}
        # (by memory: a node may save a view of an input, as the reshape in tensorsolve)
        computed = bool(saved - {_storage(m) for m in metas})
    at_op = []
    for p in reads:
        m = replay.metas.get(id(p)) if metas else None
        if m is not None and _storage(m) not in saved:
            value = p.value
            p.value = prims.stop_gradient(p).value
            at_op.append((p, value, p.value))
        elif computed:
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            current_trace().unversioned_mixed.append(
                (p, p.value, describe_frame(user_frame()), getattr(func, "__name__", func)))
    return at_op


def _note_kept_on_ctx(func, inputs: list[TensorProxy], replay) -> None:
    """Inside a checkpointed function: an op whose node keeps tensors on its ctx
    (:func:`_kept_on_ctx`) goes to ``trace.not_recomputed``. Eager's backward reads those
    as the forward computed them while the recomputation re-reads the op's operands, a mix
    refused when that memory is written after the checkpoint
    (region_reads.checkpoint_reads)."""
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    metas = [m for p in inputs if (m := replay.metas.get(id(p))) is not None]
    if any(_kept_on_ctx(fn) for fn in _nodes_of_op(replay.tensors, metas)):
        current_trace().not_recomputed.append(
            ([p.value for p in inputs], describe_frame(user_frame()),
             f"inside a checkpointed function, {getattr(func, '__name__', func)} keeps "
             "tensors it computed for its backward on its autograd ctx (outside "
             "save_for_backward), which eager's recomputation does not replace"))


def _track(func, args, kwargs, call, inputs: list[TensorProxy]):
    # (an in-place op on a view gives the view its twin first, whether or not an input
    # requires grad: the replay then writes the base's twin, as eager writes the base)
    grad = any(p.requires_grad for p in inputs)
    if not _mutates_a_twin(func, args, grad) and not grad:
        return call()
    before = [p.value for p in inputs]
    grad_on = torch.is_grad_enabled()
    trace = current_trace()
    if grad and grad_on and writes_first_argument(func):
        _view_twins_before_write(args[0], trace.inputs)
    twins = _current_twins(inputs)
    replay = None if func is None or _calls_user_code(args, kwargs) else \
        _replay(func, args, kwargs, trace.inputs)
    at_op = _reads_at_op(func, inputs, replay) if grad_on and trace.unversioned_reads else []
    if grad_on and trace.checkpoint_depth and replay is not None and replay.tensors:
        _note_kept_on_ctx(func, inputs, replay)
    out = call()
    for p, value, read in at_op:  # (the op's own operand; the proxy reads its memory again)
        if p.value == read:
            p.value = value
    _drop_unwritten_twins(twins)
    from thunder_mlir.ir import prims

    # in-place updates: the updated tensor's flag as eager's after the call
    for p, v in zip(inputs, before):
        if p.value == v or not is_inexact(p.tdtype):
            continue
        if not grad_on:
            if not p.requires_grad:  # (one that does keeps its gradient path, as eager's:
                p.value = prims.stop_gradient(p).value  # functionalization's no_grad_write)
        elif replay is not None:
            _set_requires_grad(p, replay.inputs_after.get(id(p), True))
        else:
            _set_requires_grad(p, True)
        if p.requires_grad and grad_on:
            _refuse_graded_write_into_detached(p)
            _base_requires_grad(p)
        root = getattr(p, "_alias_root", None)
        root = p if root is None else root
        if grad_on and root.requires_grad and any(root is q for q in trace.inputs) and \
                func is not None and _leaf_write_accepted(func, args, kwargs, p):
            # an op without a derivative (logical_or_) leaves a leaf that requires grad a
            # leaf, its gradient path unchanged, as a write under no_grad() does
            root._eager_accepted_write = True
    new = [o for o in _proxies(out) if not any(o is p for p in inputs)]
    mirrors = {}
    if replay is not None and len(replay.outs) == len(_proxies(out)):
        flags = dict(zip(map(id, _proxies(out)), zip(replay.outs, replay.errors,
                                                     replay.flows)))
        mirrors = dict(zip(map(id, _proxies(out)), replay.tensors))
    else:
        flags = {}
    for o in new:
        if not is_inexact(o.tdtype):
            continue
        rg, err, flows = flags.get(id(o), (grad_on, None, True))
        if not rg or not flows:
            o.value = prims.stop_gradient(o).value
        elif err is not None:
            o.value = prims.no_derivative(o, err).value
        _set_requires_grad(o, rg)
    # each proxy keeps its eager twin on meta (its in-place updates applied): the autograd
    # graph eager would build, for the check at the end of the trace (backward_error)
    if replay is not None:
        for o in _proxies(out):
            if id(o) in mirrors:
                o._mirror, o._mirror_of = mirrors[id(o)], o.value
        for p in inputs:
            m = replay.metas.get(id(p))
            if m is not None:
                p._mirror, p._mirror_of = m, p.value
    return out


# errors eager's backward raises that the meta twin graph reproduces
_BACKWARD_ERRORS = ("modified by an inplace operation", "is not implemented")


def backward_error(outputs: list[TensorProxy]) -> str | None:
    """The RuntimeError eager's backward would raise for these program outputs (those that
    require grad), from the graph their meta twins built while the program was traced:
    a tensor saved for backward and then updated in place ("one of the variables needed
    for gradient computation has been modified by an inplace operation"), or a derivative
    eager does not implement. None when the twin graph raises nothing (or cannot tell:
    a twin is missing where an op ran without a replay)."""
    for o in outputs:  # a view eager's backward cannot rebuild (``rebased_view_error``)
        if o.requires_grad and o.__dict__.get(REWRITTEN_VIEW):
            message = rebased_view_error(o)
            if message is not None:
                return message
    twins = [o._mirror for o in outputs
             if o.requires_grad and getattr(o, "_mirror_of", None) is not None
             and o._mirror_of == o.value and o._mirror.requires_grad]
    if not twins:
        return None
    stale = _stale_saved_variable(twins)
    if stale is not None:
        return stale
    try:
        with torch.enable_grad():
            torch.autograd.grad(twins, [t for t in _graph_leaves(twins)],  # (the graph
                                [torch.ones_like(t) for t in twins], allow_unused=True,
                                retain_graph=True)  # is asked again: not freed)
    except RuntimeError as e:
        if any(m in str(e) for m in _BACKWARD_ERRORS):  # in eager's words: its tensor types
            return _in_eagers_words(str(e))
    except Exception:  # noqa: BLE001 - a meta kernel missing in some backward: no verdict
        pass
    return None


def saved_outputs(outputs: list[TensorProxy]) -> list[int]:
    """The positions in ``outputs`` (the program's tensor outputs) of the tensors whose
    memory eager's autograd graph of the outputs saves for backward: an output that is a
    saved tensor (``exp``'s and ``tanh``'s results), a view of one, or the base of one.
    Eager's backward raises "one of the variables needed for gradient computation has been
    modified by an inplace operation" where the caller writes such an output in place
    after the call; the compiled backward reads residuals of its own, so the jit saves
    these outputs with ``ctx.save_for_backward`` and its backward unpacks them, which
    checks their versions as eager's does (runtime/autograd.py). Read from the meta twins'
    graph (their saved tensors' storages); empty where an output has no current twin."""
    twins = {k: o._mirror for k, o in enumerate(outputs)
             if o.requires_grad and getattr(o, "_mirror_of", None) is not None
             and o._mirror_of == o.value and o._mirror.requires_grad}
    if not twins:
        return []
    saved = set()
    for fn in _reachable(list(twins.values())):
        for name in _saved_attributes(fn):
            try:
                v = getattr(fn, name)
            except Exception:  # noqa: BLE001 - written since (backward_error reports it)
                continue
            saved |= {_storage(t) for t in (v if isinstance(v, (list, tuple)) else [v])
                      if isinstance(t, torch.Tensor)}
    return [k for k, t in twins.items() if _storage(t) in saved]


def backward_nodes(root: TensorProxy) -> list | None:
    """The nodes of eager's autograd graph that ``root.backward()`` would run: those its
    eager twin's ``grad_fn`` reaches. None when ``root`` has no current twin (an op ran
    without a replay) or does not require grad."""
    if not root.requires_grad or getattr(root, "_mirror_of", None) is None or \
            not root._mirror_of == root.value or root._mirror.grad_fn is None:
        return None
    return _reachable([root._mirror])


def saves_tensors(fn) -> bool:
    """Whether the autograd node ``fn`` holds saved tensors, the ones a backward without
    ``retain_graph`` frees (torch's ``Node::release_variables``): running it again then
    raises "Trying to backward through the graph a second time"."""
    for name in _saved_attributes(fn):
        try:
            v = getattr(fn, name)
        except RuntimeError:  # a saved tensor written since: it is one
            return True
        if isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and any(
                isinstance(t, torch.Tensor) for t in v)):
            return True
    return False


def _in_eagers_words(message: str) -> str:
    """A message torch wrote about meta tensors, with eager's tensor types in it."""
    return re.sub(r"Meta(\w+)Type", r"torch.\1Tensor", message)


def _saved_attributes(fn) -> list[str]:
    """The attributes of the autograd node ``fn`` that unpack its saved values (and check
    their versions): a Python Function's ``saved_tensors``, a C++ node's ``_saved_*``."""
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        return ["saved_tensors"]
    return [n for n in dir(fn) if n.startswith("_saved_")]


def _reachable(roots: list[torch.Tensor]) -> list:
    """The autograd nodes the ``grad_fn`` of ``roots`` reach, each once."""
    seen, stack, nodes = set(), [f for r in roots if (f := _grad_fn(r)) is not None], []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nodes.append(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return nodes


def _stale_saved_variable(roots: list[torch.Tensor]) -> str | None:
    """Eager's "modified by an inplace operation" error for the twin graph of ``roots``, or
    None: every node the backward of ``roots`` would run unpacks its saved tensors, and a
    saved tensor whose version counter moved since it was saved raises (torch's
    ``SavedVariable::unpack``). The nodes are visited as the engine's ready queue takes
    them, latest ``sequence_nr`` first, and only their saved tensors are unpacked: no
    backward kernel runs, so a meta kernel a backward lacks (``IndexPutBackward0`` of a
    bool mask calls ``nonzero``) cannot hide the error."""
    for fn in sorted(_reachable(roots), key=lambda f: -f._sequence_nr()):
        for name in _saved_attributes(fn):
            try:
                getattr(fn, name)
            except RuntimeError as e:
                if _BACKWARD_ERRORS[0] in str(e):
                    return _in_eagers_words(str(e))
            except Exception:  # noqa: BLE001 - an attribute without a tensor behind it
                pass
    return None


def _graph_leaves(roots: list[torch.Tensor]) -> list[torch.Tensor]:
    """The leaves (tensors that require grad, without grad_fn) the graph of ``roots``
    reaches."""
    return [fn.variable for fn in _reachable(roots) if getattr(fn, "variable", None) is not None]


class _OpaqueNode(torch.autograd.Function):
    """The eager twin of a call traced without a replay (a custom ``autograd.Function``,
    whose forward ran traced): one node from its inputs' twins to new meta outputs that
    saves the tensors eager's node saves, so the twin graph stays connected through it and
    their version counters are checked as eager checks them (``opaque_twins``)."""

    @staticmethod
    def forward(ctx, plan, *tensors):
        metas, saved_inputs, saved_outputs, non_differentiable = plan
        outs = tuple(torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in metas)
        ctx.save_for_backward(*[tensors[i] for i in saved_inputs],
                              *[outs[k] for k in saved_outputs])
        ctx.mark_non_differentiable(*[outs[k] for k in non_differentiable])
        ctx.n_inputs = len(tensors)
        return outs

    @staticmethod
    def backward(ctx, *cotangents):
        return (None,) * (1 + ctx.n_inputs)


def opaque_twins(outs: list[TensorProxy], inputs: list[TensorProxy], saved_inputs: list[int],
                 saved_outputs: list[int]) -> None:
    """Give the outputs ``outs`` of a call that ran without a replay (a custom
    ``autograd.Function``) eager twins joined to the twins of its tensor ``inputs`` by one
    node that saves ``inputs[i]`` for ``i`` in ``saved_inputs`` and ``outs[k]`` for ``k``
    in ``saved_outputs`` (``ctx.save_for_backward``): a later in-place update of one of
    them makes eager's backward raise "modified by an inplace operation", and so
    ``backward_error``. Outputs that do not require grad get non-differentiable twins. Call
    it after the outputs' ``requires_grad`` is set; does nothing unless grad mode is on and
    an input requires grad (eager records no node then)."""
    if not torch.is_grad_enabled() or not any(p.requires_grad for p in inputs) or not outs:
        return
    plan = ([(hints(o.tshape), o.tdtype) for o in outs], saved_inputs, saved_outputs,
            [k for k, o in enumerate(outs) if not o.requires_grad])
    with torch._C.DisableTorchFunction():  # (called from user code: no tracing here)
        (m_inputs, _), metas = _meta_inputs(tuple(inputs), {}, current_trace().inputs)
        with torch.enable_grad(), torch.inference_mode(False):
            twins = _OpaqueNode.apply(plan, *m_inputs)
    for p in inputs:  # (a new twin of an input: later in-place updates move its version)
        if not (getattr(p, "_mirror_of", None) is not None and p._mirror_of == p.value):
            p._mirror, p._mirror_of = metas[id(p)], p.value
    for o, m in zip(outs, twins):
        o._mirror, o._mirror_of = m, o.value


def _set_requires_grad(p: TensorProxy, flag: bool) -> None:
    with torch._C.DisableTorchFunction():
        _T.requires_grad.__set__(p, flag)
