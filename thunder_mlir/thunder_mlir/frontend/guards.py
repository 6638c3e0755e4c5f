"""Guards: the Python state a trace read, checked before a cached program is reused.

A trace depends on more than its inputs: on globals and closure cells its code read
(recorded by ``sharp_edges.SharpEdgeMonitor``), and on attributes of the objects it ran
against — an ``nn.Module``'s ``self.scale``, a ``self.use_relu`` flag, ``self.training``,
its ``config``'s fields, attributes of a plain object reached from a global. Each becomes a
``Guard`` whose current value is part of the function's cache key (``cache.py``), so a
changed value re-traces instead of returning a stale result.

Attribute reads are observed by ``AttributeRecorder``: while a trace runs, each watched
object's class is swapped for a subclass (same name) whose ``__getattribute__`` records the
attributes read and whose ``__setattr__`` records the attributes written, and restored
afterwards. Library code is observed too (Hugging Face's ``self.config.<field>``), which
opcode tracing of user frames alone would miss. As Dynamo does, only what was read is
guarded: an attribute the program never reads may change freely.

* A plain value (number, string, bool, None, dtype, device, and tuples, lists, dicts and
  sets of those) is guarded by value; a function, a class or another object by identity
  (and the object's own attribute reads are recorded in turn).
* Tensors are not guarded here: parameters and buffers are program inputs; so are tensors
  held as plain attributes of the module tree and of objects reached from it, which the
  recorder finds by their attribute path (``candidates``; module_attributes.py lifts them);
  a tensor read from elsewhere is refused where an op uses it
  (``dispatch._check_no_foreign_tensors``).
* A write (``self.calls += 1``) is undone when the trace ends and *replayed* after every
  run of the compiled program, so the object ends as eager leaves it. Its value is a
  Python value fixed by the trace's inputs and guards (a read of ``self.calls`` guards it,
  so ``self.calls += 1`` re-traces on each call, as eager semantics require). Tensors the
  program assigns to public attributes of the module tree or of objects reached from it
  are state outputs set after every run (``tensor_writes``, module_attributes.py); to
  other objects, or inside a new object, they are refused (NotImplementedError).

The key of a function's guards is computed by one generated function (``key_function``):
one dictionary lookup per guard, no Python loop on the cache-hit path.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from thunder_mlir.frontend import module_attributes

MISSING = object()  # the value of a global, cell or attribute that does not exist


def guardable(v) -> bool:
    """Values guarded by value: plain, hashable Python values."""
    if isinstance(v, (bool, int, float, complex, str, type(None), torch.dtype, torch.device)):
        return True
    return type(v) is tuple and all(guardable(x) for x in v)


def freeze(v):
    """A hashable form of a plain container (``[1, 2]`` -> ``(list, (1, 2))``), compared by
    value; anything else unchanged."""
    t = type(v)
    if t in (list, tuple):
        return (t, tuple(freeze(x) for x in v))
    if t is dict:
        return (dict, tuple((k, freeze(x)) for k, x in v.items()))
    if t in (set, frozenset):
        return (t, frozenset(freeze(x) for x in v))
    return v


def _plain_container(v) -> bool:
    if type(v) in (list, tuple, set, frozenset):
        return all(guardable(x) or _plain_container(x) for x in v)
    if type(v) is dict:
        return all(guardable(k) and (guardable(x) or _plain_container(x)) for k, x in v.items())
    return False


@dataclass(eq=False)
class Guard:
    """One source of a Python value a trace read.

    ``kind``: "global" (``scope`` is the globals dict), "cell" (a closure cell), "attr"
    (``scope`` is the object; ``owner`` describes it for messages). ``by_identity``: the
    key holds the value's identity (an object, a function); ``by_type``: the key holds the
    value's type (a property that builds a new object at every read, whose identity no
    call can match: see ``_new_at_each_read``); ``frozen``: a plain container,
    keyed by value (``freeze``); ``via_getattr``: an attribute not in the object's
    ``__dict__`` (a class attribute, a property, a remapped config field), read with
    ``getattr``."""

    kind: str
    name: str
    scope: Any
    owner: str = ""
    by_identity: bool = False
    by_type: bool = False
    frozen: bool = False
    via_getattr: bool = False

    def current(self):
        """The value now (``MISSING`` if the source no longer exists)."""
        if self.kind == "global":
            return self.scope.get(self.name, MISSING)
        if self.kind == "cell":
            try:
                return self.scope.cell_contents
            except ValueError:  # an emptied cell (del of a nonlocal)
                return MISSING
        if self.via_getattr:
            return _getattr(self.scope, self.name)
        return _instance_dict(self.scope).get(self.name, MISSING)

    def key(self, value):
        """The cache-key form of ``value`` (see the class docstring)."""
        if self.by_identity:
            return id(value)
        if self.by_type:
            return type(value)
        if self.frozen:
            return freeze(value)
        return _untensor(value) if self.kind == "attr" else value

    def same_source(self, other: "Guard") -> bool:
        return self.kind == other.kind and self.name == other.name and self.scope is other.scope

    def describe(self) -> str:
        if self.kind == "attr":
            return f"attribute '{self.name}' of {self.owner}"
        return f"{self.kind} '{self.name}'"


def _getattr(obj, name: str):
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001 - a property that now raises: the value changed
        return MISSING


def _instance_dict(obj) -> dict:
    return object.__getattribute__(obj, "__dict__")


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


class TensorNow:
    """The key of a by-value attribute guard whose value is now a tensor (a ``None`` cache
    the program filled: the attribute is then a program input, module_attributes.py)."""


def _untensor(v):
    return TensorNow if isinstance(v, torch.Tensor) else v


def key_function(schema: list[Guard]) -> Callable[[], tuple]:
    """A function returning ``tuple(g.key(g.current()) for g in schema)``, generated as one
    expression (dictionary lookups bound in advance) for the cache-hit path."""
    env: dict[str, Any] = {"M": MISSING, "_fz": freeze, "_ga": _getattr, "_cell": _cell,
                           "_nt": _untensor}
    parts = []
    for i, g in enumerate(schema):
        if g.kind == "cell":
            env[f"c{i}"] = g.scope
            expr = f"_cell(c{i})"
        elif g.kind == "attr" and g.via_getattr:
            env[f"o{i}"] = g.scope
            expr = f"_ga(o{i}, {g.name!r})"
        else:
            env[f"d{i}"] = g.scope if g.kind == "global" else _instance_dict(g.scope)
            expr = f"d{i}.get({g.name!r}, M)"
        if g.by_identity:
            expr = f"id({expr})"
        elif g.by_type:
            expr = f"type({expr})"
        elif g.frozen:
            expr = f"_fz({expr})"
        elif g.kind == "attr":
            expr = f"_nt({expr})"
        parts.append(expr)
    return eval(f"lambda: ({''.join(p + ', ' for p in parts)})", env)  # noqa: S307


def _new_at_each_read(obj, name: str, value) -> bool:
    """Whether ``obj.name`` is a property that returns a new object at every read
    (transformers 5.23's ``config.per_layer_config``, a view built from the config, which
    ``DynamicCache(config=...)`` reads in every decoder's forward). Guarded by identity, it
    would fail at every call and re-trace each one. What the program takes from such an
    object is the getter's reads of ``obj`` and the program's reads of the object, each
    of which is recorded (the object's own methods read ``obj``), so the guard keeps its
    type only. A getter that returns the same object twice (a stored attribute behind a
    property) keeps the identity guard. Reads the property a second time."""
    import inspect

    if not isinstance(inspect.getattr_static(type(obj), name, None), property):
        return False
    return _getattr(obj, name) is not value


# ------------------------------------------------------------------ attribute recording
_ACTIVE = threading.local()  # .recorder: the AttributeRecorder of this thread's trace
_RECORDING: dict[type, type] = {}
# nn.Module's own bookkeeping (parameter, buffer, submodule and hook dicts): structure,
# not values the program computes with (module.py checks it on every call)
_MODULE_INTERNALS = frozenset(torch.nn.Module().__dict__) - {"training"}


def _recording_class(cls: type) -> type | None:
    """A subclass of ``cls`` (same name and layout) whose attribute reads and writes are
    reported to the active recorder; None if ``cls`` cannot be swapped in."""
    rc = _RECORDING.get(cls)
    if rc is None and cls not in _RECORDING:
        get, set_ = cls.__getattribute__, cls.__setattr__

        def __getattribute__(self, name):
            value = get(self, name)
            rec = getattr(_ACTIVE, "recorder", None)
            if rec is not None and name[:2] != "__":
                rec.on_read(self, name, value)
            return value

        def __setattr__(self, name, value):
            rec = getattr(_ACTIVE, "recorder", None)
            if rec is not None:
                rec.on_write(self, name, value)
            set_(self, name, value)

        try:
            rc = type(cls.__name__, (cls,), {
                "__getattribute__": __getattribute__, "__setattr__": __setattr__,
                "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__thunder_recorded__": cls})
        except Exception:  # noqa: BLE001 - final classes, __init_subclass__ that refuses
            rc = None
        _RECORDING[cls] = rc
    return rc


def active_recorder() -> AttributeRecorder | None:
    """The recorder of this thread's trace, if one is active."""
    return getattr(_ACTIVE, "recorder", None)


def _watchable(v) -> bool:
    """Objects whose attribute reads are recorded: instances of Python classes that are not
    functions, classes, modules (Python modules), tensors or torch internals."""
    if isinstance(v, (torch.Tensor, type, types.ModuleType, types.FunctionType,
                      types.BuiltinFunctionType, types.MethodType, torch.dtype, torch.device,
                      torch.Generator)):
        return False
    t = type(v)
    return hasattr(v, "__dict__") and t.__module__ not in ("builtins",) and \
        not t.__module__.startswith(("torch._", "thunder_mlir"))


class AttributeRecorder:
    """Records the attribute reads (``guards``) and writes (``writes``) of the watched
    objects while active; see the module docstring. Use as a context manager around a
    trace; ``watch`` objects before or during it."""

    def __init__(self):
        self.guards: list[tuple[Guard, Any]] = []
        self.writes: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        self._seen: set[tuple[int, str]] = set()
        self._swapped: list[tuple[Any, type]] = []
        self._names: dict[int, str] = {}
        self._undo: list[tuple[Any, str, Any]] = []
        self.errors: list[str] = []
        # tensors held as attributes (frontend/module_attributes.py): each watched object's
        # attribute path from the jitted module (objects reached from it only), the paths
        # read whose values hold tensors from outside the trace (in order), the id of each
        # such tensor -> its path, and the lifted attributes holding input proxies
        # ((id(holder), name) -> the value installed)
        self._paths: dict[int, tuple[str, ...]] = {}
        self.candidates: dict[tuple[str, ...], None] = {}
        self.liftable: dict[int, tuple[str, ...]] = {}
        # the id of each tensor read from an attribute of a watched object with no path
        # (not liftable: a training step's module argument, an object reached from a
        # global, a property) -> "'name' of <owner>", for the foreign-tensor error
        # (dispatch.py)
        self.unlifted: dict[int, str] = {}
        self.installed: dict[tuple[int, str], Any] = {}
        # (id(holder), name) -> (path, value): tensors the program assigns to attributes
        # of such objects, set on them after every run
        self.tensor_writes: dict[tuple[int, str], tuple[tuple[str, ...], Any]] = {}

    def watch(self, obj, owner: str, path: tuple[str, ...] | None = None) -> None:
        """Record ``obj``'s attribute reads and writes from now until the trace ends.
        ``path``: its attribute path from the jitted module, if reached from it: then the
        tensors its attributes hold are lifted as program inputs (module_attributes.py)."""
        if path is not None and id(obj) not in self._paths:
            self._paths[id(obj)] = path
        if id(obj) in self._names or getattr(type(obj), "__thunder_recorded__", None):
            return
        rc = _recording_class(type(obj))
        try:
            if rc is None:
                raise TypeError
            object.__setattr__(obj, "__class__", rc)
        except TypeError:  # (types.SimpleNamespace, classes with __slots__): reads cannot
            # be observed, so every attribute in its __dict__ is guarded
            self._names[id(obj)] = owner
            for name, value in list(getattr(obj, "__dict__", {}).items()):
                self.on_read(obj, name, value)
            return
        self._names[id(obj)] = owner
        self._swapped.append((obj, type(obj).__thunder_recorded__))

    def __enter__(self):
        self._prev = getattr(_ACTIVE, "recorder", None)
        _ACTIVE.recorder = self
        return self

    def __exit__(self, *exc):
        _ACTIVE.recorder = self._prev
        for obj, cls in reversed(self._swapped):
            object.__setattr__(obj, "__class__", cls)
        self._swapped.clear()
        for obj, name, old in reversed(self._undo):  # the writes are replayed after each run
            if old is MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, old)
        self._undo.clear()
        return False

    # -- hooks (called from the recording classes)
    def on_read(self, obj, name: str, value) -> None:
        k = (id(obj), name)
        if k in self._seen or name in _MODULE_INTERNALS:
            return
        if id(obj) not in self._names:
            # an object the program made of a watched object's recording class (Hugging
            # Face's self.layers[:n] slices a ModuleList with self.__class__): state of this
            # trace only. Guarding it would add new guard sources on every trace, which
            # empties the cache (cache.py)
            return
        self._seen.add(k)
        if k in self.installed:
            return  # a lifted attribute: input proxies (module_attributes.py)
        path = self._paths.get(id(obj))
        if path is not None and (module_attributes.attribute(obj, name) is not value or
                                 isinstance(value, torch.nn.Module)):
            path = None  # (a property, a class attribute: no path the call can re-read)
        if path is not None:
            tensors = module_attributes.tensor_leaves(value)
            if tensors is not None:  # a tensor attribute: to become a program input
                source = path + (name,)
                self.candidates[source] = None
                for t in tensors:
                    self.liftable.setdefault(id(t), source)
                if type(value) not in (torch.Tensor, torch.nn.Parameter):
                    # a list or dict: lifted before the program can mutate the caller's
                    raise module_attributes.LiftNeeded(tuple(self.candidates))
                return
        elif not isinstance(value, torch.nn.Module):
            for t in module_attributes.tensor_leaves(value) or ():
                self.unlifted.setdefault(
                    id(t), f"'{name}' of {self._names.get(id(obj), type(obj).__name__)}")
        if isinstance(value, (torch.Tensor, torch.nn.Module)):
            return  # inputs of the program / structure checked by module.py
        try:
            in_dict = name in _instance_dict(obj)
        except Exception:  # noqa: BLE001 - no instance dict
            in_dict = False
        owner = self._names.get(id(obj), type(obj).__name__)
        if not in_dict and name[0] == "_":
            return  # a private class attribute (torch's own bookkeeping)
        if not in_dict and isinstance(value, (types.MethodType, types.FunctionType,
                                              types.BuiltinMethodType)):
            if isinstance(obj, torch.nn.Module):  # no instance attribute shadows the
                # method (m.forward = ... after the first call)
                self.guards.append((Guard("attr", name, obj, owner, by_identity=True),
                                    MISSING))
            return
        g = Guard("attr", name, obj, owner, via_getattr=not in_dict)
        if guardable(value):
            pass
        elif _plain_container(value):
            g.frozen = True
        elif not in_dict and _new_at_each_read(obj, name, value):
            g.by_type = True
        else:
            g.by_identity = True
            if _watchable(value):
                self.watch(value, f"{owner}.{name}", None if path is None else path + (name,))
        self.guards.append((g, value))

    def on_write(self, obj, name: str, value) -> None:
        from thunder_mlir.ir.proxy import TensorProxy

        if id(obj) not in self._names:  # made by the program (see on_read): not replayed
            return
        k = (id(obj), name)
        if k in self.installed:  # a lifted attribute (module_attributes.py)
            if value is self.installed[k]:
                return  # its own value again (self.k = self.k.to(k.dtype)): no write
            if module_attributes.holds_traced_tensors(value):
                self._tensor_write(obj, name, value)
            elif not any(isinstance(x, torch.Tensor) for x in (value, *_leaves(value))):
                self.writes[k] = (obj, name, value)  # a plain value: replayed (no undo:
                self._seen.add(k)  # module._restore gives the attribute its own back)
            else:
                self._refuse(f"assigning a tensor from outside the program to attribute "
                             f"'{name}' of {self._names.get(id(obj), type(obj).__name__)}",
                             "the compiled program cannot leave it there. Assign it "
                             "outside the jitted call, or pass it as an argument")
            return
        path = self._paths.get(id(obj))
        if path is not None and name[0] != "_" and \
                module_attributes.holds_traced_tensors(value) and \
                not (isinstance(obj, torch.nn.Module) and any(
                    name in getattr(obj, d, ()) for d in
                    ("_parameters", "_buffers", "_modules"))):
            self._remember(obj, name)  # (undone when the trace ends)
            self._tensor_write(obj, name, value)
            return

        if isinstance(obj, torch.nn.Module):
            registered = any(name in getattr(obj, d, ()) for d in
                             ("_parameters", "_buffers", "_modules"))
            if registered:  # functional_call's reparametrization, or the user's
                if type(value) is TensorProxy and not _is_trace_input(value):
                    self._refuse(f"assigning a tensor computed in the program to "
                                 f"'{name}' of {self._names.get(id(obj), type(obj).__name__)}"
                                 f" (a registered parameter, buffer or submodule)",
                                 f"update it in place (self.{name}.copy_(value))")
                return
        holds_tensor = isinstance(value, torch.Tensor) or any(
            isinstance(x, torch.Tensor) for x in _leaves(value))
        if holds_tensor and name[0] == "_":
            # a private attribute holding tensors: a module's own bookkeeping as
            # functional_call swaps its parameters (RNNBase._flat_weights); undone at the end
            # of the trace, not replayed
            self._remember(obj, name)
            return
        if holds_tensor:
            self._refuse(f"assigning a tensor to attribute '{name}' of "
                         f"{self._names.get(id(obj), type(obj).__name__)}",
                         "the compiled program cannot leave tensors on objects. Return it "
                         "instead, or register a buffer and update it in place")
        self._remember(obj, name)
        self.writes[k] = (obj, name, value)
        self._seen.add(k)  # a later read sees the written value: nothing to guard

    def _tensor_write(self, obj, name: str, value) -> None:
        """The program assigns tensors it computed (or its inputs) to an attribute of the
        module tree or of an object reached from it: a state output, set on the holder at
        its path after every run (``tensor_writes``; module_attributes.py)."""
        self.tensor_writes[(id(obj), name)] = (self._paths[id(obj)] + (name,), value)
        self._seen.add((id(obj), name))  # a later read sees the written value

    def _remember(self, obj, name: str) -> None:
        """Keep the value before the first write, to restore when the trace ends."""
        if any(o is obj and n == name for o, n, _ in self._undo):
            return
        try:
            old = _instance_dict(obj).get(name, MISSING)
        except Exception:  # noqa: BLE001
            old = MISSING
        self._undo.append((obj, name, old))

    def _refuse(self, what: str, instead: str) -> None:
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise NotImplementedError(f"{describe_frame(user_frame())}\n  {what} inside a jitted "
                                  f"function is not supported: {instead}.")

    def replay(self) -> list[tuple[Any, str, Any]]:
        """The writes to replay after each run, in order: (object, name, value)."""
        return list(self.writes.values())


def _leaves(v, depth: int = 0):
    """The values inside ``v``: elements of containers, and the instance attributes of
    plain objects (a new object holding the program's tensors must not be replayed as a
    plain value), to a depth of 8."""
    if depth > 8:
        return
    if type(v) in (list, tuple, set, frozenset):
        for x in v:
            yield x
            yield from _leaves(x, depth + 1)
    elif type(v) is dict:
        for x in v.values():
            yield x
            yield from _leaves(x, depth + 1)
    elif _watchable(v) and not isinstance(v, torch.nn.Module):
        for x in list(getattr(v, "__dict__", {}).values()):
            yield x
            yield from _leaves(x, depth + 1)


def _is_trace_input(p) -> bool:
    from thunder_mlir.frontend.tracing import current_trace

    return any(p is q for q in current_trace().inputs)
