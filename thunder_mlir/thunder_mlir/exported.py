"""The artifact of ``thunder_mlir.export``: ``Exported`` (its names, module text,
serialization, the torch call, ``vjp``), ``deserialize`` and ``module_weights``
(docs/export.md). export.py builds an ``Exported`` from a lowered program; this module only
reads it: the module docstring of export.py describes ``@main``'s calling convention.
"""

from __future__ import annotations

import json

import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir import export_step
from thunder_mlir.errors import ExportError
from thunder_mlir.frontend import pytrees

FORMAT = "thunder_mlir.export/1"
META_ATTR = "thunder.export"
ELEMENT_TYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                 torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
                 torch.int16: "i16", torch.int8: "i8", torch.uint8: "ui8", torch.bool: "i1",
                 torch.complex64: "complex<f32>", torch.complex128: "complex<f64>"}
_ERRORS = {e.__name__: e for e in (IndexError, RuntimeError, ValueError, TypeError)}


def evaluate(text: str, dims: dict[str, int]) -> int:
    """The value of a size expression in jax's symbolic-dimension syntax (export.py's
    ``_dim_text``: ``+ - *``, ``floordiv``, ``mod``, ``max``, ``min``) at ``dims``."""
    env = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max,
           "min": min, "__builtins__": {}}
    return int(eval(text, env, dict(dims)))


def encode_value(x):
    """A Python input value as JSON (compared at each call), or its repr."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"json": x}
    return {"repr": repr(x)}


def element_type(type_text: str) -> str:
    """The element type of a ranked tensor type's text: ``tensor<?x4xf32>`` -> ``f32``."""
    return type_text[len("tensor<"):-1].rsplit("x", 1)[-1]


# ------------------------------------------------------------------ the artifact
class Exported:
    """A program exported by ``thunder_mlir.export`` (or read by ``deserialize``).

    ``input_names``/``output_names``: the names of ``@main``'s flat inputs and outputs
    (module docstring of thunder_mlir/export.py); ``dims``: each symbolic dimension's
    [min, max] (max None: unbounded); ``checks``: the messages of the run-time index
    checks whose code is the ``index_checks`` output; ``versions``: of the exporter, the
    calling convention and the StableHLO the module is written for; ``baked_in``: the Python values (globals, closures, module
    attributes) the program was specialized on; ``weights``: {name: tensor} a torch call
    passes for the weight inputs (the module's own tensors after ``export``, so an
    optimizer's updates are seen; set it after ``deserialize``); ``jax_exported``: the
    ``jax.export.Exported``.

    Calling it on torch tensors (``exp(*args, **kwargs)``, fn's signature) runs the
    artifact on XLA through the jit's DLPack runtime and gives eager's meaning: the output
    pytree, the in-place writes into the inputs, eager's IndexError for an index out of
    range. Raises ``CallArgumentError`` for arguments whose structure, Python values,
    dtypes or shapes differ from the export (ranges and shape guards included). A
    training step's artifact is called as the step, ``exp(model, opt, *batch)``, and
    updates the parameters, buffers, ``.grad`` and optimizer state as eager's step does
    (``step_inputs`` gives a call's flat inputs by name). ``vjp()``: the backward as a
    second ``Exported``; ``call_flat``: ``@main`` on flat tensors (jax's ``.call``)."""

    def __init__(self, jax_exported, meta: dict, module_text: str | None = None):
        self.jax_exported = jax_exported
        self._meta = meta
        self._text = module_text
        self.input_names: list[str] = list(meta["input_names"])
        self.output_names: list[str] = list(meta["output_names"])
        self.dims: dict = {k: tuple(v) for k, v in meta["dims"].items()}
        self.checks: list[str] = [m for _, m in meta["checks"]]
        self.versions: dict = dict(meta["versions"])
        self.baked_in: list[str] = list(meta["baked_in"])
        self.weights: dict[str, torch.Tensor] = {}
        self._out_spec_object = None
        self._consts_object = None
        self._run = None
        self._stepper = None  # (a training step's: export_step.StepCapture.stepper)
        self._get_vjp = None  # () -> the VJP's Exported, set by export (jax's _get_vjp)

    def __repr__(self) -> str:
        return (f"Exported({self._meta['function']}, {len(self.input_names)} inputs, "
                f"{len(self.output_names)} outputs, dims={self.dims})")

    def mlir_module(self) -> str:
        """The StableHLO module's text (public ``@main``, with locations naming the user's
        lines)."""
        if self._text is None:
            self._text = self.jax_exported.mlir_module()
        return self._text

    def serialize(self, stablehlo_version: str | None = None) -> bytes:
        """The artifact in jax.export's serialization (``jax.export.Exported.serialize``:
        a flatbuffer holding the StableHLO portable artifact, avals and versions), which
        ``jax.export.deserialize`` and ``thunder_mlir.deserialize`` read.

        ``stablehlo_version``: the StableHLO version (``"1.13.7"``) the module is written
        for, a portable artifact's target: a consumer whose StableHLO is at least that
        version reads it (StableHLO's compatibility guarantee). None: the version written
        at export, jax.export's own target (``versions["stablehlo"]``: 1.15.0 with jaxlib
        0.10.2, jax's 4-week compatibility window). An older one serves an older consumer:
        TensorFlow 2.21's ``XlaCallModule`` reads up to 1.13.7
        (``tensorflow.compiler.mlir.stablehlo.stablehlo.get_current_version()``;
        docs/export.md). ``versions["stablehlo"]`` of the written artifact is that version.
        Raises ExportError for a version outside the installed jaxlib's StableHLO range
        [minimum, current], or when the program uses an op or attribute that the version
        does not have (StableHLO's downgrade error)."""
        if stablehlo_version is None or stablehlo_version == self.versions.get("stablehlo"):
            return bytes(self.jax_exported.serialize())
        import dataclasses

        return bytes(dataclasses.replace(
            self.jax_exported, mlir_module_serialized=portable_artifact(
                self.jax_exported.mlir_module_serialized, stablehlo_version)).serialize())

    # ------------------------------------------------------------- the torch call
    def _executable(self):
        if self._run is None:
            from thunder_mlir.runtime.plan import Plan, XlaStep
            from thunder_mlir.runtime.refine import ShapeSpecializedExecutable
            from thunder_mlir.runtime.xla import compile_stablehlo

            text = self.mlir_module()
            device = torch.device("cpu")
            exe = ShapeSpecializedExecutable(text, device) if self.dims else \
                compile_stablehlo(text, device)
            n, m = len(self.input_names), len(self.output_names)
            step = XlaStep("main", exe, tuple(range(n)), tuple(range(n, n + m)),
                           program=f"the exported program of `{self._meta['function']}`")
            self._run = Plan([step], n + m, n, range(n, n + m), device)
        return self._run

    def __call__(self, *args, **kwargs):
        from thunder_mlir.error_reporting import argument_paths
        from thunder_mlir.errors import CallArgumentError

        meta = self._meta
        if meta.get("train_step"):
            return self._call_step(args, kwargs)
        leaves, _ = pytrees.flatten((args, kwargs))
        paths = argument_paths(args, kwargs)
        expected = meta["user_leaves"]
        if paths != [e["path"] for e in expected]:
            raise CallArgumentError(f"the exported program takes {[e['path'] for e in expected]}"
                                    f", got {paths}")
        tensors = []
        for x, e in zip(leaves, expected):
            if e.get("tensor"):
                if not isinstance(x, torch.Tensor):
                    raise CallArgumentError(f"{e['path']} must be a tensor, got "
                                            f"{type(x).__name__}")
                tensors.append(x)
            elif encode_value(x) != e["value"]:
                raise CallArgumentError(f"{e['path']} was {e['value']} at export (baked into "
                                        f"the program), got {x!r}")
        n_w = meta["n_weights"] if meta["weights"] == "arguments" else 0
        if n_w:
            missing = [k for k in self.input_names[:n_w] if k not in self.weights]
            if missing:
                raise CallArgumentError(f"the weights {missing[:3]} are not set: assign "
                                        "Exported.weights = {name: tensor}")
            weights = [self.weights[k] for k in self.input_names[:n_w]]
        else:
            weights = []
        inputs = weights + tensors
        # (with weights as constants, @main's inputs start after them)
        sizes = self._check_shapes(inputs, 0 if n_w else meta["n_weights"])
        return self._rebuild(self._run_flat(inputs), sizes)

    def _run_flat(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run ``@main`` on ``inputs`` (a seed drawn from torch's generator where the
        program draws random numbers, as jit does), raise eager's error for a failed index
        check, write the written inputs; returns the output tree's tensors."""
        from thunder_mlir.frontend import runtime_checks
        from thunder_mlir.runtime.plan import draw_seed
        from thunder_mlir.runtime.write_back import write_back

        meta = self._meta
        run_inputs = [t.detach().contiguous() for t in inputs]
        if meta["seeded"]:
            run_inputs.append(draw_seed(torch.device("cpu")))
        outs = self._executable().run(run_inputs)
        if meta["checks"]:
            runtime_checks.raise_failed([(_ERRORS.get(e, RuntimeError), m)
                                         for e, m in meta["checks"]], outs[-1])
            outs = outs[:-1]
        mutated = meta["mutated"]
        if mutated:
            k = len(mutated)
            with torch.no_grad():
                write_back(inputs, mutated, outs[-k:])
            outs = outs[:-k]
        return [o.clone() if j in meta["fresh_outputs"] else o for j, o in enumerate(outs)]

    def vjp(self) -> Exported:
        """The backward of this program as a second ``Exported`` (``jax.export.Exported.
        vjp``'s contract): inputs, in ``input_names`` order, the primal's inputs (same
        names, weights included) then one cotangent per floating-point tensor of the
        output tree (``cotangents.<output name>``, the output's shape and dtype); outputs
        the cotangent of each floating-point input (``grads.<input name>``, zeros where
        the outputs do not depend on it). It recomputes the forward (as jax's VJP of an
        exported function does). Unlike jax, integer inputs and outputs have no
        cotangent entries (jax's float0). Call it flat: ``vjp.call_flat(*inputs, *cts)``
        or ``jax.export.deserialize(vjp.serialize()).call(...)``.

        Raises ExportError for a deserialized artifact (the VJP is made from the
        exported function), dynamic dimensions, weights as constants, a program that
        writes its inputs or draws random numbers, and a training step."""
        if self._meta.get("train_step"):
            raise ExportError("vjp(): a training step artifact computes its own gradients; "
                              "it has no VJP")
        if self._get_vjp is None:
            raise ExportError("vjp(): this Exported was deserialized; its VJP is made from "
                              "the exported function: call vjp() on the Exported that "
                              "thunder_mlir.export returned (as jax.export.Exported.vjp "
                              "needs)")
        return self._get_vjp()

    def call_flat(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """Run ``@main`` on flat tensors in ``input_names`` order (jax.export's
        ``Exported.call`` convention, on torch tensors) and return its results in
        ``output_names`` order (``index_checks`` included; nothing written back). Raises
        CallArgumentError for a wrong number of inputs, dtypes or shapes."""
        from thunder_mlir.errors import CallArgumentError

        if len(inputs) != len(self.input_names):
            raise CallArgumentError(f"call_flat takes {len(self.input_names)} tensors "
                                    f"({self.input_names[:3]}...), got {len(inputs)}")
        self._check_shapes(list(inputs), 0)
        return list(self._executable().run([t.detach().contiguous() for t in inputs]))

    # ------------------------------------------------------------- a training step
    def _step_call(self, args, kwargs):
        """(the prepared call, its input tensors in ``input_names`` order) of a training
        step artifact's call (export_step.prepare)."""
        if self._stepper is None:
            self._stepper = export_step.stepper_for()
        return export_step.prepare(self._stepper, self._meta["train_step"], args, kwargs)

    def step_inputs(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """A training step artifact's inputs for the call ``(model, opt, *batch)``, by
        name (``input_names``): parameters, buffers, optimizer state (zeros where a
        parameter has none yet), the per-step scalar tables as torch.optim would compute
        them at this step, the batch. What a caller outside torch passes to
        ``jax.export.deserialize(blob).call`` (flat, in ``input_names`` order). Nothing is
        written. Raises ExportError for an artifact that is not a training step, and
        CallArgumentError as a call would."""
        if not self._meta.get("train_step"):
            raise ExportError("step_inputs: this artifact is not a training step")
        _, tensors = self._step_call(args, kwargs)
        return dict(zip(self.input_names, tensors))

    def _call_step(self, args, kwargs):
        """``exp(model, opt, *batch)`` of a training step artifact: as ``jit(step)``'s
        call (train_step.py): host scalars and state prepared, the artifact run, the
        written parameters, state and ``.grad`` updated, ``.grad`` set and step counters
        advanced; returns the step's return value."""
        call, tensors = self._step_call(args, kwargs)
        sizes = self._check_shapes(tensors, 0)
        return self._stepper.finish(call, self._rebuild(self._run_flat(tensors), sizes))

    def _check_shapes(self, inputs, offset: int) -> dict[str, int]:
        """The size of each symbolic dimension at this call; CallArgumentError where an
        input's dtype or shape, a range or a shape guard differs from the export."""
        from thunder_mlir.errors import CallArgumentError

        meta = self._meta
        shapes = meta["input_shapes"][offset:]
        types = meta["input_types"][offset:]
        names = meta["input_names"]
        sizes: dict[str, int] = {}
        for i, t in enumerate(inputs):
            shape, name = shapes[i], names[i]
            if ELEMENT_TYPES.get(t.dtype) != element_type(types[i]):
                raise CallArgumentError(f"{name} must be {types[i]}, got {t.dtype}")
            if t.ndim != len(shape):
                raise CallArgumentError(f"{name} must have {len(shape)} dims, got "
                                        f"{tuple(t.shape)}")
            for d, (n, s) in enumerate(zip(t.shape, shape)):
                if isinstance(s, int):
                    if n != s:
                        raise CallArgumentError(f"dim {d} of {name} must be {s} (static at "
                                                f"export), got {tuple(t.shape)}")
                elif s in sizes and sizes[s] != n:
                    raise CallArgumentError(f"dim {d} of {name} is {n}, but {s} = {sizes[s]}"
                                            " at another input")
                else:
                    sizes.setdefault(s, n)
        for name, (lo, hi) in meta["dims"].items():
            v = sizes[name]
            if v < lo or (hi is not None and v > hi):
                raise CallArgumentError(f"dimension {name} = {v} is outside the exported "
                                        f"range [{lo}, {hi if hi is not None else 'inf'}]")
        for lhs, op, rhs, text in meta["guards"]:
            a, b = evaluate(lhs, sizes), evaluate(rhs, sizes)
            if not {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                    ">=": a >= b}[op]:
                raise CallArgumentError(f"the shape guard {text} of the exported trace does "
                                        f"not hold at sizes {sizes}")
        return sizes

    def _rebuild(self, outs, sizes):
        meta = self._meta
        spec = self._out_spec_object
        if spec is None and meta["out_spec"] is not None:
            spec = torch_pytree.treespec_loads(meta["out_spec"])
        if spec is None:  # a container torch cannot serialize: the flat tensors
            return tuple(outs)
        leaves = []
        for k, c in enumerate(meta["out_consts"]):
            if "json" in c:
                leaves.append(c["json"])
            elif "dim" in c:
                leaves.append(evaluate(c["dim"], sizes))
            elif "size" in c:
                leaves.append(torch.Size([s if isinstance(s, int) else evaluate(s, sizes)
                                          for s in c["size"]]))
            elif self._consts_object is not None:
                leaves.append(self._consts_object[k])
            else:
                raise ExportError(f"output leaf {k} is a Python object ({c['object']}) the "
                                  "artifact does not carry")
        for pos, t in zip(meta["out_positions"], outs):
            leaves[pos] = t
        return torch_pytree.tree_unflatten(leaves, spec)


def deserialize(blob: bytes) -> Exported:
    """The ``Exported`` of bytes from ``Exported.serialize`` (``jax.export.deserialize``
    and the ``thunder.export`` module attribute). Weights passed as arguments must be set
    (``exp.weights = {name: tensor}``, e.g. from the module: ``{("params." or "buffers.")
    + name: t}``) before a torch call. Raises ExportError for bytes jax reads but
    thunder_mlir did not write."""
    import jax.export
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    jexp = jax.export.deserialize(bytearray(blob))
    with jmlir.make_ir_context():
        module = _jax.mlir.deserialize_portable_artifact(jexp.mlir_module_serialized)
        if not isinstance(module, ir.Module):  # (bytes or text in some jaxlib versions)
            module = ir.Module.parse(module)
        attrs = module.operation.attributes
        if META_ATTR not in attrs:
            raise ExportError("the artifact was not written by thunder_mlir.export (no "
                              f"{META_ATTR} attribute); run it with jax.export.deserialize")
        meta = json.loads(ir.StringAttr(attrs[META_ATTR]).value)
    if meta.get("format") != FORMAT:
        raise ExportError(f"unknown artifact format {meta.get('format')!r} (this reads "
                          f"{FORMAT})")
    return Exported(jexp, meta)  # (the text is printed on demand: mlir_module)


def portable_artifact(serialized: bytes, stablehlo_version: str) -> bytes:
    """A StableHLO portable artifact (``jax.export.Exported.mlir_module_serialized``)
    written again for ``stablehlo_version`` ("X.Y.Z"), its ``thunder.export`` attribute's
    ``versions["stablehlo"]`` set to it (``Exported.serialize``). Raises ExportError for a
    version outside the installed StableHLO's [minimum, current] or a program that needs
    something newer than it."""
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    from thunder_mlir.runtime import xla

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    low, high = hlo.get_minimum_version(), hlo.get_current_version()
    try:
        ok = key(low) <= key(stablehlo_version) <= key(high)
    except ValueError:
        ok = False
    if not ok:
        raise ExportError(f"stablehlo_version={stablehlo_version!r}: the installed jaxlib "
                          f"writes StableHLO versions {low} to {high} (\"X.Y.Z\")")
    xla.start_backends()  # (xla_bridge below: thunder_mlir's clients, not jax's defaults)
    with jmlir.make_ir_context():
        module = _jax.mlir.deserialize_portable_artifact(serialized)
        if not isinstance(module, ir.Module):  # (bytes or text in some jaxlib versions)
            module = ir.Module.parse(module)
        attrs = module.operation.attributes
        if META_ATTR in attrs:
            meta = json.loads(ir.StringAttr(attrs[META_ATTR]).value)
            meta["versions"]["stablehlo"] = stablehlo_version
            attrs[META_ATTR] = ir.StringAttr.get(json.dumps(meta))
        try:  # (jax's _export._module_to_bytecode, at the caller's target)
            return _jax.mlir.serialize_portable_artifact(
                module, stablehlo_version, xla_bridge.get_backend().serialize_with_sdy)
        except RuntimeError as e:  # (jax.errors.JaxRuntimeError)
            raise ExportError(f"the program cannot be written for StableHLO "
                              f"{stablehlo_version}: it uses an op or attribute newer than "
                              f"that version ({e})") from e


def module_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{input name: tensor} of a module's parameters and buffers, as ``export`` names
    them (``params.<name>``/``buffers.<name>``): ``exp.weights = module_weights(m)``."""
    buffers = dict(module.named_buffers(remove_duplicate=False))
    out = {f"params.{n}": p for n, p in module.named_parameters(remove_duplicate=False)}
    out.update({f"buffers.{n}": b for n, b in buffers.items() if b is not None})
    return out

