"""``execution-transform``: user executors claim ops (``thunder_mlir.extend``).

Runs after ``grad`` and before ``decompose`` on each plan function (``@computation``, or
``@forward`` and ``@backward``). Each top-level op is offered to the user executors of the
compilation in priority order:

* a ``thunder.composite`` of symbol ``S`` (or an elementwise prim ``thunder.P`` whose
  symbol ``ltorch.P`` has an implementation — the ops the grad pass emits): the first
  executor with an implementation of ``S`` whose checker accepts the call's arguments
  replaces the op by its ``execution_transform``, traced at that point with proxies for
  the op's operands. The emitted ops are offered again (never to the implementation that
  emitted them); those nobody claims stay for XLA.
* a composite of an executor's own operator becomes a ``thunder.executor_call``
  {executor, callee = operator name, impl = side-table index of a runner of ``fn``}.

The ops inside a ``thunder.checkpoint`` are offered like top-level ops (``decompose``
inlines the checkpoint later). The ops inside ``thunder.cond``/``thunder.while`` regions
are not offered: a control-flow region runs whole on XLA (``stablehlo.if``/``while``), so
an executor call there could not run.

Unclaimed composites go whole to the built-in ``xla`` executor (``decompose``), as
Thunder's fusion executor claims them: executors see the program's calls at the outermost
level, not the insides of other ops' decompositions. A prim whose transform yields other
types than the prim is left alone (the ``ltorch`` symbol and the prim differ there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch_mlir import ir

from thunder_mlir.errors import ExecutorError, PipelineError
from thunder_mlir.executors.extend import CompileState, activated, check, \
    get_all_executors, get_executor, make_runner
from thunder_mlir.ir import implementations
from thunder_mlir.ir.dialect import ExecutorCallOp, segment_kwargs
from thunder_mlir.ir.prim_defs import BINARY_PRIMS, UNARY_PRIMS
from thunder_mlir.transforms.registry import ModulePass, PassContext, did_you_mean, \
    register_pass

NAME = "execution-transform"
PLAN_FUNCTIONS = ("computation", "forward", "backward")
_PRIMS = {f"thunder.{p}": p for p in UNARY_PRIMS + BINARY_PRIMS}


@register_pass
@dataclass(frozen=True)
class ExecutionTransform(ModulePass):
    """``execution-transform{executors=a,b}``: the user executors named (priority order)
    claim ops (module docstring). Under ``jit`` the names refer to the executors passed to
    ``jit`` (``PassContext.compile_state``, which also holds the calls recorded at trace
    time); otherwise to executors registered with ``thunder_mlir.extend.register_executor``.
    Without recorded calls (thunder-opt on a printed module) only elementwise prims can be
    claimed, as composites' Python arguments are not in the IR. Raises PipelineError for
    an executor name that resolves to nothing."""

    name: ClassVar[str] = NAME
    summary: ClassVar[str] = "user executors claim ops (thunder_mlir.extend)"
    executors: tuple[str, ...] = ()

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        state = ctx.compile_state
        available = list(state.executors) if state is not None else []
        chosen = []
        for name in self.executors:
            found = [e for e in available if e.name == name]
            if not found and get_executor(name) is not None:
                found = [get_executor(name)]
            if not found:
                known = [e.name for e in available] + [e.name for e in get_all_executors()]
                raise PipelineError(f"execution-transform: no executor named '{name}'"
                                    f"{did_you_mean(name, known)} (executors are registered "
                                    "with thunder_mlir.extend.register_executor)")
            chosen += found
        calls = state.calls if state is not None else []
        device = ctx.device if ctx.device is not None else _module_device(module)
        # (the calls of operators the transforms emit are recorded in the same list)
        with activated(CompileState(tuple(chosen), calls)) as active:
            run(module, active, device)


def _module_device(module: ir.Module) -> torch.device:
    with module.context:
        for f in module.body.operations:
            if "thunder.device" in f.operation.attributes:
                return torch.device(ir.StringAttr(f.operation.attributes["thunder.device"]).value)
    return torch.device("cpu")


def run(module: ir.Module, state: CompileState, device: torch.device) -> None:
    """Apply ``state.executors`` to ``module``; the runtime callables of the executor calls
    it emits are registered in ir/implementations.py."""
    from thunder_mlir.frontend.tracing import Trace

    trace = Trace(device, module=module)
    with module.context, ir.Location.unknown(), trace.building():
        for f in [op.operation for op in module.body.operations]:
            if f.name == "func.func" and \
                    ir.StringAttr(f.attributes["sym_name"]).value in PLAN_FUNCTIONS:
                block = f.regions[0].blocks[0]
                _process(trace, state, [o.operation for o in block.operations], frozenset())


def _process(trace, state, ops, excluded: frozenset) -> None:
    for op in ops:
        if op.name == "thunder.checkpoint":
            body = op.regions[0].blocks[0]
            _process(trace, state, [o.operation for o in body.operations], excluded)
        elif op.name == "thunder.composite":
            _claim(trace, state, op, ir.StringAttr(op.attributes["name"]).value, excluded)
        elif op.name in _PRIMS:
            _claim(trace, state, op, f"ltorch.{_PRIMS[op.name]}", excluded, prim=True)


def _claim(trace, state, op, name: str, excluded, prim: bool = False) -> bool:
    for ex in state.executors:
        impl = ex.implementations.get(name)
        if impl is not None and impl.execution_transform is not None \
                and (ex.name, name) not in excluded:
            args = _arguments(trace, state, op, prim)
            if args is not None and check(ex, name, impl, *args):
                if _transform(trace, state, op, ex, name, impl, args, excluded, prim):
                    return True
        if not prim and name in ex.operators:
            rec = state.record(op)
            if rec is not None:
                _to_executor_call(trace, op, ex, ex.operators[name], rec)
                return True
    return False


def _arguments(trace, state, op, prim: bool):
    proxies = [trace.make_proxy(v) for v in op.operands]
    if prim:
        return tuple(proxies), {}
    rec = state.record(op)
    return None if rec is None else rec.rebuild(proxies)


def _transform(trace, state, op, ex, name, impl, args, excluded, prim) -> bool:
    import optree

    from thunder_mlir.ir.proxy import TensorProxy

    holder = ir.Operation.create("thunder_internal.holder", regions=1, ip=False)
    block = holder.regions[0].blocks.append()
    prev_loc = trace.loc
    trace.loc = op.location
    try:
        with trace.insertion_point(ir.InsertionPoint(block)), op.location:
            out = impl.execution_transform(*args[0], **args[1])
    except ExecutorError:
        holder.erase()
        raise
    except Exception as e:
        holder.erase()
        raise ExecutorError(f"executor '{ex.name}': the execution transform of '{name}' "
                            f"raised {type(e).__name__}: {e}") from e
    finally:
        trace.loc = prev_loc
    outs = [v for v in optree.tree_leaves(out, none_is_leaf=True) if type(v) is TensorProxy]
    results = list(op.results)
    if [o.value.type for o in outs] != [r.type for r in results]:
        msg = (f"executor '{ex.name}': the execution transform of '{name}' returned tensors "
               f"of types {[str(o.value.type) for o in outs]}; the op's outputs are "
               f"{[str(r.type) for r in results]}")
        holder.erase()  # (outs' values die with it)
        if prim:
            return False
        raise ExecutorError(msg)
    emitted = [o.operation for o in block.operations]
    for o in emitted:
        o.move_before(op)
    for r, o in zip(results, outs):
        r.replace_all_uses_with(o.value)
    op.erase()
    holder.erase()
    _process(trace, state, emitted, excluded | {(ex.name, name)})
    return True


def _to_executor_call(trace, op, ex, sym, rec) -> None:
    from thunder_mlir.ir import dtypes

    results = list(op.results)
    types = [r.type for r in results]
    expected = [(tuple(ir.RankedTensorType(t).shape),
                 dtypes.torch_dtype(ir.RankedTensorType(t).element_type)) for t in types]
    impl = implementations.register_attr(sym.name,
                                         make_runner(ex.name, sym.name, sym.fn, rec, expected))
    with ir.InsertionPoint(op), op.location:
        call = ExecutorCallOp(**segment_kwargs("in", list(op.operands)),
                              **segment_kwargs("out", types, type_of=lambda t: t),
                              executor=ir.StringAttr.get(ex.name),
                              callee=ir.StringAttr.get(sym.name), impl=impl)
    for r, n in zip(results, call.operation.results):
        r.replace_all_uses_with(n)
    op.erase()
