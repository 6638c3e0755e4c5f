"""torch-level symbols (``ltorch.*``), one module per family; importing registers them."""

from . import creation, elementwise, indexing, linalg, loss, nn, reduction, shape  # noqa: F401
from .registry import BY_NAME, SYMBOLS  # noqa: F401
from . import conv, interpolate, nn_extra, scatter, sort, special, views  # noqa: F401,E402  (new families, after the core modules)
