"""Zero-copy tensor transfer between torch and XLA (jaxlib) through DLPack.

Traps handled here (toolchain.md §5–6), each with a test in tests/test_runtime.py:
* a tensor that requires grad cannot be exported: it is detached first;
* a transposed (dense, not row-major) tensor would be read as row-major by the raw
  executable: every input is made contiguous (free when it already is);
* strided views with gaps or stride 0 raise in the importer: ``contiguous`` copies them;
* ``jax.dlpack.from_dlpack`` turns int64/float64 into 32-bit without x64: the direct
  importer (no dtype canonicalization) is used, with the public call as a fallback.
On CUDA the torch stream is synchronized before XLA reads a tensor and torch consumes XLA
outputs through ``torch.from_dlpack`` (which passes its stream to the producer). The CUDA
path is written for correctness but untested here (no GPU in CI).
"""

from __future__ import annotations

import weakref

import torch
import torch.utils.dlpack as tdl

try:  # private, faster entry point (jaxlib >= 0.8 extension 467); public call as fallback
    from jax._src.lib import _jax, jaxlib_extension_version

    _DIRECT = jaxlib_extension_version >= 467 and hasattr(_jax, "dlpack_managed_tensor_to_buffer")
except ImportError:  # pragma: no cover
    _DIRECT = False

_DL_DEVICE_TYPE = {"cpu": 1, "cuda": 2}


def prepare(t: torch.Tensor) -> torch.Tensor:
    """The tensor XLA can read: detached, conj/neg resolved, row-major contiguous."""
    if t.requires_grad:
        t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    return t.contiguous()


def to_xla(t: torch.Tensor, device):
    """Import a torch tensor as an XLA buffer on jax ``device`` (zero-copy when aligned)."""
    if t.requires_grad or not t.is_contiguous() or t.is_conj() or t.is_neg():
        t = prepare(t)
    if t.device.type == "cuda":
        torch.cuda.current_stream(t.device).synchronize()
    if _DIRECT:
        return _jax.dlpack_managed_tensor_to_buffer(
            tdl.to_dlpack(t), device, None, None, _DL_DEVICE_TYPE[t.device.type])
    import jax.dlpack

    return jax.dlpack.from_dlpack(t, device=device)


def to_torch(arr, on_cpu: bool) -> torch.Tensor:
    """Export an XLA buffer as a torch tensor sharing its memory."""
    if on_cpu:
        if _DIRECT:  # skips jax.Array.__dlpack__'s Python layers (~5 us)
            return tdl.from_dlpack(_jax.buffer_to_dlpack_managed_tensor(arr))
        return tdl.from_dlpack(arr.__dlpack__())
    return torch.from_dlpack(arr)  # hands torch's stream to the producer for ordering


class ImportCache:
    """Reuses the XLA buffer of a torch tensor that is passed again unchanged.

    A hit needs the same Python tensor object (checked through a weak reference), the same
    version counter (torch bumps it on every in-place update), data pointer, shape and
    strides. Only zero-copy imports are cached: their buffer *is* the tensor's memory, so
    even writes that bypass the version counter are seen. At most ``capacity`` entries
    (oldest evicted), so at most that many tensors are kept alive by the cache.
    """

    def __init__(self, device, capacity: int):
        self.device = device
        self.capacity = max(capacity, 1)
        self._entries: dict[int, tuple] = {}

    def __call__(self, t: torch.Tensor):
        e = self._entries.get(id(t))
        if e is not None and e[0]() is t and e[1] == t._version and e[2] == t.data_ptr() \
                and e[3] == t.stride() and e[4] == t.shape:
            return e[5]
        buf = to_xla(t, self.device)
        if buf.unsafe_buffer_pointer() == t.data_ptr():
            if len(self._entries) >= self.capacity:
                self._entries.pop(next(iter(self._entries)))
            self._entries[id(t)] = (weakref.ref(t), t._version, t.data_ptr(), t.stride(),
                                    t.shape, buf)
        return buf
