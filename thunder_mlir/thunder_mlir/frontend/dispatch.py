"""The tracer's dispatch: the single entry for every torch call during tracing.

Metadata queries are answered from the proxy, autograd attributes by
autograd_attributes.py, known functions go to their symbol (``symbols/``, after autocast's
casts), data-dependent queries raise, and anything else runs through the ``torch`` fallback
executor. Importing this module registers ``dispatch`` with ``TensorProxy``
(``ir.proxy.register_dispatch``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import optree
import torch

from thunder_mlir.errors import DataDependentControlFlowError, DynamicShapeFallback, \
    Fallback, SharpEdgeError, UnsupportedError
from thunder_mlir.frontend import autocast, cpu_scalars, scalar_args, value_guards, \
    zero_tensors
from thunder_mlir.frontend.aliasing import eager_meta, is_view, record_view, \
    separate_returned_inputs
from thunder_mlir.frontend.autograd_attributes import handle as handle_autograd_attribute
from thunder_mlir.frontend.differentiability import user_op
from thunder_mlir.frontend.locations import describe_frame, library_frame, user_frame
from thunder_mlir.frontend.module_attributes import LiftNeeded
from thunder_mlir.frontend.symbols import SYMBOLS
from thunder_mlir.frontend.symbols.complex_support import COMPLEX_SYMBOLS, involves_complex
from thunder_mlir.frontend import torch_fallback  # examine() wraps its emit_fallback
from thunder_mlir.frontend.torch_fallback import qualified_name
from thunder_mlir.frontend.tracing import _local as tracing_state, current_trace
from thunder_mlir.ir import prims, symbolic
from thunder_mlir.ir.proxy import TensorProxy, register_dispatch

_T = torch.Tensor
# Metadata answered from the proxy itself (the wrapper subclass holds shape/dtype/device).
_METADATA_METHODS = {
    _T.size, _T.dim, _T.numel, _T.stride, _T.is_contiguous, _T.is_floating_point,
    _T.is_complex, _T.element_size, _T.nelement, _T.get_device, _T.__len__,
    _T.storage_offset, _T.is_signed, _T.__hash__, _T.__format__, _T.__repr__,
    _T.__str__, _T.ndimension, _T.is_inference, _T.__dir__,
}
# The conjugate and negative bits of eager's tensor, set by the views that make them
# (``conj`` of a complex tensor, ``_neg_view``): read from the proxy's chain of views.
_VIEW_BITS = {_T.is_conj, _T.is_neg}
# The geometry of eager's view (its strides and storage offset in its root's dense
# storage): read from the proxy's chain of views (aliasing.eager_meta), so strides the
# program reads and passes back (``as_strided``) describe the memory eager's call reads.
_VIEW_GEOMETRY = {_T.stride, _T.storage_offset, _T.is_contiguous}
# Values that would need the tensor's data: an error while tracing.
_DATA_DEPENDENT = {
    _T.__bool__: "bool(tensor)", _T.item: "tensor.item()", _T.tolist: "tensor.tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)", _T.__index__: "tensor.__index__",
    _T.__complex__: "complex(tensor)", _T.numpy: "tensor.numpy()",
    _T.data_ptr: "tensor.data_ptr()", _T.__array__: "numpy.asarray(tensor)",
    _T.untyped_storage: "tensor.untyped_storage()",
}
# Autograd attributes and in-place autograd methods (autograd_attributes.py).
AUTOGRAD_ATTRIBUTES = {_T.requires_grad.__set__, _T.is_leaf.__get__, _T.grad_fn.__get__,
                       _T.grad.__get__, _T.grad.__set__, _T.data.__set__, _T.requires_grad_,
                       _T.detach_, _T.retain_grad, _T.register_hook, _T.backward}
# Properties whose value is computed from the tensor: they are ops, not metadata.
_OP_PROPERTIES = {_T.T.__get__, _T.mT.__get__, _T.H.__get__, _T.mH.__get__,
                  _T.real.__get__, _T.imag.__get__}


# torch functions written in Python that torch routes through ``__torch_function__`` for
# their arguments' sake: their body runs as written while tracing. ``torch._assert`` is
# ``assert condition, message`` (torch/__init__.py): a Python condition is decided at
# trace time (timm's ``_assert(x.ndim == 4, ...)`` in every BatchNorm and convolution
# left 52 no-op torch steps in mobilenetv2's forward), a tensor's goes through
# ``bool(tensor)`` as a user's ``assert`` does.
def _python_assert(condition, message):
    assert condition, message


_PYTHON_BODIES = {torch._assert: _python_assert}

_NOT_METADATA = object()
_SIZE_QUERIES = {_T.size, _T.numel, _T.nelement, _T.__len__, _T.stride, _T.storage_offset,
                 _T.is_contiguous}


def _symbolic_metadata(func, args, kwargs):
    """Size queries on a proxy with symbolic sizes (ir/symbolic.py): answered from
    ``tshape`` (SymInts), never from the wrapper's traced-call sizes."""
    x = args[0]
    if getattr(func, "__self__", None) is _T.shape or func is _T.size:
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if func is _T.size and dim is not None:
            return x.tshape[dim]
        return symbolic.SymShape(x.tshape)
    if func in (_T.numel, _T.nelement):
        return math.prod(x.tshape)
    if func is _T.__len__ and x.tshape and type(x.tshape[0]) is int:
        return x.tshape[0]
    if func is _T.is_contiguous:
        return True  # proxies are dense, row-major (as the static path answers)
    if func in _SIZE_QUERIES or getattr(func, "__self__", None) is _T.nbytes:
        raise DynamicShapeFallback(f"{getattr(func, '__name__', func)} of a tensor with "
                                   "symbolic sizes")
    return _NOT_METADATA


_EXACT_FOR_SIZES = {torch.float32, torch.float64}  # hold every int below 2^24 exactly


def _size_operand(name: str, t: TensorProxy, n: symbolic.SymInt):
    """``torch.<name>(t, n)`` for a symbolic size ``n`` (``arange(q) + past_length``), which
    torch's argument parser refuses before ``__torch_function__``: ``n`` becomes a 0-d
    tensor of the dtype eager computes the op in for a Python int (``torch.result_type(t,
    int)``: a wrapped number does not promote), filled with the size at run time
    (``prims.full`` with a symbolic value). Where that conversion could round (16-bit
    floats, complex) or eager refuses the op (bool tensors) it raises DynamicShapeFallback:
    the function is compiled for static shapes. Registered with ir/symbolic.py."""
    if n.is_value():  # an int read from a tensor (value_guards.py): its value, guarded
        return getattr(torch, name)(t, n.pin())
    if type(t) is not TensorProxy:
        raise DynamicShapeFallback(f"a symbolic size as an operand of {name} with a "
                                   f"{type(t).__name__}")
    with torch._C.DisableTorchFunction():
        dtype = torch.result_type(torch.empty((1,) * t.ndim, dtype=t.dtype, device="meta"), 1)
    if dtype.is_complex or t.dtype == torch.bool or \
            (dtype.is_floating_point and dtype not in _EXACT_FOR_SIZES):
        raise DynamicShapeFallback(f"a symbolic size as an operand of {name} with a "
                                   f"{t.dtype} tensor")
    return getattr(torch, name)(t, prims.full((), n, dtype))


symbolic.register_tensor_operand(_size_operand)


def _is_tensor_leaf(x) -> bool:
    return isinstance(x, torch.Tensor)


def _is_out_argument(out) -> bool:
    """Whether ``out`` is an ``out=`` argument of traced tensors (one, or a tuple/list)."""
    if type(out) is TensorProxy:
        return True
    return isinstance(out, (tuple, list)) and bool(out) and \
        all(type(o) is TensorProxy for o in out)


def _with_out(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs, out=out)`` as eager defines it (issue 46): the call computed
    without ``out``, then each result written into its ``out`` tensor in place
    (``functionalization.write_inplace``: converted to its dtype, eager's RuntimeError where
    the result type cannot be cast), and ``out`` returned (a tuple of them as the call's
    own tuple type). Raises eager's RuntimeError where grad mode is on and an argument
    requires grad ("functions with out=... arguments don't support automatic
    differentiation"), and NotImplementedError (naming the line) where eager would resize
    an ``out`` tensor of another shape, or the call does not return one tensor per
    ``out`` tensor."""
    import optree

    from thunder_mlir.errors import TorchOpRuntimeError
    from thunder_mlir.frontend.functionalization import write_inplace
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    name = getattr(func, "__name__", str(func))
    out = kwargs["out"]
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    where = describe_frame(user_frame())
    if torch.is_grad_enabled() and any(
            type(t) is TensorProxy and t.requires_grad
            for t in optree.tree_leaves((args, rest, out), none_is_leaf=True)):
        raise TorchOpRuntimeError(
            f"{where}\n  {name}(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad.\n  Eager PyTorch "
            "raises this RuntimeError too.")
    result = dispatch(func, args, rest)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) != len(results) or any(type(r) is not TensorProxy for r in results):
        raise NotImplementedError(f"{where}\n  {name}(..., out=...): the call's results do "
                                  "not match its out= tensors one to one. Assign the "
                                  "result instead (y = op(...)).")
    for o, r in zip(outs, results):
        if tuple(o.tshape) != tuple(r.tshape):
            raise NotImplementedError(
                f"{where}\n  {name}(..., out=...) with an out tensor of shape "
                f"{tuple(o.tshape)} for a result of shape {tuple(r.tshape)}: eager resizes "
                "the out tensor, which thunder_mlir does not model. Pass an out tensor of "
                "the result's shape, or assign the result instead (y = op(...)).")
        write_inplace(o, r, f"{name}(out=)")
    if type(out) is TensorProxy:
        return out
    return type(result)(outs) if not hasattr(result, "_fields") else type(result)(*outs)


def dispatch(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Handle one torch call during tracing (see module docstring)."""
    if func in AUTOGRAD_ATTRIBUTES:
        return handle_autograd_attribute(func, args, kwargs)
    if func in _PYTHON_BODIES:
        return _PYTHON_BODIES[func](*args, **kwargs)
    building = getattr(tracing_state, "trace", None)  # (None: outside a trace)
    sliced = False  # x[:n + 1] for an int n read from a tensor: a symbolic length
    if getattr(getattr(building, "shape_env", None), "value_symbols", None):
        sliced = func is _T.__getitem__ and len(args) == 2 and not kwargs and \
            type(args[0]) is TensorProxy and value_guards.slices_by_value(args[1])
        if not sliced:  # ints read from tensors (value_guards.py): a tensor op reads
            args, kwargs = value_guards.pin_values(building, (args, kwargs))  # their values
    if args and type(args[0]) is TensorProxy and symbolic.is_symbolic(args[0].tshape):
        meta = _symbolic_metadata(func, args, kwargs)
        if meta is not _NOT_METADATA:
            return meta
    if func in _VIEW_BITS:  # x.conj().is_conj(): eager's view of its root answers
        m = eager_meta(args[0]) if type(args[0]) is TensorProxy else None
        return False if m is None else func(m)
    if func in _VIEW_GEOMETRY and type(args[0]) is TensorProxy and is_view(args[0]):
        m = eager_meta(args[0])
        if m is not None:  # (None: symbolic sizes, answered as a dense tensor below)
            return func(m, *args[1:], **kwargs)
    if func in _METADATA_METHODS or (
            type(func).__name__ == "method-wrapper" and func not in _OP_PROPERTIES
            and func not in SYMBOLS):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    if kwargs and _is_out_argument(kwargs.get("out")):
        return _with_out(func, args, kwargs)
    trace = current_trace()
    if func in value_guards.PYTHON_VALUES and args and type(args[0]) is TensorProxy:
        with trace.location_of_user_line():  # specialized, with a value guard
            return value_guards.python_value(func, args, kwargs, method_call=True)
    if func is _T.untyped_storage or func is _T.storage:
        raise UnsupportedError(
            f"{describe_frame(user_frame())}\n  tensor.{func.__name__}() is the tensor's "
            "memory, which a traced program does not have. Read views of the tensor "
            "instead: for x.set_(y.untyped_storage(), offset, size, stride) use "
            "x = y.as_strided(size, stride, offset).")
    if func in _DATA_DEPENDENT:
        f, lib = user_frame(), library_frame()
        inside = f"\n  (in {describe_frame(lib)})" if lib is not None and lib is not f else ""
        raise DataDependentControlFlowError(
            f"{describe_frame(f)}{inside}\n  {_DATA_DEPENDENT[func]} needs the tensor's data, "
            "which is not known while tracing. Use tensor ops instead (torch.where, masking), "
            "or torch.cond for control flow that depends on tensor values.")
    _check_no_foreign_tensors(func, args, kwargs)
    if kwargs.get("requires_grad") is True:
        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  a tensor created with requires_grad=True "
            "inside a jitted function is a new autograd leaf whose .grad the caller cannot "
            "reach. Create it outside the function and pass it as an input.")

    def run():
        sym, a, k = SYMBOLS.get(func), args, kwargs
        if sliced:
            out = value_guards.slice_by_value(trace, *a)
            if out is not None:
                return out
            a, k = value_guards.pin_values(trace, (a, k))  # (specialized on the values)
        if autocast.enabled(trace):  # eager's autocast casts (thunder_mlir/autocast.py)
            sym, a, k = autocast.prepare(trace, func, sym, a, k)
        if sym is not None and value_guards.is_data_dependent(func, a, k):
            sym = None  # its sizes depend on the values: the torch fallback, guarded
        if sym is not None and k.get("layout") not in (None, torch.strided):
            sym = None  # a sparse (or mkldnn) factory: eager's own (symbols make dense ones)
        if sym is not None:
            try:
                if sym.name not in COMPLEX_SYMBOLS and involves_complex(a, k):
                    raise Fallback(f"{sym.name} is not verified on complex numbers "
                                   "(symbols/complex_support.py)")
                return sym(*a, **k)
            except Fallback:
                pass
        return torch_fallback.emit_fallback(trace, func, a, k)

    if zero_tensors.reads_zero(args, kwargs):  # eager's ZeroTensor kernels: zeros out
        traced = run
        run = lambda: zero_tensors.propagate(func, args, kwargs, traced())  # noqa: E731

    with trace.location_of_user_line():
        # scalars as torch's parser reads them: eager's TypeError, 0-d tensors' values
        args, kwargs = scalar_args.checked(func, args, kwargs, SYMBOLS.get(func))
        out = user_op(func, args, kwargs, run)
    out = separate_returned_inputs(func, args, kwargs, out)  # (an input as a new tensor)
    if trace.cpu_scalars:  # results eager keeps on the CPU
        out = cpu_scalars.propagate(trace, args, kwargs, out)
    record_view(func, args, kwargs, out)  # outputs that are views return eager's view
    value_guards.note_constant(func, args, kwargs, out)  # torch.tensor(3): its value
    return out


def refuse_aten(func) -> None:
    """Raise a user-facing error for an ATen op that reached a proxy without a
    torch-function call (``TensorProxy.__torch_dispatch__``): ``Tensor.set_``, which torch
    sends past the torch-function layer. ``x.set_(y)`` makes ``x`` another tensor over
    ``y``'s memory (eager: ``x`` is then an alias of ``y``, and ``x``'s own views keep the
    old memory), ``x.set_()`` makes it empty; thunder_mlir does not model a tensor that
    changes its memory (issue 46). Raises UnsupportedError naming the user's line and what
    to write instead; returns for any other op (the caller's internal error follows)."""
    if getattr(func, "overloadpacket", None) is torch.ops.aten.set_:
        import os

        import thunder_mlir.ir.proxy as proxy_module

        # (the ir layer may live outside the package's directory: a source checkout)
        ir_dir = os.path.dirname(os.path.dirname(proxy_module.__file__))
        f = user_frame()
        while f is not None and f.f_code.co_filename.startswith(ir_dir):
            f = f.f_back
        raise UnsupportedError(
            f"{describe_frame(f)}\n  Tensor.set_ makes a tensor use another "
            "tensor's memory (or none), which thunder_mlir does not model. Use the other "
            "tensor itself: x = y for x.set_(y), x = y.as_strided(size, stride, offset) for "
            "x.set_(y.untyped_storage(), offset, size, stride), x = x.new_empty(0) for "
            "x.set_(); or call set_ outside the jitted function.")


dispatch.refuse_aten = refuse_aten


def _check_no_foreign_tensors(func, args, kwargs) -> None:
    """Raise for a tensor from outside the program reaching ``func``: ``LiftNeeded`` where
    it is held by an attribute of the jitted module or of an object reached from it (it
    becomes a program input: frontend/module_attributes.py), else SharpEdgeError naming
    it where the monitor knows its name (a global, a closure cell)."""
    for leaf in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        if isinstance(leaf, torch.Tensor) and type(leaf) is not TensorProxy:
            monitor = current_trace().monitor
            if monitor is not None and id(leaf) in monitor.recorder.liftable:
                raise LiftNeeded(tuple(monitor.recorder.candidates))
            f = user_frame()
            name = qualified_name(func)
            known = monitor.tensor_names.get(id(leaf)) if monitor is not None else None
            held = monitor.recorder.unlifted.get(id(leaf)) if monitor is not None else None
            if held is not None and known is None:
                raise SharpEdgeError(
                    f"{describe_frame(f)}\n  a torch.Tensor of shape {tuple(leaf.shape)}, read "
                    f"from the attribute {held} (neither a parameter nor a buffer), reaches "
                    f"{name}; it is not an input of the jitted function. A tensor attribute is "
                    "an input where it is held by the jitted module, the modules passed to "
                    "a jitted training step, or the objects they hold, not by an object "
                    "reached from a global. thunder_mlir does not bake tensors into the "
                    "program as constants: pass it as an argument, or register it as a "
                    "buffer of its module.")
            what = f"the {known}, a tensor" if known else "a torch.Tensor"
            raise SharpEdgeError(
                f"{describe_frame(f)}\n  {what} of shape {tuple(leaf.shape)} that is not an "
                f"input of the jitted function reaches {name}. It was read from a global, a "
                "closure, or an object that is neither an input nor held by the jitted "
                "module (tensors held by attributes of the jitted module and of the "
                "objects it holds are inputs). thunder_mlir does not bake tensors into the "
                "program as constants: pass it as an argument instead.")


register_dispatch(dispatch)
