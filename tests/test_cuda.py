"""CUDA semantics of the runtime (docs/gpu.md), against eager PyTorch on the same GPU.

Every test is marked ``cuda``: without a GPU it is collected and skipped with the reason
(conftest.py). Run on a lent H100/H200 by ``tools/gpu_check.sh``."""

from __future__ import annotations

import os

import pytest
import torch

import thunder_mlir

pytestmark = pytest.mark.cuda


def test_add_matches_eager_on_cuda():
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    out = thunder_mlir.jit(lambda a, b: a * b + a)(x, y)
    assert out.device == x.device
    torch.testing.assert_close(out, x * y + x)


def test_inputs_are_ordered_without_a_host_sync():
    """A torch kernel still queued on torch's stream when the program is called: XLA must
    read its result (stream protocol), and the call must not synchronize the host
    (``set_sync_debug_mode("error")`` raises on a stream or device synchronize)."""
    jf = thunder_mlir.jit(lambda a: a.sum(0) * 2)
    warm = torch.randn(4096, 4096, device="cuda")
    jf(warm)  # compile outside the checked region
    torch.cuda.synchronize()
    a = torch.randn(4096, 4096, device="cuda")
    b = a @ a  # long enough to be still running when jf is called
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = jf(b)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out, (a @ a).sum(0) * 2, rtol=1e-4, atol=1e-2)


def test_outputs_are_ordered_before_torch_kernels():
    """torch reads XLA's result right after the call, on its own stream."""
    jf = thunder_mlir.jit(lambda a: (a @ a).relu())
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):
        out = jf(a)
        got = out.sum().item()  # a torch kernel on torch's stream, right after
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.testing.assert_close(got, (a @ a).relu().sum().item(), rtol=1e-3, atol=1.0)


def test_xla_does_not_preallocate_most_of_the_gpu():
    """After a program ran, torch can still allocate half of the GPU (XLA's default
    preallocation would hold 75%)."""
    if any(k.startswith("XLA_PYTHON_CLIENT_") and k != "XLA_PYTHON_CLIENT_PREALLOCATE"
           for k in os.environ):
        pytest.skip("the user's XLA_PYTHON_CLIENT_* settings decide XLA's memory here")
    thunder_mlir.jit(lambda a: a + 1)(torch.ones(4, device="cuda"))
    free, total = torch.cuda.mem_get_info()
    assert free > 0.5 * total, f"free {free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB"
    big = torch.empty(int(0.5 * total), dtype=torch.uint8, device="cuda")
    del big


def test_training_step_with_donation_matches_eager():
    """A forward+backward whose backward donates residual buffers on the GPU; also under
    saved_tensors_hooks (residuals come back from torch: a copy is donated)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 8)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                              torch.nn.Linear(64, 8)).cuda()
    ref.load_state_dict(model.state_dict())
    jm = thunder_mlir.jit(model)
    x = torch.randn(16, 32, device="cuda")
    for hooks in (False, True):
        for m in (model, ref):
            m.zero_grad()
        if hooks:
            ctx = torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)
        else:
            import contextlib
            ctx = contextlib.nullcontext()
        with ctx:
            jm(x).square().sum().backward()
            ref(x).square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)


def test_whole_step_keeps_parameters_and_state_resident_on_cuda():
    """``jit(step)`` on a GPU: parameters and AdamW state are resident in XLA's memory and
    donated (runtime/resident.py): after the first step their addresses stay, their values
    follow eager's step for step (bf16 tolerance), and a torch kernel reading a parameter
    right after a step sees the new values (stream order)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 8)).cuda().to(torch.bfloat16)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                              torch.nn.Linear(128, 8)).cuda().to(torch.bfloat16)
    ref.load_state_dict(model.state_dict())
    opt, opt_ref = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref))

    def step(m, o, x):
        loss = m(x).float().square().mean()
        loss.backward()
        o.step()
        o.zero_grad(set_to_none=True)
        return loss

    jstep = thunder_mlir.jit(step)
    addresses = None
    for i in range(4):
        x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        got, want = jstep(model, opt, x), step(ref, opt_ref, x)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        sums = [p.float().sum().item() for p in model.parameters()]  # read right after
        for p, q, s in zip(model.parameters(), ref.parameters(), sums):
            torch.testing.assert_close(p, q, rtol=2e-2, atol=2e-2)
            assert s == p.float().sum().item()
        now = [p.data_ptr() for p in model.parameters()]
        if i == 1:
            addresses = now
        elif i > 1:
            assert now == addresses  # resident from the first step: no new memory
    stage = thunder_mlir.last_traces(jstep)[-1].text
    assert "resident, donated" in stage, stage[-400:]


def test_static_cache_decode_step_writes_the_cache_in_place_on_cuda():
    """A decode step writing a static KV cache (``index_copy_``) on a GPU: the cache is
    resident and donated, so its address stays across steps, and its values are eager's."""
    torch.manual_seed(0)
    cache = torch.zeros(2, 4, 16, 8, device="cuda", dtype=torch.bfloat16)
    ref = cache.clone()

    def decode(cache, k, pos):
        cache.index_copy_(2, pos, k)
        return cache.float().sum(-1)

    jdecode = thunder_mlir.jit(decode)
    for t in range(5):
        k = torch.randn(2, 4, 1, 8, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor([t], device="cuda")
        torch.testing.assert_close(jdecode(cache, k, pos), decode(ref, k, pos))
        torch.testing.assert_close(cache, ref, rtol=0, atol=0)
        if t == 1:
            address = cache.data_ptr()
        elif t > 1:
            assert cache.data_ptr() == address


def test_autocast_cuda_bf16_matches_eager():
    lin = torch.nn.Linear(64, 32).cuda()
    x = torch.randn(8, 64, device="cuda")
    jm = thunder_mlir.jit(lin)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, exp = jm(x), lin(x)
    assert out.dtype == exp.dtype == torch.bfloat16
    torch.testing.assert_close(out, exp, rtol=1.6e-2, atol=1e-2)


def test_dropout_on_cuda_draws_and_advances():
    """Random ops on CUDA: a fraction p of zeros, a different mask at each call."""
    jf = thunder_mlir.jit(lambda a: torch.nn.functional.dropout(a, 0.5, training=True))
    a = torch.ones(1 << 16, device="cuda")
    o1, o2 = jf(a), jf(a)
    frac = (o1 == 0).float().mean().item()
    assert 0.45 < frac < 0.55
    assert not torch.equal(o1, o2)


def test_mixing_cuda_and_cpu_is_a_clear_error():
    with pytest.raises(thunder_mlir.UnsupportedInputError, match="several devices"):
        thunder_mlir.jit(lambda a, b: a + b)(torch.ones(2, device="cuda"), torch.ones(2))


def test_cpu_scalar_beside_cuda_tensors_matches_eager():
    """A 0-d CPU tensor beside CUDA tensors, as eager allows (frontend/cpu_scalars.py): read,
    and written in place (written back into the caller's CPU tensor)."""
    def f(a, s):
        s += 1
        return a * s + s

    x = torch.randn(8, device="cuda")
    s_eager, s_jit = torch.tensor(2.0), torch.tensor(2.0)
    expected = f(x, s_eager)
    out = thunder_mlir.jit(f)(x, s_jit)
    assert out.device == x.device and s_jit.device.type == "cpu"
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(s_jit, s_eager)


def test_program_on_cuda_1_runs_on_gpu_1():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    x = torch.randn(8, device="cuda:1")
    out = thunder_mlir.jit(lambda a: a.exp())(x)
    assert out.device == torch.device("cuda:1")
    torch.testing.assert_close(out, x.exp())


def test_compile_cache_key_names_this_gpu():
    from jax.extend import backend

    from thunder_mlir.runtime import compile_cache

    dev = backend.get_backend("cuda").devices()[0]
    desc = compile_cache.device_description(dev)
    assert torch.cuda.get_device_name(0).split()[1].encode() in desc, desc
