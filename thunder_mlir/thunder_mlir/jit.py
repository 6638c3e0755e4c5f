"""``thunder_mlir.jit``: the entry point, a ``ThunderFunction`` (function.py) for a function
and a ``ThunderModule`` (module.py) for an ``nn.Module`` (a ``ThunderMethod`` for a bound
method of one)."""

from __future__ import annotations

import functools
import types
from typing import Callable

import torch

from thunder_mlir.function import ThunderFunction
from thunder_mlir.module import ThunderMethod, ThunderModule
from thunder_mlir.train_step import TrainStep


def jit(fn: Callable | torch.nn.Module, *, sharp_edges: str = "warn",
        cache: str = "constant values", recompile_limit: int = 8,
        executors=None, dynamic: bool | None = None) -> Callable:
    """Compile a function or ``nn.Module`` with thunder_mlir.

    Returns a callable with the same signature that computes the same result: a
    ``ThunderFunction`` for a function, a ``ThunderModule`` (an ``nn.Module`` sharing the
    original's parameters and buffers, which are program inputs) for a module. Compilation
    happens on the first call for each new input metadata (shape, dtype, device,
    requires_grad), Python input value, grad mode, default dtype or guarded value.

    Options: ``sharp_edges`` ("allow" | "warn" | "error"): what a non-functional call
    (Python's ``random``, ``time``) does — its value is constant-folded; "warn" (default)
    warns, "error" raises SharpEdgeError. (torch's random ops are compiled: they draw from a
    seed taken from torch's generator at every call, see ``thunder_mlir/rng.py``.)
    ``cache`` ("constant values" | "no caching"): "no caching" re-traces on every call.
    ``recompile_limit``: recompiles of one function past this warn
    (RecompileWarning) naming the changing value. ``executors``: user executors
    (``thunder_mlir.extend.OperatorExecutor``) in priority order, ahead of the built-in
    ``xla`` and ``torch``; their ops show as ``thunder.executor_call`` in the plan and
    ``last_traces`` gains an ``execution`` stage (docs/extend.md).

    ``dynamic`` (True | False | None, as torch.compile's): which input dimensions are
    traced as symbols, so that other sizes reuse one trace (one XLA compile per concrete
    shape, no re-trace): True: all (not a module's parameters and buffers, nor sizes 0 and
    1); None (default): those that changed since an earlier compilation, and those
    ``thunder_mlir.mark_dynamic`` marks; False: none (docs/dynamic_shapes.md).

    Functions are accepted inputs, specialized on and guarded by identity; a jitted function
    called while another is traced is inlined into it (docs/sharp_edges.md).

    Raises ``UnsupportedInputError`` (a ValueError) for inputs of unsupported types (sparse,
    nested, quantized tensors and tensor subclasses included), ``CallArgumentError`` (a
    TypeError) for arguments the signature does not take, ``TorchOpError`` (also eager's
    exception type) for op arguments eager rejects too, and other ``TraceError`` subclasses
    for programs that cannot be traced. Every error names the user's line first and hides
    thunder_mlir's frames from the traceback (``THUNDER_MLIR_VERBOSE_ERRORS=1`` shows them;
    ``error_reporting.py``).
    """
    from thunder_mlir.ir import optimizers
    from thunder_mlir.optimizer import OptimizerStep, optimizer_of_step, optimizer_step

    opt = optimizer_of_step(fn)
    if opt is not None:  # jit(opt.step): torch.optim's update as one program (optimizer.py)
        options = dict(sharp_edges=sharp_edges, cache=cache, recompile_limit=recompile_limit,
                       executors=executors)
        traced = None
        if optimizers.custom_step(type(opt)) is not None:  # its own step() traced
            traced = TrainStep(optimizer_step, **options)
        return OptimizerStep(opt, traced, **options)
    if isinstance(fn, types.MethodType) and isinstance(fn.__self__, torch.nn.Module):
        # m.forward = jit(m.forward): the module's parameters are inputs (module.py)
        return ThunderMethod(fn, sharp_edges=sharp_edges, cache=cache,
                             recompile_limit=recompile_limit, executors=executors)
    if isinstance(fn, torch.nn.Module):
        return ThunderModule(fn, sharp_edges=sharp_edges, cache=cache,
                             recompile_limit=recompile_limit, executors=executors,
                             dynamic=dynamic)
    jitted = ThunderFunction(fn, sharp_edges=sharp_edges, cache=cache,
                             recompile_limit=recompile_limit, executors=executors,
                             dynamic=dynamic)
    # called with a torch.optim optimizer: the whole training step (train_step.py)
    jitted.training_step = functools.partial(
        TrainStep, fn, sharp_edges=sharp_edges, cache=cache,
        recompile_limit=recompile_limit, executors=executors)
    return jitted
