"""Regression tests of gradient numerics against eager (values and gradients), for fixes
that are not user idioms (those are in ``test_idioms_gradnum.py``): VJP rules matching
PyTorch's derivative formulas, scan accumulation as ATen's, non-differentiable outputs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

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
    """nextafter: the gradient passes to ``input`` except where it ties with ``other``
    (``other`` gets 0; the tie gave 1 before: fuzzer program 217 of the zeros_like run);
    special.i1e: eager's i1e_backward (0.5 at 0), through torch.autograd on the torch
    executor. Before: GradError."""
    x = torch.tensor([-3.0, -0.5, 0.0, 1e-9, 0.7, 4.0], requires_grad=True)
    y = torch.randn(6).index_fill(0, torch.tensor([1, 2]), 0.0)
    y[1] = -0.5  # two ties: -0.5 and 0.0
    _assert_same(torch.nextafter, x, y.requires_grad_())
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



NINF, NAN = float("-inf"), float("nan")
# Inputs at the points where a derivative formula has a kink, a removable singularity or an
# overflowing branch: name -> (program, inputs). Each gradient (cotangent of ones) must be
# eager's, NaN and inf where eager's are and nowhere else; before, many were NaN or another
# subgradient (relu at 0: 1; clamp at its bounds: 1/2; max over ties: shared).
EDGE_POINTS = {
    "sinc0": (lambda x: torch.sinc(x), [torch.tensor([0., 0.5, 1.0])]),
    "xlogy0": (lambda x, y: torch.xlogy(x, y), [torch.tensor([0., 1., 2.]), torch.tensor([0., 2., 3.])]),
    "entr0": (lambda x: torch.special.entr(x), [torch.tensor([0., 0.5, 1.0])]),
    "logsumexp_NINF": (lambda x: torch.logsumexp(x, -1), [torch.tensor([[NINF, NINF], [1., 2.]])]),
    "log_softmax_NINF": (lambda x: F.log_softmax(x, -1), [torch.tensor([[NINF, 0., 1.], [1., 2., 3.]])]),
    "softmax_NINF": (lambda x: F.softmax(x, -1), [torch.tensor([[NINF, 0., 1.], [1., 2., 3.]])]),
    "pdist_dup": (lambda x: F.pdist(x), [torch.tensor([[1., 2.], [1., 2.], [0., 1.]])]),
    "cdist_dup": (lambda x, y: torch.cdist(x, y), [torch.tensor([[1., 2.], [0., 1.]]), torch.tensor([[1., 2.], [3., 1.]])]),
    "pairwise_eq": (lambda x, y: F.pairwise_distance(x, y, eps=0.0), [torch.tensor([[1., 2.]]), torch.tensor([[1., 2.]])]),
    "atan2_00": (lambda x, y: torch.atan2(x, y), [torch.tensor([0., 1.]), torch.tensor([0., 1.])]),
    "pow_0": (lambda x: torch.pow(x, 2.5), [torch.tensor([0., 1.])]),
    "pow_0_half": (lambda x: x ** 0.5 * 0 + x, [torch.tensor([1., 2.])]),
    "hypot0": (lambda x, y: torch.hypot(x, y), [torch.tensor([0., 3.]), torch.tensor([0., 4.])]),
    "std_const": (lambda x: torch.std(x, -1), [torch.tensor([[1., 1., 1.], [1., 2., 3.]])]),
    "var_single": (lambda x: torch.var(x, -1, correction=0), [torch.tensor([[1.], [2.]])]),
    "renorm0": (lambda x: torch.renorm(x, 2, 0, 1.0), [torch.tensor([[0., 0.], [3., 4.]])]),
    "cosine_sim0": (lambda x, y: F.cosine_similarity(x, y), [torch.tensor([[0., 0.], [1., 2.]]), torch.tensor([[1., 1.], [1., 2.]])]),
    "normalize_l1": (lambda x: F.normalize(x, p=1, dim=-1), [torch.tensor([[0., 0.], [1., 2.]])]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [torch.tensor([-100., 0., 100.])]),
    "softplus_big": (lambda x: F.softplus(x), [torch.tensor([-100., 0., 100.])]),
    "logsigmoid": (lambda x: F.logsigmoid(x), [torch.tensor([-200., 0., 200.])]),
    "bce_logits": (lambda x, t: F.binary_cross_entropy_with_logits(x, t), [torch.tensor([-200., 0., 200.]), torch.tensor([1., 0., 0.])]),
    "ce_NINF": (lambda x, t: F.cross_entropy(x, t), [torch.tensor([[NINF, 0., 1.], [1., 2., 3.]]), torch.tensor([1, 2])]),
    "mish": (lambda x: F.mish(x), [torch.tensor([-100., 0., 100.])]),
    "silu": (lambda x: F.silu(x), [torch.tensor([-100., 0., 100.])]),
    "elu": (lambda x: F.elu(x), [torch.tensor([-100., 0., 100.])]),
    "rms_norm0": (lambda x: F.rms_norm(x, (2,)), [torch.tensor([[0., 0.], [1., 2.]])]),
    "vector_norm_inf0": (lambda x: torch.linalg.vector_norm(x, float("inf"), -1), [torch.tensor([[0., 0.], [1., -2.]])]),
    "vector_norm_05": (lambda x: torch.linalg.vector_norm(x, 0.5, -1), [torch.tensor([[0., 0.], [1., -2.]])]),
    "matrix_norm_fro0": (lambda x: torch.linalg.matrix_norm(x), [torch.zeros(2, 2)]),
    "logit_eps": (lambda x: torch.logit(x, eps=1e-6), [torch.tensor([0., 0.5, 1.])]),
    "log1p_m1": (lambda x: torch.log1p(x), [torch.tensor([-0.5, 0.])]),
    "acos1": (lambda x: torch.acos(x), [torch.tensor([0.5, 0.])]),
    "cumprod0": (lambda x: torch.cumprod(x, 0), [torch.tensor([1., 0., 2., 0., 3.])]),
    "prod0": (lambda x: torch.prod(x), [torch.tensor([1., 0., 2.])]),
    "prod00": (lambda x: torch.prod(x, -1), [torch.tensor([[1., 0., 0.], [1., 2., 3.]])]),
    "amax_tie": (lambda x: torch.amax(x, -1), [torch.tensor([[1., 1.], [0., 2.]])]),
    "max_tie": (lambda x: torch.max(x, -1).values, [torch.tensor([[1., 1.], [0., 2.]])]),
    "median_tie": (lambda x: torch.median(x, -1).values, [torch.tensor([[1., 1., 1.], [0., 2., 3.]])]),
    "clamp_edge": (lambda x: torch.clamp(x, 0., 1.), [torch.tensor([0., 1., 0.5])]),
    "relu0": (lambda x: F.relu(x), [torch.tensor([0., 1.])]),
    "abs0": (lambda x: torch.abs(x), [torch.tensor([0., 1.])]),
    "hardtanh_edge": (lambda x: F.hardtanh(x), [torch.tensor([-1., 1., 0.])]),
    "leaky_relu0": (lambda x: F.leaky_relu(x), [torch.tensor([0., 1.])]),
    "sqrt_eps": (lambda x: torch.sqrt(x + 0.0), [torch.tensor([1e-30, 1.])]),
    "dist0": (lambda x, y: torch.dist(x, y), [torch.tensor([1., 2.]), torch.tensor([1., 2.])]),
    "norm_p3_0": (lambda x: torch.norm(x, 3), [torch.zeros(3)]),
    "weight_norm0": (lambda v, g: torch._weight_norm(v, g, 0), [torch.tensor([[0., 0.], [3., 4.]]), torch.tensor([[1.], [2.]])]),
    "relu6_edges": (lambda x: F.relu6(x), [torch.tensor([0., 6., 3., -1., 7.])]),
    "selu_big": (lambda x: F.selu(x), [torch.tensor([-100., 0., 100.])]),
    "celu_big": (lambda x: F.celu(x, 2.0), [torch.tensor([-100., 0., 100.])]),
    "hardsigmoid_edges": (lambda x: F.hardsigmoid(x), [torch.tensor([-3., 3., 0., -4., 4.])]),
    "hardswish_edges": (lambda x: F.hardswish(x), [torch.tensor([-3., 3., 0., -4., 4.])]),
    "min_tie": (lambda x: torch.min(x, -1).values, [torch.tensor([[1., 1.], [0., 2.]])]),
    "max_keepdim_tie": (lambda x: x.max(dim=0, keepdim=True)[0], [torch.tensor([[1., 1.], [1., 2.]])]),
    "prod_dim0": (lambda x: torch.prod(x, 0), [torch.tensor([[1., 0.], [0., 2.], [3., 4.]])]),
    "prod_nozero": (lambda x: torch.prod(x, 1), [torch.tensor([[1., 2.], [3., 4.]])]),
    "cumprod_zero": (lambda x: torch.cumprod(x, 0), [torch.tensor([2., 0., 3., 0.])]),
    "std_dim": (lambda x: x.std(dim=0), [torch.tensor([[1., 2.], [1., 3.]])]),
    "std_mean": (lambda x: torch.std_mean(x, -1)[0], [torch.tensor([[1., 1.], [1., 3.]])]),
    "nansum": (lambda x: torch.nansum(x), [torch.tensor([1., NAN, 2.])]),
    "nanmean": (lambda x: torch.nanmean(x), [torch.tensor([1., NAN, 2.])]),
    "threshold": (lambda x: F.threshold(x, 1.0, 0.0), [torch.tensor([1., 2., 0.5])]),
    "softshrink": (lambda x: F.softshrink(x, 0.5), [torch.tensor([0.5, -0.5, 1., 0.])]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), [torch.tensor([0.5, -0.5, 1., 0.])]),
    "prelu0": (lambda x, w: F.prelu(x, w), [torch.tensor([0., -1., 1.]), torch.tensor([0.25])]),
    "clamp_tensor": (lambda x, lo, hi: torch.clamp(x, lo, hi), [torch.tensor([0., 1., 0.5, 2.]), torch.tensor([0., 0., 0., 0.]), torch.tensor([1., 1., 1., 1.])]),
    "clamp_min_only": (lambda x: torch.clamp(x, min=0.), [torch.tensor([0., 1., -1.])]),
    "maximum_tie": (lambda x, y: torch.maximum(x, y), [torch.tensor([1., 2.]), torch.tensor([1., 3.])]),
    "fmax_tie": (lambda x, y: torch.fmax(x, y), [torch.tensor([1., 2.]), torch.tensor([1., 3.])]),
    "logsumexp_big": (lambda x: torch.logsumexp(x, -1), [torch.tensor([[1000., 1000.], [1., 2.]])]),
    "softmin_NINF": (lambda x: F.softmin(x, -1), [torch.tensor([[float("inf"), 0.], [1., 2.]])]),
    "gelu_big": (lambda x: F.gelu(x), [torch.tensor([-100., 0., 100.])]),
    "sigmoid_big": (lambda x: torch.sigmoid(x), [torch.tensor([-100., 0., 100.])]),
    "log_sigmoid_mid": (lambda x: F.logsigmoid(x), [torch.tensor([-30., 30.])]),
    "kl_div0": (lambda x, t: F.kl_div(x, t, reduction="sum"), [torch.tensor([-1., -2.]), torch.tensor([0., 0.5])]),
    "bce0": (lambda x, t: F.binary_cross_entropy(x, t), [torch.tensor([0., 1., 0.5]), torch.tensor([0., 1., 1.])]),
    "poisson_nll": (lambda x, t: F.poisson_nll_loss(x, t, log_input=False), [torch.tensor([0., 1.]), torch.tensor([0., 2.])]),
    "smooth_l1_0": (lambda x, t: F.smooth_l1_loss(x, t), [torch.tensor([1., 2.]), torch.tensor([1., 0.])]),
    "l1_0": (lambda x, t: F.l1_loss(x, t), [torch.tensor([1., 2.]), torch.tensor([1., 0.])]),
    "huber_edge": (lambda x, t: F.huber_loss(x, t, delta=1.0), [torch.tensor([1., 2.]), torch.tensor([0., 0.])]),
    "cosine_emb": (lambda x, y: F.cosine_embedding_loss(x, y, torch.ones(1)), [torch.zeros(1, 3), torch.ones(1, 3)]),
    "triplet0": (lambda a, p, n: F.triplet_margin_loss(a, p, n), [torch.ones(1, 3), torch.ones(1, 3), torch.zeros(1, 3)]),
    "pow_neg0": (lambda x: torch.pow(x, -1.0), [torch.tensor([1., 2.])]),
    "pow_tensor0": (lambda x, y: torch.pow(x, y), [torch.tensor([0., 2.]), torch.tensor([0., 2.])]),
    "rsqrt": (lambda x: torch.rsqrt(x), [torch.tensor([1., 4.])]),
    "frac_trunc": (lambda x: torch.frac(x), [torch.tensor([1.5, -2.0])]),
    "sgn0": (lambda x: torch.sgn(x) * x, [torch.tensor([0., 2.])]),
    "expm1_big": (lambda x: torch.expm1(x), [torch.tensor([1., 2.])]),
    "var_single": (lambda x: torch.var(x, correction=0), [torch.tensor([3.])]),
    "norm_dim_keep": (lambda x: x.norm(dim=1, keepdim=True), [torch.tensor([[0., 0.], [3., 4.]])]),
    "renorm": (lambda x: torch.renorm(x, 2, 0, 5.), [torch.tensor([[0., 0.], [3., 4.]])]),
    "group_norm_const": (lambda x: F.group_norm(x, 1), [torch.ones(2, 2, 2)]),
    "layer_norm_const": (lambda x: F.layer_norm(x, (3,)), [torch.ones(2, 3)]),
    "instance_norm_const": (lambda x: F.instance_norm(x), [torch.ones(1, 2, 3)]),
    "batch_norm_const": (lambda x: F.batch_norm(x, None, None, training=True), [torch.ones(4, 2)]),
    "rms_norm_zero": (lambda x: F.rms_norm(x, (2,), eps=None), [torch.zeros(2, 2)]),
    "cdist_p1_dup": (lambda x, y: torch.cdist(x, y, p=1), [torch.tensor([[1., 2.]]), torch.tensor([[1., 2.]])]),
    "pdist_p3_dup": (lambda x: F.pdist(x, p=3), [torch.tensor([[1., 2.], [1., 2.]])]),
    "vector_norm_neg": (lambda x: torch.linalg.vector_norm(x, -1, -1), [torch.tensor([[1., 2.], [3., 4.]])]),
    "vector_norm_0ord": (lambda x: torch.linalg.vector_norm(x, 0, -1), [torch.tensor([[0., 2.], [3., 4.]])]),
    "logdet_like": (lambda x: torch.logdet(x), [torch.tensor([[2., 0.], [0., 3.]])]),
    "atan2_neg0": (lambda x, y: torch.atan2(x, y), [torch.tensor([0., -0.]), torch.tensor([-1., 0.])]),
    "hypot00": (lambda x, y: torch.hypot(x, y), [torch.tensor([0.]), torch.tensor([0.])]),
}


@pytest.mark.parametrize("name", sorted(EDGE_POINTS))
def test_gradient_at_edge_points_is_eager_s(name):
    fn, args = EDGE_POINTS[name]
    outs, grads = [], []
    for f in (fn, thunder_mlir.jit(fn, sharp_edges="allow")):
        ins = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
        out = f(*ins)
        outs.append(out.detach())
        grads.append(torch.autograd.grad(out, [a for a in ins if a.requires_grad],
                                         torch.ones_like(out), allow_unused=True))
    torch.testing.assert_close(outs[1], outs[0], equal_nan=True, atol=1e-5, rtol=1e-4)
    for a, e in zip(grads[1], grads[0]):
        e = torch.zeros_like(a) if e is None else e
        a = torch.zeros_like(e) if a is None else a
        torch.testing.assert_close(a, e, equal_nan=True, atol=1e-5, rtol=1e-4)
