"""No internal error reaches a user (issue 28, part 4): an XLA runtime error of a compiled
program's run is an ``ExecutionError`` naming the program, the argument positions and both
types; ``native_batch_norm``'s eval-mode residuals (empty on the CPU, (C,) on meta) match
eager in the forward and the backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir.errors import ExecutionError, ThunderError
from thunder_mlir.runtime.plan import XlaStep, executable_arguments, expected_arguments


def add2(a, b):
    return a + b


def _plan_of(jfn):
    return jfn.last.plan


@pytest.mark.parametrize("prepared", [False, True], ids=["first-run", "prepared"])
def test_mismatched_buffer_names_program_position_and_shapes(prepared):
    """A plan given a buffer of another shape than its executable takes: the error names
    the program (function and definition line), the argument's position and both types."""
    jfn = thunder_mlir.jit(add2)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    torch.testing.assert_close(jfn(a, b), add2(a, b))
    plan = _plan_of(jfn)
    if not prepared:  # a fresh step (no result handlers yet): XlaStep.execute
        step = next(s for s in plan.steps if type(s) is XlaStep)
        step.handlers = None
        run = lambda ts: step.execute(plan._imports.buffers(ts), plan._jax_device)  # noqa: E731
    else:
        jfn(a, b)  # the second run: the prepared closure
        run = plan.run
    with pytest.raises(ExecutionError) as info:
        run([a, torch.randn(3)])
    msg = str(info.value)
    assert isinstance(info.value, ThunderError) and isinstance(info.value, RuntimeError)
    assert "`add2`" in msg and f"{__file__}:{add2.__code__.co_firstlineno}" in msg, msg
    assert "argument 1: expected f32[2,2], got f32[3]" in msg, msg
    assert "argument 0" not in msg, msg  # the matching buffer is not named
    with pytest.raises(ExecutionError,
                       match=r"argument 0: expected f32\[2,2\], got s64\[2,2\]"):
        run([torch.ones(2, 2, dtype=torch.int64), b])


def test_expected_arguments_parses_signatures():
    text = ("func.func @main(%arg0: tensor<2x?xf32> {jax.buffer_donor = true}, "
            "%arg1: tensor<complex<f64>>, %arg2: tensor<3xcomplex<f32>>, %arg3: tensor<i1>)"
            " -> tensor<2xf32> {\n  return\n}")
    assert expected_arguments(text) == [(("2", "?"), "f32"), ((), "c128"), (("3",), "c64"),
                                        ((), "pred")]
    jfn = thunder_mlir.jit(lambda a, n, m: (a * n, m.logical_not()))
    jfn(torch.randn(2, 3), torch.tensor(3), torch.ones(4, dtype=torch.bool))
    step = next(s for s in _plan_of(jfn).steps if type(s) is XlaStep)
    # (the region orders its arguments by type)
    assert sorted(executable_arguments(step.executable)) == [((), "s64"), (("2", "3"), "f32"),
                                                             (("4",), "pred")]


def _native_bn(training):
    def f(x, w, b, rm, rv):
        out, save_mean, save_invstd = torch.native_batch_norm(x, w, b, rm, rv, training,
                                                              0.1, 1e-5)
        return out * 2, save_mean, save_invstd
    return f


def _aten_bn(op):
    def f(x, w, b, rm, rv):
        if op is torch.ops.aten._native_batch_norm_legit:
            outs = op(x, w, b, rm, rv, False, 0.1, 1e-5)
        else:
            outs = op(x, w, b, rm, rv, 0.1, 1e-5)
        return (outs[0] * 2,) + tuple(outs[1:])
    return f


def _functional_bn(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, training=False, momentum=0.1, eps=1e-5) * 2


_EVAL_OPS = ["_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
             "_batch_norm_no_update"]


@pytest.mark.parametrize("fn", [_native_bn(False), _native_bn(True), _functional_bn] + [
    _aten_bn(getattr(torch.ops.aten, n)) for n in _EVAL_OPS],
    ids=["native-eval", "native-train", "F.batch_norm-eval"] + [f"{n}-eval" for n in _EVAL_OPS])
def test_batch_norm_backward_matches_eager(fn):
    """Outputs (save_mean/save_invstd included: empty in eval mode on the CPU), the
    gradients of x, weight and bias, and the running statistics, against eager."""
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 2, 4), torch.randn(2), torch.randn(2)
    rm, rv = torch.randn(2), torch.rand(2) + 0.5
    results = []
    for f in (fn, thunder_mlir.jit(fn)):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        stats = [rm.clone(), rv.clone()]
        out = f(xs, ws, bs, *stats)
        outs = out if isinstance(out, tuple) else (out,)
        outs[0].pow(2).sum().backward()
        results.append(([o.detach() for o in outs], [xs.grad, ws.grad, bs.grad], stats))
    (e_out, e_grads, e_stats), (j_out, j_grads, j_stats) = results
    for e, j in zip(e_out, j_out):
        assert e.shape == j.shape
        torch.testing.assert_close(j, e)
    for e, j in zip(e_grads + e_stats, j_grads + j_stats):
        torch.testing.assert_close(j, e)


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x * self.w


def test_backward_plan_error_names_the_module_and_its_backward():
    """A module's backward plan fed a cotangent of another shape: the message names the
    module's forward, its definition line and the backward."""
    jm = thunder_mlir.jit(_Scale())
    x = torch.randn(2, 3, requires_grad=True)
    jm(x).sum().backward()
    fn = next(v for v in vars(jm).values() if type(v).__name__ == "ThunderFunction")
    bwd = fn.last.backward_plan
    with pytest.raises(ExecutionError) as info:
        bwd.run([torch.randn(5)] + [torch.randn(2, 3), torch.randn(3)])
    msg = str(info.value)
    line = _Scale.forward.__code__.co_firstlineno
    assert "`_Scale.forward`" in msg and f"{__file__}:{line}), its backward" in msg, msg
    assert "got f32[5]" in msg and "expected f32[2,3]" in msg, msg
