"""Exceptions raised to users of thunder_mlir. Each names what went wrong and what to do."""

from __future__ import annotations


class ThunderError(Exception):
    """Base class of thunder_mlir's errors."""


class TraceError(ThunderError):
    """The program cannot be traced as written (message names the user's line)."""


class DataDependentControlFlowError(TraceError):
    """Python control flow or a Python value depends on a tensor's data while tracing."""


class SharpEdgeError(TraceError):
    """The program escapes the functional-jit contract (see docs/sharp_edges.md)."""


class UnsupportedInputError(ValueError, ThunderError):
    """An argument of a type the jit cannot accept."""


class LoweringError(ThunderError):
    """An op could not be legalized to StableHLO."""


class CompileError(ThunderError):
    """XLA rejected a lowered region."""


class PassError(ThunderError):
    """A pass failed on a module (bad IR, unknown pass, failed verification)."""


class UnsupportedError(TraceError, NotImplementedError):
    """thunder_mlir cannot compile what the program does, though eager PyTorch runs it (an
    unsupported feature, e.g. of a custom ``torch.autograd.Function``). The message names
    the line and the way around it. Also a ``NotImplementedError``."""


class CallArgumentError(TraceError, TypeError):
    """A jitted function or module was called with arguments its signature (the module's
    ``forward``'s) does not accept. Also a ``TypeError``, as eager raises."""


class TorchOpError(TraceError):
    """A torch op in the program got arguments eager PyTorch rejects too (mismatched
    shapes, dtypes without a kernel, ...). The message is the user's line, then eager's own
    message, then the op and its arguments. Every instance is also an instance of the
    exception type eager raises (``TorchOpRuntimeError`` is a ``RuntimeError``), so code
    catching eager's error catches it."""


class TorchOpRuntimeError(TorchOpError, RuntimeError):
    """A ``TorchOpError`` where eager raises ``RuntimeError`` (e.g. a shape mismatch)."""


class TorchOpValueError(TorchOpError, ValueError):
    """A ``TorchOpError`` where eager raises ``ValueError``."""


class TorchOpTypeError(TorchOpError, TypeError):
    """A ``TorchOpError`` where eager raises ``TypeError``."""


class TorchOpIndexError(TorchOpError, IndexError):
    """A ``TorchOpError`` where eager raises ``IndexError`` (e.g. a dim out of range)."""


class TorchOpNotImplementedError(TorchOpError, NotImplementedError):
    """A ``TorchOpError`` where eager raises ``NotImplementedError`` (a dtype without a
    kernel, e.g. ``bitwise_and`` of floats)."""


_TORCH_OP_TYPES: dict[type, type] = {
    RuntimeError: TorchOpRuntimeError, ValueError: TorchOpValueError,
    TypeError: TorchOpTypeError, IndexError: TorchOpIndexError,
    NotImplementedError: TorchOpNotImplementedError,
}


def torch_op_error_type(eager_type: type[BaseException]) -> type[TorchOpError]:
    """The ``TorchOpError`` subclass that is also ``eager_type`` (created, and cached, for
    exception types beyond the five predefined ones, e.g. ``torch.linalg.LinAlgError``;
    ``TorchOpRuntimeError`` for a type that cannot be combined with another base)."""
    cls = _TORCH_OP_TYPES.get(eager_type)
    if cls is None:
        try:
            cls = type(f"TorchOp{eager_type.__name__.lstrip('_')}", (TorchOpError, eager_type),
                       {"__module__": __name__,
                        "__doc__": f"A TorchOpError where eager raises {eager_type.__name__}."})
        except TypeError:  # instance lay-out conflict (OSError, ...)
            cls = TorchOpRuntimeError
        _TORCH_OP_TYPES[eager_type] = cls
    return cls
