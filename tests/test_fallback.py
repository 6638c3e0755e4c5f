"""The torch fallback executor (ops with no thunder_mlir symbol run eagerly, between XLA
regions) and the errors the tracer raises for programs it cannot compile."""

from __future__ import annotations

import os
import re

import pytest
import torch

import thunder_mlir
from conftest import assert_close_to_eager, unregistered_add_, unregistered_cumprod, \
    unregistered_logcumsumexp, unregistered_mul_, unregistered_sort, unregistered_topk
from thunder_mlir.frontend.torch_fallback import qualified_name
from thunder_mlir.frontend.symbols import SYMBOLS

T = torch.Tensor


# Ops the tracer sees with no symbol (conftest's unregistered_* functions, which thunder_mlir
# can never have a symbol for), so the tests do not depend on which torch ops lack symbols.
_UNARY = [(unregistered_cumprod, lambda f, t: f(t, 1)),
          (unregistered_logcumsumexp, lambda f, t: f(t, 1))]
_INPLACE = [(unregistered_mul_, lambda f, t: f(t, 0.5)),
            (unregistered_add_, lambda f, t: f(t, 0.5))]


def _pick(candidates, n=1):
    assert all(f not in SYMBOLS for f, _ in candidates)
    return [(qualified_name(f), (lambda f, call: lambda t: call(f, t))(f, call))
            for f, call in candidates[:n]]


def test_fallback_in_the_middle_of_a_program():
    [(name, op)] = _pick(_UNARY)

    def fn(a):
        b = a.sin() * 2
        c = op(b)  # no symbol: runs on the torch executor
        return c + 1, b.sum()

    jfn = assert_close_to_eager(fn, torch.randn(3, 4), expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == [name]
    plan = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "plan").text
    regions = set(re.findall(r"func\.func private @(xla_region_\d+)", plan))
    assert len(regions) == 2, plan
    assert plan.count('"thunder.executor_call"') == 1
    assert f'callee = "{name}"' in plan and 'executor = "torch"' in plan
    # the call sits between the two regions in @computation
    comp = plan.split("func.func private")[0]
    first, call, second = (comp.index("@xla_region_0("), comp.index("thunder.executor_call"),
                           comp.index("@xla_region_1("))
    assert first < call < second


def test_fallback_names_are_public_spellings():
    assert qualified_name(torch.cumprod) == "torch.cumprod"
    assert qualified_name(T.cumprod_) == "torch.Tensor.cumprod_"
    assert qualified_name(torch.special.i0) == "torch.special.i0"
    assert qualified_name(torch.linalg.det) == "torch.linalg.det"
    assert qualified_name(torch.nn.functional.fractional_max_pool2d) == \
        "torch.nn.functional.fractional_max_pool2d"  # made by boolean_dispatch


def test_fallback_with_several_outputs_and_int_dtypes():
    def fn(a):
        v, i = unregistered_topk(a * 2, 2)
        s = unregistered_sort(a, 1, descending=True)
        return v + 1, i * 10, s.values - v[:, :1], s.indices

    jfn = assert_close_to_eager(fn, torch.randn(4, 5), expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == [qualified_name(unregistered_topk),
                                              qualified_name(unregistered_sort)]


def test_fallback_namedtuple_output():
    x = torch.randn(4, 5)
    out = thunder_mlir.jit(lambda a: unregistered_sort(a, 1))(x)
    assert isinstance(out, torch.return_types.sort)
    torch.testing.assert_close(out.values, torch.sort(x, 1).values)
    torch.testing.assert_close(out.indices, torch.sort(x, 1).indices)


def test_fallback_output_is_program_output_and_input_to_xla():
    [(n1, op1), (n2, op2)] = _pick(_UNARY, 2)

    def fn(a):
        c = op1(a)
        return c, c * a, op2(c)  # two fallbacks, one feeding the other

    jfn = assert_close_to_eager(fn, torch.rand(3, 4) + 0.5, expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == [n1, n2]


def test_inplace_fallback_on_intermediate():
    [(n1, op1), (n2, op2)] = _pick(_INPLACE, 2)

    def fn(a):
        b = a * 2
        op1(b)  # in-place, no symbol: later uses of b see the update
        c = b + 1
        op2(b)
        return c, b

    x = torch.rand(4, 3)
    jfn = assert_close_to_eager(fn, x, expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == [n1, n2]
    x0 = x.clone()
    jfn(x)
    torch.testing.assert_close(x, x0)  # the input itself is untouched


def test_inplace_fallback_on_input_updates_callers_tensor_like_eager():
    [(_, op)] = _pick(_INPLACE)

    def fn(a):
        op(a)
        return a * 2

    x = torch.rand(4, 3) + 0.5
    expected_x, y = x.clone(), x.clone()
    expected = fn(expected_x)
    out = thunder_mlir.jit(fn)(y)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(y, expected_x)


def test_inplace_on_a_view_writes_its_base_as_eager():
    """A write through a view of an intermediate reaches the base (functionalization), on
    XLA and through an in-place op only the torch fallback runs; the fallback call returns
    what it wrote (``thunder.writes``), so the read after it is ordered after the write."""
    def fn(a):
        b = a * 1
        v = b[0]
        v.add_(1)
        return b

    assert_close_to_eager(fn, torch.randn(3, 2))
    [(name, op)] = _pick(_INPLACE)

    def fn2(a):
        b = a * 1
        v = b[:, 0]
        op(v)
        return b.sum(0), b

    jfn = assert_close_to_eager(fn2, torch.randn(3, 2), expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == [name]
    assert "thunder.writes" in thunder_mlir.last_traces(jfn)[0].text


def test_op_with_data_dependent_shape_is_specialized_on_the_size_seen():
    # no meta kernel: its output size comes from torch's fake kernel as an unbacked size
    # symbol: every size, 0 and 1 included, shares one trace (issue 48), checked at every run
    jfn = thunder_mlir.jit(lambda a: torch.nonzero(a))
    for a in (torch.tensor([0., 1, 0, 2]), torch.tensor([3., 1, 0, 2]),
              torch.tensor([0., 0, 0, 2]), torch.tensor([0., 1, 0, 2])):
        assert torch.equal(jfn(a), torch.nonzero(a))
    assert thunder_mlir.cache_misses(jfn) == 1


def test_torch_assert_runs_its_python_body_while_tracing():
    # torch._assert is `assert condition, message` in Python: a Python condition is decided
    # at trace time (no torch step left in the program: timm asserts in every BatchNorm),
    # a tensor condition is read with a value guard, and a false one raises eager's
    # AssertionError with its message
    def f(x):
        torch._assert(x.ndim == 2, f"expected 2D input (got {x.ndim}D input)")
        torch._assert(x.sum() > -100, "sum below -100")
        return x * 2

    jfn = thunder_mlir.jit(f)
    x = torch.randn(3, 4)
    assert torch.equal(jfn(x), f(x))
    assert thunder_mlir.fallback_ops(jfn) == []
    assert "_assert" not in thunder_mlir.last_traces(jfn)[0].text
    for bad, message in ((torch.randn(2, 3, 4), "expected 2D input (got 3D input)"),
                         (torch.full((2, 2), -100.0), "sum below -100")):
        with pytest.raises(AssertionError, match=re.escape(message)):
            f(bad)
        with pytest.raises(AssertionError, match=re.escape(message)):
            jfn(bad)


def test_ops_without_meta_kernels_run_on_the_fallback_by_a_trial_run():
    # geqrf, lstsq, histogram and binomial have no meta kernel: their output metadata comes
    # from one run on zero-filled inputs, checked against every real run
    a, p = torch.randn(5, 3), torch.rand(4)
    jfn = assert_close_to_eager(lambda a: (torch.geqrf(a), torch.linalg.lstsq(a, a[:, :2]),
                                           torch.histogram(a, bins=4)), a, expect_fallback=True)
    assert {"torch.geqrf", "torch.linalg.lstsq", "torch.histogram"} <= \
        set(thunder_mlir.fallback_ops(jfn))


def test_a_trial_run_leaves_torchs_generator_as_it_was():
    from types import SimpleNamespace

    import optree

    from thunder_mlir.frontend.torch_fallback import _trial_run

    x = SimpleNamespace(tshape=(3,), tdtype=torch.float32)  # what a trial run reads
    leaves, spec = optree.tree_flatten(((x,), {}))
    state = torch.get_rng_state()
    out = _trial_run(lambda t: t + torch.rand(3), leaves, [0], spec, torch.device("cpu"))
    assert out.shape == (3,) and out.device.type == "meta"
    assert torch.equal(torch.get_rng_state(), state)


def test_python_results_are_not_taken_from_a_trial_run():
    # allclose computed on zeros would be True whatever the inputs: it is computed from
    # the real inputs and guarded (frontend/value_guards.py)
    jfn = thunder_mlir.jit(lambda a, b: torch.allclose(a, b))
    a = torch.randn(3)
    assert jfn(a, a.clone()) is True
    assert jfn(a, a + 1) is False
    assert jfn(a, a.clone()) is True


# ------------------------------------------------------------------------ errors
_THIS_FILE = os.path.basename(__file__)


def _data_dependent(a):
    if a.numpy().sum() > 0:  # the line the error must name
        return a
    return -a


def test_data_dependent_control_flow_names_line_and_torch_cond():
    line = _data_dependent.__code__.co_firstlineno + 1
    with pytest.raises(thunder_mlir.DataDependentControlFlowError) as info:
        thunder_mlir.jit(_data_dependent)(torch.randn(3))
    msg = str(info.value)
    assert f"{_THIS_FILE}:{line}" in msg, msg
    assert "if a.numpy().sum() > 0" in msg
    assert "torch.cond" in msg
    assert isinstance(info.value, thunder_mlir.TraceError)


@pytest.mark.parametrize("body", [
    lambda a: a.numpy(),
    lambda a: a.data_ptr(),
], ids=["numpy", "data_ptr"])
def test_data_dependent_values_raise(body):
    with pytest.raises(thunder_mlir.DataDependentControlFlowError, match=_THIS_FILE):
        thunder_mlir.jit(body)(torch.randn(3))


def test_storage_is_refused_with_what_to_write_instead():
    # (issue 46: a traced tensor has no memory; the error names the line and the view to
    # read instead of the storage)
    with pytest.raises(thunder_mlir.UnsupportedError, match=_THIS_FILE) as info:
        thunder_mlir.jit(lambda a: a.untyped_storage())(torch.randn(3))
    assert "as_strided" in str(info.value)


@pytest.mark.parametrize("body", [
    lambda a: a.sum().item() * a,
    lambda a: float(a.sum()) * a,
    lambda a: a * len(a.tolist()) + a.tolist()[0],
    lambda a: a[:int(a[0] > 0) + 1],
], ids=["item", "float", "tolist", "int"])
def test_data_dependent_values_are_specialized_and_guarded(body):
    jfn = thunder_mlir.jit(body)
    for a in (torch.randn(3), torch.randn(3), -torch.rand(3)):
        torch.testing.assert_close(jfn(a), body(a))


GLOBAL_TENSOR = torch.randn(3)


def _uses_global_tensor(a):
    return a + GLOBAL_TENSOR  # the line the error must name


def test_global_tensor_raises_sharp_edge_error_naming_line():
    line = _uses_global_tensor.__code__.co_firstlineno + 1
    with pytest.raises(thunder_mlir.SharpEdgeError) as info:
        thunder_mlir.jit(_uses_global_tensor)(torch.randn(3))
    msg = str(info.value)
    assert f"{_THIS_FILE}:{line}" in msg, msg
    assert "GLOBAL_TENSOR" in msg


def test_closure_tensor_raises_sharp_edge_error():
    captured = torch.randn(3)

    def fn(a):
        return torch.mul(a, captured)

    with pytest.raises(thunder_mlir.SharpEdgeError, match=_THIS_FILE):
        thunder_mlir.jit(fn)(torch.randn(3))


def test_inplace_on_input_is_written_back_like_eager():
    # The issue asked for NotImplementedError here; the jit now supports it by writing the
    # updated value back into the caller's tensor after the run (registry.register_inplace).
    def fn(a, b):
        a.mul_(2)
        a.add_(b)
        return a * 3

    x, y = torch.randn(4), torch.randn(4)
    xe, xj = x.clone(), x.clone()
    expected = fn(xe, y)
    out = thunder_mlir.jit(fn)(xj, y)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(xj, xe)


def test_inplace_on_a_view_of_an_input_writes_the_callers_tensor():
    def fn(a):
        a[0].add_(1)
        a.t()[1].mul_(3)
        return a * 2

    x = torch.randn(3, 2)
    xe, xj = x.clone(), x.clone()
    expected = fn(xe)
    torch.testing.assert_close(thunder_mlir.jit(fn)(xj), expected)
    torch.testing.assert_close(xj, xe)


# ------------------------------------------------ the backward of a fallback op (replay)
def _stat_update(x, weight, stat):
    """``x * weight``, updating ``stat`` in place with x's mean as instance_norm updates its
    running statistics (a side effect the tracer cannot see), seen as an op with no symbol."""
    if torch.overrides.has_torch_function((x, weight, stat)):
        return torch.overrides.handle_torch_function(_stat_update, (x, weight, stat), x,
                                                     weight, stat)
    with torch.no_grad():
        stat.mul_(0.5).add_(x.mean() * 0.5)
    return x * weight


def _noisy(x):
    """``x * u`` with ``u`` uniform from torch's generator (as fractional max pooling or a
    dropout inside an RNN draws), seen as an op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(_noisy, (x,), x)
    return x * torch.rand_like(x)


def _many_types(*ts):
    """The sum of each tensor's sum, seen as an op with no symbol (many tensor arguments)."""
    if torch.overrides.has_torch_function(ts):
        return torch.overrides.handle_torch_function(_many_types, ts, *ts)
    return sum(t.sum() for t in ts)


def test_fallback_backward_differentiates_only_inputs_that_need_grad():
    # regression: the backward re-ran the op with every floating-point input requiring grad,
    # so torch refused the running statistics (InstanceNorm's, nn.InstanceNorm1d in
    # ModuleInfo) and class weights; the replay also updated the statistics a second time
    def fn(x, weight, stat):
        return _stat_update(x * 2, weight, stat)

    x, weight = torch.randn(5, requires_grad=True), torch.rand(5)
    stat_e, stat_j = torch.zeros(()), torch.zeros(())
    xj = x.detach().clone().requires_grad_()
    fn(x, weight, stat_e).sum().backward()
    jfn = thunder_mlir.jit(fn)
    jfn(xj, weight, stat_j).sum().backward()
    assert "_stat_update" in " ".join(thunder_mlir.fallback_ops(jfn))
    torch.testing.assert_close(xj.grad, x.grad)
    torch.testing.assert_close(stat_j, stat_e)


def test_fallback_backward_replays_the_forwards_random_draws():
    # regression: the backward re-ran the op from the generator's current state, so an op
    # drawing random numbers (FractionalMaxPool2d without _random_samples) was
    # differentiated at other draws than its forward's: a silently wrong gradient
    def fn(x):
        return _noisy(x * 1.5)

    x = torch.randn(64, requires_grad=True)
    xj = x.detach().clone().requires_grad_()
    jfn = thunder_mlir.jit(fn)
    torch.manual_seed(3)
    expected = fn(x)
    torch.manual_seed(3)
    actual = jfn(xj)
    torch.testing.assert_close(actual, expected)
    after_forward = torch.get_rng_state()
    actual.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(xj.grad, x.grad)
    assert torch.equal(torch.get_rng_state(), after_forward)  # the backward draws nothing


def test_fallback_takes_many_arguments_of_few_interleaved_types():
    # regression: operands were stored as runs of consecutive equal types (at most 8), so
    # torch.lstm's weights and biases (nn.LSTM, nn.GRU in ModuleInfo) interleaving few
    # types failed
    shapes = [(2, 3), (3,), (4, 1)] * 4  # 12 runs in argument order, 3 types

    def fn(*ts):
        return _many_types(*[t * 2 for t in ts])

    ts = [torch.randn(s, requires_grad=True) for s in shapes]
    tj = [t.detach().clone().requires_grad_() for t in ts]
    fn(*ts).backward()
    thunder_mlir.jit(fn)(*tj).backward()
    for a, e in zip(tj, ts):
        torch.testing.assert_close(a.grad, e.grad)


def test_ctc_loss_with_concatenated_targets_and_length_tensors():
    # regression: ctc_loss has no meta kernel, and the trial run on zeros fails when the
    # target lengths (tensors) must sum to a 1-d targets' size (nn.CTCLoss in ModuleInfo);
    # its documented output metadata is used instead
    torch.manual_seed(0)
    log_probs = torch.randn(12, 3, 6).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 6, (9,))
    in_lens, tgt_lens = torch.tensor([12, 10, 11]), torch.tensor([4, 3, 2])

    def fn(lp, t, il, tl):
        return torch.nn.functional.ctc_loss(lp * 1.0, t, il, tl, reduction="none")

    lj = log_probs.detach().clone().requires_grad_()
    expected = fn(log_probs, targets, in_lens, tgt_lens)
    jfn = thunder_mlir.jit(fn)
    actual = jfn(lj, targets, in_lens, tgt_lens)
    torch.testing.assert_close(actual, expected)
    assert thunder_mlir.fallback_ops(jfn) == ["torch.nn.functional.ctc_loss"]
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(lj.grad, log_probs.grad)


# ------------------------------------------------- the implementation registry's lifetime
def _registered_symbols(text: str) -> list[str]:
    return re.findall(r"impl = @([\w.]+\$\d+)", text)


def test_implementations_live_with_their_function():
    """The implementations a compilation registers resolve while its jitted function
    lives (so its last_traces stages can be re-run in this process) and are freed with it
    (ir/implementations.py: weak entries, held by the cache entry)."""
    import gc

    from thunder_mlir.errors import MissingImplementationError
    from thunder_mlir.ir import implementations

    jfn = thunder_mlir.jit(lambda a: unregistered_cumprod(a, 0).sum())
    x = torch.randn(4, requires_grad=True)
    jfn(x).backward()
    symbols = [s for stage in thunder_mlir.last_traces(jfn)
               for s in _registered_symbols(stage.text)]
    # the forward call, its form returning the RNG state (grad) and its VJP
    assert len(set(symbols)) == 3, symbols
    gc.collect()
    for s in symbols:
        assert callable(implementations.lookup(s))
    del jfn
    gc.collect()
    for s in symbols:
        with pytest.raises(MissingImplementationError, match=re.escape(f"@{s} ")):
            implementations.lookup(s)


def test_registry_does_not_grow_with_compilations():
    """Compiling many functions in a loop (fallback calls, their VJPs, custom
    autograd.Function rules) leaves the registry as it was once they are gone."""
    import gc

    from thunder_mlir.ir import implementations

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def compile_and_run(k):
        jfn = thunder_mlir.jit(lambda a: (unregistered_cumprod(a, 0) * k).sum()
                               + Double.apply(a).sum())
        x = torch.randn(3, requires_grad=True)
        jfn(x).backward()
        assert implementations.size() > 0

    gc.collect()
    before = implementations.size()
    for k in range(25):
        compile_and_run(float(k))
    gc.collect()
    assert implementations.size() == before
