"""torch-level symbols (``ltorch.*``), one module per family; importing registers them."""

from thunder_mlir.frontend.symbols.registry import BY_NAME, SYMBOLS  # noqa: F401
from thunder_mlir.frontend.symbols import (  # noqa: F401
    activations, complex_support, control_flow, conv, creation, distance, elementwise, indexing,
    interpolate, linalg, loss, moe, nn, normalization, pooling, random, reduction, scans, scatter,
    shape, sorting, special)
from thunder_mlir.frontend.symbols import inplace  # noqa: F401,E402  (after every functional form)
