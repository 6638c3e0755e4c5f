"""Sharp edges of the functional jit (issue 7, docs/sharp_edges.md).

Every way a Python program can escape the functional-jit contract either works exactly as
eager or is reported with the user's file, line and the name involved. Messages are
asserted by their exact fragments; line numbers are found from the source of the jitted
function (``_line``), so the assertions follow edits of this file.
"""

from __future__ import annotations

import inspect
import os
import random
import time
import warnings

import numpy as np
import pytest
import torch

from thunder_mlir.errors import SharpEdgeWarning
import thunder_mlir
from thunder_mlir import DataDependentControlFlowError, SharpEdgeError, UnsupportedInputError

from conftest import assert_same_tree

HERE = os.path.basename(__file__)


def _line(fn, fragment: str) -> int:
    """The line number of the first line of ``fn``'s source containing ``fragment``."""
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if fragment in text:
            return start + i
    raise AssertionError(f"{fragment!r} not in the source of {fn.__name__}")


def _where(fn, fragment: str) -> str:
    return f"{HERE}:{_line(fn, fragment)}:"


# ---------------------------------------------------------------------------- inputs
def test_accepted_input_types_compute_like_eager():
    def f(t, n, x, flag, s, dt, dev, none, sl, ell, size, tup, lst, dct):
        r = t[sl] * n + x
        if flag:
            r = r + 1
        r = r.to(dt).reshape(size)[ell]
        assert dev == t.device and none is None
        return r * tup[0] + lst[1] * dct["k"][0], s + "!", len(lst)

    args = (torch.randn(8), 3, 0.5, True, "hi", torch.float64, torch.device("cpu"), None,
            slice(0, 6), Ellipsis, torch.Size([2, 3]), (2.0, "a"),
            [torch.randn(2, 3), torch.randn(2, 3)], {"k": (torch.randn(3),)})
    jf = thunder_mlir.jit(f)
    assert_same_tree(jf(*args), f(*args))
    assert_same_tree(jf(*args), f(*args))
    assert thunder_mlir.cache_misses(jf) == 1 and thunder_mlir.cache_hits(jf) == 1


class TensorPair:  # state in slots: not an input object (plain objects are: test_pytree.py)
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


@pytest.mark.parametrize("call, path", [
    (lambda jf, tp: jf(tp), "args[0]"),
    (lambda jf, tp: jf(torch.ones(2), x=tp), "kwargs['x']"),
    (lambda jf, tp: jf([torch.ones(2), (1, tp)]), "args[0][1][1]"),
    (lambda jf, tp: jf(torch.ones(2), x={"p": tp}), "kwargs['x']['p']"),
])
def test_unsupported_input_is_value_error_naming_type_and_position(call, path):
    jf = thunder_mlir.jit(lambda a, x=None: a)
    tp = TensorPair(torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError) as e:
        call(jf, tp)
    assert isinstance(e.value, UnsupportedInputError)
    msg = str(e.value)
    assert (f"cannot accept an input of type {__name__}.TensorPair (at {path})") in msg, msg
    assert "Unpack the object into accepted values" in msg
    assert thunder_mlir.cache_misses(jf) == 0


# ------------------------------------------------------------------- foreign tensors
W_GLOBAL = torch.ones(2)


class Holder:
    def __init__(self):
        self.w = torch.full((3,), 2.0)


HOLDER = Holder()
LINEAR = torch.nn.Linear(3, 3)


def test_tensor_global_is_sharp_edge_error_naming_it():
    def f(a):
        return a * W_GLOBAL

    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    msg = str(e.value)
    assert f"{_where(f, 'a * W_GLOBAL')} return a * W_GLOBAL" in msg, msg
    assert ("the global 'W_GLOBAL', a tensor of shape (2,) that is not an input of the "
            "jitted function reaches torch.Tensor.mul") in msg
    assert "does not bake tensors into the program as constants: pass it as an argument" in msg


def test_tensor_closure_cell_is_sharp_edge_error_naming_it():
    w = torch.ones(2)

    def f(a):
        return a + w

    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    msg = str(e.value)
    assert f"{_where(f, 'a + w')} return a + w" in msg, msg
    assert "the closure variable 'w', a tensor of shape (2,)" in msg
    assert "reaches torch.Tensor.add" in msg


def test_tensor_attribute_of_non_input_object_is_sharp_edge_error_naming_it():
    def f(a):
        return a * HOLDER.w

    def g(a):
        return a @ LINEAR.weight.T

    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(f)(torch.ones(3))
    msg = str(e.value)
    assert f"{_where(f, 'HOLDER.w')} return a * HOLDER.w" in msg, msg
    assert "the attribute 'HOLDER.w' of global 'HOLDER', a tensor of shape (3,)" in msg
    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(g)(torch.ones(2, 3))
    assert "the attribute 'LINEAR.weight' of global 'LINEAR', a tensor of shape (3, 3)" \
        in str(e.value), str(e.value)


def test_unnamed_foreign_tensor_is_still_an_error():
    def make():  # a tensor created outside the trace and reached through a call
        return W_GLOBAL

    def f(a):
        return a + make()

    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    msg = str(e.value)
    assert _where(f, "a + make()") in msg
    assert "a tensor of shape (2,) that is not an input" in msg or \
        "the global 'W_GLOBAL'" in msg, msg


# ---------------------------------------------------------------- modifying inputs
def test_inplace_op_on_input_is_written_back_like_eager():
    def f(a, b):
        a.add_(b)
        a.mul_(2)
        return a + 1, b.sum()

    jf = thunder_mlir.jit(f)
    for _ in range(2):  # the write-back happens on cache hits too
        a, b = torch.randn(2, 3), torch.randn(2, 3)
        ea, eb = a.clone(), b.clone()
        out, expected = jf(a, b), f(ea, eb)
        assert_same_tree(out, expected)
        torch.testing.assert_close(a, ea, rtol=0, atol=0)  # the input changed as in eager
        torch.testing.assert_close(b, eb, rtol=0, atol=0)
    assert thunder_mlir.cache_misses(jf) == 1 and thunder_mlir.cache_hits(jf) == 1


def test_inplace_returning_the_input_and_dtype_cast():
    def f(a, n):
        a.mul_(n)  # float input * int: stays float32 as in eager
        return a

    jf = thunder_mlir.jit(f)
    a, ea = torch.randn(4), None
    ea = a.clone()
    out = jf(a, 3)
    f(ea, 3)
    torch.testing.assert_close(a, ea, rtol=0, atol=0)
    torch.testing.assert_close(out, ea, rtol=0, atol=0)
    assert out.dtype == torch.float32


def test_inplace_on_the_base_of_a_view_updates_the_view():
    def base_of_view(a):
        v = a.view(4)
        a.add_(1)
        return v

    a, ea = torch.zeros(2, 2), torch.zeros(2, 2)
    out, expected = thunder_mlir.jit(base_of_view)(a), base_of_view(ea)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, ea)
    assert out.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()  # a view of a


@pytest.mark.parametrize("body", ["view", "index"])
def test_inplace_on_view_of_input_writes_the_input_as_eager(body):
    """A write through a view of an input reaches the caller's tensor (functionalization:
    the input is written back after the run), and a returned view is eager's view of it."""
    def view(a):
        v = a.view(4)
        v.add_(1)
        return v

    def index(a):
        a[0].add_(1)
        return a

    fn = {"view": view, "index": index}[body]
    a, ea = torch.zeros(2, 2), torch.zeros(2, 2)
    out, expected = thunder_mlir.jit(fn)(a), fn(ea)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, ea)
    assert out.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()


@pytest.mark.parametrize("kind, method, fn", [
    ("list", "append", lambda l: l.append(1)),
    ("list", "__setitem__", lambda l: l.__setitem__(0, 1)),
    ("list", "__delitem__", lambda l: l.__delitem__(0)),
    ("list", "extend", lambda l: l.extend([1])),
    ("list", "pop", lambda l: l.pop()),
    ("dict", "__setitem__", lambda d: d.__setitem__("k", 1)),
    ("dict", "__delitem__", lambda d: d.__delitem__("a")),
    ("dict", "update", lambda d: d.update(k=1)),
    ("dict", "pop", lambda d: d.pop("a")),
])
def test_mutating_input_container_is_not_implemented(kind, method, fn):
    def f(c):
        first = c[0] if kind == "list" else c["a"]
        fn(c)
        return first * 2

    def g_list(l):  # the statement forms, with their own line
        l[0] = l[1]
        return l[0]

    container = [torch.ones(2), torch.ones(2)] if kind == "list" else {"a": torch.ones(2)}
    before = list(container) if kind == "list" else dict(container)
    with pytest.raises(NotImplementedError) as e:
        thunder_mlir.jit(f)(container)
    msg = str(e.value)
    assert f"the program modifies an input {kind} ({method}); thunder_mlir does not modify " \
           f"its inputs. Copy it first (e.g. {kind}(x))" in msg, msg
    assert f"{HERE}:" in msg  # the user's line (the lambda's, in the parametrize list)
    assert container == before if kind == "dict" else all(
        x is y for x, y in zip(container, before)) and len(container) == len(before)
    with pytest.raises(NotImplementedError) as e:
        thunder_mlir.jit(g_list)([torch.ones(2), torch.zeros(2)])
    assert f"{_where(g_list, 'l[0] = l[1]')} l[0] = l[1]" in str(e.value), str(e.value)


def test_del_on_input_list_and_dict_statement_forms():
    def f(l, d):
        del l[0]
        return l[0]

    def g(l, d):
        del d["a"]
        return l[0]

    for fn, what, frag in ((f, "list (__delitem__)", "del l[0]"),
                           (g, "dict (__delitem__)", 'del d["a"]')):
        with pytest.raises(NotImplementedError) as e:
            thunder_mlir.jit(fn)([torch.ones(2), torch.ones(2)], {"a": torch.ones(2)})
        assert f"{_where(fn, frag)} {frag}" in str(e.value)
        assert f"the program modifies an input {what}" in str(e.value)


def test_copy_of_input_container_can_be_modified():
    def f(l):
        l = list(l)
        l.append(l[0] * 2)
        return sum(l[1:], l[0])

    l = [torch.randn(3), torch.randn(3)]
    assert_same_tree(thunder_mlir.jit(f)(l), f(l))
    assert len(l) == 2


# ------------------------------------------------------------- non-functional calls
def _nf_random(a):
    return a + random.random()


def _nf_randint(a):
    return a + random.randint(0, 1000)


def _nf_time(a):
    return a + time.time()


def _nf_numpy(a):
    return a + float(np.random.rand())


def _nf_urandom(a):
    return a + os.urandom(1)[0]


NONFUNCTIONAL = [(_nf_random, "random.random()", "random.random()"),
                 (_nf_randint, "random.randint()", "random.randint(0, 1000)"),
                 (_nf_time, "time.time()", "time.time()"),
                 (_nf_numpy, "numpy.random.rand()", "np.random.rand()"),
                 (_nf_urandom, "os.urandom()", "os.urandom(1)")]


@pytest.mark.parametrize("fn, name, fragment", NONFUNCTIONAL, ids=lambda v: getattr(v, "__name__", None))
def test_nonfunctional_call_warn_is_default_and_says_constant_folded(fn, name, fragment):
    jf = thunder_mlir.jit(fn)
    a = torch.zeros(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        first = jf(a)
        second = jf(a)
    assert [x.category for x in w] == [SharpEdgeWarning]  # once, at trace time
    msg = str(w[0].message)
    assert msg.startswith(f"{os.path.abspath(__file__)}:{_line(fn, fragment)}: {name} is a "
                          "non-functional call: its value at trace time was constant-folded "
                          "into the compiled program and will not change between calls. "
                          "Pass the value as an input, or use jit(..., sharp_edges='allow') "
                          "to silence this."), msg
    assert os.path.basename(w[0].filename) == HERE  # attributed to the caller's line
    torch.testing.assert_close(first, second, rtol=0, atol=0)  # the folded constant
    assert thunder_mlir.cache_misses(jf) == 1


@pytest.mark.parametrize("fn, name, fragment", NONFUNCTIONAL, ids=lambda v: getattr(v, "__name__", None))
def test_nonfunctional_call_error_policy_raises(fn, name, fragment):
    jf = thunder_mlir.jit(fn, sharp_edges="error")
    with pytest.raises(SharpEdgeError) as e:
        jf(torch.zeros(2))
    assert str(e.value) == (f"{os.path.abspath(__file__)}:{_line(fn, fragment)}: {name} is a "
                            "non-functional call: its value at trace time was constant-folded "
                            "into the compiled program and will not change between calls "
                            "(sharp_edges='error'). Pass the value as an input.")
    assert thunder_mlir.cache_misses(jf) == 0


@pytest.mark.parametrize("fn, name, fragment", NONFUNCTIONAL, ids=lambda v: getattr(v, "__name__", None))
def test_nonfunctional_call_allow_policy_is_silent(fn, name, fragment):
    jf = thunder_mlir.jit(fn, sharp_edges="allow")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        first = jf(torch.zeros(2))
        second = jf(torch.zeros(2))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_print_is_allowed_under_error_policy(capsys):
    def f(a):
        print("tracing", a.shape)
        return a * 2

    out = thunder_mlir.jit(f, sharp_edges="error")(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 2.0))
    assert "tracing torch.Size([2])" in capsys.readouterr().out


def test_bad_policy_is_value_error():
    with pytest.raises(ValueError, match=r"sharp_edges must be one of \('allow', 'warn', "
                                         r"'error'\), got 'loud'"):
        thunder_mlir.jit(lambda a: a, sharp_edges="loud")


# ------------------------------------------------------------ closures and globals
def test_closure_over_signature_value_just_works():
    def foo(x):
        def bar():
            return x
        return bar()

    def scaled(x, s):
        def bar():
            return x * s
        return bar()

    jfoo, jscaled = thunder_mlir.jit(foo), thunder_mlir.jit(scaled)
    for _ in range(3):
        x = torch.randn(3)
        assert_same_tree(jfoo(x), foo(x))
        assert_same_tree(jscaled(x, 2.5), scaled(x, 2.5))
    for j in (jfoo, jscaled):
        info = thunder_mlir.cache_info(j)
        assert (info["misses"], info["hits"], info["guards"]) == (1, 2, [])


X = 5


def _reads_global(t):
    return t + X


def _reads_global_in_nested(t):
    def bar():
        return X
    return t * bar()


@pytest.mark.parametrize("fn", [_reads_global, _reads_global_in_nested])
def test_global_python_value_is_a_guard_and_change_retraces(fn):
    global X
    t = torch.ones(2)
    jf = thunder_mlir.jit(fn)
    try:
        assert_same_tree(jf(t), fn(t))
        X = 6
        out = jf(t)
        assert_same_tree(out, fn(t))  # the new value, not a stale 5
        assert torch.equal(out, fn(t)) and float(out[0]) in (7.0, 6.0)
        info = thunder_mlir.cache_info(jf)
        assert info["misses"] == 2
        assert info["recompile_reasons"] == ["global 'X' changed: 5 -> 6"]
        assert info["guards"] == ["global 'X'"]
        X = 5  # back to a value seen before: a cache hit
        assert_same_tree(jf(t), fn(t))
        assert thunder_mlir.cache_misses(jf) == 2 and thunder_mlir.cache_hits(jf) == 1
    finally:
        X = 5


def test_closure_cell_python_value_is_a_guard():
    def make():
        k = 2

        def f(t):
            return t * k

        def set_k(v):
            nonlocal k
            k = v
        return f, set_k

    f, set_k = make()
    jf = thunder_mlir.jit(f)
    t = torch.ones(2)
    assert torch.equal(jf(t), torch.full((2,), 2.0))
    set_k(3)
    assert torch.equal(jf(t), torch.full((2,), 3.0))
    info = thunder_mlir.cache_info(jf)
    assert info["misses"] == 2
    assert info["recompile_reasons"] == ["cell 'k' changed: 2 -> 3"]
    assert info["guards"] == ["cell 'k'"]


def test_deleted_global_fails_like_eager():
    global _DELETED
    _DELETED = 2

    def f(t):
        return t * _DELETED

    jf = thunder_mlir.jit(f)
    assert torch.equal(jf(torch.ones(2)), torch.full((2,), 2.0))
    del _DELETED
    with pytest.raises(NameError, match="name '_DELETED' is not defined"):
        jf(torch.ones(2))  # the guard sees the deletion: re-traced, fails as eager does


def test_nonlocal_del_inside_the_program_behaves_like_eager():
    def foo(t):  # the seed's example: bar deletes foo's local, then foo reads it
        a = 5

        def bar():
            nonlocal a
            del a
        bar()
        return t + a

    with pytest.raises(NameError) as eager:
        foo(torch.ones(2))
    with pytest.raises(NameError) as jitted:
        thunder_mlir.jit(foo)(torch.ones(2))
    assert type(jitted.value) is type(eager.value)
    assert str(jitted.value) == str(eager.value)


def test_nonlocal_assignment_inside_the_program_works():
    def foo(t):
        a = 5

        def bar():
            nonlocal a
            a = a + 1
        bar()
        return t + a

    t = torch.ones(2)
    assert_same_tree(thunder_mlir.jit(foo)(t), foo(t))


def test_del_of_outside_nonlocal_is_reported_and_undone():
    def make():
        a = 1

        def inner(t):
            nonlocal a
            del a
            return t
        return inner

    inner = make()
    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(inner)(torch.ones(2))
    assert str(e.value) == (
        f"{os.path.abspath(__file__)}:{_line(inner, 'del a')}: the program deletes nonlocal "
        "'a', a closure variable of a function defined outside the jitted call. thunder_mlir "
        "runs the compiled program without re-running Python, so the write would happen only "
        "once, at trace time (it has been undone). Return the value instead.")
    assert inner.__closure__[0].cell_contents == 1


def test_cell_mutated_by_the_program_is_reported_and_undone():
    def make():
        n = 0

        def step(t):
            nonlocal n
            n += 1
            return t + n
        return step

    step = make()
    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(step)(torch.ones(2))
    assert str(e.value).startswith(f"{os.path.abspath(__file__)}:{_line(step, 'n += 1')}: the "
                                   "program assigns nonlocal 'n', a closure variable of a "
                                   "function defined outside the jitted call.")
    assert step.__closure__[0].cell_contents == 0  # not incremented by the failed trace


def test_closure_reads_scan_the_heap_once_per_function(monkeypatch):
    """Finding which function a nested closure's frame runs (for its cells) scans the heap
    (gc.get_referrers: 0.1-0.4 s with op_db loaded): once per function and trace, not at
    each read of a captured variable (20 reads in a loop took 13 s on a loaded machine).
    The guard on the closure variable still works: a new value re-traces."""
    import gc

    calls = []
    real = gc.get_referrers
    monkeypatch.setattr(gc, "get_referrers", lambda *a: calls.append(a) or real(*a))

    def make():
        k = 3.0

        def inner(x):
            for _ in range(20):
                x = x * k
            return x
        return inner

    inner = make()
    jitted = thunder_mlir.jit(lambda x: inner(x))
    x = torch.full((2,), 1.1)
    assert torch.equal(jitted(x), inner(x))
    assert len(calls) == 1, len(calls)
    inner.__closure__[0].cell_contents = 2.0
    assert torch.equal(jitted(x), inner(x))


COUNTER = 0


def test_global_write_is_reported_and_undone():
    def f(t):
        global COUNTER
        COUNTER = COUNTER + 1
        return t

    with pytest.raises(SharpEdgeError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    assert str(e.value).startswith(
        f"{os.path.abspath(__file__)}:{_line(f, 'COUNTER = COUNTER + 1')}: the program assigns "
        "global 'COUNTER'.")
    assert COUNTER == 0


# ---------------------------------------------------------- data-dependent control flow
def test_data_dependent_control_flow_names_line_and_torch_cond():
    def f(x):
        if x.numpy().sum() > 0:
            return x
        return -x

    with pytest.raises(DataDependentControlFlowError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    assert str(e.value) == (
        f"{os.path.abspath(__file__)}:{_line(f, 'if x.numpy()')}: if x.numpy().sum() > 0:\n"
        "  tensor.numpy() needs the tensor's data, which is not known while tracing. Use tensor "
        "ops instead (torch.where, masking), or torch.cond for control flow that depends on "
        "tensor values.")


def test_data_dependent_item_inside_torch_cond_names_line():
    # an .item() is specialized and guarded at the top level (tests/test_data_dependent.py),
    # not inside a torch.cond branch, which runs inside one XLA program
    def branch(x):
        n = int(x.max().item())
        return x * n

    def f(x):
        return torch.cond(x.sum() > 0, branch, lambda x: x.clone(), (x,))

    with pytest.raises(DataDependentControlFlowError) as e:
        thunder_mlir.jit(f)(torch.ones(2))
    assert f"{_where(branch, 'x.max().item()')} n = int(x.max().item())" in str(e.value)
    assert "torch.cond" in str(e.value)


# ----------------------------------------------------------------- the user docs
def test_docs_examples(tmp_path):
    """Every ```python block of docs/sharp_edges.md runs (in order, one namespace), each
    compiled as its own file so the sharp-edge monitor treats it as user code."""
    import re

    doc = os.path.join(os.path.dirname(__file__), "..", "docs", "sharp_edges.md")
    blocks = re.findall(r"```python\n(.*?)```", open(doc).read(), flags=re.S)
    assert len(blocks) >= 10
    ns = {"__name__": "sharp_edges_doc", "_CAUGHT": []}
    expected_raises = sum(len(re.findall(r"^\s*except [\w.]+ as e:$", b, flags=re.M))
                          for b in blocks)
    for i, src in enumerate(blocks):
        # count the except clauses that run: every example's error must really be raised
        src = re.sub(r"^(\s*)(except [\w.]+ as e:)$", r"\1\2\n\1    _CAUGHT.append(1)", src,
                     flags=re.M)
        path = tmp_path / f"example_{i}.py"
        path.write_text(src)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(src, str(path), "exec"), ns)  # noqa: S102 - our own docs
    assert len(ns["_CAUGHT"]) == expected_raises >= 8


_GC_STAMP = [0.0]


def test_garbage_collector_callbacks_are_not_traced():
    """An automatic garbage collection runs ``gc.callbacks`` inside whichever frame
    allocates. During a trace such a callback (a memory profiler's: a timestamp into a
    global) is not the function's code: its global and its clock call are neither guarded
    nor reported, and the function compiles once (before, each call's new timestamp failed
    the guard on the callback's global, and every call recompiled)."""
    import gc

    def callback(phase, info):
        _GC_STAMP[0] = time.perf_counter()

    def f(x):
        parts = [x * k for k in range(1, 40)]  # (allocations: collections while tracing)
        return torch.stack(parts).sin().sum(0)

    threshold = gc.get_threshold()
    gc.set_threshold(1, 1, 1)  # a collection at nearly every allocation
    gc.callbacks.append(callback)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a sharp-edge or recompile warning fails
            jf = thunder_mlir.jit(f)
            for _ in range(4):
                x = torch.randn(5)
                torch.testing.assert_close(jf(x), f(x))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert _GC_STAMP[0] > 0, "the callback ran"
    assert thunder_mlir.cache_misses(jf) == 1, thunder_mlir.cache_info(jf)["recompile_reasons"]
