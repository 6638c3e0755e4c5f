"""The training step as one SPMD program: trace it (loss, backward and optimizer update
in one trace, as ``jit(step)`` traces ``loss.backward(); opt.step()``), annotate shardings,
lower, and compile for ``num_partitions`` devices.

Stages (each kept as a ``pipeline.Stage`` for ``last_traces``):

* ``initial``: the step traced with the parameters as inputs (``_trace_step``): the loss
  of ``loss_fn(model, *batch)``; its gradients, by the code a compiled step's
  ``loss.backward()`` runs (``train_step.gradients``: the ``grad`` and ``joint`` passes on
  the program traced so far, transforms/inline_backward.py); the optimizer's update
  (``optimizers.update_parameters``, the rules ``jit(opt.step)`` and ``jit(step)`` use);
* ``step``: ``thunder.mesh`` on the function and ``thunder.sharding`` on every argument
  and result (ir/sharding.py);
* ``prims``, ``plan``, ``stablehlo``: ``decompose``, ``partition`` (one XLA region; a
  torch-fallback op cannot run inside an SPMD program and is an error),
  ``lower-to-stablehlo`` (shardings become GSPMD ``mhlo.sharding``);
* ``xla-compile``: XLA's SPMD partitioner inserts the collectives
  (``CompileOptions.num_partitions = mesh.size``, ``use_spmd_partitioning``,
  toolchain.md §7); ``collectives`` lists them (``collectives.py``).

Program inputs: parameters, buffers, batch, optimizer state (per parameter, in
``OptimizerRule.state_names`` order), per-step scalars. Outputs: loss, new parameters,
new state. Parameter and state arguments are donated (``jax.buffer_donor``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import optree
import torch
from torch_mlir import ir

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.frontend.reparametrize import reparametrized
from thunder_mlir.pipeline import Stage, trace_function
from thunder_mlir.ir import optimizers, prims, sharding
from thunder_mlir.ir.dialect import SEED_ATTR
from thunder_mlir.ir.proxy import TensorProxy

from thunder_mlir.distributed.collectives import Collective, collectives_of
from thunder_mlir.distributed.mesh import DeviceMesh

DONOR_ATTR = "jax.buffer_donor"
_ACTIVE = threading.local()


def current_mesh() -> DeviceMesh:
    """The mesh of the step being traced (``with_sharding_constraint``'s default).
    Raises UnsupportedInputError outside one."""
    mesh = getattr(_ACTIVE, "mesh", None)
    if mesh is None:
        raise UnsupportedInputError(
            "with_sharding_constraint outside a thunder_mlir.distributed program needs its "
            "mesh= argument")
    return mesh


@contextlib.contextmanager
def tracing_on(mesh: DeviceMesh):
    """Make ``mesh`` the one ``current_mesh`` returns inside."""
    prev = getattr(_ACTIVE, "mesh", None)
    _ACTIVE.mesh = mesh
    try:
        yield
    finally:
        _ACTIVE.mesh = prev


@dataclass
class Program:
    """A compiled SPMD program. ``region_inputs[k]``: the program input fed to argument
    ``k`` of the executable (unused inputs are dropped by ``partition``); ``outputs[j]``:
    ``("result", k)`` (the executable's result ``k``) or ``("input", i)`` (an input
    returned unchanged). ``checks``: (error type, message) of each index check the program
    makes (frontend/runtime_checks.py); with any, its last output is their int32 code."""

    executable: object
    stages: list[Stage]
    region_inputs: list[int]
    outputs: list[tuple[str, int]]
    hlo_text: str
    collectives: list[Collective] = field(default_factory=list)
    checks: list[tuple[type, str]] = field(default_factory=list)


def sharding_constraint(x: TensorProxy, mesh: DeviceMesh, spec) -> TensorProxy:
    """``thunder.sharding_constraint`` of ``x`` (laid out as ``spec`` on ``mesh``),
    requiring grad as ``x`` does: its VJP constrains the cotangent the same way, and
    ``loss.backward()`` inside the step needs a loss that requires grad. Same shape and
    dtype as ``x``. Raises ValueError when ``spec`` does not fit ``x``'s shape on ``mesh``
    (the prim's inference, ir/sharding.py ``check_spec``)."""
    y = prims.bind("sharding_constraint", (x,), mesh=mesh.text, spec=sharding.format_spec(spec))
    return TensorProxy(y.value, y.tshape, y.tdtype, y.tdevice, x.requires_grad)


class LossModule(torch.nn.Module):
    """``loss_fn(model, *batch)`` as a module, so that ``reparametrized``
    (frontend/reparametrize.py) substitutes the model's parameters (tied ones included)
    while ``loss_fn`` runs."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *batch):
        """``loss_fn(model, *batch)``: the scalar loss the step differentiates."""
        return self.loss_fn(self.model, *batch)


def _func(module: ir.Module, name: str):
    return next(op.operation for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value == name)


def _asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)


def _as_model_holds(params, model_shapes):
    """The parameters in the shapes the model holds them in (``Fused`` entries are
    stored split into parts: reshaped back, row-major, the same elements)."""
    if model_shapes is None:
        return params
    return [p if s is None else p.reshape(s) for p, s in zip(params, model_shapes)]


def _split_fused(run_pass, model_shapes) -> None:
    """With ``Fused`` parameters: the ``split-fused-projections`` pass (fused.py), recorded
    as stage ``split-fused``."""
    if model_shapes is None or all(s is None for s in model_shapes):
        return
    from thunder_mlir.distributed import fused  # noqa: F401 (registers the pass)

    run_pass("split-fused", "split-fused-projections")


def _trace_step(model, loss_fn, rule, pnames, bnames, params, buffers, batch, state,
                scalars, sharp_edges, gather_specs=None, mesh=None, model_shapes=None,
                pass_ctx=None):
    """The whole step traced as one program, the way ``jit(step)`` traces
    ``loss.backward(); opt.step()`` (train_step.py): ``loss = loss_fn(model, *batch)`` with
    the parameters swapped for the program's inputs, its gradients by
    ``train_step.gradients`` (what ``loss.backward()`` runs), and ``rule``'s update of
    every parameter (``optimizers.update_parameters``, shared with ``jit(opt.step)``).
    Returns (loss, new parameters, new state): a parameter no output depends on keeps its
    value and state (eager's ``.grad`` stays None, torch.optim skips it). With index checks,
    every new value is the old one unless all held (``runtime_checks.unless_failed``), as
    eager raises before its step; the runtime then raises. ``Fused`` parameters: the
    ``split-fused-projections`` pass (fused.py) rewrites the forward before it is
    differentiated."""
    from thunder_mlir import train_step
    from thunder_mlir.frontend import runtime_checks
    from thunder_mlir.frontend.tracing import current_trace

    lm = LossModule(model, loss_fn)
    k = len(rule.state_names)

    def step_program(params, buffers, batch, state, scalars):
        used = params
        if gather_specs is not None:  # fsdp: the parameters are used gathered over "data"
            used = [p if g is None else sharding_constraint(p, mesh, g)
                    for p, g in zip(params, gather_specs)]
        used = _as_model_holds(used, model_shapes)
        named = {f"model.{n}": p for n, p in zip(pnames, used)}
        named.update({f"model.{n}": b for n, b in zip(bnames, buffers)})
        with reparametrized(lm, named, tie_weights=True):
            loss = lm(*batch)
        if type(loss) is not TensorProxy or loss.tshape != () or \
                not loss.tdtype.is_floating_point:
            raise UnsupportedInputError(
                "loss_fn(model, *batch) must return one 0-d floating-point tensor (the "
                f"loss), got {type(loss).__name__}")
        trace = current_trace()
        if model_shapes is not None and any(sh is not None for sh in model_shapes):
            from thunder_mlir.distributed import fused  # noqa: F401 (registers the pass)
            from thunder_mlir.transforms.registry import parse_element

            parse_element("split-fused-projections")(trace.module, pass_ctx)
        grads = train_step.gradients(loss, list(params))
        with torch.no_grad():
            entries = [(rule, p, g, list(state[i * k:(i + 1) * k]), list(scalars))
                       for i, (p, g) in enumerate(zip(params, grads))]
            new_params, new_state = [], []
            for (_, p, _, st, _), new in zip(entries, optimizers.update_parameters(
                    entries, in_place=False)):
                new_params.append(p if new is None else new[0])
                new_state += st if new is None else new[1]
            if trace.checks:  # (a failed check keeps every buffer: the step did not run)
                olds = list(params) + list(state)
                guarded = runtime_checks.unless_failed(
                    trace, runtime_checks.code(trace), new_params + new_state, olds)
                if guarded is None:  # (symbolic sizes: never here, every shape is static)
                    raise RuntimeError("the step's index checks cannot guard its update")
                new_params, new_state = guarded[:len(params)], guarded[len(params):]
        return loss.detach(), new_params, new_state

    leaves, spec = optree.tree_flatten(((list(params), list(buffers), list(batch),
                                         list(state), list(scalars)), {}), none_is_leaf=True)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    wrt = [True] * len(params) + [False] * (len(tensors) - len(params))
    trace, _, _, _ = trace_function(
        step_program, leaves, spec, sharp_edges, grad_inputs=wrt, index_checks=True)
    if SEED_ATTR in trace.func_op.attributes:
        raise UnsupportedInputError(
            "the training step draws random numbers (dropout?); thunder_mlir.distributed "
            "does not shard random programs yet: set the dropout probabilities to 0")
    if trace.mutated_inputs:
        raise UnsupportedInputError(
            "loss_fn updates parameters or buffers in place (e.g. batch-norm running "
            "statistics); thunder_mlir.distributed does not support in-place updates")
    return trace


def _check_messages(trace) -> list[tuple[type, str]]:
    """(error type, message) of each index check ``trace`` makes (``Program.checks``)."""
    return [(error, message) for _, error, message in trace.checks]


def _annotate(func_op, mesh: DeviceMesh, in_specs, out_specs, donated=()) -> None:
    func_op.attributes[sharding.MESH_ATTR] = ir.StringAttr.get(mesh.text)

    def dicts(specs, donors):
        out = []
        for i, s in enumerate(specs):
            d = {} if s is None else {sharding.SHARDING_ATTR:
                                      ir.StringAttr.get(sharding.format_spec(s))}
            if i in donors:
                d[DONOR_ATTR] = ir.BoolAttr.get(True)
            out.append(ir.DictAttr.get(d))
        return ir.ArrayAttr.get(out)

    func_op.attributes["arg_attrs"] = dicts(in_specs, set(donated))
    func_op.attributes["res_attrs"] = dicts(out_specs, set())


def _region_of(module: ir.Module):
    """The plan's one XLA region call, its argument indices and the plan's outputs."""
    comp = _func(module, "computation")
    block = comp.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    calls = [o for o in ops if o.name == "func.call"]
    others = [o for o in ops if o.name not in ("func.call", "func.return")]
    if others or len(calls) != 1:
        names = sorted({str(o.attributes["callee"]).strip('"') if "callee" in o.attributes
                        else o.name for o in others})
        raise UnsupportedInputError(
            "the training step holds operations that run on the torch fallback "
            f"({', '.join(names) or 'several regions'}); an SPMD program must lower to XLA "
            "completely. last_traces(step) shows them in the 'plan' stage.")
    call = calls[0]
    args = list(block.arguments)
    inputs = []
    for v in call.operands:
        if not isinstance(v.owner, ir.Block):
            raise RuntimeError("partition: a region operand is not a program input")
        inputs.append(args.index(v) if v in args else _arg_index(args, v))
    results = list(call.results)
    outputs = []
    for v in ops[-1].operands:
        if v in results:
            outputs.append(("result", results.index(v)))
        else:
            outputs.append(("input", _arg_index(args, v)))
    name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
    return name, inputs, outputs


def _arg_index(args, v) -> int:
    for i, a in enumerate(args):
        if a == v:
            return i
    raise RuntimeError("plan: a value is neither a region result nor a program input")


def build(model: torch.nn.Module, loss_fn: Callable, rule, mesh: DeviceMesh,
          pnames: Sequence[str], bnames: Sequence[str], params, buffers, batch,
          param_specs, batch_specs, sharp_edges: str = "warn", gather_specs=None,
          model_shapes=None) -> Program:
    """Trace, transform and compile the step (module docstring). ``params``/``buffers``/
    ``batch``: tensors with the global shapes (values unused); ``param_specs``: the
    sharding of each parameter (its optimizer state shares it); ``batch_specs``: of each
    batch tensor. ``gather_specs`` (fsdp): per parameter, the layout it is used in (its
    tensor-parallel spec; None: as stored) — a ``sharding_constraint`` on the parameter
    makes XLA all-gather it over "data" before use, as ZeRO-3 does, and (by the
    constraint's VJP) reduce its gradient in that layout, then scatter it to the stored
    one. ``model_shapes`` (``Fused`` parameters): per parameter, the shape the model
    holds it in where ``params`` has another (None: the same). Raises
    UnsupportedInputError for programs it cannot shard."""
    from thunder_mlir.executors import execution_transform  # noqa: F401 (registers passes)
    from thunder_mlir.executors.extend import compiling
    from thunder_mlir.ir import implementations
    from thunder_mlir.ir.context import COMPILE_LOCK
    from thunder_mlir.transforms.registry import PassContext

    stages: list[Stage] = []
    k = len(rule.state_names)
    state = [torch.empty_like(p) for p in params for _ in range(k)]
    scalars = [torch.zeros((), dtype=torch.float32) for _ in rule.scalar_names]
    with COMPILE_LOCK, compiling(()) as ext, implementations.holding():
        t = time.perf_counter()
        ctx = PassContext(compile_state=ext, device=torch.device("cpu"))  # (host tensors)
        with tracing_on(mesh):
            trace = _trace_step(model, loss_fn, rule, pnames, bnames, params, buffers, batch,
                                state, scalars, sharp_edges, gather_specs, mesh,
                                model_shapes, ctx)
        module = trace.module
        stages.append(Stage("initial", _asm(module), time.perf_counter() - t))
        pipeline, run_pass = _pipeline(stages)
        pipeline.update(module=module, ctx=ctx)
        t = time.perf_counter()
        checks = _check_messages(trace)
        n_p, n_b, n_x = len(params), len(buffers), len(batch)
        repl = lambda x: tuple(() for _ in x.shape)  # noqa: E731
        state_specs = [s for s in param_specs for _ in range(k)]
        in_specs = (list(param_specs) + [repl(b) for b in buffers] + list(batch_specs)
                    + state_specs + [()] * len(scalars))
        out_specs = [()] + list(param_specs) + state_specs + [()] * bool(checks)
        donated = list(range(n_p)) + list(range(n_p + n_b + n_x, n_p + n_b + n_x + len(state)))
        with module.context:
            _annotate(_func(module, "computation"), mesh, in_specs, out_specs)
        stages.append(Stage("step", _asm(module), time.perf_counter() - t))
        return _finish(module, stages, run_pass, mesh, in_specs, out_specs, donated, checks)


def _finish(module, stages, run_pass, mesh, in_specs, out_specs, donated,
            checks=()) -> Program:
    """decompose, partition, shardings on the region, lower, compile (under the lock)."""
    from thunder_mlir.runtime.plan import region_module_text

    run_pass("prims", "decompose")
    run_pass("plan", "partition")
    with module.context:
        region, inputs, outputs = _region_of(module)
        rfunc = _func(module, region)
        result_of = {k: j for j, (kind, k) in enumerate(outputs) if kind == "result"}
        n_results = len(ir.FunctionType(ir.TypeAttr(rfunc.attributes["function_type"])
                                        .value).results)
        _annotate(rfunc, mesh, [in_specs[i] for i in inputs],
                  [out_specs[result_of[r]] if r in result_of else None
                   for r in range(n_results)],
                  donated=[j for j, i in enumerate(inputs) if i in set(donated)])
    run_pass("stablehlo", "lower-to-stablehlo")
    text = region_module_text(module, region)
    t = time.perf_counter()
    exe = compile_spmd(text, mesh)
    hlo_text = exe.hlo_modules()[0].to_string()
    colls = collectives_of(hlo_text)
    stages.append(Stage("xla-compile", _collectives_text(colls), time.perf_counter() - t))
    return Program(exe, stages, inputs, outputs, hlo_text, colls, list(checks))


def _pipeline(stages):
    """(state, run_pass): ``run_pass(stage, element)`` runs the registry pass of pipeline
    ``element`` on ``state["module"]`` with ``state["ctx"]`` and records a Stage."""
    from thunder_mlir.transforms.registry import parse_element, pipeline_string

    state = {}

    def run_pass(stage, element):
        t = time.perf_counter()
        p = parse_element(element)
        p(state["module"], state["ctx"])
        stages.append(Stage(stage, _asm(state["module"]), time.perf_counter() - t,
                            pipeline_string([p])))
    return state, run_pass


def build_forward(model: torch.nn.Module, options: dict, mesh: DeviceMesh, pnames, bnames, params,
                  buffers, inputs, param_specs, input_specs, sharp_edges: str = "warn",
                  model_shapes=None):
    """``model(*inputs, **options)`` as an SPMD program with replicated outputs (``shard``).
    -> (Program, output tree spec, [(shape, dtype)] of the tensor outputs). Non-tensor
    outputs are refused (UnsupportedInputError). ``model_shapes``: as ``build``'s."""
    from thunder_mlir.executors import execution_transform  # noqa: F401 (registers passes)
    from thunder_mlir.executors.extend import compiling
    from thunder_mlir.ir import implementations
    from thunder_mlir.ir.context import COMPILE_LOCK
    from thunder_mlir.transforms.registry import PassContext

    def forward(params, buffers, inputs):
        state = dict(zip(pnames, _as_model_holds(params, model_shapes)))
        state.update(zip(bnames, buffers))
        with reparametrized(model, state, tie_weights=True):
            return model(*inputs, **options)

    stages: list[Stage] = []
    leaves, spec = optree.tree_flatten(((list(params), list(buffers), list(inputs)), {}),
                                       none_is_leaf=True)
    with COMPILE_LOCK, compiling(()) as ext, implementations.holding(), torch.no_grad():
        t = time.perf_counter()
        with tracing_on(mesh):
            trace, out_spec, out_leaves, _ = trace_function(
                forward, leaves, spec, sharp_edges, grad_inputs=[False] * len(leaves),
                index_checks=True)
        if not all(type(x) is TensorProxy for x in out_leaves):
            raise UnsupportedInputError(
                "shard(model): the forward must return tensors (in tuples, lists, dicts or "
                f"ModelOutput), got {[type(x).__name__ for x in out_leaves]}; e.g. pass "
                "use_cache=False to a Hugging Face model")
        if SEED_ATTR in trace.func_op.attributes or trace.mutated_inputs:
            raise UnsupportedInputError("shard(model): the forward draws random numbers or "
                                        "updates buffers in place; call model.eval() first")
        module = trace.module
        stages.append(Stage("initial", _asm(module), time.perf_counter() - t))
        pipeline, run_pass = _pipeline(stages)
        pipeline.update(module=module, ctx=PassContext(compile_state=ext, device=trace.device))
        _split_fused(run_pass, model_shapes)
        in_specs = (list(param_specs) + [tuple(() for _ in b.shape) for b in buffers]
                    + list(input_specs))
        checks = _check_messages(trace)
        out_specs = [tuple(() for _ in x.tshape) for x in out_leaves] + [()] * bool(checks)
        with module.context:
            _annotate(trace.func_op, mesh, in_specs, out_specs)
        prog = _finish(module, stages, run_pass, mesh, in_specs, out_specs, (), checks)
    return prog, out_spec, [(tuple(x.tshape), x.tdtype) for x in out_leaves]


def _collectives_text(colls) -> str:
    lines = [f"// {len(colls)} collective(s) inserted by XLA's SPMD partitioner, "
             f"{sum(c.bytes for c in colls)} bytes per step per device"]
    lines += [f"//   {c}" for c in colls]
    return "\n".join(lines)


def compile_spmd(text: str, mesh: DeviceMesh):
    """Compile StableHLO ``text`` (entry ``@main``, GSPMD shardings) for ``mesh``:
    ``num_partitions = mesh.size``, ``use_spmd_partitioning``, partition ``p`` on
    ``mesh.devices[p]`` (toolchain.md §7). Raises CompileError when XLA rejects it."""
    import numpy as np
    from thunder_mlir.runtime.jax_internals import xla_client

    xc = xla_client()

    from thunder_mlir.errors import CompileError

    opts = xc.CompileOptions()
    opts.env_option_overrides = [("xla_allow_excess_precision", False)]
    opts.num_replicas = 1
    opts.num_partitions = mesh.size
    build = opts.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = False  # the module carries GSPMD attributes
    opts.device_assignment = xc.DeviceAssignment.create(
        np.array([d.id for d in mesh.devices], dtype=np.int32).reshape(1, mesh.size))
    client = mesh.devices[0].client
    try:
        return client.compile_and_load(text, xc.DeviceList(tuple(mesh.devices)), opts)
    except Exception as e:  # XlaRuntimeError has no stable import path
        raise CompileError(f"XLA rejected the SPMD program: {e}") from None
