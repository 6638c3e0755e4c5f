"""jaxlib's private entry points, in one place, with the version checks that choose them.

thunder_mlir drives XLA through jaxlib below jax's public API (toolchain.md §5-6): it
compiles StableHLO with a client directly, imports torch tensors without jax's dtype
canonicalization, refines symbolic shapes and builds result handlers. None of this is a
stable API, so every use goes through this module; nothing else in the package imports
``jax._src`` or ``jaxlib``'s extension. Each function says which jaxlib versions it was
checked on and what it does on others.

Checked: jaxlib 0.10.2 (extension 467, Python 3.11, ``make test``) and 0.11.2 (extension
495, Python 3.12, ``make compat``). Differences found between them:

* ``xla_client.array_result_handler`` lost its ``_skip_checks`` keyword in 0.11
  (``(aval, sharding, committed)``); ``result_handler`` passes it only where the signature
  has it.
* jax >= 0.11 needs Python >= 3.12 (pyproject.toml's ranges).
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import jaxlib

#: jaxlib's version as a tuple of ints, e.g. (0, 11, 2).
JAXLIB_VERSION: tuple[int, ...] = tuple(
    int(p) for p in jaxlib.__version__.split("+")[0].split(".")[:3] if p.isdigit())

try:  # private, faster DLPack entry points (extension >= 467, jaxlib >= 0.8)
    from jax._src.lib import _jax as _jax_ext
    from jax._src.lib import jaxlib_extension_version as EXTENSION_VERSION

    DIRECT_DLPACK = EXTENSION_VERSION >= 467 and hasattr(
        _jax_ext, "dlpack_managed_tensor_to_buffer") and hasattr(
        _jax_ext, "buffer_to_dlpack_managed_tensor")
except ImportError:  # pragma: no cover - a jaxlib that moved them: public calls instead
    _jax_ext = None
    EXTENSION_VERSION = 0
    DIRECT_DLPACK = False


def xla_client():
    """jaxlib's ``xla_client`` module (``CompileOptions``, ``DeviceList``,
    ``DeviceAssignment``, ``make_cpu_client``). Same path in 0.10.2 and 0.11.2."""
    from jax._src.lib import xla_client as xc

    return xc


def backends_are_initialized() -> bool:
    """Whether jax has created its XLA clients already (then client options such as the
    CPU thread pool or the GPU allocator can no longer be chosen)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def import_dlpack(capsule, device, stream: int | None, dl_device_type: int):
    """An XLA buffer on jax ``device`` viewing the DLPack ``capsule`` (zero-copy where the
    data is 64-byte aligned, else copied), without jax's dtype canonicalization (int64 and
    float64 stay 64-bit with ``jax_enable_x64`` off). ``stream``: on CUDA, the XLA stream
    the producer was told to order its work before (the ``stream`` given to the producer's
    ``__dlpack__``), else None. Only where ``DIRECT_DLPACK``."""
    return _jax_ext.dlpack_managed_tensor_to_buffer(capsule, device, stream, None,
                                                    dl_device_type)


def export_dlpack(arr):
    """The DLPack capsule of the single-device jax array ``arr`` (CPU: no stream ordering
    needed). Only where ``DIRECT_DLPACK``."""
    return _jax_ext.buffer_to_dlpack_managed_tensor(arr)


def consumer_stream(device) -> int | None:
    """The raw CUDA stream on which XLA's client for jax ``device`` waits for external
    producers (``Device.get_stream_for_external_ready_events``, what jax's own
    ``from_dlpack`` passes to ``__dlpack__``); None where the client has none (CPU, or an
    UNIMPLEMENTED answer)."""
    try:
        return device.get_stream_for_external_ready_events()
    except Exception as e:  # noqa: BLE001 - JaxRuntimeError has no stable import path
        if "UNIMPLEMENTED" in str(e):
            return None
        raise


def refine_polymorphic_shapes(module: bytes) -> bytes:
    """StableHLO ``module`` (text or bytecode whose ``@main`` has static argument shapes)
    with every symbolic shape refined from them, shape assertions checked; bytecode.
    Raises what jaxlib raises (ValueError/RuntimeError) when the shapes contradict the
    program. Same signature in 0.10.2 and 0.11.2."""
    return _jax_ext.mlir.refine_polymorphic_shapes(
        module, enable_shape_assertions=True, validate_static_shapes=True,
        enable_shardy=False)


@lru_cache(maxsize=None)
def _result_handler_takes_skip_checks() -> bool:
    fn = xla_client().array_result_handler
    try:
        return "_skip_checks" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a nanobind function without a signature
        return "_skip_checks" in (fn.__doc__ or "")


def result_handler(shape, dtype, device):
    """jaxlib's C++ result handler that makes committed single-device arrays of ``shape``
    and ``dtype`` on jax ``device``, as ``jax._src.array._array_global_result_handler``
    builds them. Raises where this jaxlib lacks the API (the caller falls back)."""
    from jax._src import core
    from jax.sharding import SingleDeviceSharding

    xc = xla_client()
    kw = {"_skip_checks": True} if _result_handler_takes_skip_checks() else {}
    return xc.array_result_handler(core.ShapedArray(shape, dtype),
                                   SingleDeviceSharding(device), committed=True, **kw)


def make_cpu_client(asynchronous: bool):
    """A new XLA CPU client (its own thread pools and buffers), as jax makes its own."""
    return xla_client().make_cpu_client(asynchronous=asynchronous)
