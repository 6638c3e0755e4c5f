"""The persistent compile cache (runtime/compile_cache.py): a later process loads the
executables an earlier one compiled; a damaged or foreign entry is compiled again, never a
crash or a wrong result; concurrent writers leave a complete entry. Every result is
compared with eager PyTorch."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime import compile_cache, xla

SCRIPT = textwrap.dedent("""
    import json, sys, torch, thunder_mlir
    from thunder_mlir.runtime import compile_cache

    def f(a, b):
        return torch.tanh(a) * b + 1

    a, b = torch.randn(5, 7), torch.randn(5, 7)
    out = thunder_mlir.jit(f)(a, b)
    torch.testing.assert_close(out, f(a, b))
    print(json.dumps(compile_cache.stats))
""")


@pytest.fixture
def cache_dir(tmp_path, _compile_cache_dir):
    d = tmp_path / "cache"
    thunder_mlir.set_compile_cache_dir(d)
    yield d
    thunder_mlir.set_compile_cache_dir(_compile_cache_dir)


def _run(env_dir, n: int) -> list[dict]:
    """Run SCRIPT in ``n`` processes at once with the cache in ``env_dir``; their stats."""
    env = {**os.environ, compile_cache.ENV_VAR: str(env_dir)}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(n)]
    stats = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        stats.append(json.loads(out.strip().splitlines()[-1]))
    return stats


def test_concurrent_writers_then_a_later_process_hits(tmp_path):
    d = tmp_path / "shared"
    writers = _run(d, 2)  # two processes compile and write the same entry at once
    assert all(s["rejected"] == 0 for s in writers), writers
    assert sum(s["writes"] for s in writers) >= 1, writers
    entries = sorted(p.name for p in d.iterdir())
    assert len(entries) == 1 and entries[0].endswith(".xla"), entries  # no temporary left
    (reader,) = _run(d, 1)
    assert reader == {"hits": 1, "misses": 0, "rejected": 0, "writes": 0}, reader


def _entry(cache_dir):
    (path,) = list(cache_dir.iterdir())
    return path


def _compile_and_check(a, b) -> None:
    def g(x, y):
        return torch.sigmoid(x) - y * 2

    xla.clear_memory_cache()  # the next compile goes to the disk cache
    torch.testing.assert_close(thunder_mlir.jit(g)(a, b), g(a, b))


def _header_with_payload(cache_dir, payload: bytes, key: bytes | None = None) -> bytes:
    """An entry with a correct checksum of ``payload``, under ``key`` (default: the
    stored entry's key)."""
    data = _entry(cache_dir).read_bytes()
    stored_key = compile_cache._HEADER.unpack_from(data, len(compile_cache.FORMAT))[0]
    return compile_cache.FORMAT + compile_cache._HEADER.pack(
        key or stored_key, hashlib.sha256(payload).digest(), len(payload)) + payload


@pytest.mark.parametrize("damage", ["truncated", "bit flip", "other key", "not an entry",
                                    "undeserializable", "empty"])
def test_damaged_entry_is_compiled_again(cache_dir, damage):
    a, b = torch.randn(3, 11), torch.randn(3, 11)
    _compile_and_check(a, b)
    path = _entry(cache_dir)
    data = path.read_bytes()
    if damage == "truncated":
        bad = data[:len(data) // 2]
    elif damage == "bit flip":  # in the machine code: only the checksum can see it
        i = len(data) * 3 // 4
        bad = data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]
    elif damage == "other key":  # a valid executable filed under another key (version)
        head = len(compile_cache.FORMAT) + compile_cache._HEADER.size
        bad = _header_with_payload(cache_dir, data[head:], key=b"\x01" * 32)
    elif damage == "not an entry":
        bad = b"something else entirely" * 10
    elif damage == "undeserializable":  # header and checksum right, payload not XLA's
        bad = _header_with_payload(cache_dir, b"not an executable" * 50)
    else:
        bad = b""
    path.write_bytes(bad)
    before = dict(compile_cache.stats)
    _compile_and_check(a, b)
    assert compile_cache.stats["rejected"] == before["rejected"] + 1
    assert compile_cache.stats["writes"] == before["writes"] + 1  # rewritten, whole
    hits = compile_cache.stats["hits"]
    _compile_and_check(a, b)
    assert compile_cache.stats["hits"] == hits + 1


def test_disabled_and_locations(cache_dir, monkeypatch):
    thunder_mlir.set_compile_cache_dir(None)
    assert thunder_mlir.compile_cache_dir() is None
    _compile_and_check(torch.randn(2, 13), torch.randn(2, 13))
    assert not cache_dir.exists()
    monkeypatch.setattr(compile_cache, "_dir_override", compile_cache._UNSET)
    for off in ("", "0"):
        monkeypatch.setenv(compile_cache.ENV_VAR, off)
        assert compile_cache.compile_cache_dir() is None
    monkeypatch.setenv(compile_cache.ENV_VAR, str(cache_dir))
    assert compile_cache.compile_cache_dir() == cache_dir
    monkeypatch.delenv(compile_cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", "/some/where")
    assert str(compile_cache.compile_cache_dir()) == "/some/where/thunder_mlir"


def test_unwritable_directory_warns_and_runs(tmp_path, _compile_cache_dir):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    thunder_mlir.set_compile_cache_dir(blocker / "cache")
    warned = compile_cache._warned_write
    compile_cache._warned_write = False
    try:
        with pytest.warns(RuntimeWarning, match="cannot write the compile cache"):
            _compile_and_check(torch.randn(4, 3), torch.randn(4, 3))
    finally:
        compile_cache._warned_write = warned
        thunder_mlir.set_compile_cache_dir(_compile_cache_dir)
