"""Values of tensors used as Python values while tracing: specialization and value guards.

``bool(t)``, ``t.item()``, ``t.tolist()``, ``int(t)``, ``float(t)`` (``if t.any():``,
``range(n.item())``) and the output shapes of ops whose sizes depend on the data
(``nonzero``, ``masked_select``, ``unique``, ...) need the values of tensors the trace has
not computed. The trace asks for them in order (query 0, 1, ...):

* a value the compilation already knows (``trace.known_values[k]``) is returned, and the
  program gets a **value guard** at that point: a torch executor call that, at run time,
  computes the value from the real tensors and raises ``ValueGuardFailed(k, observed)``
  where it differs (for a data-dependent op, the op's own executor call checks its output
  shapes). The runtime then picks or compiles the entry for the value seen
  (thunder_mlir/value_specialization.py): never a stale result.
* an unknown value raises ``ValueNeeded`` (a ``BaseException``, so that user code's
  ``except Exception`` does not swallow it) out of the user's code; the compiler finishes
  the trace there, returning the tensors the value is computed from (the program prefix),
  compiles and runs that prefix on the call's real inputs, computes the value, and traces
  again knowing it (thunder_mlir/pipeline.py ``_compile``).

Data-dependent output sizes are *unbacked size symbols* where the trace allows it
(``trace.unbacked``; section "unbacked sizes" below): one trace for every size >= 0 that
meets the guards the trace recorded on it. So (for values >= 2) is ``t.item()`` of an
integer tensor read by the user's code (``_value_symbol``), and the
length of a slice by it (``x[:n + 1]``, ``slice_by_value``).

Sources: torch.compile's graph breaks and unbacked symbols (``torch._dynamo``,
``torch/fx/experimental/symbolic_shapes.py``), done here as specialization plus guards for
Python values, as Dynamo does for values it guards on.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Sequence

import optree
import torch

from thunder_mlir.errors import DataDependentControlFlowError
from thunder_mlir.frontend import unbacked_sizes
from thunder_mlir.frontend.locations import describe_frame, library_frame, user_frame
from thunder_mlir.ir import implementations, symbolic
from thunder_mlir.ir.dialect import ExecutorCallOp, segment_kwargs
from thunder_mlir.ir.proxy import TensorProxy

_T = torch.Tensor
# Python values of tensors computed at trace time (specialized and guarded): what each is
MAX_QUERIES = 64  # values one trace may ask for (each costs a prefix compile)
PYTHON_VALUES: dict[Callable, str] = {
    _T.__bool__: "bool(tensor)", _T.item: "tensor.item()", _T.tolist: "tensor.tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)",
    _T.__index__: "tensor.__index__", _T.__complex__: "complex(tensor)",
    torch.allclose: "torch.allclose", _T.allclose: "tensor.allclose",
    torch.equal: "torch.equal", _T.equal: "tensor.equal",
}
_SCALAR_ONLY = {_T.__bool__, _T.item, _T.__int__, _T.__float__, _T.__index__, _T.__complex__}


class ValueNeeded(BaseException):
    """Raised while tracing where a Python value of tensors is not known yet: query
    ``index``, computed by ``compute`` (real tensors -> value) from ``tensors`` (proxies of
    the trace), ``what`` and ``where`` describe it. The compiler sets ``trace`` (the
    finished prefix trace returning ``tensors``) before handling it."""

    def __init__(self, index: int, tensors: Sequence[TensorProxy], compute: Callable,
                 what: str, where: str):
        super().__init__(f"{where}: {what}")
        self.index, self.tensors, self.compute = index, list(tensors), compute
        self.what, self.where = what, where
        self.trace = None


class ValueGuardFailed(Exception):
    """Raised by a plan at run time: value guard ``index`` saw ``observed`` instead of the
    value its program was traced with."""

    def __init__(self, index: int, observed: Any):
        super().__init__(f"value guard {index} failed: saw {observed!r}")
        self.index, self.observed = index, observed


def same_value(a, b) -> bool:
    """Whether two traced values are the same for specialization: equal types and values,
    NaN equal to NaN, 0.0 and -0.0 different; lists, tuples, torch.Size, dtypes elementwise."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) is complex:
        return same_value(a.real, b.real) and same_value(a.imag, b.imag)
    return a == b


def _site() -> str:
    f, lib = user_frame(), library_frame()
    inside = f" (in {describe_frame(lib)})" if lib is not None and lib is not f else ""
    return describe_frame(f) + inside


# attribute of the holder op a composite's decomposition is traced in (frontend/symbol.py):
# a value asked for there is asked of the composite's operands
COMPOSITE_HOLDER = "thunder.composite_holder"


def _at_top_level(trace) -> bool:
    """Whether ops are being emitted into the function's entry block, or a composite's
    decomposition there (not a cond/while/checkpoint region, whose values the program
    prefix cannot return)."""
    for ip in trace._ips[1:]:
        owner = ip.block.owner
        if owner is None or COMPOSITE_HOLDER not in owner.attributes:
            return False
    return trace._ips[0].block == trace.entry


def _returnable(trace, v) -> bool:
    """Whether the program prefix can return ``v``: an argument or a top-level result of
    the function, or an argument of a composite's decomposition (its operand outside)."""
    from torch_mlir import ir

    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner == trace.entry or (owner.owner is not None and
                                        COMPOSITE_HOLDER in owner.owner.attributes)
    parent = owner.operation.parent
    return parent is not None and parent.name == "func.func"


def query(trace, tensors: Sequence[TensorProxy], compute: Callable, what: str,
          refuse: str | None = None) -> tuple[int, Any]:
    """(query index, value) of the next value the trace asks for; raises ``ValueNeeded``
    when the compilation does not know it yet, DataDependentControlFlowError inside a
    region op (``refuse``: the message's first line, else the site)."""
    k = len(trace.value_sites)
    where = _site()
    if k < len(trace.known_values):
        trace.value_sites.append((what, where))
        return k, trace.known_values[k]
    if not _at_top_level(trace) or k >= MAX_QUERIES or \
            not all(_returnable(trace, p.value) for p in tensors):
        why = ("inside torch.cond, torch.while_loop or checkpoint, whose regions run inside "
               "one XLA program" if not _at_top_level(trace) else
               f"after {MAX_QUERIES} other such values in one program (each is computed by "
               "compiling the program up to it)" if k >= MAX_QUERIES else
               "of a tensor computed inside the decomposition of another op")
        raise DataDependentControlFlowError(
            f"{where}\n  {what} needs the tensor's data {why}. Use tensor ops instead "
            "(torch.where, masking), or torch.cond for control flow that depends on tensor "
            "values.")
    raise ValueNeeded(k, tensors, compute, what, where)


def python_value(func: Callable, args: tuple, kwargs: dict, method_call: bool = False):
    """The dispatch of ``bool(t)``, ``t.item()``, ``t.tolist()``, ``int(t)``,
    ``float(t)``, ``t.__index__()``, ``complex(t)``, ``torch.allclose``, ``torch.equal``
    on proxies: the value this call's
    inputs give (specialization), with a value guard checked at run time at this point of
    the program. ``method_call``: the user's own call (through dispatch), where ``t.item()``
    of an integer tensor may be a symbol (``_value_symbol``). Raises eager's RuntimeError
    for a tensor of several elements where the conversion needs one,
    DataDependentControlFlowError inside a region op."""
    from thunder_mlir.frontend.tracing import current_trace

    trace = current_trace()
    t = args[0]
    what = PYTHON_VALUES[func]
    if func in _SCALAR_ONLY and type(t.numel()) is int and t.numel() != 1:
        if t.numel() <= 1 << 16:
            with torch._C.DisableTorchFunction():  # eager's own error message
                func(torch.zeros(t.shape, dtype=t.dtype), *args[1:], **kwargs)
        raise RuntimeError(f"{what} of a tensor of {t.numel()} elements")

    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    positions = [i for i, x in enumerate(leaves) if type(x) is TensorProxy]

    def compute(*real: torch.Tensor):
        vals = list(leaves)
        for i, r in zip(positions, real):
            vals[i] = r
        a, k = optree.tree_unflatten(spec, vals)
        with torch._C.DisableTorchFunction():
            return func(*a, **k)

    tensors = [leaves[i] for i in positions]
    constants = [_constant(p) for p in tensors]
    if all(c is not None for c in constants):  # made from Python numbers alone: no guard
        return compute(*constants)
    k, value = query(trace, tensors, compute, what)
    if func is _T.item and type(value) is int and value >= 2 and \
            getattr(trace, "unbacked", False) and not t.dtype.is_floating_point and \
            not t.dtype.is_complex and t.dtype is not torch.bool and method_call and \
            _called_by_user():
        return _value_symbol(trace, k, tensors, compute, value, what)
    emit_guard(trace, k, tensors, compute, value, what)
    return value


# the frames between a tensor method's caller and ``python_value``
_DISPATCH_MODULES = frozenset((
    __name__, "thunder_mlir.frontend.dispatch", "thunder_mlir.frontend.tracing",
    "thunder_mlir.ir.proxy", "torch.overrides", "torch._tensor"))


def _called_by_user() -> bool:
    """Whether the code that called the tensor method being dispatched is the user's (or a
    library's, such as litgpt's), not thunder_mlir's own symbols nor torch's Python code,
    which need a Python int (a meta kernel, a factory's argument)."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "") in _DISPATCH_MODULES:
        f = f.f_back
    name = f.f_globals.get("__name__", "") if f is not None else "torch"
    return not any(name == p or name.startswith(p + ".") for p in ("thunder_mlir", "torch"))


def _value_symbol(trace, index: int, tensors: Sequence[TensorProxy], compute: Callable,
                  value: int, what: str):
    """``t.item()`` of an integer tensor that was ``value`` (at least 2) at the traced
    call, as an unbacked symbol (ir/symbolic.py ``ShapeEnv.new_value``), torch.compile's
    ``capture_scalar_outputs``: the program holds for every value that gives its
    comparisons (shape guards on the symbol) the traced answers, not for ``value`` alone.
    Where a tensor op, a float or a non-integer operation reads it, the symbol is
    specialized to ``value`` (a guard ``s == value``), except in a slice's bounds
    (``x[:n + 1]``: a symbolic length, ``slice_by_value``). A branch ``if n < window:``
    thus keeps one program for every ``n`` past the window, and ``x[:n + 1]`` under it one
    for every ``n`` inside.

    The run-time check (a torch executor call at this point of the plan) computes the value
    and raises ``ValueGuardFailed(index, observed)`` unless it is an int >= 2 meeting every
    guard on the symbol; ``trace.value_accepts[index]`` is that test, for the other entries
    of the value guard's group (value_specialization.py)."""
    from torch_mlir import ir

    env = trace.shape_env
    sym = env.new_value(value, f"{what} at {_site()}")
    number = symbolic.symbol_number(sym.expr)
    trace.unbacked_groups.append([number])
    trace.value_symbol_sources[number] = [p.value for p in tensors]
    check = []  # env.unbacked_check([number]), built at first use (the guards are final)

    def accept(observed) -> bool:
        if type(observed) is not int:
            return False
        if not check:
            check.append(env.unbacked_check([number]))
        return check[0]([observed])

    def run(*real: torch.Tensor) -> list:
        observed = compute(*real)
        if not accept(observed):
            raise ValueGuardFailed(index, observed)
        unbacked_sizes.record_run_sizes([number], [observed])
        return []

    trace.value_accepts[index] = accept
    impl = implementations.register_attr("value_guard", run)
    with trace.ip:
        ExecutorCallOp(**segment_kwargs("in", [p.value for p in tensors]),
                       **segment_kwargs("out", [], type_of=lambda t: t),
                       executor=ir.StringAttr.get("torch"),
                       callee=ir.StringAttr.get(f"value_guard[{index}] {what} (symbolic)"),
                       impl=impl)
    return sym


def pin_values(trace, tree):
    """``tree`` (an op's arguments: tuples, lists, dicts, slices of values) with every
    SymInt that holds a Python int read from a tensor (``_value_symbol``) replaced by its
    value, guarded (``SymInt.pin``): a tensor op reads the value itself."""
    def pin(x):
        if type(x) is symbolic.SymInt:
            return x.pin() if x.is_value() else x
        if isinstance(x, (tuple, list)):
            items = [pin(v) for v in x]
            if all(a is b for a, b in zip(items, x)):
                return x
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        if type(x) is slice:
            return slice(pin(x.start), pin(x.stop), pin(x.step))
        if type(x) is dict:
            return {k: pin(v) for k, v in x.items()}
        return x
    return pin(tree)


def _is_value(x) -> bool:
    return type(x) is symbolic.SymInt and x.is_value()


def slices_by_value(index) -> bool:
    """Whether a ``__getitem__`` index has a slice bound that is an int read from a tensor
    (a value symbol, ``_value_symbol``): ``x[:n + 1]``, ``x[..., n:]``."""
    items = index if type(index) is tuple else (index,)
    return any(type(ix) is slice and (_is_value(ix.start) or _is_value(ix.stop))
               for ix in items)


def slice_by_value(trace, x: TensorProxy, index):
    """``x[index]`` for an index of ints, slices, None and Ellipsis whose slice bounds
    hold ints read from tensors (value symbols, ``_value_symbol``): a view of ``x`` whose
    sliced lengths are symbolic (``n + 1`` for ``x[:n + 1]``), so that one program serves
    every value, as torch.compile's unbacked SymInts do (``capture_scalar_outputs``), instead
    of a program specialized on each value (``SymInt.pin``).

    XLA compiles static shapes, which its program cannot take from a tensor's data: the
    slice runs on the torch executor (at run time: eager's ``x[index]`` with the values this
    call's value guards saw, ``unbacked_sizes.run_size``), and the XLA regions after it
    read the length from their arguments' sizes (ir/hlo_dynamic.py ``SymbolScope.bind``),
    compiled once per length (runtime/refine.py), never traced again. The bounds are clamped
    as Python's slices are (``symbolic.slice_indices``: guards such as ``n + 1 <= size``
    join the value guard's test). Returns None (the caller specializes on the values) where the
    index holds anything else, a value symbol as a step or an int index, ``x`` requires
    grad, the slice is inside a region (torch.cond, torch.while_loop, a composite's
    decomposition), or a sliced length is not a symbol of at least 2 at the traced call
    (clamped to the size, or 0 or 1)."""
    from torch_mlir import ir

    from thunder_mlir.frontend import aliasing
    from thunder_mlir.ir import dtypes

    if type(x) is not TensorProxy or x.requires_grad or \
            any(ip.block != trace.entry for ip in trace._ips):
        return None  # (a cond/while region: one XLA program, no torch call inside)
    items = index if type(index) is tuple else (index,)
    for ix in items:
        if ix is None or ix is Ellipsis or type(ix) is int:
            continue
        if type(ix) is not slice or _is_value(ix.step) or not all(
                b is None or type(b) in (int, symbolic.SymInt) for b in
                (ix.start, ix.stop, ix.step)):
            return None
    numbers = sorted({symbolic.symbol_number(sym) for ix in items if type(ix) is slice
                      for b in (ix.start, ix.stop) if type(b) is symbolic.SymInt
                      for sym in b.expr.free_symbols})
    if any(k not in trace.value_symbol_sources or not all(
            _at_entry(trace, v) for v in trace.value_symbol_sources[k]) for k in numbers):
        return None  # (a bound that mixes in a symbolic input size: specialized)
    rank = len(x.tshape)
    consumed = sum(1 for ix in items if ix is not None and ix is not Ellipsis)
    if consumed > rank or sum(1 for ix in items if ix is Ellipsis) > 1:
        return None  # (eager's IndexError, from the specialized path)
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items = items[:i] + (slice(None),) * (rank - consumed) + items[i + 1:]
    shape: list = []
    d = 0
    for ix in items:
        if ix is None:
            shape.append(1)
            continue
        size = x.tshape[d]
        d += 1
        if type(ix) is int:
            if type(size) is not int or not -size <= ix < size:
                return None
            continue
        start, stop, step = symbolic.slice_indices(ix, size)
        if step <= 0:
            return None
        stop = max(stop, start)
        n = -((start - stop) // step)
        if (_is_value(ix.start) or _is_value(ix.stop)) and \
                (not _is_value(n) or not n >= 2):
            return None
        shape.append(n)
    shape += list(x.tshape[d:])

    syms = [symbolic.symbol(k) for k in numbers]
    # the tensors the values were read from are operands, so that the slice runs after the
    # value guards that record the values (partition.py runs an executor call after its
    # operands' producers, in program order)
    sources: list = []
    for k in numbers:
        sources += [v for v in trace.value_symbol_sources[k]
                    if v != x.value and all(v != w for w in sources)]

    def evaluator(v):
        if type(v) is not symbolic.SymInt:
            return lambda values: v
        f = symbolic.sympy.lambdify(syms, v.expr, "math")
        return lambda values: int(f(*values))
    bounds = [(evaluator(ix.start), evaluator(ix.stop), ix.step) if type(ix) is slice
              else ix for ix in items]
    lengths = [evaluator(n) for n in shape]
    what = f"x[{_index_text(index)}]"
    site = _site()
    limit = getattr(trace, "recompile_limit", unbacked_sizes.DISTINCT_SIZES_LIMIT)
    seen: set = set()

    def run(real: torch.Tensor, *_sources: torch.Tensor,
            bounded: bool = False) -> list[torch.Tensor]:
        # bounded: the slice is read only by a region compiled for bounded dynamic shapes
        # (runtime/plan.py ``_bounded``), which takes ``real`` and this view's sizes: no
        # copy, and no compile per length to warn of
        values = [unbacked_sizes.run_size(k) for k in numbers]
        real_index = tuple(slice(b[0](values), b[1](values), b[2]) if type(b) is tuple
                           else b for b in bounds)
        with torch._C.DisableTorchFunction():
            out = real[real_index]
        expected = tuple(f(values) for f in lengths)
        if tuple(out.shape) != expected:  # (the value guards' test keeps it from happening)
            raise RuntimeError(f"internal: x[index] of shape {tuple(out.shape)}, traced as "
                               f"{expected}")
        if bounded:
            return [out]
        unbacked_sizes.warn_past_limit(seen, expected, limit, lambda n: (
            f"{site}: {what} has taken {n} distinct lengths (recompile limit {limit}); the "
            "length is a symbol, so the program is not re-traced, but each new length "
            "compiles the XLA regions after the slice once"))
        return [out.contiguous()]

    impl = implementations.register_attr("Tensor.__getitem__", run)
    result_type = dtypes.tensor_type(tuple(shape), x.tdtype)
    with trace.ip:
        op = ExecutorCallOp(**segment_kwargs("in", [x.value] + sources),
                            **segment_kwargs("out", [result_type], type_of=lambda t: t),
                            executor=ir.StringAttr.get("torch"),
                            callee=ir.StringAttr.get(f"{what} (symbolic)"), impl=impl)
    op.operation.attributes[symbolic.RESULT_SHAPES_ATTR] = ir.ArrayAttr.get([
        ir.ArrayAttr.get([ir.StringAttr.get(symbolic.dim_text(n)) for n in shape])])
    if all(type(ix) is slice and (ix.start is None or type(ix.start) is int and ix.start == 0)
           and (ix.step is None or type(ix.step) is int and ix.step == 1) for ix in items):
        op.operation.attributes[symbolic.PREFIX_SLICE_ATTR] = ir.UnitAttr.get()
    trace.fallbacks.append("Tensor.__getitem__")  # (fallback_ops: it runs on torch)
    out = TensorProxy(op.operation.results[0], tuple(shape), x.tdtype, trace.device)
    # eager's result is a view of x: a write into x refreshes it (aliasing.refresh_views
    # calls x[index] again, here); a write into it goes back into x (functionalization.py:
    # for symbolic sizes, the program is then compiled for static shapes)
    aliasing.mark_views(x, out)
    setattr(out, aliasing._VIEW_OF, (torch.Tensor.__getitem__, (x, index), {}, None,
                                     _site(), torch.is_grad_enabled()))
    return out


def _at_entry(trace, v) -> bool:
    """Whether SSA value ``v`` is an argument or an op result of the function's entry block
    (readable by an op there; not a composite decomposition's argument)."""
    from torch_mlir import ir

    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner == trace.entry
    return owner.operation.parent is not None and owner.operation.parent.name == "func.func"


def _index_text(index) -> str:
    items = index if type(index) is tuple else (index,)

    def text(ix):
        if ix is Ellipsis:
            return "..."
        if type(ix) is slice:
            return ":".join("" if b is None else str(getattr(b, "expr", b))
                            for b in (ix.start, ix.stop)) + \
                ("" if ix.step is None else f":{ix.step}")
        return str(ix)
    return ", ".join(text(ix) for ix in items)


# Tensors made from Python values alone by a deterministic factory
# (``int(torch.div(n, 2, rounding_mode="trunc"))``, ``torch.tensor(3).item()``): their value
# is computed eagerly at trace time and kept on the proxy, so asking for it needs neither a
# program prefix nor a guard.
CONSTANT = "_thunder_constant"
_CONSTANT_FACTORIES = {torch.tensor, torch.as_tensor, torch.scalar_tensor, torch.div,
                       torch.floor_divide, torch.true_divide, torch.remainder, torch.mul,
                       torch.add, torch.sub, torch.full, torch.zeros, torch.ones}


def note_constant(func: Callable, args: tuple, kwargs: dict, out) -> None:
    """Attach to ``out`` (a proxy) the eager value of ``func(*args, **kwargs)`` when
    ``func`` is a deterministic factory given no tensors (``CONSTANT``)."""
    if func not in _CONSTANT_FACTORIES or type(out) is not TensorProxy:
        return
    leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
    if any(isinstance(x, torch.Tensor) for x in leaves):
        return
    try:
        with torch._C.DisableTorchFunction():
            value = func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no shortcut: asked of the program as any value
        return
    if isinstance(value, torch.Tensor) and value.numel() <= 64:
        setattr(out, CONSTANT, (out.value, value))  # (the SSA value it is the value of)


def _constant(p: TensorProxy) -> torch.Tensor | None:
    """The eager value ``note_constant`` attached to ``p``, unless ``p`` was written in
    place since (an in-place op rebinds ``p.value``)."""
    held = getattr(p, CONSTANT, None)
    return held[1] if held is not None and held[0] == p.value else None


def emit_guard(trace, index: int, tensors: Sequence[TensorProxy], compute: Callable,
               value, what: str) -> None:
    """Record value guard ``index``: a torch executor call with no results reading
    ``tensors`` that raises ``ValueGuardFailed(index, observed)`` where ``compute`` of the
    real tensors is not ``value`` (``same_value``)."""
    from torch_mlir import ir

    def check(*real: torch.Tensor) -> list:
        observed = compute(*real)
        if not same_value(observed, value):
            raise ValueGuardFailed(index, observed)
        return []

    symbol = implementations.register_attr("value_guard", check)
    with trace.ip:
        ExecutorCallOp(**segment_kwargs("in", [p.value for p in tensors]),
                       **segment_kwargs("out", [], type_of=lambda t: t),
                       executor=ir.StringAttr.get("torch"),
                       callee=ir.StringAttr.get(f"value_guard[{index}] {what}"), impl=symbol)


# ---------------------------------------------------------- data-dependent output sizes
# ops whose output shapes depend on their inputs' values (torch's unbacked sizes)
DATA_DEPENDENT_OPS = {
    torch.nonzero, _T.nonzero, torch.argwhere, _T.argwhere, torch.masked_select,
    _T.masked_select, torch.unique, _T.unique, torch.functional.unique,
    torch.unique_consecutive, _T.unique_consecutive, torch.functional.unique_consecutive,
    torch._unique2, torch.repeat_interleave, _T.repeat_interleave, torch.tensor_split,
    _T.tensor_split, torch.bincount, _T.bincount, torch.where, _T.where, _T.__getitem__,
    torch.nn.functional.one_hot}


def is_data_dependent(func: Callable, args: tuple, kwargs: dict | None = None) -> bool:
    """Whether ``func(*args, **kwargs)`` has output sizes that depend on its inputs'
    values (then it runs on the torch fallback, specialized and guarded)."""
    if func not in DATA_DEPENDENT_OPS:
        return False
    kwargs = kwargs or {}
    if func in (torch.where, _T.where):
        return len(args) + len(kwargs) == 1
    if func is _T.__getitem__:
        return has_bool_index(args[1] if len(args) > 1 else None)
    if func in (torch.repeat_interleave, _T.repeat_interleave):  # repeats as a tensor
        rest = [*args[1:2], kwargs.get("repeats")]
        return (len(args) == 1 and not kwargs) or any(type(r) is TensorProxy for r in rest)
    if func is torch.nn.functional.one_hot:  # num_classes=-1: max(input) + 1
        return (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) == -1
    if func in (torch.tensor_split, _T.tensor_split):  # indices as a tensor
        rest = [*args[1:2], *kwargs.values()]
        return any(type(r) is TensorProxy for r in rest)
    return True


def _observed(out_spec, metas, outs: list[torch.Tensor]):
    """The value a data-dependent op's run gave (as ``output_metadata``'s ``compute``), from
    its tensor outputs ``outs``; None where their number differs from the traced one (a
    ``tensor_split`` into another number of pieces: the structure is not known here)."""
    if len(outs) != sum(m is not None for m in metas):
        return None
    seen = iter((tuple(o.shape), o.dtype) for o in outs)
    return out_spec, tuple(None if m is None else next(seen) for m in metas)


def has_bool_index(index) -> bool:
    """Whether an index of ``__getitem__`` holds a bool or uint8 tensor (a mask)."""
    return any(type(x) is TensorProxy and x.dtype in (torch.bool, torch.uint8)
               for x in optree.tree_leaves(index, none_is_leaf=True))


def output_metadata(trace, name: str, func: Callable, leaves: list, positions: list[int],
                    spec) -> tuple[Any, Callable]:
    """The output metadata (meta tensors in the output structure) of a data-dependent op
    at this call, computed from the real values (``query``), and a wrapper
    ``guarded(run)`` for its runtime callable that raises ``ValueGuardFailed`` where a run's
    output shapes differ. The value is (output tree structure, ((shape, dtype) or None per
    leaf))."""
    def compute(*real: torch.Tensor):
        vals = list(leaves)
        for i, t in zip(positions, real):
            vals[i] = t
        a, k = optree.tree_unflatten(spec, vals)
        with torch._C.DisableTorchFunction(), torch.no_grad():
            out = func(*a, **k)
        flat, out_spec = optree.tree_flatten(out, none_is_leaf=True)
        return out_spec, tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor)
                               else None if x is None else ("value", x) for x in flat)

    operands = [leaves[i] for i in positions]
    k = len(trace.value_sites)
    if trace.guessed is not None and k == len(trace.known_values) and \
            k not in trace.no_guess and k < MAX_QUERIES and _at_top_level(trace) and \
            all(_returnable(trace, p.value) for p in operands):
        # unbacked sizes: no value needed, only a hint (unbacked_sizes.guess)
        value = unbacked_sizes.guess(func, leaves, positions, spec)
        if value is not None:
            trace.known_values.append(value)
            trace.guessed.add(k)
    k, (out_spec, metas) = query(trace, operands, compute, f"the output size of {name}")
    if any(m is not None and m[0] == "value" for m in metas):
        raise DataDependentControlFlowError(f"{_site()}\n  {name} returns a Python value")
    shapes = [m for m in metas if m is not None]
    site = _site()
    unbacked = unbacked_sizes.symbolic_shapes(trace, name, func, leaves, positions, spec,
                                              out_spec, metas, site) \
        if getattr(trace, "unbacked", False) else None
    if unbacked is not None:
        if trace.guessed is not None and k in trace.guessed:
            trace.guessed_symbols.update(dict.fromkeys(unbacked[1], k))
        def fail(outs: list[torch.Tensor]):
            raise ValueGuardFailed(k, _observed(out_spec, metas, outs))
        return unbacked_sizes.metadata(trace, k, name, out_spec, metas, *unbacked, site, fail)

    def guarded(run: Callable) -> Callable:
        def checked(*tensors: torch.Tensor) -> list[torch.Tensor]:
            outs = run(*tensors)
            if len(outs) != len(shapes) or any(
                    tuple(o.shape) != s or o.dtype != d for o, (s, d) in zip(outs, shapes)):
                raise ValueGuardFailed(k, _observed(out_spec, metas, outs))
            return outs
        return checked

    meta = optree.tree_unflatten(out_spec, [
        None if m is None else torch.empty(m[0], dtype=m[1], device="meta") for m in metas])
    return meta, guarded
