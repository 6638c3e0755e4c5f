"""The compile pipeline: trace -> passes -> lowering -> XLA compile, for one target.

``compile_function`` turns a Python function and its inputs into a ``CacheEntry`` (the plan
or plans that run it, and how to rebuild its outputs); ``function.ThunderFunction`` keeps
the callable and the cache around it. The stages (design.md):

    trace -> [initial] -> grad -> [grad] -> execution-transform -> [execution]
          -> decompose, ... -> [prims] -> partition -> [plan] -> lower-to-stablehlo
          -> [stablehlo] -> XLA compile

Each stage is one element of the pass registry thunder-opt uses, and its module text is
kept for ``last_traces``.

**One place for the target's choices.** The device a program is compiled for decides some
passes and options (``Target``): the CPU takes ``merge-dots`` and the sine/cosine lowering
XLA:CPU evaluates once (``lower-to-stablehlo{computed-once=true}``), a GPU takes fused
attention (``fused-attention``: cuDNN's flash attention custom call). The choices are made
once, in ``Target.elements``, and shown as the ``target`` stage of ``last_traces``.

**Compiling for a device that is not here.** Inside ``compile_only(target)``, a jitted
call traces and transforms its program for ``target`` (a GPU's, on a machine without one:
meta tensors stand for the inputs, and the program's device is the target's) and stops
before XLA: ``ProgramsCaptured`` carries the StableHLO of every region of each program
(forward, backward, or the one program), for XLA's compiler of that device to compile
without it (benchmarks/gpu_programs.py, toolchain.md section 11). The programs are the
runtime's own for that device: on a GPU, written inputs are not donated (torch copies their
new values back after each run: ``ProgramsCaptured.write_back_bytes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Callable

import optree
import torch
import torch.utils._pytree as torch_pytree
from torch_mlir import ir

from thunder_mlir import value_specialization
from thunder_mlir.cache import CacheEntry
from thunder_mlir.error_reporting import argument_paths as _paths, check_tensor_inputs, \
    tensor_argument_paths as _paths_of_tensors
from thunder_mlir.errors import DataDependentControlFlowError, DynamicShapeFallback, \
    TraceError, UnsupportedError
from thunder_mlir.frontend import aliasing, compat, cpu_scalars, differentiability, \
    functionalization, pytrees, region_reads, runtime_checks
from thunder_mlir.frontend.module_attributes import LiftNeeded
from thunder_mlir.frontend.sharp_edges import SharpEdgeMonitor, freeze_containers
from thunder_mlir.frontend.tracing import Trace
from thunder_mlir.frontend.value_guards import ValueGuardFailed, ValueNeeded
from thunder_mlir.ir import dtypes, symbolic
from thunder_mlir.ir.proxy import TensorProxy

WRITE_BACKS_ATTR = "thunder.num_write_backs"  # trailing results copied back into inputs


class Stage:
    """One stage of a compilation: ``name``, MLIR ``text``, ``seconds`` it took and
    ``pipeline``: the pass pipeline that makes ``text`` from the previous stage's text
    (``builtin.module(grad{remat=true})``, the syntax of ``thunder-opt --pass-pipeline``;
    None for the ``initial`` trace and the ``xla-compile`` step, which are not passes)."""

    __slots__ = ("name", "text", "seconds", "pipeline")

    def __init__(self, name: str, text: str, seconds: float, pipeline: str | None = None):
        self.name, self.text, self.seconds = name, text, seconds
        self.pipeline = pipeline

    def __str__(self) -> str:
        return f"// ----- {self.name} ({self.seconds * 1e3:.1f} ms)\n{self.text}"

    def __repr__(self) -> str:
        return (f"Stage({self.name!r}, {len(self.text)} chars, {self.seconds * 1e3:.1f} ms, "
                f"pipeline={self.pipeline!r})")


# ------------------------------------------------------------------------- the target
@dataclass(frozen=True)
class Target:
    """The device a program is compiled for, and the pipeline's choices that depend on it.

    ``device``: the torch device the program runs on (``cpu``, ``cuda:N``); ``name``: the
    device's description, listed by the ``xla-compile`` stage ("cpu", "NVIDIA H100 80GB
    HBM3"); ``compile_only``: the program is captured before XLA compiles it
    (``compile_only``); ``attention``: the fused-attention pass on (True) or off (False)
    whatever the device (None: the device decides).

    Choices (each a pass or a pass option of the pipeline, so thunder-opt reproduces it):

    * ``fused_attention`` (GPU): ``scaled_dot_product_attention`` calls cuDNN can take become
      ``flash_attention`` composites before ``grad`` (passes/fused_attention.py), which
      ``cudnn-attention`` turns into cuDNN's flash attention custom calls, forward and
      backward; the others keep the decomposed form, and the pass records why.
    * ``merge_dots`` (CPU): the horizontal fusion of dots sharing an operand
      (passes/merge_dots.py). Measured for XLA:CPU's layout copies of transposed
      gradients; on a GPU the dots are cuBLAS/Triton gemms that take transposed operands.
    * ``computed_once`` (CPU): sine and cosine lowered so that XLA:CPU's fusion computes
      them once (``ir/hlo.py`` ``lower_computed_once``: a workaround for XLA:CPU's cost
      model of jaxlib 0.10.2, not needed by XLA:GPU, which fuses by a different rule).
    * ``accumulate_f32`` (CPU): 16-bit dots and convolutions produce float32 and one
      convert (``hlo._accumulated_in_f32``: XLA:CPU 0.11 accumulates some bf16 dots in
      bf16); XLA:GPU's gemms accumulate in float32 themselves and write 16 bits.
    * ``narrow_dots`` (GPU): a float32 dot of values converted from 16 bits (ATen's opmath
      rule for addmm) reads the 16-bit values, with a float32 result: the same products
      and sums, on tensor cores (``hlo._widened_16bit``).
    * ``resident_writes`` (GPU): every program's written inputs are resident in XLA's
      memory and donated (runtime/resident.py); on the CPU only a training step's are
      (``donate_writes``), where residency was measured to pay.
    * ``guard_writes`` (CPU): a donated written input keeps its old value where an index
      check failed (``runtime_checks.unless_failed``), as eager raises before writing; on
      a GPU a failed check is a device-side assert (``runtime_checks.raise_failed``), after
      which the CUDA context is unusable and no tensor can be read, so nothing is guarded.
    * ``save_materialized`` (GPU): ``grad`` saves a value that a gemm of the backward reads
      instead of recomputing it (torch's partitioner's ``ban_if_materialized_backward``):
      recomputed, it is written to memory in the backward a second time. Measured on the
      H100 target (Llama 1.1B step: 80.3 -> 77.5 ms roofline, 7.5 -> 11.4 GiB beyond the
      arguments, against the jax reference's 12.0); on the CPU the smaller residuals were
      measured and kept.
    * ``batch_group_taps`` (CPU): the weight gradient of a depthwise convolution (a
      convolution with ``batch_group_count`` groups of one row) is lowered as one
      multiply-and-reduce per window position (``hlo._batch_group_taps``): XLA:CPU expands
      the batch-grouped convolution into a dense one over all groups (8x256x32x32 3x3
      depthwise step: 484 ms); XLA:GPU runs it as cuDNN's grouped weight gradient.
    * ``blocked_contractions`` (CPU): a float32 convolution whose window is its whole
      input (a 1 x 1 convolution's weight gradient, N x H x W products per output) is
      summed in blocks of 128 (``hlo._blocked_contraction``): XLA:CPU sums it in one
      running sum, 6.5x eager's distance from float64 at 2 x 32 x 32, 11x at 2 x 64 x 64;
      XLA:GPU's gemms split their contractions themselves.
    * ``small_program_pool`` (CPU): inference programs with little work per kernel move to
      the one-thread CPU client (runtime/plan.py ``place_small_programs``).
    """

    device: torch.device
    name: str = ""
    compile_only: bool = False
    # the fused-attention pass on another target than a GPU's (None: the device decides);
    # on the CPU its composites are decomposed, which checks their values there (tests)
    attention: bool | None = None

    @staticmethod
    def of(device: torch.device) -> "Target":
        """The target of a program whose inputs are on ``device``: the one ``compile_only``
        sets while it is active, or the one ``targeting`` sets for a device of this type,
        else the device's own choices."""
        active = getattr(_override, "target", None)
        if active is not None and (active.compile_only or active.device.type == device.type):
            return active
        return Target(device, "cpu" if device.type == "cpu" else str(device))

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def fused_attention(self) -> bool:
        return self.on_gpu if self.attention is None else self.attention

    @property
    def merge_dots(self) -> bool:
        return not self.on_gpu

    @property
    def computed_once(self) -> bool:
        return not self.on_gpu

    @property
    def accumulate_f32(self) -> bool:
        return not self.on_gpu

    @property
    def narrow_dots(self) -> bool:
        return self.on_gpu

    @property
    def resident_writes(self) -> bool:
        """Written inputs resident in XLA's memory and donated to every program that writes
        them, not only to training steps (runtime/resident.py): on a GPU, where PJRT does
        not donate memory torch owns, so that a written input (a KV cache, a parameter)
        would otherwise be written whole into a new buffer and copied back by torch."""
        return self.on_gpu

    @property
    def guard_writes(self) -> bool:
        """Whether donated written inputs keep their old values where an index check
        failed (``runtime_checks.unless_failed``: a select over each written input). On the
        CPU the check raises a Python error after the run and the caller's tensors must be
        as before it. On a GPU ``runtime_checks.raise_failed`` asserts on the device
        (``torch._assert_async``, as eager's CUDA index kernels do with
        ``CUDA_KERNEL_ASSERT``): a device-side assert is a sticky CUDA error (CUDA runtime
        API, ``cudaErrorAssert``: "the context cannot be used anymore"), so the written
        values cannot be read after it and the select, a read and write of every written
        input (a whole KV cache per decode step), is not emitted."""
        return not self.on_gpu

    @property
    def save_materialized(self) -> bool:
        return self.on_gpu

    @property
    def batch_group_taps(self) -> bool:
        return not self.on_gpu

    @property
    def blocked_contractions(self) -> bool:
        return not self.on_gpu

    @property
    def small_program_pool(self) -> bool:
        return self.device.type == "cpu"

    def elements(self, needs_grad: bool, joint: str | None, executors) -> list[tuple[str, str]]:
        """(stage name, pipeline element) of each pass stage, in order, for a program that
        ``needs_grad`` (a forward and a backward), is a ``joint`` gradient program
        (``thunder_mlir.grad``: "grad" or "value_and_grad") and has user ``executors``."""
        elements = []
        if self.fused_attention:  # (before grad: the fused op has its own VJP rule)
            elements.append(("fused-attention", "fused-attention"))
        if needs_grad:
            elements.append(("grad", "grad{remat=true save-materialized=true}"
                             if self.save_materialized else "grad{remat=true}"))
        if joint:
            keep = "true" if joint == "value_and_grad" else "false"
            elements.append(("joint", f"joint{{keep-outputs={keep}}}"))
        if executors:  # after grad: executors also claim the backward's ops
            names = ",".join(e.name for e in executors)
            elements.append(("execution", f"execution-transform{{executors={names}}}"))
        # (merge-dots: single-device programs only; distributed/program.py leaves the dots
        # of a sharded program to XLA's SPMD partitioner as they are)
        prims = ["cudnn-attention"] if self.fused_attention and self.on_gpu else []
        prims += ["decompose"] + (["merge-dots"] if self.merge_dots else [])
        elements.append(("prims", ",".join(prims)))
        elements.append(("plan", "partition"))
        flag = lambda b: "true" if b else "false"  # noqa: E731
        elements.append(("stablehlo", "lower-to-stablehlo{"
                         f"computed-once={flag(self.computed_once)} "
                         f"accumulate-f32={flag(self.accumulate_f32)} "
                         f"narrow-dots={flag(self.narrow_dots)} "
                         f"batch-group-taps={flag(self.batch_group_taps)} "
                         f"blocked-contractions={flag(self.blocked_contractions)}}}"))
        return elements

    def describe(self) -> str:
        """The device and each choice, as MLIR comments (the head of the ``xla-compile``
        stage's text)."""
        on = lambda b: "on" if b else "off"  # noqa: E731
        return "\n".join([
            f"// device: {self.device} ({self.name or self.device.type})"
            + (", compile-only (captured before XLA)" if self.compile_only else ""),
            f"// fused-attention: {on(self.fused_attention)}"
            + (" (cuDNN flash attention custom calls)" if self.fused_attention and self.on_gpu
               else " (decomposed)" if self.fused_attention else ""),
            f"// merge-dots: {on(self.merge_dots)}",
            f"// lower-to-stablehlo computed-once (sine, cosine): {on(self.computed_once)}",
            f"// lower-to-stablehlo accumulate-f32 (16-bit dots): {on(self.accumulate_f32)}",
            f"// lower-to-stablehlo narrow-dots (float32 dots of 16-bit values): "
            f"{on(self.narrow_dots)}",
            f"// lower-to-stablehlo batch-group-taps (depthwise weight gradients): "
            f"{on(self.batch_group_taps)}",
            f"// lower-to-stablehlo blocked-contractions (1 x 1 weight gradients): "
            f"{on(self.blocked_contractions)}",
            f"// written inputs resident and donated in every program: "
            f"{on(self.resident_writes)}",
            f"// written inputs kept where an index check failed: {on(self.guard_writes)}"
            + ("" if self.guard_writes else " (a failed check is a device-side assert)"),
            f"// grad saves the values backward gemms read: {on(self.save_materialized)}",
            f"// small programs on the one-thread CPU client: {on(self.small_program_pool)}",
        ])


# ------------------------------------------------------------- compiling without a device
_override = threading.local()  # the target set by ``targeting``/``compile_only``


@dataclass
class CapturedProgram:
    """One program of a call compiled inside ``compile_only``: ``name`` ("program",
    "forward" or "backward"), ``regions`` ((region name, StableHLO module text with entry
    ``@main``) in plan order) and ``torch_steps`` (the executor calls torch runs between
    them: fallback ops and user executors, by callee name)."""

    name: str
    regions: list[tuple[str, str]] = field(default_factory=list)
    torch_steps: list[str] = field(default_factory=list)
    # per region, the XLA options the runtime compiles it with (runtime/xla.py)
    options: list[list[tuple[str, object]]] = field(default_factory=list)


@dataclass
class LoweredProgram:
    """The whole lowered program of a call captured by ``compile_only``, with what the
    runtime would need to give its outputs eager's meaning (export.py builds a portable
    artifact from it).

    ``module``: the module after ``lower-to-stablehlo`` (``@computation`` calling the
    regions); ``plan``: its compile-only ``Plan`` (steps, input and output slots; a
    ``seeded`` plan's last input is the seed); ``out_spec``/``out_consts``/
    ``out_positions``: the output tree, its non-tensor leaves and the positions of its
    tensors (``CacheEntry.rebuild``); ``out_shapes``: the shape of each of those tensors
    (ints and ``SymInt``s); ``n_state_outputs``: hidden outputs after them (tensors written
    to input objects, bases shared by output views); ``mutated_inputs``: the written
    inputs, whose new values follow, in this order; ``checks``: (error type, message) of
    each run-time index check, whose int32 code is the last output when there are any
    (frontend/runtime_checks.py); ``fallbacks``: ops left to the torch fallback;
    ``output_views``: outputs eager returns as views of inputs (aliasing.py);
    ``fresh_outputs``: outputs the plan returns as one of its inputs, which eager returns
    as new tensors; ``attribute_writes``: Python attribute writes the call makes
    (``self.calls += 1``); ``guards``: the Python values the program depends on
    (globals, closures, module attributes: guards.py); ``shape_env``: the size symbols
    and shape guards (ir/symbolic.py); ``needs_grad``: a forward and backward program."""

    module: ir.Module
    plan: object
    out_spec: object
    out_consts: list
    out_positions: list
    out_shapes: list
    n_state_outputs: int
    mutated_inputs: list
    checks: list
    fallbacks: list
    output_views: list
    fresh_outputs: tuple
    attribute_writes: list
    guards: list
    shape_env: object
    needs_grad: bool


class ProgramsCaptured(BaseException):
    """Raised by a jitted call inside ``compile_only`` once its programs are lowered,
    instead of compiling and running them. ``programs``: the ``CapturedProgram`` of each
    (one, or a forward and its backward); ``stages``: the compilation's stages, as
    ``last_traces`` gives them; ``lowered``: the ``LoweredProgram`` (the whole module and
    its plan). A ``BaseException``, so that no ``except Exception`` of the call path takes
    it for a failure."""

    def __init__(self, programs: list[CapturedProgram], stages: list,
                 residual_bytes: int = 0, write_back_bytes: int = 0,
                 lowered: LoweredProgram | None = None):
        super().__init__(f"{len(programs)} program(s) captured")
        self.programs, self.stages = programs, stages
        self.residual_bytes = residual_bytes  # saved for the backward, inputs excluded
        # the written inputs the runtime copies back after each run (not aliased)
        self.write_back_bytes = write_back_bytes
        self.lowered = lowered


@contextlib.contextmanager
def compile_only(target: Target):
    """Compile for ``target`` without its device, in this thread: jitted calls inside take
    meta tensors (``torch.device("meta")``) for their tensor inputs, trace and transform
    their programs as for ``target.device`` (every device-dependent choice is the
    target's: autocast lists, attention, the passes that run), lower them to StableHLO and
    raise ``ProgramsCaptured`` instead of compiling and running them.

        with pipeline.compile_only(Target(torch.device("cuda", 0), "NVIDIA H100", True)):
            try:
                jitted(*meta_inputs)
            except ProgramsCaptured as c:
                programs = c.programs

    Raises ``UnsupportedInputError`` (from the call) for a tensor input that is not on the
    meta device, besides 0-d CPU tensors (CPU scalars, frontend/cpu_scalars.py)."""
    if not target.compile_only:
        target = dataclasses.replace(target, compile_only=True)
    with targeting(target):
        yield target


@contextlib.contextmanager
def targeting(target: Target):
    """Compile the jitted calls of this thread inside for ``target`` (its choices, e.g.
    ``Target(torch.device("cpu"), attention=True)`` runs the GPU's fused-attention pass on
    a CPU program, whose composites then decompose: tests check their values against
    eager's). The target is not part of the cache key: use jitted functions compiled
    inside only there."""
    old = getattr(_override, "target", None)
    _override.target = target
    try:
        yield target
    finally:
        _override.target = old


def _program_device(tensors) -> tuple[torch.device, list[int]]:
    """``cpu_scalars.program_device``, with meta tensors standing for the target's device
    inside ``compile_only``."""
    device, scalars = cpu_scalars.program_device(tensors)
    target = getattr(_override, "target", None)
    if target is None or not target.compile_only:
        return device, scalars
    if device.type != "meta" and tensors:
        from thunder_mlir.errors import UnsupportedInputError

        raise UnsupportedInputError(
            f"compile_only({target.device}): the inputs are on {device}; pass meta tensors "
            "(torch.device('meta')) for the inputs of a program compiled without its device")
    return target.device, scalars


def _captured_program(name: str, plan, module: ir.Module) -> CapturedProgram:
    """A ``compile_only`` plan's regions (their StableHLO, with locations) and torch steps,
    in plan order."""
    from thunder_mlir.runtime.plan import XlaStep, region_module_text
    from thunder_mlir.runtime.xla import option_overrides

    prog = CapturedProgram(name)
    for step in plan.steps:
        if type(step) is XlaStep:  # (with locations: XLA's metadata names the user's lines)
            prog.regions.append((step.name, region_module_text(module, step.name, True)))
            prog.options.append(option_overrides(step.executable))
        else:
            prog.torch_steps.append(step.name)
    return prog

def _computed_residual_bytes(module: ir.Module) -> int:
    """Bytes of the residuals ``@forward`` computes for ``@backward``: its results past the
    program's outputs that are not its arguments (parameters and inputs saved as they
    are)."""
    from thunder_mlir.ir import attrs
    from thunder_mlir.ir.dtypes import nbytes

    with module.context:
        fwd = next(op.operation for op in module.body.operations
                   if op.operation.name == "func.func"
                   and ir.StringAttr(op.operation.attributes["sym_name"]).value == "forward")
        n = attrs.get_int(fwd, "thunder.num_outputs")
        ret = list(fwd.regions[0].blocks[0].operations)[-1].operation
        seen, total = set(), 0
        for v in list(ret.operands)[n:]:
            if isinstance(v.owner, ir.Block) or v in seen:
                continue
            seen.add(v)
            total += nbytes(v.type)
        return total


def trace_function(fn: Callable, leaves, spec, sharp_edges: str = "warn",
                   grad_inputs: list[bool] | None = None, watch=(), dynamic_dims=None,
                   known_values=None, unbacked: bool = False, recompile_limit: int = 8,
                   guessed: set | None = None, no_guess=frozenset(),
                   index_checks: bool = False, guard_writes: bool = False,
                   output_bases: bool = False):
    """Trace ``fn`` on proxies for the tensor leaves (requiring grad as the tensors do, or
    as ``grad_inputs`` says per tensor).

    Returns (trace, out_spec, out_leaves, monitor). Raises TraceError subclasses naming the
    user's line; a program that escapes the functional contract raises SharpEdgeError.
    ``dynamic_dims``: tensor index -> {dim: reason} traced as size symbols
    (``trace.shape_env``, ir/symbolic.py). ``known_values``: the Python values of tensors
    the trace asks for, in order (frontend/value_guards.py); one more raises
    ``ValueNeeded`` with ``need.trace`` the program prefix returning its tensors. None (a
    caller that cannot compute them: examine, distributed programs):
    DataDependentControlFlowError instead. ``unbacked``: the output sizes of data-dependent
    ops become unbacked size symbols where torch's fake kernels allow (value_guards.py);
    ``recompile_limit``: the function's, for their warning past it. ``guessed``: a set
    where unbacked sizes are traced with guessed hints instead of values (the query
    numbers guessed are added to it; frontend/unbacked_sizes.py ``guess``), except the
    queries in ``no_guess``, whose values are computed. ``guard_writes``: with index
    checks, the written inputs' new values keep the old ones unless every check held
    (``runtime_checks.unless_failed``; ``trace.writes_guarded`` says whether it could).
    ``output_bases``: intermediates two outputs are views of are hidden outputs after the
    state outputs (``trace.shared_bases``; aliasing.shared_bases).
    """
    compat.install()
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    device, scalars = _program_device(tensors)
    trace = Trace(device)
    trace.meta_is_device = getattr(getattr(_override, "target", None), "compile_only", False)
    monitor = SharpEdgeMonitor(fn, sharp_edges)
    trace.monitor = monitor
    trace.known_values = list(known_values or ())
    trace.unbacked, trace.recompile_limit = unbacked, recompile_limit
    trace.guessed = guessed if unbacked else None
    trace.no_guess = no_guess
    # index bounds checked at run time: the program's last result (runtime_checks.py)
    trace.runtime_checks = index_checks
    for obj, owner, *path in watch:  # objects whose attribute reads are guarded (guards.py)
        monitor.recorder.watch(obj, owner, *path)  # (path: module_attributes.py)
    env = trace.shape_env = symbolic.ShapeEnv()
    shapes = [tuple(t.shape) for t in tensors]
    for i, ds in sorted((dynamic_dims or {}).items()):  # (dynamic shapes: dynamic.py)
        shapes[i] = tuple(env.new_symbol((i, d), n, ds[d]) if d in ds else n
                          for d, n in enumerate(shapes[i]))
    # (read before tracing starts: inside it, tensor attributes go through the tracer)
    nonleaf = iter([grad_inputs is None and t.requires_grad and not t.is_leaf
                    for t in tensors])
    caller_view = iter([t._base is not None for t in tensors])  # (detach_ raises: eager's)
    with trace.building():
        arg_types = [dtypes.tensor_type(s, t.dtype) for s, t in zip(shapes, tensors)]
        values = iter(trace.begin(arg_types))
        if env.sources:
            trace.func_op.attributes[symbolic.ARG_SHAPES_ATTR] = ir.ArrayAttr.get([
                ir.ArrayAttr.get([ir.StringAttr.get(symbolic.dim_text(n)) for n in s])
                for s in shapes])
        shape_of = iter(shapes)
        proxy_leaves = []
        rg = iter(grad_inputs if grad_inputs is not None else
                  [x.requires_grad for x in tensors])
        for x in leaves:
            if isinstance(x, torch.Tensor):
                v = next(values)
                p = TensorProxy(v, next(shape_of),
                                dtypes.torch_dtype(ir.RankedTensorType(v.type).element_type),
                                trace.device, next(rg))
                if next(nonleaf):  # eager writes it in place (differentiability.py)
                    p._nonleaf = True
                if next(caller_view):
                    p._caller_view = True
                trace.inputs.append(p)
                proxy_leaves.append(p)
            else:
                proxy_leaves.append(x)
        for k in scalars:  # 0-d CPU tensors beside a GPU's (frontend/cpu_scalars.py)
            cpu_scalars.track(trace, trace.inputs[k])
        tree = optree.tree_unflatten(spec, proxy_leaves)
        # input objects (a KV cache): their copies, to find the program's writes to them
        objects = pytrees.ObjectState(tree, trace.inputs)
        args, kwargs = freeze_containers(tree)
        try:
            with monitor:
                out = fn(*args, **kwargs)
        except ValueNeeded as need:  # the prefix up to the value: returns its tensors
            if known_values is None:
                raise DataDependentControlFlowError(
                    f"{need.where}\n  {need.what} needs the tensor's data, which this "
                    "entry point does not compute while tracing (jit does). Use tensor ops "
                    "instead (torch.where, masking), or torch.cond.") from None
            trace.finish([p.value for p in need.tensors])
            need.trace = trace
            raise
        if monitor.recorder.candidates:  # tensors the module holds: to become inputs
            raise LiftNeeded(tuple(monitor.recorder.candidates))  # (module_attributes.py)
        # torch's pytree: it knows the containers libraries register with torch
        # (Hugging Face ModelOutput, torch.return_types), which outputs often are.
        # a torch.Size is a value, not a container: kept whole so it comes back as a Size
        out_leaves, out_spec = torch_pytree.tree_flatten(
            out, is_leaf=lambda x: isinstance(x, torch.Size))
        results = []
        out_objects = []  # (leaf position, description): objects returned (pytrees.py)
        for i, x in enumerate(out_leaves):
            if type(x) is TensorProxy:
                results.append(x.value)
            elif pytrees.is_object(x) and (d := objects.describe(x, f"output {i}"))[0] != \
                    "const":
                out_objects.append((i, d))
            elif isinstance(x, torch.Tensor):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a tensor that was not "
                    "computed from the inputs (a global or closure?); pass it as an input")
            elif any(type(v) is TensorProxy for v in optree.tree_leaves(x)) or \
                    "TensorProxy" in repr(type(x)):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a "
                    f"{type(x).__qualname__} holding tensors, which is not a pytree container "
                    "thunder_mlir can unpack; return tensors in tuples, lists or dicts")
        writes = objects.writes()
        # tensors assigned to attributes of the module tree (module_attributes.py): state
        # outputs too, set on their holders after every run (function._object_results)
        attribute_tensors = [
            (path, objects.describe(v, f"attribute '{'.'.join(path)}' of the module"))
            for path, v in monitor.recorder.tensor_writes.values()]
        cpu_scalars.check_outputs(trace, [(f"output {i}", x) for i, x in enumerate(out_leaves)]
                                  + [("a tensor stored on an input object", p)
                                     for p in objects.tensors])
        # the tensors written to input objects or returned inside objects: program outputs
        # after the function's own (state outputs), before the write-backs; one that is also
        # an output comes back as that output (aliasing.output_views)
        results += [p.value for p in objects.tensors]
        trace.objects = (writes, out_objects, objects.tensors, attribute_tensors) \
            if writes or out_objects or attribute_tensors else None
        # intermediates two outputs are views of: hidden outputs, the views regenerated
        # from them after the run (aliasing.shared_bases)
        trace.shared_bases = [] if not output_bases else aliasing.shared_bases(
            trace.inputs, [x for x in out_leaves if type(x) is TensorProxy] + objects.tensors)
        results += [p.value for p in trace.shared_bases]
        written = sorted(trace.mutated_inputs.items())
        news = [p for _, p in written]
        code_ = runtime_checks.code(trace) if trace.checks else None
        trace.writes_guarded = False
        if guard_writes and code_ is not None and news:  # (donated: cannot be undone)
            olds = [TensorProxy(trace.entry.arguments[i], p.tshape, p.tdtype, p.tdevice)
                    for i, p in written]
            guarded = runtime_checks.unless_failed(trace, code_, news, olds)
            if guarded is not None:
                news, trace.writes_guarded = guarded, True
        results += [p.value for p in news]
        if code_ is not None:  # after the write-backs: the checks' code (runtime_checks.py)
            results.append(code_.value)
        functionalization.emit_unversioned_reads(trace)  # (read by the grad pass)
        region_reads.emit_pairs(trace, region_reads.RECOMPUTE_READ, trace.recompute_reads)
        trace.finish(results)
        tail = len(trace.mutated_inputs) + (1 if trace.checks else 0)
        if tail:  # the trailing results (write-backs, the checks' code): not differentiated
            trace.func_op.attributes[WRITE_BACKS_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), tail)
    monitor.finish()
    return trace, out_spec, out_leaves, monitor


def _forwarded_inputs(plan, n: int, output_views: list) -> tuple[int, ...]:
    """The positions among the first ``n`` program outputs that ``plan`` returns as one of
    its input tensors (the program returns an argument unchanged: ``x.clone()`` and
    decompositions that fold to their operand do) and that ``output_views`` does not make
    eager's view of an input: eager returns a new tensor there, so the runtime copies it
    before writing inputs back (``copy_outputs``)."""
    outputs, n_inputs = getattr(plan, "outputs", None), getattr(plan, "n_inputs", 0)
    if outputs is None:
        return ()
    views = {r[0] for r in output_views if r[1][0] != "copy"}
    return tuple(j for j, o in enumerate(outputs[:n]) if o < n_inputs and j not in views)


def compile_function(fn: Callable, args, kwargs, leaves, spec,
                     sharp_edges: str = "warn", executors=(), joint: str | None = None,
                     watch=(), dynamic_dims=None, known_values=(), unbacked: bool = False,
                     recompile_limit: int = 8, guess_sizes: bool = True,
                     donate_writes: bool = False) -> CacheEntry:
    """Trace, transform, lower and compile ``fn`` for these inputs (under COMPILE_LOCK).
    ``executors``: user executors (thunder_mlir.extend), in priority order. ``joint``:
    "grad" or "value_and_grad" compiles the gradient program of ``thunder_mlir.grad``
    (passes/joint.py) instead of the function. ``watch``: (object, description) pairs
    whose attribute reads become guards (guards.py). ``dynamic_dims``: tensor index ->
    {dim: reason} traced as size symbols (dynamic.py); raises DynamicShapeFallback when
    the program cannot be compiled with them. ``known_values``: Python values of tensors
    already known, in query order (value_specialization.py computes the others).
    ``unbacked``: trace data-dependent output sizes as unbacked size symbols (raises
    DynamicShapeFallback where the program cannot keep them symbolic), with guessed hints
    where ``guess_sizes`` (frontend/unbacked_sizes.py ``guess``), else with the values
    the program prefixes compute. ``donate_writes``: the inputs the program writes are
    kept resident in XLA's memory and donated to it where it can (runtime/resident.py)."""
    from thunder_mlir.executors.extend import compiling
    from thunder_mlir.ir import implementations

    check_tensor_inputs(leaves, lambda: _paths(args, kwargs))  # sparse, nested, ...
    # the implementations this compilation registers live as long as its cache entry, so
    # that every stage's symbols resolve while the function lives (ir/implementations.py)
    with compiling(executors) as ext, implementations.holding() as held:
        entry = _compile(fn, leaves, spec, sharp_edges, ext, joint, watch, dynamic_dims,
                         known_values, unbacked, recompile_limit, guess_sizes,
                         donate_writes)
    entry.implementations = held
    return entry


def program_name(fn) -> str:
    """A compiled program in error messages: the jitted function (a module: its class's
    ``forward``; ``ThunderModule`` jits ``partial(_functional_forward, module)`` and
    ``partial(_functional_method, method)``) and where it is defined, e.g. "`mlp` (defined
    at model.py:12)"."""
    while isinstance(fn, functools.partial) and fn.args:  # the module or method it runs
        fn = fn.args[0]
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = inspect.unwrap(getattr(target, "__func__", target))
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    code = getattr(target, "__code__", None)
    where = f" (defined at {code.co_filename}:{code.co_firstlineno})" \
        if isinstance(code, types.CodeType) else ""
    return f"the compiled program of `{name}`{where}"


def _compile(fn: Callable, leaves, spec, sharp_edges: str, ext,
             joint: str | None = None, watch=(), dynamic_dims=None,
             known_values=(), unbacked: bool = False, recompile_limit: int = 8,
             guess_sizes: bool = True, donate_writes: bool = False) -> CacheEntry:
    from thunder_mlir.executors import execution_transform  # noqa: F401 (registers it)
    from thunder_mlir.transforms.grad import DIFF_OUTPUTS, backward_error, output_reach, \
        reached_inputs
    from thunder_mlir.transforms.registry import PassContext, parse_pipeline, pipeline_string

    from thunder_mlir.runtime.plan import build_plan, place_small_programs

    stages: list[Stage] = []
    t0 = time.perf_counter()
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    # written inputs kept resident and donated: a training step's, and every program's
    # on a GPU (Target.resident_writes); their writes are then guarded by the checks where
    # a failed check leaves the process running (Target.guard_writes)
    target = Target.of(_program_device(tensors)[0])
    donate_writes = donate_writes or target.resident_writes
    floats = [t.is_floating_point() or t.is_complex() for t in tensors]
    # joint: the gradient of every floating-point input (thunder_mlir.grad)
    wrt = floats if joint else [t.requires_grad and f for t, f in zip(tensors, floats)]
    known = list(known_values)
    # unbacked sizes are traced with guessed hints (frontend/unbacked_sizes.py ``guess``):
    # the query numbers guessed, None once a trace with guesses failed
    guessed: set | None = set() if unbacked and guess_sizes else None
    no_guess: set[int] = set()  # queries whose guessed sizes a guard pinned: computed
    while True:  # each Python value of a tensor the trace needs: its prefix computes it
        try:
            trace, out_spec, out_leaves, monitor = trace_function(
                fn, leaves, spec, sharp_edges, grad_inputs=wrt if joint else None,
                watch=watch, dynamic_dims=dynamic_dims,
                # (compile_only: no prefix runs on the target's device to compute a value;
                # the trace raises DataDependentControlFlowError naming the line)
                known_values=None if Target.of(_program_device(tensors)[0]).compile_only
                else known,
                unbacked=unbacked, recompile_limit=recompile_limit, guessed=guessed,
                no_guess=no_guess, index_checks=True,
                guard_writes=donate_writes and target.guard_writes,
                output_bases=not joint)
            # (unbacked sizes: a guard relating two of them)
            trace.shape_env.check_unbacked_guards(trace.unbacked_groups)
            pinned = {k for sym, k in trace.guessed_symbols.items()
                      if trace.shape_env.guards_of([sym])}
            if pinned:  # a branch on a guessed size, or one read as an int, took the
                # guessed hint and would fail at this call's run: those sizes are computed
                known, guessed = list(known_values), set()
                no_guess |= pinned
                continue
            break
        except ValueNeeded as need:
            try:
                value = value_specialization.prefix_value(need, ext, tensors)
                known = need.trace.known_values[:need.index] + [value]
            except ValueGuardFailed as failed:  # a guessed size is 0 or 1 at this call
                known = need.trace.known_values[:failed.index] + [failed.observed]
                guessed = {i for i in guessed if i < failed.index}
        except Exception:  # noqa: BLE001 - a guessed hint the program cannot take
            if not guessed:
                raise
            known, guessed = list(known_values), None  # trace with the real values
    module = trace.module
    env = trace.shape_env
    # (before the passes rewrite the values the proxies hold)
    output_views = [] if joint else aliasing.output_views(
        trace.inputs, [x for x in out_leaves if type(x) is TensorProxy] +
        (trace.objects[2] if trace.objects else []), trace.shared_bases,
        trace.input_restrides)
    eager_backward_error = differentiability.backward_error(
        [x for x in out_leaves if type(x) is TensorProxy])
    # the outputs eager's autograd would track (differentiability.py): grad mode at the
    # call and inside the program (no_grad/enable_grad regions), detach, op derivatives
    # (pytrees.py; then the hidden shared bases of outputs, aliasing.shared_bases)
    state_outs = (trace.objects[2] if trace.objects else []) + trace.shared_bases
    diff_outputs = [x.requires_grad for x in out_leaves if type(x) is TensorProxy] + \
        [x.requires_grad for x in state_outs]
    needs_grad = any(diff_outputs) or joint is not None
    if env.sources and symbolic.has_symint(output_views):  # replayed on real tensors
        raise DynamicShapeFallback("an output is a view of an input made with symbolic "
                                   "sizes (eager's view is replayed with concrete ones)")
    if env.sources and needs_grad:
        raise DynamicShapeFallback("gradients through symbolic sizes are not supported: "
                                   "a program that needs a backward is compiled for static "
                                   "shapes")
    # (an input that requires grad written under no_grad() keeps its gradient path, as
    # eager's: frontend/functionalization.py; one written otherwise is eager's leaf error)
    # (inputs written with a value that requires grad: the new value is a differentiable
    # output, copied into the caller's tensor by a copy_ autograd records: function.py)
    written_grad = [i for i, p in sorted(trace.mutated_inputs.items())
                    if p.requires_grad and not getattr(p, "_no_grad_written", False)
                    and not getattr(p, "_eager_accepted_write", False)]
    refused = [i for i in written_grad if tensors[i].requires_grad] if joint else []
    if needs_grad and refused:
        names = [_paths_of_tensors(leaves, spec)[i] for i in sorted(refused)]
        raise NotImplementedError(
            f"in-place updates of inputs that require grad are not supported ({', '.join(names)}"
            "); use the out-of-place form (inputs that do not require grad, such as "
            "buffers, may be updated in place)")
    mixed = [m for m in trace.unversioned_mixed if m[0].value != m[1]]
    if needs_grad and mixed:
        _, _, line, op = mixed[0]
        raise NotImplementedError(
            f"{line}\n  {op} saves for backward a tensor read through `.data`, and that "
            "memory is written later in the function. Eager's backward reads the written "
            "memory there, and the values the op computed (saved with it) as they were; "
            "thunder_mlir reproduces this only for ops that save their inputs alone. Read a "
            "copy (`x.data.clone()`), or write the memory after the backward.")
    if needs_grad and trace.checkpoint_writes:
        raise NotImplementedError(
            f"{trace.checkpoint_writes[0]}\n  a checkpointed function writes in place into a "
            "tensor from outside it (batch_norm's running statistics, a buffer): eager's "
            "backward re-runs the function and writes it a second time, which thunder_mlir "
            "does not reproduce. Move the write out of the checkpoint, or run that module "
            "in eval mode.")
    stale = region_reads.stale_recomputation(trace) if needs_grad else None
    if stale is not None:
        where, what = stale
        raise NotImplementedError(
            f"{where}\n  {what}. Memory the checkpointed function reads from outside it "
            "is written after the checkpoint, and eager's backward re-runs the function on "
            "the written memory; thunder_mlir's backward does not reproduce this. Write the "
            "memory after the backward, or read a copy (`x.clone()`) inside the checkpoint.")
    if needs_grad and trace.unpaired_reads and eager_backward_error is None:
        _, _, where = trace.unpaired_reads[0]
        raise NotImplementedError(
            f"{where}\n  a tensor read inside a torch.cond or while_loop region (through "
            "`.data`, or by a checkpointed function) is written later in the function. "
            "Eager's backward reads that memory as written; thunder_mlir pairs such reads "
            "with their final value only outside cond/while regions. Read a copy "
            "(`x.clone()`), or write the memory after the backward.")
    n_tail = len(trace.mutated_inputs) + (1 if trace.checks else 0)
    # the trailing results: the written inputs' new values (differentiated where they
    # require grad, not in a gradient program), the checks' code
    tail_diff = [i in written_grad and not joint for i in sorted(trace.mutated_inputs)] + \
        [False] * (1 if trace.checks else 0)
    if needs_grad:  # grad sees composites, so composite-level VJP rules can apply
        extra = len(trace.entry.arguments) - len(tensors)  # the seed: not differentiated
        trace.func_op.attributes["thunder.requires_grad"] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(w, trace.ctx) for w in wrt + [False] * extra], trace.ctx)
        trace.func_op.attributes[DIFF_OUTPUTS] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(d, trace.ctx)
             for d in diff_outputs + tail_diff], trace.ctx)
    # (the grad attributes are part of the initial stage: thunder-opt's grad reads them)
    stages.append(Stage("initial", _asm(module), time.perf_counter() - t0))
    # Each stage is one pass of the registry thunder-opt uses, built from its pipeline
    # element (the Stage records the element, so thunder-opt reproduces the stage); the
    # target decides which (Target.elements); the xla-compile stage lists its choices.
    elements = target.elements(needs_grad, joint, ext.executors)
    ctx = PassContext(compile_state=ext, device=trace.device)
    for stage_name, element in elements:
        t = time.perf_counter()
        passes = parse_pipeline(element)
        for pass_ in passes:
            pass_(module, ctx)
        stages.append(Stage(stage_name, _asm(module), time.perf_counter() - t,
                            pipeline_string(passes)))
    t = time.perf_counter()
    capture = target.compile_only
    aliased = {}  # written inputs aliased with their new values (runtime/resident.py)
    if needs_grad and not joint:
        from thunder_mlir.transforms.grad import residual_bytes

        from thunder_mlir.runtime.autograd import mark_donated_residuals

        plan, texts = build_plan(module, trace.device, "forward", capture)
        plan.name_program(program_name(fn) + ", its forward")
        # residuals only the backward reads: donated to it (their memory holds gradients)
        mark_donated_residuals(module, plan, sum(type(x) is TensorProxy for x in out_leaves)
                               + len(state_outs) + n_tail)
        bwd, btexts = build_plan(module, trace.device, "backward", capture)
        bwd.name_program(program_name(fn) + ", its backward")
        texts.update(btexts)
    else:
        if donate_writes and trace.mutated_inputs and \
                (not trace.checks or getattr(trace, "writes_guarded", False)
                 or not target.guard_writes) \
                and not trace.value_sites and not joint:
            from thunder_mlir.runtime.resident import mark_aliased_writes

            aliased = mark_aliased_writes(module, sorted(trace.mutated_inputs),
                                          trailing=1 if trace.checks else 0)
        plan, texts = build_plan(module, trace.device, compile_only=capture)
        plan.name_program(program_name(fn))
    if capture:  # (pipeline.compile_only: no XLA here)
        stages.append(Stage("xla-compile", f"{target.describe()}\n// {len(texts)} region(s) "
                            "captured, not compiled", 0.0))
        # the written inputs not aliased with their new values: copied back by torch after
        # each run (runtime/write_back.py), each byte read and written
        copied = sum(t.element_size() * t.numel() for i, t in enumerate(tensors)
                     if i in trace.mutated_inputs and i not in aliased)
        positions = [i for i, x in enumerate(out_leaves) if type(x) is TensorProxy]
        lowered = LoweredProgram(
            module, plan, out_spec, [None if type(x) is TensorProxy else x for x in out_leaves],
            positions, [tuple(out_leaves[i].tshape) for i in positions], len(state_outs),
            sorted(trace.mutated_inputs), [(e, m) for _, e, m in trace.checks],
            list(trace.fallbacks), output_views,
            _forwarded_inputs(plan, len(positions) + len(state_outs), output_views),
            monitor.recorder.replay(), monitor.guards + monitor.recorder.guards, env,
            needs_grad)
        raise ProgramsCaptured(
            [_captured_program(n, p, module) for n, p in
             ([("forward", plan), ("backward", bwd)] if needs_grad and not joint
              else [("program", plan)])], stages,
            _computed_residual_bytes(module) if needs_grad and not joint else 0, copied,
            lowered)
    compiled = f"{target.describe()}\n// {len(texts)} region(s) compiled"
    for s in plan.steps:  # (runtime/bounded_shapes.py)
        if getattr(s, "bounds", None):
            compiled += f"; {s.name}: one executable for every size up to " \
                f"{', '.join('x'.join(map(str, b)) for b in s.bounds)} (bounded dynamic shapes)"
    # inference programs only: a training step's forward and backward stay on the main pool
    # (runtime/plan.py place_small_programs says why)
    placement = None if needs_grad or not target.small_program_pool else \
        place_small_programs([plan], texts)
    if placement:
        compiled += f"; {placement}"
    if needs_grad and not joint and any(getattr(s, "donated", ()) for s in bwd.steps):
        # the backward's donated residuals: the module as compiled, donor attributes shown
        compiled += "; the module as compiled:\n" + _asm(module)
    stages.append(Stage("xla-compile", compiled, time.perf_counter() - t))
    positions = [i for i, x in enumerate(out_leaves) if type(x) is TensorProxy]
    consts = [None if type(x) is TensorProxy else x for x in out_leaves]
    entry = CacheEntry(plan, out_spec, consts, positions, stages, list(trace.fallbacks),
                       sorted(trace.mutated_inputs),
                       guards=monitor.guards + monitor.recorder.guards,
                       attribute_writes=monitor.recorder.replay())
    entry.symbolic_consts = [i for i, c in enumerate(consts) if symbolic.has_symint(c)]
    entry.fresh_outputs = _forwarded_inputs(plan, len(positions) + len(state_outs),
                                            output_views)
    entry.output_views = [r for r in output_views if r[0] not in entry.fresh_outputs]
    entry.strided_inputs = aliasing.strided_recipes(entry.output_views)
    entry.restrided_inputs = tuple(sorted({i for _, (kind, i), _ in entry.output_views
                                           if kind == "restride"}))
    if not needs_grad and aliased and plan._single and not entry.fresh_outputs:
        from thunder_mlir.runtime.resident import ResidentWrites

        entry.resident = ResidentWrites(plan, entry.mutated_inputs, aliased,
                                        trailing=1 if trace.checks else 0)
        compiled = stages[-1].text + "; written inputs aliased with their new values " \
            f"(resident, donated): {sorted(aliased)}"
        stages[-1] = Stage("xla-compile", compiled, stages[-1].seconds)
    entry.checks = [(error, message) for _, error, message in trace.checks]
    if trace.value_sites:  # value guards (frontend/value_guards.py)
        entry.value_path = trace.known_values[:len(trace.value_sites)]  # (guesses too)
        entry.value_sites = list(trace.value_sites)
        entry.value_group = [entry]
        entry.value_accepts = dict(trace.value_accepts)  # (queries of unbacked sizes)
    if env.unbacked:  # data-dependent sizes kept symbolic: cache_info lists them
        entry.unbacked_sizes = {f"s{k}": env.reasons[k] for k in env.unbacked}
    if joint and trace.input_restrides:
        raise UnsupportedError("thunder_mlir.grad of a function that changes the shape or "
                               "strides of an input in place (t_, transpose_, squeeze_, "
                               "unsqueeze_, as_strided_) is not supported: use the "
                               "out-of-place view (x = x.t())")
    if trace.objects:
        if joint:
            raise UnsupportedError("thunder_mlir.grad of a function that writes tensors to "
                                   "its input objects or returns objects is not supported")
        entry.object_state = (trace.objects[0], trace.objects[1], len(trace.objects[2]))
        entry.attribute_tensors = trace.objects[3]
    if env.input_sources:  # dynamic shapes (ir/symbolic.py): guards checked at every call
        n = len(env.input_sources)
        entry.sym_sources, entry.sym_reasons = list(env.input_sources), env.reasons[:n]
        entry.sym_check = env.guard_function()
        entry.shape_guards = env.describe_guards()
        entry.shape_guard_terms = list(env.guards)
    if joint:
        entry.set_joint_layout(joint == "value_and_grad", sum(wrt))
    elif needs_grad:
        entry.backward_plan = bwd
        # the forward's outputs: the program's, then the write-backs (not differentiable)
        entry.num_outputs = len(positions) + len(state_outs) + n_tail
        entry.diff_outputs = diff_outputs + tail_diff
        entry.dirty_writes = frozenset(i for k, i in enumerate(sorted(trace.mutated_inputs))
                                       if tail_diff[k])
        entry.backward_error = backward_error(module) or eager_backward_error
        entry.reentrant_checkpoint = trace.reentrant_checkpoint
        entry.unversioned_inputs = tuple(region_reads.inputs_read_unversioned(trace))
        reached = iter(reached_inputs(module))
        entry.wrt = [i for i, w in enumerate(wrt) if w and next(reached)]
        entry.output_reach = output_reach(module)
        # outputs eager's graph saves: a write into one after the call fails the backward
        entry.saved_outputs = tuple(differentiability.saved_outputs(
            [x for x in out_leaves if type(x) is TensorProxy]))
        entry.residual_bytes = residual_bytes(module)
    return entry


def _asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)
