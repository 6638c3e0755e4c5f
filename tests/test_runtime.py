"""The runtime's DLPack traps (docs toolchain.md §5-6): layouts, dtypes, alignment,
requires_grad, zero-copy in and out."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import thunder_mlir
from conftest import unregistered_cumprod
from conftest import assert_close_to_eager
from thunder_mlir.runtime import dlpack


def _shared_add(a, b):
    return a * 2 + b, (a @ b.t()).sum(0)


@pytest.fixture(scope="module")
def jadd():
    return thunder_mlir.jit(_shared_add)


def test_transposed_input(jadd):
    base = torch.arange(12.0).reshape(4, 3)
    x = base.t()  # dense but column-major: strides (1, 3)
    assert not x.is_contiguous()
    assert_close_to_eager(_shared_add, x, torch.randn(3, 4), jfn=jadd)
    assert_close_to_eager(_shared_add, torch.randn(3, 4), x, jfn=jadd)
    assert_close_to_eager(lambda a: a + 0, torch.randn(2, 3, 4).permute(2, 0, 1))
    assert_close_to_eager(lambda a: a.sum(1), torch.randn(5, 6).t())


def test_strided_view_with_gaps(jadd):
    big = torch.randn(3, 8)
    x = big[:, ::2]
    assert x.stride() == (8, 2)
    assert_close_to_eager(_shared_add, x, torch.randn(3, 4), jfn=jadd)
    assert_close_to_eager(lambda a: a * 3, torch.randn(10)[1::3])


def test_expanded_stride_zero_input(jadd):
    row = torch.randn(1, 4)
    x = row.expand(3, 4)
    assert x.stride() == (0, 1)
    assert_close_to_eager(_shared_add, x, torch.randn(3, 4), jfn=jadd)
    assert_close_to_eager(lambda a: a.sum(), torch.tensor(2.0).expand(5, 5))


def test_unaligned_view(jadd):
    base = torch.randn(4 * 3 + 3)
    x = base[1:13].view(4, 3)[1:]  # storage offset 4 elements: 16 bytes, not 64-aligned
    assert x.is_contiguous() and x.data_ptr() % 64 != 0
    assert_close_to_eager(_shared_add, x, torch.randn(3, 3), jfn=thunder_mlir.jit(_shared_add))
    y = torch.randn(5, 4)[1:]
    assert y.data_ptr() % 64 != 0
    assert_close_to_eager(lambda a: a.exp(), y)


def test_requires_grad_input(jadd):
    x = torch.randn(3, 4, requires_grad=True)
    y = torch.randn(3, 4)
    out = jadd(x, y)
    expected = _shared_add(x.detach(), y)
    torch.testing.assert_close(out[0].detach(), expected[0])
    torch.testing.assert_close(out[1].detach(), expected[1])
    assert x.grad is None
    assert_close_to_eager(lambda a: a.relu(), torch.randn(3).requires_grad_())


def test_neg_and_conj_views():
    x = torch.randn(4)
    nv = torch._neg_view(x)
    assert nv.is_neg()
    assert_close_to_eager(lambda a: a + 1, nv)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_64bit_dtypes_keep_dtype_and_values(dtype):
    if dtype is torch.int64:
        x = torch.tensor([2**31 + 5, -(2**33), 2**62 + 1, 3], dtype=dtype)
    else:
        x = torch.tensor([2.0**31 + 0.5, 1e200, -1e-200, 1.0 + 2**-40], dtype=dtype)
    jfn = assert_close_to_eager(lambda a: (a, a + 1, a * 2, a.sum()), x, rtol=0, atol=0)
    outs = jfn(x)
    assert all(o.dtype is dtype for o in outs)
    assert outs[1][0].item() == x[0].item() + 1  # not squeezed through a 32-bit type


def test_int64_output_from_float_input():
    x = torch.tensor([3e9, -3e9, 1.5])
    assert_close_to_eager(lambda a: a.to(torch.int64) * 2, x)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.float16, torch.bfloat16], ids=str)
def test_small_dtypes_roundtrip(dtype):
    x = (torch.randn(2, 5) * 50).to(dtype)
    jfn = assert_close_to_eager(lambda a: (a, a.reshape(-1), a[:, :2]), x)
    assert all(o.dtype is dtype for o in jfn(x))


def test_zero_dim_and_empty_tensors():
    assert_close_to_eager(lambda a, b: (a * 2, b + 1, b.sum(), a + b.sum()),
                          torch.tensor(3.0), torch.randn(0, 4))


def test_outputs_of_earlier_calls_stay_valid(jadd):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    first = jadd(x, y)
    first_copy = [t.clone() for t in first]
    for _ in range(3):
        jadd(torch.randn(3, 4), torch.randn(3, 4))
    for a, b in zip(first, first_copy):
        torch.testing.assert_close(a, b)


def test_inputs_not_modified(jadd):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x0, y0 = x.clone(), y.clone()
    jadd(x, y)
    torch.testing.assert_close(x, x0)
    torch.testing.assert_close(y, y0)


def test_same_output_twice_and_input_as_output():
    x = torch.randn(3)
    out = thunder_mlir.jit(lambda a: (a * 2, a * 2, a))(x)
    torch.testing.assert_close(out[0], x * 2)
    torch.testing.assert_close(out[1], x * 2)
    torch.testing.assert_close(out[2], x)


# ---------------------------------------------------------------- zero-copy checks
class _Recorder:
    """Wraps dlpack.to_xla / to_torch / to_torch_many to record data pointers on both
    sides."""

    def __init__(self, monkeypatch):
        self.to_xla, self.to_torch = [], []
        orig_to_xla, orig_to_torch = dlpack.to_xla, dlpack.to_torch
        orig_to_torch_many = dlpack.to_torch_many

        def to_xla(t, device):
            arr = orig_to_xla(t, device)
            self.to_xla.append((t.data_ptr(), arr.unsafe_buffer_pointer()))
            return arr

        def to_torch(arr, on_cpu):
            t = orig_to_torch(arr, on_cpu)
            self.to_torch.append((arr.unsafe_buffer_pointer(), t.data_ptr(), t))
            return t

        def to_torch_many(arrs, on_cpu):
            ts = orig_to_torch_many(arrs, on_cpu)
            self.to_torch += [(a.unsafe_buffer_pointer(), t.data_ptr(), t)
                              for a, t in zip(arrs, ts)]
            return ts

        monkeypatch.setattr(dlpack, "to_xla", to_xla)
        monkeypatch.setattr(dlpack, "to_torch", to_torch)
        monkeypatch.setattr(dlpack, "to_torch_many", to_torch_many)


def test_outputs_share_memory_with_xla_buffers(monkeypatch):
    jfn = thunder_mlir.jit(lambda a, b: (a + b, (a * b).sum(1), a.to(torch.int64)))
    x, y = torch.randn(64, 16), torch.randn(64, 16)
    jfn(x, y)  # compile outside the recording
    rec = _Recorder(monkeypatch)
    outs = jfn(x, y)
    assert len(rec.to_torch) == 3, "Plan.run no longer goes through dlpack.to_torch: update test"
    for (xla_ptr, torch_ptr, t), out in zip(rec.to_torch, outs):
        assert xla_ptr == torch_ptr  # zero-copy export
        assert out.data_ptr() == xla_ptr  # and the user gets that very tensor


def test_contiguous_aligned_inputs_not_copied(monkeypatch):
    jfn = thunder_mlir.jit(lambda a, b: a * b)
    jfn(torch.randn(64, 16), torch.randn(64, 16))  # compile outside the recording
    x, y = torch.randn(64, 16), torch.randn(64, 16, dtype=torch.float32)
    assert x.data_ptr() % 64 == 0 and y.data_ptr() % 64 == 0
    rec = _Recorder(monkeypatch)
    jfn(x, y)
    assert len(rec.to_xla) == 2, "Plan.run no longer goes through dlpack.to_xla: update test"
    for (t_ptr, xla_ptr), src in zip(rec.to_xla, (x, y)):
        assert t_ptr == src.data_ptr()  # no .contiguous() copy on the torch side
        assert xla_ptr == t_ptr  # and XLA reads torch's memory in place


def test_int64_input_not_copied(monkeypatch):
    jfn = thunder_mlir.jit(lambda a: a + 1)
    jfn(torch.arange(64 * 8, dtype=torch.int64))  # compile outside the recording
    x = torch.arange(64 * 8, dtype=torch.int64)
    rec = _Recorder(monkeypatch)
    jfn(x)
    assert rec.to_xla and rec.to_xla[0] == (x.data_ptr(), x.data_ptr())


def test_repeated_input_reuses_its_buffer_until_modified(monkeypatch):
    """The same tensor passed again at the same position is not re-imported: its buffer is
    the tensor's memory, so an in-place change is read without one. A change of its memory
    or layout (``.data =`` keeps the version counter) or another tensor imports again."""
    jfn = thunder_mlir.jit(lambda a: a * 2)
    x = torch.randn(64)
    jfn(x)
    rec = _Recorder(monkeypatch)
    torch.testing.assert_close(jfn(x), x * 2)
    assert rec.to_xla == []  # reused the buffer of the first call
    x.add_(1)  # in place: the same memory, seen through the cached buffer
    torch.testing.assert_close(jfn(x), x * 2)
    assert rec.to_xla == []
    x.data = torch.randn(64)  # other memory, same version counter
    torch.testing.assert_close(jfn(x), x * 2)
    assert len(rec.to_xla) == 1
    y = x.view(8, 8).t().contiguous().view(64)  # a different tensor object
    torch.testing.assert_close(jfn(y), y * 2)
    assert len(rec.to_xla) == 2


def test_new_small_input_at_every_call_is_copied_into_a_staging_tensor(monkeypatch):
    """A position given a new tensor at three calls in a row (a decode step's input ids) gets
    a staging tensor, imported once; later calls copy into it and read their own values, as
    eager. Results of earlier calls keep theirs (``a * 1``: XLA may return the parameter
    itself), a transposed argument is read as eager reads it, a large one is imported, and
    another thread never fills a staging tensor it did not make."""
    jfn = thunder_mlir.jit(lambda a, w: (a * 1, a * 2 + w))
    w = torch.randn(8, 8)
    for i in range(3):
        jfn(torch.full((8, 8), float(i)), w)
    assert jfn.last.plan._imports._staging[0] is not None
    rec = _Recorder(monkeypatch)
    xs = [torch.randn(8, 8) for _ in range(3)] + [torch.randn(8, 8).t()]
    outs = [jfn(x, w) for x in xs]
    assert rec.to_xla == []  # copied into the staging tensor, nothing imported
    for x, (same, y) in zip(xs, outs):
        torch.testing.assert_close(same, x, rtol=0, atol=0)
        torch.testing.assert_close(y, x * 2 + w)
    res = []
    x = torch.randn(8, 8)
    worker = threading.Thread(target=lambda: res.append(jfn(x, w)))
    worker.start()
    worker.join()
    torch.testing.assert_close(res[0][1], x * 2 + w)
    assert len(rec.to_xla) == 1  # imported: the staging tensor is the first thread's
    big = thunder_mlir.jit(lambda a: a * 2)
    n = dlpack.STAGING_BYTES // 4 + 1
    for _ in range(3):
        x = torch.randn(n)
        torch.testing.assert_close(big(x), x * 2)
    assert len(rec.to_xla) == 4  # one import per call


def test_inference_mode_tensors():
    """Inference tensors have no version counter (reading ``_version`` raises): they are
    imported like any other tensor, and an in-place update between calls is read."""
    jfn = thunder_mlir.jit(lambda a: a * 2)
    with torch.inference_mode():
        x = torch.randn(16)
        torch.testing.assert_close(jfn(x), x * 2)
        torch.testing.assert_close(jfn(x), x * 2)
        x.add_(1)
        torch.testing.assert_close(jfn(x), x * 2)


def test_reused_buffer_follows_layout_changes_without_version_bump(monkeypatch):
    """``x.data = x.data.t()`` keeps the pointer, shape (square) and version counter but
    not the strides: the cached row-major buffer must not be reused."""
    jfn = thunder_mlir.jit(lambda a: a * 2)
    x = torch.randn(8, 8)
    jfn(x)
    jfn(x)
    rec = _Recorder(monkeypatch)
    x.data = x.data.t()
    torch.testing.assert_close(jfn(x), x * 2)
    assert len(rec.to_xla) == 1


def test_permuted_inputs_and_outputs_take_the_single_region_path(monkeypatch):
    """A program whose one XLA region reads the inputs in another order and returns its
    results in another order (a decode step of a model with a static cache) runs without
    the slot machinery, imports only what changed and returns eager's values."""
    def f(a, b, c):
        y = (c - a).sum()
        return a * b + y, y

    jfn = thunder_mlir.jit(f)
    a, b, c = torch.randn(16), torch.randn(16), torch.randn(16)
    for got, want in zip(jfn(a, b, c), f(a, b, c)):
        torch.testing.assert_close(got, want)
    plan = jfn.last.plan
    step = plan.steps[0]
    assert step.inputs != (0, 1, 2) and step.outputs != plan.outputs, "not permuted: update"
    assert plan._single and plan.run is plan._call  # the prepared single-region run
    rec = _Recorder(monkeypatch)
    c2 = torch.randn(16)
    for got, want in zip(jfn(a, b, c2), f(a, b, c2)):
        torch.testing.assert_close(got, want)
    assert [p for p, _ in rec.to_xla] == [c2.data_ptr()]  # a and b hit their positions


def test_training_step_keeps_parameter_buffers(monkeypatch):
    """A training forward returns weights its backward reads (plan outputs that are program
    inputs) and still runs as one region (run by the autograd Function, which keeps the
    residuals' XLA buffers for the backward: runtime/autograd.py); after
    ``optimizer.step()`` updated them in place the parameters are not imported again, and
    every step matches eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    jm = thunder_mlir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        if step == 2:
            rec = _Recorder(monkeypatch)
        x = torch.randn(4, 8)
        for m, o in ((jm, opt), (ref, ref_opt)):
            m(x).square().sum().backward()
            o.step()
            o.zero_grad()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q)
    plan = jm._fn.last.plan
    assert any(j < 0 for j in plan._pick), "the forward returns no input: update test"
    assert plan._single
    imported = {ptr for ptr, _ in rec.to_xla}
    assert imported and not imported & {p.data_ptr() for p in model.parameters()}


def test_values_between_regions_stay_on_xla(monkeypatch):
    """A value flowing from one XLA region to the next is not exported to torch."""
    def fn(a):
        b = a.exp()
        c = unregistered_cumprod(a, 0)  # fallback: regions before and after
        return b + c

    jfn = thunder_mlir.jit(fn)
    x = torch.rand(8)
    jfn(x)
    rec = _Recorder(monkeypatch)
    torch.testing.assert_close(jfn(x), fn(x))
    # b leaves region 0 and feeds region 1 directly; only c crosses torch -> XLA, and only
    # the final output crosses XLA -> torch
    assert len(rec.to_torch) == 1


def test_repeated_calls_keep_output_dtypes_and_shapes():
    """The first call's outputs set the result handlers later calls use (plan.py
    ``result_handlers``): every later call must still give eager's dtype, shape and value,
    0-d and 64-bit outputs included."""
    def f(a, b):
        return (a.to(torch.int64) * 3, a.to(torch.float64) / 3, a > 0, a.to(torch.bfloat16),
                torch.complex(a, b), a.sum())

    jfn = thunder_mlir.jit(f)
    for _ in range(3):
        a, b = torch.randn(3, 4), torch.randn(3, 4)
        for got, want in zip(jfn(a, b), f(a, b)):
            torch.testing.assert_close(got, want)


# ------------------------------------------------ the host allocator (host_allocator.py)
def test_host_allocator_policy_applies_once_and_respects_the_users_choice():
    """``start_backends`` keeps freed memory for the next run (glibc ``mallopt``) unless
    the user chose a policy: the opt-out variable, glibc tunables, ``MALLOC_*`` variables
    or a preloaded allocator. Checked in fresh processes (the setting is process-wide)."""
    import subprocess
    import sys

    from thunder_mlir.runtime.host_allocator import user_chose_a_policy

    assert not user_chose_a_policy({})
    assert user_chose_a_policy({"THUNDER_MLIR_HOST_ALLOCATOR": "default"})
    assert user_chose_a_policy({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"})
    assert not user_chose_a_policy({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert user_chose_a_policy({"MALLOC_ARENA_MAX": "2"})
    assert user_chose_a_policy({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert user_chose_a_policy({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"})
    probe = ("from thunder_mlir.runtime import host_allocator, xla\n"
             "assert host_allocator.applied() is None\n"
             "xla.start_backends()\n"
             "print(host_allocator.applied())\n")

    def run(**env):
        import os

        e = {k: v for k, v in os.environ.items()
             if k not in ("THUNDER_MLIR_HOST_ALLOCATOR", "GLIBC_TUNABLES", "LD_PRELOAD")}
        e.update(env)
        out = subprocess.run([sys.executable, "-c", probe], env=e, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    import ctypes

    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018
        glibc = sys.platform.startswith("linux")
    except (OSError, AttributeError):
        glibc = False
    assert run() == str(glibc)
    assert run(THUNDER_MLIR_HOST_ALLOCATOR="default") == "False"
