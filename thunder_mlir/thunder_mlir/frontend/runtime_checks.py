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

Checks inside regions. An index checked inside a ``torch.cond`` branch or a
``while_loop``/``scan`` body is checked where the region runs: the region's checks fold
into one int32 code the region returns beside its values (``region_scope``,
``region_code``): a branch that is not taken returns "no failure", a loop carries the
first failure over its iterations. Outside the region the code becomes one check per
check inside (``add_region_code``), with their messages. A ``checkpoint`` region needs
nothing: a check's value computed inside it is one of its results like any other value
used after it. (Eager's recomputation checks again in the backward, on the memory as
written after the checkpoint: a check reading memory written later is refused,
``region_reads.stale_recomputation``.) Indices of a while loop's ``cond_fn`` are not
checked (its region returns the predicate only), nor indices a decomposition computes
itself (docs/sharp_edges.md).

Programs of ``thunder_mlir.jit``, ``thunder_mlir.grad``/``value_and_grad``, ``jit(step)``
and ``thunder_mlir.distributed`` carry checks (``Trace.runtime_checks``). A distributed
step's update keeps parameters and optimizer state unchanged when a check failed
(``distributed/program.py``), since its buffers are donated and cannot be restored.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch_mlir import ir

from thunder_mlir.frontend.tracing import current_trace
from thunder_mlir.frontend.value_guards import COMPOSITE_HOLDER
from thunder_mlir.ir import prims
from thunder_mlir.ir.proxy import TensorProxy


def check_indices(idx: TensorProxy, size: int, dim: int, *, negative: bool = True,
                  error: type[Exception] = IndexError, message: str | None = None) -> bool:
    """Add a check that every element of the integer index tensor ``idx`` (any shape) is
    in range for a dimension ``dim`` of ``size`` elements: ``-size <= i < size`` with
    ``negative`` (indices that count from the end, as ``x[i]``), else ``0 <= i < size``
    (``gather``, ``scatter``, ``embedding``). At run time a failed check raises ``error``
    with ``message`` (default: eager's "index out of bounds for dimension d with size n"),
    naming the user's line. Nothing is added where ``size`` is symbolic (or as
    ``check_values`` says). Returns whether the check is made (``check_values``)."""
    if not isinstance(size, int):
        return False
    return check_values(idx, lambda i: in_range(i, -size if negative else 0, size), error,
                 message or f"an index is out of bounds for dimension {dim} with size {size}")


def in_range(x: TensorProxy, low: int, high: int, allowed: int | None = None
             ) -> TensorProxy:
    """Elementwise ``low <= x < high`` (or ``x == allowed``, an ``ignore_index``) of an
    integer tensor, as a bool tensor of ``x``'s shape."""
    i = prims.convert_element_type(x, torch.int64)
    ok = prims.elementwise("bitwise_and",
                           prims.elementwise("ge", i, prims.full(i.tshape, low, torch.int64)),
                           prims.elementwise("lt", i, prims.full(i.tshape, high, torch.int64)))
    if allowed is not None:
        ok = prims.elementwise("bitwise_or", ok, prims.elementwise(
            "eq", i, prims.full(i.tshape, allowed, torch.int64)))
    return ok


def check_values(x: TensorProxy, ok_of, error: type[Exception], message: str) -> bool:
    """Add a check that ``ok_of(x)`` (a bool tensor of ``x``'s shape built from ``x``
    with prims, e.g. ``in_range``) holds for every element of ``x``: eager's check of a
    tensor's values (an index, a class target, a weight's sign). At run time a failed
    check raises ``error`` with ``message`` after the user's line. Nothing is added where
    the trace carries no checks, where ``x`` is empty or has symbolic sizes, or for a value
    a decomposition computes itself (inside a composite, a check of one of its operands is
    made on the composite's operand once the composite is emitted: ``lift``).

    Returns True where the check is made (or will be, on a composite's operand): a
    lowering may then leave an out-of-range value's case to it (scatter._copy_one_index)."""
    trace = current_trace()
    if not getattr(trace, "runtime_checks", False):
        return False
    owner = trace.ip.block.owner
    if owner is not None and COMPOSITE_HOLDER in owner.attributes:
        # inside a composite's decomposition: checked on its operand, once
        if isinstance(x.value, ir.BlockArgument):  # the composite is emitted (lift)
            trace.pending_checks.append(
                (x, lambda outer: check_values(outer, ok_of, error, message)))
            return True
        return False  # (a value a decomposition computes itself: not checked; sharp_edges.md)
    if trace.region_checks is None:  # a while loop's cond_fn (see the module docstring)
        return False
    n = 1
    for s in x.tshape:
        if not isinstance(s, int):
            return False
        n *= s
    if n == 0:
        return True  # (no index to check)
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    ok = prims.reduce("reduce_and", ok_of(x), list(range(len(x.tshape))))
    _add(trace, ok, error, CheckMessage.of(describe_frame(user_frame()), message, error))
    return True


class CheckMessage(str):
    """A check's message as raised: the user's line (``where``), then what eager checks
    (``what``), keeping both parts for readers other than the error
    (region_reads.checkpoint_reads). Pickles as a str with its attributes."""

    where: str = ""
    what: str = ""

    @classmethod
    def of(cls, where: str, what: str, error: type[Exception]) -> "CheckMessage":
        """``where``, newline, ``what`` and eager's error name."""
        m = cls(f"{where}\n  {what} (eager PyTorch raises {error.__name__} here too)")
        m.where, m.what = where, what
        return m


def _add(trace, ok: TensorProxy, error: type[Exception], message: str) -> None:
    """Record a check (0-d bool ``ok``) in the innermost cond/while region being traced,
    or in the trace's own checks at the top level."""
    (trace.region_checks[-1] if trace.region_checks else trace.checks).append(
        (ok, error, message))


@contextmanager
def region_scope(enabled: bool = True):
    """Collect the checks made while a cond branch or a loop body is traced; yields the
    list they go to ((ok, error, message) tuples). ``enabled=False`` (a while loop's
    ``cond_fn``): its indices are not checked."""
    trace = current_trace()
    saved = trace.region_checks
    checks: list = []
    trace.region_checks = (saved or []) + [checks] if enabled else None
    try:
        yield checks
    finally:
        trace.region_checks = saved


def lift(trace, block_args: list, outer: list[TensorProxy]) -> None:
    """After a composite is emitted: the checks its decomposition asked for on its own
    operands (``block_args``, the region's arguments) are made on the composite's operands
    ``outer``, at the insertion point around it."""
    pending, trace.pending_checks = trace.pending_checks, []
    for x, redo in pending:
        if x.value in block_args:
            redo(outer[block_args.index(x.value)])
        else:
            trace.pending_checks.append((x, redo))


def code(trace) -> TensorProxy:
    """The int32 0-d result that folds ``trace.checks``: the number of the first check
    that failed, or ``len(trace.checks)``."""
    return region_code(trace.checks)


def unless_failed(trace, code_: TensorProxy, news: list[TensorProxy],
                  olds: list[TensorProxy]) -> list[TensorProxy] | None:
    """Each new value of ``news`` where every check of ``trace`` held (``code_``, the
    checks' code, equals their number), else its input's value before the program
    (``olds``, of the same shapes and dtypes): written inputs keep their values when a
    check fails, as eager raises before writing them. For writes the runtime cannot undo
    after the run (donated buffers: runtime/resident.py; a distributed step's update
    guards its own). None (nothing emitted) where a shape is symbolic."""
    if any(type(s) is not int for n in news for s in n.tshape):
        return None
    held = prims.elementwise("eq", code_, prims.full((), len(trace.checks), torch.int32))
    return [prims.where(prims.broadcast_in_dim(held, n.tshape, ()) if n.tshape else held,
                        n, o) for n, o in zip(news, olds)]


def region_code(checks: list, previous: TensorProxy | None = None, first: int = 0,
                n: int | None = None) -> TensorProxy:
    """The int32 0-d code of ``checks`` ((ok, error, message) tuples, at the current
    insertion point): ``first`` + the number of the first one that failed, else ``n``
    (default ``len(checks)``; a cond branch numbers its checks after the other branch's).
    ``previous``: a code carried from a loop's earlier iterations, kept when it already
    names a failure."""
    n = len(checks) if n is None else n
    out = prims.full((), n, torch.int32)
    for k in reversed(range(len(checks))):
        out = prims.where(checks[k][0], out, prims.full((), first + k, torch.int32))
    if previous is not None:
        failed = prims.elementwise("ne", previous, prims.full((), n, torch.int32))
        out = prims.where(failed, previous, out)
    return out


def add_region_code(code_: TensorProxy, checks: list) -> None:
    """After a region op: its code result ``code_`` (``region_code`` of ``checks``,
    computed inside) becomes one check per check of the region, in the enclosing region
    or at the top level."""
    trace = current_trace()
    for k, (_, error, message) in enumerate(checks):
        ok = prims.elementwise("ne", code_, prims.full((), k, torch.int32))
        _add(trace, ok, error, message)


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
