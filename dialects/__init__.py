"""MLIR dialects of thunder_mlir (installed as ``thunder_mlir.dialects``)."""

from .thunder import (  # noqa: F401
    PRIM_OPS, REGION_OPS, RNG_STREAM_SHIFT, SEGMENTS, CheckpointOp, CompositeOp, CondOp,
    ExecutorCallOp, I64Array, Thunder, WhileOp, YieldOp, load_dialect, pack_runs,
    segment_kwargs, fits_in_runs,
)
