"""MLIR dialects of thunder_mlir (installed as ``thunder_mlir.dialects``)."""

from .thunder import (  # noqa: F401
    PRIM_OPS, SEGMENTS, CompositeOp, ExecutorCallOp, I64Array, Thunder,
    YieldOp, load_dialect, pack_runs, segment_kwargs, fits_in_runs,
)
