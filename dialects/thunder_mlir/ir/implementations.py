"""The process-wide registry of executor implementations: the Python callables that
``thunder.executor_call`` ops (attribute ``impl``) and custom VJP rules (a composite's
``vjp`` attribute) name by symbol.

An implementation that the IR alone determines (a torch fallback call whose non-tensor
arguments are plain values, frontend/torch_fallback.py) is not registered: its op carries
the call (``thunder.torch_call``) and any process rebuilds it from the qualified torch
name. The others are closures over Python objects (a fallback call given a module or a Generator, a
user executor's operator with its call record, the VJP closures grad builds) and are
registered here under a unique symbol, ``<name>$<n>`` (e.g. ``@conftest.cumprod$12``):
the name says what it runs, ``n`` is a process-wide counter.

Lifetime: the registry holds its entries by *weak* reference, so compiling functions in a
loop does not grow it. The strong references are held by whoever needs the callables:
registrations made inside ``holding()`` are kept by that scope's list (jit keeps the list
of a compilation with its cache entry, so every symbol of that compilation's stages, in
``last_traces``, resolves while the jitted function lives; thunder-opt holds one per run),
and the plans hold the callables they call. A registration outside any scope is kept for
the life of the process. Looking up a symbol whose callable is gone, or one registered by
another process, raises ``MissingImplementationError``.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator

from torch_mlir import ir

from thunder_mlir.errors import MissingImplementationError

_entries: "weakref.WeakValueDictionary[str, Callable]" = weakref.WeakValueDictionary()
_counter = itertools.count()
_lock = threading.Lock()
_scopes: contextvars.ContextVar = contextvars.ContextVar("thunder_impl_scopes", default=())
_unscoped: list[Callable] = []  # registrations outside any holding() scope: process life


class _Held:
    """A strong reference to a callable that cannot be weakly referenced (a bound method,
    a builtin): the registry's weak entry points at this wrapper."""

    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def register(name: str, fn: Callable) -> str:
    """Register ``fn`` (an executor call's implementation or a VJP rule) and return its
    new unique symbol name ``<name>$<n>``. The caller's innermost ``holding()`` scope keeps
    ``fn`` alive (see the module docstring)."""
    try:
        weakref.ref(fn)
        held = fn
    except TypeError:
        held = _Held(fn)
    with _lock:
        symbol = f"{name}${next(_counter)}"
        _entries[symbol] = held
    scopes = _scopes.get()
    (scopes[-1] if scopes else _unscoped).append(held)
    return symbol


def symbol_attr(symbol: str) -> ir.FlatSymbolRefAttr:
    """``@symbol`` (the ``impl`` attribute of an executor call); needs an active context."""
    return ir.FlatSymbolRefAttr.get(symbol)


def register_attr(name: str, fn: Callable) -> ir.FlatSymbolRefAttr:
    """``register(name, fn)`` as a symbol attribute."""
    return symbol_attr(register(name, fn))


def lookup(symbol: str) -> Callable:
    """The callable registered as ``symbol``. Raises MissingImplementationError where this
    process holds none (registered by the process that traced the program, or by a
    compilation whose function has been freed)."""
    fn = _entries.get(symbol)
    if fn is None:
        raise MissingImplementationError(
            f"the implementation @{symbol} is not in this process's registry: it was "
            "registered by the process that traced this program (a Python closure cannot be "
            "rebuilt from the IR), or by a compilation that has since been freed; re-run "
            "from the same process, while the jitted function is alive")
    return fn


def lookup_attr(attr: ir.Attribute, location: ir.Location | None = None) -> Callable:
    """``lookup`` of a ``@symbol`` attribute; ``location`` (the op naming it) is given to
    the MissingImplementationError."""
    try:
        return lookup(ir.FlatSymbolRefAttr(attr).value)
    except MissingImplementationError as e:
        e.location = location
        raise


def size() -> int:
    """How many registered implementations are alive now (for leak tests)."""
    return len(_entries)


@contextmanager
def holding() -> Iterator[list]:
    """A scope whose registrations are kept alive by the list it yields (keep that list
    as long as the symbols must resolve)."""
    held: list = []
    token = _scopes.set(_scopes.get() + (held,))
    try:
        yield held
    finally:
        _scopes.reset(token)
