"""Checks eager makes on tensor *values* while it runs, made by the compiled program.

Eager PyTorch raises where an index tensor holds an index out of range (``x[i]``,
``index_select``, ``gather``, ``scatter``, ``index_add_``, ``embedding``, ...): ATen checks
every index before it reads or writes (``aten/src/ATen/native/TensorAdvancedIndexing.cpp``,
``IndexKernel.cpp``: "index 5 is out of bounds for dimension 0 with size 3"). XLA's gather
and scatter clamp such an index, or skip its update (StableHLO spec, sections "gather" and
"scatter"): without a check, the compiled program would return a result where eager
raises, which this project treats as its worst defect. torch.compile's Inductor checks
them too (``device_assert`` of indirect indexing).

While tracing, each index operand adds a check (``check_indices``): a 0-d bool that is
True when every index is in range, with the error eager raises. The trace's checks are
folded into one int32 result of the program (``code``), placed after the write-backs:
the number of the first check that failed, or the number of checks when none did. The
runtime reads it after the program runs and, before any input is written back or any
result returned, raises the failed check's error (``raise_failed``). Cost per call: one
reduction per index operand, fused by XLA, and one 4-byte result read on the host (on a
GPU, an asynchronous device-side assert instead: ``raise_failed``).

Only ``thunder_mlir.jit`` programs carry checks (``Trace.runtime_checks``); a program
traced for ``thunder_mlir.grad``/``value_and_grad`` or ``thunder_mlir.distributed`` does
not (their result layouts are fixed), which docs/sharp_edges.md lists.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from thunder_mlir.frontend.tracing import current_trace
from thunder_mlir.ir import prims
from thunder_mlir.ir.proxy import TensorProxy


def check_indices(idx: TensorProxy, size: int, dim: int, *, negative: bool = True,
                  error: type[Exception] = IndexError, message: str | None = None) -> None:
    """Add a check that every element of the integer index tensor ``idx`` (any shape) is
    in range for a dimension ``dim`` of ``size`` elements: ``-size <= i < size`` with
    ``negative`` (indices that count from the end, as ``x[i]``), else ``0 <= i < size``
    (``gather``, ``scatter``, ``embedding``). At run time a failed check raises ``error``
    with ``message`` (default: eager's "index out of bounds for dimension d with size n"),
    naming the user's line. Nothing is added where the trace carries no checks, where
    ``idx`` is empty, or where ``size`` is symbolic."""
    trace = current_trace()
    if not getattr(trace, "runtime_checks", False) or not isinstance(size, int):
        return
    if len(trace._ips) > 1:  # inside a composite's region: checked on its operand, once
        if isinstance(idx.value, ir.BlockArgument):  # the composite is emitted (lift)
            trace.pending_checks.append((idx, size, dim, dict(negative=negative, error=error,
                                                              message=message)))
        return  # (an index a decomposition computes itself, or one inside a cond/while/
        # checkpoint region: not checked; docs/sharp_edges.md)
    n = 1
    for s in idx.tshape:
        if not isinstance(s, int):
            return
        n *= s
    if n == 0:
        return
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    i = prims.convert_element_type(idx, torch.int64)
    low = prims.elementwise("ge", i, prims.full(i.tshape, -size if negative else 0,
                                                torch.int64))
    high = prims.elementwise("lt", i, prims.full(i.tshape, size, torch.int64))
    ok = prims.reduce("reduce_and", prims.elementwise("bitwise_and", low, high),
                      list(range(len(i.tshape))))
    what = message or f"an index is out of bounds for dimension {dim} with size {size}"
    trace.checks.append((ok, error, f"{describe_frame(user_frame())}\n  {what} (eager "
                                    f"PyTorch raises {error.__name__} here too)"))


def lift(trace, block_args: list, outer: list[TensorProxy]) -> None:
    """After a composite is emitted: the checks its decomposition asked for on its own
    operands (``block_args``, the region's arguments) are made on the composite's operands
    ``outer``, at the insertion point around it."""
    pending, trace.pending_checks = trace.pending_checks, []
    for idx, size, dim, options in pending:
        if idx.value in block_args:
            check_indices(outer[block_args.index(idx.value)], size, dim, **options)
        else:
            trace.pending_checks.append((idx, size, dim, options))


def code(trace) -> TensorProxy:
    """The int32 0-d result that folds ``trace.checks``: the number of the first check
    that failed, or ``len(trace.checks)``."""
    n = len(trace.checks)
    out = prims.full((), n, torch.int32)
    for k in reversed(range(n)):
        ok = trace.checks[k][0]
        out = prims.where(ok, out, prims.full((), k, torch.int32))
    return out


def raise_failed(checks: list[tuple[type, str]], result: torch.Tensor) -> None:
    """Raise the error of the first failed check given the program's ``code`` result
    (a 0-d int32 tensor); nothing when every check held. On a GPU the result is not read
    on the host (that would wait for the device at every call): ``torch._assert_async``
    asserts it on the device, as Inductor's ``device_assert`` does, and a failure is a
    device-side assert error, not the check's own message."""
    if result.device.type != "cpu":
        torch._assert_async(result == len(checks),
                            "thunder_mlir: an index is out of range (eager raises here)")
        return
    k = int(result)
    if k < len(checks):
        error, message = checks[k]
        raise error(message)
