"""Compiling StableHLO regions with XLA through jaxlib's client.

One compiled executable per (StableHLO text, device), shared across jitted functions: XLA's
own ``compile_and_load`` does no caching (toolchain.md §4) and costs 25 ms even for a
2x2 add. Below this in-memory cache, the persistent one (runtime/compile_cache.py) keeps
serialized executables on disk for later processes.
"""

from __future__ import annotations

import os
import threading

import torch

from thunder_mlir.errors import CompileError
from thunder_mlir.runtime import compile_cache

_LOCK = threading.Lock()
_EXECUTABLES: dict[tuple[str, str], object] = {}
_MAX_EXECUTABLES = 512


_backends_started = False


def start_backends() -> None:
    """Create jax's XLA clients (once per process) with the CPU client's intra-op thread
    pool sized to ``torch.get_num_threads()``, so a jitted program uses the threads eager
    PyTorch would.

    The TFRT CPU client sizes its pools from the CPUs the creating thread may run on
    (tsl ``port::MaxParallelism``, i.e. ``sched_getaffinity``), and jaxlib 0.10 offers no
    other knob: ``--xla_cpu_multi_thread_eigen=false`` no longer limits it (dots and
    reductions run as YNNPACK fusions on the client's pool). So when torch uses fewer
    threads than the process may, the calling thread's affinity is narrowed to that many
    CPUs while the clients are created and then restored, for it and for every thread the
    clients started (threads inherit the mask; restoring it leaves them free to run
    anywhere). Where jax's backends already exist (the user ran jax first) or the platform
    has no affinity API, the clients are used as they are.

    The CPU client is made synchronous (``jax_cpu_enable_async_dispatch`` False, jax's
    option: "run computations inline without async dispatch"): a plan exports every result
    right after ``execute``, so asynchronous dispatch only adds a hand-off to a worker
    thread and back (~15 us of a ~75 us decode step of examples/generate.py's tiny GPT-2,
    benchmarks/decode.py). A user's ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` is kept, and so is
    the option of backends that already exist."""
    global _backends_started
    if _backends_started:
        return
    _backends_started = True
    from jax._src import xla_bridge
    from jax.extend import backend

    if xla_bridge.backends_are_initialized():
        return
    if "JAX_CPU_ENABLE_ASYNC_DISPATCH" not in os.environ:
        import jax

        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if not hasattr(os, "sched_getaffinity"):
        backend.backends()
        return
    mask = os.sched_getaffinity(0)
    n = torch.get_num_threads()
    if n >= len(mask):
        backend.backends()
        return
    tasks = "/proc/self/task"
    before = set(os.listdir(tasks)) if os.path.isdir(tasks) else set()
    os.sched_setaffinity(0, set(sorted(mask)[:max(n, 1)]))
    try:
        backend.backends()
    finally:
        os.sched_setaffinity(0, mask)
        for tid in (set(os.listdir(tasks)) - before) if before else ():
            try:
                os.sched_setaffinity(int(tid), mask)
            except OSError:  # a thread that has exited since
                pass


def jax_device(device: torch.device):
    """The jax Device for a torch device (cpu -> the CPU client, cuda:N -> GPU N)."""
    from jax.extend import backend

    start_backends()
    if device.type == "cpu":
        return backend.get_backend("cpu").devices()[0]
    if device.type == "cuda":
        devs = backend.get_backend("cuda").devices()
        return devs[device.index or 0]
    raise NotImplementedError(f"thunder_mlir runs on cpu and cuda devices, not {device}")


def _compile_options(xc):
    """XLA's options for every region. ``xla_allow_excess_precision`` off: by default XLA
    may drop a rounding to a 16-bit float that the program spells out (a bfloat16 dot whose
    result is converted back to float32 in the same region, as the backward of an autocast
    region's matmul is), computing more precisely than eager PyTorch does."""
    opts = xc.CompileOptions()
    opts.env_option_overrides = [("xla_allow_excess_precision", False)]
    return opts


def compile_stablehlo(text: str, device: torch.device):
    """Compile a StableHLO module (entry ``@main``) for ``device``; cached by text."""
    from jax._src.lib import xla_client as xc

    key = (text, str(device))
    exe = _EXECUTABLES.get(key)
    if exe is not None:
        return exe
    dev = jax_device(device)
    client = dev.client
    devices, options = xc.DeviceList((dev,)), _compile_options(xc)
    disk_key = None
    if compile_cache.compile_cache_dir() is not None:
        disk_key = compile_cache.entry_key(text, options.SerializeAsString(), dev)
        exe = compile_cache.load(disk_key, dev, devices, options)
    if exe is None:
        try:
            exe = client.compile_and_load(text, devices, options)
        except Exception as e:  # XlaRuntimeError has no stable import path
            raise CompileError(f"XLA rejected a lowered region: {e}\n--- module ---\n{text}") \
                from None
        if disk_key is not None:
            compile_cache.store(disk_key, dev, exe)
    with _LOCK:
        if len(_EXECUTABLES) >= _MAX_EXECUTABLES:
            _EXECUTABLES.pop(next(iter(_EXECUTABLES)))
        _EXECUTABLES[key] = exe
    return exe


def clear_memory_cache() -> None:
    """Forget the executables compiled in this process (the persistent cache on disk is
    kept): the next compile of a text loads it from disk or compiles it again."""
    with _LOCK:
        _EXECUTABLES.clear()
