"""thunder_mlir: a JIT compiler for PyTorch programs built on MLIR, StableHLO and XLA.

    jfn = thunder_mlir.jit(fn_or_module)     # same signature, compiled on first call
    jfn(*args)                               # runs on XLA (torch fallback where needed)
    thunder_mlir.last_traces(jfn)            # the MLIR of each stage of the last compile
    thunder_mlir.set_compile_cache_dir(path)  # where compiled executables persist (None: off)
"""

from __future__ import annotations

import os
import sys


def _checkout_layers(package_dir: str) -> list[str]:
    """The package's other source roots when it is imported from a checkout (``pip install
    -e .``: pyproject's ``dev-mode-dirs`` puts only ``<checkout>/thunder_mlir`` on sys.path):
    ``<checkout>/{dialects,passes,tools}/thunder_mlir``, holding ``ir``, ``transforms`` and
    ``tools``. Empty for an installed wheel, which holds all four in one folder."""
    checkout = os.path.dirname(os.path.dirname(package_dir))
    if not os.path.isfile(os.path.join(checkout, "pyproject.toml")):
        return []
    roots = [os.path.join(checkout, r, "thunder_mlir") for r in ("dialects", "passes", "tools")]
    return [r for r in roots if os.path.isdir(r)]


# before the imports below, which need the other roots (E402: they follow this statement)
__path__ += _checkout_layers(os.path.dirname(os.path.abspath(__file__)))  # noqa: F821

from thunder_mlir.errors import (  # noqa: E402, F401
    CallArgumentError, CompileError, DataDependentControlFlowError, DeviceMismatchError,
    ExecutionError, ExportError,
    LoweringError, PassError,
    PerformanceWarning, RecompileWarning, SharpEdgeError, SharpEdgeWarning, ThunderError,
    TorchOpError, TraceError, UnsupportedError, UnsupportedInputError)
from thunder_mlir.grad_api import grad, value_and_grad  # noqa: E402, F401
from thunder_mlir.function import ThunderFunction  # noqa: E402, F401
from thunder_mlir.pipeline import Stage  # noqa: E402, F401
from thunder_mlir.jit import jit  # noqa: E402, F401
from thunder_mlir.dynamic import mark_dynamic  # noqa: E402, F401
from thunder_mlir.module import ThunderMethod, ThunderModule  # noqa: E402, F401
from thunder_mlir.optimizer import OptimizerStep  # noqa: E402, F401
from thunder_mlir.ir.proxy import TensorProxy  # noqa: E402, F401
from thunder_mlir.export import Exported, deserialize, export, module_weights  # noqa: E402, F401
from thunder_mlir.examine import Examination, OpReport, examine  # noqa: E402, F401
from thunder_mlir.runtime.compile_cache import compile_cache_dir, set_compile_cache_dir  # noqa: E402, F401

if "torch._dynamo" in sys.modules:  # backend="thunder_mlir" (dynamo_backend.py), at no cost
    from thunder_mlir import dynamo_backend  # noqa: E402, F401


def _function(jfn) -> ThunderFunction:
    if isinstance(jfn, (ThunderModule, ThunderMethod, OptimizerStep)):
        return jfn._fn
    if isinstance(jfn, ThunderFunction):
        # called with an optimizer: the whole training step's program (train_step.py)
        return jfn._train._fn if jfn._train is not None else jfn
    raise TypeError(f"expected the result of thunder_mlir.jit, got {type(jfn).__name__}")


def last_traces(jfn) -> list[Stage]:
    """The stages of the last compilation used by ``jfn``: ``initial`` (thunder dialect as
    traced), ``prims`` (after decompose), ``plan`` (after partition), ``stablehlo`` (after
    lowering), and ``xla-compile``. Each Stage has ``name``, ``text`` (MLIR with locations)
    and ``seconds``. Raises RuntimeError before the first call.

    For a ``thunder_mlir.distributed`` step, its stages (``initial``, ``grad``, ``joint``,
    ``step`` with the shardings, ..., ``xla-compile`` listing the collectives)."""
    if getattr(type(jfn), "thunder_distributed", False):
        if not jfn.last_stages:
            raise RuntimeError("last_traces: the step has not been called yet")
        return list(jfn.last_stages)
    entry = _function(jfn).last
    if entry is None:
        raise RuntimeError("last_traces: the jitted function has not been called yet")
    return list(entry.stages)


def fallback_ops(jfn) -> list[str]:
    """Names of the torch ops the last compilation of ``jfn`` ran on the torch fallback."""
    entry = _function(jfn).last
    if entry is None:
        raise RuntimeError("fallback_ops: the jitted function has not been called yet")
    return list(entry.fallbacks)


def cache_hits(jfn) -> int:
    """Calls of ``jfn`` that reused a compiled program."""
    return _function(jfn).cache.hits


def cache_misses(jfn) -> int:
    """Calls of ``jfn`` that traced and compiled a new program."""
    return _function(jfn).cache.misses


def cache_info(jfn) -> dict:
    """The cache of ``jfn``: ``hits``, ``misses``, ``recompile_reasons`` (one line per
    miss after the first, naming the input or guard that changed), ``guards`` (the
    global/closure values the program depends on) and ``entries`` (what each compiled
    entry was specialized on: per input path, tensor metadata or Python value; with dynamic
    shapes, ``dynamic_dims`` (input dim -> its size symbol and why it is symbolic, a shape
    of ``None`` in ``inputs``) and ``shape_guards``, or ``static_because``) and ``dynamic``
    (the function's ``dynamic=`` option, the dims made dynamic automatically, and why
    symbols were turned off for it, if they were), ``value_guards`` ("bool(tensor) at
    file:line: source" -> how many calls that value guard failed: the program branched
    on, or sized an output by, a tensor's value; each entry's ``value_guards`` holds the
    values it was traced with, ``unbacked_sizes`` the data-dependent sizes it keeps as size
    symbols, and ``values_specialized_because`` why it specializes them on values
    instead)."""
    f = _function(jfn)
    c, policy = f.cache, f.dynamic
    return {"hits": c.hits, "misses": c.misses, "recompile_reasons": list(c.reasons),
            "guards": [g.describe() for g in c.schema],
            "entries": [x.specialization() for e in c.entries.values()
                        for x in [e] + e.alternatives +
                        [v for v in e.value_group if v is not e]],
            "value_guards": dict(c.value_guard_misses),
            "dynamic": {"dynamic": policy.dynamic,
                        "automatic": {f"tensor {i}": {d: why for d, why in ds.items()}
                                      for i, ds in policy.auto.items()},
                        "static_because": policy.disabled}}
