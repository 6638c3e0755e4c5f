"""The executable plan: the ``@computation`` of a lowered module turned into Python steps.

Every SSA value of ``@computation`` gets a slot. ``func.call @xla_region_k`` becomes an
``XlaStep`` (a compiled executable), ``thunder.executor_call`` a ``TorchStep`` (the Python
implementation its ``impl`` symbol names: ``torch_fallback.implementation_of``). Slots
hold torch tensors or XLA buffers and are converted lazily, so values that flow from one
XLA region to another never visit torch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch_mlir import ir

from thunder_mlir.errors import CompileError, ExecutionError, ThunderError
from thunder_mlir.frontend.torch_fallback import implementation_of
from thunder_mlir.ir import attrs
from thunder_mlir.ir.dialect import SEED_ATTR
from thunder_mlir.runtime import bounded_shapes, dlpack, jax_internals, xla
from thunder_mlir.runtime.refine import ShapeSpecializedExecutable, has_symbolic_sizes
from thunder_mlir.runtime.xla import ALIAS_ATTR, DONOR_ATTR, compile_stablehlo, jax_device


@dataclass
class XlaStep:
    name: str
    executable: object
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    handlers: list | None = None  # jaxlib result handlers, set by the first run
    # the executable's arguments marked ``jax.buffer_donor`` (DONOR_ATTR): XLA may write
    # its results into their memory, and the jax arrays passed there are deleted by a run
    donated: tuple[int, ...] = ()
    # for error messages (execution_error): the program the step belongs to ("the
    # compiled program of `mlp` (defined at model.py:12)", set by Plan.name_program), and
    # the StableHLO whose signature gives the expected arguments where the executable's
    # own parameter shapes do not (an SPMD program's are per shard)
    program: str = "a compiled program"
    text: str | None = None
    # a region compiled once for bounded dynamic shapes (``_BoundedValues``): the bound of
    # each argument with symbolic sizes
    bounds: tuple | None = None

    def execute(self, args: list, device) -> list:
        """Run the executable on XLA buffers ``args``; its output arrays. The first run
        disassembles the result and builds jaxlib's C++ result handlers from its outputs
        (``result_handlers``); later runs consume results with them, which skips the
        per-output sharding objects ``execute``/``disassemble`` make (~3 us each). A
        ``ShapeSpecializedExecutable``'s output shapes change per call: it gets none."""
        try:
            res = self.executable.execute_sharded(args)
            if self.handlers is not None:
                arrays = res.consume_with_handlers(self.handlers)
                if device.platform == "cpu" and not xla.runs_inline(device):
                    wait_for(arrays)
                return arrays
            arrays = [r[0] for r in res.disassemble_into_single_device_arrays()]
            if device.platform == "cpu" and not xla.runs_inline(device):
                wait_for(arrays)
        except ThunderError:
            raise
        except Exception as e:  # noqa: BLE001 - every XLA runtime error: one of ours
            raise execution_error(self, args, e) from e
        # a handler fixes its array's shape: a region with symbolic sizes (one executable
        # per concrete shape, runtime/refine.py) keeps disassembling
        if type(self.executable) is not ShapeSpecializedExecutable:
            self.handlers = result_handlers(arrays, device)
        return arrays


def wait_for(arrays) -> None:
    """Block until ``arrays`` (one run's results) are computed: a CPU run on a client that
    dispatches asynchronously (``xla.runs_inline`` false) then returns as an inline one
    does, with its inputs read and its results written (the CPU runtime relies on it)."""
    for a in arrays:
        a.block_until_ready()


@dataclass
class TorchStep:
    name: str
    fn: Callable
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


class Plan:
    """Run a partitioned, lowered program on torch tensors.

    ``run(inputs)`` takes the flat list of input tensors (in ``@computation`` argument
    order) and returns the flat list of output tensors (torch, on the program's device).
    A ``seeded`` plan (a program with random ops) takes one input fewer than its function:
    ``run`` appends a seed drawn from torch's generator (``draw_seed``).
    """

    def __init__(self, steps: Sequence, n_slots: int, n_inputs: int,
                 outputs: Sequence[int], device: torch.device, seeded: bool = False,
                 compile_only: bool = False):
        self.steps = list(steps)
        self.n_slots = n_slots
        self.n_inputs = n_inputs
        self.outputs = tuple(outputs)
        self.device = device
        self.seeded = seeded
        self._on_cpu = device.type == "cpu"
        # compile_only (pipeline.compile_only): the device is not here; the plan is read
        # (its steps, their StableHLO as ``executable``), never run
        self._jax_device = None if compile_only else jax_device(device)
        self._imports = None if compile_only else self._argument_imports()
        # The common case — one XLA region reading only program inputs (in any order: a
        # module's parameters come sorted by name) whose outputs are its results (in any
        # order, one possibly twice) or program inputs (a training forward returns the
        # weights its backward reads) — skips the slot machinery.
        only = self.steps[0] if len(self.steps) == 1 else None
        self._single = (type(only) is XlaStep and all(i < n_inputs for i in only.inputs)
                        and all(o in only.outputs or o < n_inputs for o in self.outputs))
        if self._single:
            self._step = only
            # region argument k is program input _order[k]; output j is region result
            # _pick[j] when >= 0, else program input ~_pick[j] (None: the identity)
            self._order = None if only.inputs == tuple(range(n_inputs)) else only.inputs
            self._pick = None if only.outputs == self.outputs else \
                tuple(only.outputs.index(o) if o in only.outputs else ~o for o in self.outputs)
        self._call = self._run_single  # the single region's run; prepared after a first run
        # A program with random ops takes a seed as its last input, drawn here at each call
        # (programs without keep their run methods untouched).
        if seeded:
            self.run = self._run_single_seeded if self._single else self._run_seeded
        elif self._single:
            self.run = self._run_single

    def _run_single(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        step = self._step
        args = inputs if self._order is None else [inputs[i] for i in self._order]
        outs = step.execute(self._imports.buffers(args), self._jax_device)
        if step.handlers is not None:  # fixed output shapes: later calls take a closure
            self._call = self._prepared()
            if self.run == self._run_single:
                self.run = self._call
        return _select(outs, inputs, self._pick, self._on_cpu)

    def _prepared(self) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
        """``_run_single`` once the region's result handlers exist, with what it looks up
        bound beforehand (~0.4 us of a 2x2 add's ~9 us in Plan.run)."""
        buffers, order, pick = self._imports.buffers, self._order, self._pick
        step = self._step
        execute, handlers = step.executable.execute_sharded, step.handlers
        on_cpu = self._on_cpu
        if on_cpu and not xla.runs_inline(self._jax_device):  # (step.execute waits)
            dev = self._jax_device

            def run_waiting(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                args = buffers(inputs if order is None else [inputs[i] for i in order])
                return _select(step.execute(args, dev), inputs, pick, on_cpu)
            return run_waiting
        # (a try block costs nothing until it raises: Python 3.11's zero-cost exceptions)
        if order is None and pick is None:  # the common case
            def run(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                args = buffers(inputs)
                try:
                    outs = execute(args).consume_with_handlers(handlers)
                except Exception as e:  # noqa: BLE001 - every XLA runtime error: ours
                    raise execution_error(step, args, e) from e
                return dlpack.to_torch_many(outs, on_cpu)
            return run

        def run(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            args = buffers(inputs if order is None else [inputs[i] for i in order])
            try:
                outs = execute(args).consume_with_handlers(handlers)
            except Exception as e:  # noqa: BLE001 - every XLA runtime error: ours
                raise execution_error(step, args, e) from e
            return _select(outs, inputs, pick, on_cpu)
        return run

    def _run_single_seeded(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        # the seed, a new tensor at every call, is imported at its position
        return self._call([*inputs, draw_seed(self.device)])

    def _run_seeded(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return Plan.run(self, [*inputs, draw_seed(self.device)])

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        slots: list = [None] * self.n_slots
        slots[:self.n_inputs] = inputs
        dev, on_cpu, n_inputs = self._jax_device, self._on_cpu, self.n_inputs
        imp = self._imports.buffer
        for step in self.steps:
            if type(step) is XlaStep:
                args = [v if not isinstance(v, torch.Tensor) else
                        (imp(i, v) if i < n_inputs else dlpack.to_xla(v, dev))
                        for i, v in ((i, slots[i]) for i in step.inputs)]
                outs = step.execute(args, dev)
            else:
                args = [v if isinstance(v, torch.Tensor) else dlpack.to_torch(v, on_cpu)
                        for v in (slots[i] for i in step.inputs)]
                outs = step.fn(*args)
            for i, v in zip(step.outputs, outs):
                slots[i] = v
        return [v if isinstance(v, torch.Tensor) else dlpack.to_torch(v, on_cpu)
                for v in (slots[i] for i in self.outputs)]

    def use_jax_device(self, dev) -> None:
        """Run on jax device ``dev`` (arguments imported there); before the first run, and
        with every XLA step's executable already loaded on ``dev``'s client."""
        if any(type(s) is XlaStep and s.handlers is not None for s in self.steps):
            raise RuntimeError("internal: a plan changes its device after its first run")
        self._jax_device = dev
        self._imports = self._argument_imports()

    def _argument_imports(self) -> dlpack.ArgumentImports:
        """The per-position import cache of the plan's inputs, on ``_jax_device``."""
        # inputs passed again unchanged (parameters, repeated arguments) keep their buffer,
        # except at a donated argument (its buffer is deleted by the run). Positions are
        # program inputs (``run``) or region arguments (``_run_single``): both are excluded.
        # Without symbolic sizes every input's shape is fixed by the cache key of the plan.
        fixed = not any(type(s) is XlaStep and type(s.executable) is ShapeSpecializedExecutable
                        for s in self.steps)
        donated = {p for s in self.steps if type(s) is XlaStep
                   for p in (*s.donated, *(s.inputs[k] for k in s.donated))}
        return dlpack.ArgumentImports(self._jax_device, self.n_inputs, self._on_cpu, fixed,
                                      uncached=donated)

    def name_program(self, program: str) -> None:
        """Name the program this plan runs in the errors its XLA steps raise
        (``execution_error``): e.g. "the compiled program of `mlp` (defined at
        model.py:12), its backward"."""
        for s in self.steps:
            if type(s) is XlaStep:
                s.program = program

    @property
    def fallback_count(self) -> int:
        return sum(1 for s in self.steps if type(s) is TorchStep)


def _select(outs: list, inputs: Sequence[torch.Tensor], pick: tuple[int, ...] | None,
            on_cpu: bool) -> list[torch.Tensor]:
    """A single-region plan's outputs: region result ``pick[j]`` (exported to torch, once
    per use, as the slot loop does) or, where ``pick[j] < 0``, program input ``~pick[j]``
    itself; ``pick`` None: the region results in order."""
    if pick is None:
        return dlpack.to_torch_many(outs, on_cpu)
    exported = iter(dlpack.to_torch_many([outs[j] for j in pick if j >= 0], on_cpu))
    return [next(exported) if j >= 0 else inputs[~j] for j in pick]


_TENSOR_TYPE = re.compile(r"%arg(\d+): tensor<((?:[^<>]|<[^<>]*>)*)>")
_DIMS = re.compile(r"((?:[0-9?]+x)*)(.+)")  # 2x?xf32 -> ("2x?x", "f32")
_HLO_TYPE = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\]")  # f32[2,3]{1,0} -> ("f32", "2,3")
# element types in XLA's notation (f32, s64, pred, c64), from numpy's dtype names (jax
# arrays' ``dtype.name``) and from MLIR's (a StableHLO signature's)
_HLO_ELEMENT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
                "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8",
                "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "pred",
                "complex64": "c64", "complex128": "c128"}
_MLIR_TO_HLO = {"i1": "pred", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
                "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64",
                "complex<f32>": "c64", "complex<f64>": "c128"}


def expected_arguments(text: str) -> list[tuple[tuple[str, ...], str]]:
    """The argument types of a region's ``@main`` (StableHLO text): per argument, its
    dims (strings: ``"2"``, or ``"?"`` for a symbolic size) and element type in XLA's
    notation (``f32``, ``s64``, ``pred``). ValueError where the text has no ``@main``."""
    header = text[text.index("@main("):]
    header = header[:header.index("{\n")] if "{\n" in header else header
    out = []
    for m in _TENSOR_TYPE.finditer(header):
        dims, element = _DIMS.match(m.group(2)).groups()
        out.append((tuple(dims.split("x")[:-1]), _MLIR_TO_HLO.get(element, element)))
    return out


def executable_arguments(executable) -> list[tuple[tuple[str, ...], str]] | None:
    """The parameter types of a compiled executable (its HloModule's
    ``entry_computation_layout``), as ``expected_arguments`` gives them; None where this
    jaxlib does not tell them."""
    try:
        first = executable.hlo_modules()[0].to_string().split("\n", 1)[0]
    except Exception:  # noqa: BLE001 - another jaxlib, or not a LoadedExecutable
        return None
    m = re.search(r"entry_computation_layout=\{\((.*)\)->", first)
    if m is None:
        return None
    return [(tuple(d for d in dims.split(",") if d), element)
            for element, dims in _HLO_TYPE.findall(m.group(1))]


def describe_buffer(a) -> str:
    """A buffer (jax array) in XLA's notation, ``f32[2,3]``."""
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is None or dtype is None:
        return type(a).__name__
    name = getattr(dtype, "name", str(dtype))
    return f"{_HLO_ELEMENT.get(name, name)}[{','.join(str(d) for d in shape)}]"


def execution_error(step: XlaStep, args: Sequence, err: BaseException) -> ExecutionError:
    """The ``ExecutionError`` for XLA's error ``err`` running ``step`` on buffers ``args``:
    names the program (``step.program``) and region, and every argument position whose
    buffer's shape or dtype differs from the executable's parameters (``step.text``'s
    signature where set, else the compiled executable's own, else the StableHLO of a
    ``ShapeSpecializedExecutable``, whose ``?`` dims match any size), with both types in
    XLA's notation; then XLA's message. A disagreement means the program was traced with
    other metadata than it runs with: a thunder_mlir bug, which the message asks to
    report."""
    expected = None
    text = step.text if step.text is not None else getattr(step.executable, "text", None)
    if step.text is None:
        expected = executable_arguments(step.executable)
    if expected is None and text is not None:
        try:
            expected = expected_arguments(text)
        except ValueError:  # no @main in the text: no comparison
            expected = None
    diffs = []
    if expected is not None:
        if len(expected) != len(args):
            diffs.append(f"{len(args)} buffers given, the executable takes "
                         f"{len(expected)}")
        for k, (a, (dims, element)) in enumerate(zip(args, expected)):
            got = describe_buffer(a)
            shape = tuple(str(d) for d in getattr(a, "shape", ()))
            dtype = getattr(getattr(a, "dtype", None), "name", None)
            if len(shape) != len(dims) or _HLO_ELEMENT.get(dtype, dtype) != element \
                    or any(d != "?" and d != s for d, s in zip(dims, shape)):
                diffs.append(f"argument {k}: expected {element}[{','.join(dims)}], "
                             f"got {got}")
    xla = str(err).strip() or type(err).__name__
    if diffs:
        return ExecutionError(
            f"XLA could not run {step.program}: its region {step.name} was given buffers "
            "whose shapes or dtypes differ from what its executable expects:\n  "
            + "\n  ".join(diffs) + "\nthunder_mlir traced the program with other metadata "
            "than it runs with: this is a thunder_mlir bug; please report it with this "
            f"message. XLA said: {xla}")
    return ExecutionError(f"XLA failed while running {step.program} (its region "
                          f"{step.name}): {xla}")


def result_handlers(arrays, device) -> list | None:
    """jaxlib's C++ result handlers making arrays like ``arrays`` (shape, dtype) on jax
    ``device``, as ``jax._src.array._array_global_result_handler`` builds them; None
    where this jaxlib lacks the private API (the caller then keeps disassembling)."""
    try:
        return [jax_internals.result_handler(a.shape, a.dtype, device) for a in arrays]
    except Exception:  # noqa: BLE001 - an optimization only
        return None


def place_small_programs(plans: Sequence[Plan], texts: dict[str, str]) -> str | None:
    """Move ``plans`` to the one-thread CPU client (runtime/xla.py
    ``single_thread_cpu_device``) when their XLA work is small: fewer than
    ``xla.SMALL_KERNEL_FLOPS`` floating-point operations per kernel over all their regions
    (XLA's cost analysis and optimized entry computations). ``plans`` are decided together
    because they pass XLA buffers to each other (a forward and its backward: the residual
    buffers, runtime/autograd.py), and a client cannot read another's buffers. ``texts``:
    region name -> StableHLO (``build_plan``'s second result). Plans on another device, or
    with regions compiled per concrete shape (runtime/refine.py), stay where they are.
    Returns a note for the compile stage (e.g. ``"1.6e+06 FLOP/kernel: 1-thread CPU
    client"``), or None when nothing was decided.

    ``jit`` applies it to programs without a backward only. Measured on 2 shared, loaded
    cores (torch at 2 threads, one process, interleaved): the Hugging Face tiny forwards ran
    7-24% faster (median) on the one-thread client, but their training steps (the same
    forward and backward programs, run between torch's autograd and optimizer ops on its
    2-thread OpenMP pool) ran 1.1-2.4x slower there, so they stay on the main pool."""
    steps = [s for p in plans for s in p.steps if type(s) is XlaStep]
    if not steps or any(not p._on_cpu for p in plans) or \
            any(type(s.executable) is ShapeSpecializedExecutable for s in steps):
        return None
    dev = xla.single_thread_cpu_device()
    if dev is None:  # the main client has one thread already
        return None
    per_kernel = sum(xla.flops(s.executable) for s in steps) / \
        sum(xla.kernel_count(s.executable) for s in steps)
    if per_kernel >= xla.SMALL_KERNEL_FLOPS:
        return f"{per_kernel:.2g} FLOP/kernel: {xla.cpu_pool_threads()}-thread CPU client"
    p_device = plans[0].device
    for s in steps:
        s.executable = xla.compile_stablehlo_for(texts[s.name], p_device, dev)
    for p in plans:
        p.use_jax_device(dev)
    return f"{per_kernel:.2g} FLOP/kernel: 1-thread CPU client"


def draw_seed(device: torch.device) -> torch.Tensor:
    """A 0-d int64 seed in [0, 2^63) from torch's default generator of ``device`` (so
    ``torch.manual_seed`` governs it; each draw advances the generator)."""
    return torch.empty((), dtype=torch.int64, device=device).random_()




def donated_arguments(func) -> tuple[int, ...]:
    """The argument positions of ``func`` (a ``func.func`` op) carrying ``DONOR_ATTR``
    = true or ``ALIAS_ATTR``: XLA may write results into their buffers, and PJRT deletes
    a jax array passed there when it runs."""
    func = func.operation
    if "arg_attrs" not in func.attributes:
        return ()
    return tuple(k for k, d in enumerate(ir.ArrayAttr(func.attributes["arg_attrs"]))
                 if ALIAS_ATTR in ir.DictAttr(d) or (DONOR_ATTR in ir.DictAttr(d)
                 and attrs.to_bool(ir.DictAttr(d)[DONOR_ATTR])))


def region_module_text(module: ir.Module, name: str, locations: bool = False) -> str:
    """The StableHLO of region ``name`` as a standalone module with entry ``@main``;
    ``locations``: with the ops' locations (the user's source lines)."""
    with module.context, ir.Location.unknown():
        fn = next(op.operation for op in module.body.operations
                  if op.operation.name == "func.func"
                  and ir.StringAttr(op.operation.attributes["sym_name"]).value == name)
        single = ir.Module.create()
        clone = fn.clone(ip=ir.InsertionPoint(single.body))
        clone.attributes["sym_name"] = ir.StringAttr.get("main")
        if "sym_visibility" in clone.attributes:
            del clone.attributes["sym_visibility"]
        return single.operation.get_asm(enable_debug_info=True) if locations else str(single)


def build_plan(module: ir.Module, device: torch.device, func_name: str = "computation",
               compile_only: bool = False) -> tuple[Plan, dict[str, str]]:
    """Compile every region of ``module`` and return the Plan and each region's text.
    Executor calls run the callables ``torch_fallback.implementation_of`` gives (rebuilt
    from the IR, or from ir/implementations.py's registry: MissingImplementationError
    where this process holds none). ``compile_only`` (pipeline.compile_only): nothing is
    compiled; each XLA step's ``executable`` is its StableHLO text, and the plan cannot
    run."""
    with module.context:
        comp = next(op.operation for op in module.body.operations
                    if op.operation.name == "func.func"
                    and ir.StringAttr(op.operation.attributes["sym_name"]).value == func_name)
        block = comp.regions[0].blocks[0]
        seeded = SEED_ATTR in comp.attributes
        if seeded and attrs.get_int(comp, SEED_ATTR) != len(block.arguments) - 1:
            raise RuntimeError(f"plan: the seed must be the last argument of @{func_name}")
        slot: dict[ir.Value, int] = {}
        for a in block.arguments:
            slot[a] = len(slot)
        n_inputs = len(slot)
        steps, texts = [], {}
        outputs: list[int] = []
        bounded = _BoundedValues(slot, steps)
        for op in block.operations:
            op = op.operation
            if op.name == "func.return":
                bounded.materialize(op.operands)
                outputs = [slot[v] for v in op.operands]
                break
            for r in op.results:
                slot[r] = bounded.new_slot()
            ins = tuple(slot[v] for v in op.operands)
            outs = tuple(slot[r] for r in op.results)
            if op.name == "func.call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                text = region_module_text(module, callee)
                texts[callee] = text
                donated = donated_arguments(next(
                    o for o in module.body.operations if o.operation.name == "func.func"
                    and ir.StringAttr(o.operation.attributes["sym_name"]).value == callee))
                step = None if compile_only or not has_symbolic_sizes(text) else \
                    bounded.compile(op, callee, text, device, donated)
                if step is not None:  # one executable for every size up to the bounds
                    texts[callee] = step.text
                    steps.append(step)
                    continue
                bounded.materialize(op.operands)
                # symbolic sizes: compiled per concrete input shape at run time (refine.py)
                exe = text if compile_only else ShapeSpecializedExecutable(text, device) \
                    if has_symbolic_sizes(text) else compile_stablehlo(text, device)
                steps.append(XlaStep(callee, exe, ins, outs, donated=donated))
            elif op.name == "thunder.executor_call":
                bounded.materialize(op.operands)
                callee = ir.StringAttr(op.attributes["callee"]).value
                steps.append(TorchStep(callee, None if compile_only else implementation_of(op),
                                       ins, outs))
            else:
                raise RuntimeError(f"plan: unexpected op {op.name} in @{func_name}; run "
                                   "decompose and partition first")
        n_slots = bounded.n_slots
    return Plan(steps, n_slots, n_inputs, outputs, device, seeded, compile_only), texts


class _BoundedValues:
    """``build_plan``'s regions compiled for bounded dynamic shapes
    (runtime/bounded_shapes.py), and the values they pass each other padded.

    A region all of whose ``?`` arguments are prefix slices of static tensors
    (``x[:n + 1]``: a TorchStep cuts their sources to the bound and gives the sizes) or
    padded results of an earlier bounded region is compiled once (``compile``). Its ``?``
    results come back padded to their bounds, with their sizes: a later bounded region
    takes them as they are, and any other reader gets the sized view
    (``bounded_shapes.unpadded``), a TorchStep added before the first such reader
    (``materialize``). ``padded``: SSA value -> (padded slot, size slots, bound shape);
    ``pending``: SSA value -> the TorchStep that would give its sized view."""

    def __init__(self, slot: dict, steps: list):
        self.slot, self.steps = slot, steps
        self.n_slots = len(slot)
        self.padded: dict = {}
        self.pending: dict = {}

    def new_slot(self) -> int:
        self.n_slots += 1
        return self.n_slots - 1

    def materialize(self, values) -> None:
        """Add the sized-view step of each of ``values`` that has none yet."""
        for v in values:
            step = self.pending.pop(v, None)
            if step is not None:
                self.steps.append(step)

    def compile(self, call, callee: str, text: str, device: torch.device,
                donated: tuple[int, ...]):
        """The XlaStep of region ``callee`` (StableHLO ``text``, called by ``call``)
        compiled for bounded dynamic shapes, after the feed step it needs (appended to the
        plan's steps); None (compiled per shape instead) where a ``?`` argument is neither a
        prefix slice nor a padded value, an argument with a ``?`` dimension or a slice's
        source is donated, or the rewrite or XLA refuses the program."""
        slot = self.slot
        operands = list(call.operands)
        dynamic = [i for i, v in enumerate(operands)
                   if not ir.RankedTensorType(v.type).has_static_shape]
        held = {i: self.padded[operands[i]] for i in dynamic if operands[i] in self.padded}
        found = bounded_shapes.argument_bounds(call, padded=held)
        # (the region reads the source itself: XLA must not write into it)
        sources = [src for src, _ in (found or {}).values()]
        if found is None or any(i in dynamic or operands[i] in sources for i in donated):
            return None
        order = sorted(found)
        bounds = {i: found[i][1] for i in order}
        bounds.update({i: held[i][2] for i in held})
        rewritten = bounded_shapes.bound_region(text, bounds)
        if rewritten is None:
            return None
        bounded_text, sizes, padded_results = rewritten
        try:
            exe = compile_stablehlo(bounded_text, device)
        except CompileError:
            return None
        # the feed: the slices' sources cut to the bounds, and the slices' sizes
        cut = {i: self.new_slot() for i in order}
        fed = [(i, d) for i, d in sizes if i in found]
        fed_slots = {key: self.new_slot() for key in fed}
        if order:
            self.steps.append(TorchStep(
                "bounded arguments",
                bounded_shapes.bounded_arguments([found[i][1] for i in order],
                                                 [(order.index(i), d) for i, d in fed]),
                tuple(slot[operands[i]] for i in order) +
                tuple(slot[found[i][0]] for i in order),
                tuple(cut.values()) + tuple(fed_slots.values())))
        # a padded argument's sizes, in the order of its ? dims
        size_slots = []
        for i, d in sizes:
            if i in held:
                t = ir.RankedTensorType(operands[i].type)
                k = [e for e in range(t.rank) if t.is_dynamic_dim(e)].index(d)
                size_slots.append(held[i][1][k])
            else:
                size_slots.append(fed_slots[(i, d)])
        ins = tuple(cut[i] if i in cut else held[i][0] if i in held else slot[v]
                    for i, v in enumerate(operands)) + tuple(size_slots)
        # results: a padded one into a slot of its own, its sized view made on demand
        outs = [slot[r] for r in call.results]
        extra = []
        for k in sorted({k for k, _, _ in padded_results}):
            r = call.results[k]
            dims = [(d, b) for kk, d, b in padded_results if kk == k]
            t = ir.RankedTensorType(r.type)
            bound = tuple(dict(dims).get(e, t.shape[e] if t.is_static_dim(e) else None)
                          for e in range(t.rank))
            pslot = outs[k] = self.new_slot()
            sslots = tuple(self.new_slot() for _ in dims)
            extra += sslots
            self.padded[r] = (pslot, sslots, bound)
            self.pending[r] = TorchStep("sized view", bounded_shapes.unpadded(
                [d for d, _ in dims]), (pslot,) + sslots, (slot[r],))
        # a slice read by this call alone: its step returns the view (the feed reads its
        # sizes)
        for i in order:
            v = operands[i]
            if all(u.owner == call for u in v.uses):
                step = next(s for s in self.steps if type(s) is TorchStep and
                            slot[v] in s.outputs)
                step.fn = functools.partial(step.fn, bounded=True)
        return XlaStep(callee, exe, ins, tuple(outs) + tuple(extra), donated=donated,
                       text=bounded_text, bounds=tuple(bounds[i] for i in sorted(bounds)))
