"""Named passes shared by ``jit`` and ``thunder-opt`` (one registry, so every stage a user
sees in ``last_traces`` can be reproduced with ``thunder-opt -p NAME``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch_mlir import ir

from thunder_mlir.transforms import decompose, grad, joint, lower_to_stablehlo, partition


@dataclass(frozen=True)
class Pass:
    """A module-to-module transform. ``run`` mutates the module in place."""

    name: str
    run: Callable[[ir.Module], None]
    summary: str


PASSES: dict[str, Pass] = {p.name: p for p in (
    Pass(decompose.NAME, decompose.run, "inline composites into their prim decompositions"),
    Pass(grad.NAME, grad.run, "reverse-mode AD: @computation -> @forward + @backward"),
    Pass(joint.NAME, joint.run, "@forward + @backward -> @computation returning the gradients "
         "for ones cotangents, dead code eliminated (thunder_mlir.grad)"),
    Pass(partition.NAME, partition.run, "outline XLA regions; executor calls stay in the plan"),
    Pass(lower_to_stablehlo.NAME, lower_to_stablehlo.run,
         "dialect conversion of each region to StableHLO/CHLO"),
)}


def get_pass(name: str) -> Pass:
    """The registered pass ``name``; KeyError lists the known names."""
    try:
        return PASSES[name]
    except KeyError:
        raise KeyError(f"unknown pass '{name}'; known passes: {', '.join(PASSES)}") from None
