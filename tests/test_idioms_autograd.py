"""Idiom catalogue, area 1: autograd semantics (issue 13).

``detach``, ``.data``, grad-mode regions, ``requires_grad`` of traced tensors, ops whose
derivative eager does not implement, custom ``torch.autograd.Function``s and
``thunder_mlir.grad``'s gradient program, each compared with eager PyTorch by
``idiom_harness.check_idiom`` (values, ``requires_grad``, side effects, gradients, errors).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from idiom_harness import Step, check_idiom, check_raises


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


def one_leaf():
    return (leaf(3, 4),)


def two_leaves():
    return (leaf(3, 4), leaf(3, 4))


# ------------------------------------------------------------------ stop-gradients
def test_detach_stops_the_gradient():
    check_idiom(lambda w: (w * w.detach()).sum(), one_leaf)


def test_data_stops_the_gradient():
    check_idiom(lambda w: (w * w.data).sum(), one_leaf)


def test_detach_of_an_intermediate():
    def f(w):
        h = w.sin()
        return h * h.detach().exp(), h.detach()
    check_idiom(f, one_leaf)


def test_no_grad_region():
    def f(w, v):
        with torch.no_grad():
            scale = (v * 2).sum()
        return w * scale
    check_idiom(f, two_leaves)


def test_set_grad_enabled_false_region():
    def f(w, v):
        with torch.set_grad_enabled(False):
            y = w @ v.T
        return (y + w.sum()).relu()
    check_idiom(f, two_leaves)


def test_inference_mode_region():
    def f(w):
        with torch.inference_mode():
            c = w.norm()
        return w / c
    check_idiom(f, one_leaf)


def test_no_grad_decorated_helper():
    @torch.no_grad()
    def ema(a, b):
        return 0.9 * a + 0.1 * b

    def f(w, v):
        return w * ema(w, v)
    check_idiom(f, two_leaves)


def test_enable_grad_inside_a_call_under_no_grad():
    def f(w, v):
        with torch.enable_grad():
            y = w * v
        return y, w + v
    check_idiom(f, two_leaves, [Step(grad_mode=False), Step(grad_mode=True)])


def test_call_under_no_grad_returns_outputs_without_grad():
    check_idiom(lambda w, v: (w * v).tanh(), two_leaves, [Step(grad_mode=False)])


def test_detach_in_place_on_an_intermediate():
    def f(w):
        h = w * 3
        h.detach_()
        return h * w
    check_idiom(f, one_leaf)


def test_stop_gradient_straight_through_estimator():
    def f(w):
        q = torch.round(w * 4) / 4
        return (w + (q - w).detach()).pow(2).sum()
    check_idiom(f, one_leaf)


# ---------------------------------------------------------- requires_grad as eager's
def test_requires_grad_read_inside_the_program():
    def f(w, v):
        y = w * 2
        with torch.no_grad():
            z = w * 3
        return y.requires_grad, z.requires_grad, v.requires_grad, (v + 1).requires_grad, y
    check_idiom(f, lambda: (leaf(3), torch.randn(3)))


def test_requires_grad_decides_python_control_flow():
    def f(w, v):
        out = w * v
        if out.requires_grad:
            out = out * 2
        return out
    check_idiom(f, lambda: (torch.randn(3), torch.randn(3)))
    check_idiom(f, lambda: (leaf(3), torch.randn(3)))


def test_factories_like_an_input_do_not_require_grad():
    def f(w):
        return torch.zeros_like(w), torch.ones_like(w) * 2, w.new_full((2,), 3.0), w + 1
    check_idiom(f, one_leaf)


def test_non_differentiable_float_op():
    def f(w, v):
        h = torch.histc(w.detach(), bins=4, min=-3, max=3)
        return (torch.histc(w, bins=4, min=-3, max=3) * v[0, :4]).sum(), h
    check_idiom(f, two_leaves)


def test_integer_results_do_not_require_grad():
    def f(w):
        idx = w.argmax(dim=1)
        return idx, w.gather(1, idx[:, None]), (w > 0).sum()
    check_idiom(f, one_leaf)


def test_is_leaf_of_an_intermediate():
    def f(w):
        y = w * 2
        return y.is_leaf, y.detach().is_leaf, y
    check_idiom(f, one_leaf)


def test_requires_grad_false_on_a_computed_tensor_raises_like_eager():
    def f(w):
        y = w * 2
        y.requires_grad_(False)
        return y
    check_idiom(f, one_leaf)


def test_in_place_update_of_a_buffer_under_no_grad():
    def f(w, buf):
        with torch.no_grad():
            buf.copy_(w * 2)
        return (buf * w).sum()
    check_idiom(f, lambda: (leaf(3), torch.zeros(3)))


# ------------------------------------------------------ derivatives eager lacks
def test_floor_divide_backward_raises_like_eager():
    check_idiom(lambda w: (w // 2).sum(), one_leaf)


def test_floor_divide_output_unused_in_the_loss():
    def f(w):
        return (w * 2).sum(), (w // 2).detach()
    check_idiom(f, one_leaf)


# ------------------------------------------------------- custom autograd.Function
class ScaledExp(torch.autograd.Function):
    """exp(x) * scale whose backward is deliberately not the true derivative (3x): the
    program must use this backward, not differentiate the forward."""

    @staticmethod
    def forward(ctx, x, scale):
        y = torch.exp(x) * scale
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 3 * g * y / ctx.scale, None


class ClampSTE(torch.autograd.Function):
    """A straight-through clamp in the setup_context style."""

    @staticmethod
    def forward(x, lo, hi):
        return x.clamp(lo, hi)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, lo, hi = inputs
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ((x > ctx.lo - 1) & (x < ctx.hi + 1)).to(g.dtype), None, None


class SortWithIndices(torch.autograd.Function):
    """Two outputs, one marked non-differentiable; the gradient is scattered back."""

    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort(dim=-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(g).scatter(-1, idx, g)


class MulBoth(torch.autograd.Function):
    """Two tensor inputs, one of which may not require grad (needs_input_grad)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b if ctx.needs_input_grad[0] else None
        gb = g * a if ctx.needs_input_grad[1] else None
        return ga, gb


def test_custom_function_backward_is_the_vjp_rule():
    check_idiom(lambda w: ScaledExp.apply(w * 2, 0.5).sum(), one_leaf)


def test_custom_function_setup_context_style():
    check_idiom(lambda w: ClampSTE.apply(w * 3, -1.0, 1.0).square().sum(), one_leaf)


def test_custom_function_non_differentiable_output():
    def f(w):
        values, idx = SortWithIndices.apply(w)
        return values * torch.arange(4.0), idx
    check_idiom(f, one_leaf)


def test_custom_function_with_an_input_that_does_not_require_grad():
    check_idiom(lambda a, b: MulBoth.apply(a, b).sin(),
                lambda: (leaf(3), torch.randn(3)))


def test_custom_function_under_no_grad():
    check_idiom(lambda w: ScaledExp.apply(w, 2.0), one_leaf, [Step(grad_mode=False)])


def test_custom_function_in_a_module():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return ClampSTE.apply(self.lin(x), -0.5, 0.5)
    check_idiom(Block(), lambda: (torch.randn(2, 4),))


def test_custom_function_in_place_forward_is_refused():
    class AddOne(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    check_raises(lambda w: AddOne.apply(w * 1), (leaf(3),), NotImplementedError, "mark_dirty")


# ------------------------------------------------------------ refused on purpose
def test_new_autograd_leaf_inside_the_program_is_refused():
    check_raises(lambda w: w * torch.ones(3, requires_grad=True), (leaf(3),),
                 NotImplementedError, "requires_grad=True")


def test_retain_grad_is_refused():
    def f(w):
        y = w * 2
        y.retain_grad()
        return y
    check_raises(f, (leaf(3),), NotImplementedError, "retain_grad")


def test_in_place_under_no_grad_of_a_tensor_that_requires_grad_keeps_its_gradient_path():
    """Eager writes the memory under no_grad() and leaves the autograd graph as it was: the
    value is the written one, the gradient that of the tensor before the write (an EMA or
    a momentum update in a forward), for a computed tensor, a view of it and a leaf input
    (written back to the caller's tensor)."""
    def computed(w):
        y = w * 2
        with torch.no_grad():
            y.mul_(3)
        return y * w

    def through_a_view(w):
        y = w * 2
        with torch.no_grad():
            y[1:].add_(5)
        return y * w

    def leaf_input(w):
        with torch.no_grad():
            w.mul_(0.9).add_(0.1)
        return w * w
    for f in (computed, through_a_view, leaf_input):
        check_idiom(f, one_leaf)


# ------------------------------------------------------ thunder_mlir.grad's program
def _eager_grads(fn, *args):
    ins = [a.detach().clone().requires_grad_() for a in args]
    outs = [o for o in fn(*ins) if o.requires_grad] if isinstance(fn(*ins), tuple) \
        else [fn(*ins)]
    grads = torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs],
                                allow_unused=True)
    return [torch.zeros_like(i) if g is None else g for i, g in zip(ins, grads)]


@pytest.mark.parametrize("fn", [
    lambda w, v: (w * v.detach()).sin().sum(),
    lambda w, v: ((w * v).exp(), (w - v).detach()),
    lambda w, v: ScaledExp.apply(w * v, 2.0).sum(),
], ids=["detach", "detached-output", "custom-function"])
def test_grad_program_matches_eager_autograd(fn):
    w, v = torch.randn(3, 4), torch.randn(3, 4)
    for got, want in zip(thunder_mlir.grad(fn)(w, v), _eager_grads(fn, w, v)):
        torch.testing.assert_close(got, want)


def test_grad_program_computes_only_what_the_gradients_need():
    def f(w):
        return (w.sin() * 2).sum(), w.exp()  # gradient 2 cos(w) + exp(w): no sin needed
    jf = thunder_mlir.jit(f)
    w = torch.randn(4)
    torch.testing.assert_close(thunder_mlir.grad(jf)(w)[0], _eager_grads(f, w)[0])
    prims = next(s.text for s in thunder_mlir.last_traces(jf) if s.name == "prims")
    assert "thunder.sin" not in prims and "thunder.cos" in prims, prims


class GradientReversal(torch.autograd.Function):
    """The domain-adaptation layer: identity forward (a view), negated gradient."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


def test_custom_function_with_an_identity_forward():
    check_idiom(lambda w: (GradientReversal.apply(w * 2, 0.5) * w).sum(), one_leaf)
