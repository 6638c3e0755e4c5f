"""Unbacked size symbols: data-dependent output sizes traced once, as torch.compile does.

A data-dependent op whose output sizes torch's own fake kernels express as unbacked symbols
(``torch._subclasses.fake_impls``: nonzero, masked_select, unique, bincount,
repeat_interleave, ...) is traced once, with a size symbol per unbacked size
(ir/symbolic.py ``ShapeEnv.new_unbacked``; its hint is the size at the traced call). The op
runs on the torch fallback; the XLA regions after it take the size from their arguments and
are compiled per concrete size at run time (runtime/refine.py). Each run checks the sizes
the op produced against the symbols (at least 0, and every guard the trace recorded on
them) before any later step runs. A failed check is a failed value guard: another cache
entry runs, or one is traced with that value (frontend/value_guards.py).

A symbol stands for every size >= 0, 0 and 1 included, as torch.compile's unbacked sizes
do (a mixture of experts' per-expert token count at a one-token decode step is 0 or 1):
the trace's reasoning takes it as at least 0 (ir/symbolic.py ``ShapeEnv.new_unbacked``),
so a decision that depends on its being 0, 1 or more is answered from the hint and
recorded as a guard, never assumed. torch's fake kernels run with
``ShapeEnv(specialize_zero_one=False)`` for operands of such sizes.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any, Callable

import optree
import torch

from thunder_mlir.errors import RecompileWarning
from thunder_mlir.frontend.locations import user_stacklevel
from thunder_mlir.ir import symbolic

DISTINCT_SIZES_LIMIT = 8  # (the function's recompile limit, when the trace knows it)
GUESSED_SIZE = 64  # the hint of an unbacked size with no upper bound (``guess``)


def warn_past_limit(seen: set, key, limit: int, message: Callable[[int], str]) -> None:
    """Adds ``key`` (the sizes one run produced) to ``seen``, the distinct sizes of one op
    so far; the first time they number ``limit + 1``, a ``RecompileWarning`` with
    ``message(count)`` at the user's line (each new size compiles the XLA regions after the
    op once, runtime/refine.py)."""
    if key in seen:
        return
    seen.add(key)
    if len(seen) == limit + 1:
        warnings.warn(message(len(seen)), RecompileWarning, stacklevel=user_stacklevel())


def symbolic_shapes(trace, name: str, func: Callable, leaves: list, positions: list[int],
                    spec, out_spec, metas, site: str) -> tuple | None:
    """(symbolic shape per output leaf or None, the new unbacked symbol numbers) for this
    call of the data-dependent op ``func`` (called as ``func(*args, **kwargs)`` with
    ``optree.tree_unflatten(spec, leaves)``; ``positions`` index the tensor leaves), or
    None where its sizes stay specialized on values:

    * no fake kernel, or one that needs the values;
    * a kernel that decides on an operand's symbolic size (torch recorded a guard);
    * a size expression that is not one symbol.

    ``out_spec`` and ``metas`` are the op's output tree structure and (shape, dtype) per
    leaf at the traced call (None for a non-tensor leaf). The output shapes come from
    torch's fake kernel run on operands of the traced sizes. An operand's symbolic sizes
    (an earlier data-dependent op's, a dynamic input's) are torch symbols there, mapped back
    to ours. ``site`` (the user's line) names each new symbol's origin in guards and errors.
    Appends the new symbols' numbers to ``trace.unbacked_groups``."""
    run = _fake_run(func, leaves, positions, spec)
    if run is None:
        return None
    out, known, _ = run
    flat, fake_spec = optree.tree_flatten(out, none_is_leaf=True)
    if fake_spec != out_spec or len(flat) != len(metas):
        return None
    torch_symbols: dict = {}  # torch's unbacked symbol -> its size at the traced call
    for x, m in zip(flat, metas):
        if (x is None) != (m is None):
            return None
        if x is None:
            continue
        if not isinstance(x, torch.Tensor) or x.dtype != m[1] or x.ndim != len(m[0]):
            return None
        for d, n in zip(x.shape, m[0]):
            if isinstance(d, torch.SymInt):
                expr = d.node.expr
                if expr in known:
                    if symbolic.hints([known[expr]])[0] != n:
                        return None
                elif not expr.is_Symbol or torch_symbols.setdefault(expr, n) != n or n < 0:
                    return None
            elif d != n:
                return None
    if not torch_symbols:
        return None
    env = trace.shape_env
    ours = {u: env.new_unbacked(n, f"the output size of {name} at {site}")
            for u, n in torch_symbols.items()}
    numbers = [symbolic.symbol_number(ours[u].expr) for u in torch_symbols]
    ours.update(known)
    shapes = [None if x is None else tuple(ours[d.node.expr] if isinstance(d, torch.SymInt)
                                           else int(d) for d in x.shape) for x in flat]
    trace.unbacked_groups.append(numbers)
    return shapes, numbers


def _fake_run(func: Callable, leaves: list, positions: list[int], spec):
    """(output, {torch symbol of an operand's size: our size}, torch's ShapeEnv) of
    torch's fake kernel of ``func`` run on operands of the traced sizes, or None: no fake
    kernel, one that needs the values, or one that decided on an operand's symbolic size
    (torch recorded a guard: the output would not hold for every size)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as TorchShapeEnv

    known: dict = {}  # torch's symbol of an operand's symbolic size -> our size
    try:
        # (an operand's symbolic size may be 0 or 1 at the traced call: not specialized,
        # and torch's reasoning takes its symbols as >= 0, as ours does)
        torch_env = TorchShapeEnv(duck_shape=False, specialize_zero_one=False)
        mode = FakeTensorMode(shape_env=torch_env)
        vals = list(leaves)
        with torch._C.DisableTorchFunction():
            for i in positions:
                p = leaves[i]
                dynamic = symbolic.is_symbolic(p.tshape)
                meta = torch.empty(symbolic.hints(p.tshape), dtype=p.tdtype, device="meta")
                vals[i] = mode.from_tensor(meta, static_shapes=not dynamic)
                for ours, d in zip(p.tshape, vals[i].shape) if dynamic else ():
                    if isinstance(d, torch.SymInt):
                        if not d.node.expr.is_Symbol or \
                                known.setdefault(d.node.expr, ours) is not ours:
                            return None
                    elif type(ours) is not int or d != ours:
                        return None
            a, kw = optree.tree_unflatten(spec, vals)
            with mode:
                out = func(*a, **kw)
    except Exception:  # noqa: BLE001 - no fake kernel, or one that needs the values
        return None
    if torch_env.guards:
        return None
    return out, known, torch_env


def guess(func: Callable, leaves: list, positions: list[int], spec):
    """The value guards' value of a data-dependent op's output metadata ((output tree
    structure, ((shape, dtype) or None per leaf)), as ``value_guards.output_metadata``
    computes from real tensors), guessed without running the program: each unbacked size
    takes the largest operand's number of elements (the bound of nonzero, masked_select
    and unique; an arbitrary hint for bincount and repeat_interleave), or GUESSED_SIZE
    where that is below 2. None where the op's sizes cannot be symbols (as
    ``symbolic_shapes``).

    torch traces unbacked sizes with no value at all; the trace here needs a hint per
    symbol (meta tensors), so it takes one. A size the trace then reads as a Python int, or
    a branch on it, records a guard on the symbol that the first run checks against the
    real size: where it fails, the program is traced again with the real value (a value
    guard), never run with the guessed one."""
    run = _fake_run(func, leaves, positions, spec)
    if run is None:
        return None
    out, known, _ = run
    # (torch's own bounds are no help: nonzero's is 2**63 - 2, bincount's infinite)
    numel = max((math.prod(symbolic.hints(leaves[i].tshape)) for i in positions), default=0)
    flat, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    metas = []
    for x in flat:
        if x is None:
            metas.append(None)
            continue
        if not isinstance(x, torch.Tensor):
            return None
        shape = []
        for d in x.shape:
            if not isinstance(d, torch.SymInt):
                shape.append(int(d))
                continue
            expr = d.node.expr
            if expr in known:
                shape.append(symbolic.hints([known[expr]])[0])
                continue
            if not expr.is_Symbol:
                return None
            shape.append(numel if numel >= 2 else GUESSED_SIZE)
        metas.append((tuple(shape), x.dtype))
    return out_spec, tuple(metas)


def metadata(trace, k: int, name: str, out_spec, metas, shapes: list, numbers: list[int],
             site: str, fail: Callable[[list], Any]) -> tuple[Any, Callable]:
    """Value guards' ``output_metadata`` of a data-dependent op traced with unbacked sizes
    (``symbolic_shapes`` gave ``shapes`` and ``numbers``): meta outputs of the traced sizes,
    and ``guarded(run)``, a wrapper of the op's runtime callable. ``guarded.shapes`` maps
    each tensor leaf index to its symbolic shape.

    The runtime check accepts any sizes the symbols stand for (``accept``, also the value
    guard's test of other entries: ``trace.value_accepts[k]``). It warns once
    (``RecompileWarning``, at the user's line) when the number of distinct sizes passes
    the recompile limit, and calls ``fail(outs)`` otherwise, which raises the failed value
    guard of query ``k``."""
    env = trace.shape_env
    slots = {sym: j for j, sym in enumerate(numbers)}
    # per tensor output: (dtype, per dim: ("int", n) or ("sym", j) or ("operand", None))
    layout = []
    for m, shape in zip(metas, shapes):
        if m is None:
            continue
        dims = []
        for d in shape:
            number = None if type(d) is int else symbolic.symbol_number(d.expr)
            dims.append(("int", d) if type(d) is int else
                        ("sym", slots[number]) if number in slots else ("operand", None))
        layout.append((m[1], tuple(dims)))
    check = []  # env.unbacked_check(numbers), built at first use (the guards are final)

    def sizes_of(observed_shapes, dtypes) -> list[int] | None:
        if len(observed_shapes) != len(layout):
            return None
        sizes: list = [None] * len(numbers)
        for (dtype, dims), shape, dt in zip(layout, observed_shapes, dtypes):
            if dt != dtype or len(shape) != len(dims):
                return None
            for (kind, v), n in zip(dims, shape):
                if kind == "operand":  # an operand's size: checked where it was made
                    continue
                if kind == "int":
                    if n != v:
                        return None
                elif sizes[v] is None:
                    sizes[v] = n
                elif sizes[v] != n:
                    return None
        if not check:
            check.append(env.unbacked_check(numbers))
        return sizes if check[0](sizes) else None

    def accept(observed) -> bool:
        if observed is None:
            return False
        spec2, metas2 = observed
        if spec2 != out_spec or len(metas2) != len(metas) or \
                any((a is None) != (b is None) for a, b in zip(metas, metas2)):
            return False
        real = [m for m in metas2 if m is not None]
        return sizes_of([m[0] for m in real], [m[1] for m in real]) is not None

    trace.value_accepts[k] = accept
    limit = getattr(trace, "recompile_limit", DISTINCT_SIZES_LIMIT)

    def guarded(run: Callable) -> Callable:
        seen: set = set()

        def checked(*tensors: torch.Tensor) -> list[torch.Tensor]:
            outs = run(*tensors)
            sizes = sizes_of([o.shape for o in outs], [o.dtype for o in outs])
            if sizes is None:
                fail(outs)
            record_run_sizes(numbers, sizes)
            warn_past_limit(seen, tuple(sizes), limit, lambda n: (
                f"{site}: the output size of {name} depends on the input values and has "
                f"taken {n} distinct values (recompile limit {limit}); the size is a symbol, "
                "so the program is not re-traced, but each new size compiles the XLA "
                "regions after the op once"))
            return outs
        return checked

    guarded.shapes = {i: shape for i, shape in enumerate(shapes) if shape is not None}
    meta = optree.tree_unflatten(out_spec, [
        None if m is None else torch.empty(m[0], dtype=m[1], device="meta") for m in metas])
    return meta, guarded


# ------------------------------------------------------- sizes that reach Python outputs
# The sizes the unbacked symbols took in this thread's latest run (symbol number -> size),
# written by each data-dependent op's run-time check (``metadata``'s ``checked``) and read
# when the call's outputs are rebuilt (``concrete``), in the same call.
_run_sizes = threading.local()


def record_run_sizes(numbers, sizes) -> None:
    """Note that unbacked symbols s<numbers[j]> took ``sizes[j]`` in the running call."""
    values = getattr(_run_sizes, "values", None)
    if values is None:
        values = _run_sizes.values = {}
    values.update(zip(numbers, sizes))


def run_size(number: int) -> int:
    """The size unbacked symbol s<number> took in this thread's running call
    (``record_run_sizes``). Raises RuntimeError where it has none (an internal error: the
    op that records it runs first, ``value_guards.slice_by_value``)."""
    values = getattr(_run_sizes, "values", None) or {}
    if number not in values:
        raise RuntimeError(f"internal: s{number} has no value at this call")
    return values[number]


def concrete(value, input_sizes: list[int]):
    """``value``, a Python output of a traced program (an int, a SymInt, a SymShape, or
    tuples, lists and dicts of them), with every size symbol replaced by its value in the
    running call: eager returns ints (``u.numel()``) and ``torch.Size`` (``u.shape``), which
    a symbol in the output would not be. ``input_sizes[k]``: the size input symbol s<k>
    reads at this call (``CacheEntry.sym_sources``); the unbacked symbols' sizes are the
    ones this thread's run recorded (``record_run_sizes``). Raises RuntimeError where a
    symbol has no value (an internal error: a silent hint would be a wrong result)."""
    if type(value) is symbolic.SymInt:
        values = getattr(_run_sizes, "values", None) or {}
        mapping = {}
        for sym in value.expr.free_symbols:
            k = symbolic.symbol_number(sym)
            n = input_sizes[k] if k is not None and k < len(input_sizes) else values.get(k)
            if n is None:
                raise RuntimeError(f"internal: the size {value} is an output of the program, "
                                   f"and {sym} has no value at this call")
            mapping[sym] = n
        return int(value.expr.xreplace(mapping))
    if isinstance(value, symbolic.SymShape):
        return torch.Size([concrete(v, input_sizes) for v in value])
    if isinstance(value, (tuple, list)) and symbolic.has_symint(value):
        items = [concrete(v, input_sizes) for v in value]
        return type(value)(items) if type(value) in (tuple, list) else \
            type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict) and symbolic.has_symint(value):
        return {k: concrete(v, input_sizes) for k, v in value.items()}
    return value
