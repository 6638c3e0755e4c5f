"""torch's private entry points whose presence or shape changes between releases, in one
place, with the version checks that choose them.

Checked: torch 2.13.0 (CPU build, Python 3.11, ``make test``) and 2.11.0 (PyPI's CUDA build,
Python 3.12, ``make compat``). The difference found between them:

* **How a higher-order operator runs eagerly.** ``torch.cond``/``while_loop``/``scan``
  compile the operator with ``torch.compile(..., fullgraph=True)``. torch 2.13 does it in
  ``torch._higher_order_ops.utils._hop_compile_and_call(fn, args, kwargs)``; torch 2.11 has
  no such function: each operator calls ``torch.compile(fn, backend=backend,
  fullgraph=True)`` itself inside ``with utils.setup_compilation_env() as backend``. While
  thunder_mlir traces, both must call the operator directly instead (so it reaches the
  tracer through the torch-function protocol): ``hop_eager_hooks`` returns the patches for
  the torch at hand, chosen by which entry point exists (not by the version number, so a
  2.12 or 2.14 with either layout works).

* **Autocast op tables.** torch 2.11 registers Dimname overloads in AutocastCPU and
  AutocastCUDA, ``_cudnn_rnn`` in AutocastCUDA, and no AutocastCUDA ``rms_norm`` kernel
  (2.13 casts it to float32). ``TORCH_BEFORE_2_13`` chooses ``autocast_lists.py``'s entries.

Other private torch calls (``torch._C._autograd`` graph-task queries, ``DelayedError``,
storage use counts, ``_unsafe_set_version_counter``) exist unchanged in both and are
wrapped here so a future change has one place to go. ``torch._C.DisableTorchFunction*``
and ``torch._prims_common`` are used directly across the package: public in all but name
and unchanged since torch 2.0.
"""

from __future__ import annotations

from typing import Callable

import torch

#: torch's version as a tuple of ints, e.g. (2, 11, 0).
TORCH_VERSION: tuple[int, ...] = tuple(
    int(p) for p in torch.__version__.split("+")[0].split(".")[:3] if p.isdigit())

#: Whether torch is older than 2.13, whose autocast op tables differ (autocast_lists.py).
TORCH_BEFORE_2_13: bool = TORCH_VERSION[:2] < (2, 13)

_HOP_UTILS = "torch._higher_order_ops.utils"


class _DirectCall:
    """The backend ``setup_compilation_env`` yields while thunder_mlir traces (torch < 2.13
    layout): ``torch.compile`` given it returns the function itself."""

    def __repr__(self):
        return "thunder_mlir.direct_call"


DIRECT_CALL = _DirectCall()


def hop_eager_hooks(is_tracing: Callable[[], bool]) -> tuple:
    """The patches, as ``(module, attribute, wrap)`` triples (``frontend/compat.py``
    applies them: ``setattr(module, attribute, wrap(original))``), that make torch's eager
    entry of higher-order operators call the operator directly while ``is_tracing()``.

    torch >= 2.13: ``_hop_compile_and_call`` is replaced. torch 2.11/2.12:
    ``setup_compilation_env`` yields ``DIRECT_CALL`` while tracing, and ``torch.compile``
    given that backend returns the function uncompiled (any other call is torch's own)."""
    import importlib

    utils = importlib.import_module(_HOP_UTILS)
    if hasattr(utils, "_hop_compile_and_call"):
        return ((_HOP_UTILS, "_hop_compile_and_call", lambda orig: _hop_call(orig, is_tracing)),)
    if hasattr(utils, "setup_compilation_env"):
        return ((_HOP_UTILS, "setup_compilation_env",
                 lambda orig: _compilation_env(orig, is_tracing)),
                ("torch", "compile", _compile_direct))
    raise ImportError(f"torch {torch.__version__}: neither {_HOP_UTILS}._hop_compile_and_call "
                      f"nor setup_compilation_env exists; thunder_mlir supports torch 2.11-2.14")


def _hop_call(original, is_tracing):
    def _hop_compile_and_call(fn, args, kwargs=None):
        if is_tracing():
            return fn(*args, **(kwargs or {}))
        return original(fn, args, kwargs)
    _hop_compile_and_call.__wrapped__ = original
    return _hop_compile_and_call


def _compilation_env(original, is_tracing):
    from contextlib import contextmanager

    @contextmanager
    def setup_compilation_env():
        if is_tracing():
            yield DIRECT_CALL
            return
        with original() as backend:
            yield backend
    setup_compilation_env.__wrapped__ = original
    return setup_compilation_env


def _compile_direct(original):
    import functools

    @functools.wraps(original)
    def compile(*args, **kwargs):  # noqa: A001 - torch.compile's own name
        if kwargs.get("backend") is DIRECT_CALL:
            return args[0] if args else kwargs["model"]
        return original(*args, **kwargs)
    compile.__wrapped__ = original
    return compile


def keep_graph() -> bool:
    """Whether the running backward was called with ``retain_graph=True``."""
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


def saved_tensors_hooks_active() -> bool:
    """Whether a ``torch.autograd.graph.saved_tensors_hooks`` context is open."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def delayed_error(message: str, n: int):
    """torch's ``DelayedError`` node: raises ``message`` when a gradient flows through it
    (used to refuse double backward through a compiled program)."""
    return torch._C._functions.DelayedError(message, n)


def storage_use_count(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage, ``t`` included."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def set_version(t: torch.Tensor, version: int) -> None:
    """Set ``t``'s version counter (shared with its views) to ``version``: an in-place
    view op replayed on a caller's tensor after the run that eager made before the reads
    the program saved for backward (synthetic_bases.py). torch 2.13 takes tuples of
    tensors and versions; a signature of one tensor is tried where that one is refused."""
    try:
        torch._C._autograd._unsafe_set_version_counter((t,), (version,))
    except TypeError:
        torch._C._autograd._unsafe_set_version_counter(t, version)
