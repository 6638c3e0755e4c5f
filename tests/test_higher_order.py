"""Higher-order operators (issue: reentrant tracing of user callables into regions).

torch.cond, torch.utils.checkpoint.checkpoint, while_loop, functions as inputs and
nested jitted functions, each compared with eager PyTorch (the oracle), gradients
included; plus the clear errors for what is not supported.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.utils.checkpoint import checkpoint

import thunder_mlir
from conftest import assert_close_to_eager, unregistered_cumprod


def stage(jfn, name: str) -> str:
    return next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == name)


# ----------------------------------------------------------------------------- cond
def f(true_fn, false_fn, x):
    return torch.cond(x.shape[0] > 4, true_fn, false_fn, (x,))


def true_fn(x):
    return torch.cos(x)


def false_fn(x):
    return torch.sin(x)


@pytest.mark.parametrize("n", [6, 3])
def test_cond_on_a_shape_predicate_folds_to_the_taken_branch(n):
    x = torch.randn(n)
    jf = assert_close_to_eager(f, true_fn, false_fn, x)
    prims = stage(jf, "prims")
    assert "thunder.cond" not in prims  # known at trace time: no conditional
    assert ("thunder.cos" in prims) == (n > 4) and ("thunder.sin" in prims) == (n <= 4)


def g(true_fn, false_fn, x):
    return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_on_a_tensor_predicate_is_a_conditional_in_stablehlo(sign):
    x = torch.rand(5) * sign
    jg = assert_close_to_eager(g, true_fn, false_fn, x)
    assert "thunder.cond" in stage(jg, "initial")
    hlo = stage(jg, "stablehlo")
    assert "stablehlo.if" in hlo and "stablehlo.cosine" in hlo and "stablehlo.sine" in hlo
    # one program for both predicate values: the other sign reuses it
    other = jg(true_fn, false_fn, -x)
    torch.testing.assert_close(other, g(true_fn, false_fn, -x))
    assert thunder_mlir.cache_misses(jg) == 1


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_grads_match_eager_for_both_branches(sign):
    def h(x, w):
        return torch.cond(x.sum() > 0, lambda t: (t * w).cos(), lambda t: t.sin() * w.exp(),
                          (x,)).sum()

    x = (torch.rand(6) * sign).requires_grad_()
    w = torch.randn(6, requires_grad=True)
    out = thunder_mlir.jit(h)(x, w)
    out.backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = ((x2 * w2).cos() if x2.sum() > 0 else x2.sin() * w2.exp()).sum()
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_cond_grad_of_the_example_with_function_inputs():
    x = (torch.rand(5) + 0.1).requires_grad_()
    jg = thunder_mlir.jit(g)
    jg(true_fn, false_fn, x).sum().backward()
    expected = -torch.sin(x.detach())  # d/dx sum(cos x)
    torch.testing.assert_close(x.grad, expected)
    assert "thunder.cond" in stage(jg, "grad").split("func.func @backward")[1]


def test_cond_with_several_outputs_and_a_captured_tensor():
    def fn(x, y, bias):
        return torch.cond(x.mean() > y.mean(),
                          lambda a, b: (a + bias, (a * b).sum(0)),
                          lambda a, b: (b - bias, a.sum(0)),
                          (x, y))

    x, y, bias = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)
    jfn = assert_close_to_eager(fn, x, y, bias)
    assert_close_to_eager(fn, y, x, bias, jfn=jfn)


def test_cond_branches_with_different_outputs_are_an_error_naming_the_output():
    def bad(x):
        return torch.cond(x.sum() > 0, lambda t: t, lambda t: t[:2], (x,))

    with pytest.raises(thunder_mlir.TraceError, match=r"output 0 .*shape \(4,\).*shape \(2,\)"):
        thunder_mlir.jit(bad)(torch.randn(4))


def test_fallback_op_inside_a_branch_is_a_clear_error():
    def fb(x):
        return torch.cond(x.sum() > 0, lambda t: unregistered_cumprod(t, 0), torch.sin, (x,))

    with pytest.raises(thunder_mlir.PassError, match="unregistered_cumprod.*inside the region "
                                                     "of thunder.cond"):
        thunder_mlir.jit(fb)(torch.randn(4))
    report = str(thunder_mlir.examine(fb, torch.randn(4)))
    assert "jit refuses this program" in report


def test_cond_in_a_module_reads_parameters_from_above():
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.cond(x.sum() > 0, self.a, self.b, (x,))

    m = Gate()
    jm = thunder_mlir.jit(m)
    for sign in (1.0, -1.0):
        x = torch.rand(2, 4) * sign
        torch.testing.assert_close(jm(x), m(x))
        jm(x).sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).sum().backward()
        for got, want in zip(grads, [p.grad for p in m.parameters()]):
            torch.testing.assert_close(got, want)
        m.zero_grad()


# ---------------------------------------------------------------------- checkpoint
class MLP(torch.nn.Module):
    def __init__(self, ckpt: bool):
        super().__init__()
        self.ckpt = ckpt
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 32), torch.nn.Tanh())
            for _ in range(2))
        self.head = torch.nn.Linear(32, 1)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.head(x)


def _saved_activation_bytes(jitted, module, x, y) -> int:
    """Bytes of the storages autograd saves in one forward of ``jitted``, parameters
    excluded (counted with saved_tensors_hooks, as benchmarks/bench.py does)."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    storages = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            storages[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.mse_loss(jitted(x), y)
    loss.backward()
    return sum(storages.values())


def test_checkpointed_mlp_trains_like_eager_and_saves_fewer_residual_bytes():
    torch.manual_seed(0)
    plain, ckpt = MLP(False), MLP(True)
    ckpt.load_state_dict(plain.state_dict())
    jplain, jckpt = thunder_mlir.jit(plain), thunder_mlir.jit(ckpt)
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    eager = MLP(True)
    eager.load_state_dict(plain.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, ckpt)]
    for _ in range(3):  # a few steps: the updated parameters are seen without re-tracing
        losses = []
        for m, opt in zip((eager, jckpt), opts):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            losses.append(loss.detach())
            opt.step()
        torch.testing.assert_close(losses[1], losses[0])
        for p, q in zip(ckpt.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    # activations saved for backward (parameters excluded: they are alive anyway, and the
    # checkpointed blocks save every weight they recompute with, which plain may not need)
    saved_plain = _saved_activation_bytes(jplain, plain, x, y)
    saved_ckpt = _saved_activation_bytes(jckpt, ckpt, x, y)
    assert saved_ckpt < saved_plain, (saved_ckpt, saved_plain)
    assert "thunder.checkpoint" in stage(jckpt, "initial")
    assert thunder_mlir.cache_misses(jckpt) == 1


def test_checkpoint_without_grad_is_the_plain_computation():
    def fn(x, w):
        return checkpoint(lambda a: torch.relu(a @ w), x, use_reentrant=False) + 1

    jfn = assert_close_to_eager(fn, torch.randn(3, 4), torch.randn(4, 5))
    assert "thunder.checkpoint" in stage(jfn, "initial")
    assert "thunder.checkpoint" not in stage(jfn, "prims")


# ----------------------------------------------------------------------- while_loop
def count_to(n, x):
    i = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 1.5 + 1), (i, x))


def test_while_loop_to_a_data_dependent_bound_matches_eager():
    x = torch.randn(3)
    jf = thunder_mlir.jit(count_to)
    for n in (0, 1, 7):
        i, y = jf(torch.tensor(n), x)
        ref = x.clone()
        for _ in range(n):
            ref = ref * 1.5 + 1
        assert i.item() == n
        torch.testing.assert_close(y, ref)
    assert thunder_mlir.cache_misses(jf) == 1  # the bound is data: one program
    assert "stablehlo.while" in stage(jf, "stablehlo")


def test_while_loop_matches_torch_eager_while_loop():
    n, x = torch.tensor(4), torch.randn(2, 3)
    assert_close_to_eager(count_to, n, x)


def test_while_loop_grad_is_a_clear_error_and_no_grad_works():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match="cannot differentiate the while_loop"):
        thunder_mlir.jit(count_to)(torch.tensor(2), x)
    with torch.no_grad():
        _, y = thunder_mlir.jit(count_to)(torch.tensor(2), x)
    torch.testing.assert_close(y, (x * 1.5 + 1) * 1.5 + 1)


def test_while_loop_body_changing_a_shape_is_an_error():
    def bad(x):
        return while_loop(lambda y: y.sum() < 10, lambda y: torch.cat([y, y]), (x,))

    with pytest.raises(thunder_mlir.TraceError, match="unchanged shapes and dtypes"):
        thunder_mlir.jit(bad)(torch.ones(2))


# ----------------------------------------------------------------------------- scan
def rnn(h0, xs, w):
    def cell(h, x):
        h = torch.tanh(h @ w + x)
        return h, (h.sum(-1), h.mean())

    return scan(cell, h0, xs)


def test_scan_rnn_matches_eager_as_one_while_loop():
    h0, xs, w = torch.randn(2, 4), torch.randn(7, 2, 4), torch.randn(4, 4)
    jf = assert_close_to_eager(rnn, h0, xs, w)  # the oracle is torch's own eager scan
    assert stage(jf, "stablehlo").count("stablehlo.while") == 1
    assert "stablehlo.dynamic_update_slice" in stage(jf, "stablehlo")


@pytest.mark.parametrize("dim,reverse", [(1, False), (1, True), (0, True)])
def test_scan_dim_and_reverse_match_eager(dim, reverse):
    def cumulative(xs):
        return scan(lambda c, x: (c * 0.5 + x, c * x), torch.zeros(3), xs,
                    dim=dim, reverse=reverse)

    xs = torch.randn(3, 6) if dim == 1 else torch.randn(6, 3)
    assert_close_to_eager(cumulative, xs)


def test_scan_grad_is_a_clear_error():
    h0, xs, w = torch.randn(2, 4), torch.randn(3, 2, 4), torch.randn(4, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="cannot differentiate the scan"):
        thunder_mlir.jit(rnn)(h0, xs, w)


# --------------------------------------------------- functions as inputs, nested jit
def test_functions_are_inputs_specialized_and_guarded_by_identity():
    jf = thunder_mlir.jit(f)
    x = torch.randn(6)
    torch.testing.assert_close(jf(true_fn, false_fn, x), torch.cos(x))
    torch.testing.assert_close(jf(torch.exp, false_fn, x), torch.exp(x))
    torch.testing.assert_close(jf(true_fn, false_fn, x), torch.cos(x))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2 and info["hits"] == 1
    assert "args[0] changed" in info["recompile_reasons"][0]


def test_bound_methods_are_refused_with_a_clear_error():
    class Holder:
        def fn(self, x):
            return x

    with pytest.raises(thunder_mlir.UnsupportedInputError, match=r"args\[0\]"):
        thunder_mlir.jit(f)(Holder().fn, false_fn, torch.randn(6))


SCALE = 2.0


@thunder_mlir.jit
def scaled(x):
    return x * SCALE


def test_a_jitted_function_called_inside_another_is_inlined_with_its_guards():
    global SCALE

    @thunder_mlir.jit
    def outer(x):
        return scaled(x).sin()

    x = torch.randn(3)
    torch.testing.assert_close(outer(x), (x * 2.0).sin())
    assert thunder_mlir.cache_misses(scaled) == 0  # never compiled on its own
    assert "func.call" not in stage(outer, "initial") and "thunder.mul" in stage(outer, "prims")
    assert "global 'SCALE'" in thunder_mlir.cache_info(outer)["guards"]
    try:
        SCALE = 3.0
        torch.testing.assert_close(outer(x), (x * 3.0).sin())
    finally:
        SCALE = 2.0
    assert "SCALE" in thunder_mlir.cache_info(outer)["recompile_reasons"][0]


def test_a_jitted_module_inside_a_jitted_module_is_inlined():
    inner = torch.nn.Linear(4, 4)
    outer = torch.nn.Sequential(thunder_mlir.jit(inner), torch.nn.ReLU())
    x = torch.randn(2, 4)
    jo = assert_close_to_eager(outer, x)
    forward = stage(jo, "plan").split("func.func @backward")[0]
    assert forward.count("call @xla_region") == 1


def test_in_place_update_of_an_outside_tensor_inside_a_branch_is_an_error():
    def bad(x):
        y = x * 2

        def branch(a):
            y.mul_(3)  # y lives outside the branch
            return a.sin()

        return torch.cond(x.sum() > 0, branch, torch.cos, (x,)) + y

    with pytest.raises(thunder_mlir.TraceError, match="computed inside torch.cond .* is used "
                                                      "outside it"):
        thunder_mlir.jit(bad)(torch.randn(3))


def test_reentrant_checkpoint_matches_eager():
    def fn(x, w):
        return checkpoint(lambda a: torch.tanh(a @ w), x, use_reentrant=True).sum()

    # (torch's reentrant checkpoint needs an input that requires grad to give any grad)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    jfn = thunder_mlir.jit(fn)
    jfn(x, w).backward()
    grads = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    fn(x, w).backward()
    torch.testing.assert_close(grads, (x.grad, w.grad))
    assert "thunder.checkpoint" in stage(jfn, "initial")


# ------------------------------------------------------------------------ executors
@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
def test_executors_claim_ops_inside_a_checkpoint_but_not_inside_a_cond():
    from test_extend import _mul_impl_ex, executor_calls

    ex, _, _ = _mul_impl_ex()  # claims ltorch.mul as its multimul operator

    def fn(x, y):
        a = checkpoint(lambda u: u * y, x, use_reentrant=False)
        return torch.cond(a.sum() > 0, lambda u: u * y, torch.sin, (a,))

    jfn = thunder_mlir.jit(fn, executors=[ex])
    for sign in (1.0, -1.0):
        x, y = torch.rand(2, 2) * sign, torch.rand(2, 2)
        torch.testing.assert_close(jfn(x, y), fn(x, y))
    plan = stage(jfn, "plan")
    # the checkpointed mul runs on the executor; the one inside the cond stays on XLA
    assert len(executor_calls(plan, f"{ex.name}.multimul")) == 1
    assert "stablehlo.multiply" in stage(jfn, "stablehlo")


# --------------------------------------------------------------------------- nesting
def test_cond_inside_a_while_loop_body():
    def fn(n, x):
        def body(i, y):
            return i + 1, torch.cond(y.sum() > 0, lambda t: t - 1.0, lambda t: t * -0.5 + 2, (y,))
        return while_loop(lambda i, y: i < n, body, (torch.zeros((), dtype=torch.int64), x))

    x = torch.randn(4)
    _, y = thunder_mlir.jit(fn)(torch.tensor(5), x)
    for _ in range(5):
        x = x - 1.0 if x.sum() > 0 else x * -0.5 + 2
    torch.testing.assert_close(y, x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_grad_through_a_cond_inside_a_checkpoint(sign):
    def fn(x, w):
        def block(t):
            return torch.cond(t.sum() > 0, lambda u: (u @ w).tanh(), lambda u: (u @ w).sin(),
                              (t,)) * 2
        return checkpoint(block, x, use_reentrant=False).sum()

    def reference(x, w):
        return (((x @ w).tanh() if x.sum() > 0 else (x @ w).sin()) * 2).sum()

    x, w = torch.rand(3, 4) * sign, torch.randn(4, 4, requires_grad=True)
    thunder_mlir.jit(fn)(x, w).backward()
    grad = w.grad.clone()
    w.grad = None
    reference(x, w).backward()
    torch.testing.assert_close(grad, w.grad)


# ------------------------------------------------------- factories and random numbers
def test_factory_calls_inside_branches_are_traced():
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a: a + torch.ones(3),
                          lambda a: a - torch.arange(3.0), (x,))

    for sign in (1.0, -1.0):
        assert_close_to_eager(fn, torch.rand(3) * sign)


def test_dropout_inside_a_checkpoint_recomputes_the_forward_mask():
    def fn(x, w):
        return checkpoint(lambda a: F.dropout(a * w, 0.5, training=True), x,
                          use_reentrant=False)

    x, w = torch.randn(2000), torch.randn(2000, requires_grad=True)
    jfn = thunder_mlir.jit(fn)
    y = jfn(x, w)
    y.sum().backward()
    kept = (y != 0).float()
    assert 0.4 < kept.mean().item() < 0.6
    torch.testing.assert_close(w.grad, kept * 2 * x)  # the backward saw the same mask
    assert thunder_mlir.fallback_ops(jfn) == []


def test_random_op_inside_a_loop_body_is_an_error():
    def fn(xs):
        return scan(lambda c, x: (c + torch.rand(()), c), torch.zeros(()), xs)

    with pytest.raises(thunder_mlir.TraceError, match="same numbers in every iteration"):
        thunder_mlir.jit(fn)(torch.zeros(5))
