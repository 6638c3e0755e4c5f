"""The compilation cache: a hit does not re-trace; a new shape, dtype, Python scalar,
requires_grad, grad mode, input structure or guarded global value does."""

from __future__ import annotations

import torch

import thunder_mlir


class Counted:
    """A function that counts how often its body runs (i.e. how often it is traced)."""

    def __init__(self, body):
        self.body = body
        self.traces = 0
        self.__qualname__ = "Counted"

    def __call__(self, *args, **kwargs):
        self.traces += 1
        return self.body(*args, **kwargs)


def _state(jfn, fn):
    return thunder_mlir.cache_hits(jfn), thunder_mlir.cache_misses(jfn), fn.traces


def test_hit_does_not_retrace():
    fn = Counted(lambda a, b: a * b + 1)
    jfn = thunder_mlir.jit(fn)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(jfn(x, y), x * y + 1)
    assert _state(jfn, fn) == (0, 1, 1)
    for _ in range(3):
        x2, y2 = torch.randn(3, 4), torch.randn(3, 4)  # new values, same metadata
        torch.testing.assert_close(jfn(x2, y2), x2 * y2 + 1)
    assert _state(jfn, fn) == (3, 1, 1)


def test_new_shape_retraces():
    fn = Counted(lambda a: a.sum(-1))
    jfn = thunder_mlir.jit(fn)
    for shape in [(2, 3), (2, 3), (4, 3), (2, 3, 5), (4, 3)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(jfn(x), x.sum(-1))
    assert _state(jfn, fn) == (2, 3, 3)


def test_new_dtype_retraces():
    fn = Counted(lambda a: a * 2)
    jfn = thunder_mlir.jit(fn)
    for dt in [torch.float32, torch.float64, torch.int64, torch.float32, torch.int64]:
        x = torch.arange(6).to(dt)
        out = jfn(x)
        assert out.dtype == dt
        torch.testing.assert_close(out, x * 2)
    assert _state(jfn, fn) == (2, 3, 3)


def test_key_metadata_holds_each_tensors_device():
    """A tensor's device is part of the cache key: a CPU tensor's is read through
    ``is_cpu`` (a shared torch.device), any other tensor's is its own (a meta tensor stands
    for a GPU one here, where CI has none). Every key path builds its tensor metadata with
    ``_metas`` or ``_metas_tensors``."""
    from thunder_mlir.function import _metas, _metas_tensors

    for t in (torch.ones(2), torch.ones(2, device="meta"),
              torch.nn.Parameter(torch.ones(2, device="meta"))):
        assert _metas_tensors([t])[0][0][3] == t.device
        assert _metas([t])[0][3] == t.device
    assert _metas_tensors([torch.ones(2)])[0] != _metas_tensors([torch.ones(2, device="meta")])[0]


def test_python_scalar_value_retraces():
    fn = Counted(lambda a, s: a * s)
    jfn = thunder_mlir.jit(fn)
    x = torch.randn(4)
    for s in [2.0, 2.0, 3.0, 2.0, 3]:
        out = jfn(x, s)
        torch.testing.assert_close(out, x * s)
    # 3 (int) and 3.0 (float) are different specializations
    assert _state(jfn, fn) == (2, 3, 3)


def test_bool_and_int_scalars_are_distinct():
    fn = Counted(lambda a, s: a + s)
    jfn = thunder_mlir.jit(fn)
    x = torch.arange(3)
    torch.testing.assert_close(jfn(x, 1), x + 1)
    torch.testing.assert_close(jfn(x, True), x + True)
    assert thunder_mlir.cache_misses(jfn) == 2


def test_requires_grad_and_grad_mode_are_part_of_the_key():
    fn = Counted(lambda a: a.exp())
    jfn = thunder_mlir.jit(fn)
    x = torch.randn(3)
    jfn(x)
    jfn(x.clone().requires_grad_())
    with torch.no_grad():
        jfn(x)
    jfn(x)
    assert _state(jfn, fn) == (1, 3, 3)


def test_input_structure_is_part_of_the_key():
    fn = Counted(lambda *ts: sum(ts))
    jfn = thunder_mlir.jit(fn)
    x = torch.randn(3)
    torch.testing.assert_close(jfn(x, x), x + x)
    torch.testing.assert_close(jfn(x, x, x), x + x + x)
    torch.testing.assert_close(jfn(x, x), x + x)
    assert _state(jfn, fn) == (1, 2, 2)


def test_kwargs_vs_positional():
    fn = Counted(lambda a, b=None: a if b is None else a - b)
    jfn = thunder_mlir.jit(fn)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jfn(x, y), x - y)
    torch.testing.assert_close(jfn(x, b=y), x - y)
    torch.testing.assert_close(jfn(x), x)
    assert thunder_mlir.cache_misses(jfn) == 3


SCALE = 2.0


def _uses_global(a):
    return a * SCALE


def test_global_python_value_is_guarded():
    global SCALE
    jfn = thunder_mlir.jit(_uses_global)
    x = torch.randn(3)
    try:
        torch.testing.assert_close(jfn(x), x * 2.0)
        SCALE = 5.0
        torch.testing.assert_close(jfn(x), x * 5.0)  # a changed global re-traces
        SCALE = 2.0
        torch.testing.assert_close(jfn(x), x * 2.0)
    finally:
        SCALE = 2.0
    assert thunder_mlir.cache_misses(jfn) == 2
    assert thunder_mlir.cache_hits(jfn) == 1


def test_closure_python_value_is_guarded():
    k = 2

    def fn(a):
        return a + k

    jfn = thunder_mlir.jit(fn)
    x = torch.randn(3)
    torch.testing.assert_close(jfn(x), x + 2)
    k = 7
    torch.testing.assert_close(jfn(x), x + 7)


def test_separate_jits_have_separate_caches():
    f = lambda a: a + 1  # noqa: E731
    j1, j2 = thunder_mlir.jit(f), thunder_mlir.jit(f)
    x = torch.randn(2)
    j1(x)
    j1(x)
    j2(x)
    assert (thunder_mlir.cache_hits(j1), thunder_mlir.cache_misses(j1)) == (1, 1)
    assert (thunder_mlir.cache_hits(j2), thunder_mlir.cache_misses(j2)) == (0, 1)


def test_last_traces_follow_the_entry_used():
    jfn = thunder_mlir.jit(lambda a: a * 2, dynamic=False)  # a static trace per shape
    jfn(torch.randn(2))
    text2 = thunder_mlir.last_traces(jfn)[0].text
    jfn(torch.randn(5))
    assert "tensor<5xf32>" in thunder_mlir.last_traces(jfn)[0].text
    jfn(torch.randn(2))
    assert thunder_mlir.last_traces(jfn)[0].text == text2
    names = [s.name for s in thunder_mlir.last_traces(jfn)]
    assert names == ["initial", "prims", "plan", "stablehlo", "xla-compile"]
    assert all(s.seconds >= 0 for s in thunder_mlir.last_traces(jfn))
