"""Gradients of jitted programs against ``torch.autograd`` on the eager program.

The oracle is eager PyTorch: for each program, inputs that require grad get the same
``.grad`` from ``loss.backward()`` through ``thunder_mlir.jit`` as eagerly (float32,
``atol=rtol=1e-5``), where the loss is the sum of every floating-point output times a
fixed random cotangent. Also covered: ``nn.Module`` parameters, ``thunder_mlir.grad`` /
``value_and_grad``, ``torch.no_grad()`` giving a forward-only plan, non-differentiable
outputs, inputs without grad, the refusal of higher-order gradients, the ``grad`` stage
text and rematerialization.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from thunder_mlir.errors import GradError
import thunder_mlir

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _r(*shape, lo=None, hi=None):
    t = torch.randn(*shape)
    if lo is not None:
        t = t.abs() + lo
    return t


def _float_leaves(out):
    return [o for o in pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.is_floating_point()]


def check_grads(fn, *args, grad_mask=None, tol=TOL, jfn=None):
    """Run ``fn`` eagerly and jitted on fresh leaf copies of ``args`` (float tensors require
    grad unless ``grad_mask`` says otherwise), backprop the same random cotangents and
    compare outputs and every ``.grad``. Returns the jitted function."""
    if grad_mask is None:
        grad_mask = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]

    def leaves():
        return [a.detach().clone().requires_grad_(m) if isinstance(a, torch.Tensor) else a
                for a, m in zip(args, grad_mask)]

    e_args, j_args = leaves(), leaves()
    expected = fn(*e_args)
    jfn = jfn if jfn is not None else thunder_mlir.jit(fn)
    actual = jfn(*j_args)
    e_outs, a_outs = _float_leaves(expected), _float_leaves(actual)
    assert len(e_outs) == len(a_outs)
    cots = [torch.randn_like(o) for o in e_outs]
    for a, e in zip(a_outs, e_outs):
        torch.testing.assert_close(a.detach(), e.detach(), **tol)
    e_loss = sum((o * c).sum() for o, c in zip(e_outs, cots) if o.requires_grad)
    a_loss = sum((o * c).sum() for o, c in zip(a_outs, cots) if o.requires_grad)
    if isinstance(e_loss, torch.Tensor):
        e_loss.backward()
        a_loss.backward()
    for i, (ea, ja) in enumerate(zip(e_args, j_args)):
        if not isinstance(ea, torch.Tensor):
            continue
        if ea.grad is None:
            assert ja.grad is None or not ja.grad.any(), f"input {i}: jit gave a gradient"
            continue
        assert ja.grad is not None, f"input {i}: no gradient from jit"
        torch.testing.assert_close(ja.grad, ea.grad, msg=lambda m: f"input {i}: {m}", **tol)
    return jfn


# ------------------------------------------------------------------ program table
def _ties_max(a, b):
    return torch.maximum(a, b), torch.minimum(a, b)


def _sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _sdpa_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _sdpa_bool_mask(q, k, v):
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _rms_norm(x, w):
    return F.rms_norm(x, (8,), w, eps=1e-6)


def _ce_ignore(logits, target):
    return F.cross_entropy(logits, target, ignore_index=2)


def _ce_smooth(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def _ce_3d(logits, target):
    return F.cross_entropy(logits.transpose(1, 2), target, reduction="sum")


TIES = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, -1.0]])
TARGET = torch.tensor([0, 2, 4, 2, 1, 3])

CASES = {
    # elementwise
    "add_sub_mul": (lambda a, b: (a + b) * (a - b) * 3 - b, (_r(3, 4), _r(3, 4))),
    "broadcast_add": (lambda a, b: a + b * 2, (_r(3, 4), _r(4))),
    "div": (lambda a, b: a / b, (_r(3, 4), _r(3, 4, lo=0.5))),
    "div_scalar_rsub": (lambda a: 2.0 / a - 1 - a, (_r(5, lo=0.5),)),
    "pow_tensor": (lambda a, b: a ** b, (_r(3, 4, lo=0.5), _r(3, 4))),
    "pow_scalar": (lambda a: a ** 3 + a ** 0.5 + a.square(), (_r(6, lo=0.1),)),
    "rpow": (lambda a: 2.0 ** a, (_r(6),)),
    "exp_log": (lambda a: torch.exp(a) + torch.log(a) + torch.log1p(a), (_r(6, lo=0.1),)),
    "trig": (lambda a: torch.sin(a) * torch.cos(a) + torch.tanh(a), (_r(7),)),
    "sqrt_rsqrt": (lambda a: torch.sqrt(a) + torch.rsqrt(a), (_r(6, lo=0.2),)),
    "sigmoid_abs": (lambda a: torch.sigmoid(a) * a.abs(), (_r(6),)),
    "erf": (lambda a: torch.erf(a), (_r(6),)),
    "max_min_ties": (_ties_max, (TIES, TIES.flip(1))),
    "where": (lambda a, b: torch.where(a > 0, a, b * 2), (_r(3, 4), _r(3, 4))),
    "where_scalar": (lambda a: torch.where(a > 0, a, 0.0), (_r(3, 4),)),
    "clamp": (lambda a: a.clamp(-0.5, 0.5) + a.clamp(min=0.1), (_r(4, 5),)),
    "relu": (lambda a: F.relu(a) + F.leaky_relu(a, 0.1), (_r(4, 5),)),
    "masked_fill": (lambda a: a.masked_fill(a < 0, 0.5) * a, (_r(4, 5),)),
    "dtype_roundtrip": (lambda a: a.double().exp().float(), (_r(4),)),
    # reductions
    "sum_dims": (lambda a: (a.sum(), a.sum(1), a.sum((0, 2), keepdim=True)), (_r(2, 3, 4),)),
    "mean": (lambda a: (a.mean(), a.mean(-1, keepdim=True)), (_r(3, 4),)),
    "var_std": (lambda a: (a.var(1), a.std(0, correction=0), a.var()), (_r(4, 5),)),
    "amax_ties": (lambda a: (a.amax(1), a.amin(0), a.max()), (torch.tensor(
        [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0], [5.0, 5.0, 5.0]]),)),
    "max_dim": (lambda a: a.max(1).values * 2, (_r(3, 5),)),
    "prod": (lambda a: a.prod(1), (_r(3, 4, lo=0.5),)),
    "logsumexp": (lambda a: torch.logsumexp(a, 1), (_r(3, 5),)),
    "norm": (lambda a: torch.linalg.vector_norm(a, dim=1), (_r(3, 5),)),
    "cumsum": (lambda a: a.cumsum(1), (_r(3, 5),)),
    # shapes
    "slice_steps": (lambda a: a[1:, ::2] * 2 + a[:-1, 1::2], (_r(4, 6),)),
    "slice_negative": (lambda a: a[..., -3:] + a[:, None, 1:4], (_r(3, 6),)),
    "cat_split": (lambda a, b: torch.cat([a, b * 2], 1).split(3, 1), (_r(2, 4), _r(2, 5))),
    "chunk_stack": (lambda a: torch.stack(a.chunk(2, 0), 2), (_r(4, 3),)),
    "transpose_permute": (lambda a: a.transpose(0, 1).permute(2, 0, 1).reshape(4, 6),
                          (_r(2, 3, 4),)),
    "expand": (lambda a, b: a.expand(3, 4, 5) * b, (_r(4, 1), _r(3, 4, 5))),
    "view_flatten": (lambda a: a.view(6, 4).flatten().unsqueeze(0).squeeze(), (_r(2, 3, 4),)),
    "getitem_advanced": (lambda a, i: a[i] * 2, (_r(5, 3), torch.tensor([0, 2, 2, 4]))),
    "getitem_2d_index": (lambda a, i, j: a[i, j], (_r(5, 4), torch.tensor([0, 1, 1]),
                                                    torch.tensor([3, 0, 0]))),
    "gather": (lambda a, i: a.gather(1, i), (_r(3, 4), torch.tensor([[0, 0], [1, 3], [2, 2]]))),
    "index_select": (lambda a, i: a.index_select(0, i), (_r(4, 3), torch.tensor([3, 3, 0]))),
    "flip_roll": (lambda a: a.flip(0) + a.roll(1, 1), (_r(3, 4),)),
    "pad": (lambda a: F.pad(a, (1, 2, 0, 1)), (_r(2, 3),)),
    "repeat": (lambda a: a.repeat(2, 3), (_r(2, 3),)),
    "tril": (lambda a: a.tril() + a.triu(1) * 2, (_r(4, 4),)),
    # matmul family
    "matmul_2d": (lambda a, b: a @ b, (_r(3, 4), _r(4, 5))),
    "matmul_batched_bcast": (lambda a, b: torch.matmul(a, b), (_r(2, 3, 4), _r(4, 5))),
    "bmm": (lambda a, b: torch.bmm(a, b), (_r(2, 3, 4), _r(2, 4, 5))),
    "matvec": (lambda a, b: a @ b, (_r(3, 4), _r(4))),
    "vecmat": (lambda a, b: a @ b, (_r(4), _r(4, 3))),
    "linear": (lambda x, w, b: F.linear(x, w, b), (_r(2, 3, 4), _r(5, 4), _r(5))),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (_r(2, 3, 4), _r(2, 4, 2))),
    # nn functions
    "softmax": (lambda a: F.softmax(a, -1), (_r(3, 5),)),
    "softmax_dim0": (lambda a: F.softmax(a, 0), (_r(3, 5),)),
    "log_softmax": (lambda a: F.log_softmax(a, 1), (_r(3, 5),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), (_r(2, 3, 8), _r(8), _r(8))),
    "layer_norm_noaffine": (lambda x: F.layer_norm(x, (3, 8)), (_r(2, 3, 8),)),
    "rms_norm": (_rms_norm, (_r(2, 3, 8), _r(8))),
    "gelu": (lambda a: F.gelu(a), (_r(10),)),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), (_r(10),)),
    "silu": (lambda a: F.silu(a), (_r(10),)),
    "softplus_elu": (lambda a: F.softplus(a) + F.elu(a), (_r(10),)),
    "sdpa_causal": (_sdpa_causal, (_r(2, 2, 5, 4), _r(2, 2, 5, 4), _r(2, 2, 5, 4))),
    "sdpa_float_mask": (_sdpa_mask, (_r(2, 2, 5, 4), _r(2, 2, 5, 4), _r(2, 2, 5, 4),
                                     _r(5, 5))),
    "sdpa_bool_mask": (_sdpa_bool_mask, (_r(1, 2, 5, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4))),
    "embedding": (lambda i, w: F.embedding(i, w), (torch.tensor([[0, 2, 2], [5, 1, 0]]),
                                                   _r(6, 4))),
    "embedding_padding_idx": (lambda i, w: F.embedding(i, w, padding_idx=2),
                              (torch.tensor([[0, 2, 2], [5, 1, 0]]), _r(6, 4))),
    "embedding_padding_idx_negative": (lambda i, w: F.embedding(i, w, padding_idx=-1),
                                       (torch.tensor([[0, 5, 2], [5, 1, 0]]), _r(6, 4))),
    "dropout_p0": (lambda a: F.dropout(a, 0.0), (_r(5),)),
    # losses
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), (_r(6, 5), TARGET)),
    "cross_entropy_ignore_index": (_ce_ignore, (_r(6, 5), TARGET)),
    "cross_entropy_label_smoothing": (_ce_smooth, (_r(6, 5), TARGET)),
    "cross_entropy_3d_sum": (_ce_3d, (_r(2, 3, 5), TARGET.reshape(2, 3))),
    "nll_loss": (lambda x, t: F.nll_loss(F.log_softmax(x, 1), t), (_r(6, 5), TARGET)),
    "mse_loss": (lambda a, b: F.mse_loss(a, b), (_r(3, 4), _r(3, 4))),
    "l1_loss": (lambda a, b: F.l1_loss(a, b, reduction="sum"), (_r(3, 4), _r(3, 4))),
    "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b), (_r(3, 4), _r(3, 4))),
    "bce_with_logits": (lambda a, b: F.binary_cross_entropy_with_logits(a, b),
                        (_r(3, 4), torch.rand(3, 4))),
    "bce": (lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), b),
            (_r(3, 4), torch.rand(3, 4))),
    "kl_div": (lambda a, b: F.kl_div(F.log_softmax(a, 1), F.softmax(b, 1),
                                     reduction="batchmean"), (_r(3, 4), _r(3, 4))),
    # small programs
    "mlp": (lambda x, w1, b1, w2: (torch.tanh(x @ w1 + b1) @ w2).relu().sum(),
            (_r(4, 6), _r(6, 8), _r(8), _r(8, 3))),
    "reused_value": (lambda a: a * a + a.exp() * a, (_r(5),)),
    "multi_output": (lambda a, b: (a * b, a.sum(), (a - b).abs().mean()), (_r(3), _r(3))),
}


# Known wrong gradients (bugs to fix, not tolerances): name -> reason. strict: a fix makes
# the xfail fail, so the entry gets removed.
KNOWN_WRONG: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(
    n, marks=pytest.mark.xfail(reason=KNOWN_WRONG[n], strict=True)) if n in KNOWN_WRONG else n
    for n in sorted(CASES)])
def test_grad_matches_eager(name):
    """``loss.backward()`` through the jitted program fills ``.grad`` as eager does."""
    fn, args = CASES[name]
    jfn = check_grads(fn, *args)
    assert thunder_mlir.fallback_ops(jfn) == [], thunder_mlir.fallback_ops(jfn)
    assert "grad" in [s.name for s in thunder_mlir.last_traces(jfn)]


def test_grad_detects_wrong_gradient(monkeypatch):
    """The harness can fail: a deliberately wrong VJP rule (exp -> x instead of exp(x))
    makes the comparison raise."""
    from thunder_mlir.ir import prims
    from thunder_mlir.ir.prim_defs import PRIMS

    monkeypatch.setattr(PRIMS["exp"], "vjp",
                        lambda op, x, y, g: [prims.elementwise("mul", g[0], x[0])])
    with pytest.raises(AssertionError):
        check_grads(lambda a: torch.exp(a).sum() * 1.5, _r(5))


def test_partial_requires_grad():
    """Inputs that do not require grad get no ``.grad``; others match eager."""
    a, b, c = _r(3, 4), _r(3, 4), _r(4)
    jfn = check_grads(lambda a, b, c: (a * b + c).tanh(), a, b, c,
                      grad_mask=[True, False, True])
    fwd = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "grad").text
    assert "thunder.requires_grad = [true, false, true]" in fwd


def test_integer_and_nondiff_outputs():
    """argmax (an integer output) and a comparison coexist with differentiable outputs."""
    def fn(x):
        return x.softmax(-1), x.argmax(-1), x > 0, x.sum()

    x = _r(3, 5).requires_grad_()
    jfn = thunder_mlir.jit(fn)
    s, idx, pos, tot = jfn(x)
    assert idx.dtype == torch.int64 and not idx.requires_grad and not pos.requires_grad
    assert torch.equal(idx, x.detach().argmax(-1))
    (s[:, 0].sum() + tot).backward()
    x2 = x.detach().clone().requires_grad_()
    s2, _, _, t2 = fn(x2)
    (s2[:, 0].sum() + t2).backward()
    torch.testing.assert_close(x.grad, x2.grad, **TOL)


def test_output_unused_in_loss():
    """A floating output that takes no part in the loss gets a zero cotangent."""
    a = _r(4).requires_grad_()
    jfn = thunder_mlir.jit(lambda a: (a.exp(), a.sin()))
    e, s = jfn(a)
    s.sum().backward()
    torch.testing.assert_close(a.grad, a.detach().cos(), **TOL)


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x), self.b(x)


@pytest.mark.parametrize("used", ["first", "both", "second_times_zero"])
def test_input_reached_only_by_unused_outputs_keeps_grad_none(used):
    """Eager leaves ``.grad`` None for a parameter that only an output without a gradient
    reaches (a pooler head outside the loss; AdamW then skips it), zeros where the
    gradient is a real zero (``v.sum() * 0``). The program is one autograd node, so the
    runtime maps the outputs that got a gradient to the inputs they reach
    (transforms/grad.output_reach)."""
    torch.manual_seed(0)
    eager = _TwoHeads()
    jitted_mod = copy.deepcopy(eager)
    jitted = thunder_mlir.jit(jitted_mod)
    x = _r(2, 4)
    for mod, run in ((eager, eager), (jitted_mod, jitted)):
        u, v = run(x)
        loss = {"first": u.sum(), "both": u.sum() + v.sum(),
                "second_times_zero": u.sum() + v.sum() * 0}[used]
        loss.backward()
    for (name, pe), pj in zip(eager.named_parameters(), jitted_mod.parameters()):
        assert (pj.grad is None) == (pe.grad is None), (name, pj.grad, pe.grad)
        if pe.grad is not None:
            torch.testing.assert_close(pj.grad, pe.grad, **TOL)


def test_no_grad_gives_forward_only_plan():
    """Under torch.no_grad() the plan has no grad stage and no backward; outputs do not
    require grad; the same function recompiles with grad when grad mode is on."""
    a = _r(3, 4).requires_grad_()
    jfn = thunder_mlir.jit(lambda a: (a.exp() * a).sum())
    with torch.no_grad():
        out = jfn(a)
    names = [s.name for s in thunder_mlir.last_traces(jfn)]
    assert "grad" not in names
    assert all("@backward" not in s.text for s in thunder_mlir.last_traces(jfn))
    assert jfn.last.backward_plan is None and not out.requires_grad
    out = jfn(a)
    assert out.requires_grad and "grad" in [s.name for s in thunder_mlir.last_traces(jfn)]
    assert thunder_mlir.cache_misses(jfn) == 2


def test_inputs_without_grad_forward_only():
    """No input requires grad: a forward-only plan even in grad mode."""
    jfn = thunder_mlir.jit(lambda a: a * 2)
    out = jfn(_r(3))
    assert not out.requires_grad and jfn.last.backward_plan is None


def test_grad_stage_text():
    """The ``grad`` stage holds func.func @forward and @backward; residual bytes recorded."""
    jfn = thunder_mlir.jit(lambda a, b: (a @ b).tanh().sum())
    jfn(_r(3, 4).requires_grad_(), _r(4, 5).requires_grad_())
    text = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "grad").text
    assert "func.func @forward" in text and "func.func @backward" in text
    assert "func.func @computation" not in text
    assert jfn.last.residual_bytes > 0


def _naive_residual_bytes(fn, *args) -> int:
    """Bytes a save-everything backward would keep: every floating intermediate of the
    forward (each prim result in the ``prims`` stage) on the active path."""
    jfn = thunder_mlir.jit(fn)
    with torch.no_grad():
        jfn(*args)
    text = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "prims").text
    import re
    total = 0
    for m in re.finditer(r"= \"thunder\.\w+\"\(.*?\) .*?-> tensor<([0-9x]*)x?f32>", text):
        dims = [int(d) for d in m.group(1).split("x") if d]
        n = 1
        for d in dims:
            n *= d
        total += 4 * n
    return total


def test_rematerialization_exp_tanh_chain():
    """exp(tanh(x)) chains: cheap elementwise values are recomputed in the backward, so the
    residuals are just the input (bytes of x), far below saving every intermediate."""
    def fn(x):
        for _ in range(4):
            x = torch.exp(torch.tanh(x))
        return x.sum()

    x = _r(64, 64)
    jfn = check_grads(fn, x)
    naive = _naive_residual_bytes(fn, x)
    assert jfn.last.residual_bytes <= x.numel() * 4 < naive
    text = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "grad").text
    bwd = text[text.index("func.func @backward"):]
    assert "thunder.tanh" in bwd  # recomputed, not saved


def test_matmul_residuals_are_operands():
    """A matmul saves its operands, not its output (the output is not needed)."""
    a, b = _r(8, 16), _r(16, 32)
    jfn = check_grads(lambda a, b: (a @ b).sum(), a, b)
    assert jfn.last.residual_bytes <= (a.numel() + b.numel()) * 4


def test_higher_order_grad_raises():
    """create_graph=True then a second backward raises a clear error (not a silent zero)."""
    x = _r(4).requires_grad_()
    jfn = thunder_mlir.jit(lambda x: (x ** 3).sum())
    y = jfn(x)
    (gx,) = torch.autograd.grad(y, x, create_graph=True)
    torch.testing.assert_close(gx.detach(), 3 * x.detach() ** 2, **TOL)
    with pytest.raises(RuntimeError, match="higher-order gradients are not supported"):
        gx.sum().backward()
    # a gradient penalty mixes first- and second-order terms: refused, not silently wrong
    y = jfn(x)
    (gx,) = torch.autograd.grad(y, x, create_graph=True)
    with pytest.raises(RuntimeError, match="higher-order gradients are not supported"):
        (y + gx.pow(2).sum()).backward()


def test_backward_twice_accumulates():
    """Two backward passes (retain_graph) accumulate .grad like eager."""
    x = _r(5).requires_grad_()
    jfn = thunder_mlir.jit(lambda x: (x.sin() * x).sum())
    y = jfn(x)
    y.backward(retain_graph=True)
    y.backward()
    x2 = x.detach().clone().requires_grad_()
    y2 = (x2.sin() * x2).sum()
    y2.backward(retain_graph=True)
    y2.backward()
    torch.testing.assert_close(x.grad, x2.grad, **TOL)


def test_saved_tensors_hooks_and_residual_buffers():
    """The residuals reach the backward as the forward's XLA buffers (runtime/autograd.py)
    unless a saved_tensors_hooks pair is active: then the backward reads what the unpack
    hook returns (here a copy). Both give eager's gradients; after the backward the Function
    keeps no buffer of the residuals (a kept loss would otherwise hold them)."""
    w, b = _r(4, 3).requires_grad_(), _r(3).requires_grad_()
    x = _r(2, 4)

    def fn(x, w, b):
        return torch.tanh(x @ w + b).exp().sum()

    jfn = thunder_mlir.jit(fn)
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    fn(x, w2, b2).backward()
    for hooks in (False, True, False):
        w.grad = b.grad = None
        if hooks:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
                loss = jfn(x, w, b)
        else:
            loss = jfn(x, w, b)
        assert (loss.grad_fn.residual_buffers is None) == hooks
        loss.backward()
        assert loss.grad_fn.residual_buffers is None
        torch.testing.assert_close(w.grad, w2.grad, **TOL)
        torch.testing.assert_close(b.grad, b2.grad, **TOL)


def test_donated_residuals():
    """Residuals only the backward reads are donated to the backward executable
    (runtime/autograd.py ``mark_donated_residuals``): XLA writes a gradient of the same
    size into their memory. Gradients match eager at every step; an output the user holds
    that is also a residual is not donated and keeps its values; retain_graph=True keeps
    the residuals for a second backward (eager's accumulated .grad) and a third backward
    raises torch's error; with a saved_tensors_hooks pair whose pack keeps the tensor
    itself, the backward's donation never writes into the saved torch tensors."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                torch.nn.Tanh(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)

    class Net(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            h = self.m[1](self.m[0](x))  # returned and a residual (tanh' reads it)
            return self.m[4](self.m[3](self.m[2](h))), h

    jm, em = thunder_mlir.jit(Net(model)), Net(ref)
    x = _r(16, 8)

    def grads(m, n_backward=1, hooks=False):
        for p in m.parameters():
            p.grad = None
        if hooks:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                out, h = m(x)
        else:
            out, h = m(x)
        h_before = h.detach().clone()
        loss = out.square().sum() + h.sum()
        for k in range(n_backward):
            loss.backward(retain_graph=k < n_backward - 1)
        torch.testing.assert_close(h, h_before, rtol=0, atol=0)
        return [p.grad.clone() for p in m.parameters()], loss

    for n_backward, hooks in ((1, False), (1, False), (2, False), (2, True), (1, False)):
        got, loss = grads(jm, n_backward, hooks)
        want, _ = grads(em, n_backward)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **TOL)
    step = jm._fn.last.backward_plan.steps[0]
    assert step.donated, "no residual donated: update the test"
    assert step.executable.get_compiled_memory_stats().alias_size_in_bytes > 0
    got, loss = grads(jm, 2)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


@pytest.mark.parametrize("fn", [lambda x: x * x, lambda x: x + 1, lambda x: x.sin() * 2],
                         ids=["saves_x", "saves_nothing", "saves_sin_input"])
def test_second_backward_as_eager(fn):
    """A second backward through a jitted program's node after one without retain_graph:
    eager raises only where a node saved tensors (freed by the first); with nothing saved
    it runs and accumulates again."""
    results = []
    for f in (fn, thunder_mlir.jit(fn)):
        x = _r(3).requires_grad_()
        y = f(x)
        y.sum().backward()
        try:
            (y * 2).sum().backward()
            results.append(("ran", x.grad))
        except RuntimeError as e:
            results.append(("raised", str(e).splitlines()[0]))
    (e_kind, e_val), (j_kind, j_val) = results
    assert j_kind == e_kind, results
    if e_kind == "ran":
        torch.testing.assert_close(j_val, e_val)
    else:
        assert "backward through the graph a second time" in j_val


def test_jit_output_feeds_eager_graph():
    """A jitted output used in further eager ops backprops through both."""
    w = _r(4, 3).requires_grad_()
    x = _r(2, 4)
    jfn = thunder_mlir.jit(lambda x, w: (x @ w).relu())
    ((jfn(x, w) * 3).exp().sum()).backward()
    w2 = w.detach().clone().requires_grad_()
    (((x @ w2).relu() * 3).exp().sum()).backward()
    torch.testing.assert_close(w.grad, w2.grad, **TOL)


def test_missing_rule_raises_grad_error(monkeypatch):
    """An op without a VJP rule raises GradError naming it (not a wrong gradient)."""
    from thunder_mlir.ir.prim_defs import PRIMS

    monkeypatch.setattr(PRIMS["tanh"], "vjp", None)
    jfn = thunder_mlir.jit(lambda a: a.tanh().sum(), cache="no caching")
    with pytest.raises(GradError, match="tanh"):
        jfn(_r(3).requires_grad_())


# ------------------------------------------------------------------- modules
class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.head = torch.nn.Linear(16, 11, bias=False)
        self.frozen = torch.nn.Linear(16, 16)
        self.frozen.requires_grad_(False)

    def forward(self, ids, labels):
        h = self.emb(ids)
        h = h + self.fc2(F.gelu(self.fc1(self.ln(h))))
        h = self.frozen(h)
        logits = self.head(h)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0)


def test_module_param_grads_match_eager():
    """Jitted nn.Module: every trainable parameter's .grad equals eager's within 1e-5;
    frozen parameters get none."""
    m = _Block()
    m2 = copy.deepcopy(m)
    ids = torch.randint(0, 11, (3, 7))
    jm = thunder_mlir.jit(m)
    loss = jm(ids, ids)
    loss.backward()
    ref = m2(ids, ids)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach(), **TOL)
    for (n, p), q in zip(m.named_parameters(), m2.parameters()):
        if not q.requires_grad:
            assert p.grad is None, n
            continue
        assert p.grad is not None, n
        torch.testing.assert_close(p.grad, q.grad, msg=lambda s: f"{n}: {s}", **TOL)
    assert thunder_mlir.fallback_ops(jm) == []


def test_module_training_steps_match_eager():
    """Three SGD steps of a jitted MLP track eager (same losses and weights)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    m2 = copy.deepcopy(m)
    jm = thunder_mlir.jit(m)
    x, y = _r(10, 8), _r(10, 1)
    opt, opt2 = (torch.optim.SGD(mm.parameters(), lr=0.1) for mm in (m, m2))
    for _ in range(3):
        for model, o in ((jm, opt), (m2, opt2)):
            o.zero_grad()
            F.mse_loss(model(x), y).backward()
            o.step()
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, **TOL)
    assert thunder_mlir.cache_misses(jm) == 1


def test_module_input_requires_grad():
    """Gradients flow to a module input that requires grad as well as to parameters."""
    m = torch.nn.Linear(4, 3)
    m2 = copy.deepcopy(m)
    jm = thunder_mlir.jit(m)
    x = _r(2, 4).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    jm(x).pow(2).sum().backward()
    m2(x2).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, **TOL)
    torch.testing.assert_close(m.weight.grad, m2.weight.grad, **TOL)


# ------------------------------------------------------------- functional API
def test_grad_api_notebook_style():
    """Thunder's extend notebook: ``grad(cfoo)(a, b, c, d)`` -> [ga, gb, gc, gd]."""
    def foo(a, b, c, d):
        return torch.sin(a) * b + torch.exp(c) * d

    cfoo = thunder_mlir.jit(foo)
    args = [_r(2, 3) for _ in range(4)]
    grads = thunder_mlir.grad(cfoo)(*args)
    assert isinstance(grads, list) and len(grads) == 4
    leaves = [a.clone().requires_grad_() for a in args]
    expected = torch.autograd.grad(foo(*leaves).sum(), leaves)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, **TOL)
    assert all(a.grad is None and not a.requires_grad for a in args)


def test_grad_api_multiple_outputs_and_ints():
    """Ones cotangents for every float output; int inputs and outputs are skipped."""
    def f(x, idx, w):
        return x[idx] * w, x.argmax(), (x * w.sum()).mean()

    x, idx, w = _r(5, 3), torch.tensor([0, 4, 4]), _r(3)
    gx, gw = thunder_mlir.grad(thunder_mlir.jit(f))(x, idx, w)
    x2, w2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    a, _, b = f(x2, idx, w2)
    ex, ew = torch.autograd.grad(a.sum() + b, (x2, w2))
    torch.testing.assert_close(gx, ex, **TOL)
    torch.testing.assert_close(gw, ew, **TOL)


def test_grad_api_plain_function_and_unused_input():
    """A plain function is jitted; an input the output does not use gets zeros."""
    gx, gy = thunder_mlir.grad(lambda x, y: (x * 2).sum())(_r(3), _r(4))
    torch.testing.assert_close(gx, torch.full((3,), 2.0))
    torch.testing.assert_close(gy, torch.zeros(4))


def test_value_and_grad():
    """``value_and_grad`` returns detached outputs and the gradients."""
    jfn = thunder_mlir.jit(lambda a, b: (a * b).sum())
    a, b = _r(4), _r(4)
    val, (ga, gb) = thunder_mlir.value_and_grad(jfn)(a, b)
    torch.testing.assert_close(val, (a * b).sum(), **TOL)
    assert not val.requires_grad
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)


def test_grad_api_under_no_grad():
    """``grad`` works even when called under torch.no_grad()."""
    with torch.no_grad():
        (g,) = thunder_mlir.grad(thunder_mlir.jit(lambda x: (x * x).sum()))(_r(3) + 1)
    assert g.shape == (3,)


# ------------------------------------------- prims that had neither a VJP nor a no-grad
def test_real_imag_vjp_against_eager(monkeypatch):
    """The VJPs of the real and imag prims (derivatives.yaml: the cotangent as the real part,
    resp. times i) through the variance of a complex tensor, whose decomposition reads
    both parts; a wrong imag rule gives a different gradient (the rules are exercised)."""
    from thunder_mlir.ir import prims
    from thunder_mlir.ir.prim_defs import PRIMS

    z = torch.randn(2, 5, dtype=torch.complex64)

    def fn(z):
        return torch.var(z, dim=1)

    check_grads(fn, z, grad_mask=[True])
    monkeypatch.setattr(PRIMS["imag"], "vjp", lambda op, x, y, g: [
        prims.convert_element_type(g[0], x[0].tdtype)])
    with pytest.raises(AssertionError):
        check_grads(fn, z, grad_mask=[True], jfn=thunder_mlir.jit(fn, cache="no caching"))


def test_zeta_vjp_against_eager():
    """torch.special.zeta(x, q): q's gradient ``-x zeta(x + 1, q)`` as eager's; x's is not
    implemented in eager, and the jitted backward raises eager's message."""
    x = torch.tensor([2.5, 3.0, 4.5])
    q = torch.tensor([1.5, 2.0, 0.75])
    check_grads(torch.special.zeta, x, q, grad_mask=[False, True])
    xr = x.clone().requires_grad_()
    with pytest.raises(NotImplementedError) as eager:
        torch.special.zeta(xr, q).sum().backward()
    out = thunder_mlir.jit(torch.special.zeta)(x.clone().requires_grad_(), q)
    with pytest.raises(RuntimeError, match=re.escape(str(eager.value))):
        out.sum().backward()


def test_square_vjp_against_eager():
    """The square prim's VJP (derivatives.yaml ``pow``: 2 x g) as eager's, on float32 and
    float64."""
    for dtype in (torch.float32, torch.float64):
        check_grads(lambda a: torch.square(a) * 0.5, _r(3, 4).to(dtype))



_DYNAMIC_INDEX = (
    "func.func @computation(%x: tensor<5x3xf32>, %u: tensor<3xf32>, %i: tensor<i64>)"
    " -> tensor<5x3xf32> {\n"
    '  %0 = "thunder.dynamic_index"(%x, %i) {dim = 0 : i64}'
    ' : (tensor<5x3xf32>, tensor<i64>) -> tensor<3xf32>\n'
    '  %1 = "thunder.mul"(%0, %u) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n'
    '  %2 = "thunder.dynamic_update_index"(%x, %1, %i) {dim = 0 : i64}'
    " : (tensor<5x3xf32>, tensor<3xf32>, tensor<i64>) -> tensor<5x3xf32>\n"
    "  return %2 : tensor<5x3xf32>\n}\n")


def _dynamic_index_grads(x, u, i):
    """Gradients of sum(x with x[i] := x[i] * u) by the grad and joint passes (no torch
    program reaches these prims under grad: scan's loop is not differentiable)."""
    from torch_mlir import ir

    from thunder_mlir.ir.context import get_context
    from thunder_mlir.runtime.plan import build_plan
    from thunder_mlir.transforms.registry import PASSES

    with get_context():
        module = ir.Module.parse(_DYNAMIC_INDEX)
    for name in ("grad", "joint", "partition", "lower-to-stablehlo"):
        with module.context, ir.Location.unknown():
            PASSES[name]()(module)
    plan, _ = build_plan(module, torch.device("cpu"))
    return plan.run([x, u, i])


def test_dynamic_index_vjps_against_eager(monkeypatch):
    """The VJPs of dynamic_index and dynamic_update_index (JAX's dynamic_slice and
    dynamic_update_slice transposes) against eager's index_copy; a wrong dynamic_index rule
    gives other gradients."""
    from thunder_mlir.ir import prims
    from thunder_mlir.ir.prim_defs import PRIMS

    x, u, i = _r(5, 3), _r(3), torch.tensor(2)
    xe, ue = x.clone().requires_grad_(), u.clone().requires_grad_()
    xe.index_copy(0, i.view(1), (xe[i] * ue).view(1, 3)).sum().backward()
    gx, gu = _dynamic_index_grads(x, u, i)
    torch.testing.assert_close(gx, xe.grad, **TOL)
    torch.testing.assert_close(gu, ue.grad, **TOL)
    monkeypatch.setattr(PRIMS["dynamic_index"], "vjp", lambda op, x, y, g: [
        prims.full(x[0].tshape, 0, x[0].tdtype), None])
    gx_wrong, gu_wrong = _dynamic_index_grads(x, u, i)
    assert not torch.allclose(gx_wrong, xe.grad)


def test_div_with_rounding_mode_has_zero_gradient_at_a_zero_divisor():
    """``torch.div(a, b, rounding_mode=...)``: eager's gradient is zero for both operands
    (derivatives.yaml, div.Tensor_mode); the jitted one was nan where ``b`` is 0 (the
    decomposition's division differentiated with a zero cotangent: 0 / 0). Fuzzer
    programs 927-928."""
    def f(a, b):
        return (torch.div(a, b, rounding_mode="trunc") + torch.div(a, b, rounding_mode="floor")
                + a * b)

    grads = []
    for fn in (f, thunder_mlir.jit(f)):
        a = torch.tensor([1.5, -2.0, 3.0], requires_grad=True)
        b = torch.tensor([0.0, 1.0, -2.0], requires_grad=True)
        fn(a, b).sum().backward()
        grads.append((a.grad, b.grad))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("saved", [False, True], ids=["recomputed", "saved"])
@pytest.mark.parametrize("name", sorted(n for n in CASES if n.startswith("sdpa")))
def test_sdpa_backward_both_ways(name, saved, monkeypatch):
    """The attention backward recomputes the probabilities from q and k (vjp_composites
    ``_sdpa``, as FlashAttention's backward does) unless they take at most
    ``SDPA_SAVED_PROBS_BYTES``; then the generic VJP of the decomposed attention saves
    them. Both give eager's gradients. Which way ran shows in the grad stage: the
    recomputed softmax is a second reduce_max."""
    from thunder_mlir.transforms import vjp_composites

    monkeypatch.setattr(vjp_composites, "SDPA_SAVED_PROBS_BYTES", 1 << 60 if saved else 0)
    fn, args = CASES[name]
    jfn = check_grads(fn, *args)
    grad = next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == "grad")
    assert grad.count('"thunder.reduce_max"') == (1 if saved else 2), grad
