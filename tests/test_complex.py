"""Complex numbers: listed symbols run on XLA, every other one on the torch fallback.

``thunder_mlir/symbols/complex_support.py`` lists the symbols verified on complex inputs;
these tests check both sides of that line against eager PyTorch.
"""

from __future__ import annotations

import torch

import thunder_mlir
from conftest import assert_close_to_eager


def c64(*shape):
    return torch.randn(*shape, dtype=torch.complex64)


def test_arithmetic_matmul_and_reductions_run_on_xla():
    assert_close_to_eager(lambda a, b: ((a * b + a / (b + 2)).exp(), a @ b.mT, a.sum(0),
                                        a.mean(), torch.abs(a)), c64(3, 3), c64(3, 3))


def test_complex_constants_and_factories():
    # complex fill values have no scalar attribute in the bindings: splat constants
    jfn = assert_close_to_eager(lambda a: (a + (1 + 2j), torch.full((2, 3), 3 - 1j),
                                           torch.zeros_like(a), torch.ones(3, dtype=torch.cfloat),
                                           a * 2.5), c64(2, 3))
    assert "complex<f32>" in str(thunder_mlir.last_traces(jfn)[-2])  # stablehlo stage prints


def test_comparisons_of_complex_values():
    a = c64(6)
    b = torch.where(torch.arange(6) % 2 == 0, a, c64(6))
    assert_close_to_eager(lambda x, y: (x == y, x != y, torch.isfinite(x), torch.sinc(x)), a, b)


def test_variance_of_complex_values_is_real():
    jfn = assert_close_to_eager(lambda a: (a.var(), a.std(0), torch.var_mean(a, 1)), c64(4, 5))
    assert jfn(c64(4, 5))[0].dtype is torch.float32


def test_unlisted_symbols_take_the_fallback_and_say_why():
    a = c64(3, 4)
    # logsumexp has an XLA decomposition for real inputs; on complex ones it is not listed
    assert_close_to_eager(lambda x: torch.logsumexp(x, 1), a, expect_fallback=True)
    report = thunder_mlir.examine(lambda x: torch.logsumexp(x, 1) * 2, a)
    (fallback,) = report.fallback_ops
    assert "not verified on complex numbers" in fallback.reason
    assert [o.name for o in report.xla_ops] == ["ltorch.mul"]


def test_real_inputs_of_unlisted_symbols_stay_on_xla():
    assert_close_to_eager(lambda x: torch.logsumexp(x, 1), torch.randn(3, 4))
