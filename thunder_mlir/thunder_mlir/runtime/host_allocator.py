"""The host allocator's policy for the buffers XLA allocates on the CPU at every run.

A compiled program's results (a training step's new parameters and optimizer state: three
times the parameters' bytes) are new buffers at each run, freed after the runtime copied
them into the caller's tensors (runtime/write_back.py). glibc's ``malloc`` returns the top
of its heap to the kernel as soon as more than ``M_TRIM_THRESHOLD`` bytes are free there
(by default twice a threshold it adjusts to the largest freed block), so the next run
touches fresh pages again: on the MLP training step of ``benchmarks/optimizer_step.py``
(7.6 MiB of results) 140-170 page faults and 0.26-0.29 ms of kernel time per 2.7 ms step,
none for eager PyTorch's step, whose buffers stay in the heap.

``retain_freed_memory`` fixes both thresholds (``mallopt``, glibc's ``malloc.h``):
blocks under ``MMAP_THRESHOLD`` come from the heap, and up to ``TRIM_THRESHOLD`` free bytes
stay mapped at its top for the next run. The same MLP step then has 8-11 faults per step
and no kernel time. It is the policy of the allocators PyTorch recommends for CPU training
(jemalloc, tcmalloc: freed memory kept for reuse); the price is up to ``TRIM_THRESHOLD``
bytes of freed memory kept by the process (``malloc_trim(0)`` returns them).

The setting is process-wide, so it is applied once, by ``runtime.xla.start_backends``, and
not where the user chose an allocator policy: ``THUNDER_MLIR_HOST_ALLOCATOR=default``,
glibc's ``malloc`` tunables in ``GLIBC_TUNABLES`` or ``MALLOC_*`` variables, or a
preloaded allocator (``LD_PRELOAD``) leave the process as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: Blocks below this many bytes come from the heap (glibc's largest allowed value on 64-bit
#: hosts, the ceiling of its own dynamic threshold: ``DEFAULT_MMAP_THRESHOLD_MAX``).
MMAP_THRESHOLD = 32 << 20
#: Free bytes kept mapped at the top of the heap before it is trimmed.
TRIM_THRESHOLD = 64 << 20

_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3

_applied: bool | None = None


def user_chose_a_policy(environ=os.environ) -> bool:
    """Whether the process's allocator policy is the user's: the opt-out, glibc malloc
    tunables, or a preloaded allocator."""
    if environ.get("THUNDER_MLIR_HOST_ALLOCATOR", "") == "default":
        return True
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return True
    if any(k.startswith("MALLOC_") for k in environ):  # MALLOC_TRIM_THRESHOLD_, MALLOC_ARENA_MAX
        return True
    return bool(environ.get("LD_PRELOAD", "").strip())


def retain_freed_memory() -> bool:
    """Apply the module's policy once per process; True when it is in effect (glibc's
    ``mallopt`` accepted both thresholds), False on other C libraries and platforms and
    where ``user_chose_a_policy``. Never raises."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or user_chose_a_policy():
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def applied() -> bool | None:
    """Whether ``retain_freed_memory`` is in effect (None: not asked yet)."""
    return _applied
