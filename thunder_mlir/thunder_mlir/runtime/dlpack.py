"""Zero-copy tensor transfer between torch and XLA (jaxlib) through DLPack.

Traps handled here (toolchain.md §5–6), each with a test in tests/test_runtime.py:
* a tensor that requires grad cannot be exported: it is detached first;
* a transposed (dense, not row-major) tensor would be read as row-major by the raw
  executable: every input is made contiguous (free when it already is);
* strided views with gaps or stride 0 raise in the importer: ``contiguous`` copies them;
* ``jax.dlpack.from_dlpack`` turns int64/float64 into 32-bit without x64: the direct
  importer (no dtype canonicalization) is used, with the public call as a fallback.
On CUDA (written for an H100/H200, run only where a device is lent: docs/gpu.md):
* no host synchronization per input: a tensor is exported with the DLPack stream protocol,
  ``t.__dlpack__(stream=s)`` where ``s`` is the stream XLA's client waits on for external
  data (``jax_internals.consumer_stream``); torch records an event on its current stream
  and makes ``s`` wait for it, a device-side dependency only;
* outputs go to torch through ``torch.from_dlpack``, which hands torch's current stream to
  jax's ``__dlpack__``, so torch's later kernels wait for XLA's results the same way;
* the tensor must be on the GPU of the program's jax device: ``to_xla`` raises
  ``DeviceMismatchError`` naming both otherwise (XLA would copy it silently, or read the
  wrong memory).
"""

from __future__ import annotations

import threading
import weakref
from typing import Sequence

import torch
import torch.utils.dlpack as tdl

from thunder_mlir.errors import DeviceMismatchError
from thunder_mlir.runtime import jax_internals
from thunder_mlir.runtime.jax_internals import DIRECT_DLPACK as _DIRECT

_DL_DEVICE_TYPE = {"cpu": 1, "cuda": 2}
STAGING_BYTES = 1 << 16  # the largest argument ArgumentImports copies into a staging tensor


def prepare(t: torch.Tensor) -> torch.Tensor:
    """The tensor XLA can read: detached, conj/neg resolved, row-major contiguous, dense (a
    sparse or mkldnn result of a torch fallback op, eager's layout where it is returned, is
    read by XLA as its dense values)."""
    if t.requires_grad:
        t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    return t.contiguous()


def to_xla(t: torch.Tensor, device):
    """Import a torch tensor as an XLA buffer on jax ``device`` (zero-copy when aligned).

    CPU tensors go to a CPU device; a CUDA tensor must be on the GPU of ``device`` (else
    ``DeviceMismatchError``) and is ordered after torch's pending work on its current
    stream without a host synchronization (module docstring)."""
    if t.requires_grad or not t.is_contiguous() or t.is_conj() or t.is_neg():
        t = prepare(t)
    if t.is_cpu:  # (t.device builds a torch.device: ~0.3 us of a ~5 us import)
        if device.platform != "cpu":  # host data for a GPU (a mesh's shards): a jax copy
            return _host_to_device(t, device)
        if _DIRECT:
            return jax_internals.import_dlpack(tdl.to_dlpack(t), device, None, 1)
        import jax.dlpack

        return jax.dlpack.from_dlpack(t, device=device)
    if t.is_cuda:
        return _cuda_to_xla(t, device)
    raise DeviceMismatchError(f"thunder_mlir runs on cpu and cuda tensors, not on {t.device}")


def _host_to_device(t: torch.Tensor, device):
    """A CPU tensor copied to jax ``device`` (another platform): imported on jax's CPU
    device, then ``device_put`` (the buffer is jax's own, so it may be donated)."""
    import jax
    from jax.extend import backend

    host = backend.get_backend("cpu").devices()[0]
    return jax.device_put(to_xla(t, host), device, may_alias=False)


def is_cpu_array(arr) -> bool:
    """Whether single-device jax array ``arr`` lives on a CPU device."""
    return next(iter(arr.devices())).platform == "cpu"


_CONSUMER_STREAMS: dict = {}  # jax device -> XLA's stream for external data (or None)


def consumer_stream(device) -> int | None:
    """XLA's stream that waits for external producers on jax ``device`` (cached)."""
    s = _CONSUMER_STREAMS.get(device, -1)
    if s == -1:
        s = _CONSUMER_STREAMS[device] = jax_internals.consumer_stream(device)
    return s


def check_same_gpu(t: torch.Tensor, device) -> None:
    """Raise ``DeviceMismatchError`` unless CUDA tensor ``t`` lives on the GPU of jax
    ``device`` (its platform is a GPU and its local hardware id is ``t``'s index)."""
    platform = getattr(device, "platform", None)
    hw = getattr(device, "local_hardware_id", getattr(device, "id", None))
    if platform not in ("gpu", "cuda") or hw != t.get_device():
        raise DeviceMismatchError(
            f"a tensor on {t.device} was passed to a program compiled for {device} "
            f"(jax device, {platform}); move it with .to(...) or call the function with all "
            f"tensors on one device")


def _cuda_to_xla(t: torch.Tensor, device):
    check_same_gpu(t, device)
    if not _DIRECT:  # jax's public importer follows the same stream protocol
        import jax.dlpack

        return jax.dlpack.from_dlpack(t, device=device)
    stream = consumer_stream(device)
    index = t.get_device()
    # torch exports only tensors of the current CUDA device (its __dlpack__ checks)
    with torch.cuda.device(index) if torch.cuda.current_device() != index else _NULL:
        if stream is None or stream in (0, 2):  # no usable consumer stream: host sync
            torch.cuda.current_stream(t.device).synchronize()
            capsule, stream = tdl.to_dlpack(t), None
        else:
            capsule = t.__dlpack__(stream=stream)  # event on torch's stream, waited on by XLA's
    return jax_internals.import_dlpack(capsule, device, stream, _DL_DEVICE_TYPE["cuda"])


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _Null()


def to_torch(arr, on_cpu: bool) -> torch.Tensor:
    """Export an XLA buffer as a torch tensor sharing its memory."""
    if on_cpu:
        if _DIRECT:  # skips jax.Array.__dlpack__'s Python layers (~5 us)
            return tdl.from_dlpack(jax_internals.export_dlpack(arr))
        return tdl.from_dlpack(arr.__dlpack__())
    return torch.from_dlpack(arr)  # hands torch's stream to the producer for ordering


def to_torch_many(arrs, on_cpu: bool) -> list[torch.Tensor]:
    """``to_torch`` of each XLA buffer of ``arrs``, in one loop (a call's outputs)."""
    if on_cpu and _DIRECT:
        export, from_dlpack = jax_internals.export_dlpack, torch._C._from_dlpack
        return [from_dlpack(export(a)) for a in arrs]
    return [to_torch(a, on_cpu) for a in arrs]


class ArgumentImports:
    """The XLA buffers of a program's arguments, reusing, per argument position, the buffer
    of the tensor passed there last time when it is passed again unchanged.

    A hit needs the same Python tensor object (checked through a weak reference) with the
    same data pointer, strides and shape (``x.data = view`` changes the last two and
    keeps the pointer and version). Only zero-copy imports are kept: their buffer *is* the
    tensor's memory, so every write to the tensor, in place or not, is seen; on the CPU a
    changed version counter therefore keeps the buffer (a parameter updated in place by an
    optimizer, a KV cache written by the program are not imported again). On CUDA XLA
    reads on its own stream: a changed version imports again, which synchronizes torch's
    stream first (``to_xla``); an inference tensor (``torch.inference_mode``: no version
    counter) is imported at every call there. One entry per position: at most ``n`` buffers
    (and the tensors' memory) are kept alive. Positions in ``uncached`` (arguments an
    executable donates: a run deletes their buffer) are imported at every call and never
    staged.

    ``fixed_shapes``: the caller guarantees that the tensor at each position always has the
    same shape and dtype (a plan of static shapes, reached only through a cache key holding
    every input's shape and dtype): ``buffers`` then skips comparing shapes (~0.2 us per
    argument; same object, data pointer and strides still decide a hit). On the CPU such a
    position that misses at three calls in a row (a new tensor at every call: a decode
    step's input ids and attention mask) gets a staging tensor of its own, at most
    ``STAGING_BYTES``, imported once: a later miss there copies the argument into it
    (``copy_``, ~1 us) instead of importing it (~5 us, more with cold caches). XLA reads
    the staging memory only during the call (``buffers``'s caller runs the program and
    exports its results before it returns: the CPU client runs computations inline, and an
    export waits for the result anyway), and only the thread that made a staging tensor
    fills it, so two threads' calls never share one. ``buffer`` (one position) never stages.
    """

    def __init__(self, device, n: int, on_cpu: bool, fixed_shapes: bool = False,
                 uncached=frozenset()):
        self.device = device
        self._entries: list = [None] * n
        self._version = not on_cpu
        self._uncached = frozenset(uncached)
        self._fixed = fixed_shapes
        self._calls = 0  # calls of ``buffers`` so far
        # per position: (the call of its last miss, the misses in a row up to it)
        self._missed: list = [(-2, 0)] * n
        self._staging: list = [None] * n  # (tensor, its buffer, the owning thread's ident)

    def buffers(self, tensors: Sequence[torch.Tensor]) -> list:
        """The buffers of ``tensors``, the arguments at positions 0, 1, ... in order."""
        entries, miss = self._entries, self._miss
        if self._version:
            return [e[4] if (e := entries[k]) is not None and e[0]() is t
                    and e[1] == t.data_ptr() and e[2] == t.stride() and e[3] == t.shape
                    and e[5] == t._version else miss(k, t) for k, t in enumerate(tensors)]
        if self._fixed:
            miss = self._fresh
            self._calls += 1
            return [e[4] if (e := entries[k]) is not None and e[0]() is t
                    and e[1] == t.data_ptr() and e[2] == t.stride()
                    else miss(k, t) for k, t in enumerate(tensors)]
        return [e[4] if (e := entries[k]) is not None and e[0]() is t
                and e[1] == t.data_ptr() and e[2] == t.stride() and e[3] == t.shape
                else miss(k, t) for k, t in enumerate(tensors)]

    def buffer(self, k: int, t: torch.Tensor):
        """The buffer of ``t``, the argument at position ``k``."""
        e = self._entries[k]
        if e is not None and e[0]() is t and e[1] == t.data_ptr() and e[2] == t.stride() \
                and e[3] == t.shape and (not self._version or e[5] == t._version):
            return e[4]
        return self._miss(k, t)

    def _fresh(self, k: int, t: torch.Tensor):
        """A miss of ``buffers`` with fixed shapes on the CPU: the staging tensor of
        position ``k`` filled with ``t``, where it has one (made when ``k`` missed at the
        previous two calls too)."""
        st = self._staging[k]
        if st is not None:
            if st[2] == threading.get_ident() and st[0].dtype == t.dtype \
                    and not t.requires_grad:
                st[0].copy_(t)
                return st[1]
        elif self._missed[k] == (self._calls - 1, 2) and k not in self._uncached \
                and t.is_cpu and not t.requires_grad \
                and t.numel() * t.element_size() <= STAGING_BYTES:
            staged = torch.empty(t.shape, dtype=t.dtype)
            buf = to_xla(staged, self.device)
            if buf.unsafe_buffer_pointer() == staged.data_ptr():  # zero-copy: its memory
                self._staging[k] = (staged, buf, threading.get_ident())
                staged.copy_(t)
                return buf
        last, run = self._missed[k]
        self._missed[k] = (self._calls, run + 1 if last == self._calls - 1 else 1)
        return self._miss(k, t)

    def _miss(self, k: int, t: torch.Tensor):
        buf = to_xla(t, self.device)
        if self._version and k in self._uncached:
            # a donated argument on a GPU: PJRT's GPU client refuses to donate a buffer
            # that torch's memory backs (an external reference), where the CPU client
            # copies it; donate a copy of jax's own instead
            import jax

            return jax.device_put(buf, self.device, may_alias=False)
        ptr = t.data_ptr()
        if k in self._uncached or buf.unsafe_buffer_pointer() != ptr:  # a copy: no entry
            self._entries[k] = None
        elif not self._version:
            self._entries[k] = (weakref.ref(t), ptr, t.stride(), t.shape, buf)
        else:  # an inference tensor has no version counter: imported at every call
            self._entries[k] = None if t.is_inference() else \
                (weakref.ref(t), ptr, t.stride(), t.shape, buf, t._version)
        return buf
