"""Sine and cosine computed once where XLA's fusion would evaluate them once per element
read (dialects/thunder_mlir/ir/hlo.py ``lower_computed_once``): the lowering divides them
by ones XLA cannot fold, which XLA's CPU fusion treats as expensive.

Oracles: eager PyTorch for the values (XLA's sine and cosine differ from torch's by an
ulp or so), jax's own ``jnp.sin``/``jnp.cos`` (XLA's functions with no division) bit for
bit, and the compiled program's HLO for where the functions are evaluated.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime.plan import XlaStep

_SPECIAL = [0.0, -0.0, 1e-40, -1e-40, 1e-30, 0.5, -3.5, math.pi / 2, math.pi, 1e4, 3e8,
            1e30, 3.4e38, float("inf"), float("-inf"), float("nan")]


def _hlo(jitted) -> str:
    return "\n".join(s.executable.hlo_modules()[0].to_string()
                     for s in jitted.last.plan.steps if type(s) is XlaStep)


@pytest.mark.parametrize("name", ["sin", "cos"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_values_are_xlas_functions_bit_for_bit(name, dtype):
    """The division by one changes no bit: the results equal XLA's plain function (jax)
    on zeros of both signs, subnormals, large arguments, infinities and NaN, and eager
    PyTorch's within rounding."""
    torch.manual_seed(0)
    x = torch.cat([torch.tensor(_SPECIAL), torch.randn(64) * 10]).to(dtype)
    ours = thunder_mlir.jit(getattr(torch, name))(x)
    ref = jax.jit(getattr(jnp, name))(jnp.asarray(x.float().numpy()).astype(
        {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16,
         torch.float16: jnp.float16}[dtype]))
    ref = torch.from_dlpack(ref)
    assert torch.equal(ours.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       ref.view(torch.int16 if dtype != torch.float32 else torch.int32)), \
        (ours, ref)
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-3}[dtype]
    finite = x.float().abs() < 1e4  # (range reduction of huge arguments differs by library)
    torch.testing.assert_close(ours[finite], getattr(torch, name)(x)[finite], atol=tol,
                               rtol=tol, equal_nan=True)


def test_float64_and_grad_match_eager():
    """float64 values and the gradient through both functions, against eager."""
    x = torch.linspace(-7, 7, 50, dtype=torch.float64, requires_grad=True)

    def f(x):
        return (torch.sin(x) * torch.cos(2 * x)).sum()

    g, = torch.autograd.grad(thunder_mlir.jit(f)(x), x)
    g_ref, = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(g, g_ref)


def _rope(angles, x):
    """x * cos(angles) + rotate_half(x) * sin(angles), the [S, D] angle table broadcast
    over the batch and heads of x [B, H, S, D] (rotary position embeddings)."""
    cos, sin = torch.cos(angles), torch.sin(angles)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def test_a_broadcast_table_is_evaluated_once():
    """Rotary embeddings' cosine and sine tables ([64, 32]) read by 2 x 8 heads: in the
    compiled program each is evaluated in a fusion of the table's size, once, not inside
    the [2, 8, 64, 32] fusions that read it (2 * 8 evaluations per element). The result
    matches eager."""
    torch.manual_seed(0)
    t = torch.arange(64.0)[:, None] * torch.rand(32)
    x = torch.randn(2, 8, 64, 32)
    f = thunder_mlir.jit(_rope)
    torch.testing.assert_close(f(t, x), _rope(t, x), atol=1e-5, rtol=1e-5)
    text = _hlo(f)
    computations = re.split(r"\n(?=%|ENTRY)", text)
    shapes = [re.search(r"-> (\w+\[[\d,]*\])", c).group(1) for c in computations
              if re.search(r" (cosine|sine)\(", c) and "->" in c.splitlines()[0]]
    assert shapes and all(s == "f32[64,32]" for s in shapes), shapes
