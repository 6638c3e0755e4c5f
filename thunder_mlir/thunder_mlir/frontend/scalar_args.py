"""Non-tensor arguments as torch's own argument parser reads them, checked at each call.

A torch call's scalar arguments reach the tracer with the Python types the user wrote:
``dropout_p=0`` where the schema says float, ``training=1`` where it says bool,
``dim=torch.tensor(1)`` where it says int. What they mean is decided by torch's parser (the
C++ one of builtins; for ``torch.nn.functional``'s Python functions, their code and then
the builtin they call): it rejects a type the schema does not take (``TypeError``), takes
an int where it wants a float, and reads the value of a 0-d tensor given for a number
(``Tensor.item()``: a host sync). A proxy passes through ``__torch_function__`` before any
of that runs, so the tracer asks torch instead of restating every schema: before a call
with Python scalars or 0-d tensors reaches its symbol or the torch fallback, ``checked``
runs it once on meta tensors (what the fallback does for every op it records). A builtin
whose scalars are all top-level arguments is skipped (its C++ parser checked their types
before ``__torch_function__``: ``torch.softmax(x, 1.0)`` raises there), and a call found
well-typed is remembered by its function, structure and metadata.

* The run raises the parser's ``TypeError`` (``argument 'train' must be bool, not int``):
  eager rejects the call, so the trace raises it (the error boundary makes it a
  ``TorchOpTypeError`` at the user's line, error_reporting.py).
* It raises ``Tensor.item() cannot be called on meta tensors``: torch reads the value of a
  tensor argument. Each 0-d tensor argument torch reads (found by running again with the
  others given as zero-filled CPU scalars) is replaced by its Python value
  (``Tensor.item()``: specialized, with a value guard at this point of the program,
  frontend/value_guards.py, so another value re-traces), of the Python type whose meta run
  gives what a run with the tensor itself, as a CPU scalar, gives: ``x.std(t)`` with a bool
  ``t`` is ``std(x, dim=1)`` in eager, not ``unbiased=True``. That run also raises the
  parser's error where a function's Python code reads the tensor before its builtin
  refuses it (``F.batch_norm(training=t)``). Symbols that compute with such a tensor name
  the parameter (``Symbol.tensor_scalars``: narrow's start, an index): it stays a tensor.
* Anything else (success, no meta kernel, a data-dependent op) leaves the call as it is.

The Python type of a scalar is never changed here: ``x_int + 1`` and ``x_int + 1.0``
promote differently, and ``torch.full((2,), 1)`` is int64. Readers of a composite's scalar
attributes convert as they need through ``thunder_mlir.ir.attrs``.
"""

from __future__ import annotations

import re
import types
import warnings
from typing import TYPE_CHECKING, Any, Callable

import optree
import torch

from thunder_mlir.ir.proxy import TensorProxy

if TYPE_CHECKING:
    from thunder_mlir.frontend.symbol import Symbol

_SCALARS = (bool, int, float)
# torch's argument parser's TypeErrors (python_arg_parser.cpp), not other TypeErrors a meta
# run can raise (``can't convert meta device type tensor to numpy``); an op overload's
# (``torch.ops.aten.x.default``) is a RuntimeError of pybind11's
_PARSER_ERROR = re.compile(r"\(\): argument '\w+'|received an invalid combination of "
                           r"arguments|failed to unpack the object")
_CAST_ERROR = re.compile(r"Unable to cast Python instance of type")
# torch read the value of a meta tensor (an op overload's parser says it its own way)
_READS_VALUE = re.compile(r"Tensor\.item\(\) cannot be called on meta tensors|"
                          r"cannot extract \w+ from tensor with meta storage")
# Python-level torch functions whose code only calls torch (no user code, no side
# effects), so a meta run of them is safe
_PYTHON_MODULES = ("torch.nn.functional", "torch.functional", "torch._tensor",
                   "torch.masked", "torch.special", "torch.fft", "torch.linalg")


_BUILTINS = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
             types.MethodWrapperType)
# calls a meta run found well-typed (func, argument structure, each leaf's metadata or value)
_ACCEPTED: set = set()
_ACCEPTED_MAX = 1 << 14


def _checked_by_parser(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether torch's C++ parser has already checked the call's scalars: a builtin checks
    the types of its top-level arguments before a proxy's ``__torch_function__`` runs
    (``torch.softmax(x, 1.0)`` raises there), not the elements of a list
    (``x.expand([3, 4.0])``)."""
    return isinstance(func, _BUILTINS) and not any(
        isinstance(a, (list, tuple)) and
        any(type(v) in _SCALARS for v in optree.tree_leaves(a, none_is_leaf=True))
        for a in (*args, *kwargs.values()))


def _key(func: Callable, leaves: list, spec):
    """What a meta run's verdict on a call without 0-d tensors depends on, or None where a
    leaf cannot be part of a key."""
    parts = []
    for x in leaves:
        if type(x) is TensorProxy:
            parts.append((x.tshape, x.tdtype))
        elif type(x) in _SCALARS:
            parts.append((type(x), x))
        elif x is None or x is Ellipsis or isinstance(x, (str, torch.dtype, torch.device)):
            parts.append(x)
        elif type(x) is slice and all(v is None or type(v) is int
                                      for v in (x.start, x.stop, x.step)):
            parts.append(("slice", x.start, x.stop, x.step))  # (unhashable before 3.12)
        else:
            return None
    try:
        return hash((func, spec)) and (func, spec, tuple(parts))
    except TypeError:
        return None


def _runs_on_meta(func: Callable) -> bool:
    """Whether ``func`` is a torch operator whose meta run has no effect beyond its
    result: a builtin, an op overload, or a function of ``_PYTHON_MODULES``."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    if isinstance(func, (types.BuiltinFunctionType, types.MethodDescriptorType,
                         types.WrapperDescriptorType, types.MethodWrapperType)):
        return True
    if isinstance(func, types.FunctionType):
        module = getattr(func, "__module__", "") or ""
        return module.startswith(_PYTHON_MODULES)
    return False


def _meta_run(func: Callable, leaves: list, spec, replace: dict[int, Any]):
    """Run ``func`` with each proxy of ``leaves`` given as a meta tensor of its metadata
    (0-d proxies requiring grad keep it: the parser refuses those for numbers), and the
    leaves at ``replace`` given as its values. Returns (the exception it raised or None,
    the metadata of its result: the shape and dtype of each tensor, other leaves as
    they are)."""
    vals = list(leaves)
    with torch._C.DisableTorchFunction():
        for i, x in enumerate(leaves):
            if i in replace:
                vals[i] = replace[i]
            elif type(x) is TensorProxy:
                m = x.meta
                if not x.tshape and x.requires_grad and m.is_floating_point():
                    m.requires_grad_()
                vals[i] = m
    a, k = optree.tree_unflatten(spec, vals)
    try:  # (eager's warnings are the symbol's business, not this run's)
        with torch._C.DisableTorchFunction(), torch.device("meta"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = func(*a, **k)
    except Exception as e:  # noqa: BLE001 - what torch raises is the answer
        return e, None
    return None, [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x
                  for x in optree.tree_leaves(out, none_is_leaf=True)]


def _rejected(err: BaseException | None) -> BaseException | None:
    """The error to raise where ``err`` is the parser's refusal of the arguments."""
    if isinstance(err, TypeError) and _PARSER_ERROR.search(str(err)):
        return TypeError(str(err).strip())  # (error_reporting puts the user's line first)
    if isinstance(err, RuntimeError) and _CAST_ERROR.search(str(err)):
        return RuntimeError(str(err).strip())
    return None


def _reads_value(err: BaseException | None) -> bool:
    return err is not None and bool(_READS_VALUE.search(str(err)))


def checked(func: Callable, args: tuple, kwargs: dict,
            symbol: Symbol | None = None) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of the call ``func(*args, **kwargs)`` as torch's parser reads
    them (see the module docstring): unchanged, or with each 0-d tensor torch reads as a
    number replaced by its Python value (a value guard in the current trace). ``symbol``:
    the call's Symbol, if any; its ``tensor_scalars`` parameters keep their tensors.

    Raises the ``TypeError`` eager raises for an argument of a type the function does not
    take; ``ValueNeeded`` (compilation continues) or ``DataDependentControlFlowError``
    (inside ``torch.cond``/``while_loop``) where a value is needed (value_guards.query).
    Call it while tracing, at the user's line (the value guard's site)."""
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    zero_d = [i for i, x in enumerate(leaves) if type(x) is TensorProxy and not x.tshape]
    if not zero_d and (not any(type(x) in _SCALARS for x in leaves) or
                       _checked_by_parser(func, args, kwargs)):
        return args, kwargs
    if not _runs_on_meta(func) or any(
            (type(x) is TensorProxy and not all(type(s) is int for s in x.tshape))
            or (callable(x) and not isinstance(x, (torch.Tensor, type, torch.dtype)))
            for x in leaves):  # (symbolic sizes: no meta tensor, ir/symbolic.py; a user
        return args, kwargs    # function, triplet_margin_with_distance_loss's: not run)
    key = None if zero_d else _key(func, leaves, spec)
    if key is not None and key in _ACCEPTED:
        return args, kwargs
    err, _ = _meta_run(func, leaves, spec, {})
    if _rejected(err) is not None:
        raise _rejected(err)
    if key is not None:
        if len(_ACCEPTED) >= _ACCEPTED_MAX:
            _ACCEPTED.clear()
        _ACCEPTED.add(key)
    if not zero_d or not _reads_value(err):
        return args, kwargs
    kept = _kept(symbol, args, kwargs)
    # which 0-d tensors torch reads: each alone, the others given as CPU scalars
    zeros = {j: _cpu_scalar(leaves[j], 0) for j in zero_d}
    read = [i for i in zero_d if id(leaves[i]) not in kept and _reads_value(
        _meta_run(func, leaves, spec, {j: z for j, z in zeros.items() if j != i})[0])
        and _takes_number(func, leaves, spec, zeros, i)]
    if not read:
        return args, kwargs
    from thunder_mlir.frontend import value_guards

    # Tensor.item(), as the parser reads it: specialized, with a value guard
    values = {i: value_guards.python_value(torch.Tensor.item, (leaves[i],), {}) for i in read}
    # eager's own reading: the tensors as CPU scalars holding the values (a function's
    # Python code may read one, ``if training:``, before its builtin refuses it)
    err, reference = _meta_run(func, leaves, spec, {
        **zeros, **{i: _cpu_scalar(leaves[i], v) for i, v in values.items()}})
    if _rejected(err) is not None:
        raise _rejected(err)
    chosen = {**zeros, **values}
    if err is None:  # the Python value that reads as eager reads the tensor
        for i in read:  # (x.std(torch.tensor(True)) is std(x, dim=1), not unbiased=True)
            for candidate in _candidates(values[i]):
                chosen[i] = candidate
                e, meta = _meta_run(func, leaves, spec, chosen)
                if e is None and meta == reference:
                    break
            else:
                chosen[i] = values[i]
    chosen = {i: chosen[i] for i in read}
    new = [chosen.get(i, x) for i, x in enumerate(leaves)]
    return optree.tree_unflatten(spec, new)


def _takes_number(func: Callable, leaves: list, spec, zeros: dict, i: int) -> bool:
    """Whether the parser takes a Python number at leaf ``i`` (the others given as CPU
    scalars): a 0-d tensor given for a Tensor parameter whose value the function reads
    itself (``one_hot(torch.tensor(5))``'s ``max().item()``) is no number argument."""
    number = zeros[i].item()
    return _rejected(_meta_run(func, leaves, spec, {**zeros, i: number})[0]) is None


def _kept(symbol: Symbol | None, args: tuple, kwargs: dict) -> set[int]:
    """The ids of the proxies passed to the parameters the symbol computes with as
    tensors (``Symbol.tensor_scalars``)."""
    if symbol is None or not symbol.tensor_scalars:
        return set()
    try:
        bound = symbol.signature.bind(*args, **kwargs)
    except TypeError:
        return set()
    return {id(x) for name in symbol.tensor_scalars
            for x in optree.tree_leaves(bound.arguments.get(name), none_is_leaf=True)
            if type(x) is TensorProxy}


def _candidates(v) -> list:
    """The Python values to try for a tensor torch read as ``v``, in order: ``v``, then ``v``
    as each other Python scalar type that holds it exactly. A bool comes last: torch's
    parser never takes a tensor for a ``bool`` parameter, so a bool tensor read as a number
    was read as an int, a float or a ``Scalar`` (``x.std(t)`` is ``dim=int(t)``, which a
    meta run cannot tell from ``unbiased=t`` on a 1-d ``x``)."""
    if type(v) not in _SCALARS or type(v) is float and not v.is_integer():
        return [v]  # (inf, nan and 0.5 are floats alone)
    others = [t(v) for t in (int, float) if t is not type(v) and t(v) == v]
    if type(v) is bool:
        return others + [v]
    return [v] + others + ([bool(v)] if v in (0, 1) else [])


def _cpu_scalar(p: TensorProxy, value) -> torch.Tensor:
    with torch._C.DisableTorchFunction():
        return torch.tensor(value, dtype=p.tdtype)
