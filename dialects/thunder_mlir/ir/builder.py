"""The builder: an MLIR module under construction, the insertion points ops are emitted at,
the location they carry, and the values they make (``TensorProxy``).

Prims emit their op through the current builder (``current_builder``): the tracer's
``Trace`` (frontend/tracing.py) is one, and so are the traces passes build IR with (grad's
backward, execution transforms). A torch call on a proxy goes to the dispatch function the
frontend registered (``proxy.register_dispatch``): the ir layer names no frontend module.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

import torch
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.errors import TraceError
from thunder_mlir.ir import dtypes
from thunder_mlir.ir.dialect import SEED_ATTR
from thunder_mlir.ir.proxy import TensorProxy

_state = threading.local()


def current_builder() -> "Builder":
    """The builder ops are emitted through (TraceError when none is active)."""
    b = getattr(_state, "builder", None)
    if b is None:
        raise TraceError("no trace is being built (a TensorProxy escaped its jit call?)")
    return b


def active_builder() -> "Builder | None":
    """The active builder, or None outside any trace."""
    return getattr(_state, "builder", None)


class Builder:
    """An MLIR module under construction (``func.func`` ops, one at a time).

    ``device`` is the torch.device of the program's tensors (the Python implementations
    ``thunder.executor_call`` ops name are in ir/implementations.py). ``on_finish`` holds
    callbacks run on the ``func.func`` once it is complete (region ops close their
    results then; frontend/higher_order.py).
    """

    def __init__(self, device: torch.device, module: ir.Module | None = None,
                 ctx: ir.Context | None = None):
        if module is None and ctx is None:
            raise ValueError("a Builder needs a module to build in or a context to make one")
        self.ctx = ctx if module is None else module.context
        self.device = device
        self.on_finish: list[Callable] = []
        self._rng_seed: TensorProxy | None = None  # the seed input, once a random op needs it
        self._rng_streams = 0  # random ops emitted so far (each gets its own stream)
        self.loc = ir.Location.unknown(self.ctx)
        if module is None:
            with self.ctx, self.loc:
                module = ir.Module.create()
        self.module = module
        self._ips: list[ir.InsertionPoint] = []
        self.func_op = None
        self.entry = None

    @property
    def ip(self) -> ir.InsertionPoint:
        return self._ips[-1]

    @contextmanager
    def insertion_point(self, ip: ir.InsertionPoint):
        self._ips.append(ip)
        try:
            yield
        finally:
            self._ips.pop()

    @contextmanager
    def active(self):
        """Make this the current builder (``current_builder``)."""
        prev = getattr(_state, "builder", None)
        _state.builder = self
        try:
            yield
        finally:
            _state.builder = prev

    def begin(self, arg_types: list[ir.Type], name: str = "computation") -> list[ir.Value]:
        """Start ``func.func @name`` with arguments of ``arg_types``; returns them."""
        with ir.InsertionPoint(self.module.body):
            self.func_op = func_d.FuncOp(name, (arg_types, []))
        self.func_op.attributes["thunder.device"] = ir.StringAttr.get(str(self.device))
        self.entry = self.func_op.add_entry_block()
        self._ips = [ir.InsertionPoint(self.entry)]
        return list(self.entry.arguments)

    def finish(self, results: list[ir.Value]) -> None:
        """Return ``results`` from the function and fix its type."""
        with self.ip:
            func_d.ReturnOp(results)
        self.func_op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in self.entry.arguments], [r.type for r in results]))
        for callback in self.on_finish:
            callback(self.func_op)

    def make_proxy(self, value: ir.Value, requires_grad: bool = False) -> TensorProxy:
        """The proxy of an SSA value of ranked tensor type."""
        t = ir.RankedTensorType(value.type)
        return TensorProxy(value, tuple(t.shape), dtypes.torch_dtype(t.element_type),
                           self.device, requires_grad)

    # -- randomness (frontend/rng.py)
    def rng_seed(self) -> TensorProxy:
        """The program's seed: a 0-d int64 argument appended to the function the first time
        a random op asks for it, and named by the function attribute ``thunder.rng_seed``
        (its argument index), so that the runtime draws a fresh seed for it at each call.
        Programs without random ops have no such argument."""
        if self._rng_seed is None:
            t = dtypes.tensor_type((), torch.int64)
            arg = self.entry.add_argument(t, ir.Location.unknown(self.ctx))
            self.func_op.attributes[SEED_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64, self.ctx), arg.arg_number)
            self._rng_seed = TensorProxy(arg, (), torch.int64, self.device)
        return self._rng_seed

    def next_rng_stream(self) -> int:
        """A stream number no other random op of this trace has (0, 1, 2, ...)."""
        self._rng_streams += 1
        return self._rng_streams - 1

