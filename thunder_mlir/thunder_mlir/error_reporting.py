"""Errors a user can read: the user's line first, thunder_mlir's frames hidden.

Every public entry point (a jitted function's call, a jitted module's call, ``grad``,
``value_and_grad``) is an *error boundary* (:func:`error_boundary`). An exception that
leaves one is

* **located**: a ``ThunderError`` whose message does not start with ``file:line`` gets the
  user's line put first: the line being traced when it was raised, else the MLIR location
  the message names (``loc("file":line:col)``), else the line that called the jitted
  function;
* **translated** where the raw exception would not say what went wrong:

  - a torch op that fails while traced (a shape or dtype mismatch, say) is run again on
    meta tensors and on zero-filled tensors of the same metadata, outside the trace. If
    eager PyTorch rejects the arguments too, the error is eager's own exception type and
    message (``TorchOpRuntimeError``, a ``RuntimeError``, for ``torch.add`` of shapes
    (2,) and (3,)), after the user's line and with the op and its arguments named; if
    eager accepts them, the failure is thunder_mlir's and says so;
  - a tensor input thunder_mlir cannot compile (sparse, nested, quantized, a tensor
    subclass) is an ``UnsupportedInputError`` naming its position and the conversion;
  - a call whose arguments the function's (or module's ``forward``'s) signature does not
    accept is a ``CallArgumentError`` (a ``TypeError``) naming the call's line;
  - a ``NotImplementedError`` thunder_mlir raises on purpose while tracing (an unsupported
    feature, e.g. of a custom ``autograd.Function``) is an ``UnsupportedError``;
* **trimmed**: its traceback keeps the user's frames (and, for an exception thunder_mlir
  does not translate, the library frame that raised it) and drops thunder_mlir's and
  torch's frames in between, as ``jax`` does; a note says how to see them.

``THUNDER_MLIR_VERBOSE_ERRORS=1`` (read when the error happens) keeps every frame and
chains a translated error to the original (``raise ... from``), so thunder_mlir's
internals can be debugged.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import sys
import types
from typing import Callable

import optree
import torch

from thunder_mlir.errors import (
    CallArgumentError, ThunderError, TorchOpError, TraceError, UnsupportedError,
    UnsupportedInputError, torch_op_error_type)
from thunder_mlir.frontend.locations import INTERNAL_DIRS, PACKAGE_DIR

VERBOSE_ENV = "THUNDER_MLIR_VERBOSE_ERRORS"
HIDDEN_NOTE = (f"(thunder_mlir's internal frames are hidden from this traceback; set "
               f"{VERBOSE_ENV}=1 to show them)")
_DTYPE_ERROR = re.compile(r"not implemented for|dtype|scalar type")  # value-independent
_TRIAL_NUMEL = 1 << 22  # the largest inputs re-run on zeros to learn eager's error


def verbose() -> bool:
    """Whether ``THUNDER_MLIR_VERBOSE_ERRORS`` asks for full tracebacks (any value but
    empty, ``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


# ------------------------------------------------------------------------- frames
def _is_own(filename: str) -> bool:
    return filename.startswith(PACKAGE_DIR)


def _is_internal(filename: str) -> bool:
    """thunder_mlir, torch, optree, contextlib, frozen modules and torch-generated code: the
    machinery between the user's call and the user's (or a library's) code."""
    return filename.startswith(INTERNAL_DIRS) or \
        filename.startswith(("<frozen ", "<eval_with_key>"))


def _frames(tb) -> list[tuple[types.FrameType, int, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _trimmed(tb, keep_last: bool):
    """A traceback of the frames of ``tb`` that are not internal (plus the last frame if
    ``keep_last`` and it is not thunder_mlir's own). Returns (traceback, frames dropped)."""
    frames = _frames(tb)
    kept = [(i, fr) for i, fr in enumerate(frames) if not _is_internal(fr[0].f_code.co_filename)]
    if keep_last and frames and not _is_own(frames[-1][0].f_code.co_filename) and \
            (not kept or kept[-1][0] != len(frames) - 1):
        kept.append((len(frames) - 1, frames[-1]))
    out = None
    for _, (frame, lasti, lineno) in reversed(kept):
        out = types.TracebackType(out, frame, lasti, lineno)
    return out, len(frames) - len(kept)


def _user_frames(tb) -> list[tuple[int, types.FrameType, int]]:
    """(position, frame, line) of the frames of ``tb`` outside the machinery."""
    return [(i, f, ln) for i, (f, _, ln) in enumerate(_frames(tb))
            if not _is_internal(f.f_code.co_filename)]


def _source(filename: str, lineno: int) -> str:
    import linecache

    return linecache.getline(filename, lineno).strip()


def where(filename: str, lineno: int) -> str:
    """``file:line: source``, or ``file:line`` where the source is not available (a string
    given to ``exec``, ``python -c``)."""
    src = _source(filename, lineno)
    return f"{filename}:{lineno}: {src}" if src else f"{filename}:{lineno}"


def _frame_where(frame: types.FrameType, lineno: int | None = None) -> str:
    return where(frame.f_code.co_filename, frame.f_lineno if lineno is None else lineno)


def _is_users(frame: types.FrameType) -> bool:
    from thunder_mlir.frontend.sharp_edges import is_user_code

    return is_user_code(frame.f_code, frame.f_globals)


def _traced_line(tb) -> str | None:
    """Where the program was when the exception was raised: the user's innermost line, and
    the library line below it that made the failing call when that is not the user's."""
    frames = _user_frames(tb)
    if not frames:
        return None
    _, inner, inner_line = frames[-1]
    users = [(f, ln) for _, f, ln in frames if _is_users(f)]
    if not users or users[-1][0] is inner:
        return _frame_where(inner, inner_line)
    f, ln = users[-1]
    return f"{_frame_where(f, ln)}\n  (in {_frame_where(inner, inner_line)})"


def _call_site() -> str | None:
    """The line that called the jitted function (outside the machinery)."""
    f = sys._getframe(1)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    return _frame_where(f) if f is not None else None


_LOCATED = re.compile(r"^(<[^>\n]*>|\S[^\n]*?):\d+(:|$)", re.M)
_MLIR_LOC = re.compile(r'loc\("([^"]+)":(\d+):\d+\)')


def _starts_with_location(msg: str) -> bool:
    first = msg.lstrip("\n").split("\n", 1)[0]
    m = _LOCATED.match(first)
    return first.startswith("<unknown location>") or (
        m is not None and (m.group(1).startswith("<") or os.sep in m.group(1)
                           or m.group(1).endswith(".py")))


# --------------------------------------------------------------- input diagnosis
def unsupported_tensor(t: torch.Tensor) -> str | None:
    """Why thunder_mlir cannot take tensor ``t`` as an input (what it is and what to do), or
    None for a dense tensor it can compile."""
    if t.is_nested:
        return ("a nested tensor; thunder_mlir compiles programs on dense (strided) tensors. "
                "Pass its components (t.unbind()) or a padded dense tensor "
                "(t.to_padded_tensor(0.0)) instead")
    if t.layout is not torch.strided:
        return (f"a {str(t.layout).replace('torch.', '')} tensor; thunder_mlir compiles "
                "programs on dense (strided) tensors. Convert it with t.to_dense() before the "
                "call, or call the function without jit")
    if t.is_quantized:
        return (f"a quantized tensor ({t.dtype}); thunder_mlir does not compile quantized "
                "tensors. Pass t.dequantize() instead")
    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        return (f"a tensor subclass {type(t).__module__}.{type(t).__qualname__}, whose "
                "methods and __torch_function__ the compiled program would not run. Pass "
                "t.as_subclass(torch.Tensor) instead")
    return None


def check_tensor_inputs(leaves, paths: Callable[[], list[str]]) -> None:
    """Raise UnsupportedInputError for the first tensor leaf thunder_mlir cannot compile
    (see :func:`unsupported_tensor`). ``paths()`` gives each leaf's argument path."""
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor):
            why = unsupported_tensor(x)
            if why is not None:
                raise UnsupportedInputError(f"the input at {paths()[i]} is {why}.")


def _unsupported_input(args, kwargs) -> UnsupportedInputError | None:
    try:
        leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
        check_tensor_inputs(leaves, lambda: argument_paths(args, kwargs))
    except UnsupportedInputError as e:
        return e
    except Exception:  # noqa: BLE001 - a diagnosis must never mask the original error
        return None
    return None


def argument_paths(args, kwargs) -> list[str]:
    """The path of each pytree leaf of a call's ``(args, kwargs)``, as the user spells it
    (``args[0]``, ``kwargs['mask']``, ``args[1][2]``), for error messages and guards."""
    from thunder_mlir.frontend.pytrees import AttributeEntry, leaf_paths

    names = []
    for p in leaf_paths((args, kwargs)):  # input objects' attributes: .name
        head, rest = ("args", p[1:]) if p[0].entry == 0 else ("kwargs", p[1:])
        names.append(head + "".join(f".{e.entry}" if isinstance(e, AttributeEntry)
                                    else f"[{e.entry!r}]" for e in rest))
    return names


def tensor_argument_paths(leaves, spec) -> list[str]:
    """The argument path of each tensor leaf of a call flattened by optree into
    (``leaves``, ``spec``), as :func:`argument_paths` spells it (for error messages)."""
    args, kwargs = optree.tree_unflatten(spec, leaves)
    paths = argument_paths(args, kwargs)
    return [p for p, x in zip(paths, leaves) if isinstance(x, torch.Tensor)]


# ------------------------------------------------------------------ op diagnosis
def _dispatch_call(tb):
    """(func, args, kwargs) of the torch call that was being traced when the exception was
    raised: the first ``dispatch`` frame below the innermost frame outside the machinery
    (so an exception the user's own code raises is never taken for an op's)."""
    from thunder_mlir.frontend import dispatch

    frames = _frames(tb)
    last_outside = max((i for i, (f, _, _) in enumerate(frames)
                        if not _is_internal(f.f_code.co_filename)), default=-1)
    for f, _, _ in frames[last_outside + 1:]:
        if f.f_code is dispatch.dispatch.__code__:
            loc = f.f_locals
            if "func" in loc and "args" in loc:
                return loc["func"], loc["args"], loc.get("kwargs") or {}
    return None


def _op_name(func) -> str:
    from thunder_mlir.frontend.torch_fallback import qualified_name

    try:
        return qualified_name(func)
    except Exception:  # noqa: BLE001 - naming is best effort
        return repr(func)


def _describe_arg(x) -> str:
    from thunder_mlir.ir.proxy import TensorProxy

    if type(x) is TensorProxy:
        return f"tensor(shape={tuple(x.tshape)}, dtype={x.tdtype})"
    if isinstance(x, list) or type(x) is tuple:
        inner = ", ".join(_describe_arg(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else \
            f"({inner}{',' if len(x) == 1 else ''})"
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _describe_call(func, args, kwargs) -> str:
    parts = [_describe_arg(a) for a in args] + [f"{k}={_describe_arg(v)}"
                                                 for k, v in kwargs.items()]
    return f"{_op_name(func)}({', '.join(parts)})"


def _rerun(func, leaves, spec, device: str) -> BaseException | None:
    """Run ``func`` eagerly, outside the trace, with every proxy replaced by a tensor of its
    shape and dtype (on the meta device, or zero-filled on ``device``), under no_grad and a
    forked RNG; the exception it raises, or None."""
    from thunder_mlir.ir.proxy import TensorProxy

    with torch._C.DisableTorchFunction():
        new = [torch.zeros(x.tshape, dtype=x.tdtype, device=device)
               if type(x) is TensorProxy else x for x in leaves]
    a, k = optree.tree_unflatten(spec, new)
    cuda = [device] if device.startswith("cuda") else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=cuda), \
                torch._C.DisableTorchFunction():
            func(*a, **k)
    except Exception as err:  # noqa: BLE001 - the error eager raises is what is wanted
        return err
    return None


def _plain(x):
    """``x`` with list and dict subclasses (the program's frozen input containers) made
    plain lists and dicts, so that a flatten reaches the proxies inside."""
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if type(x) is tuple:
        return tuple(_plain(v) for v in x)
    return x


def _holds_proxy(x) -> bool:
    from thunder_mlir.ir.proxy import TensorProxy

    return isinstance(x, (tuple, list, dict)) and any(
        type(v) is TensorProxy or _holds_proxy(v)
        for v in (x.values() if isinstance(x, dict) else x))


_UNJUDGED = object()  # eager_error: the call cannot be re-run to learn what eager does


def eager_error(func, args, kwargs, seen: BaseException | None = None):
    """The exception eager PyTorch raises for ``func(*args, **kwargs)`` where the tensors
    are proxies, judged by metadata alone: the call is re-run on meta tensors and on
    zero-filled tensors of the proxies' shapes, dtypes and device (a factory call, without
    tensor arguments, on the meta device). An error from both runs is eager's (the
    zero-filled run gives eager's exact wording). An error on zeros alone counts when it is
    about dtypes (``... not implemented for 'Float'``), which no value causes, or when it
    has the type of ``seen``, the error thunder_mlir raised without knowing any value.
    Returns that exception, None if eager accepts the call, or ``_UNJUDGED`` when it cannot
    be judged (a user function among the arguments is never re-run; inputs over 4M
    elements are not re-run on zeros)."""
    from thunder_mlir.ir.proxy import TensorProxy

    leaves, spec = optree.tree_flatten(_plain((args, kwargs)), none_is_leaf=True)
    if any(isinstance(x, (types.FunctionType, types.MethodType, functools.partial))
           or (type(x) is not TensorProxy and _holds_proxy(x)) for x in leaves):
        return _UNJUDGED
    proxies = [x for x in leaves if type(x) is TensorProxy]
    if not proxies:  # a factory: its arguments are Python values
        with torch.device("meta"):
            meta = _rerun(func, leaves, spec, "meta")
        return _UNJUDGED if meta is not None and "'Meta' backend" in str(meta) else meta
    device = proxies[0].tdevice
    meta = _rerun(func, leaves, spec, "meta")
    no_meta_kernel = meta is not None and "'Meta' backend" in str(meta)
    if no_meta_kernel:
        meta = None  # says nothing about the arguments
    numel = sum(math.prod(p.tshape) for p in proxies)
    if device.type not in ("cpu", "cuda") or numel > _TRIAL_NUMEL:
        return meta if meta is not None or not no_meta_kernel else _UNJUDGED
    real = _rerun(func, leaves, spec, str(device))
    if any("TensorProxy" in str(err) for err in (meta, real) if err is not None):
        return _UNJUDGED  # a proxy was not replaced: the runs say nothing
    if real is not None and (meta is not None or _DTYPE_ERROR.search(str(real))
                             or (seen is not None and type(real) is type(seen))):
        return real
    return None if real is None else _UNJUDGED


def _op_error(e: BaseException, func, args, kwargs, loc: str) -> BaseException | None:
    """The exception to show for ``e``, raised while ``func`` was traced: eager's error
    (``TorchOpError``) when eager rejects the arguments too; a thunder_mlir limitation
    (``UnsupportedError``) when eager accepts them and ``e`` is no deliberate refusal;
    None to keep ``e``."""
    if isinstance(e, NotImplementedError) and _starts_with_location(str(e)):
        return None  # a deliberate refusal: the re-run cannot reproduce what it refuses
        # (autograd state such as requires_grad is not carried by the re-run's tensors)
    eager = eager_error(func, args, kwargs, e)
    call = _describe_call(func, args, kwargs)
    if eager is not None and eager is not _UNJUDGED:
        msg = str(eager).strip() or type(eager).__name__
        return torch_op_error_type(type(eager))(
            f"{loc}\n  {msg}\n  Eager PyTorch raises this {type(eager).__name__} for these "
            f"arguments too: {call}. Fix the shapes or dtypes at this line.")
    if eager is _UNJUDGED or isinstance(e, (NotImplementedError, ThunderError)) or \
            _starts_with_location(str(e)):
        return None  # thunder_mlir's own refusal, with its own explanation and line
    return UnsupportedError(
        f"{loc}\n  thunder_mlir failed on {call}, which eager PyTorch accepts "
        f"({type(e).__name__}: {str(e).strip()}). This is a thunder_mlir limitation or bug: "
        f"please report it, with the traceback {VERBOSE_ENV}=1 shows. Meanwhile, compute "
        "this op outside the jitted function.")


# ------------------------------------------------------------------ translation
def _bind_error(target, args, kwargs) -> str | None:
    """``name(signature)`` if ``args``/``kwargs`` do not fit ``target``'s signature."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return f"{getattr(target, '__qualname__', None) or repr(target)}{sig}"
    return None


def _located(e: BaseException, tb, call_site: str | None) -> None:
    """Put the user's line first in ``e``'s message (in place), unless it is there."""
    msg = str(e).strip()
    if _starts_with_location(msg) or len(e.args) != 1 or str(e.args[0]).strip() != msg:
        return
    loc = _traced_line(tb)
    if loc is None:
        m = _MLIR_LOC.search(msg)
        loc = where(m.group(1), int(m.group(2))) if m else call_site
    if loc is not None:
        e.args = (f"{loc}\n  {msg}",)


def translate(e: BaseException, *, target=None, args=(), kwargs=None,
              call_site: str | None = None) -> BaseException:
    """The exception to show for ``e``: ``e`` itself (its message located) or a translation
    (module docstring). ``target``: the user's callable whose signature ``args``/``kwargs``
    must fit; ``call_site``: ``file:line: source`` of the call of the jitted function."""
    kwargs = kwargs or {}
    tb = e.__traceback__
    if not isinstance(e, UnsupportedInputError):
        bad = _unsupported_input(args, kwargs)
        if bad is not None:
            if call_site is not None:
                bad.args = (f"{call_site}\n  {bad}",)
            return bad
    if isinstance(e, TypeError) and not isinstance(e, ThunderError) and target is not None:
        sig = _bind_error(target, args, kwargs)
        if sig is not None:
            return CallArgumentError(
                f"{call_site or '<unknown location>'}\n  {str(e).strip()}\n  The jitted "
                f"callable takes the arguments of {sig}: call it as you would call the "
                "original.")
    if not isinstance(e, ThunderError) or type(e) is TraceError:
        call = _dispatch_call(tb)
        if call is not None:
            new = _op_error(e, *call, _traced_line(tb) or call_site or "<unknown location>")
            if new is not None:
                return new
    frames = _frames(tb)
    raised_by_us = bool(frames) and _is_own(frames[-1][0].f_code.co_filename)
    if type(e) is NotImplementedError and raised_by_us:  # a deliberate refusal
        new = UnsupportedError(str(e).strip())
        _located(new, tb, call_site)
        return new
    if isinstance(e, ThunderError) or (raised_by_us and isinstance(e, NotImplementedError)):
        _located(e, tb, call_site)
    return e


def report(e: BaseException, **context) -> BaseException:
    """The exception a public entry point raises for ``e``: translated (``translate``,
    same keyword arguments) and, unless ``THUNDER_MLIR_VERBOSE_ERRORS`` is set, with a
    traceback trimmed to the user's frames and a note saying so (``error_boundary`` raises
    it without adding its own frame)."""
    new = translate(e, **context)
    full = verbose()
    if new is not e:
        new.__traceback__ = e.__traceback__
        new.original = e  # the exception thunder_mlir translated, for debugging
        if full:
            new.__cause__ = e
        else:
            new.__cause__, new.__suppress_context__ = None, True
    if full:
        return new
    ours = isinstance(new, ThunderError)
    tb, dropped = _trimmed(new.__traceback__, keep_last=not ours)
    new.__traceback__ = tb
    if ours and new.__cause__ is None:
        new.__suppress_context__ = True  # an internal exception handled on the way
    if dropped and HIDDEN_NOTE not in getattr(new, "__notes__", ()):
        new.add_note(HIDDEN_NOTE)
    return new


def _signature_target(self):
    """The user's callable whose signature a call of the jitted ``self`` must fit (its
    ``signature_target()``: ThunderFunction and ThunderModule define it), or None."""
    target = getattr(self, "signature_target", None)
    return target() if target is not None else None


def boundary_exception(e: Exception, target_self, args, kwargs) -> BaseException:
    """The exception a public entry point raises for ``e`` (``report``), or ``e`` itself
    inside a trace (a jitted function called by another one: the outermost boundary
    reports). ``target_self``: the jitted object whose method was called, or None; ``args``
    without it. The caller raises the result as ``error_boundary`` does: a bare ``raise``
    when it is ``e``, else the new exception with its traceback kept as set."""
    from thunder_mlir.frontend.tracing import _local

    if getattr(_local, "trace", None) is not None:
        return e
    try:
        return report(e, target=_signature_target(target_self) if target_self is not None
                      else None, args=args, kwargs=kwargs, call_site=_call_site())
    except Exception:  # noqa: BLE001 - reporting must never replace the error
        return e


def error_boundary(fn: Callable) -> Callable:
    """Decorate a public entry point (a method of a jitted object, or a function):
    exceptions leaving it are reported (``report``: located, translated, trimmed). Inside a
    trace (a jitted function called by another one) it re-raises untouched: the outermost
    boundary reports. ``ThunderFunction.__call__`` inlines the same handler (no wrapper
    frame on the cache-hit path)."""
    is_method = next(iter(inspect.signature(fn).parameters), None) == "self"

    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            shown = boundary_exception(e, args[0] if is_method else None,
                                       args[1:] if is_method else args, kwargs)
            if shown is e:
                raise  # a bare raise adds no frame: the trimmed traceback stays as set
            tb = shown.__traceback__
            try:
                raise shown  # noqa: B904 - the cause is set (or hidden) by report()
            except Exception:
                shown.__traceback__ = tb  # drop this frame, added by the raise
                raise
    return boundary
