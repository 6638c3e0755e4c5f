"""OpInfo under torch.autocast: eager (the oracle) vs thunder_mlir, op by op.

CPU: each op's first eager-valid samples (float32 and bfloat16 inputs) run eagerly inside
``torch.autocast("cpu")`` and through ``thunder_mlir.jit`` called inside the same region:
output dtypes must be eager's for every op (at trace level: the jitted program's traced
outputs), and where autocast changes eager's result at all (dtypes or values, compared with
the same op outside the region), values too, at the tolerance of the dtype the op computes
in (torch.testing's defaults for bfloat16: a cast to bfloat16 is one rounding).

CUDA (no GPU here): eager runs on fake CUDA tensors (``FakeTensorMode``, which runs ATen's
``AutocastCUDA`` kernels without a device), and the program is traced for a CUDA device;
output dtypes (and eager's errors) are compared. Values on CUDA are not tested.

Cost: each sample is traced alone, twice (autocast off, on), and compiled only where
autocast changes eager's result (CPU values). Measured (profile of a seventh of op_db):
tracing is most of the time, and nearly all of it per op of the program (a trace's fixed
cost is ~0.5 ms of ~2-20 ms), compiles are ~4%; so programs are not batched into one trace
or one compile as tests/fuzz_batch.py does (it would save a few percent). Seeds go to the
CPU generator alone (``_cpu_seeding``): through ``torch.manual_seed`` they took a quarter
to two fifths of the sweep's time.
"""

from __future__ import annotations

import itertools
import logging
import os
import warnings
from contextlib import contextmanager

import torch
import torch.utils._pytree as pytree

import thunder_mlir
from thunder_mlir.pipeline import trace_function

# usable samples per op and dtype: 1 in CI since 2026-12-02 (3 before: the two sweeps took
# 358 s of a make test past CI's limit); THUNDER_AUTOCAST_SAMPLES=3 runs three
N_SAMPLES = int(os.environ.get("THUNDER_AUTOCAST_SAMPLES", "1"))

# op -> (the first torch version where eager runs it, why it is not run before): ops whose
# eager kernel kills the process on older torch releases (make compat, torch 2.11.0)
TORCH_ABORTS = {"linalg.ldl_solve": ((2, 13), "torch 2.11's eager linalg.ldl_solve aborts the "
                                    "process on its OpInfo samples (double free or corruption)")}
_TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
CLOSER: list[str] = []  # ops accepted by _closer_than_eager (reported by the test)
BF16_TOL = {"rtol": 1.6e-2, "atol": 1e-5}  # torch.testing's defaults for bfloat16
# FakeTensorMode logs each meta kernel that raises; eager raising is an outcome compared here
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)


@contextmanager
def autocast_state(device: str, dtype: torch.dtype, enabled: bool = True):
    """Autocast on ``device`` without ``torch.autocast``'s device-availability check (CUDA
    autocast is refused on a CPU-only build, but ATen's kernels run on fake CUDA tensors)."""
    prev, prev_dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled(device, prev)
        torch.set_autocast_dtype(device, prev_dtype)


# ops whose values are unspecified (uninitialized memory): their dtypes are compared
UNSPECIFIED_VALUES = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                      "empty_permuted"}


def _tensors(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def usable(sample) -> bool:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    for x in leaves:
        if isinstance(x, torch.Generator):
            return False
        if isinstance(x, torch.Tensor) and (x.layout != torch.strided or x.is_quantized or
                                            x.is_neg() or x.is_conj() or x.is_complex()):
            return False
    return True


def as_program(op, sample):
    """(fn, tensors): the sample's tensors as inputs, everything else as constants."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*tensors):
        vals = list(leaves)
        for i, t in zip(pos, tensors):
            vals[i] = t
        inp, args, kwargs = pytree.tree_unflatten(vals, spec)
        return op(inp, *args, **kwargs)
    return fn, [leaves[i] for i in pos]


def traced_dtypes(fn, tensors):
    """Output dtypes of ``fn`` traced (not compiled) on ``tensors``' metadata."""
    import optree

    oleaves, ospec = optree.tree_flatten((tuple(tensors), {}), none_is_leaf=True)
    _, _, out_leaves, _ = trace_function(fn, oleaves, ospec, sharp_edges="allow")
    return [x.tdtype for x in out_leaves if isinstance(x, torch.Tensor)]


@contextmanager
def _no_test_fn_lookup():
    """OpInfo sample iterators look for the running unittest method with ``inspect.stack()``
    (input tracking for its error messages), which costs 0.1 s per call under pytest's deep
    stack; this harness has no such method to find."""
    import torch.testing._internal.common_utils as cu
    from torch.testing._internal.opinfo import core

    saved = cu.extract_test_fn, core.extract_test_fn
    cu.extract_test_fn = core.extract_test_fn = lambda: None
    try:
        yield
    finally:
        cu.extract_test_fn, core.extract_test_fn = saved


def samples(op, dtype, n: int = 1):
    out = []
    try:
        with _no_test_fn_lookup():
            it = op.sample_inputs("cpu", dtype, requires_grad=False)
            for s in itertools.islice(it, 8):
                if usable(s):
                    out.append(s)
                if len(out) == n:
                    break
    except Exception:  # noqa: BLE001, S110 - an OpInfo without samples for this dtype
        pass
    return out


@contextmanager
def _no_reseed():
    """OpInfos of random ops seed inside the op (``wrapper_set_seed``: a Python side effect a
    compiled program does not replay); the harness seeds the generator itself instead (as
    tests/test_opinfo.py does)."""
    saved = torch.manual_seed
    torch.manual_seed = lambda seed: torch.default_generator
    try:
        yield
    finally:
        torch.manual_seed = saved


def _cpu_seeding():
    """Seeding inside costs less where the CPU's is the only generator (conftest
    ``cpu_seeding``; measured here: a quarter to two fifths of the sweep's CPU time under
    pytest's deep stack): OpInfo's sample iterators seed before each sample."""
    from conftest import cpu_seeding
    return cpu_seeding()


def _eager(fn, tensors, seed=0):
    torch.default_generator.manual_seed(seed)
    with _no_reseed():
        return fn(*[t.clone() for t in tensors])


def _distance(a, ref) -> float:
    return sum((x.double() - y.double()).abs().nan_to_num(0.0, 0.0, 0.0).sum().item()
               for x, y in zip(_tensors(a), _tensors(ref)) if x.is_floating_point())


def _closer_than_eager(fn, tensors, actual, expected) -> bool:
    """PyTorch's rule for another implementation whose result is not close to eager's
    (``TestCommon._ref_test_helper``, test/test_ops.py): it passes if it is no farther from
    the computation in float64 (here: the same program, float64 inputs, no autocast) than
    eager's result is (sum of absolute differences)."""
    up = [t.double() if t.is_floating_point() else t for t in tensors]
    try:
        with torch.autocast("cpu", enabled=False):
            ref = _eager(fn, up)
    except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
        return False
    return _distance(actual, ref) <= _distance(expected, ref)


def _check_cpu_sample(op, dtype, ss, autocast_dtype) -> str | None:
    """None if thunder_mlir matches eager under CPU autocast for ``op``'s first sample,
    else a reason; "skip: ..." when the sample does not apply."""
    fn, tensors = as_program(op, ss)
    try:
        off = _eager(fn, tensors)
        traced_dtypes(fn, tensors)
    except Exception as e:  # noqa: BLE001
        return f"skip: fails without autocast ({type(e).__name__})"
    if any(t.layout != torch.strided for t in _tensors(off)):
        return "skip: sparse output"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=autocast_dtype):
            try:
                on = _eager(fn, tensors)
            except Exception as e:  # noqa: BLE001
                try:
                    thunder_mlir.jit(fn, sharp_edges="allow")(*tensors)
                except type(e):
                    return None
                except Exception as e2:  # noqa: BLE001
                    # a torch fallback op whose metadata cannot be computed because the op
                    # raises: TraceError quoting eager's error (the fallback's rule, not
                    # autocast's)
                    if str(e).splitlines()[0][:60] in str(e2):
                        return None
                    return f"eager raised {type(e).__name__}, jit {type(e2).__name__}: {e2}"[:300]
                return f"eager raised {type(e).__name__}: {e}; jit did not"[:300]
            try:
                got = traced_dtypes(fn, tensors)
            except Exception as e:  # noqa: BLE001
                return f"trace: {type(e).__name__}: {str(e)[:200]}"
            want = [t.dtype for t in _tensors(on)]
            if got != want:
                return f"dtypes {got} != eager's {want}"
            if op.name in UNSPECIFIED_VALUES:
                return None
            a_off, a_on = _tensors(off), _tensors(on)
            changed = [a.dtype != b.dtype or (a.shape == b.shape and a.is_floating_point() and
                                              not torch.equal(a, b)) for a, b in zip(a_off, a_on)]
            if not any(changed):
                return None
            try:
                again = _eager(fn, tensors, seed=1)
            except Exception:  # noqa: BLE001
                again = on
            if any(not torch.equal(a, b) for a, b in zip(_tensors(on), _tensors(again))
                   if a.shape == b.shape):
                return None  # a random op: values depend on the generator, dtypes checked
            try:
                # fallback random ops draw from torch's (CPU) generator
                torch.default_generator.manual_seed(0)
                with _no_reseed():
                    jit_out = thunder_mlir.jit(fn, sharp_edges="allow")(
                        *[t.clone() for t in tensors])
            except Exception as e:  # noqa: BLE001
                return f"jit: {type(e).__name__}: {str(e)[:200]}"
    for i, (a, e) in enumerate(zip(_tensors(jit_out), _tensors(on))):
        tol = BF16_TOL if torch.bfloat16 in (e.dtype, dtype, autocast_dtype) else {}
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **tol)
        except AssertionError as err:
            if a.dtype == e.dtype and _closer_than_eager(fn, tensors, jit_out, on):
                CLOSER.append(op.full_name)
                return None
            return f"output {i}: {str(err).splitlines()[0]} {str(err).splitlines()[-2:]}"[:300]
    return None


def _check_cuda_sample(op, dtype, ss, autocast_dtype) -> str | None:
    """Dtypes (and errors) of ``op``'s first sample traced for a CUDA device under CUDA
    autocast, against eager on fake CUDA tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fn, tensors = as_program(op, ss)
    with mode:
        fakes = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                 for t in tensors]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with mode:
                fn(*fakes)
            traced_dtypes(fn, fakes)
        except Exception as e:  # noqa: BLE001
            return f"skip: fails without autocast ({type(e).__name__})"
        with autocast_state("cuda", autocast_dtype):
            try:
                with mode:
                    want = [t.dtype for t in _tensors(fn(*fakes))]
                err = None
            except Exception as e:  # noqa: BLE001
                err = e
            try:
                got = traced_dtypes(fn, fakes)
            except Exception as e:  # noqa: BLE001
                if err is not None:
                    # both raise; the error type is checked on CPU, where the fallback
                    # executor can run the op (here it cannot: no CUDA device)
                    return None
                return f"trace: {type(e).__name__}: {str(e)[:200]}"
    if err is not None:
        return f"eager raised {type(err).__name__}: {str(err)[:100]}; the trace did not"
    return None if got == want else f"dtypes {got} != eager's {want}"


def _over_samples(check, op, dtype, autocast_dtype, n) -> str | None:
    abort = TORCH_ABORTS.get(op.full_name)
    if abort is not None and _TORCH < abort[0]:
        print(f"skip {op.full_name}: {abort[1]}")
        return f"skip: {abort[1]}"
    with _cpu_seeding():
        ss = samples(op, dtype, n)
        if not ss:
            return "skip: no sample"
        verdicts = [check(op, dtype, s, autocast_dtype) for s in ss]
    bad = [v for v in verdicts if v is not None and not v.startswith("skip")]
    if bad:
        return bad[0]
    return None if None in verdicts else verdicts[0]


def check_cpu(op, dtype, autocast_dtype=torch.bfloat16, n: int = N_SAMPLES) -> str | None:
    """None if thunder_mlir matches eager under CPU autocast for ``op``'s first ``n``
    usable samples, else the first reason; "skip: ..." when no sample applies."""
    return _over_samples(_check_cpu_sample, op, dtype, autocast_dtype, n)


def check_cuda(op, dtype, autocast_dtype=torch.float16, n: int = N_SAMPLES) -> str | None:
    """Dtypes (and errors) of ``op``'s first ``n`` samples traced for a CUDA device under
    CUDA autocast, against eager on fake CUDA tensors."""
    return _over_samples(_check_cuda_sample, op, dtype, autocast_dtype, n)
