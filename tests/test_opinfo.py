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
numerics) where it declares one — never looser.

Random ops (two eager runs with different seeds differ) on the fallback are compared with
eager under the same ``torch.manual_seed``; on XLA their samples are checked for metadata
and for following the seed (same seed -> same values, another seed -> other values).

Default subset (CI): the first ``F32_SAMPLES`` eager-valid float32 samples of every op and
``OTHER_SAMPLES`` per op for each of ``OTHER_DTYPES``. ``THUNDER_OPINFO_FULL=1`` runs every
sample. ``THUNDER_OPINFO_OPS=add,sum`` restricts the ops (for development). The summary
table goes to stdout and to ``/tmp/thunder_opinfo_report_<dtype>.txt``.
Run standalone: ``python tests/test_opinfo.py [float32|other]``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice

import pytest
import torch
import torch.utils._pytree as pytree

import thunder_mlir

FULL = os.environ.get("THUNDER_OPINFO_FULL") == "1"
F32_SAMPLES = None if FULL else 3
OTHER_SAMPLES = None if FULL else 1
OTHER_DTYPES = (torch.float64, torch.int64, torch.bool, torch.bfloat16)
MAX_TRIES = 12  # samples drawn per op to find eager-valid ones (default subset)
REPORT = "/tmp/thunder_opinfo_report_{}.txt"
_RANK = {"xla": 0, "fallback": 1, "error": 2, "mismatch": 3}

# Tolerance overrides of the OpInfo that apply to "another implementation vs eager" tests.
_TOL_TESTS = {"test_compare_cpu", "test_python_ref", "test_python_ref_torch_fallback",
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


def _tolerance(op, dtype) -> dict:
    atol = rtol = None
    for d in op.decorators:
        decs = getattr(d, "decorators", None)
        if not decs or getattr(d, "device_type", None) not in (None, "cpu"):
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
        if op.name == "kthvalue" and not _pos_or_kw(sample, 2, "keepdim", False):
            ia, ve = ia.unsqueeze(dim), ve.unsqueeze(dim)
        _compare(inp.gather(dim, ia), ve, {"atol": 0, "rtol": 0})
        return True
    except (AssertionError, RuntimeError, IndexError, TypeError, ValueError):
        return False


def _eager(op, sample, seed=0):
    with torch.random.fork_rng(), _NoReseed():
        torch.random.manual_seed(seed)
        return op.op(*_clone((sample.input, *sample.args)), **_clone(sample.kwargs))


def _differ(a, b) -> bool:
    try:
        _compare(a, b, {"atol": 0, "rtol": 0})
        return False
    except AssertionError:
        return True


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


def run_sample(op, sample, tol) -> tuple[str, str, list[str]]:
    """(status, reason, fallback op names) for one sample whose eager run succeeded."""
    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    bad = _unsupported_leaf(leaves)
    if bad:
        return "error", f"unsupported input: {bad}", []
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    program = sample_program(op, leaves, spec, pos)

    jfn = thunder_mlir.jit(program, sharp_edges="allow")
    tensors = [leaves[i] for i in pos]
    expected = _eager(op, sample, 0)
    random_op = _differ(expected, _eager(op, sample, 1)) or op.name in _UNDEFINED_VALUES
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
        elif random_op and not fallbacks:
            _metadata(actual, expected)
            with torch.random.fork_rng(), _NoReseed():
                torch.random.manual_seed(0)
                again = jfn(*_clone(tensors))
                torch.random.manual_seed(1)
                other = jfn(*_clone(tensors))
            if _differ(actual, again):
                raise AssertionError("random op: same torch.manual_seed gave other values")
            if not _differ(actual, other) and not _differ(expected, _eager(op, sample, 2)):
                raise AssertionError("random op: another seed gave the same values")
        else:
            try:
                _compare(actual, expected, tol)
            except AssertionError:
                if not (op.name in _TIE_OPS and _ties_equivalent(op, sample, actual, expected,
                                                                 tol)):
                    raise
    except AssertionError as e:
        msg = " ".join(str(e).split())
        return "mismatch", msg[:300], fallbacks
    except Exception as e:  # noqa: BLE001
        return "error", f"comparing: {type(e).__name__}: {e}"[:200], fallbacks
    return status, "", fallbacks


def run_op(op, dtype, max_samples) -> OpResult:
    t0 = time.perf_counter()
    res = OpResult(op.full_name if hasattr(op, "full_name") else op.name, "eager-fails")
    if dtype not in op.supported_dtypes("cpu"):
        res.status, res.reason = "unsupported-dtype", ""
        return res
    tol = _tolerance(op, dtype)
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=False)
        if max_samples is not None:
            samples = islice(samples, MAX_TRIES)
        samples = list(samples)
    except Exception as e:  # noqa: BLE001
        res.reason = f"sample_inputs raised {type(e).__name__}: {e}"[:200]
        return res
    worst = None
    for sample in samples:
        if max_samples is not None and res.samples >= max_samples:
            break
        try:
            _eager(op, sample)
        except Exception:  # noqa: BLE001 - an eager failure makes no claim about jit
            continue
        res.samples += 1
        try:
            status, reason, fb = run_sample(op, sample, tol)
        except Exception as e:  # noqa: BLE001
            status, reason, fb = "error", f"harness: {type(e).__name__}: {e}"[:200], []
        res.fallbacks.update(fb)
        if worst is None or _RANK[status] > _RANK[worst]:
            worst = status
            if reason:
                res.reason = reason
    if worst is not None:
        res.status = worst
        if worst == "fallback" and not res.reason:
            res.reason = "falls back: " + ", ".join(sorted(res.fallbacks))
    res.seconds = time.perf_counter() - t0
    return res


def _ops():
    from torch.testing._internal.common_methods_invocations import op_db

    only = os.environ.get("THUNDER_OPINFO_OPS")
    if only:
        names = set(only.split(","))
        return [o for o in op_db if o.name in names or _full_name(o) in names]
    return list(op_db)


def _full_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def run_dtype(dtype, max_samples) -> list[OpResult]:
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in _ops():
            r = run_op(op, dtype, max_samples)
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
    lines.append(f"{'op':40} {'status':11} {'n':>2} {'sec':>6}  reason")
    order = {"mismatch": 0, "error": 1, "fallback": 2, "xla": 3, "eager-fails": 4,
             "unsupported-dtype": 5}
    for r in sorted(results, key=lambda r: (order[r.status], r.name)):
        if r.status == "unsupported-dtype":
            continue
        lines.append(f"{r.name:40} {r.status:11} {r.samples:>2} {r.seconds:6.2f}  {r.reason}")
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


@pytest.mark.filterwarnings("ignore")
def test_opinfo_float32():
    """Every float32 OpInfo: zero mismatches (a mismatch is a bug); the summary is printed."""
    counts, results = _run_and_report([torch.float32], F32_SAMPLES, "float32")[torch.float32]
    bad = [f"{r.name}: {r.reason}" for r in results if r.status == "mismatch"]
    assert not bad, "mismatches against eager:\n" + "\n".join(bad)
    # regression floors, a little under the measured shares (70.7% XLA, 97.0% eager
    # result at the time of writing); issue 3's targets are 70% and 97%
    ran = sum(counts[s] for s in ("xla", "fallback", "mismatch", "error"))
    if ran > 600:  # the whole database, not a THUNDER_OPINFO_OPS selection
        assert counts["xla"] / ran >= 0.68, f"XLA share fell to {counts['xla'] / ran:.1%}"
        assert (counts["xla"] + counts["fallback"]) / ran >= 0.96, "eager-result share fell"


@pytest.mark.filterwarnings("ignore")
def test_opinfo_other_dtypes():
    """A lighter pass over float64, int64, bool, bfloat16: zero mismatches."""
    bad = []
    for dtype, (counts, results) in _run_and_report(OTHER_DTYPES, OTHER_SAMPLES,
                                                    "other").items():
        bad += [f"{dtype} {r.name}: {r.reason}" for r in results if r.status == "mismatch"]
    assert not bad, "mismatches against eager:\n" + "\n".join(bad)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "float32"
    if which == "float32":
        _run_and_report([torch.float32], F32_SAMPLES, "float32")
    else:
        dts = OTHER_DTYPES if which == "other" else [getattr(torch, which)]
        _run_and_report(dts, OTHER_SAMPLES, which)
