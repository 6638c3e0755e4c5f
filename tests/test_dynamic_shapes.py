"""Dynamic shapes: ``jit(dynamic=...)``, ``mark_dynamic``, automatic dynamic dims, shape
guards, the symbolic program and the static fallback (thunder_mlir/dynamic.py,
ir/symbolic.py, ir/hlo_dynamic.py, runtime/refine.py). Eager PyTorch is the oracle."""

from __future__ import annotations

import pytest
import torch

import thunder_mlir


def _entries(jfn):
    return thunder_mlir.cache_info(jfn)["entries"]


def _xla_compiles(jfn) -> int:
    """Concrete shapes compiled for the dynamic entries of ``jfn``."""
    f = jfn._fn if isinstance(jfn, thunder_mlir.ThunderModule) else jfn
    entries = [x for e in f.cache.entries.values() for x in [e] + e.alternatives]
    return sum(len(getattr(s.executable, "specializations", ())) for e in entries
               for s in e.plan.steps)


def test_bert_encoder_dynamic_true_serves_eight_lengths_from_one_trace():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    jm = thunder_mlir.jit(model, dynamic=True)
    lengths = (5, 7, 9, 12, 16, 23, 31, 40)
    with torch.no_grad():
        for n in lengths:
            ids = torch.randint(0, 100, (2, n))
            mask = torch.ones(2, n, dtype=torch.long)
            mask[1, n - 2:] = 0  # a padded second sequence
            out = jm(ids, attention_mask=mask)
            ref = model(ids, attention_mask=mask)
            torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state,
                                       atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.pooler_output, ref.pooler_output,
                                       atol=1e-5, rtol=1e-5)
    info = thunder_mlir.cache_info(jm)
    assert info["misses"] <= 2, info["recompile_reasons"]
    assert info["misses"] == 1, info["entries"][0].get("static_because")
    (entry,) = info["entries"]
    # batch and length of input_ids and of attention_mask (s0 == s2, s1 == s3 guarded)
    assert sorted(entry["dynamic_dims"].values()) == [f"s{k} (dynamic=True)" for k in range(4)]
    assert "s1 <= 64" in entry["shape_guards"]  # the position-embedding table's length
    assert _xla_compiles(jm) == len(lengths)  # one XLA compile per concrete shape


def _mlp(x, w):
    return torch.softmax(torch.nn.functional.gelu(x @ w + 1.0), dim=-1).sum(-1)


def test_mark_dynamic_traces_once():
    w = torch.randn(8, 4)
    jf = thunder_mlir.jit(_mlp)
    for n in (3, 6, 11):
        x = torch.randn(n, 8)
        thunder_mlir.mark_dynamic(x, 0)
        torch.testing.assert_close(jf(x, w), _mlp(x, w))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 1
    assert info["entries"][0]["dynamic_dims"] == {"args[0][0]": "s0 (mark_dynamic)"}
    assert info["entries"][0]["inputs"]["args[0]"]["shape"] == (None, 8)


def test_automatic_dynamic_after_one_change():
    w = torch.randn(8, 4)
    jf = thunder_mlir.jit(_mlp)
    for n in (3, 5, 7, 9, 13):
        x = torch.randn(n, 8)
        torch.testing.assert_close(jf(x, w), _mlp(x, w))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2  # static for 3, then symbolic for all the others
    assert info["recompile_reasons"] == [
        "input args[0] changed: tensor(shape=(3, 8), dtype=torch.float32, device=cpu, "
        "requires_grad=False) -> tensor(shape=(5, 8), dtype=torch.float32, device=cpu, "
        "requires_grad=False); dynamic from now on (automatic): args[0][0]"]
    dyn = [e for e in info["entries"] if "dynamic_dims" in e]
    assert dyn[0]["dynamic_dims"] == {"args[0][0]": "s0 (automatic: size changed 3 -> 5)"}
    assert info["dynamic"]["automatic"] == {"tensor 0": {0: "automatic: size changed 3 -> 5"}}


def test_dynamic_false_is_static_even_when_marked():
    w = torch.randn(8, 4)
    jf = thunder_mlir.jit(_mlp, dynamic=False)
    for n in (3, 5, 7):
        x = torch.randn(n, 8)
        thunder_mlir.mark_dynamic(x, 0)
        torch.testing.assert_close(jf(x, w), _mlp(x, w))
    assert thunder_mlir.cache_info(jf)["misses"] == 3


def _branchy(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_guard_on_a_symbolic_relation_gives_eager_result_on_both_sides():
    jf = thunder_mlir.jit(_branchy, dynamic=True)
    for n in (3, 6, 8, 2, 4, 5):
        x = torch.randn(n, 3)
        torch.testing.assert_close(jf(x), _branchy(x))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2
    assert info["recompile_reasons"] == [
        "a shape guard failed: s0 <= 4 is false for s0=6, s1=3"]
    assert sorted(tuple(e["shape_guards"]) for e in info["entries"]) == [
        ("s0 <= 4",), ("s0 > 4",)]


def test_two_inputs_with_a_symbolic_equality_guard():
    def f(x, y):
        return x + y  # broadcasting s0 against s1: guard s0 == s1

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 5):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        torch.testing.assert_close(jf(x, y), f(x, y))
    x, y = torch.randn(4, 2), torch.randn(1, 2)  # size 1: static, another entry
    torch.testing.assert_close(jf(x, y), f(x, y))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2
    assert "s0 == s2" in info["entries"][0]["shape_guards"]


def test_symbolic_program_in_last_traces():
    w = torch.randn(8, 4)
    x = torch.randn(5, 8)
    thunder_mlir.mark_dynamic(x, 0)
    jf = thunder_mlir.jit(_mlp)
    jf(x, w)
    stages = {s.name: s.text for s in thunder_mlir.last_traces(jf)}
    assert "func.func @computation(%arg0: tensor<?x8xf32>" in stages["initial"]
    assert 'thunder.arg_shapes = [["s0", "8"], ["8", "4"]]' in stages["initial"]
    assert '-> tensor<?x4xf32>' in stages["prims"] and 'thunder.shape = ["s0", "4"]' in \
        stages["prims"]
    hlo = stages["stablehlo"]
    assert "stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x8xf32>) -> tensor<i32>" \
        in hlo
    assert "stablehlo.dynamic_broadcast_in_dim" in hlo


def test_int_of_a_symbolic_size_falls_back_to_static_with_reason():
    def f(x):
        return x.sum(0) * 0 + sum(range(x.shape[0]))  # range() needs a Python int

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 2)
        torch.testing.assert_close(jf(x), f(x))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2
    assert "needs its value as a Python int" in info["entries"][0]["static_because"]
    assert info["dynamic"]["static_because"] == info["entries"][0]["static_because"]


def test_prim_without_dynamic_lowering_falls_back_to_static():
    def f(x):
        return torch.sort(x, 0).values

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 2)
        torch.testing.assert_close(jf(x), f(x))
    reason = thunder_mlir.cache_info(jf)["entries"][0]["static_because"]
    assert "has no lowering for symbolic sizes" in reason


def test_integer_cumsum_along_a_symbolic_dim():
    def f(mask, x):
        return mask.cumsum(-1) * 2, x.cumsum(0)  # along a symbolic dim and a static one

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 7, 12):
        mask = torch.randint(0, 2, (2, n))
        x = torch.randint(-5, 5, (4, n))
        for a, b in zip(jf(mask, x), f(mask, x)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 1, info["entries"][0].get("static_because")


def test_float_cumsum_along_a_symbolic_dim_is_static():
    def f(x):
        return x.cumsum(1)

    jf = thunder_mlir.jit(f, dynamic=True)
    x = torch.randn(2, 5)
    torch.testing.assert_close(jf(x), f(x))
    reason = thunder_mlir.cache_info(jf)["entries"][0]["static_because"]
    assert reason == "cumsum of a non-integer tensor along a symbolic dim"


def test_gpt2_dynamic_true_one_trace():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=4,
                                  n_positions=64, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    jm = thunder_mlir.jit(model, dynamic=True)
    with torch.no_grad():
        for n in (5, 9, 14):
            ids = torch.randint(0, 100, (2, n))
            torch.testing.assert_close(jm(ids, use_cache=False).logits,
                                       model(ids, use_cache=False).logits,
                                       atol=1e-5, rtol=1e-5)
    info = thunder_mlir.cache_info(jm)
    assert info["misses"] == 1, info["entries"][0].get("static_because")


def test_gradients_fall_back_to_static_with_reason():
    w = torch.randn(8, 4, requires_grad=True)
    jf = thunder_mlir.jit(_mlp, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 8)
        jf(x, w).sum().backward()
        g = w.grad.clone()
        w.grad = None
        _mlp(x, w).sum().backward()
        torch.testing.assert_close(g, w.grad)
        w.grad = None
    info = thunder_mlir.cache_info(jf)
    reason = info["entries"][0]["static_because"]
    assert "gradients through symbolic sizes" in reason
    assert info["dynamic"]["static_because"] is None  # calls without grad stay symbolic
    with torch.no_grad():
        for n in (4, 7):
            x = torch.randn(n, 8)
            torch.testing.assert_close(jf(x, w), _mlp(x, w))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 3  # two static entries (with grad), one symbolic (no grad)
    assert sum("dynamic_dims" in e for e in info["entries"]) == 1


def test_size_one_stays_static_and_is_its_own_entry():
    w = torch.randn(8, 4)
    jf = thunder_mlir.jit(_mlp, dynamic=True)
    for n in (1, 4, 7):
        x = torch.randn(n, 8)
        torch.testing.assert_close(jf(x, w), _mlp(x, w))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2
    shapes = sorted(str(e["inputs"]["args[0]"]["shape"]) for e in info["entries"])
    assert shapes == ["(1, None)", "(None, None)"]


def test_mark_dynamic_rejects_bad_dims():
    with pytest.raises(IndexError):
        thunder_mlir.mark_dynamic(torch.zeros(2, 3), 2)
    with pytest.raises(TypeError):
        thunder_mlir.mark_dynamic([1, 2], 0)


def test_output_view_of_an_input_with_symbolic_sizes_is_static():
    def f(x):
        return x.view(x.shape[0] * 2, -1)  # eager's view of the input, replayed per call

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 4)
        out = jf(x)
        torch.testing.assert_close(out, f(x))
        assert out.data_ptr() == x.data_ptr()  # a view, as eager's
    assert "a view of an input" in thunder_mlir.cache_info(jf)["entries"][0]["static_because"]


def test_patterns_with_constants_and_iotas_take_symbolic_shapes():
    def f(x):
        y = torch.exp2(x) + torch.log2(x.abs() + 1) + torch.reciprocal(x + 3) + torch.trunc(x)
        return y, torch.argmax(x, 0), torch.argmin(x, 1)

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 6, 9):
        x = torch.randn(n, 5)
        for a, b in zip(jf(x), f(x)):
            torch.testing.assert_close(a, b)
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 1, info["entries"][0].get("static_because")


def test_torch_fallback_op_with_symbolic_sizes_is_static():
    from conftest import unregistered_cumprod

    def f(x):
        return unregistered_cumprod(x.sin(), 1) + 1  # no symbol: the torch executor

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), f(x))
    reason = thunder_mlir.cache_info(jf)["entries"][0]["static_because"]
    assert "torch meta kernel" in reason


def test_outputs_of_a_symbolic_region_take_each_calls_shape():
    """The executable of a region with ``?`` dims changes with the call's shapes: its
    outputs are not made by result handlers fixed at the first call's shapes (plan.py)."""
    from thunder_mlir.runtime.plan import XlaStep
    from thunder_mlir.runtime.refine import ShapeSpecializedExecutable

    def f(x, y):
        return (x * 2 + y).sum(-1), x.cos()

    jf = thunder_mlir.jit(f, dynamic=True)
    for n in (5, 7, 9, 5):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        for a, e in zip(jf(x, y), f(x, y)):
            torch.testing.assert_close(a, e)
    steps = [s for s in jf.last.plan.steps if type(s) is XlaStep]
    assert steps and all(type(s.executable) is ShapeSpecializedExecutable for s in steps)
    assert all(s.handlers is None for s in steps)


def test_symbolic_sizes_as_operands_of_tensor_arithmetic():
    """``arange(q) + past_length`` (Hugging Face's mask code): a size as an operand of a
    tensor's add/sub/mul/comparison is traced in the dtype eager uses for a Python int, so
    one trace serves every length; where the conversion could round (bfloat16) the
    function compiles static, with the reason in cache_info."""
    def f(x, m):
        n = m.shape[1]
        return (x + n, torch.arange(n) + n, n - x, x * n, m < n, n >= m,
                m.cumsum(-1) - 1 + n, m.int() * n)

    jf = thunder_mlir.jit(f, dynamic=True)
    for length in (5, 7, 9):
        x, m = torch.randn(3, length), torch.ones(2, length, dtype=torch.long)
        for a, e in zip(jf(x, m), f(x, m), strict=True):
            assert a.dtype == e.dtype and torch.equal(a, e)
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 1 and info["dynamic"]["static_because"] is None

    jb = thunder_mlir.jit(lambda x, m: x + m.shape[1], dynamic=True)
    x, m = torch.randn(3, 8, dtype=torch.bfloat16), torch.ones(2, 8)
    assert torch.equal(jb(x, m), x + 8)
    assert "bfloat16" in thunder_mlir.cache_info(jb)["dynamic"]["static_because"]
