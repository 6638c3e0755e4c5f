"""Fused attention (passes/fused_attention.py, passes/cudnn_attention.py,
ir/cudnn_attention.py) and the pipeline's target (pipeline.Target, ``compile_only``).

* Values: the GPU's fused-attention pass run on CPU programs (``targeting`` a CPU target
  with ``attention=True``), whose ``flash_attention`` composites then decompose: outputs
  and q/k/v gradients against eager, within bfloat16's tolerance or no farther from a
  float64 eager run than eager's own bfloat16 result (PyTorch's rule for another
  implementation); what crosses from the forward to the backward is q, k, v, the output
  and a [B, N, T] float32 log-sum-exp, never [.., T, S] probabilities.
* The GPU program: a model compiled for ``cuda:0`` without a GPU (``compile_only``, meta
  inputs) has cuDNN's custom calls in its StableHLO, forward and backward, and the
  target's choices in its stages.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir import pipeline

CPU_FUSED = pipeline.Target(torch.device("cpu"), attention=True)


def _close_or_nearer(got, want, ref64, what):
    """Within the dtype's tolerance of eager, else no farther from float64 than eager."""
    try:
        torch.testing.assert_close(got, want)
    except AssertionError:
        err = (got.double() - ref64).abs().max()
        eager_err = (want.double() - ref64).abs().max()
        assert err <= eager_err * 1.5 + 1e-3, f"{what}: {err} from float64, eager {eager_err}"


CASES = {  # name: (q shape, k/v shape, kwargs of scaled_dot_product_attention)
    "causal": ((2, 4, 16, 32), (2, 4, 16, 32), dict(is_causal=True)),
    "full": ((2, 4, 16, 32), (2, 4, 24, 32), {}),
    "gqa_causal_scale": ((1, 8, 16, 64), (1, 2, 16, 64),
                         dict(is_causal=True, enable_gqa=True, scale=0.3)),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", CASES)
def test_values_and_grads_match_eager(name, dtype):
    qs, ks, kwargs = CASES[name]
    torch.manual_seed(0)
    q, k, v = (torch.randn(s, dtype=dtype, requires_grad=True) for s in (qs, ks, ks))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    with pipeline.targeting(CPU_FUSED):
        jfn = thunder_mlir.jit(fn)
        out = jfn(q, k, v)
    want = fn(q, k, v)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = fn(q64, k64, v64)
    _close_or_nearer(out, want, ref, "output")
    cot = torch.randn_like(out)
    got_g = torch.autograd.grad(out, (q, k, v), cot)
    want_g = torch.autograd.grad(want, (q, k, v), cot)
    ref_g = torch.autograd.grad(ref, (q64, k64, v64), cot.double())
    for n, a, b, r in zip("qkv", got_g, want_g, ref_g):
        assert a.dtype == dtype and a.shape == b.shape
        _close_or_nearer(a, b, r, f"d{n}")
    stages = {s.name: s.text for s in thunder_mlir.last_traces(jfn)}
    assert 'name = "thunder.flash_attention"' in stages["fused-attention"]
    assert "ltorch.scaled_dot_product_attention" not in stages["fused-attention"]
    # the forward's results: the output, then residuals; no [.., T, S] probabilities
    forward = stages["grad"].split("func.func @backward")[0]
    results = forward.split("->", 1)[1].split("attributes")[0]
    t, s = qs[2], ks[2]
    assert f"x{t}x{s}x" not in results and f"{t}x{s}xf32" not in results, results
    b, n = qs[0], qs[1]
    assert f"tensor<{b}x{n}x{t}xf32>" in results  # the log-sum-exp


def test_calls_not_taken_say_why_and_match_eager():
    """An attn_mask, a float32 call and an odd head dim keep their decomposition, each
    marked with the reason (shown in last_traces), and compute eager's values."""
    torch.manual_seed(1)
    q = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    mask = torch.rand(8, 8) > 0.3
    q32 = torch.randn(1, 2, 8, 16)
    q12 = torch.randn(1, 2, 8, 12, dtype=torch.bfloat16)

    def fn(q, mask, q32, q12):
        return (F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
                F.scaled_dot_product_attention(q32, q32, q32),
                F.scaled_dot_product_attention(q12, q12, q12))

    with pipeline.targeting(CPU_FUSED):
        jfn = thunder_mlir.jit(fn)
        outs = jfn(q, mask, q32, q12)
    refs = fn(q.double(), mask, q32.double(), q12.double())
    for i, (got, want, ref) in enumerate(zip(outs, fn(q, mask, q32, q12), refs)):
        _close_or_nearer(got, want, ref, f"output {i}")
    text = next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == "fused-attention")
    assert 'thunder.fused_attention = "not taken: an attn_mask operand"' in text
    assert 'thunder.fused_attention = "not taken: dtype torch.float32' in text
    assert 'thunder.fused_attention = "not taken: head dim 12' in text
    assert "thunder.flash_attention" not in text


def test_cpu_default_target_keeps_the_decomposed_attention():
    q = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    jfn = thunder_mlir.jit(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True))
    torch.testing.assert_close(jfn(q), F.scaled_dot_product_attention(q, q, q, is_causal=True))
    names = [s.name for s in thunder_mlir.last_traces(jfn)]
    assert "fused-attention" not in names
    compiled = thunder_mlir.last_traces(jfn)[-1].text
    assert "// fused-attention: off" in compiled and "// merge-dots: on" in compiled


class _Block(torch.nn.Module):
    """Attention and an MLP, bf16: what a GPT-2 block computes."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, t, d)).float().square().mean()


def _gpu_programs(model, *inputs):
    target = pipeline.Target(torch.device("cuda", 0), "NVIDIA H100 80GB HBM3")
    with pipeline.compile_only(target):
        with pytest.raises(pipeline.ProgramsCaptured) as info:
            thunder_mlir.jit(model)(*inputs)
    return info.value


def test_gpu_training_program_uses_cudnn_attention_without_a_gpu():
    model = _Block().to("meta", torch.bfloat16)
    x = torch.zeros(2, 32, 64, dtype=torch.bfloat16, device="meta")
    captured = _gpu_programs(model, x)
    names = [p.name for p in captured.programs]
    assert names == ["forward", "backward"]
    (fwd_region,), (bwd_region,) = (p.regions for p in captured.programs)
    assert "custom_call @__cudnn$fmhaSoftmax(" in fwd_region[1]
    assert "custom_call @__cudnn$fmhaSoftmaxBackward(" in bwd_region[1]
    # no [B, N, T, S] = [2, 4, 32, 32] value in either program
    assert "2x4x32x32x" not in fwd_region[1] + bwd_region[1]
    stages = {s.name: s for s in captured.stages}
    assert stages["prims"].pipeline.startswith("builtin.module(cudnn-attention,decompose")
    assert stages["grad"].pipeline == "builtin.module(grad{remat=true save-materialized=true})"
    assert "computed-once=false" in stages["stablehlo"].pipeline
    assert "narrow-dots=true" in stages["stablehlo"].pipeline
    assert "fused-attention: on (cuDNN" in stages["xla-compile"].text
    assert "captured, not compiled" in stages["xla-compile"].text


def test_compile_only_asks_for_meta_inputs():
    target = pipeline.Target(torch.device("cuda", 0), "NVIDIA H100 80GB HBM3")
    with pipeline.compile_only(target):
        with pytest.raises(thunder_mlir.UnsupportedInputError, match="pass meta tensors"):
            thunder_mlir.jit(lambda x: x * 2)(torch.ones(3))


class _GatedMLP(torch.nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x)), the product read by the backward's gemm."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(16, 48, bias=False)
        self.up = torch.nn.Linear(16, 48, bias=False)
        self.down = torch.nn.Linear(48, 16, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def test_gpu_grad_choice_computes_eagers_gradients(monkeypatch):
    """The GPU target's ``grad{save-materialized=true}`` (a value a backward gemm reads is
    saved, not recomputed) run on the CPU, forced on: a gated MLP's gradients through
    ``jit(model)`` and an AdamW ``jit(step)`` (whose ``loss.backward()`` differentiates with
    the same option) equal eager's, and the product is a residual (one more than without)."""
    from conftest import mse_training_step

    torch.manual_seed(0)
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    counts = {}
    for save in (False, True):
        monkeypatch.setattr(pipeline.Target, "save_materialized", property(lambda self, save=save: save))
        model = _GatedMLP()
        torch.manual_seed(1)
        model.load_state_dict(_GatedMLP().state_dict())
        want = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
        jm = thunder_mlir.jit(model)
        got = torch.autograd.grad(F.mse_loss(jm(x), y), list(model.parameters()))
        torch.testing.assert_close(got, want)
        grad_stage = next(s for s in thunder_mlir.last_traces(jm) if s.name == "grad")
        assert ("save-materialized=true" in grad_stage.pipeline) == save
        counts[save] = int(grad_stage.text.split("thunder.num_residuals = ")[1].split()[0])
        m2 = _GatedMLP()
        m2.load_state_dict(model.state_dict())
        o, o2 = (torch.optim.AdamW(m.parameters(), lr=0.1) for m in (model, m2))
        jstep = thunder_mlir.jit(mse_training_step)
        for _ in range(2):
            torch.testing.assert_close(jstep(m2, o2, x, y),
                                       mse_training_step(model, o, x, y).detach())
            for p, q in zip(model.parameters(), m2.parameters()):
                torch.testing.assert_close(q, p)
    assert counts[True] == counts[False] + 1


@pytest.mark.parametrize("layer", ["conv1d_addmm", "linear"])
def test_gpu_dot_choices_compute_eagers_values(monkeypatch, layer):
    """The GPU target's dot lowering (``narrow-dots``: a float32 dot of bf16 values reads the
    bf16 values; a one-row one is a two-row gemm, ``hlo._gemv_as_two_row_gemm``) run on the
    CPU, forced on: a decode step's layers, one row of activations, equal eager's bf16
    results (one rounding after the float32 sum and the bias)."""
    monkeypatch.setattr(pipeline.Target, "narrow_dots", property(lambda self: True))
    g = torch.Generator().manual_seed(0)
    x, bias = (torch.randn(s, generator=g).to(torch.bfloat16) for s in ((1, 64), (32,)))
    w = torch.randn(64, 32, generator=g).to(torch.bfloat16)
    if layer == "conv1d_addmm":  # GPT-2's Conv1D: x @ W, W of shape [in, out]
        fn = lambda x, w, b: torch.addmm(b, x, w)  # noqa: E731
    else:  # nn.Linear: x @ W.T, W of shape [out, in]
        fn, w = (lambda x, w, b: F.linear(x, w, b)), w.t().contiguous()  # noqa: E731
    jfn = thunder_mlir.jit(fn)
    torch.testing.assert_close(jfn(x, w, bias), fn(x, w, bias))
    stablehlo = next(t for t in thunder_mlir.last_traces(jfn) if t.name == "stablehlo").text
    assert "tensor<2x64xbf16>" in stablehlo, stablehlo


def test_gpu_gemm_biases_are_widened_together_and_compute_eagers_values(monkeypatch):
    """On the GPU target (``narrow-dots``), the bias of a 16-bit ``addmm`` / ``linear``
    (widened to float32, added to the float32 dot, rounded once: ATen's opmath rule) whose
    float32 result is 1 MiB or more comes out of an optimization barrier, so that XLA:GPU's
    Triton gemm takes the add into its epilogue (``hlo.lower_convert_element_type``). The
    biases that are arguments are widened in one concatenation under one barrier; a
    computed bias has a barrier of its own; a smaller gemm's (8 rows: a decode step's)
    has none. Run on the CPU, forced on: the values are eager's."""
    monkeypatch.setattr(pipeline.Target, "narrow_dots", property(lambda self: True))
    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16
    x = torch.randn(1024, 256, generator=g).to(bf)  # (a float32 result of 1 MiB)
    w1, w2 = (torch.randn(256, 256, generator=g).div(16).to(bf) for _ in range(2))
    b1, b2, b4 = (torch.randn(256, generator=g).to(bf) for _ in range(3))
    b3 = torch.randn(2, 256, generator=g).to(bf)

    def fn(x, w1, b1, w2, b2, b3, b4):
        y = torch.tanh(torch.addmm(b1, x, w1))  # GPT-2's Conv1D
        y = F.linear(y, w2, b2)  # nn.Linear
        return (torch.addmm(b3.sum(0), y, w1),  # a computed bias
                torch.addmm(b1, x, w2),  # an argument's again
                torch.addmm(b4, x[:8], w2))  # 8 rows: below the threshold

    jfn = thunder_mlir.jit(fn)
    args = (x, w1, b1, w2, b2, b3, b4)
    got, want = jfn(*args), fn(*args)
    # (three bf16 layers: eager's and XLA's float32 sums differ in order, a few roundings
    # flip; both are compared with float64)
    exact = fn(*(a.double() for a in args))
    for g_, w_, e_ in zip(got, want, exact):
        assert g_.dtype == w_.dtype == bf
        err_jit, err_eager = ((t.double() - e_).abs().max().item() for t in (g_, w_))
        assert err_jit <= 1.25 * err_eager, (err_jit, err_eager)
    text = next(t for t in thunder_mlir.last_traces(jfn) if t.name == "stablehlo").text
    barriers = [line for line in text.splitlines() if "stablehlo.optimization_barrier" in line]
    assert len(barriers) == 2, barriers
    assert barriers[0].endswith("tensor<256xf32>, tensor<256xf32> loc(#loc)"), barriers
    assert "stablehlo.concatenate" in text
    assert ": tensor<256xf32> loc(" in barriers[1], barriers


def _custom_calls(text: str) -> dict:
    """{call target: (backend config as a dict, operand shapes, operand layouts, result
    layouts)} of the ``stablehlo.custom_call`` ops in a StableHLO module's text."""
    import json
    import re

    calls = {}
    for m in re.finditer(r'stablehlo\.custom_call @(\S+?)\((.*)$', text, re.MULTILINE):
        line = m.group(2)
        config = re.search(r'backend_config = "((?:[^"\\]|\\.)*)"', line).group(1)
        config = json.loads(config.replace("\\22", '"'))["cudnn_fmha_backend_config"]

        def layouts(key, line=line):
            seg = re.search(key + r" = \[(.*?)\]\}?(?:,| :)", line).group(1)
            return [tuple(int(d) for d in g.replace(" ", "").split(",") if d)
                    for g in re.findall(r"dense<\[?([\d, ]*)\]?>", seg)]
        operands = re.search(r"\} : \((.*?)\) ->", line).group(1)
        shapes = [tuple(int(d) for d in s.split("x")[:-1])
                  for s in re.findall(r"tensor<([^>]*)>", operands)]
        calls[m.group(1)] = (config, shapes, layouts("operand_layouts"),
                             layouts("result_layouts"))
    return calls


def test_gpu_cudnn_calls_are_jaxs_btnh_calls():
    """The custom calls thunder_mlir emits equal those jax's ``dot_product_attention(
    implementation="cudnn")`` emits for the same [B, T, N, D] operands (jax's lowering is
    what runs on devices: fused_attention_stablehlo.py): dimension numbers, layouts, mask,
    scale and operand shapes, forward and backward, grouped heads included. Operands are
    passed BTNH and results stored BTNH, so a model's ``transpose(1, 2)`` on either side of
    the call is a bitcast, not a copy."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    fa = pytest.importorskip("jax._src.cudnn.fused_attention_stablehlo")
    if not hasattr(fa, "check_cudnn_version"):
        pytest.skip(f"jax {jax.__version__} has no fused_attention_stablehlo."
                    "check_cudnn_version to stand in for a device's cuDNN")
    b, t, n, kv, d = 2, 32, 8, 2, 16

    def f(q, k, v):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return o.transpose(1, 2).float().sum()
    q = torch.zeros(b, n, t, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    k, v = (torch.zeros(b, kv, t, d, dtype=torch.bfloat16, device="meta",
                        requires_grad=True) for _ in range(2))
    captured = _gpu_programs(f, q, k, v)
    ours = {}
    for p in captured.programs:
        for region in p.regions:
            ours.update(_custom_calls(region[1]))

    def g(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                            implementation="cudnn").astype(jnp.float32).sum()
    saved = fa.check_cudnn_version, fa.check_compute_capability
    fa.check_cudnn_version, fa.check_compute_capability = (lambda: 91000), (lambda c: True)
    try:
        sd = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in ((b, t, n, d), (b, t, kv, d),
                                                              (b, t, kv, d))]
        text = jax.jit(jax.grad(g, argnums=(0, 1, 2))).trace(*sd).lower(
            lowering_platforms=("cuda",)).as_text()
    finally:
        fa.check_cudnn_version, fa.check_compute_capability = saved
    theirs = _custom_calls(text)
    assert set(ours) == set(theirs) == {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"}
    keys = ("mask_type", "fmha_scale", "intermediate_tensor_shape", "is_flash_attention",
            "bmm1_dot_dimension_numbers", "bmm2_dot_dimension_numbers",
            "bmm1_grad_gemm1_dot_dimension_numbers", "bmm1_grad_gemm2_dot_dimension_numbers",
            "bmm2_grad_gemm1_dot_dimension_numbers", "bmm2_grad_gemm2_dot_dimension_numbers")
    for target, (oc, oshapes, oin, oout) in ours.items():
        tc, tshapes, tin, tout = theirs[target]
        assert {k: oc.get(k) for k in keys} == {k: tc.get(k) for k in keys}, target
        assert oshapes == tshapes and oin == tin, target
        assert oout[:-1] == tout[:-1], target  # (the workspace's last: [0] either way)
