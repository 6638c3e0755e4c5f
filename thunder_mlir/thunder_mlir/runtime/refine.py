"""Executables of a region with symbolic sizes: one XLA compile per concrete input shape.

XLA compiles static shapes. A region whose StableHLO has ``?`` dimensions (ir/symbolic.py)
is kept as text; at a call with input shapes not seen before, its ``@main`` arguments get
those static types and jaxlib's ``refine_polymorphic_shapes`` (the
``stablehlo-refine-shapes`` pipeline that ``jax.export`` runs for shape polymorphism:
``jax._src.interpreters.mlir.refine_polymorphic_shapes``) propagates them through the
program, folding ``get_dimension_size`` and the dynamic-shape ops into static ones; the
result is compiled (runtime/xla.py) and cached by the input shapes. Neither the trace nor
the thunder passes run again.
"""

from __future__ import annotations

import time

import torch

from thunder_mlir.errors import CompileError
from thunder_mlir.runtime import jax_internals
from thunder_mlir.runtime.xla import compile_stablehlo


MAX_SPECIALIZATIONS = 64  # executables kept per region (XLA's own cache keeps up to 512)


def has_symbolic_sizes(text: str) -> bool:
    """Whether a region's StableHLO text has a ``?`` dimension."""
    return "tensor<?" in text or "x?" in text


class ShapeSpecializedExecutable:
    """Stands for an XLA executable (``execute``, ``execute_sharded``) of a region with
    symbolic sizes: each call runs the executable compiled for its inputs' shapes.

    ``specializations``: input shapes -> executable; ``seconds``: input shapes -> time the
    refinement and XLA compile took (seconds)."""

    def __init__(self, text: str, device: torch.device):
        self.text = text
        self.device = device
        self.specializations: dict[tuple, object] = {}
        self.seconds: dict[tuple, float] = {}
        # the arguments with ? dims: the others' shapes are the signature's (the cache
        # entry's key fixed them), so only these are looked at on each call
        self.dynamic_args = _dynamic_arguments(text)

    def _executable(self, args):
        key = tuple([args[i].shape for i in self.dynamic_args])
        exe = self.specializations.get(key)
        if exe is None:
            t = time.perf_counter()
            shapes = [tuple(a.shape) for a in args]
            exe = compile_stablehlo(refine(self.text, shapes), self.device)
            if len(self.specializations) >= MAX_SPECIALIZATIONS:  # the oldest goes
                oldest = next(iter(self.specializations))
                del self.specializations[oldest]
                self.seconds.pop(oldest, None)
            self.specializations[key] = exe
            self.seconds[key] = time.perf_counter() - t
        return exe

    def execute(self, args):
        """Run the executable specialized for ``args``' shapes (compiled on first sight)."""
        return self._executable(args).execute(args)

    def execute_sharded(self, args):
        """``execute_sharded`` of the executable specialized for ``args``' shapes."""
        return self._executable(args).execute_sharded(args)


def _dynamic_arguments(text: str) -> tuple[int, ...]:
    """Indices of ``@main``'s arguments whose type has a ``?`` dimension."""
    from torch_mlir import ir

    from thunder_mlir.ir.context import get_context

    with get_context():
        module = ir.Module.parse(text)
        main = next(op.operation for op in module.body.operations
                    if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
        return tuple(i for i, a in enumerate(main.regions[0].blocks[0].arguments)
                     if not ir.RankedTensorType(a.type).has_static_shape)


def refine(text: str, shapes: list[tuple[int, ...]]) -> str:
    """The StableHLO module ``text`` with ``@main``'s arguments of the given static shapes
    and every shape refined from them (no ``?`` left). Raises CompileError when the
    shapes contradict the program (a shape assertion fails)."""
    from torch_mlir import ir

    from thunder_mlir.ir.context import get_context

    ctx = get_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        main = next(op.operation for op in module.body.operations
                    if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
        block = main.regions[0].blocks[0]
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        types = []
        for arg, shape in zip(block.arguments, shapes):
            t = ir.RankedTensorType.get(list(shape), ir.RankedTensorType(arg.type).element_type)
            arg.set_type(t)
            types.append(t)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(types, ftype.results))
        static = str(module)
    try:
        out = jax_internals.refine_polymorphic_shapes(static.encode())
    except Exception as e:  # noqa: BLE001 - jaxlib raises a plain ValueError/RuntimeError
        raise CompileError(f"refining the shapes of a region with symbolic sizes to "
                           f"{shapes} failed: {e}\n--- module ---\n{text}") from None
    with ctx:  # bytecode back to text: compile_stablehlo's input and cache key are text
        return str(ir.Module.parse(out))
