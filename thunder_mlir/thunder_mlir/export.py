"""Export: a PyTorch program as a portable StableHLO artifact that runs without torch.

    exp = thunder_mlir.export(model, ids, dynamic_shapes={"input_ids": {0: Dim("b")}})
    exp.mlir_module()                 # StableHLO text, public @main
    blob = exp.serialize()            # jax.export's own serialization (flatbuffer)
    jax.export.deserialize(blob).call(*flat_arrays)   # in a process without torch
    thunder_mlir.deserialize(blob)(ids)               # fn's signature and meaning, on torch

The program is traced, transformed and lowered by the jit's own pipeline
(``pipeline.compile_only``: the same tracing, guards, sharp edges, passes and errors, on
meta tensors, stopped before XLA); ``ProgramsCaptured.lowered`` hands back the whole
lowered module and its plan, and this module only wraps its one XLA region in a public
``@main`` with jax.export's calling convention (docs/export.md):

* ``@main``'s arguments are the flat inputs, in ``Exported.input_names`` order: a module's
  parameters and buffers first (``weights="arguments"``; sorted qualified names,
  ``params.<name>``/``buffers.<name>``), then the tensors of ``(args, kwargs)`` in pytree
  order (``args[0]``, ``kwargs['mask']``), then ``seed`` (an int64 scalar) when the program
  draws random numbers. ``weights="constants"`` folds the weights in as constants.
* Its results, in ``Exported.output_names`` order: the tensors of the output pytree
  (``output[0]``, ``output['logits']``), the new values of the inputs the program writes
  (``writes.<input name>``: eager's in-place side effects), and ``index_checks`` when the
  program indexes with tensors: an int32 scalar equal to the number of checks when every
  index was in range, else the number of the first failed check (``Exported.checks``
  holds the messages; a torch call raises eager's error; frontend/runtime_checks.py).
* Dimensions of ``dynamic_shapes`` are ``?`` in the types and jax symbolic dimensions in
  the avals; ``@main`` checks their ranges, the equalities of shared ``Dim``s and the
  trace's shape guards with jax's ``shape_assertion`` custom calls, which
  ``refine_polymorphic_shapes`` evaluates when a caller refines the shapes (jax.export's
  own mechanism, ``jax/_src/export/shape_poly.py``).

The jax ``Exported`` targets calling-convention version 9, the oldest that jax 0.10.2 to
0.12 read (``minimum_supported_calling_convention_version``; version 10 only adds the
Shardy flag, which a one-device artifact does not use). thunder_mlir's own facts (input and
output names, the output pytree, checks, versions) ride as JSON in the module attribute
``thunder.export``, so one blob serves both readers.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import optree
import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir import export_step
from thunder_mlir.errors import ExportError
from thunder_mlir.exported import (  # noqa: F401 (deserialize, module_weights: the API)
    ELEMENT_TYPES,
    FORMAT,
    META_ATTR,
    Exported,
    deserialize,
    element_type,
    encode_value,
    evaluate,
    module_weights,
)
from thunder_mlir.frontend import pytrees
from thunder_mlir.frontend.module_attributes import LiftNeeded

CALLING_CONVENTION_VERSION = 9  # the oldest jax 0.10.2 .. 0.12 read (module docstring)
PROGRAM = "_thunder_program"  # the lowered region, called by @main
MIN_SIZE = 2  # a symbolic size stands for sizes >= 2 (0 and 1 are specialized, as torch)

# ------------------------------------------------------------------ dynamic_shapes
def _dim_spec(dim, where: str):
    """(name, min, max) of one entry of ``dynamic_shapes``, None for a static dim."""
    from torch.export.dynamic_shapes import Dim, _DerivedDim, _DimHint

    if dim is None:
        return None
    if isinstance(dim, _DimHint):
        if dim == Dim.STATIC:
            return None
        return (where, MIN_SIZE, None)  # AUTO/DYNAMIC: a symbol named after its place
    if isinstance(dim, _DerivedDim):
        raise ExportError(f"dynamic_shapes at {where}: derived dimensions ({dim.__name__}) "
                          "are not supported; mark the root dimension and let the program "
                          "compute the other")
    if isinstance(dim, Dim):
        hi = dim.max if isinstance(dim.max, int) and dim.max < 2**62 else None
        return (dim.__name__, max(int(dim.min), MIN_SIZE), hi)
    raise ExportError(f"dynamic_shapes at {where}: expected a torch.export.Dim or None, "
                      f"got {type(dim).__name__}")


def _dynamic_marks(fn, args, kwargs, dynamic_shapes) -> dict[int, dict[int, tuple]]:
    """id(tensor argument) -> {dim: (name, min, max)} from ``dynamic_shapes`` in
    torch.export's format: a dict keyed by the signature's parameter names, or a tuple/list
    in signature order, each entry following its argument's structure; a tensor's entry is
    a ``{dim: Dim}`` dict or a tuple/list with one ``Dim``/None per dim."""
    marks: dict[int, dict[int, tuple]] = {}
    if dynamic_shapes is None:
        return marks
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    bound = inspect.signature(target).bind(*args, **kwargs).arguments
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(bound)
        if unknown:
            raise ExportError(f"dynamic_shapes names {sorted(unknown)}, which the call does "
                              f"not pass (its arguments: {list(bound)})")
        pairs = [(k, bound[k], v) for k, v in dynamic_shapes.items()]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(bound):
            raise ExportError(f"dynamic_shapes has {len(dynamic_shapes)} entries for "
                              f"{len(bound)} arguments ({list(bound)})")
        pairs = [(k, v, s) for (k, v), s in zip(bound.items(), dynamic_shapes)]
    else:
        raise ExportError("dynamic_shapes must be a dict (by argument name) or a tuple/list")

    def walk(value, spec, where):
        if spec is None:
            return
        if isinstance(value, torch.Tensor):
            items = spec.items() if isinstance(spec, dict) else enumerate(spec)
            for d, dim in items:
                got = _dim_spec(dim, f"{where}_{d}".replace("[", "_").replace("]", "")
                                .replace("'", "").replace(".", "_"))
                if got is not None:
                    if not -value.ndim <= d < value.ndim:
                        raise ExportError(f"dynamic_shapes: {where} has {value.ndim} dims, "
                                          f"no dim {d}")
                    marks.setdefault(id(value), {})[d % value.ndim] = got
        elif isinstance(value, (tuple, list)):
            for i, (v, s) in enumerate(zip(value, spec)):
                walk(v, s, f"{where}[{i}]")
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, spec.get(k), f"{where}[{k!r}]")
        else:
            raise ExportError(f"dynamic_shapes gives a shape for {where}, which is a "
                              f"{type(value).__name__}, not a tensor")
    for name, value, spec in pairs:
        walk(value, spec, name)
    return marks


# ------------------------------------------------------------------ expressions
def _dim_text(expr, names: dict) -> str:
    """A size expression (sympy, over symbols s<k>) in jax's symbolic-dimension syntax
    (``jax.export.symbolic_shape``: ``+ - *``, ``floordiv``, ``mod``, ``max``, ``min``),
    which ``evaluate`` also reads. Raises ExportError for other expressions."""
    import sympy

    e = sympy.sympify(expr)
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return names[e]
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_dim_text(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Mul) and all(a.is_Integer or not a.is_number for a in e.args):
        return "(" + " * ".join(_dim_text(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den.is_Integer:
            return f"floordiv({_dim_text(sympy.expand(num), names)}, {int(den)})"
    if isinstance(e, sympy.Mod):
        return f"mod({_dim_text(e.args[0], names)}, {_dim_text(e.args[1], names)})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        f = "max" if isinstance(e, sympy.Max) else "min"
        out = _dim_text(e.args[0], names)
        for a in e.args[1:]:
            out = f"{f}({out}, {_dim_text(a, names)})"
        return out
    raise ExportError(f"the size expression {e} cannot be written as a jax symbolic "
                      "dimension")


_RELATIONS = {"Equality": "==", "Unequality": "!=", "StrictLessThan": "<",
              "LessThan": "<=", "StrictGreaterThan": ">", "GreaterThan": ">="}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_DIRECTION = {"==": "EQ", "!=": "NE", "<": "LT", "<=": "LE", ">": "GT", ">=": "GE"}


# ------------------------------------------------------------------ export
def export(fn: Callable | torch.nn.Module, *args, dynamic_shapes=None,
           weights: str = "arguments", sharp_edges: str = "error", **kwargs) -> Exported:
    """Trace ``fn(*args, **kwargs)`` with the jit's pipeline and return its program as an
    ``Exported``: one StableHLO module with a public ``@main`` (module docstring).

    ``fn``: a function of tensors (and Python values, baked in) or an ``nn.Module`` (its
    ``forward``; parameters and buffers are weights). Example tensors only give shapes and
    dtypes (the trace runs on meta tensors). ``weights``: "arguments" (leading inputs of
    ``@main``, named ``params.<name>``/``buffers.<name>``) or "constants" (folded in).
    ``dynamic_shapes``: torch.export's format (``torch.export.Dim``; per argument a
    ``{dim: Dim}`` dict or a tuple of ``Dim``/None; a dict by parameter name or a tuple in
    signature order): those dims are symbolic, a ``Dim`` shared by several dims is one
    size; a size is at least ``max(Dim.min, 2)`` (sizes 0 and 1 are specialized, as
    torch does) and at most ``Dim.max``. ``sharp_edges``: the jit's policy, "error" by
    default (a Python side effect such as ``random.random()`` is refused).

    The program is an inference program: traced under ``torch.no_grad()``; its outputs
    never require grad (``Exported.vjp()`` gives its backward). Called with a
    ``torch.optim`` optimizer among the arguments (``export(step, model, opt, *batch)``,
    ``step`` calling ``loss.backward()``, ``opt.step()``, ``opt.zero_grad()``), the whole
    training step is exported as ``jit(step)`` compiles it (export_step.py): inputs
    ``params.<name>``, ``buffers.<name>``, ``opt.state.<param>.<key>``,
    ``opt.param_groups[g].scalars``, the batch; outputs the step's return value and
    ``writes.<input name>`` (new parameters and state). ``dynamic_shapes`` and
    ``weights="constants"`` are refused for a step.

    Raises ``ExportError`` where the artifact could not mean what eager does: an op on
    the torch fallback or a user executor (the artifact runs without torch), a Python
    attribute write, an output that is a view of an input or shares memory with another,
    a tensor written into an input object, a custom call with no compatibility guarantee
    (host callbacks), a program split in several XLA regions, a dim of
    ``dynamic_shapes`` that cannot stay symbolic (with the jit's reason); and the jit's
    errors (``DataDependentControlFlowError`` for a branch on a tensor's value,
    ``SharpEdgeError``, ``TraceError``s), all naming the user's line."""
    from thunder_mlir import pipeline
    from thunder_mlir.dynamic import mark_dynamic
    from thunder_mlir.error_reporting import argument_paths
    from thunder_mlir.function import ThunderFunction

    if weights not in ("arguments", "constants"):
        raise ValueError(f"weights must be 'arguments' or 'constants', got {weights!r}")
    if export_step.is_step_call(args, kwargs):
        return _export_step(fn, args, kwargs, dynamic_shapes, weights, sharp_edges)
    marks = _dynamic_marks(fn, args, kwargs, dynamic_shapes)

    def meta(t, dims=()):
        if not isinstance(t, torch.Tensor):
            return t
        m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        for d in dims:
            mark_dynamic(m, d)
        return m
    leaves, spec = pytrees.flatten((args, kwargs))
    user_tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    meta_args, meta_kwargs = optree.tree_unflatten(spec, [meta(x, marks.get(id(x), {}))
                                                      for x in leaves])
    paths = argument_paths(args, kwargs)
    names = [p for p, x in zip(paths, leaves) if isinstance(x, torch.Tensor)]
    weight_names, weight_values = [], []
    if isinstance(fn, torch.nn.Module):
        from thunder_mlir.module import _functional_forward, _ModuleState

        state = _ModuleState(fn)
        flags, params, _ = state.read()
        buffers = {n for n, _ in fn.named_buffers(remove_duplicate=False)}
        order = sorted(params)  # optree's order of the state dict (the program's inputs)
        weight_names = [("buffers." if n in buffers else "params.") + n for n in order]
        weight_values = [params[n] for n in order]
        tf = ThunderFunction(functools.partial(_functional_forward, fn), sharp_edges=sharp_edges)
        tf.watch = state.watched
        tf.dynamic.static_tensors = len(order)
        # (tensors held as plain attributes are not inputs of an artifact: LiftNeeded below)
        call = functools.partial(tf, flags, {n: meta(params[n]) for n in order}, {},
                                 meta_args, meta_kwargs)
    else:
        tf = ThunderFunction(fn, sharp_edges=sharp_edges)
        call = functools.partial(tf, *meta_args, **meta_kwargs)
    target = pipeline.Target(torch.device("cpu"), "cpu")
    lowered = None
    with torch.no_grad(), pipeline.compile_only(target):
        try:
            call()
        except pipeline.ProgramsCaptured as captured:
            lowered = captured.lowered
        except LiftNeeded as need:  # (module_attributes.py: jit makes them inputs)
            raise ExportError(
                f"the module holds tensors as plain attributes ({need}), which jit reads as "
                "inputs but export does not name yet; register them as buffers "
                "(module.register_buffer(name, tensor, persistent=False)) to export") from None
    if lowered is None:
        raise ExportError("internal: the call compiled no program")
    if tf.dynamic.disabled is not None:
        raise ExportError(f"dynamic_shapes: the program cannot keep its marked dimensions "
                          f"symbolic: {tf.dynamic.disabled}")
    tensor_marks = [{}] * len(weight_names) + [marks.get(id(t), {}) for t in user_tensors]
    exp = _build(lowered, fn, weight_names, weight_values, names, tensor_marks, leaves,
                 paths, weights)
    exp._get_vjp = functools.partial(_export_vjp, exp, (fn, args, kwargs, sharp_edges))
    return exp


def _export_vjp(exp: Exported, source) -> Exported:
    """``exp.vjp()`` (Exported.vjp's docstring): export_vjp.py's function of (inputs,
    cotangents) exported with the primal's input names; ``source``: ``export``'s (fn,
    args, kwargs, sharp_edges)."""
    from thunder_mlir import pipeline
    from thunder_mlir.error_reporting import argument_paths
    from thunder_mlir.function import ThunderFunction

    meta = exp._meta
    if meta["dims"]:
        raise ExportError("vjp(): the artifact has dynamic dimensions; gradients are "
                          "compiled for static shapes: export without dynamic_shapes")
    if meta["weights"] == "constants" and meta["n_weights"]:
        raise ExportError("vjp(): the weights are constants and have no cotangents; export "
                          "with weights='arguments' to differentiate them")
    if meta["mutated"]:
        raise ExportError("vjp(): the program writes its inputs in place "
                          f"({[exp.output_names[-1 - k] for k in range(len(meta['mutated']))]}"
                          "); the VJP of eager's in-place side effects is not exported")
    if meta["seeded"]:
        raise ExportError("vjp(): the program draws random numbers; its VJP recomputes the "
                          "forward, whose draws would differ from the primal call's")
    fn, args, kwargs, sharp_edges = source
    n_w = meta["n_weights"]
    weight_names = exp.input_names[:n_w]
    leaves, _ = pytrees.flatten((args, kwargs))
    inputs = [exp.weights[n] for n in weight_names] + \
        [x for x in leaves if isinstance(x, torch.Tensor)]
    n_tree = len(exp.output_names) - (1 if meta["checks"] else 0)
    torch_dtype = {v: k for k, v in ELEMENT_TYPES.items()}
    float_outputs, cotangents, ct_names = [], [], []
    for k in range(n_tree):
        dtype = torch_dtype[element_type(meta["output_types"][k])]
        if dtype.is_floating_point:
            float_outputs.append(k)
            cotangents.append(torch.zeros(meta["output_shapes"][k], dtype=dtype))
            ct_names.append(f"cotangents.{exp.output_names[k]}")
    from thunder_mlir import export_vjp

    program = export_vjp.vjp_function(fn, weight_names, args, kwargs, float_outputs)

    def meta_tensor(t):
        m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        return m.requires_grad_(export_vjp.is_float(t))
    meta_inputs = [meta_tensor(t) for t in inputs]
    meta_cts = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in cotangents]
    tf = ThunderFunction(program, sharp_edges=sharp_edges)
    lowered = None
    with torch.enable_grad(), pipeline.compile_only(pipeline.Target(torch.device("cpu"),
                                                                    "cpu")):
        try:
            tf(meta_inputs, meta_cts)
        except pipeline.ProgramsCaptured as captured:
            lowered = captured.lowered
    if lowered is None:
        raise ExportError("internal: the VJP compiled no program")
    names = exp.input_names[:len(inputs)] + ct_names
    grads = [f"grads.{n}" for n, t in zip(names, inputs) if export_vjp.is_float(t)]
    all_tensors = inputs + cotangents
    vjp = _build(lowered, program, [], [], names, [{}] * len(names), all_tensors,
                 argument_paths((inputs, cotangents), {}), "arguments", tree_names=grads)
    vjp._meta["function"] = vjp._meta["function"] + f" of {meta['function']}"
    return vjp


def _export_step(fn, args, kwargs, dynamic_shapes, weights, sharp_edges) -> Exported:
    """``export`` of a training step (a call with a ``torch.optim`` optimizer among its
    arguments): export_step.py traces it as ``jit(fn)`` would; its artifact maps
    (parameters, buffers, optimizer state, scalar tables, batch) to (outputs, new values
    of the written inputs)."""
    if dynamic_shapes is not None:
        raise ExportError("dynamic_shapes: a training step is exported for static shapes "
                          "(its gradients are compiled for concrete sizes); export one "
                          "artifact per batch shape")
    if weights != "arguments":
        raise ExportError("weights='constants': a training step updates its parameters, "
                          "which must be inputs and outputs; use weights='arguments'")
    cap = export_step.capture(fn, args, kwargs, sharp_edges)
    n = len(cap.input_names)
    exp = _build(cap.lowered, fn, [], [], cap.input_names, [{}] * n, cap.tensors,
                 cap.input_names, "arguments", train=cap)
    exp._stepper = cap.stepper
    return exp


def _location(op) -> str:
    """The user's ``file:line`` of an op, from its MLIR location."""
    import re

    text = str(op.location)
    found = re.findall(r'"([^"]+)":(\d+)', text)
    return f"{found[-1][0]}:{found[-1][1]}" if found else text


def _refuse(lowered) -> None:
    """Raise ExportError for what an artifact cannot reproduce (``export``'s list)."""
    from torch_mlir import ir

    from thunder_mlir.runtime.plan import TorchStep

    plan = lowered.plan
    torch_steps = [s for s in plan.steps if type(s) is TorchStep]
    if torch_steps:
        with lowered.module.context:
            comp = next(op.operation for op in lowered.module.body.operations
                        if ir.StringAttr(op.operation.attributes["sym_name"]).value
                        == "computation")
            calls = [op.operation for op in comp.regions[0].blocks[0].operations
                     if op.operation.name == "thunder.executor_call"]
            where = [f"{ir.StringAttr(op.attributes['callee']).value} at {_location(op)}"
                     for op in calls]
        raise ExportError(
            "the program runs ops outside XLA (the torch fallback or a user executor), "
            f"which an artifact cannot run without torch: {'; '.join(where)}. Write them "
            "with ops thunder_mlir lowers to StableHLO (thunder_mlir.fallback_ops of a jit "
            "call lists them)")
    if lowered.attribute_writes:
        obj, name, _ = lowered.attribute_writes[0]
        raise ExportError(f"the program sets the Python attribute {type(obj).__name__}."
                          f"{name} (a side effect the artifact cannot make); keep state in "
                          "tensors (buffers) or outside the exported function")
    views = [r for r in lowered.output_views if r[1][0] != "copy"]
    if views:
        raise ExportError(f"output {views[0][0]} is a view of an input (eager returns memory "
                          "shared with the input, an artifact returns new arrays); return a "
                          "copy (.clone()) or export without that output")
    if lowered.n_state_outputs:
        raise ExportError("the program writes tensors into an input object, or returns "
                          "outputs that are views of one tensor; an artifact returns "
                          "independent arrays only")
    if lowered.needs_grad:
        raise ExportError("internal: an exported program needs no gradient (traced under "
                          "no_grad)")
    if len(plan.steps) != 1:
        raise ExportError(f"the program is {len(plan.steps)} XLA regions, not one (only a "
                          "program with no computation or split by data-dependent sizes "
                          "is); export needs one StableHLO program")


def _build(lowered, fn, weight_names, weight_values, names, tensor_marks, leaves, paths,
           weights: str, train=None, tree_names=None) -> Exported:
    """The artifact of a ``LoweredProgram`` (``export``'s second half); ``train``: the
    ``export_step.StepCapture`` of a training step (its output names and facts);
    ``tree_names``: names of the output tree's tensors (default: their paths)."""
    import sympy
    from torch_mlir import ir as tir

    from thunder_mlir.ir import symbolic
    from thunder_mlir.ir.context import get_context
    from thunder_mlir.runtime.plan import region_module_text

    _refuse(lowered)
    plan, env = lowered.plan, lowered.shape_env
    step = plan.steps[0]
    n_weights = len(weight_names)
    input_names = weight_names + names + (["seed"] if plan.seeded else [])
    # size symbols: s<k> -> the Dim's name; each marked dim must have become one
    sym_names: dict = {}
    dims: dict[str, list] = {}  # name -> [min, max]
    first_use: dict[str, tuple[int, int]] = {}
    for k, (ti, d) in enumerate(env.input_sources):
        name, lo, hi = tensor_marks[ti][d]
        sym_names[symbolic.symbol(k)] = name
        dims.setdefault(name, [lo, hi])
        first_use.setdefault(name, (ti, d))
    for ti, ds in enumerate(tensor_marks):
        for d, (name, _, _) in ds.items():
            if (ti, d) not in env.input_sources:
                raise ExportError(f"dynamic_shapes: dim {d} of {input_names[ti]} ({name}) "
                                  "did not become symbolic: its example size must be at "
                                  "least 2")
    tensors_all = list(weight_values)

    def dim_of(s) -> int | str:
        return int(s) if isinstance(s, int) else _dim_text(s.expr, sym_names)
    # input shapes (from the traced inputs: the program's argument types)
    with get_context():
        comp = next(op.operation for op in lowered.module.body.operations
                    if tir.StringAttr(op.operation.attributes["sym_name"]).value
                    == "computation")
        arguments = list(comp.regions[0].blocks[0].arguments)
        arg_types = [str(a.type) for a in arguments]
        static = [list(tir.RankedTensorType(a.type).shape) for a in arguments]
        shapes_attr = comp.attributes.get(symbolic.ARG_SHAPES_ATTR, None)
        arg_dims = [[str(tir.StringAttr(d).value) for d in tir.ArrayAttr(s)]
                    for s in tir.ArrayAttr(shapes_attr)] if shapes_attr is not None else []
    local = {str(s): s for s in sym_names}
    in_shapes = [[int(x) if x.lstrip("-").isdigit() else
                  _dim_text(sympy.sympify(x, locals=local), sym_names) for x in arg_dims[i]]
                 if i < len(arg_dims) else static[i] for i in range(len(arguments))]
    # the outputs
    mutated = lowered.mutated_inputs
    out_shapes = [[dim_of(s) for s in shape] for shape in lowered.out_shapes] + \
        [in_shapes[i] for i in mutated] + ([[]] if lowered.checks else [])
    with get_context():
        ret = list(comp.regions[0].blocks[0].operations)[-1]
        out_types = [str(v.type) for v in ret.operands]
    try:
        spec_text = torch_pytree.treespec_dumps(lowered.out_spec)
    except Exception:  # noqa: BLE001 - a container torch cannot serialize
        spec_text = None
    placeholder = torch_pytree.tree_unflatten(list(range(len(lowered.out_consts))),
                                              lowered.out_spec)
    keyed = torch_pytree.tree_flatten_with_path(placeholder)[0]
    out_paths = {idx: "output" + torch_pytree.keystr(p) for p, idx in keyed}
    if tree_names is None:
        tree_names = train.output_names() if train is not None else \
            [out_paths.get(i, f"output[{i}]") for i in lowered.out_positions]
    output_names = tree_names + \
        [f"writes.{input_names[i]}" for i in mutated] + \
        (["index_checks"] if lowered.checks else [])
    consts = [_encode_const(c, sym_names) for c in lowered.out_consts]
    # non-tensor inputs: baked in, checked at each torch call
    user_leaves = [{"path": p, "tensor": True} if isinstance(x, torch.Tensor) else
                   {"path": p, "value": encode_value(x)} for p, x in zip(paths, leaves)]
    guards = []
    for text, rel, value in env.guards:
        op = _RELATIONS[type(rel).__name__]
        op = op if value else _NEGATED[op]
        guards.append([_dim_text(rel.lhs, sym_names), op, _dim_text(rel.rhs, sym_names),
                       text if value else f"not ({text})"])
    import jax
    import jaxlib

    meta = {
        "format": FORMAT,
        "versions": {"thunder_mlir": _version(),
                     "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                     "torch": torch.__version__,
                     "calling_convention": CALLING_CONVENTION_VERSION},
        "function": getattr(fn, "__qualname__", type(fn).__qualname__),
        "weights": weights, "n_weights": n_weights,
        "input_names": input_names if weights == "arguments" else input_names[n_weights:],
        "input_shapes": in_shapes, "input_types": arg_types,
        "output_names": output_names, "output_shapes": out_shapes,
        "output_types": out_types,
        "user_leaves": user_leaves, "out_spec": spec_text, "out_consts": consts,
        "out_positions": lowered.out_positions, "mutated": mutated,
        "fresh_outputs": list(lowered.fresh_outputs),
        "checks": [[e.__name__, m] for e, m in lowered.checks],
        "dims": dims, "guards": guards, "seeded": plan.seeded,
        "train_step": train.info if train is not None else None,
        # (the plain values: the others are functions and classes the code calls)
        "baked_in": [f"{g.kind} {g.owner + ': ' if g.owner else ''}{g.name} = "
                     f"{_short(v)}" for g, v in lowered.guards
                     if isinstance(v, (bool, int, float, str, type(None), tuple))
                     and not g.name.isupper() and not g.name.startswith('_')],
    }
    with get_context():
        region = region_module_text(lowered.module, step.name, locations=True)
    module_text, jexp = _jax_artifact(
        region, meta, step, plan, tensors_all if weights == "constants" else None,
        first_use, in_shapes)
    meta_out = dict(meta)
    exp = Exported(jexp, meta_out, module_text)
    exp._out_spec_object = lowered.out_spec  # (in this process: any container)
    exp._consts_object = lowered.out_consts
    exp._sym_names = sym_names
    if weights == "arguments" and n_weights:
        exp.weights = dict(zip(weight_names, weight_values))
    return exp


def _version() -> str:
    """The installed thunder_mlir's version (package metadata; not ``import
    thunder_mlir``, which imports this module: a cycle, tests/test_layers.py)."""
    from importlib import metadata

    try:
        return metadata.version("thunder_mlir")
    except metadata.PackageNotFoundError:
        return "dev"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _encode_const(c, sym_names):
    if c is None or isinstance(c, (bool, int, float, str)):
        return {"json": c}
    if type(c).__name__ == "SymInt" and hasattr(c, "expr"):
        return {"dim": _dim_text(c.expr, sym_names)}
    if isinstance(c, torch.Size):
        return {"size": [int(s) if isinstance(s, int) else _dim_text(s.expr, sym_names)
                         for s in c]}
    return {"object": repr(c)}


def _jax_artifact(region: str, meta: dict, step, plan, constants, first_use, in_shapes):
    """(module text or None, jax.export.Exported) of the region wrapped in
    ``@main`` (module docstring), built in jax's MLIR context."""
    from jax._src import core, tree_util
    from jax._src.export import _export, shape_poly
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func as func_dialect
    from jax._src.lib.mlir.dialects import hlo

    from thunder_mlir.runtime import xla

    # jax's export creates jax's XLA clients where none exist: thunder_mlir's first, made
    # as its runs need them (runtime/xla.py start_backends), not with jax's defaults
    xla.start_backends()
    ctx = jmlir.make_ir_context()
    n_weights = meta["n_weights"]
    with ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(region)
        table = ir.SymbolTable(module.operation)
        program = table["main"]
        program.attributes["sym_visibility"] = ir.StringAttr.get("private")
        table.set_symbol_name(program, PROGRAM)
        all_types = [ir.Type.parse(t) for t in meta["input_types"]]
        first_arg = n_weights if constants is not None else 0
        main_types = all_types[first_arg:]
        main = func_dialect.FuncOp("main", ir.FunctionType.get(main_types, []),
                                   ip=ir.InsertionPoint.at_block_begin(module.body))
        main.attributes["sym_visibility"] = ir.StringAttr.get("public")
        block = main.add_entry_block()
        with ir.InsertionPoint(block):
            # a convert as the only use of a symbolic argument: refinement then gives the
            # argument a static type without breaking the call's types (jax's _wrap_main_func)
            values = [hlo.convert(a.type, a) if not ir.RankedTensorType(a.type).has_static_shape
                      else a for a in block.arguments]
            if constants is not None:
                values = [jmlir.ir_constant(_numpy(t)) for t in constants] + values
            if meta["dims"]:
                _shape_assertions(meta, values, first_use, hlo, ir, jmlir)
            callee = ir.FlatSymbolRefAttr.get(PROGRAM)
            result_types = list(program.type.results)
            call = func_dialect.CallOp(result_types, callee, [values[i] for i in step.inputs])
            results = [call.results[step.outputs.index(o)] if o in step.outputs else values[o]
                       for o in plan.outputs]
            func_dialect.ReturnOp(results)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(main_types, [r.type for r in results]))
        # the StableHLO version _export._module_to_bytecode writes (jax's 4-week window;
        # Exported.serialize(stablehlo_version=...) writes another)
        meta["versions"]["stablehlo"] = hlo.get_version_from_compatibility_requirement(
            hlo.StablehloCompatibilityRequirement.WEEK_4)
        module.operation.attributes[META_ATTR] = ir.StringAttr.get(json.dumps(meta))
        module.operation.attributes["jax.uses_shape_polymorphism"] = \
            ir.BoolAttr.get(bool(meta["dims"]))
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32), 1)
        module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32), 1)
        if not module.operation.verify():
            raise ExportError("internal: the exported module does not verify")
        try:  # jax.export's own check: custom calls with a compatibility guarantee only
            _export._check_module(module, disabled_checks=(), shardy_enabled=False)
        except ValueError as e:
            raise ExportError(f"the program calls custom calls (host callbacks or "
                              f"device libraries) that have no compatibility guarantee: {e}")
        # (the text is printed on demand, Exported.mlir_module: with the weights as
        # constants it is hex, ~2.6x the bytes of the weights; 124M GPT-2: 1.2 GB)
        text = None if constants is not None else \
            module.operation.get_asm(enable_debug_info=True)
        serialized = _export._module_to_bytecode(module)
    scope = shape_poly.SymbolicScope()

    def aval(shape, type_text):
        spec = ", ".join(str(d) for d in shape)
        dims = shape_poly.symbolic_shape(spec, scope=scope) if meta["dims"] else \
            tuple(int(d) for d in shape)
        return core.ShapedArray(dims, _np_dtype(type_text))
    in_shapes_main = in_shapes[first_arg:]
    in_avals = tuple(aval(s, t) for s, t in zip(in_shapes_main, meta["input_types"][first_arg:]))
    out_avals = tuple(aval(s, t) for s, t in zip(meta["output_shapes"], meta["output_types"]))
    n_in, n_out = len(in_avals), len(out_avals)
    jexp = _export.Exported(
        fun_name=str(meta["function"]),
        in_tree=tree_util.tree_structure((tuple(range(n_in)), {})),
        in_avals=in_avals,
        out_tree=tree_util.tree_structure(tuple(range(n_out))),
        out_avals=out_avals,
        _has_named_shardings=True,
        _in_named_shardings=(None,) * n_in, _out_named_shardings=(None,) * n_out,
        in_shardings_hlo=(None,) * n_in, out_shardings_hlo=(None,) * n_out,
        nr_devices=1, platforms=("cpu",), ordered_effects=(), unordered_effects=(),
        disabled_safety_checks=(), mlir_module_serialized=serialized,
        calling_convention_version=CALLING_CONVENTION_VERSION,
        module_kept_var_idx=tuple(range(n_in)),
        uses_global_constants=bool(meta["dims"]), _get_vjp=None)
    return text, jexp


def _np_dtype(type_text: str):
    import ml_dtypes

    return {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
            "f64": np.float64, "i64": np.int64, "i32": np.int32, "i16": np.int16,
            "i8": np.int8, "ui8": np.uint8, "i1": np.bool_, "complex<f32>": np.complex64,
            "complex<f64>": np.complex128}[element_type(type_text)]


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A weight's values as a NumPy array (bfloat16 through ml_dtypes)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _shape_assertions(meta, values, first_use, hlo, ir, jmlir) -> None:
    """jax.export's ``shape_assertion`` custom calls in ``@main`` for each dimension's
    range, the equality of dims sharing a ``Dim``, and the trace's shape guards
    (shape_poly.py: checked by ``refine_polymorphic_shapes`` once shapes are known)."""
    i64 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(64))
    sizes: dict[str, Any] = {}

    def size(i, d):
        return hlo.convert(i64, hlo.get_dimension_size(values[i], d))
    for name, (i, d) in first_use.items():
        sizes[name] = size(i, d)

    def const(n):
        return jmlir.ir_constant(np.int64(n))

    def check(lhs, op, rhs, message, inputs=()):
        pred = hlo.compare(lhs, rhs, hlo.ComparisonDirectionAttr.get(_DIRECTION[op]),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        jmlir.custom_call("shape_assertion", result_types=[], operands=[pred, *inputs],
                          has_side_effect=True,
                          extra_attributes={"error_message": ir.StringAttr.get(message)})
    for name, (lo, hi) in meta["dims"].items():
        v = sizes[name]
        check(v, ">=", const(lo), f"thunder_mlir export: dimension {name} = {{0}} must be "
              f">= {lo}", [v])
        if hi is not None:
            check(v, "<=", const(hi), f"thunder_mlir export: dimension {name} = {{0}} must "
                  f"be <= {hi}", [v])
    # every other use of a Dim equals its first
    names = meta["input_names"] if meta["weights"] == "arguments" else \
        [None] * meta["n_weights"] + meta["input_names"]
    for i, shape in enumerate(meta["input_shapes"]):
        if i < meta["n_weights"]:
            continue
        for d, s in enumerate(shape):
            if isinstance(s, str) and s in sizes and first_use[s] != (i, d):
                v = size(i, d)
                check(v, "==", sizes[s], f"thunder_mlir export: dim {d} of {names[i]} = {{0}} "
                      f"must equal {s} = {{1}}", [v, sizes[s]])
    for lhs, op, rhs, text in meta["guards"]:
        check(_emit(lhs, sizes, hlo, const), op, _emit(rhs, sizes, hlo, const),
              f"thunder_mlir export: the shape guard {text} of the trace does not hold")


def _emit(text: str, sizes: dict, hlo, const):
    """StableHLO i64 arithmetic computing a ``_dim_text`` expression."""
    import ast

    def go(node):
        if isinstance(node, ast.Constant):
            return const(node.value)
        if isinstance(node, ast.Name):
            return sizes[node.id]
        if isinstance(node, ast.BinOp):
            a, b = go(node.left), go(node.right)
            return {ast.Add: hlo.add, ast.Sub: hlo.subtract, ast.Mult: hlo.multiply}[
                type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return hlo.negate(go(node.operand))
        if isinstance(node, ast.Call):
            a, b = go(node.args[0]), go(node.args[1])
            return {"floordiv": hlo.divide, "mod": hlo.remainder, "max": hlo.maximum,
                    "min": hlo.minimum}[node.func.id](a, b)
        raise ExportError(f"internal: cannot emit the size expression {text}")
    return go(ast.parse(text, mode="eval").body)
