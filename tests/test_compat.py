"""Version compatibility and the CUDA runtime's decisions that can be checked without a GPU:
the private torch/jaxlib entry points (frontend/torch_internals.py, runtime/jax_internals.py)
on the installed versions, the XLA GPU client's memory settings and who wins, the compile
cache's device description, device placement errors. The CUDA behaviour itself is in
tests/test_cuda.py (skipped without a GPU)."""

from __future__ import annotations

import types

import pytest
import torch

import thunder_mlir
from thunder_mlir.errors import DeviceMismatchError
from thunder_mlir.frontend import torch_internals
from thunder_mlir.runtime import compile_cache, dlpack, jax_internals, xla


def test_versions_are_inside_the_declared_ranges():
    """pyproject.toml declares torch 2.11-2.14 and jax/jaxlib 0.10.2-0.12."""
    import jax

    assert (2, 11) <= torch_internals.TORCH_VERSION[:2] <= (2, 14), torch.__version__
    assert (0, 10, 2) <= jax_internals.JAXLIB_VERSION < (0, 13), jax.__version__


def test_torch_cond_runs_through_the_version_specific_hop_entry():
    """torch 2.13 runs torch.cond eagerly through ``_hop_compile_and_call``, torch 2.11
    through ``setup_compilation_env`` + ``torch.compile``; either way a traced cond becomes
    one program with both branches (checked against eager for both predicates)."""
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))

    jf = thunder_mlir.jit(f)
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(jf(x), f(x))
    assert thunder_mlir.fallback_ops(jf) == []
    assert len(thunder_mlir.cache_info(jf)["entries"]) == 1  # one program, both branches


def test_hop_hooks_outside_tracing_keep_torch_behaviour():
    """The torch.compile patch (torch < 2.13 layout) passes every call that does not carry
    thunder_mlir's backend to torch unchanged."""
    seen = []

    def fake_compile(*args, **kwargs):
        seen.append((args, kwargs))
        return "compiled"

    wrapped = torch_internals._compile_direct(fake_compile)
    assert wrapped(len, backend="eager") == "compiled"
    assert wrapped(len, backend=torch_internals.DIRECT_CALL) is len
    assert seen == [((len,), {"backend": "eager"})]


def test_hop_hooks_pick_the_entry_point_this_torch_has():
    import torch._higher_order_ops.utils as u

    hooks = torch_internals.hop_eager_hooks(lambda: False)
    names = {attr for _, attr, _ in hooks}
    if hasattr(u, "_hop_compile_and_call"):
        assert names == {"_hop_compile_and_call"}
    else:
        assert names == {"setup_compilation_env", "compile"}


def test_result_handler_on_this_jaxlib():
    """``array_result_handler`` lost ``_skip_checks`` in jaxlib 0.11: the wrapper builds a
    handler on whichever is installed (the plan's fast path, not its fallback)."""
    import numpy as np
    from jax.extend import backend

    dev = backend.get_backend("cpu").devices()[0]
    h = jax_internals.result_handler((2, 3), np.dtype("float32"), dev)
    assert h is not None


def test_direct_dlpack_keeps_int64():
    """The direct DLPack import (jaxlib >= extension 467) keeps int64 with x64 off."""
    assert jax_internals.DIRECT_DLPACK
    x = torch.arange(6, dtype=torch.int64)
    torch.testing.assert_close(thunder_mlir.jit(lambda t: t * 3)(x), x * 3)


# --- XLA's GPU client memory ---------------------------------------------------------------


def test_gpu_memory_env_disables_preallocation_by_default():
    assert xla.gpu_memory_env({"PATH": "/bin"}) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


@pytest.mark.parametrize("var", ["XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                                 "XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_CLIENT_MEM_FRACTION"])
def test_gpu_memory_env_user_settings_win(var):
    """Any XLA_PYTHON_CLIENT_* (or XLA_CLIENT_MEM_FRACTION) of the user's: nothing added."""
    assert xla.gpu_memory_env({var: "true"}) == {}


def test_gpu_memory_env_is_applied_before_the_backends_start():
    """This process's backends were started by thunder_mlir (the suite runs no jax first):
    the variable is in the environment jax's GPU client factory read."""
    import os

    xla.start_backends()
    user = any(k.startswith(("XLA_PYTHON_CLIENT_", "XLA_CLIENT_MEM_FRACTION"))
               and k != "XLA_PYTHON_CLIENT_PREALLOCATE" for k in os.environ)
    if not user:
        assert os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE") is not None


# --- the compile cache's device description ------------------------------------------------


def _fake_device(platform, kind, cc=None):
    client = types.SimpleNamespace(platform=platform, platform_version="v")
    d = types.SimpleNamespace(client=client, device_kind=kind)
    if cc is not None:
        d.compute_capability = cc
    return d


def test_cache_key_holds_gpu_model_and_driver(monkeypatch):
    h100 = _fake_device("cuda", "NVIDIA H100 80GB HBM3", "9.0")
    h200 = _fake_device("cuda", "NVIDIA H200", "9.0")
    a100 = _fake_device("cuda", "NVIDIA H100 80GB HBM3", "8.0")
    monkeypatch.setattr(compile_cache, "_gpu_driver", "NVRM version: 580.95.05")
    k = compile_cache.entry_key("m", b"o", h100)
    assert b"NVIDIA H100 80GB HBM3" in compile_cache.device_description(h100)
    assert b"580.95.05" in compile_cache.device_description(h100)
    assert k != compile_cache.entry_key("m", b"o", h200)
    assert k != compile_cache.entry_key("m", b"o", a100)
    monkeypatch.setattr(compile_cache, "_gpu_driver", "NVRM version: 590.10")
    assert k != compile_cache.entry_key("m", b"o", h100)


def test_cpu_cache_key_holds_the_isa_not_a_driver():
    from jax.extend import backend

    dev = backend.get_backend("cpu").devices()[0]
    desc = compile_cache.device_description(dev)
    assert compile_cache._host_isa().encode() in desc and b"NVRM" not in desc


# --- device placement ----------------------------------------------------------------------


def test_gpu_device_maps_torch_index_to_the_jax_device():
    devs = [types.SimpleNamespace(id=i, local_hardware_id=i) for i in range(2)]
    assert xla.gpu_device(devs, 1, torch.device("cuda:1")) is devs[1]
    with pytest.raises(DeviceMismatchError, match="no GPU 3"):
        xla.gpu_device(devs, 3, torch.device("cuda:3"))


def test_mixing_devices_is_a_clear_error():
    """A CPU and a meta tensor (standing in for cuda:0 and cuda:1) in one call."""
    with pytest.raises(thunder_mlir.UnsupportedInputError, match="several devices"):
        thunder_mlir.jit(lambda a, b: a + b)(torch.ones(2), torch.ones(2, device="meta"))


def test_cuda_tensor_on_another_gpu_is_refused():
    """``check_same_gpu`` with a fake tensor on GPU 1 and a jax device of GPU 0."""
    t = types.SimpleNamespace(device=torch.device("cuda:1"), get_device=lambda: 1)
    dev = types.SimpleNamespace(platform="gpu", local_hardware_id=0, id=0)
    with pytest.raises(DeviceMismatchError, match="cuda:1"):
        dlpack.check_same_gpu(t, dev)
    dlpack.check_same_gpu(types.SimpleNamespace(device=torch.device("cuda:0"),
                                                get_device=lambda: 0), dev)
