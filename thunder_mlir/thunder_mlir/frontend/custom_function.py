"""Custom ``torch.autograd.Function``s: the forward traced, the user's ``backward`` as the
VJP rule (as Lightning Thunder does).

While a program is traced, ``MyFn.apply(*args)`` records one ``thunder.composite`` named
``autograd_function.<qualname>`` whose region is ``forward`` traced under ``no_grad()`` (as
eager runs it). Its results are the forward's tensor outputs followed by the tensors the
forward saved for backward (``ctx.save_for_backward`` and tensor attributes of ``ctx``),
so they reach the backward as residuals. The composite carries a ``vjp`` attribute: the
symbol (ir/implementations.py) of a rule that traces ``backward(ctx, *cotangents)``
into the backward program, with ``ctx.saved_tensors``, ``ctx.needs_input_grad`` and the
forward's other ``ctx`` attributes as the forward left them.

Outputs require grad as eager's do: grad mode on, a tensor input that requires grad, a
floating-point output not passed to ``ctx.mark_non_differentiable``. Both ``forward(ctx,
...)`` and ``forward(...)`` + ``setup_context(ctx, inputs, output)`` are supported.
``ctx.mark_dirty`` (in-place forwards) raises NotImplementedError naming the line.
"""

from __future__ import annotations

import inspect
from typing import Any

import optree
import torch

from thunder_mlir.frontend import differentiability
from thunder_mlir.ir import implementations
from thunder_mlir.ir.proxy import TensorProxy

VJP_ATTR = "vjp"  # composite attribute: the symbol of its VJP rule (ir/implementations.py)


def _refuse(what: str) -> None:
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    raise NotImplementedError(f"{describe_frame(user_frame())}\n  {what}")


class TracedFunctionCtx:
    """The ``ctx`` a custom Function's forward gets while traced (torch's FunctionCtx
    surface: save_for_backward, saved_tensors, needs_input_grad, mark_non_differentiable,
    set_materialize_grads, attributes)."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple = ()
        self.non_differentiable: list[TensorProxy] = []
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        pass  # forward-mode AD: not used by the compiled program

    @property
    def saved_tensors(self) -> tuple:
        return self.to_save

    def mark_non_differentiable(self, *tensors) -> None:
        self.non_differentiable.extend(tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    def mark_dirty(self, *tensors) -> None:
        _refuse("a custom autograd.Function that modifies its inputs in place (ctx.mark_dirty) "
                "is not supported inside a jitted function. Return a new tensor instead.")


class BackwardCtx:
    """The ``ctx`` a custom Function's backward gets: the forward ctx's attributes, with its
    saved tensors and tensor attributes replaced by their values in the backward program."""

    def __init__(self, attrs: dict, saved: tuple, needs_input_grad: tuple[bool, ...]):
        self.__dict__.update(attrs)
        self.saved_tensors = saved
        self.needs_input_grad = needs_input_grad


_CTX_FIELDS = ("needs_input_grad", "to_save", "non_differentiable", "materialize_grads")


def apply(cls, *args, **kwargs) -> Any:
    """``cls.apply(*args, **kwargs)`` while tracing (see the module docstring)."""
    from thunder_mlir.frontend.symbol import Symbol, emit_composite
    from thunder_mlir.frontend.tracing import current_trace
    from thunder_mlir.ir import prims

    uses_setup_context = cls.setup_context is not torch.autograd.function._SingleLevelFunction.setup_context
    if uses_setup_context:
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    if kwargs:
        raise TypeError(f"{cls.__name__}.apply() takes no keyword arguments (define "
                        "setup_context to use them, as torch requires)")
    state: dict = {}

    def forward(*inner):
        ctx = TracedFunctionCtx(tuple(type(a) is TensorProxy and a.requires_grad for a in args))
        with torch.no_grad():
            if uses_setup_context:
                out = cls.forward(*inner)
                cls.setup_context(ctx, inner, out)
            else:
                out = cls.forward(ctx, *inner)
        out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
        saved, where = [], []  # where: per ctx.saved_tensors entry, None or its index in saved
        for t in ctx.to_save:
            if t is None:
                where.append(None)
            else:
                where.append(len(saved))
                saved.append(t)
        attrs = {}
        for k, v in vars(ctx).items():
            if k in _CTX_FIELDS:
                continue
            if type(v) is TensorProxy:
                attrs[k] = ("saved", len(saved))
                saved.append(v)
            elif any(type(x) is TensorProxy for x in optree.tree_leaves(v, none_is_leaf=True)):
                _refuse(f"{cls.__name__}: ctx.{k} holds tensors inside a container; save them "
                        "with ctx.save_for_backward or as direct ctx attributes")
            else:
                attrs[k] = ("value", v)
        tensor_pos = [i for i, x in enumerate(out_leaves) if type(x) is TensorProxy]
        # what eager's node saves, by position: tensor arguments, then outputs
        tensor_inner = [a for a in inner if type(a) is TensorProxy]
        state["saved_inputs"] = [i for i, a in enumerate(tensor_inner)
                                 if any(a is t for t in saved)]
        state["saved_outputs"] = [k for k, i in enumerate(tensor_pos)
                                  if any(out_leaves[i] is t for t in saved)]
        state.update(out_spec=out_spec, out_leaves=out_leaves, tensor_pos=tensor_pos,
                     where=where, attrs=attrs, n_saved=len(saved),
                     non_diff=[next((k for k, i in enumerate(tensor_pos)
                                     if out_leaves[i] is t), None)
                               for t in ctx.non_differentiable],
                     needs_input_grad=ctx.needs_input_grad)
        return [out_leaves[i] for i in tensor_pos] + saved

    name = f"autograd_function.{cls.__qualname__}"
    results = emit_composite(Symbol(name, forward), args, {}, required=True)
    trace = current_trace()
    n_out = len(state["tensor_pos"])
    outs = results[:n_out]
    if results:  # the composite (required: its VJP is the user's backward)
        results[0].value.owner.attributes[VJP_ATTR] = implementations.register_attr(
            f"{name}.vjp", _make_rule(cls, state, [type(a) is TensorProxy for a in args]))
    # outputs: eager's requires_grad (custom Function outputs are differentiable unless
    # marked); the others stop gradients
    track = torch.is_grad_enabled() and any(type(a) is TensorProxy and a.requires_grad
                                            for a in args)
    non_diff = {k for k in state["non_diff"] if k is not None}
    for k, o in enumerate(outs):
        if not (o.tdtype.is_floating_point or o.tdtype.is_complex):
            continue
        if track and k not in non_diff:
            with torch._C.DisableTorchFunction():
                torch.Tensor.requires_grad.__set__(o, True)
        elif any(type(a) is TensorProxy and a.requires_grad for a in args):
            o.value = prims.stop_gradient(o).value
    if track:  # the node eager records, in the eager twin graph (differentiability.py)
        differentiability.opaque_twins(outs, [a for a in args if type(a) is TensorProxy],
                                       state["saved_inputs"], state["saved_outputs"])
    leaves = list(state["out_leaves"])
    for k, i in enumerate(state["tensor_pos"]):
        leaves[i] = outs[k]
    return optree.tree_unflatten(state["out_spec"], leaves)


def _make_rule(cls, state: dict, is_tensor_arg: list[bool]):
    """The VJP rule ``(op, x, y, g) -> cotangents of the operands`` calling
    ``cls.backward``; ``x`` are the composite's operands (the tensor arguments, in order),
    ``y`` its results (outputs, then saved tensors)."""

    def rule(op, x, y, g):
        from thunder_mlir.ir import prims

        n_out = len(state["tensor_pos"])
        saved = y[n_out:]
        saved_tensors = tuple(None if w is None else saved[w] for w in state["where"])
        attrs = {k: (saved[v] if kind == "saved" else v)
                 for k, (kind, v) in state["attrs"].items()}
        ctx = BackwardCtx(attrs, saved_tensors, state["needs_input_grad"])
        with torch.no_grad():
            grads = cls.backward(ctx, *g[:n_out])
        if not isinstance(grads, tuple):
            grads = (grads,)
        n_args = len(is_tensor_arg)
        if len(grads) < n_args or any(gr is not None for gr in grads[n_args:]):
            raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number "
                               f"of gradients (expected {n_args}, got {len(grads)})")
        out, operand = [], 0
        for k, (is_t, gr) in enumerate(zip(is_tensor_arg, grads)):
            if not is_t:
                continue
            inp = x[operand]
            operand += 1
            if gr is None or not state["needs_input_grad"][k]:
                out.append(None)
                continue
            if type(gr) is not TensorProxy:
                raise TypeError(f"{cls.__name__}.backward returned a {type(gr).__name__} for "
                                f"input {k}; expected a tensor or None")
            if gr.tshape != inp.tshape:  # eager sums a broadcast gradient to the input's shape
                from thunder_mlir.frontend.symbols.shape import sum_to_size

                try:
                    ok = tuple(torch.broadcast_shapes(gr.tshape, inp.tshape)) == gr.tshape
                except RuntimeError:
                    ok = False
                if not ok:
                    raise RuntimeError(
                        f"Function {cls.__name__}Backward returned an invalid gradient at index "
                        f"{k} - got {list(gr.tshape)} but expected shape compatible with "
                        f"{list(inp.tshape)}")
                gr = sum_to_size(gr, *inp.tshape)
            out.append(prims.convert_element_type(gr, inp.tdtype))
        return out
    return rule
