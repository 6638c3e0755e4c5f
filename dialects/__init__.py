"""MLIR dialects of thunder_mlir (installed as ``thunder_mlir.dialects``)."""

from .thunder import (  # noqa: F401
    PRIM_OPS, RNG_STREAM_SHIFT, SEGMENTS, CompositeOp, ExecutorCallOp, I64Array, Thunder,
    YieldOp, load_dialect, pack_runs, segment_kwargs, fits_in_runs,
)
