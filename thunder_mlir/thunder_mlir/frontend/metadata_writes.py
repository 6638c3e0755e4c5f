"""In-place view ops: ``t_``, ``transpose_``, ``swapdims_``/``swapaxes_``, ``squeeze_``,
``unsqueeze_``, ``as_strided_``. They change a tensor's sizes, strides and offset, not its
memory: the Python object the user holds now shows its memory another way.

Functionally (torch's ``FunctionalTensor`` does the same with its view metas) the object
*becomes a view of what it was*: ``x.t_()`` hands ``x``'s former role (its memory, its
place among its base's views, the views made from it so far, its place among the program's
inputs) to a new proxy, the *former self*, and rebinds ``x`` to ``former.t()``. Writes
through ``x`` then reach the memory through that view (functionalization.py), writes into
the memory are read by ``x`` and by the views made from ``x`` before (with the geometry
they were made with), and ``x`` itself is no view in eager's sense (``detach_()`` works on
it: ``is_eager_view``).

An input so changed changes the caller's tensor: ``Trace.input_restrides`` records the
in-place call, which the runtime replays on the caller's tensor after the data write-back
(``aliasing.output_views`` puts it among the output recipes: the views made from the input
before the call in the old geometry first, then the call, then the outputs that are the
input or its views made after).
"""

from __future__ import annotations

import weakref

import torch

from thunder_mlir.frontend.aliasing import _VIEW_OF, mark_views, next_seq, record_view
from thunder_mlir.frontend.tracing import current_trace
from thunder_mlir.ir.proxy import TensorProxy

_T = torch.Tensor
# the in-place view op -> the view op whose result it makes its tensor
INPLACE_VIEWS = {_T.t_: _T.t, _T.transpose_: _T.transpose, _T.swapdims_: _T.swapdims,
                 _T.swapaxes_: _T.swapaxes, _T.squeeze_: _T.squeeze,
                 _T.unsqueeze_: _T.unsqueeze, _T.as_strided_: _T.as_strided}
# the attributes of a proxy that describe its place among views and inputs (moved to the
# former self) rather than its autograd state
_ALIASING = ("_alias_root", _VIEW_OF, "_views", "_has_views")
RESTRIDED = "_restrided"  # proxy attribute: its last view step is an in-place view op
RESTRIDED_INPUT = "_restrided_input"  # proxy attribute: it is caller's input k, restrided
# proxy attribute: why an in-place view op on it under no_grad() is refused when it
# requires grad (an input regenerated from a synthetic base: synthetic_bases.py)
NO_GRAD_RESTRIDE = "_no_grad_restride"


def restride(x: TensorProxy, inplace, args: tuple, kwargs: dict) -> TensorProxy:
    """``inplace(x, *args, **kwargs)`` (one of ``INPLACE_VIEWS``) on the traced tensor
    ``x``: ``x`` rebound to a view of its former self (module docstring). Returns ``x``.
    Raises eager's errors for bad arguments (the view op's, run on the former self)."""
    trace = current_trace()
    view = INPLACE_VIEWS[inplace]
    why = getattr(x, NO_GRAD_RESTRIDE, None)
    if why is not None and x.requires_grad and not torch.is_grad_enabled():
        raise NotImplementedError(why)
    _eager_check(x, inplace, args, kwargs)
    from thunder_mlir.frontend.differentiability import note_base_written

    # (an in-place op on x for eager's version counter: the views made before it)
    root = getattr(x, "_alias_root", None)  # (no `or`: bool() of a proxy reads data)
    note_base_written(x if root is None else root, x)
    former = TensorProxy(x.value, x.tshape, x.tdtype, x.tdevice)
    with torch._C.DisableTorchFunction():
        _T.requires_grad.__set__(former, x.requires_grad)
    for k, v in x.__dict__.items():  # its aliasing state and its flags (no eager twin:
        if k not in ("value", "tshape", "tdtype", "tdevice", "_mirror", "_mirror_of",
                     RESTRIDED_INPUT):  # the replay restrided x's twin already)
            former.__dict__[k] = v
    _replace(x, former, trace)
    restrided_input = x.__dict__.pop(RESTRIDED_INPUT, None)
    for i, p in enumerate(trace.inputs):
        if p is x:
            trace.inputs[i] = former
            restrided_input = i
    for i, p in list(trace.mutated_inputs.items()):
        if p is x:
            trace.mutated_inputs[i] = former
    for k in _ALIASING:
        x.__dict__.pop(k, None)
    new = view(former, *args, **kwargs)
    if new is former or getattr(new, _VIEW_OF, None) is None:
        # (a view op that returned its input itself, or one not recorded as a view)
        new = TensorProxy(new.value, new.tshape, new.tdtype, new.tdevice)
        mark_views(former, new)
        record_view(view, (former, *args), kwargs, new)
    x.value, x.tshape = new.value, new.tshape
    with torch._C.DisableTorchFunctionSubclass():  # the wrapper's sizes and strides too
        _T.data.__set__(x, new)
    for k in _ALIASING:
        if k in new.__dict__:
            x.__dict__[k] = new.__dict__[k]
    x.__dict__[RESTRIDED] = True
    root = x._alias_root
    root._views = [weakref.ref(x) if r() is new else r for r in root._views]
    if restrided_input is not None:
        x.__dict__[RESTRIDED_INPUT] = restrided_input
        trace.input_restrides.append((restrided_input, inplace, args, kwargs,
                                      torch.is_grad_enabled(), x, next_seq()))
    return x


def _eager_check(x: TensorProxy, inplace, args: tuple, kwargs: dict) -> None:
    """Eager's RuntimeError for ``inplace(x, *args, **kwargs)`` (``t_()`` of a 3-D tensor,
    a dim out of range), from the call run on a meta tensor of eager's geometry for ``x``,
    raised at the user's line as a TorchOpRuntimeError."""
    from thunder_mlir.errors import TorchOpRuntimeError
    from thunder_mlir.frontend.aliasing import eager_meta
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    with torch._C.DisableTorchFunction():
        m = eager_meta(x)
    if m is None:
        return
    try:
        with torch._C.DisableTorchFunction():
            inplace(m, *args, **kwargs)
        return
    except RuntimeError as e:
        error = e
    except AssertionError:  # (a meta kernel's check: eager's CPU kernel gives its message)
        size = m.storage_offset() + sum((n - 1) * st for n, st in zip(m.shape, m.stride())) + 1
        if size > 1 << 20:
            return
        try:
            with torch._C.DisableTorchFunction():
                inplace(torch.zeros(size, dtype=m.dtype).as_strided(
                    m.shape, m.stride(), m.storage_offset()), *args, **kwargs)
            return
        except RuntimeError as e:
            error = e
        except Exception:  # noqa: BLE001 - not judged here: the view op checks
            return
    except Exception:  # noqa: BLE001 - (a proxy among the arguments): the view op checks
        return
    raise TorchOpRuntimeError(f"{describe_frame(user_frame())}\n  {error}\n  Eager PyTorch "
                              "raises this RuntimeError too.") from None


def _replace(x: TensorProxy, former: TensorProxy, trace) -> None:
    """Every reference to ``x`` in the view records (its base's list of views, its views'
    roots and steps) now names ``former``."""
    root = getattr(x, "_alias_root", None)
    if root is None:  # x was a root: its views are views of the former self now
        views = [r() for r in getattr(x, "_views", ())]
        for v in views:
            if v is not None:
                v._alias_root = former
    else:
        root._views = [weakref.ref(former) if r() is x else r for r in root._views]
        views = [r() for r in root._views]
    for v in views:
        made = getattr(v, _VIEW_OF, None) if v is not None else None
        if made is not None and any(a is x for a in _tensors(made[1], made[2])):
            func, a, kw, *rest = made
            sub = lambda t: former if t is x else t  # noqa: E731
            setattr(v, _VIEW_OF, (func, tuple(sub(t) for t in a),
                                  {k: sub(t) for k, t in kw.items()}, *rest))


def _tensors(args, kwargs):
    return [t for t in (*args, *kwargs.values()) if type(t) is TensorProxy]


def is_eager_view(p: TensorProxy) -> bool:
    """Whether eager's tensor for ``p`` is a view (has a ``_base``): a view step that is
    not an in-place view op, or an in-place view op of a view."""
    while (made := getattr(p, _VIEW_OF, None)) is not None:
        if not p.__dict__.get(RESTRIDED, False):
            return True
        p = made[1][0]
    return getattr(p, "_alias_root", None) is not None  # (a view whose step is unknown)
