"""The ``torch`` executor: runs a torch op with no thunder_mlir symbol eagerly.

While tracing, the op runs on meta tensors to learn its outputs' shapes and dtypes (an op
with no meta kernel runs once on zero-filled inputs instead, and every real run is checked
against what that trial gave; inside a ``torch.autocast`` region, meta tensors would skip
autocast's casts, so the trial run on zeros (under that state) is used, or fake tensors of
the program's device where it has no kernels here), and is recorded as
``thunder.executor_call`` with ``executor = "torch"``. The partition pass leaves it between
XLA regions; the runtime calls the real torch function there, under the autocast state it
was traced in. So an unsupported op costs speed (a region boundary and an eager kernel),
never correctness.

The op names its implementation by symbol (``impl``): a call whose arguments are plain
values carries them (``thunder.torch_call``) and is rebuilt from the IR by
``implementation_of``; any other is a closure registered in ir/implementations.py.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import optree
import torch
from torch_mlir import ir

from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs

from thunder_mlir.frontend import autocast, value_guards
from thunder_mlir.frontend.aliasing import writes_first_argument
from thunder_mlir.ir import dtypes, implementations, symbolic
from thunder_mlir.errors import TraceError
from thunder_mlir.ir.proxy import TensorProxy


def qualified_name(func: Callable) -> str:
    """A readable dotted name for a torch callable (``torch.Tensor.cumsum``, ``torch.cumsum``)."""
    q = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if "<locals>" in q:  # a function made by a factory (F.boolean_dispatch): its own name
        q = getattr(func, "__name__", q)
    q = q.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "")
    if q.startswith("Tensor."):
        return "torch." + q
    mod = getattr(func, "__module__", None) or "torch"
    # builtins of torch's C submodules: torch._C._special.special_i0 -> torch.special.i0
    for c_mod, public in (("torch._C._special", "special"), ("torch._C._linalg", "linalg"),
                          ("torch._C._fft", "fft"), ("torch._C._nn", "nn.functional")):
        if mod == c_mod:
            prefix = public.split(".")[0] + "_"
            return f"torch.{public}.{q[len(prefix):] if q.startswith(prefix) else q}"
    if mod.startswith("torch._C"):
        mod = "torch"
    return f"{mod}.{q}" if not q.startswith(mod) else q


def _is_inplace(func: Callable, args, tensor: type = TensorProxy) -> bool:
    """``func`` writes its first argument, a ``tensor`` (``aliasing.writes_first_argument``),
    where no meta run can tell (a trial run on zeros, IR written before ``WRITES_ATTR``)."""
    return bool(writes_first_argument(func) and args and type(args[0]) is tensor)


def _written(metas: list[torch.Tensor]) -> list[int]:
    """Which of the fresh (version 0) tensors an op ran on it wrote: their version counter
    moved (ATen's in-place and ``out=`` kernels bump it, on meta tensors too)."""
    return [j for j, m in enumerate(metas) if m._version > 0]


# ATen ops that write arguments their schema does not mark ``(a!)``: native_batch_norm
# updates the running statistics in place in training mode (aten/src/ATen/native/
# Normalization.cpp, batch_norm_cpu_update_stats_template), its schema says ``Tensor?``
_UNDECLARED_WRITES = {"native_batch_norm": ("running_mean", "running_var")}


def _declared_writes(func: Callable, args: tuple, kwargs: dict) -> list:
    """The tensor arguments an ATen op's schema declares written (``Tensor(a!)``) that
    its kernels write without moving their version counter, so ``_written`` cannot see
    them: ``native_batch_norm``'s running statistics (native_functions.yaml). Every
    overload whose schema takes the call's positional count must declare the argument."""
    packet = func.overloadpacket if isinstance(func, torch._ops.OpOverload) else \
        getattr(torch.ops.aten, getattr(func, "__name__", ""), None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return []
    schemas = [func._schema] if isinstance(func, torch._ops.OpOverload) else \
        [getattr(packet, o)._schema for o in packet.overloads()]
    names = None
    for schema in schemas:
        params = schema.arguments
        positional = [a for a in params if not a.kwarg_only]
        if not sum(not a.has_default_value() for a in positional) <= len(args) <= \
                len(positional):
            continue
        w = {a.name for a in params if a.alias_info is not None and a.alias_info.is_write}
        names = w if names is None else names & w
    names = (names or set()) | set(_UNDECLARED_WRITES.get(packet.__name__, ()))
    if not names:
        return []
    out = []
    for schema in schemas[:1]:
        for k, a in enumerate(schema.arguments):
            if a.name in names:
                v = args[k] if k < len(args) else kwargs.get(a.name)
                if type(v) is TensorProxy:
                    out.append(v)
    return out


def _sizes_as_ints(x):
    """0-d integer tensors inside a list or tuple argument (``as_strided(size=(b, n + 1))``)
    as Python ints, as torch's argument parser reads an int list (``__index__``: a value
    the trace specializes on and guards, frontend/value_guards.py)."""
    if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
        if x and all(type(v) is TensorProxy for v in x):
            return x  # a sequence of tensors (torch.cat's), not a size list
        return type(x)(operator.index(v) if type(v) is TensorProxy and not v.tshape and
                       not v.tdtype.is_floating_point and not v.tdtype.is_complex and
                       v.tdtype is not torch.bool else _sizes_as_ints(v) for v in x)
    return x


def emit_fallback(trace, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Record ``func(*args, **kwargs)`` as a torch executor call; return output proxies."""
    name = qualified_name(func)
    args = tuple(_sizes_as_ints(a) for a in args)  # (each argument, not the tuple of them)
    kwargs = {k: _sizes_as_ints(v) for k, v in kwargs.items()}
    if func in _STORAGE_READERS:
        args, kwargs = _on_root(args, kwargs)
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    positions = [i for i, leaf in enumerate(leaves) if type(leaf) is TensorProxy]
    proxies = [leaves[i] for i in positions]
    meta_leaves = list(leaves)
    data_dependent = value_guards.is_data_dependent(func, args, kwargs)
    # one meta tensor per proxy: eager's call sees a tensor passed twice as one tensor
    same_meta: dict[int, torch.Tensor] = {}
    for i in positions:  # (a data-dependent op's symbolic operands: value_guards.py)
        if not data_dependent or not trace.unbacked or not symbolic.is_symbolic(
                leaves[i].tshape):
            meta_leaves[i] = same_meta.get(id(leaves[i]))
            if meta_leaves[i] is None:
                meta_leaves[i] = same_meta[id(leaves[i])] = leaves[i].meta
        else:
            meta_leaves[i] = None
    m_args, m_kwargs = optree.tree_unflatten(spec, meta_leaves)
    trial = False  # metadata from a trial run or a documented rule: checked every real run
    pin = autocast.pin_state(trace.device)  # the autocast state the op runs under
    written = None  # which tensor arguments the op writes (None: judged by its name)
    guarded = None  # data-dependent output sizes: specialized and guarded (value_guards.py)
    try:
        if data_dependent:
            meta_out, guarded = value_guards.output_metadata(trace, name, func, leaves,
                                                             positions, spec)
        elif pin is not None and pin[1]:
            # in an autocast region: meta tensors skip autocast's casts and fake tensors the
            # ones a kernel makes inside (linalg.pinv's matmul); real kernels run on zeros,
            # else fake tensors, and every real run is checked against what they gave
            trial = True
            meta_out = _trial_run(func, leaves, positions, spec, trace.device) \
                if autocast.device_exists(trace.device) else None
            if meta_out is None:
                meta_out = autocast.fake_metadata(func, args, kwargs, trace.device)
        else:
            with torch._C.DisableTorchFunction(), torch.device("meta"):
                meta_out = func(*m_args, **m_kwargs)
            written = _written([meta_leaves[i] for i in positions])
            declared = _declared_writes(func, args, kwargs)
            written += [j for j, i in enumerate(positions)
                        if j not in written and any(leaves[i] is w for w in declared)]
            if func in _META_DIFFERS:
                # the meta kernel's output shapes are not the real kernel's (it still tells
                # what the op writes): the shapes come from a run on zeros, and every real
                # run is checked against them
                trial = True
                meta_out = _trial_run(func, leaves, positions, spec, trace.device)
                if meta_out is None:
                    raise RuntimeError("the trial run on zeros failed")
    except Exception as e:
        meta_out = _documented_metadata(func, m_args, m_kwargs)
        if meta_out is None:
            meta_out = _trial_run(func, leaves, positions, spec, trace.device)
        if meta_out is None:
            from thunder_mlir.frontend.symbols import SYMBOLS
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            why = (f"its symbol {SYMBOLS[func].name} declined this call" if func in SYMBOLS
                   else "has no thunder_mlir symbol")
            raise TraceError(
                f"{describe_frame(user_frame())}\n  {name} {why}, and the "
                f"torch fallback cannot run it because its output metadata is not computable "
                f"on meta tensors ({type(e).__name__}: {e}) nor by a trial run on zeros. "
                "Data-dependent output shapes (nonzero, masked_select, unique) and Python "
                "results (allclose, equal) cannot be compiled; compute them outside the "
                "jitted function.") from None
        trial = True
    if written is None:
        written = [0] if _is_inplace(func, args) else []
    if written:
        _check_written_alone(proxies, written)
    written_metas = [meta_leaves[positions[j]] for j in written]
    out_leaves, out_spec = optree.tree_flatten(meta_out, none_is_leaf=True)
    # an output that is a written argument itself (``x.add_(1)`` returns x) is that argument
    returned = {i: next(j for j, m in zip(written, written_metas) if m is out_leaves[i])
                for i in range(len(out_leaves))
                if any(m is out_leaves[i] for m in written_metas)}
    out_pos = [i for i, leaf in enumerate(out_leaves)
               if isinstance(leaf, torch.Tensor) and i not in returned]
    result_metas = [out_leaves[i] for i in out_pos] + [leaves[positions[j]].meta for j in written]
    # unbacked output sizes of a data-dependent op (value_guards.py): symbolic shapes
    sym_shapes = getattr(guarded, "shapes", None) or {}
    result_shapes = [sym_shapes.get(i, tuple(out_leaves[i].shape)) for i in out_pos] + \
        [tuple(m.shape) for m in result_metas[len(out_pos):]]
    result_types = [dtypes.tensor_type(s, m.dtype) for s, m in zip(result_shapes, result_metas)]
    operand_types = [p.value.type for p in proxies]
    in_order, out_order = type_order(operand_types), type_order(result_types)
    if not fits_in_runs([operand_types[i] for i in in_order]) or \
            not fits_in_runs([result_types[i] for i in out_order]):
        raise TraceError(f"{name}: more than 8 distinct tensor types among its tensor "
                         "arguments or among its outputs, the most one executor call holds")

    traced = [(tuple(out_leaves[i].shape), out_leaves[i].dtype) for i in out_pos]
    storage = None  # (an op that reads its first argument's storage: _make_run)
    if func in _STORAGE_READERS and positions and positions[0] == 0:
        storage = "input" if any(leaves[0] is q for q in trace.inputs) else \
            "computed" if getattr(leaves[0], "_alias_root", None) is None else None
    run = _make_run(name, func, leaves, positions, spec, pin, written, trial, traced, storage)
    if guarded is not None:
        run = guarded(run)
    structure = None if not any(p.requires_grad for p in proxies) else \
        _autograd_structure(func, leaves, positions, spec, trace.device, not trial, written)
    differentiable = None if written or structure is None else structure[0]
    call = None if guarded is not None else \
        _encode_call(func, name, args, kwargs, leaves, positions, in_order, out_order, pin)
    if call is None:  # a closure over Python objects: the registry names it
        impl = permuted(run, in_order, out_order)
        if not written:  # the generators its backward must replay (see with_rng_state)
            impl.generators = _generators(leaves, trace.device)
        symbol = implementations.register_attr(name, impl)
    else:  # rebuilt from the IR by implementation_of
        symbol = implementations.symbol_attr(name)
    with trace.ip:
        op = ExecutorCallOp(**segment_kwargs("in", [proxies[i].value for i in in_order]),
                            **segment_kwargs("out", [result_types[i] for i in out_order],
                                             type_of=lambda t: t),
                            executor=ir.StringAttr.get("torch"), callee=ir.StringAttr.get(name),
                            impl=symbol)
    if written:  # operand numbers whose new values are the last results (own order)
        operand_of = {j: k for k, j in enumerate(in_order)}
        op.operation.attributes[WRITES_ATTR] = ir.DenseI64ArrayAttr.get(
            [operand_of[j] for j in written])
    if sym_shapes:  # the expression of each dim of each result (ir/symbolic.py)
        op.operation.attributes[symbolic.RESULT_SHAPES_ATTR] = ir.ArrayAttr.get([
            ir.ArrayAttr.get([ir.StringAttr.get(symbolic.dim_text(d))
                              for d in result_shapes[i]]) for i in out_order])
    if call is not None:
        op.operation.attributes[CALL_ATTR] = ir.StringAttr.get(call)
        if trial:
            op.operation.attributes[TRIAL_ATTR] = ir.UnitAttr.get()
        if storage is not None:
            op.operation.attributes[STORAGE_ATTR] = ir.StringAttr.get(storage)
    if differentiable is not None and len(differentiable) == len(result_types):
        op.operation.attributes[DIFFERENTIABLE] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(differentiable[i]) for i in out_order])  # per op result
    if structure is not None and any(
            not c and (leaves[i].tdtype.is_floating_point or leaves[i].tdtype.is_complex)
            for i, c in zip(positions, structure[1])):
        op.operation.attributes[CONNECTED] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(structure[1][i]) for i in in_order])  # per op operand
    trace.fallbacks.append(name)
    results = unpermute(list(op.operation.results), out_order)
    fresh = results[:len(out_pos)]
    from thunder_mlir.frontend.functionalization import assign

    for j, r in zip(written, results[len(out_pos):]):
        p = proxies[j]
        assign(p, TensorProxy(r, p.tshape, p.tdtype, trace.device))
    # outputs eager returns as views of the first argument (``as_strided``, a complex
    # ``conj``, ``diagonal`` where no symbol has them): views here too, so a write through
    # one reaches its base and a write into the base reaches it (functionalization.py)
    base_meta = meta_leaves[0] if positions and positions[0] == 0 and args and \
        args[0] is leaves[0] and not trial and not written else None
    views = []
    for k, i in enumerate(out_pos):
        m = out_leaves[i]
        out_leaves[i] = TensorProxy(fresh[k], result_shapes[k], m.dtype, trace.device)
        if m._is_zerotensor():  # (zeros at run time, _materialized; eager refuses writes)
            out_leaves[i]._zero_tensor = True
        if base_meta is not None and isinstance(m, torch.Tensor) and m.device.type == "meta" \
                and torch._C._is_alias_of(m, base_meta):
            views.append(out_leaves[i])
    for i, j in returned.items():
        out_leaves[i] = proxies[j]
    if views:
        from thunder_mlir.frontend.aliasing import mark_views

        mark_views(leaves[0], views)
    return optree.tree_unflatten(out_spec, out_leaves)


def _span(p: TensorProxy):
    """(root, first element, one past the last) of eager's memory for ``p``, or None."""
    from thunder_mlir.frontend.aliasing import eager_meta

    root = getattr(p, "_alias_root", None)
    m = eager_meta(p)
    if m is None:
        return None
    last = m.storage_offset() + sum((n - 1) * st for n, st in zip(m.shape, m.stride()))
    return (p if root is None else root), m.storage_offset(), last + 1 if m.numel() else 0


def _check_written_alone(proxies: list, written: list[int]) -> None:
    """Raise NotImplementedError (naming the line) where a fallback op writes an argument
    whose memory overlaps another argument's without being the same tensor (``op_(x,
    x[0])``): eager's kernel reads the other argument while it writes, in an order the
    compiled call (which writes a copy) does not reproduce. The same tensor passed twice
    is one copy, as eager's is one tensor (``_make_run``)."""
    for j in written:
        a = _span(proxies[j])
        for k, q in enumerate(proxies):
            if q is proxies[j] or a is None:
                continue
            b = _span(q)
            if b is None or b[0] is not a[0] or a[1] >= a[2] or b[1] >= b[2]:
                continue
            if a[1] < b[2] and b[1] < a[2]:
                from thunder_mlir.frontend.locations import describe_frame, user_frame

                raise NotImplementedError(
                    f"{describe_frame(user_frame())}\n  this op writes an argument that shares "
                    "memory with another of its arguments (a view of one tensor passed "
                    "twice); eager's kernel reads one while it writes the other, which "
                    "thunder_mlir's call on copies does not reproduce. Pass a .clone() of "
                    "one of them.")


# ops whose result depends on their first argument's storage offset and strides, which
# eager reads from the tensor's own storage (as_strided's offset is the storage's)
_STORAGE_READERS = frozenset({torch.Tensor.as_strided, torch.as_strided})


def _on_root(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``as_strided(view, size, stride, offset)``'s arguments with the view replaced by the
    tensor at the top of its chain of views and the offset made explicit (the view's own
    by default): eager's call reads the storage the view shares with that tensor, not the
    view's elements. Unchanged where ``args[0]`` is no view or its geometry is unknown."""
    from thunder_mlir.frontend.aliasing import _VIEW_OF, _top, eager_meta

    v = args[0] if args else None
    if type(v) is not TensorProxy or getattr(v, _VIEW_OF, None) is None:
        return args, kwargs
    with torch._C.DisableTorchFunction():
        m = eager_meta(v)
    root = _top(v)
    if m is None or root.tdtype != v.tdtype or m.is_conj() or m.is_neg():
        return args, kwargs
    names = ("size", "stride", "storage_offset")
    given = dict(zip(names, args[1:]), **kwargs)
    if "size" not in given or "stride" not in given:
        return args, kwargs
    offset = given.get("storage_offset")
    from thunder_mlir.frontend.tracing import current_trace

    offset = m.storage_offset() if offset is None else offset
    if v.requires_grad and torch.is_grad_enabled() and \
            not _reads_within(m, given["size"], given["stride"], offset):
        if any(root is q for q in current_trace().inputs):
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            raise NotImplementedError(
                f"{describe_frame(user_frame())}\n  as_strided of a view of an input that "
                "requires grad, reading storage outside the view: eager gives those "
                "elements no gradient (its backward scatters into the view's geometry), "
                "which the compiled program does not reproduce for an input. Call "
                "as_strided on the input itself, or on a copy of the view (v.clone()).")
        root = _graded_through(root, v, m)
    return (root, given["size"], given["stride"], offset), {}


def _reads_within(m: torch.Tensor, size, stride, offset) -> bool:
    """Whether ``as_strided(size, stride, offset)`` of the storage reads only elements of
    the view of geometry ``m`` (then its gradient is eager's as it is)."""
    try:
        n = max(m.storage_offset() + sum((k - 1) * st for k, st in zip(m.shape, m.stride())),
                int(offset) + sum((int(k) - 1) * int(st) for k, st in zip(size, stride))) + 1
        with torch._C.DisableTorchFunction():
            pos = torch.arange(n)
            inside = pos.as_strided(m.shape, m.stride(), m.storage_offset()).flatten()
            read = pos.as_strided(tuple(map(int, size)), tuple(map(int, stride)), int(offset))
            return bool(torch.isin(read.flatten(), inside).all())
    except (TypeError, ValueError, RuntimeError):  # (symbolic sizes: not checked)
        return True


def _graded_through(root: TensorProxy, v: TensorProxy, m: torch.Tensor) -> TensorProxy:
    """``root``'s values, differentiable through the view ``v``'s elements alone (``m``:
    ``v``'s eager geometry): eager's ``as_strided`` of a view gives no gradient to the
    storage elements the view does not cover (as_strided_backward scatters into the
    input's geometry)."""
    from thunder_mlir.frontend.differentiability import _set_requires_grad
    from thunder_mlir.frontend.functionalization import _scatter_update
    from thunder_mlir.ir import prims

    out = _scatter_update(prims.stop_gradient(root), v, tuple(m.shape), tuple(m.stride()),
                          m.storage_offset())
    _set_requires_grad(out, True)
    return out


def _make_run(name: str, func: Callable, leaves: list, positions: list[int], spec, pin,
              written: list[int], trial: bool, traced: list,
              storage: str | None = None) -> Callable:
    """The runtime callable of a fallback call: ``func`` on the flattened arguments
    ``leaves`` (``spec``) with the run's tensors (in their own order) at ``positions``,
    under the autocast state ``pin``; returns its tensor outputs, then the new values of
    the tensors it writes (``written``, own positions), which it wrote into clones: the
    run's tensors are SSA values other steps of the plan may still read. An output that is
    one of those clones (an in-place op returns its argument) is not repeated. ``trial``:
    check each run's outputs against ``traced`` (metadata learned by a trial run).
    ``storage`` (``_STORAGE_READERS``): "computed" when the first argument is a tensor the
    program computed and no view, whose eager storage is its own, dense, at offset 0 (the
    run's tensor may be an XLA buffer shared with an input: copied); "input" when it is a
    program input, traced as dense at offset 0: a caller's tensor that is not raises
    NotImplementedError (eager reads the caller's storage around it)."""
    # positions holding one proxy (``op_(x, x, x)``) share one copy: eager passes one
    # tensor, and reads every argument through it
    group = {j: [k for k, i in enumerate(positions) if leaves[i] is leaves[positions[j]]]
             for j in written}

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        vals = list(leaves)
        for i, t in zip(positions, tensors):
            vals[i] = t
        if storage is not None:
            t = vals[positions[0]]
            if storage == "computed":  # (its own storage: never an input's buffer)
                vals[positions[0]] = t.clone(memory_format=torch.contiguous_format)
            elif t.storage_offset() != 0 or not t.is_contiguous():
                if storage == "input":
                    raise NotImplementedError(
                        f"{name} of an input that is a view with a storage offset or "
                        "strides of its own: eager reads the caller's storage around the "
                        "view, which the compiled program does not. Pass a contiguous "
                        "tensor (x.clone()), or call as_strided outside the compiled "
                        "function.")
        clones = []
        for j in written:
            c = vals[positions[j]]
            if c is tensors[j]:  # (not yet copied for another position of its group)
                c = tensors[j].clone()
                for k in group[j]:
                    vals[positions[k]] = c
            clones.append(c)
        a, k = optree.tree_unflatten(spec, vals)
        out = autocast.run_pinned(pin, func, a, k)
        flat = optree.tree_leaves(out, none_is_leaf=True)
        outs = [_materialized(x) for x in flat if isinstance(x, torch.Tensor)
                and not any(x is c for c in clones)]
        if trial:
            _check_trial_metadata(name, outs, traced)
        return outs + clones
    return run


def _materialized(t: torch.Tensor) -> torch.Tensor:
    """``t``, or zeros of its metadata where it is one of ATen's ZeroTensors
    (``aten._efficientzerotensor``, a product with one): a tensor with no memory (its data
    pointer is null), which DLPack would hand XLA as a buffer to read (a segmentation
    fault). Eager reads a ZeroTensor as zeros; writes into one are refused while tracing
    (frontend/zero_tensors.py)."""
    if not t._is_zerotensor():
        return t
    with torch._C.DisableTorchFunction():
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)


# ------------------------------------------------------- calls the IR alone determines
# A fallback call of a public torch function whose non-tensor arguments are plain values
# carries them in the op, as the argument list of a Python call with the tensors named by
# operand (``thunder.torch_call = "(t0, 1, dtype=torch.float64)"``: operand 0, then 1 and
# a dtype), and ``impl`` is the function's qualified name (``@torch.cumprod``): any
# process (thunder-opt) rebuilds the call from the IR. ``thunder.trial_metadata`` (unit):
# the output metadata came from a trial run, so every run checks it.
# ``thunder.rng_state`` (unit, set by grad): the call also returns the state of the
# generators it draws from.
CALL_ATTR = "thunder.torch_call"
# ``thunder.writes = array<i64: k, ...>``: the call writes its operands k, ...; their new
# values are its last results, in that order (frontend/functionalization.py)
WRITES_ATTR = "thunder.writes"
TRIAL_ATTR = "thunder.trial_metadata"
# ``thunder.storage = "input" | "computed"``: a ``_STORAGE_READERS`` call whose first
# argument is a program input, or a tensor the program computed that is no view (a folded
# copy may hand the call the input's buffer): ``_make_run``'s ``storage``
STORAGE_ATTR = "thunder.storage"
RNG_STATE_ATTR = "thunder.rng_state"
_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device)


class _Operand:
    """The tensor argument that is operand ``k`` of the executor call (``t<k>``)."""

    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k


def resolve_qualified(name: str) -> Callable | None:
    """The public torch callable a ``qualified_name`` names (``torch.cumprod``,
    ``torch.Tensor.add_``, ``torch.nn.functional.pad``), or None."""
    parts = name.split(".")
    if parts[0] != "torch":
        return None
    obj: Any = torch
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def _encode_value(x, operand_of: dict[int, int], counter: list[int]) -> str | None:
    if type(x) is TensorProxy:
        k = operand_of[counter[0]]
        counter[0] += 1
        return f"t{k}"
    if type(x) in (tuple, list):
        items = [_encode_value(v, operand_of, counter) for v in x]
        if any(i is None for i in items):
            return None
        if type(x) is tuple:
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if type(x) not in _PLAIN:
        return None
    if type(x) is float and (x != x or x in (float("inf"), float("-inf"))):
        return f"float('{x}')"
    if type(x) is torch.device:
        return f"torch.device('{x}')"
    return repr(x)  # (torch.float32's repr is its name)


def _encode_call(func, name, args, kwargs, leaves, positions, in_order, out_order,
                 pin) -> str | None:
    """``thunder.torch_call``'s text for ``func(*args, **kwargs)``, or None where the call
    cannot be rebuilt from it: a function ``name`` does not resolve to, arguments that are not
    plain values, results whose stored order differs from theirs, an autocast region."""
    if resolve_qualified(name) is not func or pin is not None and pin[1] \
            or out_order != sorted(out_order):
        return None
    operand_of = {j: k for k, j in enumerate(in_order)}  # j-th tensor leaf -> operand k
    counter = [0]
    items = [_encode_value(a, operand_of, counter) for a in args]
    for key in sorted(kwargs):  # (optree's order of dict leaves)
        v = _encode_value(kwargs[key], operand_of, counter)
        items.append(None if v is None or not key.isidentifier() else f"{key}={v}")
    if any(i is None for i in items):
        return None
    text = "(" + ", ".join(items) + ")"
    try:  # the text must give back the same call
        d_args, d_kwargs = _decode_call(text)
        d_leaves, d_spec = optree.tree_flatten((d_args, d_kwargs), none_is_leaf=True)
    except ValueError:
        return None
    if d_spec != optree.tree_structure((args, kwargs), none_is_leaf=True):
        return None
    for i, (a, b) in enumerate(zip(leaves, d_leaves)):
        if (type(b) is _Operand) != (i in positions) or \
                type(b) is not _Operand and (type(a) is not type(b) or a != b):
            return None
    return text


def _decode_value(node):
    import ast

    if isinstance(node, ast.Constant) and type(node.value) in _PLAIN:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) in (int, float):
        return -node.operand.value
    if isinstance(node, ast.Tuple):
        return tuple(_decode_value(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_decode_value(e) for e in node.elts]
    if isinstance(node, ast.Name) and node.id[:1] == "t" and node.id[1:].isdigit():
        return _Operand(int(node.id[1:]))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "torch" and isinstance(getattr(torch, node.attr, None),
                                                        torch.dtype):
        return getattr(torch, node.attr)
    if isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1 \
            and isinstance(node.args[0], ast.Constant) and type(node.args[0].value) is str:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "float":
            return float(node.args[0].value)
        if isinstance(f, ast.Attribute) and f.attr == "device" \
                and isinstance(f.value, ast.Name) and f.value.id == "torch":
            return torch.device(node.args[0].value)
    raise ValueError(f"not a plain value: {ast.unparse(node)}")


def _decode_call(text: str) -> tuple[tuple, dict]:
    """The arguments of a ``thunder.torch_call`` text, tensors as ``_Operand``s. Raises
    ValueError on anything but plain values (the text is parsed, never evaluated)."""
    import ast

    try:
        call = ast.parse("f" + text, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"cannot parse {text!r}: {e}") from None
    if not isinstance(call, ast.Call) or any(k.arg is None for k in call.keywords) \
            or any(isinstance(a, ast.Starred) for a in call.args):
        raise ValueError(f"not an argument list: {text!r}")
    return (tuple(_decode_value(a) for a in call.args),
            {k.arg: _decode_value(k.value) for k in call.keywords})


def _op_device(op) -> torch.device:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    if parent is not None and "thunder.device" in parent.attributes:
        return torch.device(ir.StringAttr(parent.attributes["thunder.device"]).value)
    return torch.device("cpu")


def _rebuild(op) -> Callable:
    name = ir.FlatSymbolRefAttr(op.attributes["impl"]).value
    text = ir.StringAttr(op.attributes[CALL_ATTR]).value
    func = resolve_qualified(name)
    if func is None:
        from thunder_mlir.errors import MissingImplementationError

        error = MissingImplementationError(f"the implementation @{name} of the call "
                                           f"{text} is not a public torch function")
        error.location = op.location
        raise error
    try:
        args, kwargs = _decode_call(text)
    except ValueError as e:
        raise ValueError(f"{name}: bad {CALL_ATTR} attribute at {op.location}: {e}") from None
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    positions = [i for i, leaf in enumerate(leaves) if type(leaf) is _Operand]
    in_order = [0] * len(positions)
    for j, i in enumerate(positions):
        in_order[leaves[i].k] = j
    device = _op_device(op)
    if WRITES_ATTR in op.attributes:
        written = [in_order[k] for k in ir.DenseI64ArrayAttr(op.attributes[WRITES_ATTR])]
    else:
        written = [0] if _is_inplace(func, args, tensor=_Operand) else []
    pin = (device.type, False, torch.get_autocast_dtype(device.type)) \
        if torch.amp.is_autocast_available(device.type) else None
    n_out = len(op.results) - (1 if RNG_STATE_ATTR in op.attributes else 0)
    traced = [(tuple(ir.RankedTensorType(r.type).shape), dtypes.torch_dtype(r.type))
              for r in list(op.results)[:n_out]]
    storage = ir.StringAttr(op.attributes[STORAGE_ATTR]).value \
        if STORAGE_ATTR in op.attributes else None
    run = _make_run(name, func, leaves, positions, spec, pin, written,
                    TRIAL_ATTR in op.attributes, traced[:n_out - len(written)], storage)
    impl = permuted(run, in_order, list(range(n_out)))
    if not written:
        impl.generators = _generators(leaves, device)
    if RNG_STATE_ATTR in op.attributes:
        return with_rng_state(impl, impl.generators)
    return impl


def implementation_of(op) -> Callable:
    """The Python callable a ``thunder.executor_call`` runs (tensors in operand order ->
    list of result tensors): rebuilt from its ``thunder.torch_call`` attribute where it has
    one, else the registry's ``impl`` (ir/implementations.py). Raises
    MissingImplementationError where this process holds no such symbol."""
    op = op.operation if hasattr(op, "operation") else op
    if CALL_ATTR in op.attributes:
        return _rebuild(op)
    return implementations.lookup_attr(op.attributes["impl"], op.location)


# Attribute of a torch executor call: one bool per result, whether torch.autograd makes it
# differentiable (linalg.lu's permutation P is a float tensor that is not). The grad pass
# gives the others no cotangent, and jit marks them non-differentiable (requires_grad False,
# as in eager).
DIFFERENTIABLE = "thunder.differentiable"


# Attribute of a torch executor call: one bool per operand, whether eager's autograd graph
# of the call's outputs reaches it (``x.logical_and_(y)`` of tensors that require grad
# records no edge to ``y``: eager leaves ``y.grad`` None, where a zero gradient from
# torch.autograd.grad's ``allow_unused`` would give it one). The grad pass gives the others
# no cotangent.
CONNECTED = "thunder.connected"


def _reached_leaves(outs: list) -> set[int]:
    """ids of the leaf tensors the autograd graph of ``outs`` reaches (``grad_fn`` edges
    down to ``AccumulateGrad`` nodes): what eager's backward of ``outs`` gives a .grad."""
    # ``seen`` holds the nodes themselves, not their ids: a node's Python object can be
    # freed once nothing refers to it, and another node's then reuse its id (torch 2.11
    # does; the traversal stopped early and missed leaves: docs/compat.md)
    found, seen = set(), set()
    stack = [o.grad_fn for o in outs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            found.add(id(node.variable))
        stack.extend(n for n, _ in node.next_functions)
    return found


def _autograd_structure(func: Callable, leaves: list, positions: list[int], spec, device,
                        meta: bool, written: list[int]) -> tuple[list[bool], list[bool]] | None:
    """Eager's autograd structure of one call, from a run on meta tensors (or, for an op
    without meta kernels, on zeros, under ``fork_rng``) whose floating-point arguments
    require grad (each a non-leaf, so an in-place op may write it):

    - per tensor output, whether torch.autograd makes it differentiable (``requires_grad``);
    - per tensor argument (``positions``), whether the graph of the outputs and of the
      written arguments (``written``, indices into ``positions``) reaches it.

    An op refusing grad for some input (batch_norm's running statistics) is probed with
    one floating-point input requiring grad at a time. None when no probe runs (the
    caller keeps the dtype rule: floating-point outputs are differentiable, every
    floating-point argument is reached)."""
    floats = [i for i in positions
              if leaves[i].tdtype.is_floating_point or leaves[i].tdtype.is_complex]
    if not floats:
        return None

    def probe(wrt: list[int]):
        try:
            with torch._C.DisableTorchFunction(), torch.enable_grad(), \
                    torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                vals, roots = list(leaves), {}
                for i in positions:
                    p = leaves[i]
                    root = torch.zeros(p.tshape, dtype=p.tdtype,
                                       device="meta" if meta else device)
                    if i in wrt:
                        roots[i] = root.requires_grad_()
                        root = root.clone()
                    vals[i] = root
                a, k = optree.tree_unflatten(spec, vals)
                if meta:
                    with torch.device("meta"):
                        out = func(*a, **k)
                else:
                    out = func(*a, **k)
        except Exception:  # noqa: BLE001 - another probe, or the dtype rule
            return None
        outs = [x for x in optree.tree_leaves(out, none_is_leaf=True)
                if isinstance(x, torch.Tensor)]
        reached = _reached_leaves([x for x in outs + [vals[positions[j]] for j in written]
                                   if x.requires_grad])
        return ([x.requires_grad for x in outs],
                [i in roots and id(roots[i]) in reached for i in positions])

    found = probe(floats)
    if found is not None:
        return found
    for i in floats:
        one = probe([i])
        if one is not None:
            found = one if found is None else (
                [a or b for a, b in zip(found[0], one[0])],
                [a or b for a, b in zip(found[1], one[1])])
    return found


def _ctc_loss_metadata(log_probs, targets, input_lengths, target_lengths, blank=0,
                       reduction="mean", zero_infinity=False):
    """``F.ctc_loss``: one loss per sequence (reduction "none" of a batch), else a scalar,
    in ``log_probs``' dtype (torch.nn.CTCLoss documentation). Its lengths as tensors that
    must sum to a 1-d ``targets``' size defeat the trial run on zeros."""
    batched = log_probs.dim() == 3
    shape = (log_probs.shape[1],) if reduction == "none" and batched else ()
    return torch.empty(shape, dtype=log_probs.dtype, device="meta")


# Ops with no meta kernel whose output metadata the documentation gives (on meta tensors;
# checked against every real run, like the trial run's).
_DOCUMENTED_METADATA: dict[Callable, Callable] = {
    torch.nn.functional.ctc_loss: _ctc_loss_metadata,
}


# Ops whose meta kernel gives other output shapes than the real kernel: their metadata comes
# from a trial run on zeros (on the program's device) and every real run is checked against
# it. The batch norms that skip the batch statistics (eval mode: training=False, or the
# no-training variants): the meta kernels return save_mean and save_invstd of shape (C,),
# the CPU kernels empty ones of shape (0,) (torch 2.13), so the traced shape reached a
# compiled region that read them (issue 28: RuntimeProgramInputMismatch in the backward).
# (_batch_norm_impl_index differs too, but returns an int a trial run cannot give: it
# keeps its meta metadata.)
_META_DIFFERS_NAMES = ("native_batch_norm", "_native_batch_norm_legit",
                       "_native_batch_norm_legit_no_training", "_batch_norm_no_update")


def _meta_differs() -> frozenset:
    out = set()
    for name in _META_DIFFERS_NAMES:
        if hasattr(torch, name):
            out.add(getattr(torch, name))
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None:
            out.add(packet)
            out.update(getattr(packet, o) for o in packet.overloads())
    return frozenset(out)


_META_DIFFERS = _meta_differs()


def _documented_metadata(func: Callable, m_args, m_kwargs):
    rule = _DOCUMENTED_METADATA.get(func)
    if rule is None:
        return None
    try:
        return rule(*m_args, **m_kwargs)
    except Exception:  # noqa: BLE001 - arguments the rule does not know: trial run instead
        return None


def _trial_run(func: Callable, leaves: list, positions: list[int], spec, device):
    """Output metadata of an op with no meta kernel (geqrf, lstsq, histogram, istft, ...):
    the op run once on zero-filled (then one-filled) tensors of the inputs' shapes and dtypes,
    under ``fork_rng`` so that torch's generator is untouched. Returns meta tensors shaped
    like the outputs, or None when neither run works or the result holds anything but
    tensors (a Python value computed from zeros would be a wrong constant). An output shape
    that depends on the values (nonzero) is caught at run time by ``_check_trial_metadata``.
    """
    for fill in (0, 1):
        vals = list(leaves)
        for i in positions:
            p = leaves[i]
            vals[i] = torch.full(p.tshape, fill, dtype=p.tdtype, device=device)
        a, k = optree.tree_unflatten(spec, vals)
        try:
            with torch._C.DisableTorchFunction(), torch.no_grad(), torch.random.fork_rng(
                    devices=[device] if device.type == "cuda" else []):
                out = func(*a, **k)
        except Exception:  # noqa: BLE001 - the caller reports the meta failure
            continue
        flat, out_spec = optree.tree_flatten(out, none_is_leaf=True)
        if not all(x is None or isinstance(x, torch.Tensor) for x in flat):
            return None
        return optree.tree_unflatten(out_spec, [
            x if x is None else torch.empty(x.shape, dtype=x.dtype, device="meta")
            for x in flat])
    return None


def _check_trial_metadata(name: str, outs: list[torch.Tensor], traced: list) -> None:
    """Raise RuntimeError if a trial-run op's real outputs differ from its traced metadata
    (its output shape depends on the input values, which a compiled program cannot
    follow)."""
    got = [(tuple(t.shape), t.dtype) for t in outs]
    if got != traced:
        raise RuntimeError(
            f"{name}: its outputs {got} differ from the metadata it was traced with "
            f"{traced} (learned by a trial run on zeros, as the op has no meta kernel): its "
            "output shape depends on the input values, which a compiled program cannot "
            "follow. Compute it outside the jitted function.")


# ------------------------------------------------------------ random ops and the backward
# The backward of a fallback op re-runs it under torch.autograd. An op that draws random
# numbers (fractional_max_pool2d's pooling regions, a dropout inside a torch function, a
# draw from a user's Generator) would draw again there: another draw than the forward's,
# so a wrong gradient, and the generator advanced twice. The grad pass therefore makes the
# forward call also return the state of the generators it may draw from, taken just
# before it runs (``with_rng_state``), saves it as a residual, and the backward re-runs
# the op with that state restored (``replaying_rng_state``), leaving the generators as
# they were.


def _generators(leaves: list, device) -> list[torch.Generator]:
    """The generators a call may draw from: the ``torch.Generator`` arguments it was given,
    else the default generators of the CPU and, for a CUDA program, of its device."""
    given = []
    for x in leaves:
        if isinstance(x, torch.Generator) and all(x is not g for g in given):
            given.append(x)
    if given:
        return given
    gens = [torch.default_generator]
    if device.type == "cuda" and torch.cuda.is_available():  # (traced for a CUDA device
        # on a machine without one, autocast's trace-level checks: the program never runs)
        gens.append(torch.cuda.default_generators[
            device.index if device.index is not None else torch.cuda.current_device()])
    return gens


def rng_state_size(generators: list[torch.Generator]) -> int:
    """Bytes of the concatenated states of ``generators`` (a uint8 vector)."""
    return sum(g.get_state().numel() for g in generators)


def with_rng_state(run: Callable, generators: list[torch.Generator]) -> Callable:
    """``run`` that also returns, last, the concatenated states (uint8) of ``generators``
    as they were before it ran."""
    def forward(*tensors: torch.Tensor) -> list[torch.Tensor]:
        state = torch.cat([g.get_state() for g in generators])
        return list(run(*tensors)) + [state]
    return forward


def replaying_rng_state(generators: list[torch.Generator], state: torch.Tensor, fn: Callable):
    """``fn()`` with ``generators`` set to ``state`` (from ``with_rng_state``), restoring
    their current states afterwards."""
    saved = [g.get_state() for g in generators]
    try:
        offset = 0
        for g, old in zip(generators, saved):
            n = old.numel()
            g.set_state(state[offset:offset + n].cpu().clone())
            offset += n
        return fn()
    finally:
        for g, old in zip(generators, saved):
            g.set_state(old)


# ------------------------------------------------------------------- type runs
def type_order(types: list) -> list[int]:
    """Positions of ``types`` reordered so that equal types are adjacent (types in order of
    first appearance, positions stable within a type): an executor call's operands and
    results are stored as runs of equal type, at most ``SEGMENTS`` of them, so an op with
    few distinct types fits however its arguments interleave them (``torch.lstm``'s
    weights and biases, attention's projections)."""
    first: dict[str, int] = {}
    for i, t in enumerate(types):
        first.setdefault(str(t), i)
    return sorted(range(len(types)), key=lambda i: first[str(types[i])])


def permuted(fn: Callable, in_order: list[int], out_order: list[int]) -> Callable:
    """``fn`` (inputs and outputs in their own order) as an implementation taking its
    inputs in ``in_order`` and returning its outputs in ``out_order`` (see
    ``type_order``)."""
    if in_order == sorted(in_order) and out_order == sorted(out_order):
        return fn

    def run(*tensors):
        args = [None] * len(in_order)
        for k, i in enumerate(in_order):
            args[i] = tensors[k]
        outs = fn(*args)
        return [outs[i] for i in out_order]
    return run


def unpermute(values: list, order: list[int]) -> list:
    """Values stored in ``order`` back in their own order."""
    out = [None] * len(order)
    for k, i in enumerate(order):
        out[i] = values[k]
    return out
