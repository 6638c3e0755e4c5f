"""Proxy tracing: run the user's program once with TensorProxies, recording thunder IR.

``Trace`` owns the module being built (``func.func @computation``), the insertion point
stack (composite regions nest), the location of the user's line being traced, and the side
table of Python callables that ``thunder.executor_call`` ops refer to. ``dispatch`` is the
single entry for every torch call during tracing: metadata queries are answered from the
proxy, known functions go to their symbol (``symbols/``), data-dependent queries raise, and
anything else runs through the ``torch`` fallback executor.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable

import optree
import torch
from torch.overrides import TorchFunctionMode
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from thunder_mlir.ir import dtypes
from thunder_mlir.ir.context import get_context
from thunder_mlir.errors import DataDependentControlFlowError, Fallback, SharpEdgeError, TraceError
from thunder_mlir.frontend.aliasing import record_view
from thunder_mlir.frontend.locations import describe_frame, library_frame, user_frame
from thunder_mlir.frontend.differentiability import track
from thunder_mlir.ir.proxy import TensorProxy

_local = threading.local()


def current_trace() -> "Trace":
    t = getattr(_local, "trace", None)
    if t is None:
        raise TraceError("no trace is being built (a TensorProxy escaped its jit call?)")
    return t


# -------------------------------------------------------------------------- trace
class Trace:
    """An MLIR module under construction for one traced call.

    ``device`` is the torch.device of the program's tensors. ``side_table`` holds the
    Python implementations ``thunder.executor_call`` ops name by index (attribute
    ``impl``); ``fallbacks`` lists the torch functions that went to the fallback executor.
    """

    def __init__(self, device: torch.device, module: ir.Module | None = None):
        self.ctx = get_context() if module is None else module.context
        self.device = device
        self.side_table: list[Callable] = []
        self.fallbacks: list[str] = []
        self.inputs: list[TensorProxy] = []  # the input proxies, in argument order
        self.mutated_inputs: dict[int, TensorProxy] = {}  # input index -> proxy (write-back)
        self.monitor = None  # the SharpEdgeMonitor of this trace, if any
        self.region_ops = 0  # cond/while/checkpoint scopes built (higher_order.py)
        self.backward_errors: list[str] = []  # (grad pass) no_derivative ops reached
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

    # -- building
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
    def building(self):
        """Activate the context, location, insertion point and tracing mode."""
        prev = getattr(_local, "trace", None)
        _local.trace = self
        try:
            with self.ctx, self.loc, _TracingMode():
                yield
        finally:
            _local.trace = prev

    def begin(self, arg_types: list[ir.Type], name: str = "computation") -> list[ir.Value]:
        with ir.InsertionPoint(self.module.body):
            self.func_op = func_d.FuncOp(name, (arg_types, []))
        self.func_op.attributes["thunder.device"] = ir.StringAttr.get(str(self.device))
        self.entry = self.func_op.add_entry_block()
        self._ips = [ir.InsertionPoint(self.entry)]
        return list(self.entry.arguments)

    def finish(self, results: list[ir.Value]) -> None:
        with self.ip:
            func_d.ReturnOp(results)
        self.func_op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in self.entry.arguments], [r.type for r in results]))
        if self.region_ops:  # checkpoint results are known now that all uses are traced
            from thunder_mlir.frontend.higher_order import close_regions

            close_regions(self.func_op)

    def make_proxy(self, value: ir.Value, requires_grad: bool = False) -> TensorProxy:
        t = ir.RankedTensorType(value.type)
        return TensorProxy(value, tuple(t.shape), dtypes.torch_dtype(t.element_type),
                           self.device, requires_grad)

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

    # -- randomness (thunder_mlir/rng.py)
    def rng_seed(self) -> TensorProxy:
        """The program's seed: a 0-d int64 argument appended to the function the first time
        a random op asks for it, and named by the function attribute ``thunder.rng_seed``
        (its argument index), so that the runtime draws a fresh seed for it at each call.
        Programs without random ops have no such argument."""
        if self._rng_seed is None:
            from thunder_mlir.frontend.rng import SEED_ATTR

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

    def add_impl(self, fn: Callable) -> int:
        self.side_table.append(fn)
        return len(self.side_table) - 1


# ------------------------------------------------------------------------ dispatch
class _TracingMode(TorchFunctionMode):
    """Routes every torch call made while tracing (factories included) to ``dispatch``.

    torch disables a mode while its ``__torch_function__`` runs, so code that ``dispatch``
    calls back into — user functions of higher-order operators — runs under a fresh
    instance (:func:`user_code_mode`), or its factory calls would escape as real tensors.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


@contextmanager
def user_code_mode():
    """The tracing mode, re-entered to call user code from inside ``dispatch`` (the user
    code's own op calls are user-level again, see :func:`user_op`)."""
    depth = getattr(_local, "op_depth", 0)
    _local.op_depth = 0
    try:
        with _TracingMode():
            yield
    finally:
        _local.op_depth = depth


def user_op(func: Callable | None, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
    """Run ``run()``, the traced form of an op the *user's code* called (``func(*args,
    **kwargs)``: a torch function, or None for a thunder Symbol called directly), giving
    its results eager's autograd meaning (differentiability.track). Ops that ops call in
    turn (a symbol's decomposition) are not user-level and are not tracked again."""
    if getattr(_local, "op_depth", 0):
        return run()
    _local.op_depth = 1
    try:
        return track(func, args, kwargs, run)
    finally:
        _local.op_depth = 0


_T = torch.Tensor
# Metadata answered from the proxy itself (the wrapper subclass holds shape/dtype/device).
_METADATA_METHODS = {
    _T.size, _T.dim, _T.numel, _T.stride, _T.is_contiguous, _T.is_floating_point,
    _T.is_complex, _T.element_size, _T.nelement, _T.get_device, _T.__len__,
    _T.storage_offset, _T.is_signed, _T.__hash__, _T.__format__, _T.__repr__,
    _T.__str__, _T.ndimension, _T.is_inference, _T.__dir__,
}
# Values that would need the tensor's data: an error while tracing.
_DATA_DEPENDENT = {
    _T.__bool__: "bool(tensor)", _T.item: "tensor.item()", _T.tolist: "tensor.tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)", _T.__index__: "tensor.__index__",
    _T.__complex__: "complex(tensor)", _T.numpy: "tensor.numpy()",
    _T.data_ptr: "tensor.data_ptr()", _T.__array__: "numpy.asarray(tensor)",
    _T.untyped_storage: "tensor.untyped_storage()",
}
# Autograd attributes and in-place autograd methods (autograd_attributes.py).
AUTOGRAD_ATTRIBUTES = {_T.requires_grad.__set__, _T.is_leaf.__get__, _T.grad_fn.__get__,
                       _T.grad.__get__, _T.grad.__set__, _T.data.__set__, _T.requires_grad_,
                       _T.detach_, _T.retain_grad, _T.register_hook}
# Properties whose value is computed from the tensor: they are ops, not metadata.
_OP_PROPERTIES = {_T.T.__get__, _T.mT.__get__, _T.H.__get__, _T.mH.__get__,
                  _T.real.__get__, _T.imag.__get__}


def _is_tensor_leaf(x) -> bool:
    return isinstance(x, torch.Tensor)


def dispatch(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Handle one torch call during tracing (see module docstring)."""
    from thunder_mlir.frontend import autocast
    from thunder_mlir.frontend.symbols import SYMBOLS
    from thunder_mlir.frontend.torch_fallback import emit_fallback

    if func in AUTOGRAD_ATTRIBUTES:
        from thunder_mlir.frontend.autograd_attributes import handle

        return handle(func, args, kwargs)
    if func in _METADATA_METHODS or (
            type(func).__name__ == "method-wrapper" and func not in _OP_PROPERTIES
            and func not in SYMBOLS):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    trace = current_trace()
    if func in _DATA_DEPENDENT:
        f, lib = user_frame(), library_frame()
        inside = f"\n  (in {describe_frame(lib)})" if lib is not None and lib is not f else ""
        raise DataDependentControlFlowError(
            f"{describe_frame(f)}{inside}\n  {_DATA_DEPENDENT[func]} needs the tensor's data, "
            "which is not known while tracing. Use tensor ops instead (torch.where, masking), "
            "or torch.cond for control flow that depends on tensor values.")
    _check_no_foreign_tensors(func, args, kwargs)
    from thunder_mlir.frontend.symbols.complex_support import COMPLEX_SYMBOLS, involves_complex

    if kwargs.get("requires_grad") is True:
        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  a tensor created with requires_grad=True "
            "inside a jitted function is a new autograd leaf whose .grad the caller cannot "
            "reach. Create it outside the function and pass it as an input.")

    def run():
        sym, a, k = SYMBOLS.get(func), args, kwargs
        if autocast.enabled(trace):  # eager's autocast casts (thunder_mlir/autocast.py)
            sym, a, k = autocast.prepare(trace, func, sym, a, k)
        if sym is not None:
            try:
                if sym.name not in COMPLEX_SYMBOLS and involves_complex(a, k):
                    raise Fallback(f"{sym.name} is not verified on complex numbers "
                                   "(symbols/complex_support.py)")
                return sym(*a, **k)
            except Fallback:
                pass
        return emit_fallback(trace, func, a, k)

    with trace.location_of_user_line():
        out = user_op(func, args, kwargs, run)
    record_view(func, args, kwargs, out)  # outputs that are views return eager's view
    return out


def _check_no_foreign_tensors(func, args, kwargs) -> None:
    for leaf in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        if isinstance(leaf, torch.Tensor) and type(leaf) is not TensorProxy:
            f = user_frame()
            from thunder_mlir.frontend.torch_fallback import qualified_name

            name = qualified_name(func)
            monitor = current_trace().monitor
            known = monitor.tensor_names.get(id(leaf)) if monitor is not None else None
            what = f"the {known}, a tensor" if known else "a torch.Tensor"
            raise SharpEdgeError(
                f"{describe_frame(f)}\n  {what} of shape {tuple(leaf.shape)} that is not an "
                f"input of the jitted function reaches {name} (read from a global, a closure "
                "or an attribute of a non-input object). thunder_mlir does not bake tensors "
                "into the program as constants: pass it as an argument instead.")
