"""Runs of torch functions with the device's autocast on and off, for ``autocast.py``.

``affected`` answers "would eager autocast change what this call computes?" for a call
that no autocast table covers: the torch function runs twice on tensors standing for the
proxies, with the program device's autocast on and off, and the ATen ops it reaches (with
their dtypes, recorded by a ``TorchDispatchMode``) are compared. The tensors are real
zero-filled tensors where the device exists (so that a kernel that calls another ATen op
internally, as CPU ``_trilinear`` calls ``bmm``, is seen too), else fake tensors of the
device (``torch._subclasses.FakeTensorMode``: no data and no kernels, but they carry the
device's dispatch keys, so ATen's ``AutocastCPU``/``AutocastCUDA`` kernels run, on a
CPU-only build too; a kernel's internal calls are not seen).

``run_fake`` gives a torch fallback op's output metadata under the current autocast state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree
import torch

from thunder_mlir.ir.proxy import TensorProxy

_MODE = None
_CACHE: dict = {}
_CACHE_LIMIT = 4096


def _fake_mode():
    global _MODE
    if _MODE is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        _MODE = FakeTensorMode(allow_non_fake_inputs=False)
    return _MODE


def _to_fake(args, kwargs, device: torch.device):
    mode = _fake_mode()

    def f(x):
        if type(x) is TensorProxy:
            with mode:
                return torch.empty(x.tshape, dtype=x.tdtype, device=device)
        return x
    return optree.tree_map(f, (args, kwargs), none_is_leaf=True)


def _to_zeros(args, kwargs, device: torch.device):
    def f(x):
        return torch.zeros(x.tshape, dtype=x.tdtype, device=device) \
            if type(x) is TensorProxy else x
    return optree.tree_map(f, (args, kwargs), none_is_leaf=True)


def _device_exists(device: torch.device) -> bool:
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return torch.cuda.is_available()
    return False


def _recorder():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        """Logs each ATen op that reaches the Python key, with its tensors' dtypes (autocast
        runs above it: its casts show as ``_to_copy`` ops, its dtypes in the ops after)."""

        def __init__(self):
            super().__init__()
            self.log: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            dts = lambda t: tuple(x.dtype for x in optree.tree_leaves(t, none_is_leaf=True)
                                  if isinstance(x, torch.Tensor))
            self.log.append((str(func), dts((args, kwargs)), dts(out)))
            return out
    return Recorder()


def _run(func, args, kwargs, device: torch.device, autocast_on: bool | None, record: bool,
         real: bool = False):
    """``func`` on fake copies of the proxies (``real``: zero-filled tensors of the device,
    torch's generator untouched); ``autocast_on`` None keeps the current state. Returns
    (output, ATen log or None)."""
    import contextlib
    import logging

    dev = device.type
    prev_on = torch.is_autocast_enabled(dev)
    rec = _recorder() if record else None
    # FakeTensorMode logs each failing meta kernel at ERROR level; a failure here is an
    # answer (the caller falls back), not something to show the user
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    prev_level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    if autocast_on is not None:
        torch.set_autocast_enabled(dev, autocast_on)
    try:
        with torch._C.DisableTorchFunction():
            fargs, fkwargs = (_to_zeros if real else _to_fake)(args, kwargs, device)
        where = torch.random.fork_rng(devices=[device] if dev == "cuda" else []) if real \
            else _fake_mode()
        with torch._C.DisableTorchFunction(), torch.no_grad(), where, \
                (rec if rec is not None else contextlib.nullcontext()):
            return func(*fargs, **fkwargs), (rec.log if rec is not None else None)
    finally:
        torch.set_autocast_enabled(dev, prev_on)
        fake_log.setLevel(prev_level)


def _signature(func, args, kwargs, device) -> tuple | None:
    """A hashable key for the probe cache (None if an argument is not hashable)."""
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    key = []
    for x in leaves:
        if type(x) is TensorProxy:
            key.append(("T", x.tshape, x.tdtype))
        else:
            try:
                hash(x)
            except TypeError:
                return None
            key.append((type(x), x))
    dev = device.type
    return (func, dev, torch.get_autocast_dtype(dev), spec, tuple(key))


def affected(func: Callable, args, kwargs, device: torch.device) -> bool | None:
    """True if the device's autocast (as now enabled) changes the ATen ops ``func(*args,
    **kwargs)`` reaches or their dtypes, False if not, None if the fake runs fail (then
    the caller must not assume either). Cached per function, argument metadata and
    autocast dtype."""
    key = _signature(func, args, kwargs, device)
    if key is not None and key in _CACHE:
        return _CACHE[key]
    verdict = None
    for real in ((True, False) if _device_exists(device) else (False,)):
        results = []
        for on in (True, False):
            try:
                out, log = _run(func, args, kwargs, device, on, record=True, real=real)
                outs = [(x.dtype, tuple(x.shape))
                        for x in optree.tree_leaves(out, none_is_leaf=True)
                        if isinstance(x, torch.Tensor)]
                results.append((log, outs))
            except Exception:  # noqa: BLE001 - an op that fails on zeros / fake tensors
                results.append(None)
        if None not in results:
            verdict = results[0] != results[1]
            break
    if key is not None:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = verdict
    return verdict


def run_fake(func: Callable, args, kwargs, device: torch.device) -> Any:
    """``func(*args, **kwargs)`` on fake tensors of ``device`` under the current autocast
    state; returns its output with each tensor replaced by a meta tensor of the same shape
    and dtype. Raises what the op raises."""
    out, _ = _run(func, args, kwargs, device, None, record=False)
    with torch._C.DisableTorchFunction():
        return optree.tree_map(
            lambda x: torch.empty(x.shape, dtype=x.dtype, device="meta")
            if isinstance(x, torch.Tensor) else x, out, none_is_leaf=True)
