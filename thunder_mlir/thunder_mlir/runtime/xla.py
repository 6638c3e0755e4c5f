"""Compiling StableHLO regions with XLA through jaxlib's client.

One compiled executable per (StableHLO text, device), shared across jitted functions: XLA's
own ``compile_and_load`` does no caching (toolchain.md §4) and costs 25 ms even for a
2x2 add. Below this in-memory cache, the persistent one (runtime/compile_cache.py) keeps
serialized executables on disk for later processes.
"""

from __future__ import annotations

import os
import re
import threading

import torch

from thunder_mlir.errors import CompileError, DeviceMismatchError
from thunder_mlir.runtime import compile_cache, host_allocator, jax_internals

# StableHLO argument attributes read by jaxlib/XLA: the argument's buffer may hold any
# result of its byte size (HloBufferDonorConfig) / holds result k (HloInputOutputAliasConfig)
DONOR_ATTR = "jax.buffer_donor"
ALIAS_ATTR = "tf.aliasing_output"

_LOCK = threading.Lock()
_EXECUTABLES: dict[tuple[str, str], object] = {}
# keys of _EXECUTABLES deserialized from the persistent cache (compile_stablehlo_for)
_FROM_DISK: set[tuple[str, str]] = set()
_MAX_EXECUTABLES = 512


_backends_started = False
_cpu_pool_threads: int | None = None  # the main CPU client's intra-op threads, once known
_single_thread_client = None  # a second CPU client with a 1-thread pool (small programs)
# the CPU clients thunder_mlir made with asynchronous dispatch off (``runs_inline``)
_INLINE_CLIENTS: list = []

#: A program whose XLA cost analysis gives fewer floating-point operations per kernel (the
#: top-level instructions of its optimized entry computation: fusions, library dots, copies)
#: than this runs on a CPU client with a one-thread intra-op pool (runtime/plan.py
#: ``place_small_programs``). On 2 cores (a quiet make bench, 2026-11-25 04:48 UTC) the tiny
#: GPT-2 and Llama forwards (2.0e6 and 1.6e6 FLOP per kernel, ~75 kernels) ran 9% and 24%
#: slower on the 2-thread pool than on one thread, the hand-offs of many small kernels
#: between threads costing more than the parallel work saves, while the MLP forward (1.1e7
#: FLOP per kernel) and the real MiniLM (1.2e7) ran 1.8x and 1.3x faster.
SMALL_KERNEL_FLOPS = 4e6


def _create_with_affinity(n: int, create):
    """``create()`` run with the calling thread's CPU affinity narrowed to ``n`` CPUs, so
    that the XLA CPU client it makes sizes its thread pools to ``n`` (tsl
    ``port::MaxParallelism`` reads ``sched_getaffinity``); the mask is then restored for
    this thread and for every thread the call started (they inherited the narrow mask)."""
    mask = os.sched_getaffinity(0)
    tasks = "/proc/self/task"
    before = set(os.listdir(tasks)) if os.path.isdir(tasks) else set()
    os.sched_setaffinity(0, set(sorted(mask)[:max(n, 1)]))
    try:
        return create()
    finally:
        os.sched_setaffinity(0, mask)
        for tid in (set(os.listdir(tasks)) - before) if before else ():
            try:
                os.sched_setaffinity(int(tid), mask)
            except OSError:  # a thread that has exited since
                pass


#: What thunder_mlir sets for XLA's GPU client when the user has set none of
#: ``XLA_PYTHON_CLIENT_*`` / ``XLA_CLIENT_MEM_FRACTION`` (read by jaxlib's
#: ``xla_client.generate_pjrt_gpu_plugin_options`` when the client is created): XLA's GPU
#: client would otherwise reserve 75% of the device's memory up front, beside torch's
#: caching allocator on the same GPU, leaving torch a quarter. Without preallocation XLA's
#: BFC allocator grows on demand (and keeps what it took, as torch's does).
GPU_MEMORY_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
_USER_GPU_MEMORY_VARS = ("XLA_PYTHON_CLIENT_", "XLA_CLIENT_MEM_FRACTION")


def gpu_memory_env(environ) -> dict[str, str]:
    """The variables ``start_backends`` adds to ``environ`` (a mapping like ``os.environ``)
    before jax creates its clients: ``GPU_MEMORY_ENV``, or nothing when the user set any
    ``XLA_PYTHON_CLIENT_*`` or ``XLA_CLIENT_MEM_FRACTION`` variable (the user's choice wins,
    whole: thunder_mlir does not mix its defaults into it)."""
    if any(k.startswith(_USER_GPU_MEMORY_VARS) for k in environ):
        return {}
    return dict(GPU_MEMORY_ENV)


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
    has no affinity API, the clients are used as they are (a CPU client made by jax may
    dispatch asynchronously: thunder_mlir's runs on it wait for their results,
    ``runs_inline``).

    Before any client exists, ``gpu_memory_env`` is applied to ``os.environ``: XLA's GPU
    client does not preallocate 75% of the GPU (it shares the device with torch's caching
    allocator), unless the user set the ``XLA_PYTHON_CLIENT_*`` variables themselves.

    The CPU client is made synchronous (``jax_cpu_enable_async_dispatch`` False, jax's
    option: "run computations inline without async dispatch"): a plan exports every result
    right after ``execute``, so asynchronous dispatch only adds a hand-off to a worker
    thread and back (~15 us of a ~75 us decode step of examples/generate.py's tiny GPT-2,
    benchmarks/decode.py). A user's ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` is kept, and so is
    the option of backends that already exist; runs on such a client wait for their
    results (``runs_inline``).

    The host allocator keeps freed memory for the next run (``host_allocator``: XLA's CPU
    results are new buffers at every run) unless the user chose a policy."""
    global _backends_started, _cpu_pool_threads
    if _backends_started:
        return
    _backends_started = True
    host_allocator.retain_freed_memory()
    from jax.extend import backend

    if jax_internals.backends_are_initialized():
        _cpu_pool_threads = len(os.sched_getaffinity(0)) \
            if hasattr(os, "sched_getaffinity") else None
        return  # (how jax made its CPU client is unknown: runs_inline is False for it)
    import jax

    os.environ.update(gpu_memory_env(os.environ))
    if "JAX_CPU_ENABLE_ASYNC_DISPATCH" not in os.environ:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    inline = not jax.config.values.get("jax_cpu_enable_async_dispatch", True)
    if not hasattr(os, "sched_getaffinity"):
        backend.backends()
    else:
        mask = os.sched_getaffinity(0)
        n = torch.get_num_threads()
        _cpu_pool_threads = min(max(n, 1), len(mask))
        if n >= len(mask):
            backend.backends()
        else:
            _create_with_affinity(n, backend.backends)
    if inline:
        _INLINE_CLIENTS.append(backend.get_backend("cpu"))


def runs_inline(device) -> bool:
    """Whether jax device ``device``'s client runs a computation before ``execute``
    returns (a CPU client thunder_mlir made with asynchronous dispatch off,
    ``start_backends``). The CPU runtime relies on it where it is true: resident written
    inputs are read by torch right after the run (runtime/resident.py), staging tensors
    are refilled at the next call (dlpack.ArgumentImports). Where it is false (jax's
    backends existed before thunder_mlir's first run, as after a ``jax.jit`` or
    ``jax.export`` call, or the user's ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` asks for
    asynchronous dispatch), a CPU run waits for its results before returning
    (``XlaStep.execute``): without that wait a compiled training step's parameters were
    read by torch before XLA had written them (tests/test_xla_threads.py)."""
    client = device.client
    return any(client is c for c in _INLINE_CLIENTS)


def cpu_pool_threads() -> int | None:
    """The intra-op threads of the main CPU client (``start_backends``); None where unknown
    (no affinity API)."""
    start_backends()
    return _cpu_pool_threads


def single_thread_cpu_device():
    """The jax Device of a CPU client whose intra-op pool has one thread (for programs
    below ``SMALL_KERNEL_FLOPS``), made on first use the way ``start_backends`` sizes the
    main client; None where the main CPU client has one thread already (torch at one
    thread) or its size is unknown (no affinity API). Its buffers and executables are its
    own: an executable of one client cannot read the other's buffers (XLA refuses:
    "Buffer passed to Execute() ... is on device cpu:0, but replica is assigned to device
    cpu:0")."""
    global _single_thread_client
    start_backends()
    if _cpu_pool_threads is None or _cpu_pool_threads <= 1:
        return None
    with _LOCK:
        if _single_thread_client is None:
            import jax

            asynchronous = bool(jax.config.values.get("jax_cpu_enable_async_dispatch", True))
            _single_thread_client = _create_with_affinity(
                1, lambda: jax_internals.make_cpu_client(asynchronous))
            if not asynchronous:
                _INLINE_CLIENTS.append(_single_thread_client)
    return _single_thread_client.devices()[0]


def jax_device(device: torch.device):
    """The jax Device for a torch device (cpu -> the CPU client, cuda:N -> GPU N)."""
    from jax.extend import backend

    start_backends()
    if device.type == "cpu":
        return backend.get_backend("cpu").devices()[0]
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return gpu_device(backend.get_backend("cuda").devices(), index, device)
    raise DeviceMismatchError(f"thunder_mlir runs on cpu and cuda devices, not {device}")


def gpu_device(devices, index: int, device: torch.device):
    """The jax device among ``devices`` (the CUDA client's) whose local hardware id is
    torch's CUDA ``index`` (both count the GPUs ``CUDA_VISIBLE_DEVICES`` leaves, in the same
    order); ``DeviceMismatchError`` when there is none."""
    for d in devices:
        if getattr(d, "local_hardware_id", d.id) == index:
            return d
    raise DeviceMismatchError(
        f"{device}: jax's CUDA client has no GPU {index} (it sees "
        f"{[str(d) for d in devices]}); torch and jax must see the same GPUs "
        f"(CUDA_VISIBLE_DEVICES)")


def _compile_options(xc, text: str = ""):
    """XLA's options for region ``text``. ``xla_allow_excess_precision`` off: by default XLA
    may drop a rounding to a 16-bit float that the program spells out (a bfloat16 dot whose
    result is converted back to float32 in the same region, as the backward of an autocast
    region's matmul is), computing more precisely than eager PyTorch does.

    A region with arguments aliased to results or donated (runtime/resident.py,
    runtime/autograd.py) also gets ``xla_cpu_copy_insertion_use_region_analysis``: without
    it XLA's CPU copy insertion copies an aliased parameter that a backward dot reads
    besides its update (a training step's weights: the copies are a second set of most
    parameters; measured on the MLP of benchmarks/optimizer_step.py and a 2-layer jax.grad
    step with ``donate_argnums``, jaxlib 0.10.2: 1 copy of the 512x512 weight without,
    none with)."""
    opts = xc.CompileOptions()
    opts.env_option_overrides = option_overrides(text)  # (a copy is returned: assign whole)
    return opts


def option_overrides(text: str = "") -> list[tuple[str, object]]:
    """The XLA debug options ``_compile_options`` sets for region ``text`` (name, value)."""
    overrides: list[tuple[str, object]] = [("xla_allow_excess_precision", False)]
    if ALIAS_ATTR in text or DONOR_ATTR in text:
        overrides.append(("xla_cpu_copy_insertion_use_region_analysis", True))
    return overrides


def compile_stablehlo(text: str, device: torch.device):
    """Compile a StableHLO module (entry ``@main``) for ``device``; cached by text."""
    xc = jax_internals.xla_client()
    key = (text, str(device))
    exe = _EXECUTABLES.get(key)
    if exe is not None:
        return exe
    dev = jax_device(device)
    client = dev.client
    devices, options = xc.DeviceList((dev,)), _compile_options(xc, text)
    disk_key = None
    if compile_cache.compile_cache_dir() is not None:
        disk_key = compile_cache.entry_key(text, options.SerializeAsString(), dev)
        exe = compile_cache.load(disk_key, dev, devices, options)
    from_disk = exe is not None
    if exe is None:
        try:
            exe = client.compile_and_load(text, devices, options)
        except Exception as e:  # XlaRuntimeError has no stable import path
            raise CompileError(f"XLA rejected a lowered region: {e}\n--- module ---\n{text}") \
                from None
        if disk_key is not None:
            compile_cache.store(disk_key, dev, exe)
    _remember(key, exe, from_disk)
    return exe


def clear_memory_cache() -> None:
    """Forget the executables compiled in this process (the persistent cache on disk is
    kept): the next compile of a text loads it from disk or compiles it again."""
    with _LOCK:
        _EXECUTABLES.clear()
        _FROM_DISK.clear()


def kernel_count(executable) -> int:
    """The top-level instructions of ``executable``'s optimized entry computation that do
    work (fusions, library calls, copies, loops: not parameters, constants, tuples,
    get-tuple-element or bitcasts), read from XLA's HLO text; at least 1."""
    text = executable.hlo_modules()[0].to_string()
    start = text.find("\nENTRY ")
    body = text[start:text.find("\n}", start)] if start >= 0 else ""
    n = 0
    for line in body.splitlines()[1:]:
        m = _OPCODE.search(line)
        if m is not None and m.group(1) not in _NO_WORK:
            n += 1
    return max(n, 1)


_OPCODE = re.compile(r" = .*?\s([a-z][\w-]*)\(")
_NO_WORK = frozenset(("parameter", "constant", "tuple", "get-tuple-element", "bitcast"))


def flops(executable) -> float:
    """Floating-point operations of one run of ``executable`` (XLA's ``HloCostAnalysis``,
    ``cost_analysis()["flops"]``); 0 where the client gives none."""
    try:
        return float(executable.cost_analysis().get("flops", 0.0))
    except Exception:  # noqa: BLE001 - a client without cost analysis
        return 0.0


def compile_stablehlo_for(text: str, device: torch.device, dev):
    """``compile_stablehlo(text, device)``'s executable loaded on jax device ``dev`` of
    another client of the same platform (the one-thread CPU client) through jaxlib's
    ``serialize_executable`` / ``deserialize_executable``: about 1 ms, no recompile (the
    machine code does not depend on the client's thread pool). An executable that was
    itself deserialized from the persistent cache is loaded from its entry's bytes instead:
    jaxlib cannot serialize such an executable again (the copy fails at run time with
    "NOT_FOUND: Function ... not found"). Cached per (text, client)."""
    xc = jax_internals.xla_client()
    key = (text, f"{device}@{id(dev.client)}")
    exe = _EXECUTABLES.get(key)
    if exe is not None:
        return exe
    main = compile_stablehlo(text, device)
    options = _compile_options(xc, text)
    payload = None
    if (text, str(device)) not in _FROM_DISK:
        payload = main.client.serialize_executable(main)
    elif compile_cache.compile_cache_dir() is not None:
        payload = compile_cache.read_payload(
            compile_cache.entry_key(text, options.SerializeAsString(), jax_device(device)))
    devices = xc.DeviceList((dev,))
    if payload is not None:
        exe = dev.client.deserialize_executable(payload, devices, options)
    else:  # the entry has gone since: compile again, on this client
        exe = dev.client.compile_and_load(text, devices, options)
    _remember(key, exe)
    return exe


def _remember(key: tuple[str, str], exe, from_disk: bool = False) -> None:
    with _LOCK:
        if len(_EXECUTABLES) >= _MAX_EXECUTABLES:
            _FROM_DISK.discard(old := next(iter(_EXECUTABLES)))
            _EXECUTABLES.pop(old)
        _EXECUTABLES[key] = exe
        if from_disk:
            _FROM_DISK.add(key)
