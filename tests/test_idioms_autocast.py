"""Idiom catalogue, area 4 (issue 13): torch.autocast, through the idiom harness.

Each case runs eagerly and jitted step by step (``tests/idiom_harness.py``) and compares
outputs (values, dtypes, requires_grad), side effects and gradients with eager. Values
computed through bfloat16 ops are compared at torch.testing's bfloat16 tolerances, with
atol raised to 2 bfloat16 ulps of the outputs' magnitude where a backward's cancellations
carry one rounding that eager's kernels place elsewhere (``TOL_BF16_GRAD``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from idiom_harness import Step, check_idiom
from torch import nn

import thunder_mlir

TOL_BF16 = {"rtol": 1.6e-2, "atol": 1e-5}
TOL_BF16_GRAD = {"rtol": 1.6e-2, "atol": 2e-2}  # values and gradients of magnitude <= ~4
TOL_FP16 = {"rtol": 1e-3, "atol": 1e-5}


def test_idiom_autocast_region_inside_the_function():
    """linear in bfloat16, softmax on its bfloat16 output, a float32 loss after the region."""
    def f(x, w):
        with torch.autocast("cpu"):
            y = F.linear(x, w)
            p = y.softmax(-1)
        return y, p, (p.float() * 3).sum()
    check_idiom(f, lambda: (torch.randn(4, 8, requires_grad=True),
                            torch.randn(6, 8, requires_grad=True)), tol=TOL_BF16_GRAD)


def test_idiom_autocast_nested_disabled_region():
    """``autocast(enabled=False)`` inside an autocast region: float32 math again, on the
    region's bfloat16 result converted back."""
    def f(x, w):
        with torch.autocast("cpu"):
            h = x @ w
            with torch.autocast("cpu", enabled=False):
                z = h.float() @ w
            return h, z, z @ w
    check_idiom(f, lambda: (torch.randn(3, 5, requires_grad=True),
                            torch.randn(5, 5, requires_grad=True)), tol=TOL_BF16_GRAD)


def test_idiom_autocast_decorator_float16():
    @torch.autocast("cpu", dtype=torch.float16)
    def f(x, w, b):
        return torch.addmm(b, x, w), F.mse_loss(x @ w, b.expand(4, 3))
    check_idiom(f, lambda: (torch.randn(4, 6, requires_grad=True),
                            torch.randn(6, 3, requires_grad=True), torch.randn(3)),
                tol={"rtol": 1e-3, "atol": 2e-3})


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x, t):
        with torch.autocast("cpu"):
            logits = self.fc2(self.norm(F.silu(self.fc1(x))))
            return logits, F.cross_entropy(logits, t)


def test_idiom_autocast_module_training_steps():
    """An nn.Module whose forward opens an autocast region: bfloat16 logits, float32 loss
    (cross_entropy is on the CPU fp32 list), parameter gradients, a step without grad."""
    check_idiom(_Net(), lambda: (torch.randn(5, 8), torch.randint(0, 3, (5,))),
                [Step(), Step(), Step(grad_mode=False, backward=False)], tol=TOL_BF16_GRAD)


def test_idiom_autocast_promote_and_fp32_ops():
    """cat promotes to the widest input (float32 wins over bfloat16); l1_loss of a bfloat16
    prediction computes in float32 (CPU fp32 list)."""
    def f(x, w, extra):
        with torch.autocast("cpu"):
            h = x @ w
            both = torch.cat([h, extra])
            return both, F.l1_loss(h, extra)
    check_idiom(f, lambda: (torch.randn(2, 4, requires_grad=True),
                            torch.randn(4, 4, requires_grad=True),
                            torch.randn(2, 4, requires_grad=True)), tol=TOL_BF16_GRAD)


def _enter_cpu_autocast(_target):
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.bfloat16)


def _leave_cpu_autocast(_target):
    torch.set_autocast_enabled("cpu", False)


def test_idiom_jitted_function_called_inside_and_outside_autocast():
    """The caller's autocast state at call time: the same jitted function called with CPU
    autocast on (bfloat16 matmul), off (float32) and on again (a cache hit)."""
    def f(x, w):
        return (x @ w).relu(), torch.stack([x, x * 2]).sum(0)
    steps = [Step(before=_enter_cpu_autocast), Step(before=_leave_cpu_autocast),
             Step(before=_enter_cpu_autocast)]
    try:
        jf = check_idiom(f, lambda: (torch.randn(3, 3, requires_grad=True),
                                     torch.randn(3, 3, requires_grad=True)), steps,
                         tol=TOL_BF16_GRAD)
    finally:
        _leave_cpu_autocast(None)
    info = thunder_mlir.cache_info(jf)
    assert (info["misses"], info["hits"]) == (2, 1)
    assert info["recompile_reasons"] == ["torch.autocast state changed: cpu bfloat16 -> off"]


def test_idiom_autocast_attention_block():
    """An HF-style attention block under autocast: q/k/v projections, scaled scores with
    an additive mask, softmax, the value product and the output projection."""
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)

        def forward(self, x, mask):
            with torch.autocast("cpu"):
                q, k, v = self.qkv(x).view(2, 4, 3, 2, 8).permute(2, 0, 3, 1, 4)
                att = (q @ k.transpose(-1, -2)) * 8 ** -0.5 + mask
                y = (att.softmax(-1) @ v).transpose(1, 2).reshape(2, 4, 16)
                return self.out(y)

    def make():
        mask = torch.zeros(4, 4)
        mask[:, 3] = -1e4
        return torch.randn(2, 4, 16, requires_grad=True), mask
    check_idiom(Attn(), make, tol=TOL_BF16_GRAD)


def test_idiom_autocast_error_of_a_promote_conflict():
    """Eager's error: promote ops (cat on CPU) refuse float16 inputs in a bfloat16 region."""
    def f(a, b):
        with torch.autocast("cpu"):
            return torch.cat([a, b])
    check_idiom(f, lambda: (torch.randn(2, 2).half(), torch.randn(2, 2).half()))
