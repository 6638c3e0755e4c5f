"""``thunder_mlir.extend``: user executors, their operators, execution transforms and grad
transforms — Lightning Thunder's ``thunder.extend`` API, as MLIR rewrites.

    from thunder_mlir.extend import OperatorExecutor, register_executor, get_grad, put_grads
    import thunder_mlir.torch as ltorch

    myex = OperatorExecutor("myex", version="0.1")
    register_executor(myex)
    multimul = myex.register_operator("multimul", like=multimul_like, fn=multimul_impl)
    myex.register_implementation(ltorch.mul, checker=..., execution_transform=...,
                                 grad_transform=...)
    jfn = thunder_mlir.jit(fn, executors=[myex])

How it maps onto the pipeline (``pipeline.compile_function``):

* An **operator** (``register_operator(name, like=...)``) is a Symbol named
  ``"<executor>.<name>"``: calling it while tracing records a ``thunder.composite`` whose
  region is the traced ``like`` (so output metadata, grad and an XLA fallback come for
  free). With ``meta=`` instead of ``like=`` it has no decomposition and is recorded
  directly as a ``thunder.executor_call``.
* The **execution** stage (the ``execution-transform`` pass, ``execution_transform.py``)
  runs after ``grad`` and
  before ``decompose``: for each top-level op of the plan functions, the executors passed
  to ``jit`` are asked in priority order; an implementation whose checker accepts replaces
  the op by its traced ``execution_transform`` (which may emit any ops: those nobody
  claims stay on XLA), and an executor's own operators become ``thunder.executor_call``
  ops running ``fn`` on torch tensors between XLA regions. Unclaimed ops go to the
  built-in ``xla`` executor (and ``torch`` for ops without a symbol), always last.
* A **grad transform** replaces the VJP rule of its symbol for jits with the executor
  active (a composite-level rule, ``passes/vjp_composites.py``): the part before the first
  ``get_grad`` becomes the op's forward (values it computes that the backward uses become
  residuals), the rest the backward.

The arguments of each composite an active executor may claim are recorded at trace time
(``CallRecord``, named by the composite's ``thunder.call`` symbol in
ir/implementations.py), so checkers,
transforms and implementations see exactly the Python call the program made.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import optree
import torch
from torch_mlir import ir

from thunder_mlir.errors import ExecutorError
from thunder_mlir.ir import implementations
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbol import ON_COMPOSITE, Symbol

__all__ = ["OperatorExecutor", "ExecutorError", "register_executor", "get_executor",
           "get_all_executors", "get_grad", "put_grad", "put_grads"]


_TENSOR = object()  # placeholder for a tensor argument in a CallRecord


@dataclass
class CallRecord:
    """One recorded symbol call: the bound arguments with tensors taken out (in operand
    order) and where the tensors are among the flattened outputs."""

    name: str
    leaves: list
    spec: Any
    out_leaves: list  # flattened outputs, tensors replaced by _TENSOR
    out_spec: Any

    def rebuild(self, tensors) -> tuple[tuple, dict]:
        """(args, kwargs) with ``tensors`` (proxies or torch tensors) in operand order."""
        it = iter(tensors)
        leaves = [next(it) if x is _TENSOR else x for x in self.leaves]
        args, kwargs = optree.tree_unflatten(self.spec, leaves)
        return tuple(args), dict(kwargs)

    @property
    def out_positions(self) -> list[int]:
        return [i for i, x in enumerate(self.out_leaves) if x is _TENSOR]


@dataclass
class Implementation:
    """What ``register_implementation`` recorded for one symbol on one executor."""

    checker: Callable
    execution_transform: Callable | None
    grad_transform: Callable | None


class OperatorSymbol(Symbol):
    """A symbol registered by ``OperatorExecutor.register_operator``; ``executor`` owns it
    and ``fn`` is its implementation on torch tensors."""

    executor: "OperatorExecutor" = None
    fn: Callable = None
    meta: Callable | None = None

    def __call__(self, *args, **kwargs):
        if self.meta is not None:
            from thunder_mlir.frontend.differentiability import user_op

            return user_op(None, args, kwargs, lambda: _emit_meta_operator(self, args, kwargs))
        return super().__call__(*args, **kwargs)

    def __repr__(self):
        return f"OperatorSymbol({self.name})"


class OperatorExecutor:
    """A user executor (Thunder's ``thunder.extend.OperatorExecutor``).

    ``name``: a non-empty identifier, printed as the ``executor`` attribute of the
    ``thunder.executor_call`` ops it runs; ``version``: informational. Pass executors to
    ``thunder_mlir.jit(fn, executors=[...])`` in priority order.
    """

    def __init__(self, name: str, *, version: Any = None):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"executor name must be an identifier, got {name!r}")
        if name in ("xla", "torch"):
            raise ValueError(f"'{name}' is a built-in executor's name")
        self.name = name
        self.version = version
        self.operators: dict[str, OperatorSymbol] = {}  # full name -> symbol
        self.implementations: dict[str, Implementation] = {}  # symbol name -> impl
        self.generation = 0  # bumped on every registration (part of jit cache keys)

    def __repr__(self):
        return f"OperatorExecutor({self.name!r}, version={self.version!r})"

    def register_operator(self, name: str, *, like: Callable | None = None,
                          meta: Callable | None = None, fn: Callable) -> OperatorSymbol:
        """Register a new operator ``<executor>.<name>`` implemented by ``fn``.

        ``like(*args)``: a traceable function (torch ops / ltorch symbols on proxies)
        computing the same outputs; it gives the op's output shapes and dtypes, its grad
        and its decomposition (used when the executor is not passed to ``jit``). Or
        ``meta(*args)``: called with meta-device tensors in place of the tensor arguments,
        returns (meta) tensors of the outputs' shapes and dtypes; such an operator has no
        decomposition and no grad. ``fn(*args)``: the implementation, called at run time
        with torch tensors (detached) and the Python arguments of the call; it returns the
        same structure as ``like`` (NumPy arrays are converted to tensors). Exactly one of
        ``like``/``meta``. Returns the symbol to call from traced code. Raises
        ExecutorError if ``name`` is already registered on this executor.
        Mirrors ``thunder.extend.OperatorExecutor.register_operator``.
        """
        if (like is None) == (meta is None):
            raise ValueError(f"executor '{self.name}': register_operator('{name}') needs "
                             "exactly one of like= and meta=")
        full = f"{self.name}.{name}"
        if full in self.operators:
            raise ExecutorError(f"executor '{self.name}': operator '{name}' is already "
                                "registered; register it once (or use a new name)")
        sym = OperatorSymbol(full, like if like is not None else meta)
        sym.executor, sym.fn, sym.meta = self, fn, meta
        self.operators[full] = sym
        self.generation += 1
        return sym

    def register_implementation(self, symbol, op: OperatorSymbol | None = None, *,
                                checker: Callable | None = None,
                                execution_transform: Callable | None = None,
                                grad_transform: Callable | None = None) -> None:
        """Tell the jit how this executor runs ``symbol`` (an ``ltorch`` symbol such as
        ``ltorch.mul``, a torch function such as ``torch.mul``, or an operator).

        ``checker(*args, **kwargs) -> bool``: called with the call's arguments (TensorProxy
        for tensors: ``.shape``, ``.dtype``, ``.device``, ``.ndim``); the implementation
        applies only where it returns True (default: always). ``execution_transform(*args,
        **kwargs)``: traced in place of the op; it returns the op's outputs (same shapes
        and dtypes) and may call operators and any torch ops. ``op``: shorthand for
        ``execution_transform=op`` (an operator with the symbol's signature).
        ``grad_transform(*args, **kwargs)``: replaces the op's VJP rule; it computes the
        forward (returned), calls ``get_grad(out)`` for the cotangent of an output and
        ``put_grads(inputs, grads)`` for the inputs' gradients. Registering again for the
        same symbol replaces the previous implementation (as in Thunder). Raises TypeError
        for a symbol that records no op (a metadata/alias helper).
        Mirrors ``thunder.extend.OperatorExecutor.register_implementation``.
        """
        sym = _resolve_symbol(symbol)
        if op is not None and execution_transform is None:
            execution_transform = op
        self.implementations[sym.name] = Implementation(
            checker or (lambda *a, **k: True), execution_transform, grad_transform)
        if grad_transform is not None:
            _install_vjp(sym.name)
        self.generation += 1

    def can_claim(self, name: str) -> bool:
        return name in self.operators or name in self.implementations


def _resolve_symbol(symbol) -> Symbol:
    from thunder_mlir.frontend.symbols import SYMBOLS
    from thunder_mlir.frontend.symbols.registry import _Inline

    sym = symbol if isinstance(symbol, Symbol) else SYMBOLS.get(symbol)
    if sym is None:
        raise TypeError(f"register_implementation: {symbol!r} is not a thunder_mlir symbol "
                        "(use thunder_mlir.torch.<name> or an operator)")
    if isinstance(sym, _Inline):
        raise TypeError(f"register_implementation: {sym.name} records no op of its own "
                        "(it is a metadata or aliasing helper), so no executor can claim it")
    return sym


_REGISTRY: dict[str, OperatorExecutor] = {}


def register_executor(executor: OperatorExecutor) -> OperatorExecutor:
    """Make ``executor`` known by name (``get_executor``). Raises ExecutorError if another
    executor of that name is registered. Mirrors ``thunder.extend.register_executor``."""
    prev = _REGISTRY.get(executor.name)
    if prev is not None and prev is not executor:
        raise ExecutorError(f"an executor named '{executor.name}' is already registered")
    _REGISTRY[executor.name] = executor
    return executor


def get_executor(name: str) -> OperatorExecutor | None:
    """The registered executor called ``name``, or None."""
    return _REGISTRY.get(name)


def get_all_executors() -> tuple[OperatorExecutor, ...]:
    """The registered executors, in registration order."""
    return tuple(_REGISTRY.values())


# ------------------------------------------------------------------ compile state
_local = threading.local()


@dataclass
class CompileState:
    """The user executors of one compilation and the calls recorded for them."""

    executors: tuple[OperatorExecutor, ...]
    calls: list[CallRecord] = field(default_factory=list)

    def interesting(self, name: str) -> bool:
        return any(ex.can_claim(name) for ex in self.executors)

    def record(self, op: ir.Operation) -> CallRecord | None:
        """The call recorded for composite ``op`` (its ``thunder.call`` symbol in
        ir/implementations.py), or None where it has none. Raises
        MissingImplementationError where this process does not hold the record (a module
        traced by another process)."""
        if "thunder.call" not in op.attributes:
            return None
        return implementations.lookup_attr(op.attributes["thunder.call"], op.location)


def current_state() -> CompileState | None:
    return getattr(_local, "state", None)


@contextmanager
def compiling(executors):
    """Activate ``executors`` (priority order) for the compilation run inside."""
    executors = tuple(executors or ())
    for ex in executors:
        if not isinstance(ex, OperatorExecutor):
            raise TypeError(f"executors must be OperatorExecutor objects, got {ex!r}")
    with activated(CompileState(executors)) as state:
        yield state


@contextmanager
def activated(state: CompileState):
    """Make ``state`` the current compile state inside (the calls of composites traced
    inside are recorded in it, ``_on_composite``)."""
    prev = current_state()
    _local.state = state
    try:
        yield state
    finally:
        _local.state = prev


def _on_composite(sym, op, args, kwargs, out) -> None:
    state = current_state()
    if state is None or not state.executors or not state.interesting(sym.name):
        return
    bound = sym.signature.bind(*args, **kwargs)
    leaves, spec = optree.tree_flatten((bound.args, bound.kwargs), none_is_leaf=True)
    leaves = [_TENSOR if type(x) is TensorProxy else x for x in leaves]
    out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    out_leaves = [_TENSOR if type(x) is TensorProxy else x for x in out_leaves]
    record = CallRecord(sym.name, leaves, spec, out_leaves, out_spec)
    state.calls.append(record)
    op.attributes["thunder.call"] = implementations.register_attr(f"{sym.name}.call", record)


ON_COMPOSITE.append(_on_composite)


# ---------------------------------------------------------------- runtime calls
def make_runner(executor_name: str, op_name: str, fn: Callable, record: CallRecord,
                expected: list[tuple[tuple[int, ...], torch.dtype]]) -> Callable:
    """The TorchStep callable of an operator's executor_call: rebuilds the call with the
    run's tensors, runs ``fn`` and checks each tensor output's shape and dtype."""
    positions = record.out_positions
    n_leaves = len(record.out_leaves)

    def run(*tensors):
        args, kwargs = record.rebuild([t.detach() for t in tensors])
        out = fn(*args, **kwargs)
        leaves = optree.tree_leaves(out, none_is_leaf=True)
        if len(leaves) != n_leaves:
            raise ExecutorError(f"executor '{executor_name}': the implementation of "
                                f"'{op_name}' returned {len(leaves)} values, expected "
                                f"{n_leaves} (as its like/meta function)")
        results = []
        for k, (i, (shape, dtype)) in enumerate(zip(positions, expected)):
            t = leaves[i]
            if not isinstance(t, torch.Tensor):
                import numpy as np

                if isinstance(t, (np.ndarray, np.generic)):
                    t = torch.from_numpy(np.asarray(t))
                else:
                    raise ExecutorError(
                        f"executor '{executor_name}': the implementation of '{op_name}' "
                        f"returned {type(t).__name__} for output {k}, expected a tensor")
            if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                raise ExecutorError(
                    f"executor '{executor_name}': the implementation of '{op_name}' returned "
                    f"output {k} with shape {tuple(t.shape)} and dtype {t.dtype}; its "
                    f"like/meta function says shape {tuple(shape)} and dtype {dtype}")
            results.append(t)
        return results

    run.__qualname__ = f"{executor_name}.{op_name}"
    return run


def _emit_meta_operator(sym: OperatorSymbol, args, kwargs):
    """A ``meta=`` operator: record an executor_call directly (no decomposition)."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs

    from thunder_mlir.ir import dtypes
    from thunder_mlir.frontend.tracing import current_trace

    trace = current_trace()
    bound = sym.signature.bind(*args, **kwargs)
    leaves, spec = optree.tree_flatten((bound.args, bound.kwargs), none_is_leaf=True)
    proxies = [x for x in leaves if type(x) is TensorProxy]
    m_args, m_kwargs = optree.tree_unflatten(
        spec, [x.meta if type(x) is TensorProxy else x for x in leaves])
    with torch._C.DisableTorchFunction():
        meta_out = sym.meta(*m_args, **m_kwargs)
    out_leaves, out_spec = optree.tree_flatten(meta_out, none_is_leaf=True)
    pos = [i for i, x in enumerate(out_leaves) if isinstance(x, torch.Tensor)]
    types = [dtypes.tensor_type(out_leaves[i].shape, out_leaves[i].dtype) for i in pos]
    if not fits_in_runs(types) or not fits_in_runs([p.value.type for p in proxies]):
        raise ExecutorError(f"executor '{sym.executor.name}': '{sym.name}' has too many "
                            "distinct tensor types for one executor call")
    record = CallRecord(sym.name, [_TENSOR if type(x) is TensorProxy else x for x in leaves],
                        spec, [_TENSOR if i in pos else x for i, x in enumerate(out_leaves)],
                        out_spec)
    expected = [(tuple(out_leaves[i].shape), out_leaves[i].dtype) for i in pos]
    impl = implementations.register_attr(
        sym.name, make_runner(sym.executor.name, sym.name, sym.fn, record, expected))
    with trace.ip:
        op = ExecutorCallOp(**segment_kwargs("in", [p.value for p in proxies]),
                            **segment_kwargs("out", types, type_of=lambda t: t),
                            executor=ir.StringAttr.get(sym.executor.name),
                            callee=ir.StringAttr.get(sym.name), impl=impl)
    results = list(op.operation.results)
    for k, i in enumerate(pos):
        m = out_leaves[i]
        out_leaves[i] = TensorProxy(results[k], tuple(m.shape), m.dtype, trace.device)
    return optree.tree_unflatten(out_spec, out_leaves)


# ------------------------------------------------------------------ grad transforms
class _GradContext:
    def __init__(self, trace, executor, name, op, g):
        self.trace, self.executor, self.name, self.op, self.g = trace, executor, name, op, g
        self.in_forward = True
        self.placeholders: list[tuple[ir.Operation, TensorProxy]] = []
        self.puts: dict[int, TensorProxy] = {}

    def where(self) -> str:
        return f"executor '{self.executor.name}': the grad transform of '{self.name}'"

    def to_backward(self) -> None:
        if self.in_forward:
            self.trace._ips.pop()
            self.in_forward = False


def _grad_context() -> _GradContext:
    ctx = getattr(_local, "grad", None)
    if ctx is None:
        raise RuntimeError("get_grad/put_grads can only be called inside a grad_transform "
                           "registered with OperatorExecutor.register_implementation")
    return ctx


def get_grad(x: TensorProxy) -> TensorProxy:
    """Inside a grad transform: the cotangent of ``x``, an output the transform returns
    (same shape and dtype as ``x``). The transform's ops before the first ``get_grad`` form
    the forward; the ops after it, the backward. Mirrors ``thunder.core.transforms.get_grad``.
    """
    ctx = _grad_context()
    if type(x) is not TensorProxy:
        raise TypeError(f"{ctx.where()}: get_grad expects a tensor, got {type(x).__name__}")
    ctx.to_backward()
    with ctx.trace.ip:
        ph = ir.Operation.create("thunder_internal.grad_placeholder", results=[x.value.type])
    ctx.placeholders.append((ph, x))
    return TensorProxy(ph.results[0], x.tshape, x.tdtype, x.tdevice)


def put_grad(x: TensorProxy, grad: TensorProxy) -> None:
    """Inside a grad transform: ``grad`` is (added to) the gradient of input ``x``; it must
    have ``x``'s shape and dtype. Mirrors ``thunder.core.transforms.put_grad``."""
    from thunder_mlir.ir import prims

    ctx = _grad_context()
    if type(x) is not TensorProxy or type(grad) is not TensorProxy:
        raise TypeError(f"{ctx.where()}: put_grad expects tensors")
    if grad.tshape != x.tshape or grad.tdtype != x.tdtype:
        raise ExecutorError(f"{ctx.where()}: put_grad of shape {grad.tshape} and dtype "
                            f"{grad.tdtype} for an input of shape {x.tshape} and dtype "
                            f"{x.tdtype}")
    prev = ctx.puts.get(id(x))
    ctx.puts[id(x)] = grad if prev is None else prims.elementwise("add", prev, grad)


def put_grads(xs, grads) -> None:
    """``put_grad`` for each pair of ``xs`` and ``grads`` (sequences, or single tensors).
    Mirrors ``thunder.core.transforms.put_grads``."""
    if isinstance(xs, torch.Tensor):
        xs, grads = (xs,), (grads,)
    xs, grads = list(xs), list(grads)
    if len(xs) != len(grads):
        raise ValueError(f"put_grads: {len(xs)} inputs but {len(grads)} gradients")
    for x, g in zip(xs, grads):
        put_grad(x, g)


def _proxies(op, device) -> list[TensorProxy]:
    from thunder_mlir.ir import dtypes

    out = []
    for v in op.operands:
        t = ir.RankedTensorType(v.type)
        out.append(TensorProxy(v, tuple(t.shape), dtypes.torch_dtype(t.element_type), device))
    return out


def check(executor: OperatorExecutor, name: str, impl: Implementation, args, kwargs) -> bool:
    """Run ``impl.checker``; an exception becomes an ExecutorError naming executor and op."""
    try:
        return bool(impl.checker(*args, **kwargs))
    except Exception as e:
        raise ExecutorError(f"executor '{executor.name}': the checker of '{name}' raised "
                            f"{type(e).__name__}: {e}") from e


def _grad_impl_for(op) -> tuple[OperatorExecutor, Implementation, CallRecord] | None:
    state = current_state()
    if state is None or not state.executors:
        return None
    rec = state.record(op)
    if rec is None:
        return None
    name = ir.StringAttr(op.attributes["name"]).value
    for ex in state.executors:
        impl = ex.implementations.get(name)
        if impl is None or impl.grad_transform is None:
            continue
        device = torch.device("cpu")
        fn = op.parent  # the func.func holding the op
        if fn is not None and "thunder.device" in fn.attributes:
            device = torch.device(ir.StringAttr(fn.attributes["thunder.device"]).value)
        args, kwargs = rec.rebuild(_proxies(op, device))
        if check(ex, name, impl, args, kwargs):
            return ex, impl, rec
    return None


_INSTALLED: set[str] = set()


def _install_vjp(name: str) -> None:
    """Route the composite VJP rule of ``name`` through the active executors' grad
    transforms (the previous rule, if any, still applies where none does)."""
    if name in _INSTALLED:
        return
    from thunder_mlir.transforms.vjp_composites import APPLIES, COMPOSITE_VJP

    prev_rule, prev_applies = COMPOSITE_VJP.get(name), APPLIES.get(name)

    def applies(op) -> bool:
        if _grad_impl_for(op) is not None:
            return True
        return prev_rule is not None and prev_applies(op)

    def rule(op, x, y, g):
        found = _grad_impl_for(op)
        if found is None:
            return prev_rule(op, x, y, g)
        return _apply_grad_transform(*found, op, x, g)

    COMPOSITE_VJP[name], APPLIES[name] = rule, applies
    _INSTALLED.add(name)


def _apply_grad_transform(ex, impl, rec, op, x, g) -> list:
    """Trace ``impl.grad_transform``: its forward part before ``op`` in the forward
    function (``op``'s results are replaced by the transform's outputs and ``op`` is marked
    ``thunder.erase`` for the grad pass to remove), its backward part at the backward's
    insertion point. Returns one cotangent (or None) per operand of ``op``."""
    from thunder_mlir.frontend.tracing import current_trace

    trace = current_trace()
    name = rec.name
    ctx = _GradContext(trace, ex, name, op, g)
    args, kwargs = rec.rebuild(x)
    trace._ips.append(ir.InsertionPoint(op))
    prev, _local.grad = getattr(_local, "grad", None), ctx
    try:
        out = impl.grad_transform(*args, **kwargs)
    finally:
        ctx.to_backward()
        _local.grad = prev
    outs = [v for v in optree.tree_leaves(out, none_is_leaf=True) if type(v) is TensorProxy]
    results = list(op.results)
    if [o.value.type for o in outs] != [r.type for r in results]:
        raise ExecutorError(
            f"{ctx.where()} returned tensors of types {[str(o.value.type) for o in outs]}; "
            f"the op's outputs are {[str(r.type) for r in results]}")
    for ph, t in ctx.placeholders:
        k = next((k for k, o in enumerate(outs) if o.value == t.value), None)
        if k is None:
            raise ExecutorError(f"{ctx.where()}: get_grad was called on a tensor the "
                                "transform does not return")
        ph.results[0].replace_all_uses_with(g[k].value)
        ph.erase()
    for r, o in zip(results, outs):
        r.replace_all_uses_with(o.value)
    op.attributes["thunder.erase"] = ir.UnitAttr.get()
    return [ctx.puts.get(id(p)) for p in x]
