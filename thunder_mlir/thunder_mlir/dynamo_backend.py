"""``torch.compile(model, backend="thunder_mlir")``: thunder_mlir as a TorchDynamo backend.

Dynamo (torch.compile's frontend) captures the program by bytecode analysis: it splits it
into FX graphs at what it cannot trace (a graph break: a data-dependent ``if``, ``print``,
a call to an untraceable builtin) and runs the rest in Python, guarded by Dynamo's own
guards. Each graph is handed to a backend as ``compiler_fn(gm: torch.fx.GraphModule,
example_inputs: list[torch.Tensor]) -> callable``, where ``gm``'s inputs are the graph's
tensors (the module's parameters and buffers lifted as inputs, the user's inputs, symbolic
sizes as Python ints) and its output is a tuple (``torch._dynamo.backends.registry``,
CompilerFn). Here each graph becomes ``thunder_mlir.jit(gm, **options)``.

Training: the graph is compiled by ``jit`` with thunder_mlir's own VJP (the ``grad`` pass),
not through AOTAutograd. When an input requires grad the jitted graph returns outputs
that carry one ``torch.autograd.Function`` node, so ``loss.backward()`` fills ``.grad`` as
eager does. Why not AOTAutograd (``torch._dynamo.backends.common.aot_autograd`` with
thunder_mlir compiling its forward and backward): it hands over graphs of ATen ops
(``aten.addmm``, ``aten.t``, ``aten.gelu_backward``) for which thunder_mlir has no
symbols: all of them (8 forward, 24 backward for a 3-layer MLP) run on the torch fallback
executor, so nothing of the step runs on XLA. Measured (benchmarks/dynamo_training.py) on an
SGD training step of an MLP (64-256-256-10, batch 32) on a 2-core AMD EPYC shared with
other jobs (load 3-5), fastest of 7 rounds of 50 steps, in 4 runs: this design 7.2, 6.9,
28.6, 4.8 ms per step; AOTAutograd 33.4, 27.7, 57.4, 17.0 ms (2.0-4.6x slower in every
run); eager 1.8 ms in the quietest round (tiny kernels: thunder_mlir's per-call overhead
dominates; ``jit(model)`` took the same time as this design, 33.4 vs 32.8 ms in a loaded
round).

Sharp edges: the FX graph Dynamo made is functional (Python side effects, ``random``,
``time`` stay in Dynamo's Python, between graphs), so thunder_mlir's sharp-edge monitor
is off by default (``sharp_edges="allow"``); guards on the graph's inputs are Dynamo's
plus jit's own cache key (shapes, dtypes, requires_grad) of each graph.

Registered by name (torch's ``torch_dynamo_backends`` entry point, pyproject.toml) so that
``torch.compile(m, backend="thunder_mlir")`` works without importing thunder_mlir, and by
:func:`register` when this module is imported (``import thunder_mlir`` imports it when
``torch._dynamo`` is already loaded: importing torch._dynamo costs ~2 s, so it is never
imported for a user of ``jit`` alone).
"""

from __future__ import annotations

import collections
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from thunder_mlir.examine import Examination, examine
from thunder_mlir.jit import jit

__all__ = ["BACKEND_NAME", "DynamoGraph", "ThunderMLIRBackend", "compiled_graphs",
           "register", "thunder_mlir_backend"]

BACKEND_NAME = "thunder_mlir"
#: ``torch.compile(..., options={...})`` keys: jit's keyword options (its signature)
JIT_OPTIONS = tuple(p for p in inspect.signature(jit).parameters if p != "fn")
#: the graphs compiled through the registered name, newest last; bounded, as each holds its
#: GraphModule and example inputs (an input batch among them) alive
_RECENT: collections.deque[DynamoGraph] = collections.deque(maxlen=16)


@dataclass(eq=False)
class DynamoGraph:
    """One FX graph Dynamo handed to the backend: ``module`` (the ``torch.fx.GraphModule``),
    ``jitted`` (``thunder_mlir.jit(module, **options)``, what runs; pass it to
    ``thunder_mlir.last_traces``/``cache_info``/``fallback_ops``) and ``example_inputs``
    (Dynamo's, the graph's flat inputs: parameters included)."""

    module: torch.fx.GraphModule
    jitted: Any
    example_inputs: list = field(repr=False)

    def examine(self) -> Examination:
        """``thunder_mlir.examine`` of the graph on its example inputs."""
        return examine(self.module, *self.example_inputs)


class ThunderMLIRBackend:
    """A Dynamo backend with fixed jit options: ``torch.compile(m, backend=
    ThunderMLIRBackend(sharp_edges="warn"))``; ``.graphs`` lists the :class:`DynamoGraph`
    it compiled, in order. ``options``: ``jit``'s keyword options (``sharp_edges``,
    ``cache``, ``recompile_limit``, ``executors``, ``dynamic``); ``sharp_edges`` defaults
    to "allow" (the module docstring says why). Raises ValueError for another key."""

    def __init__(self, **options):
        unknown = sorted(set(options) - set(JIT_OPTIONS))
        if unknown:
            raise ValueError(
                f"torch.compile(backend='{BACKEND_NAME}') got unknown option(s) {unknown}; "
                f"its options are thunder_mlir.jit's keyword options: {list(JIT_OPTIONS)}")
        self.options = {"sharp_edges": "allow", **options}
        jit(lambda: None, **self.options)  # validates the values now, as jit does
        self.graphs: list[DynamoGraph] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        # Dynamo's graphs are lazy (torch.fx._lazy_graph_module): their Python code is
        # generated on the first call. Generated inside jit's trace, that would read the
        # graph's node list, a new object per read, as guarded module state and re-trace
        # on every call; so the code is generated here, once.
        from torch.fx._lazy_graph_module import _LazyGraphModule

        _LazyGraphModule.force_recompile(gm)
        graph = DynamoGraph(gm, jit(gm, **self.options), list(example_inputs))
        self.graphs.append(graph)
        return graph.jitted


def thunder_mlir_backend(gm: torch.fx.GraphModule, example_inputs: list, *,
                         options: dict | None = None, mode: str | None = None) -> Callable:
    """The backend registered as "thunder_mlir": ``torch.compile(m, backend="thunder_mlir",
    options={...})`` calls it once per graph with ``options`` (torch's
    ``_TorchCompileWrapper`` passes ``options`` and a non-default ``mode`` as keywords).
    Raises ValueError for an unknown option or a ``mode`` (thunder_mlir has no modes: say
    what you want through ``options``)."""
    if mode not in (None, "default"):
        raise ValueError(f"torch.compile(backend='{BACKEND_NAME}') has no mode {mode!r}: "
                         f"leave mode out and pass jit's options ({list(JIT_OPTIONS)}) "
                         f"as options={{...}}")
    backend = ThunderMLIRBackend(**(options or {}))
    out = backend(gm, example_inputs)
    _RECENT.append(backend.graphs[-1])
    return out


def compiled_graphs() -> list[DynamoGraph]:
    """The graphs compiled through ``backend="thunder_mlir"`` in this process, oldest
    first (the last 16): ``thunder_mlir.last_traces(compiled_graphs()[-1].jitted)``."""
    return list(_RECENT)


def register() -> None:
    """Make ``backend="thunder_mlir"`` known to ``torch._dynamo`` in this process
    (``list_backends()``, ``lookup_backend``). A no-op when the name is already known,
    e.g. from the installed entry point: ``lookup_backend`` registers an entry point's
    function itself and would find a duplicate name (``register_backend`` raises)."""
    from torch._dynamo.backends import registry

    if BACKEND_NAME not in registry._BACKENDS and BACKEND_NAME not in registry._COMPILER_FNS:
        registry.register_backend(thunder_mlir_backend, name=BACKEND_NAME)


register()
