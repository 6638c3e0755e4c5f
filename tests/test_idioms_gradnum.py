"""Idiom catalogue, area 6 of issue 13: gradient numerics.

Programs as users write them, where the chain rule through a decomposition gives NaN, Inf
or rounding noise that eager's derivative formulas do not: padded attention rows, norms
of zero vectors, the tails of ``log_ndtr``, normalization over one element, random torch
ops on the fallback, non-differentiable outputs of fallback ops. Each case runs eagerly
and jitted through ``tests/idiom_harness.py`` (values, ``requires_grad``, side effects and
gradients against eager, step by step); each failed before the fix named in its
docstring.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from idiom_harness import Step, check_idiom  # noqa: E402


def _padding_mask(rows: int, cols: int, padded_row: int) -> torch.Tensor:
    """An additive float attention mask (0: attend, -inf: masked, as Hugging Face-style
    code builds it) whose ``padded_row`` attends to nothing."""
    mask = torch.zeros(rows, cols)
    mask[padded_row] = float("-inf")
    return mask


def test_gqa_attention_with_a_fully_padded_query_row():
    """Grouped-query attention (4 query heads, 2 key/value heads) with an additive -inf
    padding mask where a padding query row attends to nothing: eager's math backend uses
    a safe softmax (zeros, zero gradients). Before: the row's 0/0 inside the
    decomposition made q's and k's gradients NaN (fix: the double where in
    ``attention_probs``)."""
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def make_args():
        return (torch.randn(2, 4, 5, 8, requires_grad=True),
                torch.randn(2, 2, 6, 8, requires_grad=True),
                torch.randn(2, 2, 6, 8, requires_grad=True), _padding_mask(5, 6, 3))

    check_idiom(attend, make_args, [Step(), Step()])


def test_attention_with_keys_shared_across_heads_and_a_padded_row():
    """Keys and values broadcast over the heads (shape (B, 1, S, E), as multi-query
    attention is often written), with an additive causal mask whose first query row is
    padding.
    Before: NaN gradients for the padded row (the composite VJP does not take broadcast
    batch dims, and the decomposition's discarded NaN leaked through ``where``)."""
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def make_args():
        mask = torch.zeros(4, 4).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1),
                                             float("-inf"))
        mask[0] = float("-inf")  # the first query is padding
        return (torch.randn(3, 2, 4, 8, requires_grad=True),
                torch.randn(3, 1, 4, 8, requires_grad=True),
                torch.randn(3, 1, 4, 8, requires_grad=True), mask)

    check_idiom(attend, make_args)


def test_safe_softmax_over_a_fully_masked_row():
    """``aten._safe_softmax`` (what attention uses for padding) over scores plus an
    additive mask whose second row is all -inf: eager gives zeros and zero gradients.
    Before: NaN gradients (fix: the double where in ``safe_softmax``)."""
    def masked_probs(scores, mask):
        return torch.ops.aten._safe_softmax.default(scores + mask, -1)

    def make_args():
        return torch.randn(3, 5, requires_grad=True), _padding_mask(3, 5, 1)

    check_idiom(masked_probs, make_args)


def test_normalize_embeddings_with_a_zero_row():
    """``F.normalize`` of embeddings where one row is all zeros (an empty bag, a padding
    token): eager's norm backward defines the subgradient at a zero norm as 0. Before:
    NaN in the whole row's gradient (sqrt's VJP gives 0 * inf; fix: the composite VJP of
    ``vector_norm``, PyTorch's norm_backward)."""
    def normalized_scores(emb, w):
        return F.normalize(emb, dim=-1) @ w

    def make_args():
        emb = torch.randn(4, 6)
        emb[2] = 0
        return emb.requires_grad_(), torch.randn(6, 3, requires_grad=True)

    check_idiom(normalized_scores, make_args)


def test_norm_of_a_zero_vector_and_distances_between_equal_points():
    """The 2-norm of an all-zero vector, the 3-norm (ord > 2) and the 1.5-norm of a row
    that is zero, and the distance between two equal points: eager's gradients are 0.
    Before: NaN (the chain rule through sqrt / pow at 0)."""
    def norms(x, a, b):
        return (torch.linalg.norm(x), torch.linalg.vector_norm(a, ord=3, dim=-1),
                torch.linalg.vector_norm(a, ord=1.5, dim=-1), (a - b).norm(dim=-1))

    def make_args():
        a = torch.randn(3, 4)
        a[1] = 0
        b = a.clone()
        b[0] += 1.0  # row 0 differs, rows 1 and 2 coincide
        return (torch.zeros(5, requires_grad=True), a.requires_grad_(), b.requires_grad_())

    check_idiom(norms, make_args)


def test_probit_log_likelihood_in_the_tails():
    """A probit model's log-likelihood, ``log_ndtr(y * z)`` with margins down to -40: eager
    is finite there (log_ndtr(-40) = -804.6, gradient 40.02). Before: the forward gave
    -inf below about -13 (erfc underflows) and the gradient NaN below -10 (fix: ATen's
    erfcx form with its asymptotic series in the tail, and the composite VJP from the
    result, as derivatives.yaml)."""
    def log_likelihood(z, y):
        return torch.special.log_ndtr(y * z).sum()

    def make_args():
        z = torch.tensor([-40.0, -25.0, -12.0, -9.5, -3.0, -1.0, 0.0, 2.0, 9.0])
        return z.requires_grad_(), torch.ones(9)

    check_idiom(log_likelihood, make_args)


def test_layer_norm_over_a_last_dim_of_size_one():
    """``nn.LayerNorm(1)`` on a (N, 1) feature (a scalar feature normalized on its own):
    the exact gradients of the input and the weight are 0, but eager's fused kernel
    returns its rounding error (x * rstd - mean * rstd with an FMA, times rstd = 316);
    before, jit returned the exact 0s: 1e-4 away from eager. Now such calls run on the
    torch fallback, whose backward is eager's."""
    model = torch.nn.LayerNorm(1)
    with torch.no_grad():
        model.weight.fill_(1.5)
        model.bias.fill_(0.25)

    def make_args():
        return (torch.randn(16, 1) * 3,)

    check_idiom(model, make_args, [Step(), Step()])


def test_group_norm_with_one_element_per_group():
    """``nn.GroupNorm(4, 4)`` on (N, 4) inputs: each group holds one element, the case of
    the layer norm above. Before: the input and weight gradients differed from eager's."""
    model = torch.nn.GroupNorm(4, 4)

    def make_args():
        return ((torch.randn(3, 4) * 2).requires_grad_(),)

    check_idiom(model, make_args)


def test_lu_permutation_is_not_differentiable():
    """``torch.linalg.lu`` (the torch fallback): the permutation P is a float tensor that
    eager marks non-differentiable. Before: jit returned P with requires_grad=True and
    took a cotangent for it (the harness's backward pairs cotangents with eager's
    differentiable outputs only)."""
    def lu(a):
        p, l, u = torch.linalg.lu(a)
        return p, l, u

    check_idiom(lu, lambda: (torch.randn(4, 4, requires_grad=True),))


def test_fractional_max_pool_backward_uses_the_forward_draw():
    """``F.fractional_max_pool2d`` draws its pooling regions from torch's generator and
    runs on the torch fallback. Before: its backward re-ran it and drew other regions (a
    wrong gradient), advancing the generator twice. Now the backward replays the
    forward's generator state: eager's gradient, and after a training step the generator
    is where eager leaves it."""
    def pool(x):
        return F.fractional_max_pool2d(x, 2, output_size=(5, 5))

    def make_args():
        return (torch.randn(2, 3, 11, 11, requires_grad=True),)

    jitted = check_idiom(pool, make_args, [Step(), Step()])

    def step_then_draw(fn):
        torch.manual_seed(7)
        x = torch.randn(2, 3, 11, 11, requires_grad=True)
        fn(x).sum().backward()
        return torch.rand(3)

    assert torch.equal(step_then_draw(jitted), step_then_draw(pool))


def test_instance_norm_with_running_stats_in_training():
    """``nn.InstanceNorm1d(track_running_stats=True)`` in training (the torch fallback):
    the running statistics are updated, not differentiated. Before: the fallback's
    backward marked them as requiring grad, and torch refused ("not differentiable with
    respect to argument 'running_mean'")."""
    model = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True)

    def make_args():
        return (torch.randn(2, 3, 7, requires_grad=True),)

    check_idiom(model, make_args, [Step(), Step()])


def test_gaussian_process_marginal_likelihood():
    """A Gaussian process's negative log marginal likelihood through a Cholesky factor,
    ``cholesky_solve`` and the log-determinant from the factor's diagonal, in float64 as
    GP code runs. Before: GradError (no VJP rules for the cholesky and triangular_solve
    prims); eager's ``cholesky_solve`` gradient of the factor is a full matrix, which the
    composite VJP reproduces."""
    def nll(x, log_lengthscale, y):
        d = (x.unsqueeze(1) - x.unsqueeze(0)).pow(2).sum(-1)
        k = torch.exp(-0.5 * d / log_lengthscale.exp() ** 2)
        k = k + 1e-2 * torch.eye(x.shape[0], dtype=x.dtype)
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), chol)
        return 0.5 * (y.unsqueeze(-1) * alpha).sum() + chol.diagonal().log().sum()

    def make_args():
        return (torch.randn(6, 2, dtype=torch.float64, requires_grad=True),
                torch.tensor(0.3, dtype=torch.float64, requires_grad=True),
                torch.randn(6, dtype=torch.float64, requires_grad=True))

    check_idiom(nll, make_args)
