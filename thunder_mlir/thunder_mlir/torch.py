"""``import thunder_mlir.torch as ltorch``: the torch-level symbols by short name.

``ltorch.mul``, ``ltorch.cross_entropy``, ``ltorch.softmax``, ... are the Symbols that
torch calls map to while tracing (``thunder_mlir.frontend.symbols``), as in Thunder's
``thunder.torch``. Use them to name ops in ``OperatorExecutor.register_implementation``
and call them from traced code or execution transforms (on TensorProxies; calling one
outside a trace raises TraceError). An unknown name raises AttributeError.
"""

from __future__ import annotations

from thunder_mlir.frontend import symbols as _symbols
from thunder_mlir.frontend.symbols.registry import BY_NAME as _BY_NAME


def __getattr__(name: str):
    sym = _BY_NAME.get(f"ltorch.{name}")
    if sym is None:
        raise AttributeError(f"thunder_mlir.torch has no symbol '{name}'")
    return sym


def __dir__():
    return sorted(n[len("ltorch."):] for n in _BY_NAME if n.startswith("ltorch."))


del _symbols
