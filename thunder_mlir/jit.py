"""``thunder_mlir.jit``: trace, transform, lower, compile, cache and run.

Pipeline (design.md): trace -> [initial] -> decompose -> [prims] -> partition -> [plan]
-> lower-to-stablehlo -> [stablehlo] -> XLA. Each stage's module text is kept for
``last_traces``. Compiled entries are cached by a hashed key of the inputs' metadata
(shape, dtype, device, requires_grad), the values of non-tensor inputs, grad mode and the
default dtype.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import optree
import torch
import torch.utils._pytree as torch_pytree
from torch_mlir import ir

from . import compat, dtypes
from .context import COMPILE_LOCK
from .errors import TraceError, UnsupportedInputError
from .proxy import TensorProxy
from .runtime.plan import Plan, build_plan
from .tracing import Trace

_SCALARS = (bool, int, float, complex, str, type(None), torch.dtype, torch.device,
            type(Ellipsis), slice)


@dataclass
class Stage:
    """One stage of a compilation: its name, its MLIR text, and how long it took (s)."""

    name: str
    text: str
    seconds: float

    def __str__(self) -> str:
        return f"// ----- {self.name} ({self.seconds * 1e3:.1f} ms)\n{self.text}"


@dataclass
class CacheEntry:
    """A compiled specialization: the plan plus how to rebuild the output structure."""

    plan: Plan
    out_spec: Any
    out_consts: list  # per output leaf: None for a tensor, else the constant value
    out_tensor_positions: list[int]
    stages: list[Stage]
    fallbacks: list[str] = field(default_factory=list)


def _leaf_key(x, path: str):
    if isinstance(x, torch.Tensor):
        return (x.shape, x.dtype, x.device, x.requires_grad)
    if isinstance(x, _SCALARS):
        return (type(x), x)
    raise UnsupportedInputError(
        f"thunder_mlir.jit cannot accept an input of type {type(x).__module__}."
        f"{type(x).__qualname__} (at {path}). Accepted: tensors, numbers, strings, dtypes, "
        f"devices, None, slices, Ellipsis, torch.Size and tuples/lists/dicts of those. "
        f"Unpack the object into accepted values before the call.")


def _flatten(args, kwargs):
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    return leaves, spec


class ThunderFunction:
    """The callable ``jit`` returns: same signature as ``fn``, compiled per input metadata."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self._cache: dict[Any, CacheEntry] = {}
        self.last: CacheEntry | None = None
        self.hits = 0
        self.misses = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        leaves, spec = _flatten(args, kwargs)
        try:
            key = (spec, tuple(_leaf_key(x, f"leaf {i}") for i, x in enumerate(leaves)),
                   torch.is_grad_enabled(), torch.get_default_dtype())
            entry = self._cache.get(key)
        except TypeError:  # an unhashable constant: compile without caching
            key, entry = None, None
        if entry is None:
            self.misses += 1
            entry = self._compile(args, kwargs, leaves, spec)
            if key is not None:
                self._cache[key] = entry
        else:
            self.hits += 1
        self.last = entry
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        outs = entry.plan.run(tensors)
        out_leaves = list(entry.out_consts)
        for pos, t in zip(entry.out_tensor_positions, outs):
            out_leaves[pos] = t
        return torch_pytree.tree_unflatten(out_leaves, entry.out_spec)

    # ------------------------------------------------------------ compilation
    def _compile(self, args, kwargs, leaves, spec) -> CacheEntry:
        with COMPILE_LOCK:
            return compile_function(self.fn, leaves, spec)


def _program_device(tensors) -> torch.device:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise UnsupportedInputError(f"inputs are on several devices {sorted(map(str, devices))}; "
                                    "thunder_mlir compiles a program for one device")
    return devices.pop() if devices else torch.device("cpu")


def trace_function(fn: Callable, leaves, spec) -> tuple[Trace, Any, list]:
    """Trace ``fn`` on proxies for the tensor leaves; returns (trace, out_spec, out_leaves)."""
    compat.install()
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    trace = Trace(_program_device(tensors))
    with trace.building():
        arg_types = [dtypes.tensor_type(t.shape, t.dtype) for t in tensors]
        values = iter(trace.begin(arg_types))
        proxy_leaves = [trace.make_proxy(next(values), x.requires_grad)
                        if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = optree.tree_unflatten(spec, proxy_leaves)
        out = fn(*args, **kwargs)
        # torch's pytree: it knows the containers libraries register with torch
        # (Hugging Face ModelOutput, torch.return_types), which outputs often are.
        out_leaves, out_spec = torch_pytree.tree_flatten(out)
        results = []
        for i, x in enumerate(out_leaves):
            if type(x) is TensorProxy:
                results.append(x.value)
            elif isinstance(x, torch.Tensor):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a tensor that was not "
                    "computed from the inputs (a global or closure?); pass it as an input")
            elif any(type(v) is TensorProxy for v in optree.tree_leaves(x)) or \
                    "TensorProxy" in repr(type(x)):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a "
                    f"{type(x).__qualname__} holding tensors, which is not a pytree container "
                    "thunder_mlir can unpack; return tensors in tuples, lists or dicts")
        trace.finish(results)
    return trace, out_spec, out_leaves


def compile_function(fn: Callable, leaves, spec) -> CacheEntry:
    """Trace, transform, lower and compile ``fn`` for these inputs (under COMPILE_LOCK)."""
    from thunder_mlir.passes import PASSES

    stages: list[Stage] = []
    t0 = time.perf_counter()
    trace, out_spec, out_leaves = trace_function(fn, leaves, spec)
    module = trace.module
    stages.append(Stage("initial", _asm(module), time.perf_counter() - t0))
    for stage_name, pass_name in (("prims", "decompose"), ("plan", "partition"),
                                  ("stablehlo", "lower-to-stablehlo")):
        t = time.perf_counter()
        PASSES[pass_name].run(module)
        stages.append(Stage(stage_name, _asm(module), time.perf_counter() - t))
    t = time.perf_counter()
    plan, _texts = build_plan(module, trace.side_table, trace.device)
    stages.append(Stage("xla-compile", f"// {len(_texts)} region(s) compiled",
                        time.perf_counter() - t))
    positions = [i for i, x in enumerate(out_leaves) if type(x) is TensorProxy]
    consts = [None if type(x) is TensorProxy else x for x in out_leaves]
    return CacheEntry(plan, out_spec, consts, positions, stages, list(trace.fallbacks))


def _asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)


def jit(fn: Callable | torch.nn.Module, **options) -> Callable:
    """Compile a function or ``nn.Module`` with thunder_mlir.

    Returns a callable with the same signature that computes the same result: a
    ``ThunderFunction`` for a function, a ``ThunderModule`` (an ``nn.Module`` sharing the
    original's parameters and buffers, which are program inputs) for a module. Compilation
    happens on the first call for each new input metadata (shape, dtype, device,
    requires_grad) or non-tensor value. Raises ``UnsupportedInputError`` (a ValueError) for
    inputs of unsupported types and ``TraceError`` for programs that cannot be traced, naming
    the user's source line.
    """
    if options:
        raise TypeError(f"jit: unknown options {sorted(options)}")
    if isinstance(fn, torch.nn.Module):
        from .module import ThunderModule

        return ThunderModule(fn)
    return ThunderFunction(fn)
