"""Cache semantics of ``thunder_mlir.jit`` (issue 7, docs/sharp_edges.md "Caching").

A hashed key (input metadata, Python values, grad mode, default dtype, guard values);
hits never re-trace; each miss after the first records why; a RecompileWarning past the
limit names the changing value; retracing and alternating shapes keep memory flat;
several threads can call one jitted function.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import threading
import time
import warnings

import pytest
import torch

from thunder_mlir.errors import RecompileWarning
import thunder_mlir

from conftest import assert_same_tree

HERE = os.path.basename(__file__)
F32 = "dtype=torch.float32, device=cpu"


def _add(a, b):
    return a + b


def _scale(a, n):
    return a * n


def _tensor(shape, dtype="torch.float32", rg=False):
    return f"tensor(shape={shape}, dtype={dtype}, device=cpu, requires_grad={rg})"


# ------------------------------------------------------------------------ hits
def test_hit_does_not_retrace():
    jf = thunder_mlir.jit(_add)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    for _ in range(5):
        a, b = torch.randn(2, 3), torch.randn(2, 3)  # new values, same metadata
        assert_same_tree(jf(a, b), _add(a, b))
    info = thunder_mlir.cache_info(jf)
    assert (info["misses"], info["hits"], info["recompile_reasons"]) == (1, 4, [])
    assert len(info["entries"]) == 1


def test_key_is_hashed_not_scanned():
    jf = thunder_mlir.jit(_scale, recompile_limit=64)
    t = torch.ones(2)
    for n in range(40):
        jf(t, n)
    assert thunder_mlir.cache_misses(jf) == 40
    entries = jf.cache.entries
    assert isinstance(entries, dict) and len(entries) == 40
    for key, entry in entries.items():  # every entry is found by its key's hash
        assert hash(key) == hash(entry.key) and entries[entry.key] is entry
    for n in range(40):  # all hits now
        assert torch.equal(jf(t, n), t * n)
    assert thunder_mlir.cache_misses(jf) == 40 and thunder_mlir.cache_hits(jf) == 40


def test_non_contiguous_input_hits_and_is_correct():
    jf = thunder_mlir.jit(_add)
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    assert_same_tree(jf(a, b), _add(a, b))
    assert_same_tree(jf(a.t(), b), _add(a.t(), b))  # same metadata: a hit, strides honoured
    assert thunder_mlir.cache_misses(jf) == 1 and thunder_mlir.cache_hits(jf) == 1


# ------------------------------------------------------------- recompile reasons
def test_each_miss_records_why():
    global GUARDED
    # dynamic=False: every changed size is a miss of its own (no automatic dynamic shapes)
    jf = thunder_mlir.jit(_guarded, recompile_limit=64, dynamic=False)
    t = torch.ones(2)
    try:
        GUARDED = 1
        jf(t, 2)                                             # first: no reason
        jf(torch.ones(3), 2)                                 # shape
        jf(torch.ones(3, dtype=torch.float64), 2)            # dtype
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 2)  # requires_grad
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3)  # Python value
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3.0)  # Python type
        with torch.no_grad():
            jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3.0)  # grad mode
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3.0)  # default dtype
        finally:
            torch.set_default_dtype(prev)
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3.0)  # a hit
        GUARDED = 7
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), 3.0)  # guard
        jf(torch.ones(3, dtype=torch.float64, requires_grad=True), n=3.0)  # structure
    finally:
        GUARDED = 1
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 10 and info["hits"] == 1
    assert info["recompile_reasons"] == [
        f"input args[0] changed: {_tensor((2,))} -> {_tensor((3,))}",
        f"input args[0] changed: {_tensor((3,))} -> {_tensor((3,), 'torch.float64')}",
        f"input args[0] changed: {_tensor((3,), 'torch.float64')} -> "
        f"{_tensor((3,), 'torch.float64', True)}",
        "input args[1] changed: int 2 -> int 3",
        "input args[1] changed: int 3 -> float 3.0",
        "grad mode changed: True -> False",
        "default dtype changed: torch.float32 -> torch.float64",
        "global 'GUARDED' changed: 1 -> 7",
        "the structure of the inputs changed",
    ]


GUARDED = 1


def _guarded(a, n):
    return a * n + GUARDED


def test_kwarg_value_change_reason_names_kwarg_path():
    def f(a, *, scale):
        return a * scale

    jf = thunder_mlir.jit(f)
    jf(torch.ones(2), scale=2.0)
    jf(torch.ones(2), scale=3.0)
    assert thunder_mlir.cache_info(jf)["recompile_reasons"] == [
        "input kwargs['scale'] changed: float 2.0 -> float 3.0"]


def test_cache_info_entries_show_specialization():
    global GUARDED
    jf = thunder_mlir.jit(_guarded)
    jf(torch.ones(2, 3), 4)
    GUARDED = 2
    try:
        jf(torch.ones(2, 3), 4)
    finally:
        GUARDED = 1
    info = thunder_mlir.cache_info(jf)
    assert info["guards"] == ["global 'GUARDED'"]
    base = {"inputs": {"args[0]": {"shape": (2, 3), "dtype": torch.float32,
                                   "device": torch.device("cpu"), "requires_grad": False},
                       "args[1]": {"type": "int", "value": 4}},
            "grad_enabled": True, "default_dtype": torch.float32}
    assert info["entries"] == [dict(base, guards={"global 'GUARDED'": 1}),
                               dict(base, guards={"global 'GUARDED'": 2})]


def test_no_caching_retraces_every_call():
    jf = thunder_mlir.jit(_add, cache="no caching")
    a = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RecompileWarning: re-tracing was asked for
        for _ in range(12):
            assert torch.equal(jf(a, a), a + a)
    info = thunder_mlir.cache_info(jf)
    assert (info["misses"], info["hits"], info["entries"]) == (12, 0, [])
    assert info["recompile_reasons"] == ["caching is disabled"] * 11


def test_bad_cache_option_is_value_error():
    with pytest.raises(ValueError, match=r"cache must be one of \('constant values', "
                                         r"'no caching'\), got 'sometimes'"):
        thunder_mlir.jit(_add, cache="sometimes")


def test_recompile_warning_past_limit_names_changing_value():
    jf = thunder_mlir.jit(_scale, recompile_limit=2)
    t = torch.ones(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(5):
            jf(t, n)
            line = sys._getframe().f_lineno - 1
    assert [x.category for x in w] == [RecompileWarning, RecompileWarning]
    assert [str(x.message) for x in w] == [
        f"_scale has recompiled {k} times (limit 2); last recompile because input args[1] "
        f"changed: int {k - 1} -> int {k}. A value that changes on every call should be a "
        "tensor input." for k in (3, 4)]
    assert all(os.path.basename(x.filename) == HERE and x.lineno == line for x in w)
    assert thunder_mlir.cache_misses(jf) == 5


def test_recompile_warning_names_guard():
    global GUARDED
    jf = thunder_mlir.jit(_guarded, recompile_limit=1)
    t = torch.ones(2)
    try:
        with pytest.warns(RecompileWarning) as w:
            for v in (10, 11, 12):
                GUARDED = v
                jf(t, 1)
    finally:
        GUARDED = 1
    assert [str(x.message) for x in w] == [
        "_guarded has recompiled 2 times (limit 1); last recompile because global 'GUARDED' "
        "changed: 11 -> 12. A value that changes on every call should be a tensor input."]


# ------------------------------------------------------------------------ memory
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_alternating_shapes_keep_memory_flat():
    jf = thunder_mlir.jit(_add)
    inputs = [(torch.randn(2, 3), torch.randn(2, 3)), (torch.randn(4, 5), torch.randn(4, 5))]
    for i in range(1000):  # warm-up: both entries compiled, allocator pools settled
        jf(*inputs[i % 2])
    gc.collect()
    rss0 = _rss()
    t0 = time.perf_counter()
    for i in range(10_000):
        out = jf(*inputs[i % 2])
    seconds = time.perf_counter() - t0
    gc.collect()
    growth = _rss() - rss0
    print(f"10,000 calls in {seconds:.2f} s; RSS growth {growth / 1e6:.3f} MB")
    assert torch.equal(out, _add(*inputs[1]))
    assert thunder_mlir.cache_misses(jf) == 2 and thunder_mlir.cache_hits(jf) == 10_998
    assert growth < 4e6, f"RSS grew by {growth / 1e6:.2f} MB over 10,000 calls"


def test_retracing_keeps_memory_flat():
    jf = thunder_mlir.jit(_add, cache="no caching")
    inputs = [(torch.randn(2, 3), torch.randn(2, 3)), (torch.randn(4, 5), torch.randn(4, 5))]
    for i in range(60):
        jf(*inputs[i % 2])
    gc.collect()
    rss0 = _rss()
    for i in range(300):  # 300 full trace + lower + compile cycles
        jf(*inputs[i % 2])
    gc.collect()
    growth = _rss() - rss0
    print(f"300 re-traces: RSS growth {growth / 1e6:.3f} MB")
    assert growth < 8e6, f"RSS grew by {growth / 1e6:.2f} MB over 300 re-traces"
    assert thunder_mlir.cache_misses(jf) == 360
    assert len(thunder_mlir.cache_info(jf)["recompile_reasons"]) == 256  # bounded


# ------------------------------------------------------------------------ threads
def test_threads_with_different_shapes_get_correct_results():
    def f(a, b):
        return (a * 2 + b).sin() - b.cos()

    jf = thunder_mlir.jit(f, dynamic=False)  # one static entry per shape
    shapes = [(2,), (3, 4), (5, 1, 2), (7,)]
    errors, barrier = [], threading.Barrier(len(shapes))

    def worker(shape):
        try:
            gen = torch.Generator().manual_seed(hash(shape) % 1000)
            barrier.wait()
            for _ in range(40):
                a = torch.randn(shape, generator=gen)
                b = torch.randn(shape, generator=gen)
                torch.testing.assert_close(jf(a, b), f(a, b))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((shape, e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in shapes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = thunder_mlir.cache_info(jf)
    assert info["hits"] + info["misses"] == 160
    assert len(info["entries"]) == len(shapes)


def test_last_hit_shortcut_follows_the_cache():
    """``FunctionCache.lookup`` checks the entry of the last hit first: an entry that
    replaced it under the same key (a failed shape guard recompiles with the key of the
    entry it replaces) and alternating keys give the dict's entry, never the shortcut's
    stale one; a disabled cache has no hits."""
    from thunder_mlir.cache import CacheEntry, FunctionCache

    def entry():
        return CacheEntry(plan=None, out_spec=None, out_consts=[], out_tensor_positions=[],
                          stages=[])

    cache = FunctionCache("f")
    a, b = cache.key("spec", (("tensor", (2,)),)), cache.key("spec", (("tensor", (3,)),))
    first, other = entry(), entry()
    cache.insert(a, first, [], [])
    cache.insert(b, other, [], [])
    assert cache.lookup(a) is first and cache.lookup(a) is first
    assert cache.lookup(b) is other and cache.lookup(a) is first
    again = entry()
    cache.insert(a, again, [], [])  # same key, a new entry
    assert cache.lookup(a) is again and cache.lookup(b) is other
    disabled = FunctionCache("g", enabled=False)
    disabled.insert(a, first, [], [])
    assert disabled.lookup(a) is None
