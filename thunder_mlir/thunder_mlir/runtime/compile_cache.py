"""The persistent compile cache: serialized XLA executables on disk, so that a new process
reuses what an earlier one compiled (warm start).

An entry is keyed by the SHA-256 of everything that decides the machine code: the
StableHLO text, the serialized ``CompileOptions``, the jaxlib version, the platform and
its version, the device kind, ``XLA_FLAGS``, on CPU the host's instruction-set flags and
on a GPU its compute capability and the NVIDIA driver version. Executables are written with jaxlib's ``Client.serialize_executable`` and read with
``Client.deserialize_executable`` (the calls ``jax._src.compiler`` uses for jax's own
persistent cache).

Location: ``set_compile_cache_dir(path)``, else the ``THUNDER_MLIR_CACHE_DIR`` environment
variable (empty or ``0`` disables the cache), else ``$XDG_CACHE_HOME/thunder_mlir``
(``~/.cache/thunder_mlir`` when ``XDG_CACHE_HOME`` is unset).

Safety: a file holds a header (format tag, the key's digest, the payload's SHA-256 and
length) before the payload; an entry whose header, key, checksum or length does not match,
or that jaxlib cannot deserialize, is treated as a miss: the region is compiled again and
the entry rewritten. A bit flip in machine code cannot be detected by deserializing, hence
the checksum. Writes go to a temporary file in the same directory and are moved in place
with ``os.replace`` (atomic on POSIX), so a reader never sees a partial entry and two
processes writing one entry at once both leave a complete one.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import warnings
from pathlib import Path

ENV_VAR = "THUNDER_MLIR_CACHE_DIR"
FORMAT = b"thunder_mlir-xla-executable-v1\n"
_HEADER = struct.Struct("<32s32sQ")  # key digest, payload SHA-256, payload length

_lock = threading.Lock()
_UNSET = object()
_dir_override: object = _UNSET  # set_compile_cache_dir's argument, if it was called
_host_flags: str | None = None
_warned_write = False

#: Counters for this process: ``hits`` (executables loaded from disk), ``misses`` (no
#: entry), ``rejected`` (an entry existed but was corrupt, truncated or from another
#: version: compiled again), ``writes`` (entries written).
stats = {"hits": 0, "misses": 0, "rejected": 0, "writes": 0}


def set_compile_cache_dir(path: str | os.PathLike | None) -> None:
    """Put the persistent compile cache in directory ``path`` (created when first written),
    or disable it with ``None``. Overrides ``THUNDER_MLIR_CACHE_DIR`` for this process.
    Executables already compiled in this process stay in its in-memory cache."""
    global _dir_override
    _dir_override = None if path is None else Path(path)


def compile_cache_dir() -> Path | None:
    """The directory of the persistent compile cache, or None when it is disabled (see the
    module docstring for the order: ``set_compile_cache_dir``, ``THUNDER_MLIR_CACHE_DIR``,
    ``$XDG_CACHE_HOME/thunder_mlir``)."""
    if _dir_override is not _UNSET:
        return _dir_override  # type: ignore[return-value]
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return None if env.strip() in ("", "0") else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "thunder_mlir"


def _host_isa() -> str:
    """The CPU's instruction-set flags (an executable compiled for AVX-512 must not be
    loaded on a host without it); '' where /proc/cpuinfo is absent."""
    global _host_flags
    if _host_flags is None:
        import platform

        flags = platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):
                        flags += " " + line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        _host_flags = flags
    return _host_flags


_gpu_driver: str | None = None


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version line (``/proc/driver/nvidia/version``, e.g.
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05 ...``); '' where absent."""
    global _gpu_driver
    if _gpu_driver is None:
        try:
            with open("/proc/driver/nvidia/version") as f:
                _gpu_driver = f.readline().strip()
        except OSError:
            _gpu_driver = ""
    return _gpu_driver


def device_description(device) -> bytes:
    """What of jax ``device`` decides its machine code besides the program: the device kind
    (``NVIDIA H100 80GB HBM3``, ``cpu``), on a GPU its compute capability and the NVIDIA
    driver (the PTX JIT and cuBLAS/cuDNN autotuning depend on it), on the CPU the host's
    instruction-set flags."""
    platform = device.client.platform
    parts = [device.device_kind]
    if platform == "cpu":
        parts.append(_host_isa())
    else:
        parts.append(str(getattr(device, "compute_capability", "")))
        parts.append(_nvidia_driver() if platform in ("gpu", "cuda") else "")
    return "\n".join(parts).encode()


def entry_key(text: str, options: bytes, device) -> bytes:
    """The 32-byte key of an executable: SHA-256 over the StableHLO ``text``, the serialized
    compile ``options``, the jaxlib version, the client's platform and platform version,
    ``device_description`` (device kind; GPU compute capability and driver; CPU ISA flags)
    and ``XLA_FLAGS``."""
    import jaxlib

    client = device.client
    h = hashlib.sha256()
    for part in (FORMAT, jaxlib.__version__.encode(), client.platform.encode(),
                 client.platform_version.encode(), device_description(device),
                 os.environ.get("XLA_FLAGS", "").encode(),
                 options, text.encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.digest()


def _path(directory: Path, key: bytes) -> Path:
    return directory / f"{key.hex()}.xla"


def load(key: bytes, device, device_list, options):
    """The executable stored under ``key`` deserialized for ``device_list``, or None (no
    cache, no entry, or an entry that fails a check: counted in ``stats``)."""
    directory = compile_cache_dir()
    if directory is None:
        return None
    try:
        with open(_path(directory, key), "rb") as f:
            data = f.read()
    except OSError:
        stats["misses"] += 1
        return None
    payload = _payload(data, key)
    if payload is None:
        stats["rejected"] += 1
        return None
    try:
        exe = device.client.deserialize_executable(payload, device_list, options)
    except Exception:  # XlaRuntimeError has no stable import path
        stats["rejected"] += 1
        return None
    stats["hits"] += 1
    return exe


def read_payload(key: bytes) -> bytes | None:
    """The serialized executable stored under ``key`` when its entry passes the checks,
    else None (not counted in ``stats``)."""
    directory = compile_cache_dir()
    if directory is None:
        return None
    try:
        with open(_path(directory, key), "rb") as f:
            return _payload(f.read(), key)
    except OSError:
        return None


def _payload(data: bytes, key: bytes) -> bytes | None:
    """The payload of entry file contents ``data`` when its format tag, key, length and
    checksum match, else None."""
    head = len(FORMAT) + _HEADER.size
    if len(data) < head or not data.startswith(FORMAT):
        return None
    stored_key, digest, length = _HEADER.unpack_from(data, len(FORMAT))
    payload = data[head:]
    if stored_key != key or length != len(payload) or \
            hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def store(key: bytes, device, executable) -> None:
    """Write ``executable`` under ``key`` (atomically). A cache directory that cannot be
    written warns once and is otherwise ignored: the program still runs."""
    global _warned_write
    directory = compile_cache_dir()
    if directory is None:
        return
    tmp = None
    try:
        payload = device.client.serialize_executable(executable)
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".xla")
        with os.fdopen(fd, "wb") as f:
            f.write(FORMAT)
            f.write(_HEADER.pack(key, hashlib.sha256(payload).digest(), len(payload)))
            f.write(payload)
        os.replace(tmp, _path(directory, key))
        tmp = None
        with _lock:
            stats["writes"] += 1
    except Exception as e:  # a full disk or read-only directory must not fail the call
        if not _warned_write:
            _warned_write = True
            warnings.warn(f"thunder_mlir: cannot write the compile cache in {directory} "
                          f"({e}); set {ENV_VAR}=0 to disable it", RuntimeWarning,
                          stacklevel=2)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
