"""The one way to read a number out of an MLIR attribute: as the type the reader needs.

A composite records each non-tensor argument of its torch call as an attribute typed by
the Python value the user passed (``frontend/symbol.py`` ``to_attribute``): ``dropout_p=0``
is ``0 : i64``, ``dropout_p=0.0`` is ``0.0 : f64``, ``is_causal=True`` is ``true``. The
type is kept because it is part of what eager computes: ``x_int + 1`` stays an integer
tensor, ``x_int + 1.0`` is a float one, and ``torch.full((2,), 1)`` is int64. So a reader
cannot know the attribute's type from the schema, and a raw cast
(``ir.FloatAttr(op.attributes["dropout_p"])``) raises on an int (issue 45), while
``ir.IntegerAttr`` of a ``BoolAttr`` reads ``True`` as -1 (an i1 sign-extended).

Every reader states the type it needs instead and gets the conversion torch's argument
parser makes for a parameter of that type:

* ``to_float``: a bool, int or float (``dropout_p=0`` -> 0.0);
* ``to_int``: an int, a bool (``True`` -> 1), or an integral float (raises for 0.5);
* ``to_bool``: a bool, or the truth of an int or float (Python's ``if p:``);
* ``to_python``: the value as recorded (int, float, bool, str, nested lists), for readers
  whose meaning depends on the type (a Scalar that promotes).

``get_float``/``get_int``/``get_bool``/``get_value``/``get_ints``/``get_bools`` read the
attribute ``name`` of an op (``default`` where it is absent: the call left the argument
out). ``tests/test_scalar_attrs.py`` fails on any raw ``ir.FloatAttr(...)``,
``ir.IntegerAttr(...)`` or ``ir.BoolAttr(...)`` cast outside this module.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

__all__ = ["to_python", "to_float", "to_int", "to_bool", "get_value", "get_float",
           "get_int", "get_bool", "get_ints", "get_bools"]

_REQUIRED = object()


def to_python(a: ir.Attribute) -> Any:
    """The Python value of ``a`` as recorded: bool for ``BoolAttr`` (tested first: MLIR's
    bools are i1 integers), int, float, str, a list for ``ArrayAttr`` and
    ``DenseI64ArrayAttr``. Raises TypeError for any other attribute."""
    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, ir.IntegerAttr):
        return int(a.value)
    if isinstance(a, ir.FloatAttr):
        return float(a.value)
    if isinstance(a, ir.StringAttr):
        return a.value
    if isinstance(a, ir.ArrayAttr):
        return [to_python(b) for b in a]
    if isinstance(a, ir.DenseI64ArrayAttr):
        return list(a)
    raise TypeError(f"attribute {a} has no Python value")


def to_float(a: ir.Attribute) -> float:
    """``a`` as a float parameter reads it: a bool, int or float. TypeError otherwise."""
    v = to_python(a)
    if type(v) in (bool, int, float):
        return float(v)
    raise TypeError(f"attribute {a} is not a number")


def to_int(a: ir.Attribute) -> int:
    """``a`` as an int parameter reads it: an int, a bool (0 or 1) or a float with an
    integral value. TypeError otherwise (0.5)."""
    v = to_python(a)
    if type(v) in (bool, int) or type(v) is float and v.is_integer():
        return int(v)
    raise TypeError(f"attribute {a} is not an integer")


def to_bool(a: ir.Attribute) -> bool:
    """``a`` as a bool: a bool, or the truth of an int or float. TypeError otherwise."""
    v = to_python(a)
    if type(v) in (bool, int, float):
        return bool(v)
    raise TypeError(f"attribute {a} is not a bool")


def _read(op, name: str, default, convert):
    attributes = op.attributes
    if name not in attributes:
        if default is _REQUIRED:
            raise KeyError(f"{_op_name(op)} at {op.location} has no attribute {name!r}")
        return default
    try:
        return convert(attributes[name])
    except TypeError as e:  # (the op and its user line, formatted only here)
        raise TypeError(f"{_op_name(op)} at {op.location}, {name!r}: {e}") from None


def _op_name(op) -> str:
    attributes = op.attributes
    if "name" in attributes and isinstance(attributes["name"], ir.StringAttr):
        return attributes["name"].value  # a composite's symbol (ltorch.softmax)
    return op.operation.name if hasattr(op, "operation") else op.name


def get_value(op, name: str, default: Any = _REQUIRED) -> Any:
    """Attribute ``name`` of ``op`` as recorded (``to_python``); ``default`` if absent
    (KeyError when no default is given)."""
    return _read(op, name, default, to_python)


def get_float(op, name: str, default: Any = _REQUIRED) -> float:
    """Attribute ``name`` of ``op`` as a float (``to_float``); ``default`` if absent."""
    return _read(op, name, default, to_float)


def get_int(op, name: str, default: Any = _REQUIRED) -> int:
    """Attribute ``name`` of ``op`` as an int (``to_int``); ``default`` if absent."""
    return _read(op, name, default, to_int)


def get_bool(op, name: str, default: Any = _REQUIRED) -> bool:
    """Attribute ``name`` of ``op`` as a bool (``to_bool``); ``default`` if absent."""
    return _read(op, name, default, to_bool)


def get_ints(op, name: str, default: Any = _REQUIRED) -> list[int]:
    """Attribute ``name`` of ``op`` as a list of ints: an array of ints, or one int (a
    size given as ``8`` for ``(8,)``, as torch's int-list parameters take it)."""
    def convert(a):
        if isinstance(a, ir.DenseI64ArrayAttr):
            return list(a)
        if isinstance(a, ir.ArrayAttr):
            return [to_int(b) for b in a]
        return [to_int(a)]
    return _read(op, name, default, convert)


def get_bools(op, name: str, default: Any = _REQUIRED) -> list[bool]:
    """Attribute ``name`` of ``op`` (an array) as a list of bools."""
    def convert(a):
        if not isinstance(a, ir.ArrayAttr):
            raise TypeError(f"attribute {a} is not an array")
        return [to_bool(b) for b in a]
    return _read(op, name, default, convert)
