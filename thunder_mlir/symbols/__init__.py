"""torch-level symbols (``ltorch.*``), one module per family; importing registers them."""

from . import creation, elementwise, indexing, linalg, nn, reduction, shape  # noqa: F401
from .registry import BY_NAME, SYMBOLS  # noqa: F401
