"""torch-level symbols (``ltorch.*``), one module per family; importing registers them."""

from . import creation, elementwise, indexing, linalg, loss, nn, reduction, shape  # noqa: F401
from .registry import BY_NAME, SYMBOLS  # noqa: F401
# new families (after the core modules, whose symbols they reuse)
from . import conv, interpolate, linalg_extra, misc, nn_extra  # noqa: F401,E402
from . import random, scatter, sort, special, views  # noqa: F401,E402
from . import control_flow  # noqa: F401,E402
