"""Gradient conformance: PyTorch's OpInfo database through ``thunder_mlir.jit`` + autograd.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that
``supports_autograd`` and supports float32 on CPU, the first ``GRAD_SAMPLES`` samples
(``sample_inputs(..., requires_grad=True)``) whose eager run succeeds are differentiated
both ways: eager ``torch.autograd.grad`` (the oracle) and the jitted program under grad mode
(the grad pass, the forward and backward plans in one ``torch.autograd.Function``). The
loss is the sum over floating-point outputs that require grad of ``out * cotangent``, with
one fixed random cotangent per output; gradients of every input tensor that requires grad
are compared (a ``None`` gradient counts as zeros). Each op gets one status:

* ``match``    — every sample's outputs and gradients matched eager;
* ``mismatch`` — a gradient (or a forward output computed under grad mode, where the
  forward-only program matches) differs from eager: a bug, and a test failure;
* ``error``    — the forward passes, but jit under grad mode raised (a missing VJP rule is a
  ``GradError``). A test failure unless the op is in ``GRAD_ERRORS`` with its reason; an
  op listed there that stops raising fails the test too (the list is asserted exactly);
* ``forward-fails`` — the jitted forward alone fails or differs from eager for the samples
  (``tests/test_opinfo.py``'s business: such an op must be in its ``F32_ERRORS``);
* ``no-samples`` — no sample runs eagerly; not counted.

A result outside the tolerance still matches if it is no farther from the float64
computation (the sample's float32 tensors and dtypes made float64, the same cotangents)
than eager's float32 result is: PyTorch's rule for another implementation of an op
(``TestCommon._ref_test_helper``), also used by ``tests/test_opinfo.py``. Such samples are
counted per op in the report.

Random ops (``test_opinfo.RANDOM_OPS``): a sample that draws is run with the same seed on
both sides. Where the jitted program runs the op on the torch fallback, it draws what eager
draws, and outputs and gradients are compared with eager's (the fallback's backward
replays the forward's draw). On XLA the values differ from eager's by design: the outputs
get the op's value check and the gradients its gradient check (``RandomOp.grads``, e.g.
dropout's ``grad * x == cotangent * out``), or, where the op declares none, eager's
gradient (for ops whose gradient does not depend on the draw, such as bernoulli's 0).

Tolerances: ``atol=1e-5, rtol=1e-4`` for float32 gradients (backward formulas reassociate
sums, e.g. a reduction's gradient through a broadcast), or the OpInfo's own override for
the "alternative implementation vs eager" tests where larger.

Default (CI): ``GRAD_SAMPLES=1`` sample per op (2 before 2026-12-02; CI time). ``THUNDER_OPINFO_GRAD_SAMPLES=N`` (or
``all``) takes more; ``THUNDER_OPINFO_OPS=add,sum`` restricts the ops. The summary goes to
stdout and ``/tmp/thunder_opinfo_grad_report.txt``. Standalone:
``python tests/test_opinfo_grad.py``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from itertools import islice

import pytest
import torch
import torch.utils._pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_opinfo as _oi  # noqa: E402  (helpers only; owned by the forward conformance)
from conftest import SWEEPS_ALL, swept  # noqa: E402

from thunder_mlir.errors import GradError
import thunder_mlir  # noqa: E402

# 1 in CI since 2026-12-02 (2 before; CI time); THUNDER_OPINFO_GRAD_SAMPLES=2 or "all"
_N = os.environ.get("THUNDER_OPINFO_GRAD_SAMPLES", "1")
GRAD_SAMPLES = None if _N == "all" else int(_N)
MAX_TRIES = 6  # samples drawn per op to find eager-valid ones
REPORT = "/tmp/thunder_opinfo_grad_report.txt"
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}
COUNTED = ("match", "mismatch", "error")
_RANK = {"match": 0, "error": 1, "mismatch": 2}

# Ops whose jitted program raises under grad mode (status ``error``), each with the reason.
# Asserted exactly: a new error, or a listed op that no longer raises, fails the test.
GRAD_ERRORS: dict[str, str] = {}


@dataclass
class GradResult:
    """Status of one OpInfo (see module docstring), its first reason, sample count and the
    samples accepted by the float64-reference rule (``closer``)."""

    name: str
    status: str
    reason: str = ""
    samples: int = 0
    seconds: float = 0.0
    closer: int = 0


def _leafify(tree):
    """Fresh leaf copies of the tensors of ``tree`` (keeping requires_grad)."""
    def f(x):
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x
    return pytree.tree_map(f, tree)


def _diff_outputs(out):
    return [o for o in pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]


def _grads(out, inputs, cots):
    """Gradients of sum(out_i * cot_i) w.r.t. ``inputs`` (zeros where unused)."""
    outs = _diff_outputs(out)
    pairs = [(o, c) for o, c in zip(outs, cots) if o.shape == c.shape]
    if not pairs or not inputs:
        return [torch.zeros_like(x) for x in inputs]
    loss = sum((o * c).sum() for o, c in pairs)
    gs = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, gs)]


def _with_seed(fn, seed=0):
    with torch.random.fork_rng(), _oi._NoReseed():
        torch.random.manual_seed(seed)
        return fn()


def _detached(tree):
    return pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, tree)


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[-1] if msg else ""


def _float64_reference(op, leaves, spec, pos, tensors, cots):
    """(outputs, gradients) of the sample computed eagerly in float64: float32 tensors
    (as leaves keeping requires_grad) and ``torch.float32`` arguments made float64, the
    cotangents too. None when that run fails."""
    up = [torch.float64 if x is torch.float32 else x for x in leaves]
    program = _oi.sample_program(op, up, spec, pos)
    ins = [t.detach().to(torch.float64).requires_grad_(t.requires_grad)
           if t.dtype is torch.float32 else t.detach().clone().requires_grad_(t.requires_grad)
           for t in tensors]
    try:
        out = _with_seed(lambda: program(*ins))
        grads = _grads(out, [t for t in ins if t.requires_grad],
                       [c.to(torch.float64) for c in cots])
    except Exception:  # noqa: BLE001 - no reference: the mismatch stands
        return None
    return out, grads


def _closer(actual, expected, reference) -> bool:
    """PyTorch's rule for another implementation (``TestCommon._ref_test_helper``):
    ``actual`` is no farther from the float64 ``reference`` than eager's ``expected``
    (sums of absolute differences), with eager's shapes and dtypes."""
    try:
        _oi._metadata(actual, expected)
        return _oi._distance(actual, reference) <= _oi._distance(expected, reference)
    except (AssertionError, RuntimeError, TypeError):
        return False


def run_sample(op, sample, tol, random_op=None) -> tuple[str, str]:
    """(status, reason) of one sample whose eager forward and backward succeeded; status in
    match / mismatch / error / forward-fails, or skip where eager fails. The reason of a
    match is ``_oi.CLOSER`` when the float64-reference rule accepted it. ``random_op``:
    the sample draws random numbers (see the module docstring)."""
    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    bad = _oi._unsupported_leaf(leaves)
    if bad:
        return "forward-fails", f"unsupported input: {bad}"
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    program = _oi.sample_program(op, leaves, spec, pos)

    tensors = [leaves[i] for i in pos]
    if not any(t.requires_grad for t in tensors):
        return "skip", "no input requires grad"
    e_in = _leafify(tensors)
    try:  # eager forward and backward must both work for the sample to count
        expected = _with_seed(lambda: program(*e_in))
        again = None if random_op else _with_seed(lambda: program(*_leafify(tensors)), seed=1)
        g = torch.Generator().manual_seed(1234)
        cots = [torch.randn(o.shape, generator=g) for o in _diff_outputs(expected)]
        wrt_e = [t for t in e_in if t.requires_grad]
        e_grads = _grads(expected, wrt_e, cots)
    except Exception:  # noqa: BLE001 - an eager failure makes no claim about jit
        return "skip", "eager fails"
    # beyond the tolerance: LAPACK-backed ops (lstsq) vary in the last bits run to run
    if again is not None and _oi._differ(expected, again, tol):
        return "mismatch", ("eager output depends on the seed: declare the op in "
                            "test_opinfo.RANDOM_OPS")
    reference = []  # the float64 computation, made on first need

    def precise():
        if not reference:
            reference.append(_float64_reference(op, leaves, spec, pos, tensors, cots))
        return reference[0]

    def forward_matches(out) -> bool:
        try:
            _oi._compare(_detached(out), _detached(expected), tol)
            return True
        except AssertionError:
            ref = precise()
            return ref is not None and _closer(_detached(out), _detached(expected),
                                               _detached(ref[0]))

    def forward_only():
        """'' when the forward-only program matches eager, else the reason."""
        try:
            with torch.no_grad():
                out = _with_seed(lambda: thunder_mlir.jit(program, sharp_edges="allow")(
                    *_leafify(tensors)))
        except Exception as e:  # noqa: BLE001 - the status records it
            return f"{type(e).__name__}: {_first_line(e)}"[:200]
        return "" if forward_matches(out) else "forward differs from eager"

    j_in = _leafify(tensors)
    jfn = thunder_mlir.jit(program, sharp_edges="allow")
    try:
        actual = _with_seed(lambda: jfn(*j_in))
    except Exception as e:  # noqa: BLE001
        why = "" if random_op else forward_only()
        if why:
            return "forward-fails", why
        kind = "GradError" if isinstance(e, GradError) else type(e).__name__
        return "error", f"{kind}: {_first_line(e)}"[:240]
    on_xla = random_op is not None and not thunder_mlir.fallback_ops(jfn)
    closer = False
    if on_xla:  # its own draw: metadata and the op's value check
        try:
            _oi._metadata(actual, expected)
        except AssertionError as e:
            return "mismatch", f"random op: {e}"[:240]
        problem = random_op.values(sample, _detached(actual))
        if problem:
            return "mismatch", f"random op values: {problem}"[:240]
    elif random_op is not None and random_op.same is not None:
        try:
            random_op.same(_detached(actual), _detached(expected), tol)
        except AssertionError as e:
            return "mismatch", "forward under grad mode: " + " ".join(str(e).split())[:240]
    else:
        try:
            _oi._compare(_detached(actual), _detached(expected), tol)
        except AssertionError as e:
            ref = None if random_op else precise()
            if ref is not None and _closer(_detached(actual), _detached(expected),
                                           _detached(ref[0])):
                closer = True
            else:
                why = "" if random_op else forward_only()
                if why:
                    return "forward-fails", why
                return "mismatch", "forward under grad mode: " + " ".join(str(e).split())[:240]
    wrt_j = [t for t in j_in if t.requires_grad]
    try:
        j_grads = _grads(actual, wrt_j, cots)
    except Exception as e:  # noqa: BLE001
        return "error", f"backward: {type(e).__name__}: {_first_line(e)}"[:240]
    if on_xla and random_op.grads is not None:
        problem = random_op.grads(sample, tensors, _detached(actual), cots,
                                  _all_grads(tensors, j_grads))
        return ("mismatch", f"random op gradient: {problem}"[:240]) if problem else \
            ("match", "")
    gtol = {k: max(GRAD_TOL[k], tol.get(k, 0)) for k in GRAD_TOL}
    for i, (a, e) in enumerate(zip(j_grads, e_grads)):
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **gtol)
        except AssertionError as err:
            ref = None if random_op else precise()
            if ref is not None and _closer(j_grads, e_grads, ref[1]):
                return "match", _oi.CLOSER
            return "mismatch", f"grad of input {i}: " + " ".join(str(err).split())[:240]
    return "match", _oi.CLOSER if closer else ""


def _all_grads(tensors, grads) -> list[torch.Tensor | None]:
    """``grads`` (of the tensors that require grad) spread over all of ``tensors``."""
    it = iter(grads)
    return [next(it) if t.requires_grad else None for t in tensors]


def run_op(op, max_samples) -> GradResult:
    """Status of one OpInfo over its first ``max_samples`` eager-valid samples."""
    t0 = time.perf_counter()
    res = GradResult(_oi._full_name(op), "no-samples")
    random_op = _oi.RANDOM_OPS.get(res.name)
    tol = _oi._tolerance(op, torch.float32)
    try:
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=True)
        samples = list(islice(samples, MAX_TRIES if max_samples is not None else None))
    except Exception as e:  # noqa: BLE001
        res.reason = f"sample_inputs raised {type(e).__name__}: {e}"[:200]
        return res
    worst, fwd_fail = None, ""
    for sample in samples:
        if max_samples is not None and res.samples >= max_samples:
            break
        draws = random_op if random_op is not None and random_op.when(sample) else None
        try:
            status, reason = run_sample(op, sample, tol, draws)
        except Exception as e:  # noqa: BLE001
            status, reason = "error", f"harness: {type(e).__name__}: {e}"[:200]
        if status == "skip":
            continue
        if status == "forward-fails":
            fwd_fail = fwd_fail or reason
            continue
        res.samples += 1
        if reason == _oi.CLOSER:
            res.closer += 1
            reason = ""
        if worst is None or _RANK[status] > _RANK[worst]:
            worst = status
            if reason:
                res.reason = reason
    if worst is not None:
        res.status = worst
    elif fwd_fail:
        res.status, res.reason = "forward-fails", fwd_fail
    res.seconds = time.perf_counter() - t0
    return res


def _ops():
    """The differentiable float32 OpInfos; in CI, the quarter ``conftest.swept`` names."""
    ops = [o for o in _oi._ops() if o.supports_autograd
           and torch.float32 in o.supported_dtypes("cpu") and swept(_oi._full_name(o))]
    return ops


def run_all(max_samples=GRAD_SAMPLES) -> list[GradResult]:
    """Run every selected OpInfo; returns the results."""
    results = []
    with warnings.catch_warnings(), _oi._CpuSeeding():
        warnings.simplefilter("ignore")
        for op in _ops():
            torch.manual_seed(0)
            results.append(run_op(op, max_samples))
    return results


def summarize(results: list[GradResult], seconds: float) -> tuple[str, Counter]:
    """The report text and the status counts."""
    counts = Counter(r.status for r in results)
    n = sum(counts[s] for s in COUNTED)
    lines = [f"== OpInfo gradient conformance, float32 ({GRAD_SAMPLES or 'all'} sample(s) per op)",
             f"ops with autograd: {len(results)}  forward passes: {n}  "
             f"(forward-fails: {counts['forward-fails']}, "
             f"no eager sample: {counts['no-samples']})"]
    if n:
        listed = sum(r.name in GRAD_ERRORS for r in results if r.status == "error")
        lines.append(f"match: {counts['match']} ({100 * counts['match'] / n:.1f}%)  "
                     f"mismatch: {counts['mismatch']}  error: {counts['error']} "
                     f"(allowlisted: {listed})  time: {seconds:.1f}s")
        closer = [r for r in results if r.closer]
        lines.append(f"samples not close to eager but closer to the float64 result (PyTorch's "
                     f"rule for another implementation): {sum(r.closer for r in closer)} "
                     f"in {len(closer)} ops")
    order = {"mismatch": 0, "error": 1, "match": 2, "forward-fails": 3, "no-samples": 4}
    lines.append(f"{'op':40} {'status':13} {'n':>2} {'sec':>6}  reason")
    for r in sorted(results, key=lambda r: (order[r.status], r.name)):
        reason = r.reason or (f"{r.closer} sample(s) {_oi.CLOSER}" if r.closer else "")
        if r.status == "error" and r.name in GRAD_ERRORS:
            reason = f"[allowlisted] {reason}"
        lines.append(f"{r.name:40} {r.status:13} {r.samples:>2} {r.seconds:6.2f}  {reason}")
    return "\n".join(lines), counts


def _run_and_report():
    t0 = time.perf_counter()
    results = run_all()
    text, counts = summarize(results, time.perf_counter() - t0)
    print(text, flush=True)
    with open(REPORT, "w") as f:
        f.write(text + "\n")
    return results, counts


def allowlist_problems(results, status: str, allowlist: dict, full: bool) -> list[str]:
    """Differences between the ops whose status is ``status`` and ``allowlist`` (op ->
    reason): an op with that status that is not listed, a listed op that ran with another
    status, and (``full``: the whole database ran) a listed op that did not run."""
    ran = {r.name: r for r in results}
    out = [f"{r.name}: new {status} (not in the allowlist): {r.reason}" for r in results
           if r.status == status and r.name not in allowlist]
    for name in allowlist:
        r = ran.get(name)
        if r is not None and r.status != status:
            out.append(f"{name}: allowlisted as {status} but now {r.status}: remove it "
                       "from the allowlist")
        elif r is None and full:
            out.append(f"{name}: allowlisted but not run (renamed or removed from op_db?)")
    return out


@pytest.mark.filterwarnings("ignore")
def test_opinfo_grad_float32():
    """Zero gradient mismatches; errors exactly the allowlisted ones (``GRAD_ERRORS``);
    every op whose forward fails is a declared forward error (``test_opinfo.F32_ERRORS``).
    The counts are printed and written to REPORT."""
    results, counts = _run_and_report()
    bad = [f"{r.name}: {r.reason}" for r in results if r.status == "mismatch"]
    assert not bad, "gradient mismatches against eager:\n" + "\n".join(bad)
    full = not os.environ.get("THUNDER_OPINFO_OPS") and SWEEPS_ALL
    problems = allowlist_problems(results, "error", GRAD_ERRORS, full)
    problems += [f"{r.name}: the forward fails ({r.reason}) but test_opinfo.F32_ERRORS does "
                 "not declare it" for r in results
                 if r.status == "forward-fails" and r.name not in _oi.F32_ERRORS]
    assert not problems, "\n".join(problems)
    assert sum(counts[s] for s in COUNTED) > 0


def test_harness_detects_a_wrong_gradient(monkeypatch):
    """The classification can fail: a wrong VJP rule for sin gives a mismatch."""
    from torch.testing._internal.common_methods_invocations import op_db

    from thunder_mlir.ir.prim_defs import PRIMS

    op = next(o for o in op_db if o.name == "sin")
    assert run_op(op, 1).status == "match"
    monkeypatch.setattr(PRIMS["sin"], "vjp", lambda o, x, y, g: [g[0]])
    assert run_op(op, 1).status == "mismatch"
    monkeypatch.setattr(PRIMS["sin"], "vjp", None)
    r = run_op(op, 1)
    assert r.status == "error" and "GradError" in r.reason


def test_harness_checks_random_ops(monkeypatch):
    """Random ops are compared too: a dropout whose gradient ignores the mask is a
    mismatch (gradient check), and so is one whose values break the op's value check."""
    from torch.testing._internal.common_methods_invocations import op_db

    from thunder_mlir.ir.prim_defs import PRIMS

    op = next(o for o in op_db if _oi._full_name(o) == "nn.functional.dropout")
    assert run_op(op, None).status == "match"
    # the mask reaches the gradient through mul: a rule that drops one factor is wrong
    monkeypatch.setattr(PRIMS["mul"], "vjp", lambda o, x, y, g: [g[0], g[0]])
    assert run_op(op, None).status == "mismatch"


def test_allowlists_are_exact():
    """``allowlist_problems`` reports a new error, a listed op that passes now, and (in a
    full run) a listed op that no longer exists."""
    runs = [GradResult("a", "error", "boom"), GradResult("b", "match")]
    assert allowlist_problems(runs, "error", {"a": "why"}, full=False) == []
    assert len(allowlist_problems(runs, "error", {}, full=False)) == 1
    assert len(allowlist_problems(runs, "error", {"a": "why", "b": "why"}, full=False)) == 1
    assert len(allowlist_problems(runs, "error", {"a": "why", "gone": "why"}, full=True)) == 1


if __name__ == "__main__":
    _run_and_report()
