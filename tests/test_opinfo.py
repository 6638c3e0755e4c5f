"""Conformance: PyTorch's OpInfo database through ``thunder_mlir.jit``, against eager.

The corpus is ``torch.testing._internal.common_methods_invocations.op_db`` (the one PyTorch
and Lightning Thunder test their operators with). For each OpInfo and dtype, its CPU
``sample_inputs`` run eagerly (the oracle) and through ``thunder_mlir.jit``; every op gets
one status:

* ``xla``      — every sample matched eager and the whole program ran on XLA;
* ``fallback`` — every sample matched eager, some part ran on the torch fallback executor;
* ``mismatch`` — a sample gave a different result (a bug: fix the symbol or ``raise
  Fallback``);
* ``error``    — jit raised where eager did not (or a sample holds an input jit cannot
  take: a Generator, a sparse tensor; the reason is reported);
* ``eager-fails`` — no sample runs eagerly for this dtype (not counted in the shares).

Tensors of a sample are the jitted function's inputs; its non-tensor values are constants
of the program (as a user writes them). Values are compared with
``torch.testing.assert_close`` (``equal_nan=True``) at its default tolerances for the
dtype, or at the OpInfo's own ``toleranceOverride`` for the tests that compare an
alternative implementation against eager (``TestCommon``, ``TestDecomp``, reference
numerics) where it declares one, for any device (``_tolerance``) — never looser. A floating-point result outside that
tolerance still passes if it is no farther from the op computed in float64 than eager's
result is (PyTorch's rule for another implementation, ``_closer_than_eager``); the report
counts those samples per op.

Random ops are a declared category, ``RANDOM_OPS`` (op -> reason and value check). On XLA
their values come from the program's seed, not torch's generator, so they cannot equal
eager's: their samples are checked for metadata (shape, dtype), for the op's value check
(range, finiteness, the deterministic part of the formula) and for following the seed (same
``torch.manual_seed`` -> same values, another seed -> other values). On the torch fallback
they are compared with eager under the same seed. An op whose eager output depends on the
seed, that is not declared and differs from eager, is a mismatch that says so.

Batches (``run_dtype``): the per-op cost is mostly compilation, so the selected samples of
all ops are checked ``BATCH`` at a time (in op order) through ONE jitted function that takes
every sample's tensors and returns every sample's output (``run_batch``, as
tests/fuzz_batch.py does for fuzzer programs); each output is compared with its own eager
result. A sample keeps the batch's outcome (``xla``, or ``fallback`` with the fallback ops its
own call recorded in the batch's trace) only where its output is close to eager's. A sample
is checked alone, in a jitted function of its own (``run_sample``), where it is a random op,
an op with unspecified values or index ties (``batchable``), holds an input jit cannot take,
differs from eager in the batch (so the tie, seed and float64-reference rules and the
mismatch's reason are those of the sample alone), or where its batch raised or its fallback
ops could not be told apart (the batch is halved, down to single samples). So every op gets
the status and reason it gets alone. ``THUNDER_OPINFO_BATCH=1`` checks every sample alone.

Default subset (CI): the first ``F32_SAMPLES`` eager-valid float32 samples of every op and
``OTHER_SAMPLES`` per op for each of ``OTHER_DTYPES``. ``THUNDER_OPINFO_FULL=1`` runs every
sample. Sample values are random: each op's are drawn after seeding torch with a hash of the
op's name, dtype and ``THUNDER_OPINFO_SEED`` (default 0), so a run is reproducible (as
PyTorch's own test cases seed in ``setUp``); other seeds explore other values. ``THUNDER_OPINFO_OPS=add,sum`` restricts the ops (for development). The summary
table goes to stdout and to ``/tmp/thunder_opinfo_report_<dtype>.txt``.
Run standalone: ``python tests/test_opinfo.py [float32|other|<dtype>]``; the other dtypes run in CI
from test_opinfo_dtypes.py.
"""

from __future__ import annotations

import math
import os
import zlib
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable

import pytest
import torch
import torch.utils._pytree as pytree

import thunder_mlir
from conftest import swept

FULL = os.environ.get("THUNDER_OPINFO_FULL") == "1"
F32_SAMPLES = None if FULL else 3
OTHER_SAMPLES = None if FULL else 1
OTHER_DTYPES = (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)
MAX_TRIES = 12  # samples drawn per op to find eager-valid ones (default subset)
REPORT = "/tmp/thunder_opinfo_report_{}.txt"
SEED = int(os.environ.get("THUNDER_OPINFO_SEED", "0"))
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")  # conftest's --device (docs/gpu.md)
_RANK = {"xla": 0, "fallback": 1, "error": 2, "mismatch": 3}

# Tolerance overrides of the OpInfo that apply to "another implementation vs eager" tests.
_TOL_TESTS = {"test_compare_cpu", "test_numpy_refs", "test_python_ref",
              "test_python_ref_torch_fallback",
              "test_python_ref_executor", "test_comprehensive", "test_quick",
              "test_variant_consistency_eager", "test_noncontiguous_samples",
              "test_reference_numerics", "test_reference_numerics_normal",
              "test_reference_numerics_small", "test_reference_numerics_large",
              "test_reference_numerics_extremal", "test_reference_numerics_small_values",
              "test_reference_numerics_large_values", "test_reference_numerics_extremal_values"}


@dataclass
class OpResult:
    """Status of one OpInfo at one dtype: ``status`` (see module docstring), ``reason``
    (first error/mismatch message), sample counts and wall time."""

    name: str
    status: str
    reason: str = ""
    samples: int = 0
    seconds: float = 0.0
    fallbacks: set = field(default_factory=set)
    closer: int = 0  # samples accepted by the precise-reference rule (_closer_than_eager)


def _tolerance(op, dtype) -> dict:
    """The loosest of the OpInfo's ``toleranceOverride``s at ``dtype`` for the tests that
    compare another implementation with eager (``_TOL_TESTS``), whatever their device: XLA's
    kernels are another implementation than eager's, as cuDNN's are, and sum in another
    order (conv_transpose3d's float32 override, atol 1e-4, is a CUDA one; eager's CPU
    kernels themselves round differently on an AVX-512 and an AVX2 machine)."""
    atol = rtol = None
    for d in op.decorators:
        decs = getattr(d, "decorators", None)
        if not decs:
            continue
        if getattr(d, "test_name", None) not in _TOL_TESTS:
            continue
        for x in decs:
            t = getattr(x, "d", None)
            if type(x).__name__ == "toleranceOverride" and t and dtype in t:
                atol = max(atol or 0, t[dtype].atol)
                rtol = max(rtol or 0, t[dtype].rtol)
    return {} if atol is None else {"atol": atol, "rtol": rtol}


def _clone(tree):
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def _unsupported_leaf(leaves) -> str | None:
    for x in leaves:
        if isinstance(x, torch.Generator):
            return "sample holds a torch.Generator"
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                return f"sample holds a {x.layout} tensor"
            if x.is_quantized:
                return "sample holds a quantized tensor"
            if x.dtype in (torch.complex32,) or x.is_neg() or x.is_conj():
                return f"sample holds a {x.dtype} tensor with lazy conj/neg bits"
    return None


def _compare(actual, expected, tol: dict, path: str = "out") -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{path}: expected a tensor, got {type(actual).__name__}")
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol,
                                   msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{path}: structure {type(actual).__name__} vs "
                                 f"{type(expected).__name__}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, tol, f"{path}[{i}]")
    elif isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            raise AssertionError(f"{path}: dict keys differ")
        for k in expected:
            _compare(actual[k], expected[k], tol, f"{path}[{k!r}]")
    elif isinstance(expected, (bool, int, float, complex)) and not isinstance(actual, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
    else:
        if actual != expected:
            raise AssertionError(f"{path}: {actual!r} != {expected!r}")


def _metadata(actual, expected, path="out"):
    a_leaves, e_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{path}: {len(a_leaves)} outputs vs {len(e_leaves)}")
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
                raise AssertionError(f"{path}: metadata {getattr(a, 'shape', a)} vs {e.shape}")


class _NoReseed:
    """OpInfos of random ops wrap them in ``wrapper_set_seed`` (``torch.manual_seed(42)``
    inside the op): a Python side effect that a compiled program does not replay. The
    harness seeds the global generator itself and makes that inner call a no-op, so eager
    and jit draw from the same generator state."""

    def __enter__(self):
        self._saved = torch.manual_seed
        torch.manual_seed = lambda seed: torch.default_generator

    def __exit__(self, *exc):
        torch.manual_seed = self._saved


def _CpuSeeding():
    """Seeding inside costs less where the CPU's is the only generator (conftest
    ``cpu_seeding``): OpInfo's ``TrackedInputIter`` seeds before every sample it draws."""
    from conftest import cpu_seeding
    return cpu_seeding()


# ------------------------------------------------------------------- random ops
def _default_tol(dtype) -> dict:
    from torch.testing._comparison import default_tolerances

    rtol, atol = default_tolerances(dtype)
    return {"rtol": rtol, "atol": atol}


def _arg(sample, pos: int, name: str, default):
    if name in sample.kwargs:
        return sample.kwargs[name]
    return sample.args[pos] if len(sample.args) > pos else default


def _finite(sample, out) -> str | None:
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    bad = [i for i, t in enumerate(leaves) if t.is_floating_point() and not t.isfinite().all()]
    return f"output {bad[0]} is not finite" if bad else None


def _in_range(low, high, integral=False, high_inclusive=True):
    """Values in [low, high] (or [low, high)), integer-valued when ``integral``; bounds are
    numbers or callables of the sample."""
    def check(sample, out):
        lo = low(sample) if callable(low) else low
        hi = high(sample) if callable(high) else high
        v = out.double()
        ok = (v >= lo) & ((v <= hi) if high_inclusive else (v < hi))
        if not ok.all():
            return f"values outside [{lo}, {hi}{']' if high_inclusive else ')'}: " \
                   f"{v[~ok].flatten()[:4].tolist()}"
        if integral and not torch.equal(v, v.round()):
            return "values are not integers"
        return None
    return check


def _bernoulli(sample, out):
    p = sample.input
    if not ((out == 0) | (out == 1)).all():
        return "values other than 0 and 1"
    if (out[p == 0] != 0).any() or (out[p == 1] != 1).any():
        return "p = 0 gave 1 or p = 1 gave 0"
    return None


def _multinomial(sample, out):
    p, n = sample.input, sample.args[0]
    if not ((out >= 0) & (out < p.shape[-1])).all():
        return "category index out of range"
    probs = p.reshape(-1, p.shape[-1])
    rows = out.reshape(-1, n)
    replacement = sample.kwargs.get("replacement", False)
    for r, row in zip(probs, rows):
        if not replacement and len(set(row.tolist())) != n:
            return "a category drawn twice without replacement"
        if (r[row] == 0).any() and (r > 0).sum() >= (1 if replacement else n):
            return "a zero-probability category was drawn"
    return None


def _elementwise_choice(kept, dropped):
    """Each output element is ``kept(x, sample)`` or ``dropped(x, sample)`` (dropout)."""
    def check(sample, out):
        x, y = sample.input.double(), out.double()  # references exact, tolerance of out's dtype
        tol = _default_tol(out.dtype)
        a = torch.isclose(y, kept(x, sample), equal_nan=True, **tol)
        b = torch.isclose(y, dropped(x, sample), equal_nan=True, **tol)
        return None if (a | b).all() else "an element is neither kept (scaled) nor dropped"
    return check


def _p(sample):
    return _arg(sample, 0, "p", 0.5)


def _training(sample, default=True):
    return _arg(sample, 1, "training", default)


def _dropout_kept(x, sample):
    p = _p(sample)
    if not _training(sample) or p == 0:
        return x
    return x * 0 if p == 1 else x * (1.0 / (1.0 - p))


def _dropout_dropped(x, sample):
    return x if not _training(sample) or _p(sample) == 0 else torch.zeros_like(x)


_ALPHA = 1.7580993408473766


def _alpha_ab(p):
    a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
    return a, _ALPHA * a * p


def _alpha_kept(x, sample):
    p = _p(sample)
    if not _training(sample, False) or p in (0, 1):
        return x if not _training(sample, False) or p == 0 else x * 0
    a, b = _alpha_ab(p)
    return x * a + b


def _alpha_dropped(x, sample):
    p = _p(sample)
    if not _training(sample, False) or p in (0, 1):
        return _alpha_kept(x, sample)
    a, b = _alpha_ab(p)
    return torch.full_like(x, b - _ALPHA * a)


def _rrelu(sample, out):
    x = sample.input
    lower, upper = sample.kwargs.get("lower", 1 / 8), sample.kwargs.get("upper", 1 / 3)
    tol = _default_tol(x.dtype)
    if not torch.isclose(out[x >= 0], x[x >= 0], **tol).all():
        return "a non-negative input changed"
    if not sample.kwargs.get("training", False):
        ok = torch.isclose(out, torch.where(x >= 0, x, x * (lower + upper) / 2), **tol)
        return None if ok.all() else "eval-mode slope is not (lower + upper) / 2"
    neg = x < 0
    slope = out[neg].double() / x[neg].double()
    ok = (slope >= lower - 1e-2) & (slope <= upper + 1e-2)
    return None if ok.all() else f"slopes outside [{lower}, {upper}]"


def _all(*checks):
    def check(sample, out):
        return next((m for m in (c(sample, out) for c in checks) if m), None)
    return check


def _always(sample) -> bool:
    return True


def _dropout_random(sample, training_default=True) -> bool:
    return bool(_training(sample, training_default)) and 0 < _p(sample) < 1


def _grad_times_input(sample, tensors, out, cots, grads):
    """Gradient check of ``y = s * x`` with a drawn elementwise factor ``s`` (dropout's 0 or
    1 / (1 - p), rrelu's slope): the gradient is ``cotangent * s``, so ``grad * x`` must be
    ``cotangent * y``."""
    x, gx = tensors[0].detach().double(), grads[0]
    if gx is None:
        return "no gradient for the input"
    lhs, rhs = gx.double() * x, cots[0].double() * out.double()
    ok = torch.isclose(lhs, rhs, rtol=1e-4, atol=1e-5)
    return None if ok.all() else f"grad * x != cotangent * out at {int((~ok).sum())} elements"


def _alpha_grad(sample, tensors, out, cots, grads):
    """Gradient check of alpha dropout: ``a * cotangent`` where the element was kept
    (``out == a x + b``), 0 where it was dropped."""
    x, gx = tensors[0].detach().double(), grads[0]
    if gx is None:
        return "no gradient for the input"
    a, b = _alpha_ab(_p(sample))
    kept = torch.isclose(out.double(), x * a + b, **_default_tol(out.dtype))
    expect = torch.where(kept, cots[0].double() * a, torch.zeros_like(x))
    ok = torch.isclose(gx.double(), expect, rtol=1e-4, atol=1e-5)
    return None if ok.all() else f"gradient is not a * cotangent (kept) / 0 at {int((~ok).sum())}"


def _sdpa_grad(sample, tensors, out, cots, grads):
    """Gradient check of attention with dropout: the output is linear in ``value`` for the
    drawn mask, so ``sum(out * cotangent) == sum(value * grad_value)`` (Euler's identity);
    every gradient is finite."""
    if any(g is not None and not g.isfinite().all() for g in grads):
        return "a gradient is not finite"
    v, gv = tensors[2].detach().double(), grads[2]
    if gv is None:
        return None
    lhs, rhs = (out.double() * cots[0].double()).sum(), (v * gv.double()).sum()
    ok = torch.isclose(lhs, rhs, rtol=1e-4, atol=1e-4)
    return None if ok else (f"sum(out * cotangent) = {lhs.item()} != "
                            f"sum(value * grad) = {rhs.item()}")


@dataclass(frozen=True)
class RandomOp:
    """An op that draws random numbers: ``reason`` (what is random), ``values(sample,
    output) -> None | problem``, the checks its values must pass instead of equality, and
    ``when(sample)``: whether the sample draws (a dropout with p = 0 does not, and is
    compared with eager)."""

    reason: str
    values: Callable = _finite
    when: Callable = _always
    # on the torch fallback: how its result is compared with eager's under the same seed
    # (equality by default)
    same: Callable | None = None
    # on XLA, under grad (tests/test_opinfo_grad.py): ``grads(sample, tensors, output,
    # cotangents, gradients) -> None | problem`` checks the gradients of the jitted
    # program's own draw (``gradients[i]`` of ``tensors[i]``, None where not required);
    # None: compared with eager's, for ops whose gradient does not depend on the draw
    grads: Callable | None = None


def _same_low_rank_product(actual, expected, tol) -> None:
    """(U, S, V) of svd_lowrank/pca_lowrank: the product U diag(S) V^H is compared, not the
    factors. The OpInfo factors a @ b.mT, which XLA computes and rounds differently from
    ATen; the randomized SVD turns those last-bit differences into rotated singular
    vectors (seen: 1e-2 in U for 5e-5 in S on a complex 3x2 sample)."""
    def product(usv):
        u, s, v = usv
        return (u * s.to(u.dtype).unsqueeze(-2)) @ v.mH
    _compare(product(actual), product(expected), tol)


RANDOM_OPS: dict[str, RandomOp] = {
    "bernoulli": RandomOp("Bernoulli draws: 0 or 1; p = 0 and p = 1 are certain", _bernoulli),
    "geometric": RandomOp("geometric_(p): trial counts, integers >= 1",
                          _in_range(1, math.inf, integral=True)),
    "log_normal": RandomOp("log_normal_(mean, std): positive", _in_range(0, math.inf)),
    "exponential": RandomOp("exponential_(lambda): non-negative", _in_range(0, math.inf)),
    "cauchy": RandomOp("cauchy_(median, sigma): finite"),
    "normal": RandomOp("torch.normal(mean, std): finite"),
    "normal.in_place": RandomOp("Tensor.normal_(mean, std): finite"),
    "normal.number_mean": RandomOp("torch.normal(mean, std, size): finite"),
    "uniform": RandomOp("Tensor.uniform_(a, b): in [a, b]",
                        _in_range(lambda s: s.args[0], lambda s: s.args[1])),
    "rand_like": RandomOp("the OpInfo calls randn_like: finite"),
    "randn_like": RandomOp("standard normal: finite"),
    "randint": RandomOp("randint([low,] high, size): integers in [low, high)", _in_range(
        lambda s: s.input if len(s.args) > 1 else 0,
        lambda s: s.args[0] if len(s.args) > 1 else s.input, integral=True,
        high_inclusive=False)),
    "randint_like": RandomOp("randint_like(x, [low,] high): integers in [low, high)", _in_range(
        lambda s: s.args[0] if len(s.args) > 1 else 0,
        lambda s: s.args[1] if len(s.args) > 1 else s.args[0], integral=True,
        high_inclusive=False)),
    "multinomial": RandomOp("category indices: in range, distinct without replacement, "
                            "zero-probability categories not drawn", _multinomial),
    "randn": RandomOp("standard normal: finite"),
    "nn.functional.dropout": RandomOp("each element dropped (0) or scaled by 1 / (1 - p)",
                                      _elementwise_choice(_dropout_kept, _dropout_dropped),
                                      _dropout_random, grads=_grad_times_input),
    "nn.functional.dropout2d": RandomOp("channels dropped (0) or scaled by 1 / (1 - p)",
                                        _elementwise_choice(_dropout_kept, _dropout_dropped),
                                        _dropout_random, grads=_grad_times_input),
    "nn.functional.dropout3d": RandomOp("channels dropped (0) or scaled by 1 / (1 - p)",
                                        _elementwise_choice(_dropout_kept, _dropout_dropped),
                                        _dropout_random, grads=_grad_times_input),
    "nn.functional.alpha_dropout": RandomOp(
        "each element a * x + b (kept) or SELU's saturation value (dropped)",
        _elementwise_choice(_alpha_kept, _alpha_dropped),
        lambda s: _dropout_random(s, training_default=False), grads=_alpha_grad),
    "nn.functional.feature_alpha_dropout.with_train": RandomOp(
        "channels a * x + b (kept) or SELU's saturation value (dropped)",
        _elementwise_choice(_alpha_kept, _alpha_dropped),
        lambda s: _dropout_random(s, training_default=False), grads=_alpha_grad),
    "nn.functional.rrelu": RandomOp("negative inputs times a slope drawn from [lower, upper]",
                                    _rrelu, lambda s: s.kwargs.get("training", False),
                                    grads=_grad_times_input),
    "nn.functional.scaled_dot_product_attention": RandomOp(
        "attention dropout (dropout_p > 0): finite", _finite,
        lambda s: _arg(s, 3, "dropout_p", 0.0) > 0, grads=_sdpa_grad),
    # random inside torch functions that run on the torch fallback: compared with eager
    # under the same seed (outputs and, in the gradient harness, gradients: the fallback's
    # backward replays the forward's draw)
    "nn.functional.multi_head_attention_forward": RandomOp("attention dropout"),
    "nn.functional.fractional_max_pool2d": RandomOp("random pooling regions"),
    "nn.functional.fractional_max_pool3d": RandomOp("random pooling regions"),
    "pca_lowrank": RandomOp("random projection (torch.randn inside)",
                            same=_same_low_rank_product),
    "svd_lowrank": RandomOp("random projection (torch.randn inside)",
                            same=_same_low_rank_product),
    "linalg.lstsq": RandomOp("its samples draw random right-hand sides inside the op"),
}


def _check_random(spec: RandomOp, jfn, tensors, sample, actual, expected, op) -> None:
    """Raise AssertionError unless ``actual`` has eager's metadata, passes the op's value
    check, and follows the seed."""
    _metadata(actual, expected)
    problem = spec.values(sample, actual)
    if problem:
        raise AssertionError(f"random op values: {problem}")
    def run(seed):
        with torch.random.fork_rng(), _NoReseed():
            torch.random.manual_seed(seed)
            return jfn(*_clone(tensors))
    if _differ(actual, run(0)):
        raise AssertionError("random op: same torch.manual_seed gave other values")
    # small samples (3 draws of a bernoulli) can repeat by chance: a few seeds must not all
    if not any(_differ(actual, run(seed)) for seed in range(1, 6)) and \
            _differ(expected, _eager(op, sample, 2)):
        raise AssertionError("random op: 5 other seeds gave the same values")


# ------------------------------------------------------------------ allowlists
# Ops that jit refuses (status ``error``) with the reason, asserted exactly by the tests
# below: an op that starts raising, or a listed op that stops raising, fails the test.
# (Data-dependent sizes and Python values of tensors — masked_select, argwhere,
# tensor_split by tensor, bincount, one_hot(num_classes=-1), item, allclose, equal — run
# since value guards: frontend/value_guards.py.)
_SPARSE = "a sparse CSR input: jit takes strided tensors only (UnsupportedInputError)"
F32_ERRORS: dict[str, str] = {
    "chalf": "complex32 is not a supported dtype (UnsupportedDtypeError)",
    "hash_tensor": "its result is uint64, not a supported dtype (UnsupportedDtypeError)",
    "sparse.mm.reduce": _SPARSE,
    "sparse.sampled_addmm": _SPARSE,
}
ALL_DTYPES = None
# op -> (reason, the OTHER_DTYPES it errors in; ALL_DTYPES: every dtype it runs in)
OTHER_ERRORS: dict[str, tuple[str, tuple | None]] = {
    **{op: (why, ALL_DTYPES) for op, why in F32_ERRORS.items()},
    "complex": ("float16 parts make complex32, not a supported dtype", (torch.float16,)),
    "view_as_complex": ("a float16 view is complex32, not a supported dtype",
                        (torch.float16,)),
}


def expected_errors(dtype) -> dict[str, str]:
    """op -> reason of the ops allowlisted as errors at ``dtype``."""
    if dtype is torch.float32:
        return dict(F32_ERRORS)
    return {op: why for op, (why, dts) in OTHER_ERRORS.items()
            if dts is ALL_DTYPES or dtype in dts}


def allowlist_problems(results, allowed: dict[str, str], full: bool, what: str = "") -> list[str]:
    """Differences between the ops that raised (status ``error``) and ``allowed`` (op ->
    reason): a new error, a listed op that ran without raising (remove it from the list),
    and, in a ``full`` run (the whole database), a listed op that did not run at all."""
    ran = {r.name: r for r in results}
    out = [f"{what}{r.name}: new error (not allowlisted): {r.reason}" for r in results
           if r.status == "error" and r.name not in allowed]
    for name in allowed:
        r = ran.get(name)
        if r is not None and r.status in ("xla", "fallback", "mismatch"):
            out.append(f"{what}{name}: allowlisted as an error but now {r.status}: remove it")
        elif full and (r is None or r.status not in ("error", "eager-fails",
                                                     "unsupported-dtype")):
            out.append(f"{what}{name}: allowlisted but not in op_db (renamed or removed?)")
    return out


# Ops whose result values are unspecified (uninitialized memory): metadata is compared.
_UNDEFINED_VALUES = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                     "new_empty_strided", "resize_", "resize_as_"}


# Ops whose index outputs are unspecified among equal values (torch.sort without
# stable=True, topk, kthvalue: "the order of equivalent elements is not guaranteed"):
# indices that differ from eager must select the same values from the input.
_TIE_OPS = {"sort", "argsort", "topk", "kthvalue"}


def _pos_or_kw(sample, pos, name, default):
    if name in sample.kwargs:
        return sample.kwargs[name]
    a = sample.args
    return a[pos] if len(a) > pos and not isinstance(a[pos], bool) else default


def _ties_equivalent(op, sample, actual, expected, tol) -> bool:
    inp = sample.input
    if not isinstance(inp, torch.Tensor) or inp.dim() == 0 or sample.kwargs.get("stable"):
        return False
    try:
        if op.name in ("sort", "argsort"):
            dim = _pos_or_kw(sample, 0, "dim", -1)
        else:
            dim = _pos_or_kw(sample, 1, "dim", -1)
        if op.name == "argsort":
            _compare(inp.gather(dim, actual), inp.gather(dim, expected), {"atol": 0, "rtol": 0})
            return True
        (va, ia), (ve, _) = actual, expected
        _compare(va, ve, tol)
        keepdim = sample.kwargs.get("keepdim", len(sample.args) > 2 and sample.args[2])
        if op.name == "kthvalue" and not keepdim:
            ia, ve = ia.unsqueeze(dim), ve.unsqueeze(dim)
        _compare(inp.gather(dim, ia), ve, {"atol": 0, "rtol": 0})
        return True
    except (AssertionError, RuntimeError, IndexError, TypeError, ValueError):
        return False


_PRECISE = {torch.float32: torch.float64, torch.float16: torch.float64,
            torch.bfloat16: torch.float64, torch.complex64: torch.complex128}
CLOSER = "closer to the float64 result than eager"


def _distance(a, b) -> float:
    """Sum of absolute differences of two pytrees of results (NaN == NaN)."""
    total = 0.0
    for x, y in zip(pytree.tree_leaves(a), pytree.tree_leaves(b)):
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if x.dtype is torch.bool:
            total += (x ^ y.to(torch.bool)).sum().item()
            continue
        same = (x == y) | (torch.isnan(x) & torch.isnan(y)) if x.is_floating_point() or \
            x.is_complex() else x == y
        total += torch.where(same, 0, (x.to(y.dtype) - y).abs()).sum().item()
    return total


def _closer_than_eager(op, sample, actual, expected, dtype) -> bool:
    """PyTorch's acceptance rule for another implementation of an op whose result is not
    close to eager's (``TestCommon._ref_test_helper``, test/test_ops.py): it passes if it is
    no farther from the op computed eagerly in float64 than eager's own result is (sum of
    absolute differences). Only for floating dtypes, and only with matching shapes and
    dtypes."""
    precise = _PRECISE.get(dtype)
    if precise is None:
        return False
    try:
        _metadata(actual, expected)
    except AssertionError:
        return False

    def up(x):
        if isinstance(x, torch.dtype):
            return precise if x is dtype else x
        return x.to(precise) if isinstance(x, torch.Tensor) and x.dtype is dtype else x

    try:
        reference = _eager(op, sample.transform(up))
        return _distance(actual, reference) <= _distance(expected, reference)
    except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
        return False


def _eager(op, sample, seed=0):
    with torch.random.fork_rng(), _NoReseed():
        torch.random.manual_seed(seed)
        return op.op(*_clone((sample.input, *sample.args)), **_clone(sample.kwargs))


def _differ(a, b, tol: dict | None = None) -> bool:
    """Whether a and b differ (beyond ``tol``; exactly by default)."""
    try:
        _compare(a, b, {"atol": 0, "rtol": 0} if tol is None else tol)
        return False
    except AssertionError:
        return True


def first_samples(select, n: int = 8, autograd: bool = False):
    """Per op of op_db (random ops and ops without float32 on the CPU left out; with
    ``autograd`` those without autograd support too; in CI, the quarter ``conftest.swept``
    names): its first eager-valid float32 CPU
    sample among the first ``n`` for which ``select(tensors)`` (the sample's tensor leaves
    in order) gives a non-None choice. Yields (op, full name, the sample's program over
    its tensors, the tensors, the choice)."""
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        name = _full_name(op)
        if name in RANDOM_OPS or torch.float32 not in op.supported_dtypes("cpu") or \
                (autograd and not op.supports_autograd) or not swept(name):
            continue
        try:
            samples = list(islice(op.sample_inputs("cpu", torch.float32,
                                                   requires_grad=False), n))
        except Exception:  # noqa: BLE001 - an op without CPU samples here
            continue
        for sample in samples:
            leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
            pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
            tensors = [leaves[i] for i in pos]
            choice = select(tensors)
            if choice is None or _unsupported_leaf(leaves):
                continue
            try:
                _eager(op, sample)
            except Exception:  # noqa: BLE001 - eager rejects the sample itself
                continue
            yield op, name, sample_program(op, leaves, spec, pos), tensors, choice
            break


def sample_program(op, leaves, spec, pos):
    """The OpInfo call as a function of the sample's tensor leaves (at ``pos``); the other
    leaves of the flattened (args, kwargs) stay as in the sample."""
    def program(*tensors):
        vals = list(leaves)
        for i, t in zip(pos, tensors):
            vals[i] = t
        args, kwargs = pytree.tree_unflatten(vals, spec)
        return op.op(*args, **kwargs)
    return program


def run_sample(op, sample, tol, dtype=None) -> tuple[str, str, list[str]]:
    """(status, reason, fallback op names) for one sample whose eager run succeeded; the
    reason is ``CLOSER`` for a sample accepted by ``_closer_than_eager`` (at ``dtype``)."""
    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    bad = _unsupported_leaf(leaves)
    if bad:
        return "error", f"unsupported input: {bad}", []
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    program = sample_program(op, leaves, spec, pos)

    jfn = thunder_mlir.jit(program, sharp_edges="allow")
    tensors = [leaves[i] for i in pos]
    expected = _eager(op, sample, 0)
    random_op = RANDOM_OPS.get(_full_name(op))
    if random_op is not None and not random_op.when(sample):
        random_op = None  # this sample draws nothing: compared with eager
    try:
        with torch.random.fork_rng(), _NoReseed():
            torch.random.manual_seed(0)
            actual = jfn(*_clone(tensors))
    except Exception as e:  # noqa: BLE001 - the status records it
        msg = str(e).strip().splitlines()
        return "error", f"{type(e).__name__}: {msg[-1] if msg else ''}"[:200], []
    fallbacks = thunder_mlir.fallback_ops(jfn)
    status = "fallback" if fallbacks else "xla"
    try:
        if op.name in _UNDEFINED_VALUES:
            _metadata(actual, expected)
        elif random_op is not None and not fallbacks:
            _check_random(random_op, jfn, tensors, sample, actual, expected, op)
        elif random_op is not None and random_op.same is not None:
            random_op.same(actual, expected, tol)
        else:
            try:
                _compare(actual, expected, tol)
            except AssertionError as e:
                if op.name in _TIE_OPS and _ties_equivalent(op, sample, actual, expected, tol):
                    pass
                elif _differ(expected, _eager(op, sample, 1), tol):
                    raise AssertionError("eager output depends on the seed: declare the op in "
                                         f"RANDOM_OPS with a value check ({e})") from None
                elif _closer_than_eager(op, sample, actual, expected, dtype):
                    return status, CLOSER, fallbacks
                else:
                    raise
    except AssertionError as e:
        msg = " ".join(str(e).split())
        return "mismatch", msg[:300], fallbacks
    except Exception as e:  # noqa: BLE001
        return "error", f"comparing: {type(e).__name__}: {e}"[:200], fallbacks
    return status, "", fallbacks


def _ops():
    from torch.testing._internal.common_methods_invocations import op_db

    only = os.environ.get("THUNDER_OPINFO_OPS")
    if only:
        names = set(only.split(","))
        return [o for o in op_db if o.name in names or _full_name(o) in names]
    return list(op_db)


def _full_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


@dataclass
class _Job:
    """One eager-valid sample of an op to check (its index among the op's samples); its
    ``outcome`` (status, reason, fallback op names) once checked, and ``seconds`` spent."""

    op: object
    sample: object
    tol: dict
    dtype: torch.dtype
    outcome: tuple | None = None
    seconds: float = 0.0


def _select(op, dtype, max_samples) -> tuple[OpResult, list[_Job]]:
    """The op's result so far (``unsupported-dtype``, or ``eager-fails`` with the reason
    where ``sample_inputs`` raised) and its jobs: the first ``max_samples`` samples (of
    ``MAX_TRIES`` drawn) whose eager run succeeds, drawn under the op's seed."""
    t0 = time.perf_counter()
    res = OpResult(op.full_name if hasattr(op, "full_name") else op.name, "eager-fails")
    if dtype not in op.supported_dtypes("cpu"):
        res.status, res.reason = "unsupported-dtype", ""
        return res, []
    tol = _tolerance(op, dtype)
    torch.manual_seed(zlib.crc32(f"{_full_name(op)} {dtype} {SEED}".encode()))
    try:
        samples = op.sample_inputs(DEVICE, dtype, requires_grad=False)
        if max_samples is not None:
            samples = islice(samples, MAX_TRIES)
        samples = list(samples)
    except Exception as e:  # noqa: BLE001
        res.reason = f"sample_inputs raised {type(e).__name__}: {e}"[:200]
        return res, []
    jobs = []
    for sample in samples:
        if max_samples is not None and len(jobs) >= max_samples:
            break
        try:
            _eager(op, sample)
        except Exception:  # noqa: BLE001 - an eager failure makes no claim about jit
            continue
        jobs.append(_Job(op, sample, tol, dtype))
    res.seconds = time.perf_counter() - t0
    return res, jobs


def _run_alone(job: _Job) -> None:
    """``job.outcome`` from ``run_sample``: the sample in a jitted function of its own."""
    t0 = time.perf_counter()
    try:
        job.outcome = run_sample(job.op, job.sample, job.tol, job.dtype)
    except Exception as e:  # noqa: BLE001
        job.outcome = "error", f"harness: {type(e).__name__}: {e}"[:200], []
    job.seconds += time.perf_counter() - t0


def _finish(res: OpResult, jobs: list[_Job]) -> OpResult:
    """The op's status from its samples' outcomes, in sample order: the worst status
    (``_RANK``), the reason of the first sample that raised the status to it."""
    worst = None
    for job in jobs:
        status, reason, fb = job.outcome
        res.samples += 1
        res.seconds += job.seconds
        res.fallbacks.update(fb)
        if reason == CLOSER:
            res.closer += 1
            reason = ""
        if worst is None or _RANK[status] > _RANK[worst]:
            worst = status
            if reason:
                res.reason = reason
    if worst is not None:
        res.status = worst
        if worst == "fallback" and not res.reason:
            res.reason = "falls back: " + ", ".join(sorted(res.fallbacks))
    return res


def run_op(op, dtype, max_samples) -> OpResult:
    """Status of one OpInfo at ``dtype`` over its first ``max_samples`` eager-valid
    samples, each sample checked alone (``run_sample``)."""
    res, jobs = _select(op, dtype, max_samples)
    for job in jobs:
        _run_alone(job)
    return _finish(res, jobs)


# ------------------------------------------------------------------ batches
# Samples checked together in one jitted function (``run_batch``); 1: each sample alone.
BATCH = int(os.environ.get("THUNDER_OPINFO_BATCH", "24"))


def batchable(job: _Job) -> bool:
    """Whether the sample may share a jitted function with others: not a random op (its
    check re-runs the jitted function under other seeds), not an op with unspecified
    values or index ties (compared otherwise than by ``_compare``), and no input jit cannot
    take."""
    op = job.op
    if _full_name(op) in RANDOM_OPS or op.name in _UNDEFINED_VALUES or op.name in _TIE_OPS:
        return False
    leaves = pytree.tree_leaves(((job.sample.input, *job.sample.args), job.sample.kwargs))
    return _unsupported_leaf(leaves) is None


def run_batch(jobs: list[_Job]) -> None:
    """Check ``jobs`` (batchable samples, of any ops) through ONE jitted function that
    takes every sample's tensors and returns every sample's output, as tests/fuzz_batch.py
    checks fuzzer programs; sets each job's outcome.

    A sample gets its outcome from the batch only where the batch ran, the fallback ops
    of the batch's trace split exactly into those each sample's program recorded (read
    from the trace between programs), and its output equals eager's within ``tol``
    (``_compare``): status ``xla`` or ``fallback`` (its own fallback ops), reason "".
    Where the batch raises (or its fallbacks cannot be split), it is halved and each half
    checked again, down to single samples checked alone; every sample whose output differs
    is checked alone (``run_sample``: the tie, seed-dependence and float64-reference rules,
    the mismatch's reason), so the outcome of every sample is the one it has alone."""
    from thunder_mlir.frontend.tracing import current_trace

    if len(jobs) == 1:
        _run_alone(jobs[0])
        return
    t0 = time.perf_counter()
    parts = []  # (op, sample leaves, their spec, tensor positions, eager's output)
    try:
        for job in jobs:
            s = job.sample
            leaves, spec = pytree.tree_flatten(((s.input, *s.args), s.kwargs))
            pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
            parts.append((job.op, leaves, spec, pos, _eager(job.op, s, 0)))
    except Exception:  # noqa: BLE001 - run_sample reports it
        for job in jobs:
            _run_alone(job)
        return
    recorded: list[list[str]] = []  # per program: the fallback ops its call recorded

    # Each sample's call is ``sample_program``'s, written out here rather than called: a
    # closure called from the jitted function makes the sharp-edge monitor search the heap
    # (gc.get_referrers) at each of its free-variable reads (~0.1 s each with op_db loaded).
    def batch(*tensors):
        trace = current_trace()
        recorded.clear()  # (a trace made again starts over)
        outs, k = [], 0
        for op, leaves, spec, pos, _ in parts:
            vals = list(leaves)
            for i in pos:
                vals[i] = tensors[k]
                k += 1
            args, kwargs = pytree.tree_unflatten(vals, spec)
            start = len(trace.fallbacks)
            outs.append(op.op(*args, **kwargs))
            recorded.append(list(trace.fallbacks[start:]))
        return tuple(outs)

    jfn = thunder_mlir.jit(batch, sharp_edges="allow")
    try:
        with torch.random.fork_rng(), _NoReseed():
            torch.random.manual_seed(0)
            actual = jfn(*_clone([p[1][i] for p in parts for i in p[3]]))
        fallbacks = thunder_mlir.fallback_ops(jfn)
        split = len(recorded) == len(parts) and \
            [name for r in recorded for name in r] == list(fallbacks)
    except Exception:  # noqa: BLE001 - each half again, down to samples alone
        split = False
    share = (time.perf_counter() - t0) / len(jobs)
    if not split:
        for job in jobs:
            job.seconds += share
        half = len(jobs) // 2
        run_batch(jobs[:half])
        run_batch(jobs[half:])
        return
    for job, part, out, fb in zip(jobs, parts, actual, recorded):
        expected = part[4]
        job.seconds += share
        try:
            _compare(out, expected, job.tol)
        except Exception:  # noqa: BLE001 - the sample alone gives its outcome
            _run_alone(job)
            continue
        job.outcome = ("fallback" if fb else "xla"), "", fb


def run_dtype(dtype, max_samples) -> list[OpResult]:
    """Every selected OpInfo at ``dtype``: their samples, in op order, checked ``BATCH``
    at a time by ``run_batch`` (those not ``batchable`` alone); one result per op."""
    ops = _ops()
    with warnings.catch_warnings(), _CpuSeeding():
        warnings.simplefilter("ignore")
        selected = [_select(op, dtype, max_samples) for op in ops]
        jobs = [j for _, js in selected for j in js]
        together = [j for j in jobs if BATCH > 1 and batchable(j)]
        for i in range(0, len(together), BATCH):
            run_batch(together[i:i + BATCH])
        for job in jobs:
            if job.outcome is None:
                _run_alone(job)
    results = []
    for (res, js), op in zip(selected, ops):
        r = _finish(res, js)
        r.name = _full_name(op)
        results.append(r)
    return results


def summarize(results: list[OpResult], title: str, seconds: float) -> tuple[str, Counter]:
    counts = Counter(r.status for r in results)
    ran = sum(counts[s] for s in ("xla", "fallback", "mismatch", "error"))
    lines = [f"== OpInfo conformance: {title} "
             f"({'full run' if FULL else 'default subset: see THUNDER_OPINFO_FULL'})",
             f"ops: {len(results)}  with eager-valid samples: {ran}  "
             f"(eager-fails: {counts['eager-fails']}, dtype unsupported: "
             f"{counts['unsupported-dtype']})"]
    if ran:
        lines.append(
            f"xla: {counts['xla']} ({100 * counts['xla'] / ran:.1f}%)  "
            f"fallback: {counts['fallback']}  eager result: "
            f"{counts['xla'] + counts['fallback']} "
            f"({100 * (counts['xla'] + counts['fallback']) / ran:.1f}%)  "
            f"mismatch: {counts['mismatch']}  error: {counts['error']}  time: {seconds:.1f}s")
        closer = [r for r in results if r.closer]
        lines.append(f"samples not close to eager but closer to the float64 result (PyTorch's "
                     f"rule for another implementation): {sum(r.closer for r in closer)} "
                     f"in {len(closer)} ops")
    lines.append(f"{'op':40} {'status':11} {'n':>2} {'sec':>6}  reason")
    order = {"mismatch": 0, "error": 1, "fallback": 2, "xla": 3, "eager-fails": 4,
             "unsupported-dtype": 5}
    for r in sorted(results, key=lambda r: (order[r.status], r.name)):
        if r.status == "unsupported-dtype":
            continue
        reason = r.reason or (f"{r.closer} sample(s) {CLOSER}" if r.closer else "")
        lines.append(f"{r.name:40} {r.status:11} {r.samples:>2} {r.seconds:6.2f}  {reason}")
    return "\n".join(lines), counts


def _run_and_report(dtypes, max_samples, tag) -> dict:
    all_counts = {}
    text = []
    for dtype in dtypes:
        t0 = time.perf_counter()
        results = run_dtype(dtype, max_samples)
        s, counts = summarize(results, str(dtype), time.perf_counter() - t0)
        print(s, flush=True)
        text.append(s)
        all_counts[dtype] = (counts, results)
    with open(REPORT.format(tag), "w") as f:
        f.write("\n\n".join(text) + "\n")
    return all_counts


def test_closer_rule_accepts_only_results_nearer_the_float64_one():
    """The harness's acceptance rule for results outside tolerance (``_closer_than_eager``)
    can fail: farther than eager, another dtype, or an integer dtype are mismatches."""
    from types import SimpleNamespace

    from torch.testing._internal.opinfo.core import SampleInput

    x = torch.tensor([1e8, 1.0, -1e8, 3.0], dtype=torch.float32)
    op = SimpleNamespace(op=lambda t: t.sum(), name="sum")
    sample = SampleInput(x)
    expected = x.sum()  # float32 loses the 1.0 and 3.0 (exact: 4.0)
    exact = torch.tensor(4.0)
    assert _closer_than_eager(op, sample, exact, expected, torch.float32)
    assert not _closer_than_eager(op, sample, expected + 8, expected, torch.float32)
    assert not _closer_than_eager(op, sample, exact.double(), expected, torch.float32)
    assert not _closer_than_eager(op, SampleInput(x.long()), exact.long(), expected.long(),
                                  torch.int64)


@pytest.mark.filterwarnings("ignore")
def test_opinfo_float32():
    """Every float32 OpInfo: zero mismatches (a mismatch is a bug), and errors exactly the
    allowlisted ones (``F32_ERRORS``, one reason each); the summary is printed."""
    counts, results = _run_and_report([torch.float32], F32_SAMPLES, "float32")[torch.float32]
    bad = [f"{r.name}: {r.reason}" for r in results if r.status == "mismatch"]
    assert not bad, "mismatches against eager:\n" + "\n".join(bad)
    full = not os.environ.get("THUNDER_OPINFO_OPS")
    problems = allowlist_problems(results, F32_ERRORS, full)
    assert not problems, "\n".join(problems)
    # a regression floor, a little under the measured share (74.1% XLA at the time of
    # writing; issue 3's target is 70%)
    ran = sum(counts[s] for s in ("xla", "fallback", "mismatch", "error"))
    if full:
        assert counts["xla"] / ran >= 0.72, f"XLA share fell to {counts['xla'] / ran:.1%}"


def test_allowlists_are_exact():
    """``allowlist_problems`` reports a new error, a listed op that runs now, and (in a
    full run) a listed op that no longer exists; each allowlist entry has a reason."""
    runs = [OpResult("a", "error", "boom"), OpResult("b", "xla")]
    assert allowlist_problems(runs, {"a": "why"}, full=False) == []
    assert len(allowlist_problems(runs, {}, full=False)) == 1
    assert len(allowlist_problems(runs, {"a": "why", "b": "why"}, full=False)) == 1
    assert len(allowlist_problems(runs, {"a": "why", "gone": "why"}, full=True)) == 1
    assert all(F32_ERRORS.values()) and all(why for why, _ in OTHER_ERRORS.values())
    assert "complex" in expected_errors(torch.float16)
    assert "complex" not in expected_errors(torch.float64)


def test_batched_sweep_reports_only_the_wrong_op(monkeypatch):
    """A batch can fail: with sin lowered to a cosine, the batched sweep of ten elementwise
    ops reports sin as a mismatch (its reason from sin checked alone) and every other op
    as it is, and only sin is checked alone."""
    from torch.testing._internal.common_methods_invocations import op_db

    from thunder_mlir.ir.prim_defs import PRIMS
    from thunder_mlir.transforms import lower_to_stablehlo

    names = {"sin", "cos", "abs", "neg", "exp", "add", "mul", "tanh", "sinh", "sigmoid"}
    ops = [o for o in op_db if o.name in names and not o.variant_test_name]
    monkeypatch.setattr(sys.modules[__name__], "_ops", lambda: ops)
    monkeypatch.setattr(sys.modules[__name__], "BATCH", 24)
    alone = []
    run_one = run_sample
    monkeypatch.setattr(sys.modules[__name__], "run_sample",
                        lambda op, *a: alone.append(op.name) or run_one(op, *a))
    monkeypatch.setattr(PRIMS["sin"], "lower", "stablehlo.cosine")
    monkeypatch.setattr(lower_to_stablehlo, "_STATE", {})  # patterns frozen again, then back
    results = {r.name: r for r in run_dtype(torch.float32, 1)}
    assert results.keys() == names
    assert results["sin"].status == "mismatch" and "not close" in results["sin"].reason
    assert all(r.status == "xla" for n, r in results.items() if n != "sin"), results
    assert alone == ["sin"]


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "float32"
    if which == "float32":
        _run_and_report([torch.float32], F32_SAMPLES, "float32")
    else:
        dts = OTHER_DTYPES if which == "other" else [getattr(torch, which)]
        _run_and_report(dts, OTHER_SAMPLES, which)
