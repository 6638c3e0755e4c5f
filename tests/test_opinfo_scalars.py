"""Scalar argument types: PyTorch's OpInfo samples with each Python scalar given another type.

A torch function's non-tensor argument reaches thunder_mlir with whatever Python type the
user wrote: ``dropout_p=0`` (an int where the schema says float), ``eps=1``,
``dim=torch.tensor(1)``, ``alpha=True``. A composite records it as an attribute of that type,
every reader (VJP rules, executors, lowering) must take what eager takes, and a type eager
rejects must be rejected (docs/architecture.md, "Scalar arguments"). This generator finds
what breaks; it found issue 45's internal error in the backward of
``scaled_dot_product_attention(..., dropout_p=0)`` among 321 failing variants of 1,576.

For each OpInfo of ``op_db`` (float32 on the CPU; random ops only for samples that draw
nothing), the first ``SAMPLES`` samples, drawn under the op's seed, whose eager run succeeds
and that hold Python scalars (bool, int or float leaves of the flattened ``(args, kwargs)``,
inside lists too) are taken. Each of their first ``MAX_SCALARS`` scalars is given, one at a
time, every other type of ``KINDS``, keeping its value where the type can hold it:

* ``int``    — ``int(v)``, for integral values (0.0 -> 0; 1e-5 has no int variant);
* ``float``  — ``float(v)``;
* ``bool``   — ``bool(v)``, for 0 and 1;
* ``tensor`` — ``torch.tensor(v)``: a 0-d tensor of the value, an input of the program.

Each variant runs eagerly first (the oracle):

* eager accepts it: the jitted program must give eager's outputs and, where the op supports
  autograd and the sample has inputs that require grad, eager's gradients (the loss: each
  float output times a fixed random cotangent, as tests/test_opinfo_grad.py). Status
  ``match``, ``mismatch`` or ``error`` (jit raised). A 0-d tensor torch reads as a number is
  specialized on its value (a re-trace), so its program is the Python value's: its
  forward is checked, at most ``TENSORS_PER_SAMPLE`` per sample and on half of the ops per
  seed (``TENSORS_ON_ALL_OPS``), and the other kinds check the gradients;
* eager raises: the jitted program must raise too (``raises``); one that returns a result
  is ``accepts``.

Where a variant fails, the sample as drawn (its control) is checked too; if that fails as
well, the sample's variants are not counted (tests/test_opinfo.py and test_opinfo_grad.py
own the op's own failures). Comparisons are test_opinfo's (tolerances, the float64 rule).
Forward-only variants are checked ``BATCH`` at a time through one jitted function
(test_opinfo's ``run_batch``), gradient ones likewise (``grad_batch``); a variant that
differs or whose batch raises is checked alone, so each keeps the outcome it gets alone.

The test asserts no ``mismatch``, ``error`` or ``accepts`` outside ``KNOWN`` (each with its
reason; asserted exactly). ``THUNDER_SCALAR_SAMPLES=N`` takes more samples per op,
``THUNDER_OPINFO_OPS=a,b`` restricts the ops. CI draws the ops of ``conftest.swept``'s quarter
(48 s of CI time for all of them); ``THUNDER_SWEEPS_ALL=1`` draws every op. The counts, the time of each step and the
reason of every skip and failure go to stdout and to
``/tmp/thunder_opinfo_scalars_report.txt``. Standalone: ``python tests/test_opinfo_scalars.py``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass
from itertools import islice

import pytest
import torch
import torch.utils._pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_opinfo as _oi  # noqa: E402  (the forward harness)
import test_opinfo_grad as _og  # noqa: E402  (the gradient harness)

from conftest import swept  # noqa: E402

import thunder_mlir  # noqa: E402

SAMPLES = int(os.environ.get("THUNDER_SCALAR_SAMPLES", "1"))
MAX_SCALARS = 4  # scalars varied per sample (the first ones, in flattening order)
# 0-d tensor variants that eager accepts, checked per sample: torch reads their value, so
# the jit specializes on it (frontend/scalar_args.py), which costs a re-trace each
TENSORS_PER_SAMPLE = 1
# ...and on every op or half of them (CI time): those whose name hashes to the parity of
# THUNDER_OPINFO_SEED, so seeds 0 and 1 cover all; THUNDER_SCALAR_TENSORS=all every op
TENSORS_ON_ALL_OPS = os.environ.get("THUNDER_SCALAR_TENSORS") == "all"
MAX_TRIES = 12  # samples drawn per op to find eager-valid ones holding scalars
KINDS = ("int", "float", "bool", "tensor")
BATCH = _oi.BATCH
REPORT = "/tmp/thunder_opinfo_scalars_report.txt"
FAILING = ("mismatch", "error", "accepts")

# (op, kind) -> reason, for failing variants that are understood and not fixed here.
# Asserted exactly: a new failure, or a listed one that passes now, fails the test.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(eq=False)
class Case:
    """One call to check: an OpInfo sample as drawn (``kind`` "") or with the scalar at
    ``where`` given the type ``kind``. ``grad``: its gradients are compared too.
    ``eager_error``: what eager raised (then the jit must raise). ``outcome``: (status,
    reason) once checked."""

    op: object
    name: str
    sample: object
    where: str = ""
    kind: str = ""
    grad: bool = False
    eager_error: str = ""
    outcome: tuple[str, str] | None = None


def _kind(x) -> str | None:
    return {bool: "bool", int: "int", float: "float"}.get(type(x))


def _convert(x, kind: str):
    """``x`` (a Python scalar) as ``kind``, or None where that type cannot hold its value."""
    if kind == "float":
        return float(x)
    if kind == "int":
        return int(x) if float(x).is_integer() else None
    if kind == "bool":
        return bool(x) if x in (0, 1) else None
    return torch.tensor(x)  # (0-d: bool, int64 or the default float dtype, as eager's)


def _with_leaf(sample, index: int, value):
    """A copy of ``sample`` whose ``index``-th flattened leaf is ``value``."""
    from torch.testing._internal.opinfo.core import SampleInput

    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    leaves = list(leaves)
    leaves[index] = value
    (inp, *args), kwargs = pytree.tree_unflatten(leaves, spec)
    return SampleInput(inp, args=tuple(args), kwargs=kwargs)


def _detached(sample):
    """``sample`` with its tensors detached (a forward-only check)."""
    from torch.testing._internal.opinfo.core import SampleInput

    (inp, *args), kwargs = _og._detached(((sample.input, *sample.args), sample.kwargs))
    return SampleInput(inp, args=tuple(args), kwargs=kwargs)


def _scalars(sample) -> list[tuple[int, str]]:
    """(leaf index, path) of the sample's Python scalars."""
    flat, _ = pytree.tree_flatten_with_path(((sample.input, *sample.args), sample.kwargs))
    out = []
    for i, (path, x) in enumerate(flat):
        if _kind(x) is not None:
            out.append((i, _path(path)))
    return out


def _path(path) -> str:
    """``args[2]``, ``kwargs['dropout_p']``, ``args[1][0]`` for a leaf's pytree path."""
    keys = [getattr(k, "idx", getattr(k, "key", None)) for k in path]
    if keys[0] == 0:
        text = "input" if keys[1] == 0 else f"args[{keys[1] - 1}]"
        rest = keys[2:]
    else:
        text, rest = f"kwargs[{keys[1]!r}]", keys[2:]
    return text + "".join(f"[{k!r}]" for k in rest)


def _draws(name: str, sample) -> bool:
    spec = _oi.RANDOM_OPS.get(name)
    try:
        return spec is not None and bool(spec.when(sample))
    except Exception:  # noqa: BLE001 - a value check that cannot read the variant
        return True


def _program(case: Case):
    s = case.sample
    leaves, spec = pytree.tree_flatten(((s.input, *s.args), s.kwargs))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    return _oi.sample_program(case.op, leaves, spec, pos), [leaves[i] for i in pos]


def _eager(case: Case) -> str:
    """Run ``case`` eagerly: '' where it succeeds (forward, and backward where
    ``case.grad``; a variant whose backward fails is checked forward only), else what
    eager raised."""
    program, tensors = _program(case)
    ins = _og._leafify(tensors)
    try:
        out = _og._with_seed(lambda: program(*ins))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {_og._first_line(e)}"[:160] or type(e).__name__
    if case.grad:
        try:
            _og._grads(out, [t for t in ins if t.requires_grad],
                       [torch.ones(x.shape) for x in _og._diff_outputs(out)])
        except Exception:  # noqa: BLE001 - eager's own backward does not take it
            case.grad = False
    return ""


def cases_of(op, samples_per_op: int = SAMPLES) -> tuple[list[Case], Counter]:
    """The cases of one OpInfo (controls and variants) and the reasons of what was not
    made a case (Counter of reason -> count)."""
    name = _oi._full_name(op)
    skipped: Counter = Counter()
    if torch.float32 not in op.supported_dtypes("cpu"):
        return [], skipped
    if name in _oi.F32_ERRORS:
        skipped[f"op jit refuses (test_opinfo.F32_ERRORS): {_oi.F32_ERRORS[name]}"] += 1
        return [], skipped
    grad = bool(op.supports_autograd)
    torch.manual_seed(zlib.crc32(f"{name} scalars {_oi.SEED}".encode()))
    try:
        samples = list(islice(op.sample_inputs("cpu", torch.float32, requires_grad=grad),
                              MAX_TRIES))
    except Exception:  # noqa: BLE001 - test_opinfo reports it
        skipped["sample_inputs raised"] += 1
        return [], skipped
    cases, taken = [], 0
    for sample in samples:
        if taken >= samples_per_op:
            break
        scalars = _scalars(sample)
        if not scalars:
            continue
        leaves = pytree.tree_leaves(((sample.input, *sample.args), sample.kwargs))
        if _oi._unsupported_leaf(leaves):
            skipped["sample holds an input jit does not take"] += 1
            continue
        if _draws(name, sample):
            skipped["sample draws random numbers (compared with eager only without)"] += 1
            continue
        has_grad = grad and any(isinstance(x, torch.Tensor) and x.requires_grad
                                for x in leaves)
        control = Case(op, name, sample, grad=has_grad)
        if _eager(control):
            continue  # eager rejects the sample itself
        taken += 1
        cases.append(control)
        tensors_taken = 0 if TENSORS_ON_ALL_OPS or \
            (zlib.crc32(name.encode()) + _oi.SEED) % 2 == 0 else TENSORS_PER_SAMPLE
        for index, where in scalars[:MAX_SCALARS]:
            value = leaves[index]
            for kind in KINDS:
                if kind == _kind(value):
                    continue
                new = _convert(value, kind)
                if new is None:
                    skipped[f"{kind} variant: the type cannot hold the value"] += 1
                    continue
                variant = _with_leaf(sample, index, new)
                if _draws(name, variant):
                    skipped[f"{kind} variant draws random numbers"] += 1
                    continue
                # (a 0-d tensor read as a number is specialized on its value: its program
                # is the Python value's, whose gradients the other kinds check)
                case = Case(op, name, variant, where, kind,
                            grad=has_grad and kind != "tensor")
                case.eager_error = _eager(case)
                if kind == "tensor" and not case.eager_error:
                    if tensors_taken >= TENSORS_PER_SAMPLE:
                        skipped[f"tensor variant eager accepts: beyond the first "
                                f"{TENSORS_PER_SAMPLE} of a sample, or an op of the other "
                                "half (each is a re-trace; THUNDER_SCALAR_TENSORS=all)"] += 1
                        continue
                    tensors_taken += 1
                cases.append(case)
        if len(scalars) > MAX_SCALARS:
            skipped[f"scalars beyond the first {MAX_SCALARS} of a sample"] += \
                len(scalars) - MAX_SCALARS
    return cases, skipped


# ------------------------------------------------------------------ checking
def _check_raises(case: Case) -> None:
    """A case eager rejects: the jitted program must raise too."""
    program, tensors = _program(case)
    try:
        with torch.no_grad():
            _og._with_seed(lambda: thunder_mlir.jit(program, sharp_edges="allow")(
                *_oi._clone([t.detach() for t in tensors])))
    except Exception:  # noqa: BLE001 - as eager
        case.outcome = "raises", ""
        return
    case.outcome = "accepts", f"eager raised {case.eager_error}"


def _forward(cases: list[Case], batch: bool = True) -> None:
    """Forward-only cases through test_opinfo's batches (alone where not batchable, or
    with ``batch`` False)."""
    jobs = [_oi._Job(c.op, _detached(c.sample), _oi._tolerance(c.op, torch.float32),
                     torch.float32) for c in cases]
    together = [j for j in jobs if batch and BATCH > 1 and _oi.batchable(j)]
    for i in range(0, len(together), BATCH):
        _oi.run_batch(together[i:i + BATCH])
    for job, case in zip(jobs, cases):
        if job.outcome is None:
            _oi._run_alone(job)
        status, reason, _ = job.outcome
        case.outcome = ("match", "") if status in ("xla", "fallback") else (status, reason)


def _grad_alone(case: Case) -> None:
    tol = _oi._tolerance(case.op, torch.float32)
    try:
        status, reason = _og.run_sample(case.op, case.sample, tol)
    except Exception as e:  # noqa: BLE001
        status, reason = "error", f"harness: {type(e).__name__}: {e}"[:200]
    if status == "forward-fails":
        status = "error" if "differs" not in reason else "mismatch"
    elif status == "skip":
        status, reason = "match", f"(eager: {reason})"
    case.outcome = status, reason


def _expected(case: Case):
    """Eager's (outputs, cotangents, gradients) of a gradient case."""
    program, tensors = _program(case)
    ins = _og._leafify(tensors)
    out = _og._with_seed(lambda: program(*ins))
    g = torch.Generator().manual_seed(1234)
    cots = [torch.randn(o.shape, generator=g) for o in _og._diff_outputs(out)]
    grads = _og._grads(out, [t for t in ins if t.requires_grad], cots)
    return _og._detached(out), cots, grads


def _loss(out, cots):
    """test_opinfo_grad's loss of one sample (None where nothing is differentiable)."""
    pairs = [(o, c) for o, c in zip(_og._diff_outputs(out), cots) if o.shape == c.shape]
    return sum((o * c).sum() for o, c in pairs) if pairs else None


def grad_batch(cases: list[Case]) -> None:
    """Check gradient cases through ONE jitted function (every case's call on its own
    tensors, every output returned) under grad mode: one backward of the sum of the cases'
    losses gives each case its own gradients. A case keeps ``match`` where its outputs and
    gradients are eager's within tolerance; the others, and every case of a batch that
    raised (halved down to single cases), are checked alone by test_opinfo_grad's
    ``run_sample``."""
    if len(cases) == 1:
        _grad_alone(cases[0])
        return
    try:
        parts = []
        for case in cases:
            s = case.sample
            leaves, spec = pytree.tree_flatten(((s.input, *s.args), s.kwargs))
            pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
            parts.append((case.op, leaves, spec, pos, _expected(case)))
    except Exception:  # noqa: BLE001 - alone, the harness reports it
        for case in cases:
            _grad_alone(case)
        return

    def batch(*tensors):  # (the calls written out, as test_opinfo.run_batch says why)
        outs, k = [], 0
        for op, leaves, spec, pos, _ in parts:
            vals = list(leaves)
            for i in pos:
                vals[i] = tensors[k]
                k += 1
            args, kwargs = pytree.tree_unflatten(vals, spec)
            outs.append(op.op(*args, **kwargs))
        return tuple(outs)

    ins = _og._leafify([p[1][i] for p in parts for i in p[3]])
    try:
        actual = _og._with_seed(lambda: thunder_mlir.jit(batch, sharp_edges="allow")(*ins))
        losses = [_loss(out, p[4][1]) for out, p in zip(actual, parts)]
        wrt = [t for t in ins if t.requires_grad]
        total = sum(x for x in losses if x is not None)
        grads = torch.autograd.grad(total, wrt, allow_unused=True) \
            if wrt and not isinstance(total, int) else [None] * len(wrt)
    except Exception:  # noqa: BLE001 - each half again, down to cases alone
        half = len(cases) // 2
        grad_batch(cases[:half])
        grad_batch(cases[half:])
        return
    by_input = dict(zip(map(id, wrt), grads))
    k = 0
    for case, part, out in zip(cases, parts, actual):
        mine = ins[k:k + len(part[3])]
        k += len(part[3])
        expected, _, e_grads = part[4]
        j_grads = [by_input.get(id(t)) for t in mine if t.requires_grad]
        j_grads = [torch.zeros_like(t) if g is None else g
                   for t, g in zip([t for t in mine if t.requires_grad], j_grads)]
        tol = _oi._tolerance(case.op, torch.float32)
        gtol = {n: max(_og.GRAD_TOL[n], tol.get(n, 0)) for n in _og.GRAD_TOL}
        try:
            _oi._compare(_og._detached(out), expected, tol)
            for a, e in zip(j_grads, e_grads):
                torch.testing.assert_close(a, e, equal_nan=True, **gtol)
        except Exception:  # noqa: BLE001 - alone, with the float64 rule and a reason
            _grad_alone(case)
            continue
        case.outcome = "match", ""


def check(cases: list[Case], skipped: Counter) -> tuple[list[Case], dict[str, float]]:
    """Check the variants, and the sample as drawn (the control) of each sample with a
    failing variant: where the control fails too, its variants are not counted (they are
    in ``skipped``: the sample itself fails, test_opinfo's business). Returns the variants
    counted and the seconds each step took."""
    with warnings.catch_warnings(), _oi._CpuSeeding():
        warnings.simplefilter("ignore")
        seconds: dict[str, float] = {}
        t = time.perf_counter()
        variants = [c for c in cases if c.kind]
        for case in variants:
            if case.eager_error:
                _check_raises(case)
        seconds["rejected"] = -t + (t := time.perf_counter())
        _forward([c for c in variants if not c.eager_error and not c.grad
                  and c.kind != "tensor"])
        seconds["forward"] = -t + (t := time.perf_counter())
        for c in variants:  # (alone: a batch would re-trace at every value it reads)
            if c.kind == "tensor" and not c.eager_error:
                _forward([c], batch=False)
        seconds["tensor"] = -t + (t := time.perf_counter())
        _gradients([c for c in variants if not c.eager_error and c.grad])
        seconds["gradients"] = -t + (t := time.perf_counter())
        controls, control, failing = [], None, set()
        for case in cases:
            if not case.kind:
                control = case
            elif case.outcome[0] in FAILING and control not in controls:
                controls.append(control)
        _forward([c for c in controls if not c.grad], batch=False)
        for c in controls:
            if c.grad:
                _grad_alone(c)
        seconds["samples"] = time.perf_counter() - t
        counted = []
        for case in cases:
            if not case.kind:
                control = case
            elif control.outcome is not None and control.outcome[0] != "match":
                skipped[f"the sample itself does not match ({control.outcome[0]}: "
                        "test_opinfo's business)"] += 1
            else:
                counted.append(case)
    return counted, seconds


def _gradients(cases: list[Case]) -> None:
    """Gradient cases in batches of ``BATCH`` (alone where not batchable)."""
    together = [c for c in cases if BATCH > 1 and _oi.batchable(
        _oi._Job(c.op, c.sample, {}, torch.float32))]
    for i in range(0, len(together), BATCH):
        grad_batch(together[i:i + BATCH])
    for c in cases:
        if c.outcome is None:
            _grad_alone(c)


def run_all(samples_per_op: int = SAMPLES) -> tuple[list[Case], Counter, dict]:
    """Every selected OpInfo: (the variants checked, skip reasons, figures)."""
    t0 = time.perf_counter()
    cases, skipped = [], Counter()
    with warnings.catch_warnings(), _oi._CpuSeeding():
        warnings.simplefilter("ignore")
        for op in _oi._ops():
            if not swept(_oi._full_name(op)):  # (CI's quarter: conftest.swept)
                skipped["not in this run's quarter of op_db (THUNDER_SWEEPS_ALL=1)"] += 1
                continue
            c, s = cases_of(op, samples_per_op)
            cases += c
            skipped += s
    t1 = time.perf_counter()
    variants, phases = check(cases, skipped)
    figures = {"ops": len({c.name for c in cases}),
               "samples": sum(1 for c in cases if not c.kind),
               "with_grad": sum(1 for c in variants if c.grad and not c.eager_error),
               "draw_s": t1 - t0, "check_s": time.perf_counter() - t1, "phases": phases}
    return variants, skipped, figures


def failures(variants: list[Case]) -> list[str]:
    """Failing variants outside ``KNOWN`` and ``KNOWN`` entries that no longer fail."""
    bad = [f"{c.name} {c.where}={c.kind}: {c.outcome[0]}: {c.outcome[1]}"
           for c in variants if c.outcome[0] in FAILING and (c.name, c.kind) not in KNOWN]
    failing = {(c.name, c.kind) for c in variants if c.outcome[0] in FAILING}
    ran = {(c.name, c.kind) for c in variants}
    bad += [f"{n} ={k}: listed in KNOWN but passes now: remove it" for (n, k) in KNOWN
            if (n, k) in ran and (n, k) not in failing]
    return bad


def summarize(variants: list[Case], skipped: Counter, figures: dict) -> str:
    counts = Counter(c.outcome[0] for c in variants)
    by_kind = {k: Counter(c.outcome[0] for c in variants if c.kind == k) for k in KINDS}
    lines = [f"== OpInfo scalar argument types, float32 ({SAMPLES} sample(s) per op, "
             f"up to {MAX_SCALARS} scalars each, kinds {', '.join(KINDS)})",
             f"ops: {figures['ops']}  samples: {figures['samples']}  variants: "
             f"{len(variants)} (eager accepts "
             f"{len(variants) - counts['raises'] - counts['accepts']}, of which with "
             f"gradients {figures['with_grad']})  "
             f"time: {figures['draw_s']:.1f}s eager + {figures['check_s']:.1f}s jit (" +
             ", ".join(f"{k} {v:.1f}s" for k, v in figures["phases"].items()) + ")",
             "status: " + "  ".join(f"{s}: {counts[s]}" for s in
                                    ("match", "mismatch", "error", "raises", "accepts"))]
    for k in KINDS:
        lines.append(f"  {k:7} " + "  ".join(f"{s}: {n}" for s, n in sorted(by_kind[k].items())))
    lines.append("not checked:")
    for reason, n in skipped.most_common():
        lines.append(f"  {n:5}  {reason}")
    lines.append("failures:")
    for c in sorted((c for c in variants if c.outcome[0] in FAILING),
                    key=lambda c: (c.outcome[0], c.name)):
        known = " [KNOWN]" if (c.name, c.kind) in KNOWN else ""
        lines.append(f"  {c.outcome[0]:8} {c.name} {c.where}={c.kind}{known}: "
                     f"{c.outcome[1]}"[:300])
    return "\n".join(lines)


def _run_and_report():
    variants, skipped, figures = run_all()
    text = summarize(variants, skipped, figures)
    print(text, flush=True)
    with open(REPORT, "w") as f:
        f.write(text + "\n")
    return variants


@pytest.mark.filterwarnings("ignore")
def test_generator_finds_the_integer_dropout_p(monkeypatch):
    """The generator can fail: with attributes read by a raw cast again (issue 45's
    reader), attention's integer and bool ``dropout_p`` variants are errors."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch_mlir import ir

    from thunder_mlir.ir import attrs

    monkeypatch.setattr(attrs, "to_float", lambda a, where="": ir.FloatAttr(a).value)
    op = next(o for o in op_db if o.name == "nn.functional.scaled_dot_product_attention")
    with _oi._CpuSeeding():
        cases, skipped = cases_of(op)
    variants, _ = check(cases, skipped)
    bad = {(c.where, c.kind) for c in variants if c.outcome[0] == "error"}
    assert {("kwargs['dropout_p']", "int"), ("kwargs['dropout_p']", "bool")} <= bad, bad


@pytest.mark.filterwarnings("ignore")
def test_opinfo_scalar_types():
    """No variant differs from eager, raises where eager does not, or is accepted where
    eager raises, outside ``KNOWN`` (asserted exactly); the counts are printed."""
    variants = _run_and_report()
    assert len(variants) > 0
    bad = failures(variants)
    assert not bad, "scalar argument types:\n" + "\n".join(bad)


if __name__ == "__main__":
    _run_and_report()
