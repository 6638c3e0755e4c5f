"""Shared helpers for the thunder_mlir test suite.

The oracle is always eager PyTorch: a jitted function must return what the plain function
returns on the same inputs (same pytree structure, dtypes, shapes and values, compared with
``torch.testing.assert_close``'s default tolerances unless a test says why not).
"""

from __future__ import annotations

import os
import zlib
from contextlib import contextmanager

import pytest
import torch
import torch.utils._pytree as pytree

import thunder_mlir
import thunder_mlir.runtime.compile_cache

# --- `pytest --device cuda` (docs/gpu.md) ----------------------------------------------------
# The device-relevant test files run with torch's default device set to CUDA (every tensor and
# module a test makes without naming a device is a CUDA one; the eager oracle runs on CUDA
# too); the other files are skipped with a reason. Without a GPU every test is collected and
# skipped with the reason. The OpInfo sweeps run float32 and bfloat16 only there.
CUDA_FILES = frozenset((
    "test_ops.py", "test_grad.py", "test_opinfo.py", "test_opinfo_dtypes.py",
    "test_opinfo_dtypes_int.py", "test_models.py", "test_generate.py", "test_autocast.py", "test_idioms_aliasing.py", "test_idioms_autocast.py",
    "test_idioms_autograd.py", "test_idioms_errors.py", "test_idioms_gradnum.py",
    "test_idioms_guards.py", "test_idioms_modules.py", "test_dynamic_shapes.py",
    "test_compile_cache.py", "test_distributed.py", "test_random.py", "test_runtime.py",
    "test_cuda.py"))
CUDA_OPINFO_DTYPES = ("float32", "bfloat16")
#: The device the suite's tensors are made on: "cpu" unless ``--device cuda``.
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")

# The op_db sweeps beyond the float32 conformance (tests/test_written_after.py,
# test_data_reads.py, test_region_reads.py, test_index_bounds.py, test_autocast.py's two,
# test_opinfo_grad.py)
# check a fixed half of the ops in CI: with the whole sweeps, make test took 2,155 s of
# CI's 30 minutes on 2 cores (2026-12-02). THUNDER_SWEEPS_ALL=1 checks every op.
SWEEPS_ALL = os.environ.get("THUNDER_SWEEPS_ALL") == "1"


def swept(name: str) -> bool:
    """Whether an op_db sweep checks the op named ``name`` (an OpInfo's full name) in this
    run: every op with ``THUNDER_SWEEPS_ALL=1``, else those whose CRC-32 is a multiple of 4
    (the same quarter in every run and on every machine; a half until 2026-12-02, when CI
    passed its 30 minutes)."""
    return SWEEPS_ALL or zlib.crc32(name.encode()) % 4 == 0


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", choices=("cpu", "cuda"),
                     help="run the device-relevant tests with CUDA tensors (docs/gpu.md)")


def pytest_configure(config):
    global DEVICE
    DEVICE = config.getoption("--device")
    os.environ["THUNDER_TEST_DEVICE"] = DEVICE  # for test modules and their subprocesses
    config.addinivalue_line("markers", "cuda: needs a CUDA device (tests/test_cuda.py)")
    if not (config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None)
            and not hasattr(config, "workerinput")):  # (not in xdist's controller process)
        _skip_opinfo_test_fn_lookup()


def _skip_opinfo_test_fn_lookup():
    """OpInfo and ModuleInfo sample iterators look for the running unittest method with
    ``inspect.stack()`` (``common_utils.extract_test_fn``: it names the test in their input
    tracking's error messages). Under pytest's deep stack that costs 0.06-0.1 s per
    ``sample_inputs`` call (measured: 78 of 122 s of an op_db sweep of 649 ops); this suite
    has no unittest method to find, so the lookup returns None."""
    import torch.testing._internal.common_utils as cu
    from torch.testing._internal.opinfo import core

    cu.extract_test_fn = core.extract_test_fn = lambda: None


def cuda_unavailable_reason() -> str | None:
    """Why CUDA tests cannot run here, or None when they can."""
    if not torch.cuda.is_available():
        return (f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is "
                f"False)")
    return None


def pytest_collection_modifyitems(config, items):
    no_cuda = cuda_unavailable_reason()
    for item in items:
        name = item.path.name
        if item.get_closest_marker("cuda") is not None and no_cuda:
            item.add_marker(pytest.mark.skip(reason=f"CUDA test: {no_cuda}"))
        if DEVICE != "cuda":
            continue
        if name not in CUDA_FILES:
            item.add_marker(pytest.mark.skip(
                reason=f"--device cuda: {name} is not device-relevant (it runs on the CPU)"))
        elif no_cuda:
            item.add_marker(pytest.mark.skip(reason=f"--device cuda: {no_cuda}"))
        elif name in ("test_opinfo_dtypes.py", "test_opinfo_dtypes_int.py") and not any(
                d in item.name for d in CUDA_OPINFO_DTYPES):
            item.add_marker(pytest.mark.skip(
                reason=f"--device cuda: OpInfo sweeps run {CUDA_OPINFO_DTYPES} only"))


#: A file each test's outcome is appended to as it ends (tools/gpu_check.sh sets it): on the
#: lent GPU machine the run can be cut at its time limit, which loses pytest's summary.
_OUTCOMES = os.environ.get("THUNDER_TEST_OUTCOMES")


def pytest_runtest_logreport(report):
    """With ``THUNDER_TEST_OUTCOMES``, append one line per test phase that failed or per
    passed/skipped call (``OUTCOME nodeid seconds``), and a failure's traceback (its last
    4,000 characters). Under xdist the controller writes, as each worker's report arrives."""
    if _OUTCOMES is None or (report.when != "call" and report.passed) or \
            os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's controller writes them all
        return
    outcome = report.outcome.upper() if report.when == "call" or report.skipped else \
        f"{report.outcome.upper()}-IN-{report.when.upper()}"
    text = f"{outcome} {report.nodeid} {report.duration:.1f}s\n"
    if report.failed:
        detail = report.longreprtext[-4000:]
        text += "".join(f"    {line}\n" for line in detail.splitlines())
    with open(_OUTCOMES, "a") as f:
        f.write(text)


@pytest.fixture(autouse=True)
def _test_device():
    """Under ``--device cuda``, torch's default device is CUDA for the test."""
    if DEVICE != "cuda":
        yield
        return
    torch.set_default_device("cuda")
    try:
        yield
    finally:
        torch.set_default_device(None)


@pytest.fixture(autouse=True, scope="session")
def _compile_cache_dir(tmp_path_factory):
    """The persistent compile cache lives in this session's temporary directory (also for
    subprocesses, through the environment), never in the user's cache: a test must not
    depend on what an earlier run left there."""
    import os

    path = tmp_path_factory.mktemp("compile_cache")
    old = os.environ.get(thunder_mlir.runtime.compile_cache.ENV_VAR)
    os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR] = str(path)
    thunder_mlir.set_compile_cache_dir(path)
    yield path
    if old is None:
        del os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR]
    else:
        os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR] = old


_ONLY_CPU_GENERATOR: bool | None = None  # (manual_seed: known at its first call)
_TORCH_MANUAL_SEED = torch.manual_seed  # (cpu_seeding replaces it for a while)


def manual_seed(seed: int) -> None:
    """``torch.manual_seed(seed)``, without its cost where the CPU's is the only generator.
    ``torch.manual_seed`` also seeds every other backend's generators, and a backend not
    yet initialized (CUDA, XPU, MTIA) queues the call with ``traceback.format_stack()``
    (torch/cuda/__init__.py ``_lazy_call``): about 1.5 ms at a test's stack depth, and
    the test harnesses seed at every step of every program (1,500 times in
    test_fuzz.py). Where none of those backends is available (nor MPS, nor a privateuse1
    backend: torch/random.py ``_manual_seed_impl``), the queued calls never run, so
    seeding the CPU generator alone is the same; elsewhere this is ``torch.manual_seed``."""
    global _ONLY_CPU_GENERATOR
    if _ONLY_CPU_GENERATOR is None:
        _ONLY_CPU_GENERATOR = not (
            torch.cuda.is_available() or torch.xpu.is_available()
            or torch.mtia.is_available() or torch.backends.mps.is_available()
            or hasattr(torch, torch._C._get_privateuse1_backend_name()))
    if _ONLY_CPU_GENERATOR:
        torch.default_generator.manual_seed(int(seed))
    else:
        _TORCH_MANUAL_SEED(seed)


@contextmanager
def cpu_seeding():
    """``torch.manual_seed`` (and ``torch.random.manual_seed``) as ``manual_seed`` inside:
    for code that seeds through torch's own function many times, as OpInfo's sample
    iterators do before every sample (``common_utils.set_rng_seed``). Same seeding; only
    the cost differs (``manual_seed``'s docstring)."""
    saved = torch.manual_seed, torch.random.manual_seed
    torch.manual_seed = torch.random.manual_seed = manual_seed
    try:
        yield
    finally:
        torch.manual_seed, torch.random.manual_seed = saved



@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random inputs on every run (CUDA's generators included:
    ``manual_seed`` seeds them where they exist)."""
    manual_seed(0)
    yield


def _clone_tree(tree):
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def assert_same_tree(actual, expected, **close_kw):
    """Same pytree structure; tensors ``assert_close`` (dtype, shape, device checked too);
    other leaves equal."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"output structure differs:\n  jit:   {a_spec}\n  eager: {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"leaf {i}: expected a tensor, got {type(a)}"
            torch.testing.assert_close(a, e, msg=lambda m: f"leaf {i}: {m}", **close_kw)
        else:
            assert type(a) is type(e) and a == e, f"leaf {i}: {a!r} != {e!r}"


def assert_close_to_eager(fn, *args, jfn=None, expect_fallback: bool = False, **close_kw):
    """Run ``fn`` eagerly and jitted on ``args`` and compare; return the jitted function.

    ``expect_fallback=False`` also asserts the whole program ran on XLA
    (``thunder_mlir.fallback_ops(jfn) == []``). Inputs are cloned for each run, so an
    accidental in-place update by either side cannot hide a difference.
    """
    jfn = jfn if jfn is not None else thunder_mlir.jit(fn)
    expected = fn(*_clone_tree(args))
    actual = jfn(*_clone_tree(args))
    assert_same_tree(actual, expected, **close_kw)
    if not expect_fallback:
        assert thunder_mlir.fallback_ops(jfn) == [], \
            f"expected the program to run fully on XLA, fallbacks: {thunder_mlir.fallback_ops(jfn)}"
    return jfn


def mse_training_step(model, opt, x, y):
    """One eager-style training step (the form ``thunder_mlir.jit(step)`` compiles whole):
    ``mse_loss(model(x), y)``, ``backward()``, ``opt.step()``, ``opt.zero_grad()``;
    returns the loss (0-d)."""
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


# Torch-overridable functions that thunder_mlir can never have a symbol for: calls to them
# reach the tracer (through __torch_function__) and always take the torch fallback, so the
# fallback tests do not depend on which ops happen to lack symbols today.
def unregistered_cumprod(x, dim):
    """torch.cumprod, seen by the tracer as an op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_cumprod, (x,), x, dim)
    return torch.cumprod(x, dim)


def unregistered_logcumsumexp(x, dim):
    """torch.logcumsumexp, seen by the tracer as an op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_logcumsumexp, (x,), x, dim)
    return torch.logcumsumexp(x, dim)


def unregistered_topk(x, k):
    """torch.topk (a (values, indices) namedtuple), seen by the tracer as an op with no
    symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_topk, (x,), x, k)
    return torch.topk(x, k)


def unregistered_sort(x, dim, descending=False):
    """torch.sort (a torch.return_types.sort namedtuple), seen by the tracer as an op with
    no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_sort, (x,), x, dim,
                                                     descending=descending)
    return torch.sort(x, dim, descending=descending)


def unregistered_mul_(x, value):
    """In-place ``x.mul_(value)``, seen by the tracer as an in-place op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_mul_, (x,), x, value)
    return x.mul_(value)


def unregistered_add_(x, value):
    """In-place ``x.add_(value)``, seen by the tracer as an in-place op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_add_, (x,), x, value)
    return x.add_(value)
