"""Bounded dynamic shapes (runtime/bounded_shapes.py): a region that reads prefix slices
``x[:n + 1]`` of static tensors, with ``n`` read from a tensor (``.item()``), is compiled
once for every length up to the slice's source size, with XLA's dynamic padder, instead of
once per length (runtime/refine.py). Eager PyTorch is the oracle at every length; the
rewrite's refusals (a reverse, a concatenation or a reshape that moves the padding) keep
the per-length compile, also compared with eager. A region's result of symbolic size comes
back padded with its size: the next bounded region reads it so, anything else through a
view of its size.
"""

from __future__ import annotations

import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime import bounded_shapes, refine


def _refines(monkeypatch) -> list:
    """The shapes runtime/refine.py specializes a region for, recorded as they come."""
    calls: list = []
    real = refine.refine

    def spy(text, shapes):
        calls.append(shapes)
        return real(text, shapes)
    monkeypatch.setattr(refine, "refine", spy)
    return calls


def _compiled_note(jfn) -> str:
    return next(t for t in map(str, thunder_mlir.last_traces(jfn)) if "xla-compile" in t)


def _attention(q, cache, mask, pos):
    # litgpt's sliding-window KV cache: attend to the first max(pos) + 1 cached positions
    n = pos.max().item()
    k = cache[:, :n + 1]
    m = mask[..., :k.shape[1]]
    s = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~m, float("-inf"))
    return s.softmax(-1) @ k, k.mean(1), k.shape[1]


def test_attention_over_a_prefix_compiles_once_for_every_length(monkeypatch):
    calls = _refines(monkeypatch)
    g = torch.Generator().manual_seed(0)
    q, cache = torch.randn(2, 1, 8, generator=g), torch.randn(2, 16, 8, generator=g)
    mask = torch.rand(1, 1, 24, generator=g) > 0.2
    mask[..., 0] = True
    jfn = thunder_mlir.jit(_attention)
    for n in (5, 2, 9, 15, 1, 12, 7):
        pos = torch.tensor([0, n])
        got, want = jfn(q, cache, mask, pos), _attention(q, cache, mask, pos)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
        # the mean divides by the length at run time, not by the bound (16)
        torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
        assert got[2] == want[2] == n + 1
    assert calls == []  # no per-length compile
    assert thunder_mlir.cache_misses(jfn) <= 2  # (a length of 1 may be a program of its own)
    # the mask's bound is the cache's (16, not 24): the two lengths are one symbol
    assert "up to 2x16x8, 1x1x16 (bounded dynamic shapes)" in _compiled_note(jfn)


def test_the_cache_written_between_calls_is_read_at_its_new_values():
    # the bounded region reads the slice's source itself: a write into it between calls
    # (a KV cache's index_copy_) must be seen, as eager's slice sees it
    def f(cache, pos):
        return cache[:, :pos.max().item() + 1].sum(1)
    cache = torch.randn(2, 10, 4)
    jfn = thunder_mlir.jit(f)
    for n in (3, 6, 4):
        cache[:, n] += 1.0
        torch.testing.assert_close(jfn(cache, torch.tensor([n])), f(cache, torch.tensor([n])))


@pytest.mark.parametrize("kind", ["flip", "cat", "flatten"])
def test_what_the_rewrite_refuses_is_compiled_per_length_and_exact(kind, monkeypatch):
    calls = _refines(monkeypatch)

    def f(x, pos):
        k = x[:, :pos.max().item() + 1]
        if kind == "flip":  # a reverse along the dynamic dimension moves the padding
            return k.flip(1).sum(1)
        if kind == "cat":  # a concatenation along it puts padding inside
            return torch.cat([k, k], 1).sum(1)
        return k.reshape(-1).sum() + k.reshape(k.shape[0], -1).amax(-1)  # (a merge)
    x = torch.randn(3, 12)
    jfn = thunder_mlir.jit(f)
    for n in (4, 7, 2):
        torch.testing.assert_close(jfn(x, torch.tensor([n])), f(x, torch.tensor([n])))
    assert len(calls) >= 2  # per length (runtime/refine.py), as before


_REGION = """
func.func @main(%k: tensor<2x?x8xf32>, %q: tensor<2x1x8xf32>) -> tensor<2x1x8xf32> {
  %s = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2]
       : (tensor<2x1x8xf32>, tensor<2x?x8xf32>) -> tensor<2x1x?xf32>
  %d = stablehlo.get_dimension_size %k, dim = 1 : (tensor<2x?x8xf32>) -> tensor<i32>
  %d64 = stablehlo.convert %d : (tensor<i32>) -> tensor<i64>
  %c = stablehlo.constant dense<[2, 1]> : tensor<2xi64>
  %dr = stablehlo.reshape %d64 : (tensor<i64>) -> tensor<1xi64>
  %shape = stablehlo.concatenate %c, %dr, dim = 0 : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64>
  %i = stablehlo.dynamic_iota %shape, dim = 2 : (tensor<3xi64>) -> tensor<2x1x?xf32>
  %t = stablehlo.add %s, %i : tensor<2x1x?xf32>
  %o = stablehlo.dot_general %t, %k, batching_dims = [0] x [0], contracting_dims = [2] x [1]
       : (tensor<2x1x?xf32>, tensor<2x?x8xf32>) -> tensor<2x1x8xf32>
  return %o : tensor<2x1x8xf32>
}
"""


def test_the_rewritten_region_runs_each_length_as_its_sliced_program():
    # the rewrite alone, on a region with dynamic_iota (a static iota and
    # set_dimension_size) and get_dimension_size feeding a shape; compared with the region
    # refined to each length (the per-length path) on the same data
    import jax

    from thunder_mlir.runtime.xla import compile_stablehlo, jax_device
    text, sizes, padded = bounded_shapes.bound_region(_REGION, {0: (2, 6, 8)})
    assert sizes == [(0, 1)] and padded == []
    assert "set_dimension_size" in text and "dynamic_iota" not in text
    assert "#stablehlo.bounds<?, 6, ?>" in text
    dev = torch.device("cpu")
    exe = compile_stablehlo(text, dev)
    jd = jax_device(dev)
    g = torch.Generator().manual_seed(1)
    k, q = torch.randn(2, 6, 8, generator=g), torch.randn(2, 1, 8, generator=g)
    for n in (1, 3, 6):
        want = compile_stablehlo(refine.refine(_REGION, [(2, n, 8), (2, 1, 8)]), dev).execute(
            [jax.device_put(k[:, :n].numpy(), jd), jax.device_put(q.numpy(), jd)])[0]
        got = exe.execute([jax.device_put(k.numpy(), jd), jax.device_put(q.numpy(), jd),
                           jax.device_put(torch.tensor(n, dtype=torch.int32).numpy(), jd)])[0]
        torch.testing.assert_close(torch.from_numpy(jax.device_get(got).copy()),
                                   torch.from_numpy(jax.device_get(want).copy()))


def test_the_rewrite_refuses_what_it_cannot_bound():
    # an argument without a bound; a static size above a bound it must equal
    assert bounded_shapes.bound_region(_REGION, {}) is None
    wider = """
func.func @main(%k: tensor<2x?xf32>, %w: tensor<2x6xf32>) -> tensor<2x6xf32> {
  %o = stablehlo.add %k, %w : (tensor<2x?xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  return %o : tensor<2x6xf32>
}
"""
    assert bounded_shapes.bound_region(wider, {0: (2, 4)}) is None


def test_a_result_of_symbolic_size_comes_back_padded_with_its_size():
    out = """
func.func @main(%k: tensor<2x?xf32>) -> tensor<2x?xf32> {
  %o = stablehlo.negate %k : tensor<2x?xf32>
  return %o : tensor<2x?xf32>
}
"""
    text, sizes, padded = bounded_shapes.bound_region(out, {0: (2, 4)})
    assert sizes == [(0, 1)] and padded == [(0, 1, 4)]
    assert "-> (tensor<2x4xf32>, tensor<i32>)" in text


def _two_layers(q, k1, k2, mask, pos):
    # as litgpt's sliding-window layers: the mask's bias is computed once, in the region of
    # the first layer, and read by the second, whose cache slice (a torch step) comes after
    n = pos.max().item()
    m = mask[..., :n + 1]
    bias = torch.zeros_like(m, dtype=torch.float32).masked_fill(~m, float("-inf"))
    first = ((q @ k1[:, :n + 1].transpose(-1, -2)) + bias).softmax(-1)
    k2 = k2 + first.mean()  # (the next cache is computed by the first region: a split)
    second = ((q @ k2[:, :n + 1].transpose(-1, -2)) + bias).softmax(-1)
    return first @ k1[:, :n + 1], second @ k2[:, :n + 1], bias


def test_a_padded_result_feeds_the_next_bounded_region_and_is_returned_sized(monkeypatch):
    # the bias leaves the first region padded to its bound, with its size: the second
    # region takes it as it is; the program's output gets the sized view
    calls = _refines(monkeypatch)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 8, generator=g)
    k1, k2 = torch.randn(2, 12, 8, generator=g), torch.randn(2, 12, 8, generator=g)
    mask = torch.rand(1, 1, 20, generator=g) > 0.3
    mask[..., 0] = True
    jfn = thunder_mlir.jit(_two_layers)
    for n in (4, 9, 2, 11, 6):
        pos = torch.tensor([n])
        got, want = jfn(q, k1, k2, mask, pos), _two_layers(q, k1, k2, mask, pos)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert calls == [] and thunder_mlir.cache_misses(jfn) == 1
    note = _compiled_note(jfn)
    assert note.count("(bounded dynamic shapes)") >= 2, note
