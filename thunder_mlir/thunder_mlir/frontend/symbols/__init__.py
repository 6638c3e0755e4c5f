"""torch-level symbols (``ltorch.*``), one module per family; importing registers them."""

from thunder_mlir.frontend.symbols import (  # noqa: F401
    creation, elementwise, indexing, linalg, loss, nn, reduction, shape)
from thunder_mlir.frontend.symbols.registry import BY_NAME, SYMBOLS  # noqa: F401
# new families (after the core modules, whose symbols they reuse)
from thunder_mlir.frontend.symbols import (  # noqa: F401,E402
    conv, interpolate, linalg_extra, misc, nn_extra)
from thunder_mlir.frontend.symbols import random, scatter, sorting, special, views  # noqa: F401,E402
from thunder_mlir.frontend.symbols import control_flow  # noqa: F401,E402
