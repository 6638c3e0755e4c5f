"""Every exception and warning class of thunder_mlir, in one module that imports nothing of
thunder_mlir, so that every layer can raise them. Each names what went wrong and what to do.

``Fallback`` is internal: a symbol's decomposition raises it to send the call to the torch
fallback executor, and it never reaches users. Two exceptions stay private to their module,
as control flow that never leaves it: ``aliasing._Copies`` and ``thunder_opt.OptError`` (a
command-line usage error, turned into an exit status).
"""

from __future__ import annotations


class ThunderError(Exception):
    """Base class of thunder_mlir's errors. ``location``: the MLIR location of the op at
    fault, where a pass knows it (thunder-opt prints it as ``file:line:col: error:``)."""

    location = None


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


class PipelineError(PassError):
    """A pass pipeline string names an unknown pass or option, or has a bad value
    (``transforms/registry.parse_pipeline``)."""


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



class ExecutionError(ThunderError, RuntimeError):
    """XLA failed while running a compiled program (any jaxlib/XLA runtime error of an
    executable's run: ``runtime/plan.py`` ``execution_error``). The message names the
    program (the jitted function and where it is defined), the region, the argument
    positions whose buffers' shapes or dtypes differ from what the executable expects
    (both written as ``f32[2,3]``), and XLA's own message. Also a ``RuntimeError``."""


class DeviceMismatchError(RuntimeError, ThunderError):
    """Tensors of one call on different devices (``cuda:0`` and ``cuda:1``, or a CUDA
    tensor given to a program compiled for the CPU), or a device thunder_mlir cannot run
    on: the message names both devices."""


class UnsupportedDtypeError(TypeError, ThunderError):
    """A torch dtype with no MLIR element type in thunder_mlir (e.g. float8, quantized)."""


class MissingImplementationError(LookupError, ThunderError):
    """A ``thunder.executor_call`` (or a custom VJP rule) names an implementation symbol
    that this process does not hold: it was registered by the process that traced the
    program, or by a compilation whose function is gone (ir/implementations.py)."""


class GradError(NotImplementedError):
    """An op the grad pass cannot differentiate (named with its source location)."""


class AutocastError(NotImplementedError):
    """An op inside a ``torch.autocast`` region whose autocast behaviour thunder_mlir
    cannot reproduce (named in the message)."""


class ExecutorError(ThunderError, RuntimeError):
    """A user executor misbehaved: its checker raised, its implementation returned outputs
    of the wrong shape or dtype, an operator was registered twice, a grad transform broke
    its contract. The message names the executor and the op."""


class DynamicShapeFallback(Exception):
    """Internal: a program traced with symbolic sizes (``ir/symbolic.py``) did something
    that needs a concrete size (``int(n)``, a prim without a dynamic-shape lowering, a
    gradient). ``jit`` catches it and compiles the program for static shapes, recording the
    message in ``cache_info``; it never reaches users."""


class Fallback(Exception):
    """Raised by a decomposition that cannot express this call: run it on the torch executor."""


class SharpEdgeWarning(UserWarning):
    """A non-functional call's value was constant-folded into the compiled program."""


class RecompileWarning(UserWarning):
    """A jitted function recompiled more often than its ``recompile_limit``."""


class PerformanceWarning(UserWarning):
    """A jitted program runs correctly but slower than it could, for a reason the user can
    remove (the message says how)."""


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


class ExportError(UnsupportedError):
    """``thunder_mlir.export`` refuses a program whose artifact could not have eager's
    meaning without torch and Python: an op on the torch fallback, a Python side effect,
    a branch on a tensor's value, a host callback, a dimension of ``dynamic_shapes`` that
    cannot stay symbolic. The message names the op and the user's line. Also an
    ``UnsupportedError`` (a ``NotImplementedError``)."""
