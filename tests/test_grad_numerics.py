"""Regression tests of gradient numerics against eager (values and gradients), for fixes
that are not user idioms (those are in ``test_idioms_gradnum.py``): VJP rules matching
PyTorch's derivative formulas, scan accumulation as ATen's, non-differentiable outputs.
"""

from __future__ import annotations

import pytest
import torch

import thunder_mlir


def _grads(fn, *args, cot_seed=0):
    """Outputs and input gradients of ``fn`` (eager) and of ``jit(fn)``: one fixed random
    cotangent per floating-point output that requires grad."""
    out = []
    for f in (fn, thunder_mlir.jit(fn)):
        ins = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        res = f(*ins)
        res = res if isinstance(res, tuple) else (res,)
        g = torch.Generator().manual_seed(cot_seed)
        diff = [r for r in res if r.requires_grad]
        cots = [torch.randn(r.shape, generator=g, dtype=r.dtype) for r in diff]
        grads = torch.autograd.grad(diff, [a for a in ins if a.requires_grad], cots,
                                    allow_unused=True)
        out.append((res, grads))
    return out


def _assert_same(fn, *args, **tol):
    (e_out, e_g), (j_out, j_g) = _grads(fn, *args)
    for a, e in zip(j_out, e_out):
        assert a.requires_grad == e.requires_grad
        torch.testing.assert_close(a.detach(), e.detach(), **tol)
    for a, e in zip(j_g, e_g):
        torch.testing.assert_close(torch.zeros_like(e) if a is None else a,
                                   torch.zeros_like(a) if e is None else e, **tol)


def test_logcumsumexp_gradient_not_farther_from_float64_than_eager():
    """An ill-conditioned logcumsumexp (|x| = 1e4, one float32 ulp = 1e-3): eager's scan
    accumulates in float64; a float32 scan gave a gradient 8.8e-3 off the float64 one
    (eager: 2.5e-3). Now the forward and the VJP's reversed scan accumulate as ATen's."""
    torch.manual_seed(0)
    x = torch.randn(5, 5, 5)
    x[0, 0, 0] = 1e4
    x[1, 2, 3] = -1e4
    g = torch.randn(5, 5, 5)

    def grad(fn, t):
        t = t.clone().requires_grad_()
        fn(t).backward(g.to(t.dtype))
        return t.grad

    f = lambda t: torch.logcumsumexp(t, 0)  # noqa: E731
    ref = grad(f, x.double())
    eager, jitted = grad(f, x), grad(thunder_mlir.jit(f), x)
    torch.testing.assert_close(thunder_mlir.jit(f)(x), f(x))
    assert (jitted.double() - ref).abs().sum() <= (eager.double() - ref).abs().sum()


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
def test_cholesky_and_triangular_solve_gradients():
    """VJP rules of the cholesky and triangular_solve prims (PyTorch's cholesky_backward
    and linalg_solve_triangular_backward); before: GradError."""
    torch.manual_seed(0)
    a = torch.randn(2, 4, 4, dtype=torch.float64)
    spd = (a @ a.mT + 4 * torch.eye(4, dtype=torch.float64)).requires_grad_()
    b = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    _assert_same(lambda m: torch.linalg.cholesky(m), spd)
    _assert_same(lambda m: torch.linalg.cholesky(m, upper=True), spd)
    tri = (torch.randn(2, 4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64))
    tri.requires_grad_()
    for upper in (False, True):
        for left in (False, True):
            rhs = b if left else b.detach().mT.clone().requires_grad_()
            _assert_same(lambda m, r, u=upper, lf=left: torch.linalg.solve_triangular(
                m, r, upper=u, left=lf), tri, rhs)
    _assert_same(lambda r, m: torch.triangular_solve(r, m, transpose=True), b, tri)
    _assert_same(lambda m: torch.linalg.solve_triangular(
        m, torch.ones(2, 4, 1, dtype=torch.float64), upper=False, unitriangular=True), tri)


def test_cholesky_solve_and_inverse_gradients_are_full_matrices():
    """Eager's cholesky_solve / cholesky_inverse gradients of the factor are full matrices
    (FunctionsManual.cpp), although the solves read one triangle: composite VJP rules
    give the same, not the triangle the triangular-solve chain rule gives."""
    torch.manual_seed(0)
    a = torch.randn(4, 4, dtype=torch.float64)
    low = torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, dtype=torch.float64))
    b = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    for upper in (False, True):
        f = (low.mT if upper else low).clone().requires_grad_()
        _assert_same(lambda r, m, u=upper: torch.cholesky_solve(r, m, upper=u), b, f)
        _assert_same(lambda m, u=upper: torch.cholesky_inverse(m, upper=u), f)


def test_normal_mean_and_std_get_no_gradient():
    """``torch.normal(mean, std)``: derivatives.yaml gives zero gradients (no
    reparameterization); the chain rule through mean + std * z gave cotangent and
    cotangent * z. The draws differ from eager's by design, so only gradients compare."""
    mean = torch.randn(6, requires_grad=True)
    std = torch.rand(6).add(0.5).requires_grad_()
    for f in (lambda m, s: torch.normal(m, s), lambda m, s: torch.normal(m, 2.0),
              lambda m, s: torch.normal(0.5, s)):
        (_, e_g), (_, j_g) = _grads(f, mean, std)
        for a, e in zip(j_g, e_g):
            zero = torch.zeros(6)
            torch.testing.assert_close(zero if a is None else a, zero if e is None else e)


def test_nextafter_and_i1e_gradients():
    """nextafter: the gradient passes to ``input`` (``other`` gets 0); special.i1e: eager's
    i1e_backward (0.5 at 0), through torch.autograd on the torch executor. Before: GradError."""
    x = torch.tensor([-3.0, -0.5, 0.0, 1e-9, 0.7, 4.0], requires_grad=True)
    y = torch.randn(6, requires_grad=True)
    _assert_same(torch.nextafter, x, y)
    _assert_same(torch.special.i1e, x)


def test_outputs_not_depending_on_inputs_that_require_grad():
    """Outputs computed from no input that requires grad (a constant, a function of a
    tensor that does not require grad) have requires_grad False, as in eager; before,
    every floating-point output was marked differentiable."""
    def f(w, c):
        return w * 2, c + 1, torch.ones(3), w.sum() * c

    _assert_same(f, torch.randn(3, requires_grad=True), torch.randn(3))


def test_unsigned_abs_sign_and_integer_mvlgamma():
    """uint8 abs/sign/sgn/softsign compiled (stablehlo.abs and sign are for signed types:
    the XLA compile failed) and mvlgamma of integers computes in the default dtype, as
    eager (it raised)."""
    u = torch.tensor([0, 3, 250], dtype=torch.uint8)
    for f in (torch.abs, torch.sign, torch.sgn, torch.nn.functional.softsign):
        torch.testing.assert_close(thunder_mlir.jit(f)(u), f(u))
    i = torch.tensor([[3, 4], [5, 9]])
    f = lambda t: torch.mvlgamma(t, p=3)  # noqa: E731
    torch.testing.assert_close(thunder_mlir.jit(f)(i), f(i))


@pytest.mark.filterwarnings("ignore:index_reduce")
def test_scatter_reduce_extrema_and_product_gradients():
    """scatter_reduce / index_reduce with amax (ties share the gradient, the input's
    element included unless include_self=False), amin and prod (zeros): eager's
    formulas, run by torch.autograd on the torch executor. Before: NotImplementedError."""
    x = torch.tensor([[1.0, 5.0, 5.0], [0.0, 2.0, 3.0]], requires_grad=True)
    src = torch.tensor([[5.0, 1.0, 5.0, 0.0], [2.0, 2.0, 0.0, 4.0]], requires_grad=True)
    index = torch.tensor([[1, 0, 2, 2], [0, 1, 1, 2]])
    for reduce in ("amax", "amin", "prod"):
        for include_self in (True, False):
            _assert_same(lambda a, s, ix, r=reduce, i=include_self: a.scatter_reduce(
                1, ix, s, r, include_self=i), x, src, index)
    _assert_same(lambda a, s, ix: a.index_reduce(0, ix, s[:, :3], "amax"),
                 x, src, torch.tensor([1, 1]))
