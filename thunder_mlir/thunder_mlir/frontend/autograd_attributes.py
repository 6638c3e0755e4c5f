"""Autograd attributes of traced tensors: ``requires_grad`` (set), ``requires_grad_()``,
``detach_()``, ``is_leaf``, ``grad_fn``, ``grad``, ``retain_grad()``, ``register_hook()``,
``backward()``.

A traced tensor's ``requires_grad`` is eager's (``differentiability.py``); these calls
read or change autograd state. Each either has eager's meaning in the IR (``detach_()``
is a ``thunder.stop_gradient``) or raises NotImplementedError naming the user's line:
the compiled program has no autograd graph of its own, and changing the flags of the
caller's tensors from inside it would be a side effect the cached program cannot replay.

Inside a whole training step (``thunder_mlir.jit(step)(model, opt, *batch)``,
train_step.py) the trace carries ``trace.training``: the table of the parameters'
``.grad`` values, which ``.grad`` reads and writes and ``loss.backward()`` go to (its
methods ``owns(x)``, ``get_grad(x)``, ``set_grad(x, v)``, ``backward(loss, ...)``).
"""

from __future__ import annotations

import torch

from thunder_mlir.ir.dtypes import is_inexact

from thunder_mlir.ir.proxy import TensorProxy

_T = torch.Tensor


def _refuse(what: str, instead: str):
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    raise NotImplementedError(f"{describe_frame(user_frame())}\n  {what} inside a jitted "
                              f"function is not supported: {instead}")


def _is_input(x: TensorProxy) -> bool:
    from thunder_mlir.frontend.tracing import current_trace

    return any(x is p for p in current_trace().inputs)


def _set_flag(x: TensorProxy, flag: bool) -> None:
    with torch._C.DisableTorchFunction():
        _T.requires_grad.__set__(x, flag)


def requires_grad_(x: TensorProxy, requires_grad: bool = True) -> TensorProxy:
    """``x.requires_grad_(flag)`` / ``x.requires_grad = flag``: a no-op when the flag does
    not change; eager's RuntimeError for a computed tensor that requires grad; else refused
    (a new autograd leaf, or a change to the caller's tensor)."""
    flag = bool(requires_grad)
    if flag == x.requires_grad:
        return x
    if _is_input(x):
        _refuse(f"changing requires_grad of an input to {flag}",
                "it would change the caller's tensor. Set it before the call, or use "
                "x.detach() inside the function.")
    if not flag:
        raise RuntimeError(
            "you can only change requires_grad flags of leaf variables. If you want to use a "
            "computed variable in a subgraph that doesn't require differentiation use "
            "var_no_grad = var.detach().")
    if not (x.tdtype.is_floating_point or x.tdtype.is_complex):
        raise RuntimeError("only Tensors of floating point and complex dtype can require "
                           "gradients")
    _refuse("requires_grad_() on a tensor computed inside the function",
            "it makes a new autograd leaf whose .grad the caller cannot reach. Create the "
            "tensor outside the function and pass it as an input.")


def detach_(x: TensorProxy) -> TensorProxy:
    """``x.detach_()``: ``x`` rebound to ``thunder.stop_gradient(x)`` (eager's in-place
    detach); eager's RuntimeError for a view; refused for an input that requires grad."""
    from thunder_mlir.ir import prims

    from thunder_mlir.frontend.metadata_writes import is_eager_view

    if is_eager_view(x) or x.__dict__.get("_caller_view", False):
        raise RuntimeError("Can't detach views in-place. Use detach() instead. If you are "
                           "using DistributedDataParallel (DDP) for training, and "
                           "gradient_as_bucket_view is set as True, gradients are views of "
                           "DDP buckets, and hence detach_() cannot be called on these "
                           "gradients. To fix this error, please refer to the Optimizer.zero_grad() "
                           "function in torch/optim/optimizer.py as the solution.")
    if not x.requires_grad:
        return x
    if _is_input(x):
        _refuse("detach_() of an input that requires grad",
                "it would detach the caller's tensor. Use x = x.detach().")
    # its views made so far keep eager's autograd state (they still require grad): each
    # gets its eager twin now, from x's before the detach
    from thunder_mlir.frontend.differentiability import _fresh_twin, _is_current, _twin_of_view
    from thunder_mlir.frontend.tracing import current_trace

    views = [v for r in getattr(x, "_views", ()) if (v := r()) is not None]
    if views and is_inexact(x.tdtype):
        if not _is_current(x):
            x._mirror, x._mirror_of = _fresh_twin(x, current_trace().inputs), x.value
        for v in views:
            if not _is_current(v):
                _twin_of_view(v)
    x.value = prims.stop_gradient(x).value
    _set_flag(x, False)
    if views and is_inexact(x.tdtype):  # x's twin detached too: its views' twins now
        # have a leaf base, so a later in-place op on one raises eager's "a view of a leaf
        # Variable that requires grad is being used in an in-place operation"
        with torch.inference_mode(False):
            x._mirror.detach_()
        x._mirror_of = x.value
    return x


def is_leaf(x: TensorProxy) -> bool:
    """Eager's ``is_leaf``: True for a tensor that does not require grad; False for one
    computed from tensors that require grad. For an input that requires grad it depends
    on how the caller made it, which the program is not specialized on: refused."""
    if not x.requires_grad:
        return True
    if _is_input(x):
        _refuse("reading is_leaf of an input that requires grad",
                "the compiled program is not specialized on it. Read it before the call.")
    return False


def grad_fn(x: TensorProxy):
    """None for a tensor that does not require grad (as eager); refused otherwise (the
    compiled program has no autograd graph to return)."""
    if not x.requires_grad:
        return None
    _refuse("reading grad_fn of a tensor that requires grad",
            "the compiled program has no autograd graph. Test x.requires_grad instead.")


def grad(x: TensorProxy):
    """Eager's ``.grad`` is None for a computed tensor; an input's is refused (its value
    at trace time would be baked into the program)."""
    if _is_input(x):
        _refuse("reading .grad of an input",
                "its value at trace time would be baked into the compiled program. Pass it "
                "as an input.")
    return None


def _training(x):
    """The training step's ``.grad`` table when ``x`` is one of its parameters, else None."""
    from thunder_mlir.frontend.tracing import current_trace

    table = getattr(current_trace(), "training", None)
    return table if table is not None and table.owns(x) else None


def backward(loss, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``loss.backward()``: inside a training step, the gradients are computed in the
    program and accumulated into the parameters' ``.grad`` (train_step.py); refused
    elsewhere (the caller's tensors' ``.grad`` cannot be written from a jitted function)."""
    from thunder_mlir.frontend.tracing import current_trace

    table = getattr(current_trace(), "training", None)
    if table is None:
        _refuse("loss.backward()", "a jitted function cannot write the .grad of its inputs "
                "(call backward() on the function's result), except in a training step: a "
                "function taking the nn.Module (and its torch.optim optimizer), "
                "thunder_mlir.jit(step)(model, optimizer, *batch) (docs/optim.md).")
    return table.backward(loss, gradient, retain_graph, create_graph, inputs)


def handle(func, args: tuple, kwargs: dict):
    """Dispatch one call of ``tracing.AUTOGRAD_ATTRIBUTES``."""
    x = args[0]
    if func is _T.backward:
        return backward(*args, **kwargs)
    if func in (_T.grad.__get__, _T.grad.__set__, _T.is_leaf.__get__):
        table = _training(x)
        if table is not None:
            if func == _T.grad.__get__:
                return table.get_grad(x)
            if func == _T.is_leaf.__get__:
                return True
            return table.set_grad(x, args[1])
    if func == _T.requires_grad.__set__:
        return requires_grad_(x, args[1])
    if func is _T.requires_grad_:
        return requires_grad_(*args, **kwargs)
    if func is _T.detach_:
        return detach_(x)
    if func == _T.is_leaf.__get__:
        return is_leaf(x)
    if func == _T.grad_fn.__get__:
        return grad_fn(x)
    if func == _T.grad.__get__:
        return grad(x)
    if func is _T.retain_grad:
        _refuse("retain_grad()", "the compiled program keeps no .grad of intermediate "
                "values. Return the tensor and call retain_grad() on the result.")
    if func is _T.register_hook:
        _refuse("register_hook()", "Python hooks cannot run inside the compiled backward. "
                "Register the hook on the function's result instead.")
    _refuse(f"assigning {'.grad' if func == _T.grad.__set__ else '.data'}",
            "the compiled program cannot change the caller's tensors this way. Assign "
            "outside the function.")
