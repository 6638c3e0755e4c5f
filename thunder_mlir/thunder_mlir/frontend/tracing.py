"""Proxy tracing: the state of one traced call.

``Trace`` is the builder (ir/builder.py) of the module being traced (``func.func
@computation``), plus what the tracer learns on the way: the input proxies, inputs written
in place, the torch functions that fell back, the sharp-edge monitor. ``current_trace`` is
the trace of this thread. Torch calls made while tracing go to the frontend's dispatch
(frontend/dispatch.py) through ``_TracingMode`` and ``TensorProxy.__torch_function__``.
"""

from __future__ import annotations

from typing import Any

import threading
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch_mlir import ir

from thunder_mlir.errors import TraceError
from thunder_mlir.frontend.locations import user_frame
from thunder_mlir.ir import proxy as proxy_module
from thunder_mlir.ir.builder import Builder
from thunder_mlir.ir.context import get_context
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.ir.regions import defined_inside

_local = threading.local()


def current_trace() -> "Trace":
    t = getattr(_local, "trace", None)
    if t is None:
        raise TraceError("no trace is being built (a TensorProxy escaped its jit call?)")
    return t


# -------------------------------------------------------------------------- trace
class Trace(Builder):
    """An MLIR module under construction for one traced call (a ``Builder``).

    ``fallbacks`` lists the torch functions that went to the fallback executor;
    ``inputs`` the input proxies in argument order; ``mutated_inputs`` the inputs written
    in place (input index -> proxy of the new value); ``monitor`` the SharpEdgeMonitor.
    """

    def __init__(self, device: torch.device, module: ir.Module | None = None):
        super().__init__(device, module, get_context() if module is None else None)
        self.fallbacks: list[str] = []
        # compiled without its device (pipeline.compile_only): the meta device the
        # caller's objects were made on stands for the program's device
        self.meta_is_device = False
        self.inputs: list[TensorProxy] = []  # the input proxies, in argument order
        self.mutated_inputs: dict[int, TensorProxy] = {}  # input index -> proxy (write-back)
        # intermediates two outputs are views of: hidden outputs (aliasing.shared_bases)
        self.shared_bases: list[TensorProxy] = []
        # in-place view ops on inputs (metadata_writes.py): (input index, op, args, kwargs,
        # grad mode, the input's proxy after it), replayed on the caller's tensors after
        # the run
        self.input_restrides: list[tuple] = []
        # the values each `.data` read held (aliasing.note_unversioned_read), by proxy id
        self.unversioned_reads: dict[int, tuple[TensorProxy, list]] = {}
        # (proxy, value, line, op): reads an op saved with values it computed (refused
        # when the memory is written after: differentiability._reads_at_op)
        self.unversioned_mixed: list[tuple] = []
        # what each cond branch or checkpointed function being traced reads from outside
        # it, innermost last: (region op, {id(proxy): (proxy, value, where)}); the reads of
        # checkpointed functions, recomputed from the final memory by the backward; reads
        # that cannot be paired with their final value (frontend/region_reads.py)
        self.region_reads: list[tuple] = []
        self.recompute_reads: list[tuple] = []
        self.unpaired_reads: list[tuple] = []
        self.checkpoint_writes: list[str] = []  # where a checkpoint writes outside memory
        # inside checkpointed functions (region_reads.checkpoint_reads): their depth, and
        # what eager's recomputation does not redo (a value check, tensors an op keeps on
        # its ctx) as (values it reads, where, what); resolved at each checkpoint's end
        # into (where, what, [(proxy, value read from outside)]) in stale_if_written
        self.checkpoint_depth = 0
        self.not_recomputed: list[tuple] = []
        self.stale_if_written: list[tuple] = []
        # a reentrant checkpoint's outputs require grad: its backward refuses .grad()
        # (runtime/autograd.py)
        self.reentrant_checkpoint = False
        # values eager keeps on the CPU beside a GPU's tensors (frontend/cpu_scalars.py)
        self.cpu_scalars: dict[int, TensorProxy] = {}
        self.monitor = None  # the SharpEdgeMonitor of this trace, if any
        self.region_ops = 0  # cond/while/checkpoint scopes built (higher_order.py)
        self.backward_errors: list[str] = []  # (grad pass) no_derivative ops reached
        # Python values of tensors (frontend/value_guards.py): those this compilation knows,
        # in query order, and (what, where) of each query made so far
        self.known_values: list = []
        self.value_sites: list[tuple[str, str]] = []
        # data-dependent output sizes as unbacked size symbols (value_guards.py), not
        # specialized values; the runtime test of each such query (query index -> accept)
        self.unbacked = False
        self.value_accepts: dict[int, Any] = {}
        self.unbacked_groups: list[list[int]] = []  # the symbol numbers of each op
        # ints read from tensors as symbols (value_guards.py ``_value_symbol``): symbol
        # number -> the SSA values it is computed from (``slice_by_value``'s operands)
        self.value_symbol_sources: dict[int, list] = {}
        # query numbers whose values were guessed, not computed (unbacked_sizes.guess);
        # None where the trace does not guess
        self.guessed: set[int] | None = None
        self.guessed_symbols: dict[int, int] = {}  # their unbacked symbols -> query
        self.no_guess: frozenset[int] | set[int] = frozenset()  # queries computed instead
        self.recompile_limit = 8  # (the jitted function's: its warnings past it)
        # a whole training step's .grad table (train_step.py; autograd_attributes.py)
        self.training = None
        # checks of values eager makes while it runs (frontend/runtime_checks.py): whether
        # this trace carries them, and each one's (0-d bool proxy, error type, message)
        self.runtime_checks = False
        self.checks: list[tuple[Any, type, str]] = []
        self.pending_checks: list[tuple] = []  # asked inside a composite (its operands)
        # the checks of each cond/while region being traced, innermost last; None inside a
        # while loop's cond_fn (not checked)
        self.region_checks: list[list] | None = []

    def device_type(self, device) -> str:
        """The type of ``device`` (a torch.device or its name) as this program sees it: the
        program's own for ``meta`` when compiled without its device (``meta_is_device``)."""
        kind = torch.device(device).type
        return self.device.type if kind == "meta" and self.meta_is_device else kind

    @contextmanager
    def building(self):
        """Activate the context, location, insertion point and tracing mode."""
        prev = getattr(_local, "trace", None)
        _local.trace = self
        try:
            with self.active(), self.ctx, self.loc, _TracingMode():
                yield
        finally:
            _local.trace = prev

    @contextmanager
    def recording_region_reads(self, region_op):
        """Record, while the block inside runs, the tensors the traced ops read from outside
        ``region_op`` (an op whose regions the ops go into): yields {id(proxy): (proxy, the
        value read, where)}, filled by :meth:`note_region_reads` (frontend/region_reads.py
        gives them eager's meaning)."""
        reads: dict = {}
        self.region_reads.append((region_op, reads))
        try:
            yield reads
        finally:
            self.region_reads.pop()

    def note_region_reads(self, inputs: list[TensorProxy]) -> None:
        """Called for each traced op with its tensor ``inputs`` while a region records its
        reads: note those defined outside each such region (the first read only: a later
        read of a tensor written inside reads a value defined inside)."""
        for op, reads in self.region_reads:
            for p in inputs:
                if id(p) not in reads and p.value is not None and \
                        not defined_inside(p.value, op):
                    reads[id(p)] = (p, p.value, str(op.location))

    @contextmanager
    def location_of_user_line(self):
        """Set ``self.loc`` to the user's file:line for the ops emitted inside."""
        f = user_frame()
        prev = self.loc
        if f is not None:
            self.loc = ir.Location.file(f.f_code.co_filename, f.f_lineno, 0, self.ctx)
        try:
            with self.loc:
                yield
        finally:
            self.loc = prev


# ----------------------------------------------------------------------- the mode
class _TracingMode(TorchFunctionMode):
    """Routes every torch call made while tracing (factories included) to the frontend's
    dispatch (the one ``TensorProxy`` calls; frontend/dispatch.py).

    torch disables a mode while its ``__torch_function__`` runs, so code that dispatch
    calls back into — user functions of higher-order operators — runs under a fresh
    instance (:func:`user_code_mode`), or its factory calls would escape as real tensors.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return proxy_module._dispatch[0](func, args, kwargs or {})


@contextmanager
def user_code_mode():
    """The tracing mode, re-entered to call user code from inside dispatch (the user
    code's own op calls are user-level again, see ``differentiability.user_op``)."""
    depth = getattr(_local, "op_depth", 0)
    _local.op_depth = 0
    try:
        with _TracingMode():
            yield
    finally:
        _local.op_depth = depth
