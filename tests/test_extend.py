"""thunder_mlir.extend: Thunder's "Extending Thunder" notebook (multimul with NumPy), the
execution-transform pass, grad transforms, errors, and a CPU cross-entropy executor that
trains an MLP with eager's losses. Traces are checked with FileCheck (``filecheck``
package) over ``last_traces`` text; values against eager PyTorch."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from thunder_mlir.errors import ExecutorError
import thunder_mlir
import thunder_mlir.torch as ltorch
from thunder_mlir import TensorProxy
from thunder_mlir.extend import OperatorExecutor, get_grad, put_grads, register_executor

pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
ROOT = Path(__file__).parent.parent
_ids = itertools.count()


def filecheck(text: str, checks: str) -> None:
    """Run FileCheck's CHECK lines ``checks`` over ``text`` (fails with its report)."""
    path = Path(f"/tmp/thunder_mlir_extend_check_{next(_ids)}.txt")
    path.write_text(checks)
    proc = subprocess.run([sys.executable, "-m", "filecheck", str(path)], input=text,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + "\n--- input:\n" + text


def stage(jfn, name: str) -> str:
    text = next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == name)
    text = re.sub(r" loc\([^()]*(\([^()]*\))?[^()]*\)", "", text)
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("#loc"))


def executor_calls(text: str, callee: str | None = None) -> list[str]:
    return [ln for ln in text.splitlines() if "thunder.executor_call" in ln
            and (callee is None or f'callee = "{callee}"' in ln)]


# ------------------------------------------------------------------ the notebook
def multimul_impl(a, b, c, d):
    return np.multiply(a, b), np.multiply(c, d)


def multimul_like(a, b, c, d):
    return a * b, c * d


def cpu_checker(a, b):
    return all(x.device.type == "cpu" for x in (a, b) if isinstance(x, TensorProxy))


def make_myex():
    ex = OperatorExecutor(f"myex{next(_ids)}", version="0.1")
    return ex, ex.register_operator("multimul", like=multimul_like, fn=multimul_impl)


def foo(a, b, c, d):
    return multimul(a, b, c, d)  # noqa: F821 (bound per test through globals)


def bar(a, b):
    return a * b


def test_multimul_operator_in_trace_and_plan():
    ex, mm = make_myex()
    a, b, c, d = (torch.randn(2, 2) for _ in range(4))
    jfoo = thunder_mlir.jit(lambda a, b, c, d: mm(a, b, c, d), executors=[ex])
    out = jfoo(a, b, c, d)
    torch.testing.assert_close(out, (a * b, c * d))
    # initial: the operator is a composite whose region is the traced `like`
    filecheck(stage(jfoo, "initial"), f"""
CHECK: "thunder.composite"(%arg0, %arg1, %arg2, %arg3)
CHECK:   "thunder.composite"
CHECK:     thunder.mul
CHECK:   name = "ltorch.mul"
CHECK:   "thunder.composite"
CHECK:     thunder.mul
CHECK:   name = "ltorch.mul"
CHECK: name = "{ex.name}.multimul"
""")
    filecheck(stage(jfoo, "plan"), f"""
CHECK: func.func @computation
CHECK-NEXT: "thunder.executor_call"(%arg0, %arg1, %arg2, %arg3) {{callee = "{ex.name}.multimul", executor = "{ex.name}"
CHECK-NEXT: return
""")
    assert [s.name for s in thunder_mlir.last_traces(jfoo)][:3] == ["initial", "execution",
                                                                     "prims"]


def test_operator_without_its_executor_is_decomposed():
    ex, mm = make_myex()
    a, b = torch.randn(3), torch.randn(3)
    j = thunder_mlir.jit(lambda a, b: mm(a, b, b, a))
    torch.testing.assert_close(j(a, b), (a * b, b * a))
    assert not executor_calls(stage(j, "plan"))


def test_multimul_grad_through_like():
    ex, mm = make_myex()
    a, b, c, d = (torch.randn(2, 2) for _ in range(4))
    jfoo = thunder_mlir.jit(lambda a, b, c, d: mm(a, b, c, d), executors=[ex])
    grads = thunder_mlir.grad(jfoo)(a, b, c, d)
    torch.testing.assert_close(grads, [b, a, d, c])
    # an operator without a grad transform is differentiated through its like: the grad
    # pass inlines it, so forward and backward are its like's ops (on XLA), as in Thunder
    filecheck(stage(jfoo, "grad"), """
CHECK: func.func @forward
CHECK-NOT: executor_call
CHECK: func.func @backward
""")


def _mul_impl_ex():
    ex, mm = make_myex()

    def mul_to_multimul(a, b):
        result, _ = mm(a, b, 0, 0)
        return result
    ex.register_implementation(ltorch.mul, checker=cpu_checker,
                               execution_transform=mul_to_multimul)
    return ex, mm, mul_to_multimul


def test_mul_executed_as_multimul():
    ex, mm, _ = _mul_impl_ex()
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    jbar = thunder_mlir.jit(bar, executors=[ex])
    torch.testing.assert_close(jbar(a, b), a * b)
    plan = stage(jbar, "plan")
    filecheck(plan, f"""
CHECK: func.func @computation(%arg0: tensor<2x2xf32>, %arg1: tensor<2x2xf32>)
CHECK-NEXT: %0 = "thunder.executor_call"(%arg0, %arg1) {{callee = "{ex.name}.multimul", executor = "{ex.name}", impl = @{ex.name}.multimul${{{{[0-9]+}}}}
CHECK-NEXT: return %0
""")
    # the execution stage shows the transform: multimul(a, b, 0, 0) with its like region
    filecheck(stage(jbar, "execution"), f"""
CHECK-NOT: name = "ltorch.mul"
CHECK: "thunder.executor_call"(%arg0, %arg1) {{callee = "{ex.name}.multimul"
""")


def test_checker_decides():
    ex, mm = make_myex()
    seen = []

    def only_3x3(a, b):
        seen.append((a.shape, a.dtype, a.device, a.ndim, a.requires_grad))
        return isinstance(b, TensorProxy) and a.shape == (3, 3)
    ex.register_implementation(ltorch.mul, checker=only_3x3,
                               execution_transform=lambda a, b: mm(a, b, 0, 0)[0])
    j = thunder_mlir.jit(lambda a, b: a * b + a * 2.0, executors=[ex])
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    torch.testing.assert_close(j(a, b), a * b + a * 2.0)
    assert not executor_calls(stage(j, "plan"))
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(j(a, b), a * b + a * 2.0)  # new shape: recompiled
    plan = stage(j, "plan")
    assert len(executor_calls(plan, f"{ex.name}.multimul")) == 1  # a * 2.0 is not claimed
    # proxies expose torch metadata to checkers
    assert (torch.Size([3, 3]), torch.float32, torch.device("cpu"), 2, False) in seen
    # the executor op sits between the XLA region computing nothing before and the add after
    filecheck(plan, f"""
CHECK: func.func @computation
CHECK: "thunder.executor_call"(%arg0, %arg1) {{callee = "{ex.name}.multimul"
CHECK: call @xla_region_
CHECK: return
""")


def test_grad_uses_multimul_twice_then_once_with_grad_transform():
    ex, mm, mul_to_multimul = _mul_impl_ex()
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    jbar = thunder_mlir.jit(bar, executors=[ex])
    jgrad = thunder_mlir.grad(jbar)
    torch.testing.assert_close(jgrad(a, b), [b, a])
    # grad() runs one gradient program: the forward's a * b is not needed and is gone;
    # execution transforms run after grad, so the backward's two muls are multimuls
    plan = stage(jbar._joint_functions["grad"], "plan")
    assert len(executor_calls(plan, f"{ex.name}.multimul")) == 2, plan
    # with autograd, forward and backward plans: one multimul forward, two backward
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    jbar(x, y).sum().backward()
    fwd, bwd = stage(jbar, "plan").split("func.func @backward")
    assert len(executor_calls(fwd, f"{ex.name}.multimul")) == 1
    assert len(executor_calls(bwd, f"{ex.name}.multimul")) == 2, bwd

    def mymul_grad(a, b):
        fwd = a * b
        g = get_grad(fwd)
        a_grad, b_grad = mm(b, g, a, g)
        put_grads((a, b), (a_grad, b_grad))
        return fwd
    ex.register_implementation(ltorch.mul, checker=cpu_checker,
                               execution_transform=mul_to_multimul, grad_transform=mymul_grad)
    torch.testing.assert_close(jgrad(a, b), [b, a])
    # Thunder's notebook: "a single multimul call is made" — the gradient program computes
    # both gradients with one multimul; the forward's product is eliminated
    plan = stage(jbar._joint_functions["grad"], "plan")
    filecheck(plan, f"""
CHECK: func.func @computation(%arg0: tensor<2x2xf32>, %arg1: tensor<2x2xf32>)
CHECK-NEXT: %0 = call @xla_region_0()
CHECK-NEXT: %1:2 = "thunder.executor_call"(%arg1, %0, %arg0, %0) {{callee = "{ex.name}.multimul"
CHECK-NEXT: return %1#0, %1#1
""")
    assert len(executor_calls(plan, f"{ex.name}.multimul")) == 1
    # the grad stage shows the transform's backward as one multimul composite
    assert stage(jbar._joint_functions["grad"], "grad").count(
        f'name = "{ex.name}.multimul"') == 1
    # autograd through loss.backward() uses the same rule
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    (jbar(x, y) * torch.arange(4.0).reshape(2, 2)).sum().backward()
    torch.testing.assert_close(x.grad, b * torch.arange(4.0).reshape(2, 2))


def test_grad_transform_only_where_checker_accepts():
    ex, mm = make_myex()
    calls = []

    def g_transform(a, b):
        calls.append(1)
        fwd = a * b
        g = get_grad(fwd)
        put_grads((a, b), mm(b, g, a, g))
        return fwd
    ex.register_implementation(ltorch.mul, checker=lambda a, b: isinstance(b, TensorProxy),
                               grad_transform=g_transform)
    j = thunder_mlir.jit(lambda a, b: (a * b) * 3.0, executors=[ex])
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(thunder_mlir.grad(j)(a, b), [3 * b, 3 * a])
    assert len(calls) == 1
    assert len(executor_calls(stage(j, "plan"), f"{ex.name}.multimul")) == 1


def test_contiguous_prologue_and_xla_ops_around_the_executor():
    ex, mm = make_myex()

    def mul_to_contiguous_multimul(a, b):
        a = a.contiguous()
        b = b.contiguous()
        result, _ = mm(a, b, 0, 0)
        return result
    ex.register_implementation(ltorch.mul, checker=cpu_checker,
                               execution_transform=mul_to_contiguous_multimul)
    a, b = torch.randn(2, 3), torch.randn(3, 2).t()  # b non-contiguous
    jcaz = thunder_mlir.jit(bar, executors=[ex])
    torch.testing.assert_close(jcaz(a, b), a * b)
    assert len(executor_calls(stage(jcaz, "plan"), f"{ex.name}.multimul")) == 1

    # a prologue doing real work: its torch ops stay on XLA, before the executor op
    def mul_via_negations(a, b):
        return mm(ltorch.neg(a), -b, 0, 0)[0]
    ex.register_implementation(ltorch.mul, checker=cpu_checker,
                               execution_transform=mul_via_negations)
    j = thunder_mlir.jit(lambda a, b: torch.exp(a * b), executors=[ex])
    torch.testing.assert_close(j(a, b), torch.exp(a * b))
    filecheck(stage(j, "execution"), f"""
CHECK: name = "ltorch.neg"
CHECK: name = "ltorch.neg"
CHECK: "thunder.executor_call"{{{{.*}}}}callee = "{ex.name}.multimul"
CHECK: name = "ltorch.exp"
""")
    filecheck(stage(j, "plan"), f"""
CHECK: func.func @computation
CHECK-NEXT: %[[NEG:.*]]:2 = call @xla_region_[[R0:[0-9]+]](%arg0, %arg1)
CHECK-NEXT: %[[MM:.*]] = "thunder.executor_call"(%[[NEG]]#0, %[[NEG]]#1) {{callee = "{ex.name}.multimul"
CHECK-NEXT: %[[EXP:.*]] = call @xla_region_{{{{[0-9]+}}}}(%[[MM]])
CHECK-NEXT: return %[[EXP]]
CHECK: func.func private @xla_region_[[R0]]
CHECK: thunder.neg
CHECK: thunder.neg
""")


def test_meta_operator():
    ex = OperatorExecutor(f"metaex{next(_ids)}")
    addmul = ex.register_operator(
        "addmul", meta=lambda a, b: (torch.empty_like(a), torch.empty_like(a)),
        fn=lambda a, b: (a + b, a * b))
    j = thunder_mlir.jit(lambda a, b: addmul(a.sin(), b)[1].cos(), executors=[ex])
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(j(a, b), (a.sin() * b).cos())
    assert len(executor_calls(stage(j, "plan"), f"{ex.name}.addmul")) == 1


def test_registrations_are_part_of_the_cache_key():
    ex, mm = make_myex()
    j = thunder_mlir.jit(bar, executors=[ex])
    a, b = torch.randn(2), torch.randn(2)
    j(a, b)
    assert not executor_calls(stage(j, "plan"))
    ex.register_implementation(ltorch.mul, execution_transform=lambda a, b: mm(a, b, 0, 0)[0])
    torch.testing.assert_close(j(a, b), a * b)
    assert len(executor_calls(stage(j, "plan"))) == 1
    assert thunder_mlir.cache_misses(j) == 2


def test_priority_order():
    ex1, mm1 = make_myex()
    ex2, mm2 = make_myex()
    ex1.register_implementation(torch.mul, execution_transform=lambda a, b: mm1(a, b, 0, 0)[0])
    ex2.register_implementation(ltorch.mul, execution_transform=lambda a, b: mm2(a, b, 0, 0)[0])
    a, b = torch.randn(2), torch.randn(2)
    for first, other in ((ex1, ex2), (ex2, ex1)):
        j = thunder_mlir.jit(bar, executors=[first, other])
        torch.testing.assert_close(j(a, b), a * b)
        assert len(executor_calls(stage(j, "plan"), f"{first.name}.multimul")) == 1
        assert not executor_calls(stage(j, "plan"), f"{other.name}.multimul")


# ----------------------------------------------------------------------- errors
def test_checker_that_raises():
    ex, mm = make_myex()

    def bad_checker(a, b):
        raise ValueError("boom")
    ex.register_implementation(ltorch.mul, checker=bad_checker,
                               execution_transform=lambda a, b: mm(a, b, 0, 0)[0])
    j = thunder_mlir.jit(bar, executors=[ex])
    with pytest.raises(ExecutorError, match=rf"executor '{ex.name}': the checker of "
                                            r"'ltorch.mul' raised ValueError: boom"):
        j(torch.randn(2), torch.randn(2))


@pytest.mark.parametrize("bad", ["shape", "dtype", "count"])
def test_implementation_returning_wrong_outputs(bad):
    ex = OperatorExecutor(f"badex{next(_ids)}")

    def impl(a, b):
        if bad == "shape":
            return (a * b)[:1]
        if bad == "dtype":
            return (a * b).double()
        return a * b, a
    op = ex.register_operator("badmul", like=lambda a, b: a * b, fn=impl)
    j = thunder_mlir.jit(lambda a, b: op(a, b), executors=[ex])
    msg = {"shape": r"returned output 0 with shape \(1,\) and dtype torch.float32; its "
                    r"like/meta function says shape \(3,\) and dtype torch.float32",
           "dtype": r"returned output 0 with shape \(3,\) and dtype torch.float64; its "
                    r"like/meta function says shape \(3,\) and dtype torch.float32",
           "count": r"returned 2 values, expected 1"}[bad]
    with pytest.raises(ExecutorError, match=rf"executor '{ex.name}': the implementation "
                                            rf"of '{ex.name}.badmul' " + msg):
        j(torch.randn(3), torch.randn(3))


def test_operator_registered_twice():
    ex, mm = make_myex()
    with pytest.raises(ExecutorError, match=rf"executor '{ex.name}': operator 'multimul' is "
                                            "already registered"):
        ex.register_operator("multimul", like=multimul_like, fn=multimul_impl)
    register_executor(ex)
    with pytest.raises(ExecutorError, match="already registered"):
        register_executor(OperatorExecutor(ex.name))


def test_execution_transform_with_wrong_outputs():
    ex, mm = make_myex()
    ex.register_implementation(ltorch.mul, execution_transform=lambda a, b: mm(a, b, a, b))
    j = thunder_mlir.jit(bar, executors=[ex])
    with pytest.raises(ExecutorError, match=rf"executor '{ex.name}': the execution transform "
                                            r"of 'ltorch.mul' returned tensors of types"):
        j(torch.randn(2), torch.randn(2))


def test_get_grad_outside_grad_transform():
    with pytest.raises(RuntimeError, match="only be called inside a grad_transform"):
        get_grad(None)


def test_examples_extend_multimul_runs(capsys):
    spec = importlib.util.spec_from_file_location("extend_multimul",
                                                  ROOT / "examples" / "extend_multimul.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    out = capsys.readouterr().out
    assert out.count('callee = "myex.multimul"') >= 6


# --------------------------------------------------------- cross-entropy executor
@pytest.fixture(scope="module")
def xent_example():
    spec = importlib.util.spec_from_file_location(
        "cross_entropy_executor", ROOT / "examples" / "cross_entropy_executor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cross_entropy_executor_trains_like_eager(xent_example):
    m = xent_example
    eager, _ = m.train(m.make_mlp(), jitted=False)
    jitted, jstep = m.train(m.make_mlp(), jitted=True)
    assert len(jitted) == 10
    np.testing.assert_allclose(jitted, eager, rtol=0, atol=1e-5)
    assert eager[-1] < eager[0]
    plan = stage(jstep, "plan")
    fwd, bwd = plan.split("func.func @backward")
    assert len(executor_calls(fwd, "xent.cross_entropy_fwd")) == 1
    assert len(executor_calls(bwd, "xent.cross_entropy_bwd")) == 1
    assert not executor_calls(bwd, "xent.cross_entropy_fwd")
    # the backward op reads the saved log-probabilities (a residual of the forward)
    filecheck(plan, """
CHECK: func.func @forward
CHECK: %[[CE:.*]]:2 = "thunder.executor_call"({{.*}}) {callee = "xent.cross_entropy_fwd", executor = "xent"{{.*}} -> (tensor<f32>, tensor<32x10xf32>)
CHECK: return %[[CE]]#0, {{.*}}%[[CE]]#1
CHECK: func.func @backward
CHECK: "thunder.executor_call"({{.*}}) {callee = "xent.cross_entropy_bwd", executor = "xent"{{.*}} -> tensor<32x10xf32>
""")


@pytest.mark.parametrize("kwargs,claimed", [
    ({}, True), ({"reduction": "sum", "ignore_index": 3}, True),
    ({"label_smoothing": 0.1}, False), ({"reduction": "none"}, False)])
def test_cross_entropy_executor_inference_and_grad(xent_example, kwargs, claimed):
    logits = torch.randn(16, 7, dtype=torch.float64)
    target = torch.randint(0, 7, (16,))

    def f(x, t):
        return F.cross_entropy(x, t, **kwargs)
    j = thunder_mlir.jit(f, executors=[xent_example.xent])
    torch.testing.assert_close(j(logits, target), f(logits, target))
    assert bool(executor_calls(stage(j, "plan"), "xent.cross_entropy_fwd")) == claimed
    x = logits.clone().requires_grad_()
    f(x, target).sum().backward()
    (ga,) = [g for g in thunder_mlir.grad(j)(logits, target)]
    torch.testing.assert_close(ga, x.grad)
    assert bool(executor_calls(stage(j, "plan"), "xent.cross_entropy_bwd")) == claimed
