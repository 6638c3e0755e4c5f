"""Sharp edges: where a Python program can escape the functional-jit contract.

While a program is traced, ``SharpEdgeMonitor`` watches the *user's* frames (code outside
site-packages, the standard library and thunder_mlir):

* reads of globals and closure cells (``LOAD_GLOBAL``/``LOAD_DEREF`` opcodes, via
  ``sys.settrace`` with opcode events) become **guards** when the value is a plain Python
  value (number, string, bool, None, dtype, device, tuples of those); tensors read that way
  are remembered by name, so the error raised when one reaches an op names it;
* writes to globals and to closure cells of functions defined outside the trace
  (``STORE_GLOBAL``, ``STORE_DEREF``, ``DELETE_DEREF``, ...) are reported: the compiled
  program does not re-run Python, so the write would happen once, at trace time;
* calls of non-functional functions (``random.*``, ``time.*``, ``numpy.random.*``,
  ``os.urandom``; via ``sys.setprofile``) follow the ``sharp_edges`` policy: their value
  is constant-folded into the program; ``"warn"`` says so, ``"error"`` refuses.

Input containers are handed to the program as ``TracedList``/``TracedDict``, which refuse
mutation. See docs/sharp_edges.md for the semantics and examples.
"""

from __future__ import annotations

import dis
import gc
import os
import random
import sys
import sysconfig
import time
import types
import warnings
from dataclasses import dataclass, field

import torch

from .cache import _MISSING as _GUARD_MISSING, Guard
from .errors import SharpEdgeError

POLICIES = ("allow", "warn", "error")


class SharpEdgeWarning(UserWarning):
    """A non-functional call's value was constant-folded into the compiled program."""


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"],
            os.path.dirname(os.path.abspath(__file__)),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  + os.sep + "dialects",
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  + os.sep + "passes"}
    return tuple(os.path.abspath(d) for d in dirs)


_LIB_DIRS = _library_dirs()
_USER_CODE: dict[types.CodeType, bool] = {}


def is_user_code(code: types.CodeType) -> bool:
    r = _USER_CODE.get(code)
    if r is None:
        fn = code.co_filename
        r = not (fn.startswith("<") or os.path.abspath(fn).startswith(_LIB_DIRS))
        _USER_CODE[code] = r
    return r


_INSTRUCTIONS: dict[types.CodeType, dict[int, dis.Instruction]] = {}
_WATCHED = {"LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLASSDEREF", "STORE_GLOBAL", "DELETE_GLOBAL",
            "STORE_DEREF", "DELETE_DEREF", "MAKE_FUNCTION"}


_ATTR_CHAINS: dict[tuple[types.CodeType, int], tuple[str, ...]] = {}


def _instructions(code) -> dict[int, dis.Instruction]:
    m = _INSTRUCTIONS.get(code)
    if m is None:
        ins = list(dis.get_instructions(code))
        m = {}
        for k, i in enumerate(ins):
            if i.opname in _WATCHED:
                if i.opname == "MAKE_FUNCTION":  # the code object is loaded just before
                    prev = next((p for p in reversed(ins[:k]) if p.opname == "LOAD_CONST"), None)
                    i = i._replace(argval=prev.argval if prev else None)
                elif i.opname.startswith("LOAD_"):
                    # the attribute names loaded right after (``obj.w``, ``np.random.rand``)
                    chain = []
                    for nxt in ins[k + 1:]:
                        if nxt.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                            break
                        chain.append(nxt.argval)
                    if chain:
                        _ATTR_CHAINS[(code, i.offset)] = tuple(chain)
                m[i.offset] = i
        _INSTRUCTIONS[code] = m
    return m


def _static_attr(obj, name: str):
    """``obj.name`` without running user code (properties, __getattr__): module attributes,
    instance ``__dict__`` entries and nn.Module parameters/buffers/submodules; else _MISSING."""
    if isinstance(obj, types.ModuleType):
        return getattr(obj, name, _MISSING)
    try:  # not getattr: a user __getattr__ must not run inside the trace hook
        d = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001 - no instance dict
        return _MISSING
    if type(d) is not dict or isinstance(obj, type):
        return _MISSING
    if name in d:
        return d[name]
    if isinstance(obj, torch.nn.Module):
        for k in ("_parameters", "_buffers", "_modules"):
            if name in d.get(k, ()):
                return d[k][name]
    return _MISSING


_MISSING = object()


def guardable(v) -> bool:
    """Values recorded as guards: plain, hashable Python values."""
    if isinstance(v, (bool, int, float, complex, str, type(None), torch.dtype, torch.device)):
        return True
    return type(v) is tuple and all(guardable(x) for x in v)


def nonfunctional_name(cfunc) -> str | None:
    """``module.name`` if a C function is a non-functional call (random, time, urandom)."""
    name = getattr(cfunc, "__name__", "?")
    owner = getattr(cfunc, "__self__", None)
    mod = getattr(cfunc, "__module__", None) or ""
    if mod == "time" or owner is time:
        return f"time.{name}"
    if isinstance(owner, random.Random):
        return f"random.{name}"
    if cfunc is os.urandom:
        return "os.urandom"
    if mod.startswith("numpy.random") or type(owner).__module__.startswith("numpy.random"):
        return f"numpy.random.{name}"
    return None


@dataclass
class SharpEdgeMonitor:
    """Watches one trace; see the module docstring. Use as a context manager."""

    fn: object
    policy: str = "warn"
    guards: list[tuple[Guard, object]] = field(default_factory=list)
    tensor_names: dict[int, str] = field(default_factory=dict)
    mutations: list[str] = field(default_factory=list)
    nonfunctional: list[str] = field(default_factory=list)
    _inner_codes: set = field(default_factory=set)
    _undo: list = field(default_factory=list)  # (Guard, value before the first write)

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"sharp_edges must be one of {POLICIES}, got {self.policy!r}")
        f = self.fn
        while isinstance(f, types.MethodType) or hasattr(f, "__wrapped__"):
            f = getattr(f, "__func__", None) or f.__wrapped__
        self._root = f if isinstance(f, types.FunctionType) else None

    # -- context manager
    def __enter__(self):
        self._prev_trace, self._prev_profile = sys.gettrace(), sys.getprofile()
        sys.settrace(self._global_trace)  # guards are needed for correctness: always on
        # A profiler installed from C (cProfile) cannot be restored through
        # sys.setprofile; leave any active profiler alone (non-functional calls are then
        # not detected while it runs).
        self._profiling = self._prev_profile is None
        if self._profiling:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._prev_trace if callable(self._prev_trace) else None)
        if self._profiling:
            sys.setprofile(None)
        # A reported write to a global or an outside cell is undone: the failed jit call
        # leaves the program's state as it found it.
        for g, old in reversed(self._undo):
            if g.kind == "global":
                if old is _MISSING:
                    g.scope.pop(g.name, None)
                else:
                    g.scope[g.name] = old
            elif old is _MISSING:
                try:
                    del g.scope.cell_contents
                except ValueError:
                    pass
            else:
                g.scope.cell_contents = old
        self._undo.clear()
        return False

    def _remember(self, guard: Guard) -> None:
        """Record the value before a write (the opcode event fires before the store)."""
        if not any(g.same_source(guard) for g, _ in self._undo):
            old = guard.current()
            self._undo.append((guard, _MISSING if old is _GUARD_MISSING else old))

    def finish(self) -> None:
        """Raise or warn for what the trace did (called after a successful trace)."""
        from .tracing import user_stacklevel

        if self.mutations:
            raise SharpEdgeError(self.mutations[0] + " thunder_mlir runs the compiled program "
                                 "without re-running Python, so the write would happen only "
                                 "once, at trace time (it has been undone). Return the value "
                                 "instead.")
        if self.nonfunctional and self.policy != "allow":
            msg = (f"{self.nonfunctional[0]} is a non-functional call: its value at trace time "
                   "was constant-folded into the compiled program and will not change between "
                   "calls")
            if self.policy == "error":
                raise SharpEdgeError(msg + " (sharp_edges='error'). Pass the value as an input.")
            warnings.warn(msg + ". Pass the value as an input, or use jit(..., "
                          "sharp_edges='allow') to silence this.", SharpEdgeWarning,
                          stacklevel=user_stacklevel())

    # -- hooks
    def _global_trace(self, frame, event, arg):
        if event == "call" and is_user_code(frame.f_code):
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            return self._local_trace
        return None

    def _local_trace(self, frame, event, arg):
        if event != "opcode":
            return self._local_trace
        ins = _instructions(frame.f_code).get(frame.f_lasti)
        if ins is not None:
            self._on_instruction(frame, ins)
        return self._local_trace

    def _where(self, frame) -> str:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}:"

    def _on_instruction(self, frame, ins) -> None:
        op, name = ins.opname, ins.argval
        if op == "MAKE_FUNCTION":
            if isinstance(name, types.CodeType):
                self._inner_codes.add(name)
            return
        if op in ("LOAD_GLOBAL",):
            if name not in frame.f_globals:
                return
            value = frame.f_globals[name]
            self._read(frame, Guard("global", name, frame.f_globals), value, "global")
            self._read_attributes(frame, ins, value, f"global '{name}'")
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            cell = self._external_cell(frame, name)
            if cell is not None:
                try:
                    value = cell.cell_contents
                except ValueError:
                    return
                self._read(frame, Guard("cell", name, cell), value, "closure variable")
                self._read_attributes(frame, ins, value, f"closure variable '{name}'")
        elif op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            verb = "assigns" if op.startswith("STORE") else "deletes"
            self.mutations.append(f"{self._where(frame)} the program {verb} global '{name}'.")
            self._remember(Guard("global", name, frame.f_globals))
        elif op in ("STORE_DEREF", "DELETE_DEREF"):
            cell = self._external_cell(frame, name)
            if cell is not None:
                self._remember(Guard("cell", name, cell))
                verb = "assigns" if op.startswith("STORE") else "deletes"
                self.mutations.append(
                    f"{self._where(frame)} the program {verb} nonlocal '{name}', a closure "
                    "variable of a function defined outside the jitted call.")

    def _read_attributes(self, frame, ins, value, source: str) -> None:
        """Follow ``source.a.b`` (the LOAD_ATTRs right after the load) statically: tensors
        found are named for the foreign-tensor error; numpy.random functions (Cython, which
        the profile hook does not see) are non-functional calls."""
        chain = _ATTR_CHAINS.get((frame.f_code, ins.offset), ())
        path = ins.argval
        obj = value
        for attr in (None,) + chain:
            if attr is not None:
                try:
                    obj = _static_attr(obj, attr)
                except Exception:  # noqa: BLE001 - naming is best effort
                    return
                if obj is _MISSING:
                    return
                path += "." + attr
                if isinstance(obj, torch.Tensor):
                    self.tensor_names.setdefault(id(obj), f"attribute '{path}' of {source}")
            if callable(obj) and not isinstance(obj, (types.BuiltinFunctionType,
                                                      types.FunctionType, type)):
                name = nonfunctional_name(obj)
                if name is not None and name.startswith("numpy.random"):
                    self.nonfunctional.append(f"{self._where(frame)} {name}()")
                    return

    def _read(self, frame, guard: Guard, value, kind: str) -> None:
        if isinstance(value, torch.Tensor):
            self.tensor_names[id(value)] = f"{kind} '{guard.name}'"
        elif guardable(value):
            if not any(g.same_source(guard) for g, _ in self.guards):
                self.guards.append((guard, value))

    def _external_cell(self, frame, name):
        """The cell of free variable ``name`` if it belongs to a function defined outside
        the trace (its value is state the program did not create), else None."""
        code = frame.f_code
        if name not in code.co_freevars or code in self._inner_codes:
            return None
        idx = code.co_freevars.index(name)
        if self._root is not None and code is self._root.__code__:
            return self._root.__closure__[idx]
        fns = [f for f in gc.get_referrers(code)
               if isinstance(f, types.FunctionType) and f.__code__ is code and f.__closure__]
        if len(fns) == 1:
            return fns[0].__closure__[idx]
        return None

    def _profile(self, frame, event, arg):
        if event == "c_call" and is_user_code(frame.f_code):
            name = nonfunctional_name(arg)
            if name is not None:
                self.nonfunctional.append(f"{self._where(frame)} {name}()")
        elif event == "call" and frame.f_back is not None and is_user_code(frame.f_back.f_code):
            if frame.f_code.co_filename == random.__file__:
                self.nonfunctional.append(
                    f"{self._where(frame.f_back)} random.{frame.f_code.co_name}()")


# ----------------------------------------------------------- input containers
def _refuse(kind: str, method: str):
    def mutator(self, *args, **kwargs):
        from .tracing import describe_frame, user_frame

        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  the program modifies an input {kind} "
            f"({method}); thunder_mlir does not modify its inputs. Copy it first "
            f"(e.g. {kind}(x)) and return the new value.")
    mutator.__name__ = method
    return mutator


class TracedList(list):
    """An input list while tracing: reads work, mutation raises NotImplementedError."""


class TracedDict(dict):
    """An input dict while tracing: reads work, mutation raises NotImplementedError."""


for _m in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
           "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(TracedList, _m, _refuse("list", _m))
for _m in ("__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault",
           "__ior__"):
    setattr(TracedDict, _m, _refuse("dict", _m))


def freeze_containers(x):
    """Replace the lists and dicts inside ``x`` by their Traced* counterparts."""
    if type(x) is list:
        return TracedList(freeze_containers(v) for v in x)
    if type(x) is dict:
        return TracedDict({k: freeze_containers(v) for k, v in x.items()})
    if type(x) is tuple:
        return tuple(freeze_containers(v) for v in x)
    return x
