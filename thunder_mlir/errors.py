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
