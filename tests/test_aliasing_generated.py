"""Issue 46: aliasing and mutation compared with eager PyTorch.

``test_generated_programs``: a fixed-seed sample (2,000 in CI; THUNDER_ALIASING_PROGRAMS=N
for another count) of the generator's programs of views x
in-place ops x input kinds (tests/aliasing_generator.py), each compared with eager on
outputs, inputs' final values, aliasing, ``requires_grad`` and gradients; no program may
differ. Refusals (a NotImplementedError naming the reason) are allowed and printed.

The focused tests are the issue's numbered silent differences and the refusals made to
run, each compared with eager.
"""

from __future__ import annotations

import os
import random
import re
import sys
import warnings

import pytest
import torch

import thunder_mlir

sys.path.insert(0, os.path.dirname(__file__))
import aliasing_generator as gen  # noqa: E402

J = thunder_mlir.jit


# programs in CI: issue 46's 2,000 (its "0 differences over at least 2,000 programs in
# CI"). Measured with a fresh compile cache, as CI has it, on this 2-core machine: 2,000
# cost 144 s (load 2-3) to 174-239 s (load 4-6) for about 140 s of CPU; 120 cost 9 s.
# About 2/3 is XLA's compile of each program's ~1.2 unique regions (forward, backward),
# which no other program shares (cProfile of 300: 19 of 31 s in compile_stablehlo).
# THUNDER_ALIASING_PROGRAMS=N runs another count of the same stream
CI_PROGRAMS = 2000


def test_generated_programs(capsys):
    n = int(os.environ.get("THUNDER_ALIASING_PROGRAMS", CI_PROGRAMS))
    rng = random.Random(0)
    counts: dict[str, int] = {}
    different = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(n):
            program = gen.generate(rng, i)
            verdict = gen.compare(program, seed=i)
            key = verdict if not verdict.startswith("different") else "different"
            counts[key] = counts.get(key, 0) + 1
            if key == "different":
                different.append(f"{program.name}\n{program.source}{verdict[:400]}")
    with capsys.disabled():
        print(f"\naliasing generator, {n} programs: {counts}")
        if n < 2000:
            print(f"  (skipped programs {n}..1999 of issue 46's 2,000, about 0.07 s each; "
                  "set THUNDER_ALIASING_PROGRAMS=2000 to run them)")
    assert not different, "\n\n".join(different)


def _same(a, e):
    return a.shape == e.shape and torch.allclose(a.detach(), e.detach())


def test_issue_1_write_through_as_strided():
    def f(x):
        x.as_strided((2,), (2,), 1).add_(1)
        return x
    xe, xa = torch.ones(9), torch.ones(9)
    assert _same(J(f)(xa), f(xe)) and _same(xa, xe)


def test_as_strided_of_a_computed_tensor_and_of_an_input_view():
    def f(x0):
        t = x0.clone()
        v = t.as_strided((2, 2), (1, 3), 1)
        v.mul_(2)
        return t, v
    base = torch.arange(60.).reshape(10, 6)
    jf = J(f)
    for x in (base[:4], base[1:5]):  # (the second: the same entry, an input at offset 6)
        for a, e in zip(jf(x), f(x)):
            assert _same(a, e)

    def g(x):
        x.as_strided((2,), (2,), 1).add_(1)
        return x
    with pytest.raises(NotImplementedError, match="storage offset"):
        J(g)(torch.ones(12)[2:11])


def test_multi_output_view_read_after_its_base_joined_the_graph_raises_as_eager():
    # generator program 748 of seed 0 (found at THUNDER_ALIASING_PROGRAMS=2000): a chunk of
    # a tensor without grad, the tensor then written with a value that requires grad, and
    # the chunk read by `v[...]` (a new view in eager, the proxy itself in the trace):
    # eager raises "A view was created in no_grad mode and its base ... modified inplace
    # with grad mode enabled"; the jit returned
    def f(x0, x1):
        t = x0 * 2
        v = t.chunk(2, 1)[0]
        t.add_(x1.sum())
        return v[...], t

    x1 = torch.randn(4, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified inplace with grad mode enabled") as e:
        f(torch.randn(4, 4), x1)
    with pytest.raises(RuntimeError, match=re.escape(str(e.value).splitlines()[0][:80])):
        J(f)(torch.randn(4, 4), x1)


def test_issue_2_outputs_that_alias_each_other():
    def f(a):
        out = a * 3
        return *out.unbind(0), out
    e = f(torch.ones(3, 3, requires_grad=True))
    o = J(f)(torch.ones(3, 3, requires_grad=True))
    with torch.no_grad():
        e[-1].mul_(2)
        o[-1].mul_(2)
    for a, b in zip(o, e):
        assert _same(a, b)
    assert o[0]._base is o[-1]._base or o[0]._base is o[-1]


def test_issue_3_inplace_view_ops_on_intermediates():
    def f(a):
        out = a * 3
        v = out.unsqueeze(0)
        out.t_()
        return v, out, out.unsqueeze(0)

    def g(a):
        out = a * 3
        out.t_()
        out.detach_()
        return out
    x = torch.randn(2, 4)
    for a, b in zip(J(f)(x), f(x)):
        assert _same(a, b)
    xr = x.clone().requires_grad_()
    a, b = J(g)(xr), g(xr)
    assert _same(a, b) and a.requires_grad == b.requires_grad


def test_issue_4_requires_grad_through_an_input_write():
    def f(x, y):
        return x.add_(y)
    xe, ye = torch.ones(2, 3), torch.ones(2, 3, requires_grad=True)
    xa, ya = torch.ones(2, 3), torch.ones(2, 3, requires_grad=True)
    oe, oa = f(xe, ye), J(f)(xa, ya)
    assert oa.requires_grad and xa.requires_grad and xa.grad_fn is not None
    (oe * 2).sum().backward()
    (oa * 2).sum().backward()
    assert _same(ya.grad, ye.grad)


def test_issue_5_conj_bit():
    x = torch.randn(3, dtype=torch.complex64)
    assert J(lambda x: x.conj().is_conj())(x) is True
    assert J(lambda x: x.is_conj())(x) is False


def test_issue_6_mutable_op_given_one_tensor_for_all_arguments():
    def f(x):
        return torch._fused_moving_avg_obs_fq_helper(x, x, x, x, x, x, x, 1.0, 0, 1, 0)
    xe, xa = torch.ones(1), torch.ones(1)
    e, a = f(xe), J(f)(xa)
    for u, v in zip(a, e):
        assert _same(u, v)
    assert _same(xa, xe)


@pytest.mark.parametrize("view_input", [False, True])
def test_write_to_a_non_leaf_input_that_requires_grad(view_input):
    """Refused before issue 46: eager runs it, the caller's tensor gets a grad_fn."""
    def f(a):
        a.mul_(2)
        return a + 1
    le = torch.randn(4, 3, requires_grad=True)
    la = le.detach().clone().requires_grad_()
    be, ba = le.clone(), la.clone()
    ae, aa = (be[1:], ba[1:]) if view_input else (be, ba)
    oe, oa = f(ae), J(f)(aa)
    assert _same(oa, oe) and _same(aa, ae) and aa.grad_fn is not None
    (oe.sum() + (be * 3).sum()).backward()
    (oa.sum() + (ba * 3).sum()).backward()
    assert _same(la.grad, le.grad)


def test_write_to_a_leaf_view_is_eagers_error():
    def f(x):
        x[0].mul_(2)
        return x
    leaf = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        f(leaf[1:])
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        J(f)(leaf[1:])


def test_fill_of_an_expanded_view_and_write_through_detach():
    def f(x):
        t = x * 2
        t[0].expand(2, -1).zero_()
        d = t.detach()
        d[1].fill_(3)
        return t
    xe = torch.randn(3, 4, requires_grad=True)
    xa = xe.detach().clone().requires_grad_()
    with torch.no_grad():
        assert _same(J(f)(xa.detach()), f(xe.detach()))
    oe, oa = f(xe), None
    with pytest.raises(NotImplementedError, match="share"):  # eager raises at the backward
        oa = J(f)(xa)
    assert oa is None and oe is not None


def test_eager_errors_of_views():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        J(lambda x: (x * 2)[:, 1:3].view(-1))(torch.ones(4, 6))
    with pytest.raises(RuntimeError, match=r"t_\(\) expects a tensor with <= 2 dimensions"):
        J(lambda x: (x * 2).unsqueeze(0).t_())(torch.ones(2, 3))


def test_multi_output_view_used_after_its_base_was_written():
    def f(x):
        t = x * 1
        v = t.split(2)[1]
        t.squeeze_()  # an in-place op for eager's version counter, as t.add_(1) is
        return v * 2

    def g(x):
        t = x * 1
        v = t.chunk(2, 1)[0]
        t.zero_()
        return t + 1, v
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Output 1 of Split is a view"):
        f(x)
    with pytest.raises(RuntimeError, match="Output 1 of Split is a view"):
        J(f)(x)
    with torch.no_grad():  # (no grad: eager runs it)
        assert _same(J(f)(x), f(x))
    oe, oa = g(x), J(g)(x)  # eager's backward through v raises
    for o in (oe, oa):
        with pytest.raises(RuntimeError, match="Output 0 of Split is a view"):
            (o[0].sum() + o[1].sum()).backward()


@pytest.mark.parametrize("use", [
    lambda v: v.diagonal(),  # generator program 1966 of seed 0 (1-D v: diagonal's IndexError)
    lambda v: v.sum(5),  # (a reduction's dimension check)
    lambda v: v + torch.ones(3),  # (a broadcast check)
    lambda v: v.flatten(3),  # composite: flatten's own IndexError comes first in eager
    lambda v: v * 2,  # (no argument error: the rebased-view error)
], ids=["diagonal", "sum", "add", "flatten", "mul"])
def test_rebased_multi_output_view_error_comes_in_eagers_order(use):
    # eager's autograd kernel reads the view's grad_fn (the rebased-view RuntimeError)
    # before its kernel checks the arguments; a composite op checks them first
    def f(x0):
        t = x0.clone()
        v = t.unbind(0)[1]
        t[0] = 7
        return use(v)

    x = torch.randn(4, 4, requires_grad=True)
    with pytest.raises((RuntimeError, IndexError)) as e:
        f(x)
    with pytest.raises(type(e.value), match=re.escape(str(e.value).splitlines()[0][:60])):
        J(f)(x)


@pytest.mark.parametrize("write", ["x[1:].add_(w)", "x[1:].mul_(w * 2)", "x[:, 3:].copy_(w.expand(1, 0))"])
def test_write_with_grad_into_an_empty_view_gives_a_zero_gradient(write):
    # generate_aliased's difference: no element is written, yet eager's graph reads the
    # value (the op's node under the base's CopySlices): w.grad is tensor(0.), not None
    ns = {"torch": torch}
    exec(f"def f(x, w):\n    {write}\n    return x * 1\n", ns)  # noqa: S102 - the table's
    f = ns["f"]
    for x_grad in (False, True):
        grads = []
        for fn in (f, J(f)):
            x = torch.randn(1, 3, requires_grad=x_grad)
            w = torch.randn((), requires_grad=True)
            out = fn(x.clone() if x_grad else x, w)
            out.sum().backward()
            grads.append((w.grad, x.grad if x_grad else None))  # (x written: no leaf)
        (we, xe), (wa, xa) = grads
        assert (wa is None) == (we is None) and (xa is None) == (xe is None)
        assert _same(wa, we) and (xe is None or _same(xa, xe))


def test_as_strided_of_a_clone_of_an_input_that_requires_grad_is_no_view_of_the_input():
    # seeds 11, 20, 24's difference: the clone folds to the input's value, and as_strided
    # (a torch call on the buffer it is given) returned a view of the caller's tensor when
    # the grad pass rebuilt the call without its thunder.storage mark: a write into the
    # output changed the input
    def f(x0):
        t = x0.clone()
        return t.as_strided((2, 2), (1, 3), 1),

    x = torch.randn(4, 6, requires_grad=True)
    xa = x.detach().clone().requires_grad_()
    e, a = f(x)[0], J(f)(xa)[0]
    assert _same(a, e) and a.requires_grad
    assert a.untyped_storage().data_ptr() != xa.untyped_storage().data_ptr()
    (e * torch.arange(4.).view(2, 2)).sum().backward()
    (a * torch.arange(4.).view(2, 2)).sum().backward()
    assert _same(xa.grad, x.grad)
    with torch.no_grad():
        a.add_(100)
    assert _same(xa, x)


def test_as_strided_of_a_view_reads_its_base_storage():
    def f(x0):
        t = x0.clone()
        v = t.t()
        v.copy_(torch.full_like(v, 5))
        w = v.as_strided((2, 2), (1, 3), 1)
        return v, v * 2, w
    x = torch.arange(24.).reshape(4, 6)
    e, a = f(x.clone()), J(f)(x.clone())
    assert a[0]._base is not None and a[2]._base is a[0]._base  # views of one hidden base
    with torch.no_grad():
        for k, (u, v) in enumerate(zip(a, e)):
            u.add_(k + 10)
            v.add_(k + 10)
    for u, v in zip(a, e):
        assert _same(u, v)


@pytest.mark.parametrize("chain", ["t", "transpose_reshape", "slice"])
def test_a_views_strides_are_eagers_and_as_strided_reads_them(chain):
    """A view reports eager's strides, offset and contiguity (its chain replayed on its
    root), so ``as_strided`` with strides the program read (Longformer's overlapping
    chunks: ``x.stride()`` with one stride halved) or wrote down reads what eager reads."""
    views = {"t": lambda t: t.t(),
             "transpose_reshape": lambda t: t.view(4, 2, 3).transpose(0, 1).reshape(2, 12)
             .view(2, 3, 4),
             "slice": lambda t: t[1:, 2:]}

    def f(x0):
        v = views[chain](x0 * 1)
        s = list(v.stride())
        chunks = v.as_strided((2,) * v.ndim, [max(n // 2, 1) for n in s])
        fixed = v.as_strided((2, 2), (1, 3), 1)
        return chunks * 1, fixed * 1, torch.tensor(s + [v.storage_offset(),
                                                       int(v.is_contiguous())])
    x = torch.arange(24.).reshape(4, 6)
    for u, e in zip(J(f)(x), f(x)):
        assert torch.equal(u, e), (u, e)


def test_detach_of_a_base_keeps_its_views_and_of_a_caller_view_raises():
    def f(x):
        t = x * 2
        v = t.view_as(t)
        t.detach_()
        return v * 2, t + 1
    x = torch.randn(3, 4, requires_grad=True)
    for a, e in zip(J(f)(x), f(x)):
        assert _same(a, e) and a.requires_grad == e.requires_grad

    def g(x):
        x.detach_()
        return x + 1
    base = torch.randn(6, 4)
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        g(base[1:3])
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        J(g)(base[1:3])


def test_eager_shape_errors_found_by_the_generator():
    """``t()`` of a 3-D view made by ``unfold``, ``unfold`` wider than its dim: eager's
    RuntimeErrors (``x.T`` still reverses every dim); an op's own argument error comes
    before the error of a view rebased by an in-place write."""
    def f(x):
        return (x * 2).unfold(0, 2, 2).t()

    def g(x):
        return (x * 2).unsqueeze(0).unfold(0, 2, 2)

    def h(x):
        t = x.clone()
        v = t.unbind(0)[1]
        t.mul_(2)
        return v.chunk(2, 1)[0]
    x = torch.ones(4, 6)
    with pytest.raises(RuntimeError, match=r"t\(\) expects a tensor with <= 2 dimensions"):
        J(f)(x)
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 0 is 1"):
        J(g)(x)
    with pytest.raises(IndexError, match="Dimension out of range"):
        h(x.requires_grad_())
    with pytest.raises(IndexError, match="Dimension out of range"):
        J(h)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.randn(2, 3, 4)
        assert torch.equal(J(lambda y: y.T * 1)(y), y.T)


def test_out_argument_computes_then_writes():
    """``out=``: computed, then written into ``out`` (refused in issue 46's survey)."""
    def f(x, y, z):
        torch.add(x, y, out=z)
        return z * 2

    def g(x):
        a, b = torch.empty(()), torch.empty(())
        r = torch.aminmax(x, out=(a, b))
        return a, b, r.min

    def h(x):
        t = x.clone()
        v = t[0]
        torch.add(t, 1, out=t)
        o = torch.empty(8)
        torch.cat([x.flatten(), x.flatten()], out=o)
        return v, o
    ze, za = torch.zeros(2), torch.zeros(2)
    assert _same(J(f)(torch.ones(2), torch.ones(2), za), f(torch.ones(2), torch.ones(2), ze))
    assert _same(za, ze)
    x = torch.arange(4.)
    for a, e in zip(J(g)(x), g(x)):
        assert _same(a, e)
    x = torch.arange(4.).reshape(2, 2)
    for a, e in zip(J(h)(x), h(x)):
        assert _same(a, e)
    with pytest.raises(RuntimeError, match="functions with out=... arguments don't support"):
        J(f)(torch.ones(2, requires_grad=True), torch.ones(2), torch.zeros(2))
    with pytest.raises(NotImplementedError, match="eager resizes"):
        J(f)(torch.ones(2), torch.ones(2), torch.zeros(3))


def test_resize_runs_where_eager_is_defined_and_is_refused_elsewhere():
    def smaller(x):
        return (x * 2).resize_(2)

    def same(x):
        return x.resize_(3) + 1
    x = torch.arange(3.)
    assert _same(J(smaller)(x), smaller(x.clone()))
    assert _same(J(same)(x.clone()), same(x.clone()))
    with pytest.raises(NotImplementedError, match="resize_ of an input"):
        J(lambda x: x.resize_(6))(torch.ones(3))
    with pytest.raises(NotImplementedError, match="resize_ to more elements"):
        J(lambda x: (x * 1).resize_as_(torch.ones(5)))(torch.ones(3))


def test_as_strided_output_of_a_written_input_view_is_refused_before_the_run():
    """Generator seed 5, program 109: an output ``t.as_strided(t.shape, t.stride(),
    t.storage_offset())`` of an input written through another view. The traced geometry
    reads the input as dense at offset 0; on the caller's view ``base[1:5]`` the returned
    view addressed the base's row 0 (a silent wrong value). Refused before anything is
    written, as the fallback's as_strided of such an input is; a dense input runs."""
    def f(x0):
        v = x0.reshape(2, -1)
        torch.add(v, 1, out=v)
        w = x0.as_strided(x0.shape, x0.stride(), x0.storage_offset())
        v.add_(1)
        return v, w
    base = torch.zeros(6, 4)
    with pytest.raises(NotImplementedError, match="as_strided view of an input"):
        J(f)(base[1:5])
    assert torch.equal(base, torch.zeros(6, 4))  # nothing written
    xe, xa = torch.randn(4, 4), None
    xa = xe.clone()
    (ve, we), (va, wa) = f(xe), J(f)(xa)
    assert _same(va, ve) and _same(wa, we) and _same(xa, xe)
    assert wa._base is xa and wa.storage_offset() == we.storage_offset()


def test_residual_view_of_a_written_input_is_saved_as_it_was():
    """Generator seeds 4 and 6 (programs 24, 127, 65): an ``as_strided`` view of a non-leaf
    input, written in place. The forward saved the view of the input (made in the
    Function's no-grad forward) for the backward; the write-back into the input then made
    the backward raise "A view was created in no_grad mode ..." where eager runs. A saved
    view of a written input is now copied as it was, as the input itself is."""
    def f(x0):
        v = x0.as_strided((2, 2), (1, 3), 1)
        v.sin_()
        w = x0[:, 1:3]
        return w, v

    le = torch.randn(4, 6, requires_grad=True)
    la = le.detach().clone().requires_grad_()
    xe, xa = le.clone(), la.clone()
    oe, oa = f(xe), J(f)(xa)
    for a, e in zip(oa, oe):
        assert _same(a, e)
    assert _same(xa, xe)
    sum((t * (k + 1)).sum() for k, t in enumerate([*oe, xe])).backward()
    sum((t * (k + 1)).sum() for k, t in enumerate([*oa, xa])).backward()
    assert _same(la.grad, le.grad)


def test_detach_in_place_then_a_write_through_an_earlier_view():
    """Generator seed 6 program 106: after ``t.detach_()`` the view made before it still
    requires grad and its base is a leaf: eager's in-place op on it raises "a view of a
    leaf Variable that requires grad is being used in an in-place operation"; the jit
    returned. Without grad both run."""
    def f(x0):
        t = x0.clone()
        v = t.as_strided(t.shape, t.stride(), t.storage_offset())
        t.detach_()
        v.add_(1)
        return t

    x = torch.randn(4, 6, requires_grad=True)
    for fn in (f, J(f)):
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires"):
            fn(x.clone())
    y = torch.randn(4, 6)
    assert _same(J(f)(y), f(y))


def test_output_view_of_a_tensor_detached_in_place_is_refused():
    """Generator seed 6 program 115: ``v = t.view(-1); t.detach_()``, both returned. Eager's
    ``v`` keeps its autograd history while sharing the detached ``t``'s memory; the jit
    returned ``v`` without ``requires_grad``. Refused with the reason; without grad (or
    with the view made after the detach) it runs as eager."""
    def f(x0):
        t = x0.clone()
        v = t.view(-1)
        t.detach_()
        return t, t + 1, v

    def g(x0):
        t = x0.clone()
        t.detach_()
        v = t.view(-1)
        return t, t + 1, v

    x = torch.randn(4, 6, requires_grad=True)
    assert f(x)[2].requires_grad
    with pytest.raises(NotImplementedError, match="detach_"):
        J(f)(x)
    y = torch.randn(4, 6)
    for fn, arg in ((f, y), (g, x)):
        oa, oe = J(fn)(arg), fn(arg)
        for a, e in zip(oa, oe):
            assert _same(a, e) and a.requires_grad == e.requires_grad
        assert oa[2]._base is oa[0]


def test_detach_view_does_not_require_grad_after_its_base_is_rewritten():
    """Generator seed 6 program 149: ``v = t.detach(); t.unsqueeze_(0)``: the in-place view
    op counts as a write into ``t``, which made every view of ``t`` require grad, ``v``
    (a detach() view: memory shared, autograd history not) included. Eager's ``v`` does
    not require grad, also after ``t.mul_(w)`` with ``w`` requiring grad."""
    def f(x0):
        t = x0 * 2
        v = t.detach()
        t.unsqueeze_(0)
        return v

    def g(x0, w):
        t = x0 * 1
        v = t.detach()
        t.mul_(w)
        return v, t

    x = torch.randn(4, 6, requires_grad=True)
    a, e = J(f)(x), f(x)
    assert _same(a, e) and not a.requires_grad and not e.requires_grad
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)
    for a, e in zip(J(g)(x, w), g(x, w)):
        assert _same(a, e) and a.requires_grad == e.requires_grad


def test_view_keeps_requires_grad_after_its_base_is_detached_in_place_and_written():
    """docs/sharp_edges.md's known difference: ``v = t[1]; t.detach_(); t.add_(1)``: eager
    regenerates ``v``'s grad_fn at the write (it had one), reaching nothing: ``v`` requires
    grad and its backward gives ``x`` no gradient. The jit's ``v`` did not require grad."""
    def f(x0):
        t = x0 * 2
        v = t[1]
        t.detach_()
        t.add_(1)
        return v, v * 2, x0 * 3  # (v * 2: generator seed 11 program 6, v's twin kept)

    x = torch.randn(4, 6, requires_grad=True)
    xa = x.detach().clone().requires_grad_()
    e, a = f(x), J(f)(xa)
    for s, t in zip(a, e):
        assert _same(s, t) and s.requires_grad and t.requires_grad
    for outs in (e, a):
        sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
    assert _same(xa.grad, x.grad)


_RESTRIDE_ORDER = {  # (views of an input and its in-place view ops, in eager's order)
    "made_after": "v = x0.view(-1)\n    x0.squeeze_()\n    w = v.unbind(0)[1]\n"
                  "    return w,",
    "made_before": "w = x0.unbind(0)[1]\n    x0.squeeze_()\n    return w,",
    "of_an_output": "v = x0.view(-1)\n    x0.t_()\n    w = v.unbind(0)[1]\n"
                    "    return w, v, x0",
    "split": "v = x0[1:]\n    x0.unsqueeze_(0)\n    w = v.split(1)[1]\n    return w, x0",
}


@pytest.mark.parametrize("body", list(_RESTRIDE_ORDER.values()), ids=list(_RESTRIDE_ORDER))
def test_output_views_are_made_in_eagers_order_around_an_in_place_view_op(body):
    # docs/sharp_edges.md's known difference (generator seed 14 program 108): a
    # multi-output view made from an input's earlier view *after* the input's squeeze_()
    # was made by the runtime before it replayed squeeze_() on the caller's tensor, so
    # its backward raised eager's "Output 1 of Unbind ..." where eager's does not; one
    # made before it (made_before) raises in both
    ns = {"torch": torch}
    exec(f"def f(x0):\n    {body}\n", ns)  # noqa: S102 - the table's
    f = ns["f"]
    results, x0 = [], torch.randn(4, 6)
    for fn in (f, J(f)):
        x = x0.clone().requires_grad_()
        outs = fn(x.clone())
        try:
            sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
            results.append((outs, x.grad))
        except RuntimeError as e:
            results.append((outs, str(e)[:60]))
    (eo, eg), (ao, ag) = results
    for a, e in zip(ao, eo):
        assert _same(a, e) and (a.stride(), a.storage_offset()) == (e.stride(),
                                                                     e.storage_offset())
    assert type(ag) is type(eg) and (ag == eg if isinstance(eg, str) else True)


def test_write_through_as_strided_of_a_view_addresses_the_root_storage():
    # generator seed 27 program 105 (x0 = b[1:5], x1 = b[3:7]: a synthetic base): an
    # as_strided view of an intermediate view is at a storage offset of the root, not of
    # the view; the write went step by step, into b[1] instead of b[0]
    def f(b):
        v = b[1:5].as_strided((2, 2), (1, 3), 1)
        v.copy_(torch.full_like(v, 5))
        return v,

    def g(b):
        t = b * 1
        v = t[1:5].as_strided((2, 2), (1, 3), 1)
        v.mul_(2)
        return v, t

    def h(x0, x1):
        v = x0.as_strided((2, 2), (1, 3), 1)
        v.copy_(torch.full_like(v, 5))
        return v,

    for fn, n in ((f, 1), (g, 1), (h, 2)):
        be, ba = torch.arange(60.).reshape(10, 6), torch.arange(60.).reshape(10, 6)
        args_e = (be,) if n == 1 else (be[1:5], be[3:7])
        args_a = (ba,) if n == 1 else (ba[1:5], ba[3:7])
        for a, e in zip(J(fn)(*args_a), fn(*args_e)):
            assert _same(a, e)
        assert _same(ba, be)


def test_permute_argument_errors_are_eagers():
    """Generator seed 0 program 180: ``permute`` with a wrong number of dims (a view made
    before ``unsqueeze``) raised a ValueError from the transpose prim; eager raises
    RuntimeError (and for duplicate dims too)."""
    x = torch.randn(2, 3, 4)
    for dims, error in (((1, 0), "number of dimensions"), ((0, 0, 1), "duplicate dims")):
        with pytest.raises(RuntimeError, match=error):
            x.permute(*dims)
        with pytest.raises(RuntimeError, match=error):
            J(lambda x: x.permute(*dims))(x)


def test_narrow_and_flatten_as_eager():
    """Generator seeds 11-13: ``narrow`` past the end raised a ValueError from the slice
    prim (eager: RuntimeError, IndexError for the start); seed 12 program 66: ``flatten``
    of a 1-D multi-output view whose base was written raised eager's backward error in the
    forward: eager's flatten returns the tensor itself there (no node reads its grad_fn)."""
    x = torch.randn(3, 4)
    for args, error in (((1, 1, 4), RuntimeError), ((1, -1, 2), RuntimeError),
                        ((1, 5, 0), IndexError), ((1, 2, -1), RuntimeError)):
        with pytest.raises(error):
            x.narrow(*args)
        with pytest.raises(error):
            J(lambda x: x.narrow(*args))(x)
    for args in ((1, 4, 0), (1, -4, 4), (1, -1, 1)):
        assert torch.equal(J(lambda x: x.narrow(*args))(x), x.narrow(*args))

    def f(x0):
        t = x0 * 2
        v = t.unbind(0)[1]
        t.add_(1)
        w = v.flatten()
        return v, w

    x = torch.randn(4, 6, requires_grad=True)
    oe, oa = f(x), J(f)(x)
    assert oe[1] is oe[0] and oa[1] is oa[0] and _same(oa[0], oe[0])
    for o in (oe, oa):
        with pytest.raises(RuntimeError, match="Output 1 of Unbind is a view"):
            (o[0] * 1).sum().backward()


def test_write_with_grad_into_a_detached_view_is_refused():
    """Generator seeds 9-13: ``v = t.detach(); v.add_(y)`` with ``y`` requiring grad: eager
    gives ``v`` a history of its own while ``t`` keeps its history with the new values;
    the jit sent ``y``'s gradient through ``t`` (or lost ``v``'s requires_grad). Refused;
    without grad it runs."""
    def f(x0, x1):
        t = x0 * 2
        v = t.detach()
        v.add_(x1.sum())
        return t + 1, v * 2

    x, y = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    with pytest.raises(NotImplementedError, match="detach"):
        J(f)(x, y)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    for a, e in zip(J(f)(x, y), f(x, y)):
        assert _same(a, e) and not a.requires_grad


def test_as_strided_of_a_view_gives_gradient_to_the_views_elements_alone():
    """Generator seed 11 program 28: ``t.diagonal().as_strided((2, 2), (1, 3), 1)`` reads
    storage outside the diagonal; eager's backward gives those elements no gradient (it
    scatters into the view's geometry), the jit gave them the output's gradient. Now eager's
    gradient for a computed base; refused for a view of an input (the same as_strided of
    the input itself runs)."""
    def f(x0, write):
        t = x0 * 2
        v = t.diagonal()
        if write:
            v.add_(1)
        return v.as_strided((2, 2), (1, 3), 1), v.as_strided((2,), (7,), 0)

    for write in (False, True):
        xe = torch.randn(4, 6, requires_grad=True)
        xa = xe.detach().clone().requires_grad_()
        oe, oa = f(xe, write), J(f)(xa, write)
        for a, e in zip(oa, oe):
            assert _same(a, e)
        sum((o * (k + 1)).sum() for k, o in enumerate(oe)).backward()
        sum((o * (k + 1)).sum() for k, o in enumerate(oa)).backward()
        assert _same(xa.grad, xe.grad)
    x = torch.randn(4, 6, requires_grad=True)
    with pytest.raises(NotImplementedError, match="as_strided of a view of an input"):
        J(lambda x: x.diagonal().as_strided((2, 2), (1, 3), 1) * 1)(x)
    assert _same(J(lambda x: x.as_strided((2, 2), (1, 3), 1) * 1)(x),
                 x.as_strided((2, 2), (1, 3), 1))


# ------------------------------------------- inputs that share memory: synthetic bases
# aliased-input programs in CI (generate_aliased): about 0.5 s each (two compilations:
# the traced program, then the synthetic one); THUNDER_ALIASED_PROGRAMS=N runs more
CI_ALIASED_PROGRAMS = 12


def test_generated_aliased_input_programs(capsys):
    """Two inputs that are views of one base (overlapping, the same object, equal views,
    interleaved, apart, a tensor and its row, a ``.detach()`` alias; the base without grad,
    a leaf or a non-leaf that requires grad, a caller's view), written through one or the
    other: every program runs as eager (synthetic_bases.py), or raises eager's error, or is
    refused with the reason. THUNDER_ALIASED_PROGRAMS=N runs more."""
    n = int(os.environ.get("THUNDER_ALIASED_PROGRAMS", CI_ALIASED_PROGRAMS))
    rng = random.Random(0)
    counts: dict[str, int] = {}
    different = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(n):
            program = gen.generate_aliased(rng, i)
            verdict = gen.compare(program, seed=i)
            key = verdict if not verdict.startswith("different") else "different"
            counts[key] = counts.get(key, 0) + 1
            if key == "different":
                different.append(f"{program.name}\n{program.source}{verdict[:400]}")
    with capsys.disabled():
        print(f"\naliased-input generator, {n} programs: {counts}")
    assert not different, "\n\n".join(different)
    assert counts.get("pass", 0) >= n // 2, counts  # (not refused wholesale)


def _aliased(source: str, base: str, relation: str, wgrad: bool = False):
    """A generator program (``generate_aliased``'s inputs) with the given source."""
    rel = next(r for r in gen.RELATIONS if r[0] == relation)
    return gen.Program(source, ("aliased", base, rel, wgrad), (8, 4), f"{relation}_{base}")


@pytest.mark.parametrize("relation,base", [
    ("overlap", "nograd"), ("same", "nonleaf"), ("transposed", "view")])
def test_written_aliased_inputs_run_as_eager(relation, base):
    """Writes through one input read through the other, outputs that are an input, a view
    of one and values of both, a value that requires grad written (non-leaf base: the
    caller's base gets eager's CopySlices history and gradient): compared with eager on
    outputs, inputs, aliasing, requires_grad, gradients and updates of the outputs."""
    source = ("def f(x0, x1, w):\n    v = x0[1]\n    x1.mul_(w)\n    x0[1:] += 1\n"
              "    return x0, x1[0], x0 * 2 + x1.sum(), v\n")
    assert gen.compare(_aliased(source, base, relation, wgrad=True)) == "pass"


def test_write_under_no_grad_through_views_of_a_leaf():
    """A leaf's views as inputs, written under no_grad() (an optimizer's update) and read
    after: eager's gradient flows to the leaf through every read. The view of an input
    was refreshed under no_grad() and lost its gradient (also without aliasing: the second
    program); a no_grad() write then a write in grad mode is eager's leaf error."""
    source = ("def f(x0, x1, w):\n    v = x0[1]\n    with torch.no_grad():\n"
              "        x1.mul_(2)\n    return x0 * 2 + x1.sum(), v * 3, x1[0]\n")
    for relation in ("overlap", "row", "same"):
        assert gen.compare(_aliased(source, "leaf", relation)) == "pass"
    src2 = ("def f(x0, x1, w):\n    v = x0[1:]\n    with torch.no_grad():\n"
            "        v.mul_(2)\n    return v * 3\n")
    assert gen.compare(_aliased(src2, "leaf", "apart")) == "pass"
    src3 = ("def f(x0, x1, w):\n    with torch.no_grad():\n        x0.add_(1)\n"
            "    x0.mul_(2)\n    return x0 * 3\n")
    for relation in ("apart", "overlap"):
        assert gen.compare(_aliased(src3, "leaf", relation)) == "eager error"


def test_grad_write_then_setitem_of_a_view_keeps_the_history():
    """``x.mul_(w); x[1:] += 1; return x`` on a view of a non-leaf: the ``__setitem__`` that
    stores ``x[1:]`` back was taken for an op eager runs on a leaf (its replay wrote the
    view, not the leaf), so the write-back dropped the history: ``w.grad`` was None."""
    source = ("def f(x0, x1, w):\n    x0.mul_(w)\n    x0[1:] += 1\n    return x0\n")
    assert gen.compare(_aliased(source, "nonleaf", "apart", wgrad=True)) == "pass"
    src2 = ("def f(x0, x1, w):\n    x0.add_(w)\n    with torch.no_grad():\n"
            "        x0.mul_(2)\n    return x0 * 3\n")  # (history kept through no_grad)
    assert gen.compare(_aliased(src2, "nograd", "apart", wgrad=True)) == "pass"


def _write_first(a, b):
    a.add_(1)
    return a * b


def test_aliasing_pattern_selects_the_program_in_both_orders():
    """One jitted function called with separate inputs and with overlapping ones (same
    shapes, so the same cache key), in both orders: each call runs the program of its
    aliasing (the overlap check before the run), with eager's results and memory."""
    def separate():
        return torch.randn(4, 3), torch.randn(4, 3)

    def overlapping():
        b = torch.randn(6, 3)
        return b[:4], b[2:]

    for order in ((separate, overlapping, separate, overlapping),
                  (overlapping, separate, overlapping, separate)):
        jf = J(_write_first)
        for make in order:
            args = make()
            if make is separate:
                eargs = [a.clone() for a in args]
            else:
                b = args[0]._base.clone()
                eargs = b[:4], b[2:]
            want = _write_first(*eargs)
            got = jf(*args)
            assert _same(got, want)
            assert all(_same(a, e) for a, e in zip(args, eargs))
            synthetic = any(jf.last in s.cache.entries.values()
                            for e in jf.cache.entries.values()
                            for s in (e.synthetic or {}).values())
            assert synthetic == (make is overlapping)
        assert thunder_mlir.cache_misses(jf) == 1


def test_non_overlapping_views_of_one_storage_run_as_traced():
    """Two halves of one buffer, one written: no synthetic base (the traced program)."""
    b = torch.arange(12.0)
    eb = b.clone()
    jf = J(_write_first)
    assert _same(jf(b[:6], b[6:]), _write_first(eb[:6], eb[6:]))
    assert _same(b, eb)
    (entry,) = jf.cache.entries.values()
    assert jf.last is entry and entry.synthetic is None


def test_aliased_inputs_refused_with_the_reason():
    """Where no synthetic base keeps eager's meaning, an UnsupportedError naming both
    inputs and the reason, before anything is written: views of another dtype, and a
    ``.detach()`` alias of a tensor that requires grad (eager's histories differ)."""
    b = torch.arange(8.0)
    with pytest.raises(thunder_mlir.UnsupportedError, match="different dtypes") as e:
        J(_write_first)(b[:4], b.view(torch.int32)[2:6])
    assert "args[0]" in str(e.value) and "args[1]" in str(e.value)
    assert _same(b, torch.arange(8.0))
    x = torch.randn(4, requires_grad=True).clone()
    before = x.detach().clone()
    with pytest.raises(thunder_mlir.UnsupportedError, match="not views of one tensor"):
        J(_write_first)(x.detach(), x)
    assert _same(x, before)
