"""Conformance: PyTorch's ModuleInfo database through ``thunder_mlir.jit``, against eager.

The corpus is ``torch.testing._internal.common_modules.module_db`` (the one PyTorch tests its
``nn`` modules with), float32 on the CPU, in training and in eval mode. For each ModuleInfo,
mode and sample (``module_inputs_func``): the module is built from the sample's constructor
arguments, deep-copied, and one copy runs eagerly (the oracle) while the other runs through
``thunder_mlir.jit``. Compared after the call:

* the outputs (pytree structure, values, dtypes, ``requires_grad``);
* the module's state (``state_dict``: parameters and buffers such as running statistics and
  ``num_batches_tracked``; a Lazy module's materialized parameters) and the input tensors
  (in-place writes);
* gradients: ``backward`` of the same random cotangents over the outputs that require grad,
  then ``.grad`` of every parameter and every input tensor (``None`` vs a tensor included).

Every module gets one status:

* ``xla``      — every sample matched eager and every program ran wholly on XLA;
* ``fallback`` — every sample matched eager, some op ran on the torch executor (forward:
  ``fallback_ops``; backward: a VJP rule calling ATen, listed from the ``plan`` stage);
* ``mismatch`` — a sample gave a different result (a bug: fix it or refuse with an error);
* ``error``    — jit raised where eager did not (the reason is reported);
* ``eager-fails`` — no sample runs eagerly (not counted).

Values are compared with ``torch.testing.assert_close`` at its float32 defaults, or at the
ModuleInfo's own ``toleranceOverride`` for the tests that compare another implementation of
the module with eager on the CPU (``test_forward`` against its reference, ``test_cpu_gpu_parity``,
``test_non_contiguous_tensors``) — never looser. A value outside that tolerance still passes
if it is no farther from the same computation done eagerly in float64 than eager's own
float32 value is: PyTorch's rule for another implementation of an op
(``TestCommon._ref_test_helper``, the rule ``tests/test_opinfo.py`` applies); the report
counts those samples per module.

Samples are random: each (module, mode) draws its samples after seeding torch with a hash of
the module's name, the mode and ``THUNDER_MODULEINFO_SEED`` (default 0), and each sample's
module is built and run under a seed of its own, so CI sees what a developer saw. Eager and
jit run under the same seed, so a module that draws random numbers on the torch fallback is
compared for equality.

Default subset (CI): ``SAMPLES`` samples per module and mode (1 since 2026-12-02, or
``THUNDER_MODULEINFO_SAMPLES``), spread evenly over the module's list.
``THUNDER_MODULEINFO_FULL=1`` runs every sample;
``THUNDER_MODULEINFO_MODULES=nn.Linear,nn.GRU`` a selection. The table goes to stdout and to
``/tmp/thunder_moduleinfo_report.txt``. Run standalone: ``python tests/test_moduleinfo.py``.
"""

from __future__ import annotations

import copy
import os
import re
import time
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass, field

import pytest
import torch
import torch.utils._pytree as pytree

import thunder_mlir

FULL = os.environ.get("THUNDER_MODULEINFO_FULL") == "1"
# 1 sample per module in CI since 2026-12-02 (2 before; CI time: docs/compat.md)
SAMPLES = None if FULL else int(os.environ.get("THUNDER_MODULEINFO_SAMPLES", "1"))
SEED = int(os.environ.get("THUNDER_MODULEINFO_SEED", "0"))
REPORT = os.environ.get("THUNDER_MODULEINFO_REPORT", "/tmp/thunder_moduleinfo_report.txt")
DTYPE = torch.float32
_RANK = {"xla": 0, "fallback": 1, "error": 2, "mismatch": 3}
# ModuleInfo tests whose tolerance overrides apply to "another implementation vs eager"
_TOL_TESTS = {"test_forward", "test_cpu_gpu_parity", "test_non_contiguous_tensors"}
CLOSER = "closer to the float64 result than eager"
SEED_COT = 7  # the cotangents' generator seed (plus the call's index)


@dataclass(frozen=True)
class Allowed:
    """A module allowed to end in ``error``: ``why`` it cannot run as eager does, and
    ``match``, a piece of the error every failing sample must show."""

    why: str
    match: str


# Modules whose jitted run raises (never a silent difference), one reason each. A module
# that starts passing, or errs for another reason, fails test_moduleinfo. Empty: every
# module of the database runs as eager does.
ALLOWED_ERRORS: dict[str, Allowed] = {}


@dataclass
class ModuleResult:
    """Status of one ModuleInfo (see the module docstring), the first error or mismatch,
    sample counts, the fallback ops and the wall time."""

    name: str
    status: str = "eager-fails"
    reason: str = ""
    samples: int = 0
    seconds: float = 0.0
    fallbacks: set = field(default_factory=set)
    closer: int = 0
    reasons: list = field(default_factory=list)  # every failing sample's reason


class Mismatch(AssertionError):
    """A compared value differs from eager's (the message names the value)."""


def _tolerance(info) -> dict:
    atol = rtol = None
    for d in info.decorators:
        decs = getattr(d, "decorators", None)
        if not decs or getattr(d, "device_type", None) not in (None, "cpu"):
            continue
        if getattr(d, "test_name", None) not in _TOL_TESTS:
            continue
        for x in decs:
            t = getattr(x, "d", None)
            if type(x).__name__ == "toleranceOverride" and t and DTYPE in t:
                atol = max(atol or 0, t[DTYPE].atol)
                rtol = max(rtol or 0, t[DTYPE].rtol)
    return {} if atol is None else {"atol": atol, "rtol": rtol}


def _fresh(tree):
    """Inputs cloned as new leaves with the same ``requires_grad``."""
    def leaf(x):
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return copy.deepcopy(x)
    return pytree.tree_map(leaf, tree)


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _build(info, sample, training: bool, seed: int) -> torch.nn.Module:
    c = sample.constructor_input
    torch.manual_seed(seed)
    m = info.module_cls(*c.args, **c.kwargs)
    m.to(DTYPE)
    m.train(training)
    return m


def _call(module, args, kwargs, seed: int):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return module(*args, **kwargs)


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return torch.where(same, 0, (a.double() - b.double()).abs()).sum().item()


def _close(what: str, a, e, tol: dict, ref=None) -> bool:
    """Raise Mismatch unless ``a`` (jit) equals ``e`` (eager) within ``tol``. Returns True
    when it passed by the float64 rule: ``ref(what)``, the float64 value, is at least as
    near ``a`` as ``e``."""
    if not isinstance(a, torch.Tensor):
        raise Mismatch(f"{what}: jit gave {type(a).__name__}, eager a tensor")
    if a.dtype != e.dtype or a.shape != e.shape:
        raise Mismatch(f"{what}: {a.dtype}{list(a.shape)} vs eager's {e.dtype}{list(e.shape)}")
    try:
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True, **tol)
        return False
    except AssertionError as err:
        if ref is not None and e.is_floating_point():
            r = ref(what)
            if r is not None and _distance(a.detach(), r) <= _distance(e.detach(), r):
                return True
        raise Mismatch(f"{what}: {' '.join(str(err).split())}") from None


def _uninitialized(module: torch.nn.Module) -> bool:
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in [*module.parameters(), *module.buffers()])


def _cotangents(outs: list[torch.Tensor], seed: int) -> list:
    """A random cotangent for each output that requires grad (None for the others)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype) if o.requires_grad else None
            for o in outs]


class _Float64Reference:
    """The sample's calls computed eagerly in float64 (module and floating inputs
    converted), with the same cotangents: values named as ``_close`` names them, computed
    once on first use."""

    def __init__(self, pristine, forward_input, seed: int, calls: int):
        self._how = (pristine, forward_input, seed, calls)
        self._values = None

    def __call__(self, call: int, what: str):
        if self._values is None:
            try:
                self._values = self._compute()
            except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
                self._values = {}
        return self._values.get((call, what))

    def _compute(self) -> dict:
        pristine, f, seed, calls = self._how
        module = copy.deepcopy(pristine)
        if _uninitialized(module):  # materialized as the first call does (same seed)
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                module._infer_parameters(module, *_fresh((f.args, f.kwargs)))
        module.double()

        def up(x):
            if isinstance(x, torch.Tensor) and x.dtype is DTYPE:
                return x.detach().double().requires_grad_(x.requires_grad)
            return x
        vals = {}
        for call in range(calls):
            args, kwargs = pytree.tree_map(up, _fresh((f.args, f.kwargs)))
            out = _call(module, args, kwargs, seed + 1 + call)
            outs = _tensors(out)
            now = {f"output {i}": t for i, t in enumerate(outs)}
            now.update({f"state {k}": v for k, v in module.state_dict().items()})
            cots = _cotangents(outs, SEED_COT + call)
            diff = [(o, c.double()) for o, c in zip(outs, cots) if c is not None]
            if diff:
                torch.autograd.backward([o for o, _ in diff], [c for _, c in diff])
            for i, t in enumerate(_tensors((args, kwargs))):
                now[f"grad of input {i}"] = t.grad
            for n, p in module.named_parameters():
                now[f"grad of parameter {n}"] = p.grad
            vals.update({(call, k): v.detach().clone() for k, v in now.items()
                         if v is not None})
        return vals


def _compare_call(call, expected, actual, e_in, a_in, eager, mine, tol, ref) -> int:
    """Compare one call's outputs, module state, inputs after the call and, after the
    backward of the same cotangents, the gradients. Returns how many values passed by the
    float64 rule; raises Mismatch."""
    closer = 0

    def close(what, a, e, with_ref=True):
        return _close(what, a, e, tol, (lambda w: ref(call, w)) if with_ref else None)
    e_spec, a_spec = pytree.tree_structure(expected), pytree.tree_structure(actual)
    if e_spec != a_spec:
        raise Mismatch(f"output structure: jit {a_spec}, eager {e_spec}")
    for i, (a, e) in enumerate(zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected))):
        if not isinstance(e, torch.Tensor) and a != e:
            raise Mismatch(f"output leaf {i}: {a!r} != eager's {e!r}")
    e_outs, a_outs = _tensors(expected), _tensors(actual)
    for i, (a, e) in enumerate(zip(a_outs, e_outs)):
        closer += close(f"output {i}", a, e)
        if a.requires_grad != e.requires_grad:
            raise Mismatch(f"output {i}: requires_grad {a.requires_grad}, eager's "
                           f"{e.requires_grad}")
    a_sd, e_sd = mine.state_dict(), eager.state_dict()
    if a_sd.keys() != e_sd.keys():
        raise Mismatch(f"state_dict keys: jit {sorted(a_sd)}, eager {sorted(e_sd)}")
    for k in e_sd:
        closer += close(f"state {k}", a_sd[k], e_sd[k])
    for i, (a, e) in enumerate(zip(a_in, e_in)):
        close(f"input {i} after the call", a, e, with_ref=False)
    cots = _cotangents(e_outs, SEED_COT + call)
    diff = [i for i, c in enumerate(cots) if c is not None]
    if not diff:
        return closer
    torch.autograd.backward([e_outs[i] for i in diff], [cots[i] for i in diff])
    try:
        torch.autograd.backward([a_outs[i] for i in diff], [cots[i] for i in diff])
    except Exception as err:  # noqa: BLE001 - reported as an error by run_sample
        raise _BackwardError(err) from None
    pairs = [(f"grad of input {i}", a, e) for i, (a, e) in enumerate(zip(a_in, e_in))]
    a_params = dict(mine.named_parameters())
    pairs += [(f"grad of parameter {n}", a_params[n], p) for n, p in eager.named_parameters()]
    for what, a, e in pairs:
        if (a.grad is None) != (e.grad is None):
            raise Mismatch(f"{what}: jit {'no' if a.grad is None else 'a'} .grad, "
                           f"eager {'no' if e.grad is None else 'a'} .grad")
        if e.grad is not None:
            closer += close(what, a.grad, e.grad)
    return closer


def _torch_ops(jm) -> list[str]:
    """The ops the last compiled program ran on the torch executor: ``fallback_ops`` (the
    forward's) and the backward's own torch calls (a VJP rule that calls ATen, e.g.
    ``convolution_backward``; a fallback op's replay, ``<op>.vjp``, is not listed again)."""
    names = set(thunder_mlir.fallback_ops(jm))
    plan = next((str(s) for s in thunder_mlir.last_traces(jm) if s.name == "plan"), "")
    names.update(c for c in re.findall(r'callee = "([^"]+)", executor = "torch"', plan)
                 if not c.endswith(".vjp"))
    return sorted(names)


class _BackwardError(Exception):
    """jit's backward raised (eager's ran)."""


def run_sample(info, sample, training: bool, seed: int, tol: dict) -> tuple[str, str, list, int]:
    """(status, reason, fallback op names, 1 if a value passed by the float64 rule) for one
    sample whose eager run succeeded. A module built with uninitialized (Lazy) parameters
    is called twice: its first call materializes them."""
    f = sample.forward_input
    pristine = _build(info, sample, training, seed)
    calls = 2 if _uninitialized(pristine) else 1
    eager, mine = copy.deepcopy(pristine), copy.deepcopy(pristine)
    jm = thunder_mlir.jit(mine, sharp_edges="allow")
    ref = _Float64Reference(pristine, f, seed, calls)
    closer = 0
    for call in range(calls):
        e_args, e_kwargs = _fresh((f.args, f.kwargs))
        a_args, a_kwargs = _fresh((f.args, f.kwargs))
        expected = _call(eager, e_args, e_kwargs, seed + 1 + call)
        try:
            actual = _call(jm, a_args, a_kwargs, seed + 1 + call)
        except Exception as e:  # noqa: BLE001 - the status records it
            msg = str(e).strip().splitlines()
            return "error", f"{type(e).__name__}: {msg[-1] if msg else ''}"[:240], [], 0
        try:
            closer += _compare_call(call, expected, actual, _tensors((e_args, e_kwargs)),
                                    _tensors((a_args, a_kwargs)), eager, mine, tol, ref)
        except Mismatch as e:
            return "mismatch", f"call {call + 1}: {e}"[:300] if calls > 1 else str(e)[:300], \
                _torch_ops(jm) if call else [], 0
        except _BackwardError as e:
            err = e.args[0]
            msg = str(err).strip().splitlines()
            return "error", f"backward: {type(err).__name__}: {msg[-1] if msg else ''}"[:240], \
                [], 0
    fallbacks = _torch_ops(jm)
    return "fallback" if fallbacks else "xla", "", fallbacks, int(closer > 0)


def _pick(info, samples: list, training: bool, base: int, n: int | None) -> list:
    """Up to ``n`` (index, sample) pairs that run eagerly, spread evenly over ``samples``
    (the first included; a sample eager rejects is replaced by the next one that runs);
    all that run when n is None."""
    order = list(range(len(samples)))
    if n is not None and len(samples) > n:
        step = len(samples) / n
        spread = [int(k * step) for k in range(n)]
        order = spread + [k for k in order if k not in set(spread)]
    picked = []
    for k in order:
        if n is not None and len(picked) >= n:
            break
        s = samples[k]
        if s.forward_input is not None and _eager_runs(info, s, training, base + 10 * k):
            picked.append((k, s))
    return sorted(picked, key=lambda p: p[0])


def _eager_runs(info, sample, training, seed) -> bool:
    """Whether the sample's module builds, runs and backpropagates eagerly."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = _build(info, sample, training, seed)
            f = sample.forward_input
            args, kwargs = _fresh((f.args, f.kwargs))
            out = _call(m, args, kwargs, seed + 1)
            diff = [t for t in _tensors(out) if t.requires_grad]
            if diff:
                torch.autograd.backward(diff, [torch.ones_like(t) for t in diff])
        return True
    except Exception:  # noqa: BLE001 - an eager failure makes no claim about jit
        return False


def run_module(info, max_samples: int | None) -> ModuleResult:
    """Run up to ``max_samples`` samples of ``info`` per mode (training, then eval), each
    (module, mode) seeded from its name, the mode and ``SEED``; the module's status is its
    worst sample's."""
    t0 = time.perf_counter()
    res = ModuleResult(info.name)
    tol = _tolerance(info)
    worst = None
    for training in (True, False):
        base = zlib.crc32(f"{info.name} {training} {SEED}".encode())
        torch.manual_seed(base)
        try:
            samples = list(info.module_inputs_func(info, device="cpu", dtype=DTYPE,
                                                   requires_grad=True, training=training))
        except Exception as e:  # noqa: BLE001
            res.reason = f"module_inputs_func raised {type(e).__name__}: {e}"[:200]
            continue
        for k, sample in _pick(info, samples, training, base, max_samples):
            res.samples += 1
            try:
                status, reason, fb, closer = run_sample(info, sample, training, base + 10 * k, tol)
            except Exception as e:  # noqa: BLE001
                status, reason, fb, closer = ("error", f"harness: {type(e).__name__}: {e}"[:200],
                                              [], 0)
            res.fallbacks.update(fb)
            res.closer += closer
            if reason:
                res.reasons.append(f"{'train' if training else 'eval'} #{k}: {reason}")
            if worst is None or _RANK[status] > _RANK[worst]:
                worst = status
                if reason:
                    res.reason = f"{'train' if training else 'eval'}: {reason}"
    if worst is not None:
        res.status = worst
        if worst == "fallback" and not res.reason:
            res.reason = "falls back: " + ", ".join(sorted(res.fallbacks))
    res.seconds = time.perf_counter() - t0
    return res


def _infos():
    from torch.testing._internal.common_modules import module_db

    only = os.environ.get("THUNDER_MODULEINFO_MODULES")
    if only:
        names = set(only.split(","))
        return [m for m in module_db if m.name in names]
    return list(module_db)


def run_all(max_samples: int | None = SAMPLES) -> list[ModuleResult]:
    """``run_module`` over the database (or ``THUNDER_MODULEINFO_MODULES``)."""
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in _infos():
            results.append(run_module(info, max_samples))
    return results


def summarize(results: list[ModuleResult], seconds: float) -> tuple[str, Counter]:
    """The report (counts, shares, run time, one line per module, failures first) and the
    status counts."""
    counts = Counter(r.status for r in results)
    ran = sum(counts[s] for s in ("xla", "fallback", "mismatch", "error"))
    passed = counts["xla"] + counts["fallback"]
    lines = [f"== ModuleInfo conformance: float32, cpu, train and eval "
             f"({'full run' if FULL else f'{SAMPLES} samples per module and mode'})",
             f"modules: {len(results)}  with eager-valid samples: {ran}  "
             f"(eager-fails: {counts['eager-fails']})"]
    if ran:
        lines.append(f"pass: {passed} ({100 * passed / ran:.1f}%)  xla: {counts['xla']}  "
                     f"fallback: {counts['fallback']}  mismatch: {counts['mismatch']}  "
                     f"error: {counts['error']}  time: {seconds:.1f}s")
        closer = [r for r in results if r.closer]
        lines.append(f"samples not close to eager but closer to the float64 result (PyTorch's "
                     f"rule for another implementation): {sum(r.closer for r in closer)} in "
                     f"{len(closer)} modules")
    lines.append(f"{'module':28} {'status':9} {'n':>2} {'sec':>6}  reason")
    order = {"mismatch": 0, "error": 1, "fallback": 2, "xla": 3, "eager-fails": 4}
    for r in sorted(results, key=lambda r: (order[r.status], r.name)):
        reason = r.reason or (f"{r.closer} sample(s) {CLOSER}" if r.closer else "")
        lines.append(f"{r.name:28} {r.status:9} {r.samples:>2} {r.seconds:6.2f}  {reason}")
    return "\n".join(lines), counts


def _run_and_report() -> tuple[list[ModuleResult], Counter]:
    t0 = time.perf_counter()
    results = run_all()
    text, counts = summarize(results, time.perf_counter() - t0)
    print(text, flush=True)
    with open(REPORT, "w") as f:
        f.write(text + "\n")
    return results, counts


def allowlist_problems(results: list[ModuleResult],
                       allowed: dict[str, Allowed] = ALLOWED_ERRORS) -> list[str]:
    """What breaks the allowlist: an error not on it, an allowed module failing for another
    reason than its own (in any sample), an allowed module that passes now (to be removed)
    or that mismatches."""
    problems = []
    for r in results:
        a = allowed.get(r.name)
        if r.status == "error" and a is None:
            problems.append(f"{r.name}: new error: {r.reason}")
        elif r.status == "error":
            problems += [f"{r.name}: error for another reason than the allowlist's "
                         f"({a.match!r}): {x}" for x in r.reasons if a.match not in x]
        elif a is not None and r.status in ("xla", "fallback"):
            problems.append(f"{r.name}: passes now; remove it from ALLOWED_ERRORS")
    return problems


def test_allowlist_rules():
    """A new error, an allowed module erring for another reason and an allowed module that
    passes each break the allowlist; an allowed error with its reason does not."""
    allowed = {"nn.A": Allowed("why", "TraceError: x")}
    ok = ModuleResult("nn.A", "error", reasons=["train #0: TraceError: x here"])
    assert allowlist_problems([ok], allowed) == []
    other = ModuleResult("nn.A", "error", reasons=["train #0: TraceError: x", "eval #1: Oops"])
    assert "another reason" in allowlist_problems([other], allowed)[0]
    assert "passes now" in allowlist_problems([ModuleResult("nn.A", "xla")], allowed)[0]
    assert "new error" in allowlist_problems([ModuleResult("nn.B", "error")], allowed)[0]


@pytest.mark.filterwarnings("ignore")
def test_moduleinfo():
    """Every ModuleInfo, float32, train and eval: zero mismatches; errors exactly the
    allowlist (each failing sample showing its reason); at least 95% of the modules pass.
    The summary table (with the run time) is printed."""
    results, counts = _run_and_report()
    bad = [f"{r.name}: {r.reason}" for r in results if r.status == "mismatch"]
    assert not bad, "mismatches against eager:\n" + "\n".join(bad)
    problems = allowlist_problems(results)
    assert not problems, "\n".join(problems)
    ran = sum(counts[s] for s in ("xla", "fallback", "mismatch", "error"))
    if not os.environ.get("THUNDER_MODULEINFO_MODULES"):  # the whole database
        assert ran == len(results) >= 114, "modules without an eager-valid sample"
        assert (counts["xla"] + counts["fallback"]) / ran >= 0.95, "pass share under 95%"


if __name__ == "__main__":
    _run_and_report()
