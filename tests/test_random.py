"""Random ops on XLA: distributions, the per-call seed, dropout and its gradient.

Random ops compiled by thunder_mlir draw from a seed taken from torch's generator at each
call (``thunder_mlir/rng.py``), so their values are not eager's bits: these tests check
what eager guarantees instead — distributions (bounds from the sample size: ``_close``
allows ``SIGMAS`` standard errors), ranges, reproducibility under ``torch.manual_seed`` and
that two calls (and two ops of one program) draw different values. Every program here
must run with zero torch-fallback ops.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir.ir.dialect import SEED_ATTR

N = 1 << 16
SIGMAS = 6  # the tests are deterministic (conftest seeds torch); 6 sigma leaves slack


def _close(value: float, expected: float, std_error: float, what: str) -> None:
    assert abs(value - expected) <= SIGMAS * std_error, \
        f"{what}: {value:.5f}, expected {expected:.5f} +- {SIGMAS} * {std_error:.2g}"


def _jit(fn):
    return thunder_mlir.jit(fn)


def _on_xla(jfn) -> None:
    assert thunder_mlir.fallback_ops(jfn) == [], thunder_mlir.fallback_ops(jfn)


def _frequencies(values: torch.Tensor, probs, what: str) -> None:
    """Each category k is drawn with frequency probs[k] (binomial standard error)."""
    n = values.numel()
    counts = torch.bincount(values.flatten().long(), minlength=len(probs)).double() / n
    for k, p in enumerate(probs):
        _close(counts[k].item(), p, math.sqrt(max(p * (1 - p), 1e-12) / n), f"{what} [{k}]")


# ------------------------------------------------------------------ distributions
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rand_and_randn_distributions(dtype):
    jfn = _jit(lambda: (torch.rand(N, dtype=dtype), torch.randn(N, dtype=dtype)))
    u, z = jfn()
    _on_xla(jfn)
    assert u.dtype == z.dtype == dtype and u.shape == z.shape == (N,)
    assert u.min() >= 0 and u.max() < 1
    u, z = u.double(), z.double()
    _close(u.mean().item(), 0.5, math.sqrt(1 / 12 / N), "uniform mean")
    _close(u.var().item(), 1 / 12, math.sqrt(1 / 180 / N), "uniform variance")
    _frequencies((u * 10).floor(), [0.1] * 10, "uniform deciles")
    assert z.isfinite().all()
    _close(z.mean().item(), 0.0, math.sqrt(1 / N), "normal mean")
    _close(z.var().item(), 1.0, math.sqrt(2 / N), "normal variance")
    # P(|z| < 1) = erf(1 / sqrt 2): the shape of the distribution, not only its moments
    p1 = math.erf(1 / math.sqrt(2))
    _close((z.abs() < 1).double().mean().item(), p1, math.sqrt(p1 * (1 - p1) / N), "|z| < 1")


def test_randint_range_and_coverage():
    jfn = _jit(lambda: (torch.randint(3, 13, (N,)), torch.randint(5, (N,), dtype=torch.int32),
                        torch.randint(-2, 2, (N,), dtype=torch.float32)))
    a, b, c = jfn()
    _on_xla(jfn)
    assert (a.dtype, b.dtype, c.dtype) == (torch.int64, torch.int32, torch.float32)
    assert a.min() == 3 and a.max() == 12
    _frequencies(a - 3, [0.1] * 10, "randint(3, 13)")
    _frequencies(b, [0.2] * 5, "randint(5)")
    _frequencies(c + 2, [0.25] * 4, "randint(-2, 2) as float")


def test_bernoulli_frequencies_and_certain_probabilities():
    probs = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0])
    jfn = _jit(lambda p: (torch.bernoulli(p.expand(N // 8, 5)), torch.bernoulli(p, 0.25)))
    draws, fixed_p = jfn(probs)
    _on_xla(jfn)
    assert draws.dtype == torch.float32 and set(draws.unique().tolist()) <= {0.0, 1.0}
    freq = draws.mean(0)
    assert freq[0] == 0 and freq[-1] == 1
    for k in (1, 2, 3):
        p = probs[k].item()
        _close(freq[k].item(), p, math.sqrt(p * (1 - p) / draws.shape[0]), f"bernoulli({p})")
    assert fixed_p.shape == (5,) and set(fixed_p.tolist()) <= {0.0, 1.0}


def test_multinomial_with_and_without_replacement():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    rows = 4096

    def fn(p):
        return (torch.multinomial(p, N // 4, replacement=True),
                torch.multinomial(p.expand(rows, 4), 3, replacement=False))
    jfn = _jit(fn)
    with_r, without = jfn(probs)
    _on_xla(jfn)
    assert with_r.dtype == without.dtype == torch.int64
    assert with_r.shape == (N // 4,) and without.shape == (rows, 3)
    _frequencies(with_r, probs.tolist(), "multinomial with replacement")
    # without replacement: distinct per row, the zero-probability category never drawn,
    # and the first draw of each row has the distribution p
    assert (without != 1).all()
    assert (without.sort(1).values.diff(dim=1) != 0).all()
    _frequencies(without[:, 0], probs.tolist(), "multinomial first draw")


def test_normal_and_inplace_fills():
    mean = torch.tensor([-3.0, 0.0, 10.0])
    std = torch.tensor([0.5, 1.0, 2.0])

    def fn(mean, std, buf, ints):
        z = torch.normal(mean.expand(N // 4, 3), std)
        buf.uniform_(-2.0, 6.0)
        ints.random_(7)
        e = torch.empty(N // 4).exponential_(2.0)
        return z, e, torch.randn_like(buf), torch.rand_like(buf), torch.randint_like(ints, 4, 9)
    buf, ints = torch.zeros(N // 4), torch.zeros(N // 4, dtype=torch.int64)
    jfn = _jit(fn)
    z, e, zl, ul, il = jfn(mean, std, buf, ints)
    _on_xla(jfn)
    n = z.shape[0]
    for k in range(3):
        _close(z[:, k].mean().item(), mean[k].item(), std[k].item() / math.sqrt(n), "normal mean")
        _close(z[:, k].std().item(), std[k].item(), std[k].item() / math.sqrt(2 * n),
               "normal std")
    # uniform_ and random_ wrote back into the caller's tensors
    assert buf.min() >= -2 and buf.max() < 6
    _close(buf.mean().item(), 2.0, 8 / math.sqrt(12 * n), "uniform_(-2, 6) mean")
    assert ints.min() == 0 and ints.max() == 6
    _close(e.mean().item(), 0.5, 0.5 / math.sqrt(n), "exponential_(2) mean")
    assert e.min() >= 0
    _close(zl.std().item(), 1.0, 1 / math.sqrt(2 * n), "randn_like std")
    assert ul.min() >= 0 and ul.max() < 1
    assert il.dtype == torch.int64 and il.min() == 4 and il.max() == 8


# ----------------------------------------------------------------------- the seed
def test_manual_seed_reproduces_and_calls_differ():
    jfn = _jit(lambda x: (x + torch.rand(64), torch.randn(64)))
    x = torch.zeros(64)
    torch.manual_seed(7)
    a = jfn(x)
    b = jfn(x)
    torch.manual_seed(7)
    c = jfn(x)
    for u, w in zip(a, c):
        assert torch.equal(u, w), "the same torch.manual_seed must give the same values"
    for u, w in zip(a, b):
        assert not torch.equal(u, w), "two calls must draw different values"
    # two random ops of one program draw independent streams, not the same numbers
    u = a[0]
    z = a[1]
    assert not torch.equal(u, torch.rand(64))  # (eager's bits are not promised)
    assert abs(torch.corrcoef(torch.stack([u, z]))[0, 1].item()) < 0.5


def test_two_identical_random_ops_are_independent():
    jfn = _jit(lambda: (torch.rand(N), torch.rand(N)))
    a, b = jfn()
    _on_xla(jfn)
    assert not torch.equal(a, b)
    _close(torch.corrcoef(torch.stack([a, b]))[0, 1].item(), 0.0, 1 / math.sqrt(N),
           "correlation of two draws")


def test_independence_check_can_fail(monkeypatch):
    """With one stream for every op (the bug per-op streams prevent), two draws coincide:
    the check above would catch it."""
    from thunder_mlir.frontend.tracing import Trace

    monkeypatch.setattr(Trace, "next_rng_stream", lambda self: 0)
    a, b = thunder_mlir.jit(lambda: (torch.rand(8), torch.rand(8)))()
    assert torch.equal(a, b)


def test_seed_input_only_in_programs_with_random_ops():
    plain = _jit(lambda x: x * 2)
    plain(torch.ones(3))
    random = _jit(lambda x: x * torch.rand(3))
    random(torch.ones(3))
    assert SEED_ATTR not in thunder_mlir.last_traces(plain)[0].text
    assert SEED_ATTR in thunder_mlir.last_traces(random)[0].text
    # the hot path of a program without random ops is the plain single-region run
    plan = plain.last.plan  # after its first run: the prepared single-region closure
    assert not plan.seeded and plan._single and plan.run is plan._call
    assert random.last.plan.seeded


# ------------------------------------------------------------------------ dropout
@pytest.mark.parametrize("p", [0.2, 0.7])
def test_dropout_mask_scale_and_gradient(p):
    x = (torch.rand(256, 128) + 1).requires_grad_()
    jfn = _jit(lambda x: F.dropout(x, p) * 3)
    y = jfn(x)
    _on_xla(jfn)
    kept = y != 0
    _close(kept.double().mean().item(), 1 - p, math.sqrt(p * (1 - p) / y.numel()),
           "kept fraction")
    torch.testing.assert_close(y[kept], (x * 3 / (1 - p))[kept])
    g = torch.randn_like(y)
    y.backward(g)
    # the backward uses the forward's mask
    torch.testing.assert_close(x.grad, kept * g * 3 / (1 - p))


def test_dropout_variants():
    x = torch.rand(64, 32, 8) + 1

    def fn(x):
        return (F.dropout2d(x, 0.5), F.dropout1d(x[0], 0.25), F.alpha_dropout(x, 0.3, True),
                F.dropout(x, 0.5, training=False))
    jfn = _jit(fn)
    d2, d1, alpha, same = jfn(x)
    _on_xla(jfn)
    # channel-wise: a channel is all kept (scaled by 2) or all zero
    zero = (d2 == 0).all(-1)
    assert (zero | torch.isclose(d2, 2 * x).all(-1)).all()
    _close(zero.double().mean().item(), 0.5, math.sqrt(0.25 / zero.numel()), "2d dropped")
    zero1 = (d1 == 0).all(-1)
    assert (zero1 | torch.isclose(d1, x[0] / 0.75).all(-1)).all()
    # alpha dropout: kept a * x + b, dropped one constant
    a = 1 / math.sqrt((1.7580993408473766 ** 2 * 0.3 + 1) * 0.7)
    b = 1.7580993408473766 * a * 0.3
    kept = torch.isclose(alpha, a * x + b)
    dropped = torch.isclose(alpha, torch.full_like(x, b - 1.7580993408473766 * a))
    assert (kept | dropped).all()
    _close(dropped.double().mean().item(), 0.3, math.sqrt(0.21 / x.numel()), "alpha dropped")
    assert torch.equal(same, x)


def test_dropout_inplace_writes_the_input():
    x = torch.rand(1000) + 1
    original = x.clone()
    jfn = _jit(lambda x: F.dropout(x, 0.5, inplace=True))
    out = jfn(x)
    _on_xla(jfn)
    torch.testing.assert_close(x, out)
    assert ((x == 0) | torch.isclose(x, 2 * original)).all() and (x == 0).any()


def test_attention_dropout_on_xla():
    """sdpa with dropout_p: with v = 1 every output row is sum(kept probabilities) / (1 - p),
    whose mean over rows is 1."""
    q, k = torch.randn(2, 4, 64, 16), torch.randn(2, 4, 64, 16)
    v = torch.ones(2, 4, 64, 16, requires_grad=True)
    jfn = _jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.25))
    out = jfn(q, k, v)
    _on_xla(jfn)
    rows = out[..., 0].detach()
    assert not torch.allclose(rows, torch.ones_like(rows))
    _close(rows.mean().item(), 1.0, rows.std().item() / math.sqrt(rows.numel()), "row mass")
    out.sum().backward()
    assert v.grad.isfinite().all() and v.grad.shape == v.shape


def test_rrelu_training_slopes():
    x = -torch.rand(N) - 0.5
    jfn = _jit(lambda x: F.rrelu(x, 0.1, 0.3, training=True))
    slope = jfn(x) / x
    _on_xla(jfn)
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    _close(slope.mean().item(), 0.2, 0.2 / math.sqrt(12 * N), "rrelu mean slope")


def test_random_values_are_forward_values_under_autograd():
    """x * rand_like(x): the gradient is the random factor the forward used."""
    x = (torch.rand(100) + 1).requires_grad_()
    jfn = _jit(lambda x: x * torch.rand_like(x))
    y = jfn(x)
    y.sum().backward()
    _on_xla(jfn)
    torch.testing.assert_close(x.grad, (y / x).detach())


# ------------------------------------------------------------------------- errors
def test_bad_arguments_name_the_users_line():
    x = torch.ones(3)
    with pytest.raises(ValueError, match=r"test_random.py:\d+.*\n.*dropout probability has to "
                                         r"be between 0 and 1, but got 1.5"):
        thunder_mlir.jit(lambda x: F.dropout(x, 1.5))(x)
    with pytest.raises(RuntimeError, match=r"test_random.py:\d+.*\n.*'from' to be less than "
                                           r"'to'"):
        thunder_mlir.jit(lambda x: x + torch.randint(5, 3, (3,)))(x)
    # eager's own error (NotImplementedError: "check_uniform_bounds" not implemented for
    # 'Long'), after the user's line
    with pytest.raises(NotImplementedError, match=r"test_random.py:\d+.*\n.*not implemented "
                                                  r"for 'Long'"):
        thunder_mlir.jit(lambda x: x + torch.rand(3, dtype=torch.int64))(x)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.rand(3, dtype=torch.int64)


def test_explicit_generator_runs_on_the_torch_fallback():
    g = torch.Generator().manual_seed(3)
    jfn = thunder_mlir.jit(lambda x: x + torch.rand(3, generator=g))
    jfn(torch.zeros(3))  # compiles
    assert thunder_mlir.fallback_ops(jfn) == ["torch.rand"]
    g.manual_seed(5)  # the compiled program follows the Generator's state, as eager does
    torch.testing.assert_close(jfn(torch.zeros(3)),
                               torch.rand(3, generator=torch.Generator().manual_seed(5)))
