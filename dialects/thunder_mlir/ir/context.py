"""The one MLIR context thunder_mlir builds all IR in, and the lock that guards it.

MLIR contexts are not safe for concurrent mutation, so tracing, passes and lowering run
under ``COMPILE_LOCK``; executing compiled plans does not touch MLIR and runs unlocked.
"""

from __future__ import annotations

import threading

from torch_mlir import ir

from thunder_mlir.ir import prim_defs  # noqa: F401 - defines the prim ops the dialect loads
from thunder_mlir.ir.dialect import load_dialect

COMPILE_LOCK = threading.RLock()
_CONTEXT: ir.Context | None = None


def get_context() -> ir.Context:
    """The shared context with the thunder and StableHLO dialects loaded."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = ir.Context()
        load_dialect(ctx)
        _CONTEXT = ctx
    return _CONTEXT
