"""Mixture of experts on XLA: ``torch._grouped_mm`` / ``F.grouped_mm`` (every form, values
and both gradients), ``torch.histc``, ``torch.bincount``'s XLA computation, and
transformers' MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE, GPT-OSS, DeepSeek-V3; tiny random
configurations) with both experts implementations, against eager PyTorch."""

from __future__ import annotations

import copy
import itertools
import os

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _i32(v):
    return torch.tensor(v, dtype=torch.int32)


# ---------------------------------------------------------------- grouped_mm
# (mat_a shape, mat_b shape, offs or None, the slice of the output eager writes)
# sizes are multiples of 8 (eager's kernel needs 16-byte strides for 16-bit dtypes)
GROUPED_CASES = {
    "2dx3d": ((24, 8), (3, 8, 16), [8, 8, 24], (slice(0, 24),)),  # an empty group
    "2dx3d_tail": ((24, 8), (3, 8, 16), [5, 13, 16], (slice(0, 16),)),  # rows past offs[-1]
    "2dx3d_decreasing": ((24, 16), (3, 16, 8), [10, 2, 20], (slice(0, 20),)),  # overlap
    "3dx2d": ((3, 8, 16), (16, 24), [8, 16, 24], (slice(None), slice(0, 24))),
    "2dx2d": ((8, 24), (24, 16), [8, 8, 24], (slice(None),)),
    "3dx3d": ((3, 8, 16), (3, 16, 8), None, (slice(None),)),
}


def _grouped_inputs(case, dtype, requires_grad=False):
    sa, sb, offs, _ = GROUPED_CASES[case]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*sa, generator=g).to(dtype).requires_grad_(requires_grad)
    b = torch.randn(*sb, generator=g).to(dtype).requires_grad_(requires_grad)
    return a, b, None if offs is None else _i32(offs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", list(GROUPED_CASES))
@pytest.mark.parametrize("fn", [torch._grouped_mm, F.grouped_mm],
                         ids=["torch._grouped_mm", "F.grouped_mm"])
def test_grouped_mm_values_and_grads_match_eager_on_xla(case, dtype, fn):
    """Values of the rows (columns) eager writes, and the gradients of both matrices, equal
    eager's; the op runs on XLA (no fallback) and its composite VJP rule is used."""
    from thunder_mlir.transforms import vjp_composites

    keep = GROUPED_CASES[case][3]
    a, b, offs = _grouped_inputs(case, dtype, requires_grad=True)

    def f(a, b, offs):
        return fn(a, b, offs=offs)

    jf = thunder_mlir.jit(f)
    rule = vjp_composites.COMPOSITE_VJP["ltorch.grouped_mm"]
    used = []
    vjp_composites.COMPOSITE_VJP["ltorch.grouped_mm"] = lambda *xs: used.append(1) or rule(*xs)
    try:
        out = jf(a, b, offs)
    finally:
        vjp_composites.COMPOSITE_VJP["ltorch.grouped_mm"] = rule
    ref = f(a, b, offs)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out[keep], ref[keep])
    assert thunder_mlir.fallback_ops(jf) == []
    # the cotangent is 0 where eager's output is uninitialized (a program can't read it)
    cot = torch.zeros_like(ref)
    cot[keep] = torch.randn(ref[keep].shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    ga, gb = torch.autograd.grad(out, (a, b), cot)
    ra, rb = torch.autograd.grad(ref, (a, b), cot)
    assert used == [1]
    if case == "2dx3d_tail":  # rows of mat_a past offs[-1]: eager's gradient is uninitialized
        ga, ra = ga[:16], ra[:16]
    if case == "2dx3d_decreasing":
        ga, ra = ga[:20], ra[:20]
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


def test_grouped_mm_non_finite_weights_of_other_experts_stay_out():
    """A row reads only its own group's weights: an inf in another expert gives no NaN
    (a 0/1 mask multiplied in, as jax's CPU ragged_dot does, would give 0 * inf = NaN)."""
    a, b, offs = _grouped_inputs("2dx3d", torch.float32)
    b[2, 0, 0] = float("inf")
    b[1, 3, 3] = float("nan")  # group 1 is empty
    f = lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
    out, ref = thunder_mlir.jit(f)(a, b, offs), f(a, b, offs)
    torch.testing.assert_close(out, ref)
    assert torch.isfinite(out[:8]).all()
    # and the 2d x 2d form: the jagged contraction masks both operands
    a, b, offs = _grouped_inputs("2dx2d", torch.float32)
    b[20, 0] = float("inf")  # in group 2's slice only
    out, ref = thunder_mlir.jit(f)(a, b, offs), f(a, b, offs)
    torch.testing.assert_close(out, ref)
    assert torch.isfinite(out[:2]).all()


# (mat_a shape, mat_b shape, offs): uneven groups, an empty one, one of 13 positions over 4
# tiles of 4, positions past offs[-1]
TILED_CASES = {
    "2dx3d": ((24, 8), (4, 8, 16), [3, 3, 16, 21]),
    "3dx2d": ((4, 8, 16), (16, 24), [3, 3, 16, 21]),
    "2dx2d": ((8, 24), (24, 16), [3, 3, 16, 21]),
}


@pytest.mark.parametrize("case", list(TILED_CASES))
def test_grouped_mm_in_tiles_matches_eager(case, monkeypatch):
    """The tiled formulation (frontend/symbols/moe.py ``_rows_tiled``,
    ``_contraction_tiled``) with tiles of 4: values and both gradients equal eager's (the
    written part); a 2d x 2d whose decreasing offsets overflow the tiles gives NaN for the
    groups that do not fit (never a wrong number)."""
    from thunder_mlir.frontend.symbols import moe

    monkeypatch.setattr(moe, "TILE", 4)
    sa, sb, offs = TILED_CASES[case]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*sa, generator=g, requires_grad=True)
    b = torch.randn(*sb, generator=g, requires_grad=True)
    offs = _i32(offs)
    f = lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
    ref = f(a, b, offs)
    keep = {"2dx3d": (slice(0, 21),), "3dx2d": (slice(None), slice(0, 21)),
            "2dx2d": (slice(None),)}[case]
    cot = torch.zeros_like(ref)
    cot[keep] = torch.randn(ref[keep].shape, generator=g)
    want = [ref[keep], *torch.autograd.grad(ref, (a, b), cot)]
    out = thunder_mlir.jit(f)(a, b, offs)
    got = [out[keep], *torch.autograd.grad(out, (a, b), cot)]
    for r in (want, got):  # eager's gradients are uninitialized where no group writes:
        if case == "2dx3d":  # rows of mat_a past offs[-1]
            r[1] = r[1][:21]
        if case == "3dx2d":  # columns of mat_b past offs[-1]
            r[2] = r[2][:, :21]
        if case == "2dx2d":  # the jagged positions past offs[-1]
            r[1], r[2] = r[1][:, :21], r[2][:21]
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    if case == "2dx2d":  # slices of 8, 0, 8, 0, 8 positions: tiles of 2 for 6 at most
        a, b = torch.randn(4, 8, generator=g), torch.randn(8, 4, generator=g)
        offs = _i32([8, 0, 8, 0, 8])
        out = thunder_mlir.jit(f)(a, b, offs)
        ref = f(a, b, offs)
        torch.testing.assert_close(out[:2], ref[:2])
        assert out[2].isnan().all() and out[4].isnan().all()


@pytest.mark.parametrize("call, message", [
    (lambda a, b, o: torch._grouped_mm(a, b, offs=o, bias=torch.ones(3, 16)),
     "Bias not supported yet"),
    (lambda a, b, o: torch._grouped_mm(a, b), "Have to provide offsets"),
    (lambda a, b, o: torch._grouped_mm(a, b, offs=o.long()), "Offsets have to be int32"),
    (lambda a, b, o: torch._grouped_mm(a, b, offs=o, out_dtype=torch.bfloat16),
     "output dtype must match"),
    (lambda a, b, o: torch._grouped_mm(a.double(), b.double(), offs=o),
     "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double"),
    (lambda a, b, o: torch._grouped_mm(a, b[:2], offs=o), "matrix batch sizes have to match"),
    (lambda a, b, o: torch._grouped_mm(a[:, :4], b, offs=o), "contraction dimension"),
])
def test_grouped_mm_raises_eagers_errors(call, message):
    a, b, offs = _grouped_inputs("2dx3d", torch.float32)
    with pytest.raises(RuntimeError, match=message):
        call(a, b, offs)
    with pytest.raises(RuntimeError, match=message):
        thunder_mlir.jit(call)(a, b, offs)


# --------------------------------------------------------------------- histc
def _histc_values(dtype, n=200):
    """Values on and near every bin edge of [-2, 3] with 10 bins, outside the range, the
    range's ends, NaN and infinities."""
    g = torch.Generator().manual_seed(0)
    edges = torch.linspace(-2, 3, 11, dtype=torch.float64)
    near = torch.cat([edges, edges + 1e-7, edges - 1e-7, edges + 1e-3, edges - 1e-3])
    rnd = torch.rand(n, generator=g, dtype=torch.float64) * 7 - 3
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), -2.0, 3.0, 3.5, -2.5])
    return torch.cat([near, rnd, special]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.float16], ids=str)
@pytest.mark.parametrize("bins, lo, hi", [(10, -2, 3), (7, -2.0, 3.0), (1, 0, 1),
                                          (4, 0, 3), (13, -2.7, 0.3)])
def test_histc_matches_eager_on_xla(dtype, bins, lo, hi):
    """Counts equal eager's exactly (every edge rule: the right edge in the last bin,
    values outside and NaN ignored, the bin of a value computed in the input dtype)."""
    x = _histc_values(dtype)
    if dtype in (torch.bfloat16, torch.float16):
        x = x[:250]  # more values than 2**8 saturate eager's bfloat16 counts (a fallback)
    f = lambda x: torch.histc(x, bins=bins, min=lo, max=hi)  # noqa: E731
    jf = thunder_mlir.jit(f)
    out, ref = jf(x), f(x)
    assert out.dtype == ref.dtype == dtype and out.shape == (bins,)
    assert torch.equal(out, ref), (out, ref)
    assert thunder_mlir.fallback_ops(jf) == []


def test_histc_shapes_and_method_form():
    x = torch.randn(2, 3, 4)
    f = lambda x: (x.histc(bins=5, min=-1, max=1), torch.histc(x[0, 0, 0], 3, 0, 1),  # noqa
                   torch.histc(x[:0], 4, 0, 1))
    jf = thunder_mlir.jit(f)
    for o, r in zip(jf(x), f(x)):
        assert torch.equal(o, r)
    assert thunder_mlir.fallback_ops(jf) == []


def test_histc_and_bincount_of_large_inputs_scatter():
    """Past 2**20 (values x bins) the counts are a scatter-add instead of a one-hot table."""
    from thunder_mlir.frontend.symbols.moe import bincount_sized

    x = torch.randn(300_000, generator=torch.Generator().manual_seed(0))
    f = lambda x: torch.histc(x, bins=10, min=-2, max=2)  # noqa: E731
    jf = thunder_mlir.jit(f)
    assert torch.equal(jf(x), f(x))
    assert "stablehlo.scatter" in next(st.text for st in thunder_mlir.last_traces(jf)
                                       if st.name == "stablehlo")
    i = torch.randint(0, 3000, (1000,), generator=torch.Generator().manual_seed(1))
    w = torch.randn(1000)
    ref = torch.bincount(i, w, minlength=3000)
    out = thunder_mlir.jit(lambda i, w: bincount_sized(i, w, 3000))(i, w)
    torch.testing.assert_close(out, ref)


def test_moe_ops_trace_once_with_symbolic_sizes():
    """grouped_mm, histc and bincount_sized (with a symbolic length, as the
    data-dependent-size work will call it) under dynamic=True: one trace for three sizes."""
    from thunder_mlir.frontend.symbols.moe import bincount_sized

    def f(a, b, offs, x, i):
        return (torch._grouped_mm(a, b, offs=offs), torch.histc(x, bins=4, min=0, max=3),
                bincount_sized(i, None, i.shape[0]))

    jf = thunder_mlir.jit(f, dynamic=True)
    g = torch.Generator().manual_seed(0)
    for m in (16, 24, 40):
        a, b = torch.randn(m, 8, generator=g), torch.randn(3, 8, 8, generator=g)
        offs = _i32([m // 4, m // 2, m])
        x = torch.rand(m + 1, generator=g) * 4
        i = torch.randint(0, m, (m,), generator=g)
        out = jf(a, b, offs, x, i)
        torch.testing.assert_close(out[0], torch._grouped_mm(a, b, offs=offs))
        assert torch.equal(out[1], torch.histc(x, bins=4, min=0, max=3))
        assert torch.equal(out[2], torch.bincount(i, minlength=m)[:m])
    assert thunder_mlir.cache_misses(jf) == 1, thunder_mlir.cache_info(jf)


def test_histc_is_not_differentiable_as_in_eager():
    x = torch.randn(50, requires_grad=True)
    jf = thunder_mlir.jit(lambda x: torch.histc(x, bins=4, min=-1, max=1))
    out = jf(x)
    assert not out.requires_grad and out.grad_fn is None
    y = thunder_mlir.jit(lambda x: torch.histc(x, bins=4, min=-1, max=1) * x.sum())(x)
    (g,) = torch.autograd.grad(y.sum(), x)  # only through x.sum()
    torch.testing.assert_close(g, torch.full_like(x, torch.histc(x, 4, -1, 1).sum().item()))


@pytest.mark.parametrize("call, why", [
    (lambda x: torch.histc(x, bins=4), "min == max"),  # the range comes from the data
    (lambda x: torch.histc(x.bfloat16().repeat(2), bins=4, min=-1, max=1), "saturate"),
])
def test_histc_falls_back_where_eager_depends_on_data_or_threads(call, why):
    x = torch.randn(200)
    jf = thunder_mlir.jit(call)
    torch.testing.assert_close(jf(x), call(x))
    assert thunder_mlir.fallback_ops(jf) == ["torch.histc"]
    assert why in str(thunder_mlir.examine(call, x))


def test_histc_data_dependent_range_error_is_eagers():
    x = torch.tensor([1.0, float("inf")])
    with pytest.raises(RuntimeError, match="is not finite"):
        thunder_mlir.jit(lambda x: torch.histc(x, bins=4))(x)


# ------------------------------------------------------------------ bincount
def test_bincount_of_an_empty_input_has_a_static_length():
    x = torch.zeros(0, dtype=torch.int64)
    f = lambda x, w: (torch.bincount(x, minlength=5), torch.bincount(x, w, 3))  # noqa: E731
    w = torch.zeros(0)
    jf = thunder_mlir.jit(f)
    for o, r in zip(jf(x, w), f(x, w)):
        assert torch.equal(o, r) and o.dtype == r.dtype
    # (bincount's length is data-dependent: value_guards.py sends every bincount to the
    # value-specialized fallback before its symbol, the empty input included)


@pytest.mark.parametrize("wdtype", [None, torch.float32, torch.float64, torch.bfloat16,
                                    torch.int64], ids=str)
def test_bincount_sized_matches_eager_given_eagers_length(wdtype):
    """The XLA computation the data-dependent-size work calls (``bincount_sized``, with the
    length ``bincount_length`` computes): eager's counts and dtypes."""
    from thunder_mlir.frontend.symbols.moe import bincount_length, bincount_sized

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 9, (40,), generator=g, dtype=torch.int32)
    w = None if wdtype is None else torch.randn(40, generator=g).mul(4).to(wdtype)
    ref = torch.bincount(x, w, minlength=3)
    n = ref.shape[0]  # the size the data-dependent machinery would supply

    def f(x, w):
        return bincount_sized(x, w, n), bincount_length(x, 3), bincount_length(x, 20)

    out, length, length20 = thunder_mlir.jit(f)(x, w)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref)
    assert length.item() == n and length20.item() == 20


def test_bincount_with_values_is_eagers_for_changing_lengths():
    """bincount's length is data-dependent: specialized on the value of the call and
    guarded (frontend/value_guards.py), so every call returns eager's counts."""
    f = lambda x: torch.bincount(x)  # noqa: E731
    jf = thunder_mlir.jit(f)
    for x in (torch.tensor([0, 3, 3, 1]), torch.tensor([5, 1]), torch.tensor([0, 3, 3, 1])):
        assert torch.equal(jf(x), f(x))


# ---------------------------------------------------------------- MoE models
transformers = pytest.importorskip("transformers", reason="transformers is a test dependency")
transformers.logging.set_verbosity_error()

VOCAB = 128
MODELS = ["mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "deepseek_v3"]


def make_moe_model(name: str, experts: str) -> torch.nn.Module:
    """A tiny random-weight causal LM of transformers' ``name`` family with 4 experts, 2 per
    token, and the ``experts`` implementation (``grouped_mm`` or ``eager``)."""
    T = transformers
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64,
                  experts_implementation=experts, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)
    torch.manual_seed(0)
    if name == "mixtral":
        cfg = T.MixtralConfig(**common, intermediate_size=64, num_local_experts=4,
                              num_experts_per_tok=2)
        return T.MixtralForCausalLM(cfg)
    if name == "qwen2_moe":
        cfg = T.Qwen2MoeConfig(**common, intermediate_size=64, moe_intermediate_size=32,
                               shared_expert_intermediate_size=64, num_experts=4,
                               num_experts_per_tok=2, decoder_sparse_step=1)
        return T.Qwen2MoeForCausalLM(cfg)
    if name == "qwen3_moe":
        cfg = T.Qwen3MoeConfig(**common, intermediate_size=64, moe_intermediate_size=32,
                               num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                               head_dim=16)
        return T.Qwen3MoeForCausalLM(cfg)
    if name == "gpt_oss":
        cfg = T.GptOssConfig(**common, intermediate_size=64, num_local_experts=4,
                             num_experts_per_tok=2, head_dim=16, sliding_window=8,
                             layer_types=["sliding_attention", "full_attention"])
        return T.GptOssForCausalLM(cfg)
    if name == "deepseek_v3":
        # MLA expands keys to num_attention_heads itself: its KV heads must equal them (else
        # transformers' sdpa path repeats them once more when it cannot use enable_gqa)
        common["num_key_value_heads"] = 4
        cfg = T.DeepseekV3Config(**common, intermediate_size=64, moe_intermediate_size=32,
                                 n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                 n_group=2, topk_group=1, first_k_dense_replace=1,
                                 kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
                                 qk_nope_head_dim=8, v_head_dim=16)
        return T.DeepseekV3ForCausalLM(cfg)
    raise KeyError(name)


def _grads(model):
    return {k: p.grad.detach().clone() for k, p in model.named_parameters()
            if p.grad is not None}


def _f64_grads(model, ids):
    """Parameter gradients of the loss computed eagerly in float64 (eager experts: the
    grouped_mm kernel has no float64)."""
    md = copy.deepcopy(model).double()
    md.config._experts_implementation = "eager"
    md.zero_grad()
    md(ids, labels=ids, use_cache=False).loss.backward()
    return _grads(md)


def _assert_grads_match(mine, eager, model, ids):
    """Each gradient is close to eager's (assert_close defaults), or no farther from the
    float64 computation than eager's (PyTorch's rule for another implementation,
    TestCommon._ref_test_helper); and, as examples/_train_common.py measures, its largest
    difference from eager's is at most 1e-4 of eager's largest (assert_close's atol of 1e-5
    alone would let a 0.1% error through on gradients of size 1e-2)."""
    assert mine.keys() == eager.keys()
    f64 = None
    for k in eager:
        rel = (mine[k] - eager[k]).abs().max().item() / max(eager[k].abs().max().item(), 1e-12)
        assert rel <= 1e-4, (k, rel)
        try:
            torch.testing.assert_close(mine[k], eager[k])
        except AssertionError:
            f64 = f64 or _f64_grads(model, ids)
            err = (mine[k].double() - f64[k]).abs().max().item()
            ref_err = (eager[k].double() - f64[k]).abs().max().item()
            assert err <= ref_err * 1.01, (k, err, ref_err)


# The ``eager`` experts forward of Qwen2-MoE and Qwen3-MoE is Mixtral's, copied by
# transformers' modular converter; GPT-OSS's writes its accumulator the same way (its
# defect, layer 0's experts without a gradient, is tested in small by test_idioms_mutation's
# accumulator cases); each costs about 65 s here (a value stop per expert and layer, each
# re-tracing the prefix), so CI runs the eager path for Mixtral and DeepSeek-V3, and
# THUNDER_MOE_ALL=1 for all five.
_EAGER_NOT_IN_CI = {} if os.environ.get("THUNDER_MOE_ALL") == "1" else {
    "qwen2_moe": "its eager experts forward is Mixtral's (transformers' modular copy)",
    "qwen3_moe": "its eager experts forward is Mixtral's (transformers' modular copy)",
    "gpt_oss": "its accumulator writes are tested in small (test_idioms_mutation.py)",
    # (121 s in CI, whose make test passed 30 minutes on 2026-12-02)
    "mixtral": "its eager experts' forward and gradients are test_data_dependent's "
               "test_mixtral_eager_experts_forward_and_grads_match_eager",
    "deepseek_v3": "its eager experts forward is Mixtral's (the same torch.where loop)",
}
# (CI time, 2026-12-02) the grouped_mm experts of Qwen2/Qwen3-MoE are Mixtral's module;
# THUNDER_MOE_ALL=1 runs them
_GROUPED_NOT_IN_CI = {} if os.environ.get("THUNDER_MOE_ALL") == "1" else {
    "qwen2_moe": "its grouped_mm experts are Mixtral's (transformers' modular copy)",
    "qwen3_moe": "its grouped_mm experts are Mixtral's (transformers' modular copy)",
}


@pytest.mark.parametrize("experts", ["grouped_mm", "eager"])
@pytest.mark.parametrize("name", MODELS)
def test_moe_model_logits_and_gradients_match_eager(name, experts):
    """Logits and every parameter gradient of the training loss equal eager's; the
    ``grouped_mm`` experts run with 0 fallback ops, the ``eager`` experts path
    (``torch.where(expert_mask[e])``) through its data-dependent sizes."""
    if experts == "eager" and name in _EAGER_NOT_IN_CI:
        pytest.skip(f"{name}: {_EAGER_NOT_IN_CI[name]}; THUNDER_MOE_ALL=1 runs it")
    if experts == "grouped_mm" and name in _GROUPED_NOT_IN_CI:
        pytest.skip(f"{name}: {_GROUPED_NOT_IN_CI[name]}; THUNDER_MOE_ALL=1 runs it")
    model = make_moe_model(name, experts)
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    jm = thunder_mlir.jit(model)
    out = jm(ids, labels=ids, use_cache=False)
    ref = model(ids, labels=ids, use_cache=False)
    torch.testing.assert_close(out.logits, ref.logits)
    torch.testing.assert_close(out.loss, ref.loss)
    if experts == "grouped_mm":
        assert thunder_mlir.fallback_ops(jm) == []
    out.loss.backward()
    mine = _grads(model)
    model.zero_grad()
    ref.loss.backward()
    _assert_grads_match(mine, _grads(model), model, ids)


def test_moe_generate_returns_eagers_tokens():
    """generate() with a jitted forward (Mixtral, grouped_mm experts, dynamic cache):
    eager's tokens and every step's scores."""
    m = make_moe_model("mixtral", "grouped_mm").eval()
    ids = torch.randint(3, VOCAB, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0

    def gen():
        return m.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                          eos_token_id=None, output_scores=True, return_dict_in_generate=True)

    ref = gen()
    m.forward = jfn = thunder_mlir.jit(m.forward)
    out = gen()
    assert torch.equal(out.sequences, ref.sequences)
    for mine, eager in zip(out.scores, ref.scores, strict=True):
        torch.testing.assert_close(mine, eager, rtol=1e-5, atol=1e-5)
    assert thunder_mlir.fallback_ops(jfn) == []


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_take_of_a_permuted_tensor_matches_eager(perm):
    """``x.permute(perm).index_select(d, i)`` (and of ``x.transpose(1, 2).permute(perm)``) for
    every dim d, values and gradients exact:
    where ``perm[d] == d`` the lowering gathers from ``x`` and transposes the result
    (hlo.lower_take), elsewhere it gathers from the transposed tensor."""
    def f(x, i):
        t = x.permute(perm)
        t2 = x.transpose(1, 2).permute(perm)  # a chain of transposes
        return [u.index_select(d, i) * 2 for u in (t, t2) for d in range(3)]
    torch.manual_seed(0)
    x = torch.randn(4, 5, 6, requires_grad=True)
    i = torch.tensor([3, 0, 0, 2])
    e, j = f(x, i), thunder_mlir.jit(f)(x, i)
    for a, b in zip(e, j):
        assert torch.equal(a, b)
    ge = torch.autograd.grad(sum(o.sum() * (k + 1) for k, o in enumerate(e)), x)[0]
    gj = torch.autograd.grad(sum(o.sum() * (k + 1) for k, o in enumerate(j)), x)[0]
    assert torch.equal(ge, gj)
