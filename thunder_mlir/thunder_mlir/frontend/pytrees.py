"""Structured inputs: registered pytree nodes and plain Python objects as containers, and the
writes a program makes to the objects it was given.

Inputs are flattened by optree in the namespace ``NAMESPACE``, where three kinds of node
are registered on first sight (``register_types``):

* the nodes ``torch.utils._pytree`` knows that optree does not (Hugging Face registers its
  ``ModelOutput`` classes there for torch.export): flattened by torch's functions, their
  context frozen into a hashable value (``guards.freeze``);
* *objects*: instances of plain Python classes (a ``transformers`` ``DynamicCache`` or
  ``StaticCache`` and their layers, a ``dataclasses.dataclass``) whose state is their
  ``__dict__``. Every attribute is a child: tensors are program inputs, Python values are
  keyed by value like any Python input (``function._metas``), nested objects are nodes
  again. The attribute names and the class are the node's static part, so the tree
  structure is part of the cache key. An object also registered with torch (transformers'
  exporter registers its caches) is an object here: eager code mutates the caller's object,
  which only this kind reproduces.

A program runs on copies of the objects (made by the node's unflatten function), holding
proxies. After the trace, each copy's ``__dict__`` is compared with its state before the
trace (``ObjectState``): the attributes rebound to another value (a ``DynamicCache``
layer's ``keys = torch.cat(...)``, ``is_initialized = True``) become *state writes*,
recorded by the object's index in the input tree (the caller's object differs between
calls) and replayed on the caller's objects after every run (``replay``). A tensor written
is a program output; an input tensor written is the caller's tensor itself; a new object is
rebuilt on each replay. In-place updates of input tensors (``StaticCache``'s
``index_copy_``) are the program's mutated inputs (``CacheEntry.mutated_inputs``).
Anything else written (a tensor from outside the program, an input list) is refused with
``UnsupportedError`` rather than left different from eager.

Limits: class attributes of input objects are assumed constant (not guarded); an object
reached twice in one call's inputs is refused (its copies would diverge).
"""

from __future__ import annotations

import dataclasses
import threading
import types
from typing import Any

import optree
import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.errors import UnsupportedError, UnsupportedInputError
from thunder_mlir.frontend.guards import freeze
from thunder_mlir.frontend.sharp_edges import TracedDict, TracedList, freeze_containers

NAMESPACE = "thunder_mlir"
OBJECT_TYPES: set[type] = set()  # classes registered as object nodes
_TORCH_TYPES: set[type] = set()  # torch.utils._pytree nodes registered in NAMESPACE
_REFUSED_MODULES = ("builtins", "torch", "thunder_mlir", "optree", "numpy")


class AttributeEntry(optree.GetAttrEntry):
    """The path entry of an object's attribute (``.keys`` in ``args[0].layers[1].keys``)."""


def flatten(tree):
    """optree's ``tree_flatten(tree)`` in ``NAMESPACE`` (None is a leaf): (leaves, spec)."""
    return optree.tree_flatten(tree, none_is_leaf=True, namespace=NAMESPACE)


_FLATTENING = threading.local()  # .objects: the list flatten_object appends to, or None


def flatten_with_objects(tree):
    """``flatten(tree)`` and the object nodes of ``tree`` in optree's traversal order (depth
    first, a node before its children), recorded by the objects' flatten function: the
    order ``ObjectState`` numbers them by, the same for the caller's objects and their
    trace-time copies. Returns (leaves, spec, objects)."""
    found: list = []
    _FLATTENING.objects = found
    try:
        leaves, spec = flatten(tree)
    finally:
        _FLATTENING.objects = None
    return leaves, spec, found


def objects(tree) -> list:
    """The object nodes of ``tree`` (``flatten_with_objects``)."""
    return flatten_with_objects(tree)[2]


def leaf_paths(tree) -> list:
    """The path of each leaf of ``tree``: a tuple of optree path entries per leaf
    (``AttributeEntry`` for an object's attribute)."""
    accessors = optree.tree_flatten_with_accessor(tree, none_is_leaf=True,
                                                  namespace=NAMESPACE)[0]
    return [tuple(a) for a in accessors]


# ------------------------------------------------------------------ node registration
class _Context:
    """A torch pytree context, hashable and compared by value (``guards.freeze``)."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value, self._key = value, freeze(value)

    def __eq__(self, other):
        return type(other) is _Context and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return repr(self.value)


def _object_candidate(cls: type) -> bool:
    """Instances of plain Python classes whose state is their ``__dict__``."""
    if not isinstance(getattr(cls, "__dict__", None), types.MappingProxyType) or \
            issubclass(cls, (torch.Tensor, torch.nn.Module, type, types.ModuleType,
                             BaseException, tuple, list, dict, set, frozenset)):
        return False
    if cls.__module__.split(".")[0] in _REFUSED_MODULES:
        return False
    if "__slots__" in cls.__dict__ or any("__slots__" in b.__dict__ and b.__slots__
                                          for b in cls.__mro__[1:-1]):
        return False  # state outside __dict__
    return cls.__new__ is object.__new__ or dataclasses.is_dataclass(cls)


def _register_object(cls: type) -> None:
    def flatten_object(obj):
        found = getattr(_FLATTENING, "objects", None)
        if found is not None:
            found.append(obj)
        state = object.__getattribute__(obj, "__dict__")
        names = tuple(state)
        return tuple(state.values()), names, names

    def unflatten_object(names, children):
        # a copy for the trace: lists and dicts inside refuse mutation as input containers do
        obj = object.__new__(cls)
        object.__getattribute__(obj, "__dict__").update(
            zip(names, (freeze_containers(c) for c in children)))
        return obj

    optree.register_pytree_node(cls, flatten_object, unflatten_object,
                                path_entry_type=AttributeEntry, namespace=NAMESPACE)
    OBJECT_TYPES.add(cls)


def _register_torch_node(cls: type) -> None:
    node = torch_pytree.SUPPORTED_NODES[cls]

    def flatten_node(x):
        children, context = node.flatten_fn(x)
        return children, _Context(context)

    def unflatten_node(context, children):
        return node.unflatten_fn(list(children), context.value)

    optree.register_pytree_node(cls, flatten_node, unflatten_node, namespace=NAMESPACE)
    _TORCH_TYPES.add(cls)


def _sorted_keys(d) -> list:
    try:  # optree's order for a dict: sorted keys where they sort
        return sorted(d)
    except TypeError:
        return list(d)


# an input object's lists and dicts are Traced* while tracing: the same nodes as in the
# caller's objects, so that ``objects`` numbers the copies as the caller's objects
optree.register_pytree_node(TracedList, lambda x: (list(x), None, None),
                            lambda _, c: TracedList(c), namespace=NAMESPACE)
optree.register_pytree_node(
    TracedDict, lambda x: ((keys := _sorted_keys(x)) and [x[k] for k in keys], keys, keys),
    lambda keys, c: TracedDict(zip(keys, c)), namespace=NAMESPACE)


def register_types(leaves) -> bool:
    """Register the classes of ``leaves`` that are pytree nodes here (see the module
    docstring) and are not yet; True if any was (the caller flattens again)."""
    new = False
    for x in leaves:
        cls = type(x)
        if cls in OBJECT_TYPES or cls in _TORCH_TYPES:
            continue
        if _object_candidate(cls):
            _register_object(cls)
            new = True
        elif cls in torch_pytree.SUPPORTED_NODES and not optree.is_structseq_class(cls):
            _register_torch_node(cls)
            new = True
    return new


def is_object(x) -> bool:
    """Whether ``x`` is an object node (of a registered class, or one to register)."""
    return type(x) in OBJECT_TYPES or _object_candidate(type(x))


# ------------------------------------------------------------------ objects of a call
def check_unshared(nodes: list) -> None:
    """Refuse an object reached twice among a call's inputs (UnsupportedInputError)."""
    if len({id(o) for o in nodes}) != len(nodes):
        dup = next(o for i, o in enumerate(nodes) if any(o is p for p in nodes[:i]))
        raise UnsupportedInputError(
            f"an input {type(dup).__module__}.{type(dup).__qualname__} object is reached "
            "twice among the inputs; thunder_mlir copies input objects while tracing and "
            "would not keep them one object. Pass it once.")


class ObjectState:
    """The trace-time copies of a call's input objects and their state before the trace;
    ``writes`` describes what the program changed and ``describe`` a value it returned
    (see the module docstring). ``inputs``: the trace's input proxies. ``tensors``: the
    proxies written or returned inside objects, which the program must return (``("out",
    j)`` in a description is ``tensors[j]``)."""

    def __init__(self, tree, inputs: list):
        self.copies = objects(tree)
        self.index = {id(o): i for i, o in enumerate(self.copies)}
        self.before = [dict(object.__getattribute__(o, "__dict__")) for o in self.copies]
        self.inputs = inputs
        self.tensors: list = []

    def node_of(self, x) -> int | None:
        """The index of ``x`` if it is one of the input objects (a copy)."""
        return self.index.get(id(x))

    def writes(self) -> list:
        """``(object index, name, description)`` per attribute the program rebound
        (description None for a deleted attribute). Raises UnsupportedError for a value
        that cannot be replayed."""
        writes = []
        for k, (obj, before) in enumerate(zip(self.copies, self.before)):
            after = object.__getattribute__(obj, "__dict__")
            for name in before:
                if name not in after:
                    writes.append((k, name, None))
            for name, value in after.items():
                if name in before and before[name] is value:
                    continue
                where = f"attribute '{name}' of the input {type(obj).__qualname__}"
                writes.append((k, name, self.describe(value, where)))
        return writes

    def describe(self, v, where: str):
        """The description of ``v`` that ``build`` makes again on each run."""
        from thunder_mlir.ir.proxy import TensorProxy

        if type(v) is TensorProxy:
            for i, p in enumerate(self.inputs):
                if p is v:
                    return ("input", i)
            self.tensors.append(v)
            return ("out", len(self.tensors) - 1)
        if isinstance(v, torch.Tensor):
            raise UnsupportedError(
                f"the program assigns a tensor that is neither an input nor computed from the "
                f"inputs to {where}; pass it as an input")
        k = self.node_of(v)
        if k is not None:
            return ("node", k)
        if isinstance(v, (TracedList, TracedDict)):
            raise UnsupportedError(
                f"the program puts an input {type(v).__mro__[1].__name__} into {where}, which "
                "thunder_mlir cannot reproduce on the caller's objects; use a copy")
        if type(v) in (tuple, list, dict):
            items = list(v.items()) if type(v) is dict else list(enumerate(v))
            ds = [(key, self.describe(x, where)) for key, x in items]
            if all(d[0] == "const" for _, d in ds) and type(v) is tuple:
                return ("const", v)
            return ("dict", ds) if type(v) is dict else (type(v).__name__, [d for _, d in ds])
        if _constant(v):
            return ("const", v)
        if _object_candidate(type(v)):
            state = object.__getattribute__(v, "__dict__")
            ds = [(n, self.describe(x, f"{where}.{n}")) for n, x in state.items()]
            if all(d[0] == "const" for _, d in ds):
                return ("const", v)  # no tensor inside: the object itself (by identity)
            return ("object", type(v), ds)
        raise UnsupportedError(
            f"the program puts a {type(v).__qualname__} into {where}, which thunder_mlir "
            "cannot reproduce on the caller's objects after each run; keep such values out "
            "of the objects passed to or returned by the jitted function")


def _constant(v) -> bool:
    return isinstance(v, (bool, int, float, complex, str, type(None), torch.dtype,
                          torch.device, type, types.FunctionType, types.BuiltinFunctionType,
                          type(Ellipsis), slice))


def build(d, nodes, tensors, outs):
    """The value described by ``d`` (``ObjectState.writes``) for one run: ``nodes`` the
    caller's input objects, ``tensors`` the input tensors, ``outs`` the state outputs."""
    kind = d[0]
    if kind == "out":
        return outs[d[1]]
    if kind == "input":
        return tensors[d[1]]
    if kind == "const":
        return d[1]
    if kind == "node":
        return nodes[d[1]]
    if kind == "tuple":
        return tuple(build(x, nodes, tensors, outs) for x in d[1])
    if kind == "list":
        return [build(x, nodes, tensors, outs) for x in d[1]]
    if kind == "dict":
        return {key: build(x, nodes, tensors, outs) for key, x in d[1]}
    obj = object.__new__(d[1])  # "object": made anew on every run, as eager makes it
    object.__getattribute__(obj, "__dict__").update(
        (n, build(x, nodes, tensors, outs)) for n, x in d[2])
    return obj


def replay(writes: list, nodes: list, tensors: list, outs: list) -> None:
    """Apply ``writes`` (``ObjectState.writes``) to the caller's objects ``nodes``
    (``objects(args, kwargs)``): ``tensors`` the call's input tensors, ``outs`` the
    program's state outputs."""
    for k, name, d in writes:
        state = object.__getattribute__(nodes[k], "__dict__")
        if d is None:
            state.pop(name, None)
        else:
            state[name] = build(d, nodes, tensors, outs)
