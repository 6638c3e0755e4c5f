"""Functionalization (frontend/functionalization.py): writes into intermediates, writes
through views into their base, index assignment in every form, fallback ops that write, and
eager's errors for writes eager refuses. The oracle is eager PyTorch: values, the inputs
after the call, gradients."""

from __future__ import annotations

import pytest
import torch

import thunder_mlir
from conftest import assert_close_to_eager


def _check(fn, *args, grads=False, expect_fallback=False):
    """fn jitted vs eager: outputs, inputs after the call and (``grads``) the gradients of
    the floating-point inputs for a sum of the outputs."""
    def clone(a):
        if not isinstance(a, torch.Tensor):
            return a
        c = a.detach().clone()
        return c.requires_grad_() if grads and c.is_floating_point() else c
    ea, ja = [clone(a) for a in args], [clone(a) for a in args]
    expected = fn(*ea)
    jfn = thunder_mlir.jit(fn)
    actual = jfn(*ja)
    torch.testing.assert_close(actual, expected)
    if not grads:
        for x, y in zip(ja, ea):
            torch.testing.assert_close(x, y)  # written inputs as eager leaves them
    else:
        outs = lambda o: list(o) if isinstance(o, (tuple, list)) else [o]  # noqa: E731
        sum(o.sum() for o in outs(expected)).backward()
        sum(o.sum() for o in outs(actual)).backward()
        for x, y in zip(ja, ea):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                torch.testing.assert_close(x.grad, y.grad)
    if not expect_fallback:
        assert thunder_mlir.fallback_ops(jfn) == [], thunder_mlir.fallback_ops(jfn)
    return jfn


X = lambda *s: torch.randn(*s)  # noqa: E731


def IDX():  # noqa: N802 - a tensor made in the program (a global tensor would be refused)
    return torch.tensor([3, 0, 2])


# ----------------------------------------------------- index assignment: every index form
SETITEM = {
    "int": (lambda y: y.__setitem__(1, 7.0)),
    "negative int": (lambda y: y.__setitem__(-1, 7.0)),
    "slice with step": (lambda y: y.__setitem__((slice(None, None, 2), slice(1, None, 2)), 5.0)),
    "None and Ellipsis": (lambda y: y.__setitem__((None, Ellipsis, 1), 3.0)),
    "int and slice": (lambda y: y.__setitem__((2, slice(1, 3)), -1.0)),
    "one index tensor": (lambda y: y.__setitem__(IDX(), 0.0)),
    "index tensor, tensor value": (lambda y: y.__setitem__(IDX(), torch.arange(3.0)[:, None])),
    "index tensor after a full slice": (lambda y: y.__setitem__((slice(None), IDX()[:2] % 3),
                                                                 9.0)),
    "two index tensors broadcast": (lambda y: y.__setitem__((IDX()[:, None], IDX()[None, :2] % 3),
                                                            4.0)),
    "index list": (lambda y: y.__setitem__([0, 4], 2.0)),
    "index tensor after a partial slice": (lambda y: y.__setitem__((slice(1, 3), IDX()[:2] % 3),
                                                                   8.0)),
    "int then index tensor": (lambda y: y.__setitem__((1, IDX()[:2] % 3), 6.0)),
    "bool mask": (lambda y: y.__setitem__(y > 0, 0.0)),
    "bool mask, 0-d tensor value": (lambda y: y.__setitem__(y < 0, torch.tensor(-5.0))),
    "bool mask of the leading dim": (lambda y: y.__setitem__(torch.tensor(
        [True, False, True, False, True]), 1.0)),
    "value with a leading unit dim": (lambda y: y.__setitem__(0, torch.ones(1, 3))),
    "value broadcast over rows": (lambda y: y.__setitem__(slice(1, 4), torch.arange(3.0))),
}


@pytest.mark.parametrize("form", list(SETITEM))
def test_index_assignment_into_an_intermediate(form):
    """``y[index] = value`` on an intermediate is seen by every later read (the defect:
    it was lost and ``y.sum(0)`` read the tensor before the write)."""
    def fn(x):
        y = x * 2
        SETITEM[form](y)
        return y.sum(0), y
    _check(fn, X(5, 3))


@pytest.mark.parametrize("form", ["int", "slice with step", "one index tensor", "bool mask",
                                  "index tensor, tensor value"])
def test_index_assignment_gradients(form):
    def fn(x, w):
        y = x * w
        SETITEM[form](y)
        return y * x
    _check(fn, X(5, 3), X(5, 3), grads=True)


def test_index_assignment_separated_advanced_indices_and_dtype_conversion():
    def fn(x, i):
        y = torch.zeros(5, 3, 4, dtype=torch.int64) + x.long()[:, :, None]
        y[i, :, i % 4] = 2.5  # separated: result dims first; a float into int64
        y[1, 1, :3] = x[0] * 10  # copy_ converts a tensor of another dtype
        return y
    _check(fn, X(5, 3), IDX())

    def mismatch(x, i):  # index_put_ does not: eager's error
        y = torch.zeros(5, 3, dtype=torch.int64)
        y[i] = x[0, 0]
        return y
    _both_raise(mismatch, X(5, 3), IDX(), match="Index put requires the source and "
                "destination dtypes match, got Long for the destination and Float")


# ----------------------------------------------------------------- writes through views
VIEW_WRITES = {
    "column +=": lambda y, x: y[:, 0].__iadd__(5),
    "relu_ of a slice": lambda y, x: y[:, :2].relu_(),
    "view(-1).mul_": lambda y, x: y.view(-1).mul_(3),
    "copy_ into rows": lambda y, x: y[1:3].copy_(x[:2]),
    "t().add_": lambda y, x: y.t().add_(1),
    "transpose of a slice": lambda y, x: y[1:].t()[1].zero_(),
    "diagonal fill_": lambda y, x: y[:3].diagonal().fill_(9),
    "unfold windows": lambda y, x: y.reshape(-1).unfold(0, 3, 3).mul_(0),
    "narrow": lambda y, x: y.narrow(0, 1, 2).sub_(x[:2]),
    "select": lambda y, x: y.select(1, 2).div_(2),
    "unbind": lambda y, x: y.unbind(0)[4].neg_(),
    "split": lambda y, x: y.split(2)[1].abs_(),
    "chunk of a column": lambda y, x: y[:, 1].chunk(2)[0].clamp_(min=0),
    "squeeze of unsqueeze": lambda y, x: y.unsqueeze(0).squeeze(0)[2].exp_(),
    "permute": lambda y, x: y.unsqueeze(-1).permute(2, 1, 0)[0, 1].floor_(),
    "detach": lambda y, x: y.detach()[0].mul_(10),
    "masked_fill_ of a slice": lambda y, x: y[:2].masked_fill_(y[:2] > 0, 1.5),
    "index_put_ of a column": lambda y, x: y[:, 2].index_put_((IDX(),), torch.tensor(1.0)),
    "scatter_ into a slice": lambda y, x: y[1:].scatter_(0, torch.zeros(1, 3, dtype=torch.long),
                                                         4.0),
}


@pytest.mark.parametrize("form", list(VIEW_WRITES))
def test_write_through_a_view_of_an_intermediate(form):
    """The base, views made before the write and views made after it read the write."""
    def fn(x):
        y = x * 1
        before = y[2]
        VIEW_WRITES[form](y, x)
        return y, before * 1, y.t()[1] + 0
    _check(fn, X(5, 3))


@pytest.mark.parametrize("form", ["column +=", "copy_ into rows", "diagonal fill_", "t().add_",
                                  "unfold windows"])
def test_write_through_a_view_gradients(form):
    def fn(x, w):
        y = x * w
        VIEW_WRITES[form](y, x)
        return y
    _check(fn, X(5, 3), X(5, 3), grads=True)


def test_write_through_a_view_of_an_input_writes_the_callers_tensor():
    def fn(x):
        x[0].mul_(2)
        x.t()[1].add_(1)
        x[IDX()] = -1.0
        return x.sum()
    x = X(5, 3)
    _check(fn, x)
    jx = x.clone()
    version = jx._version
    thunder_mlir.jit(fn)(jx)
    assert jx._version > version  # the write-back advances the version counter, as eager's


def test_box_writes_are_selects_and_other_views_scatter():
    """A strided box is padded into place (no scatter); a diagonal is scattered."""
    def box(x):
        y = x * 1
        y[::2, 1] = 0.0
        return y

    def diag(x):
        y = x * 1
        y.diagonal().zero_()
        return y
    jbox = _check(box, X(5, 3))
    text = thunder_mlir.last_traces(jbox)[0].text
    assert "thunder.pad" in text and "thunder.scatter" not in text, text
    jdiag = _check(diag, X(3, 3))
    assert "thunder.scatter" in thunder_mlir.last_traces(jdiag)[0].text


def test_reshape_that_copies_is_not_a_view():
    """``reshape`` of a transposed tensor copies in eager: writes to either side do not
    reach the other (and neither do writes to the base reach the copy)."""
    def fn(x):
        y = x * 1
        z = y.t().reshape(-1)
        z.add_(1)
        w = y[IDX()]  # advanced indexing copies too
        y.mul_(2)
        return y, z, w
    _check(fn, X(5, 3))


# --------------------------------------------------------------- eager's refusals, eager's
def _both_raise(fn, *args, match):
    with pytest.raises(RuntimeError, match=match):
        fn(*[a.clone() for a in args])
    with pytest.raises(RuntimeError, match=match):
        thunder_mlir.jit(fn)(*[a.clone() for a in args])


def test_writes_eager_refuses_raise_eagers_error():
    _both_raise(lambda x: (x[:1] * 1).expand(4, 3).add_(1), X(5, 3),
                match="more than one element of the written-to tensor")
    # windows that overlap: eager writes shared elements once per window, in its kernel's
    # order (ATen's overlap check gives up on them); refused, never another result
    with pytest.raises(NotImplementedError, match="elements share memory"):
        thunder_mlir.jit(lambda x: (x.reshape(-1) * 1).unfold(0, 4, 2).mul_(2))(X(5, 3))
    _both_raise(lambda x: (lambda y: y[1:].copy_(y[:-1]))(x.reshape(-1) * 1), X(5, 3),
                match="some elements of the input tensor and the written-to tensor")
    _both_raise(lambda x: (lambda y: y.__setitem__(slice(0, 2), y[1:3]))(x * 1), X(5, 3),
                match="some elements of the input tensor and the written-to tensor")
    _both_raise(lambda x: torch.ones(3, dtype=torch.long).add_(x[0, 0]), X(5, 3),
                match="can't be cast to the desired output type Long")
    _both_raise(lambda x: (x * 1).add_(torch.ones(2, 5, 3)), X(5, 3),
                match="doesn't match the broadcast shape")


def test_writes_eager_allows_through_overlapping_views_run():
    """ATen lets non-dense views through its overlap check (``y[:, 0] += y[:, 1]``), and
    a write of a tensor into its own memory (``y[:2] &= m`` re-assigns y[:2])."""
    def fn(x):
        y = x * 1
        y[:, 0] += y[:, 1]
        b = x > 0
        b[:2] &= x[:2] > 0.5
        return y, b
    _check(fn, X(5, 3))


def test_autograd_errors_of_writes_are_eagers():
    def leaf(x):
        x[0] = 1.0
        return x

    def saved(x):
        y = x.exp()
        y[:, 1].add_(1)  # exp saves its output, which the view write modifies
        return y
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        thunder_mlir.jit(leaf)(X(3).requires_grad_())
    x = X(3, 3).requires_grad_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved(x).sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        thunder_mlir.jit(saved)(x).sum().backward()


# ------------------------------------------------------------------ fallback ops that write
def test_fallback_op_that_writes_returns_what_it_wrote():
    """``fill_diagonal_`` has no symbol: the torch fallback writes a clone and returns it
    (``thunder.writes``), so the partitioner cannot read the tensor before the write, and
    the tensor it was given is untouched (``x`` is read after)."""
    def fn(x):
        y = x * 1
        y[1:].fill_diagonal_(5.0)
        return y.sum(0), x * 1, y
    jfn = _check(fn, X(5, 3), expect_fallback=True)
    assert thunder_mlir.fallback_ops(jfn) == ["torch.Tensor.fill_diagonal_"]
    assert "thunder.writes" in thunder_mlir.last_traces(jfn)[0].text


def test_mixture_of_experts_inverse_permutation():
    """transformers' grouped_mm experts: ``inv[perm] = arange(n)`` then a gather with it
    (the defect made every MoE model's logits wrong)."""
    def fn(x, w):
        perm = torch.argsort(x[:, 0])
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.shape[0])
        return (x[perm] * w)[inv]
    _check(fn, X(8, 4), X(8, 4))
    _check(fn, X(8, 4), X(8, 4), grads=True)


def test_inplace_variants_of_functional_symbols_run_on_xla():
    """Every ``Tensor.op_`` whose functional ``op`` has a symbol is registered from it
    (symbols/inplace.py): a sample of them, on views of an intermediate."""
    from thunder_mlir.frontend.symbols.inplace import INPLACE_VARIANTS

    for name in ("abs_", "floor_", "eq_", "clamp_min_", "logical_not_", "tril_", "cumsum_",
                 "index_fill_", "scatter_add_", "masked_scatter_"):
        assert name in INPLACE_VARIANTS, name

    def fn(x):
        y = x * 3
        y[0].abs_()
        y[1].floor_()
        y[2].eq_(y[3])
        y[3].clamp_min_(0.5)
        y[:2].tril_()
        y[:, 1].cumsum_(0)
        y.index_fill_(1, torch.tensor([2]), -1.0)
        y[1:].masked_scatter_(y[1:] > 1, torch.arange(12.0).reshape(4, 3))
        return y
    assert_close_to_eager(fn, X(5, 3))


# ------------------------------------- inputs that share memory (synthetic_bases.py)
def _write_both(a, b):
    a.add_(1)
    b.mul_(10)
    return a.sum() + b.sum()


def _aliased_inputs():
    """(argument pair, do they overlap) over one buffer of 12 elements: a tensor with its
    row, two overlapping slices, the same object twice, a `.detach()` alias, and pairs that
    do not overlap (two halves, a column of one matrix and a clone)."""
    def base():
        return torch.arange(12.0).reshape(4, 3)

    def twice():
        t = base()
        return t, t
    return [
        ("tensor and its row", lambda: (lambda t: (t, t[1]))(base()), True),
        ("overlapping slices", lambda: (lambda t: (t[1:], t[:2]))(base()), True),
        ("same object twice", twice, True),
        ("a detach() alias", lambda: (lambda t: (t, t.detach()))(base()), True),
        ("two halves", lambda: (lambda t: (t[:2], t[2:]))(base()), False),
        ("a clone", lambda: (lambda t: (t, t.clone()))(base()), False),
    ]


def _eager_then_restore(fn, args):
    """(eager's result of ``fn(*args)`` on the caller's own tensors, their values after
    it); the tensors' memory is restored afterwards, so a jitted call can run on it next.
    Overlapping arguments restore consistently: each snapshot is from before any write."""
    before = [a.clone() for a in args]
    want = fn(*args)
    after = [a.clone() for a in args]
    with torch.no_grad():
        for a, b in zip(args, before):
            a.copy_(b)
    return want, after


@pytest.mark.parametrize("name,make,overlap", _aliased_inputs(),
                         ids=[c[0] for c in _aliased_inputs()])
def test_written_inputs_that_share_memory_run_as_eager(name, make, overlap):
    """Two inputs over the same memory, both written in place: eager's second write reads
    the first through the shared memory, and the function's result reads both. The jit
    once traced them as memory of their own and returned another result, silently (e.g.
    21.0 for eager's 48.0 with a tensor and its row), then refused them. Now the
    overlapping ones run through a synthetic base (one input over their memory, each
    regenerated as a view of it) and return eager's result and memory; the others run as
    traced, without one."""
    a, b = make()
    want, after = _eager_then_restore(_write_both, (a, b))
    jf = thunder_mlir.jit(_write_both)
    got = jf(a, b)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close((a, b), tuple(after))
    assert _synthetic_ran(jf) == overlap


def _synthetic_ran(jf) -> bool:
    """Whether ``jf``'s last call ran a synthetic-base program: its entry is not one of
    ``jf``'s cache but of a program such an entry holds."""
    return any(jf.last in s.cache.entries.values() for e in jf.cache.entries.values()
               for s in (e.synthetic or {}).values())


def test_inputs_that_share_memory_and_are_only_read_run():
    """Shared memory that nothing writes is eager's meaning as it is: no refusal."""
    t = torch.arange(12.0).reshape(4, 3)
    fn = lambda a, b: a * 2 + b.sum()  # noqa: E731
    torch.testing.assert_close(thunder_mlir.jit(fn)(t, t[1]), fn(t, t[1]))


def test_overlap_search_matches_brute_force():
    """The generator: 400 random sets of strided views of one buffer (random offsets,
    shapes and strides, some written): ``overlapping_written_input`` finds an overlap
    exactly when the brute-force comparison of every pair's byte spans with a written
    side does."""
    import random

    from thunder_mlir.runtime.write_back import overlapping_written_input, span

    rng = random.Random(0)
    buf = torch.zeros(4096)
    for _ in range(400):
        views = []
        for _ in range(rng.randint(2, 7)):
            shape = [rng.randint(0, 6) for _ in range(rng.randint(1, 3))]
            stride = [rng.randint(1, 9) for _ in shape]
            views.append(buf.as_strided(shape, stride, rng.randint(0, 3000)))
        written = rng.sample(range(len(views)), rng.randint(1, len(views)))
        spans = [span(v) if v.numel() else None for v in views]
        expected = any(spans[i] and spans[j] and spans[i][0] < spans[j][1] and
                       spans[j][0] < spans[i][1]
                       for i in range(len(views)) for j in range(i + 1, len(views))
                       if i in written or j in written)
        got = overlapping_written_input(views, written)
        assert (got is not None) == expected, (spans, written, got)
        if got is not None:
            i, j = got
            assert spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]
            assert i in written or j in written


def test_sharing_is_checked_again_when_the_inputs_change():
    """The check remembers the inputs of the last call that passed (identities and data
    pointers): the same entry called next with overlapping inputs, or with an input whose
    memory was swapped for the other's (``.data =``), runs through a synthetic base with
    eager's result, and separate inputs after them run as traced again."""
    jf = thunder_mlir.jit(_write_both)
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    jf(x, y)
    jf(x, y)  # (the remembered inputs)
    for args in ((x, x[1:]), None, (x, y)):
        if args is None:
            y.data = x.data  # the same objects, the memory of one now the other's
            continue
        want, after = _eager_then_restore(_write_both, args)
        torch.testing.assert_close(jf(*args), want)
        torch.testing.assert_close(args, tuple(after))
        assert _synthetic_ran(jf)
    z, w = torch.randn(4, 3), torch.randn(4, 3)
    want, after = _eager_then_restore(_write_both, (z, w))
    torch.testing.assert_close(jf(z, w), want)
    torch.testing.assert_close((z, w), tuple(after))
    assert not _synthetic_ran(jf)
    assert thunder_mlir.cache_misses(jf) == 2  # (x[1:]: another shape)


def _write_two_read_one(a, b, c):
    a.add_(1)
    b.mul_(2)
    return a.sum() + b.sum() + c.sum()


@pytest.mark.filterwarnings("ignore::thunder_mlir.RecompileWarning")  # (a layout per overlap)
def test_sharing_check_over_call_sequences_matches_brute_force():
    """The generator for the remembered check (``inputs_overlap`` compares each call with
    the last that passed and checks only the changed inputs): 150 calls of one jitted
    function, each argument drawn from persistent tensors, persistent slices of two bases,
    fresh slices of those bases, ``.detach()`` aliases and fresh tensors. A call runs
    through a synthetic base exactly when a brute-force comparison of the byte spans finds
    a written input overlapping another input; every call returns eager's value (computed
    on the same tensors, their memory restored after) and writes the inputs as eager
    does."""
    import random

    from thunder_mlir.runtime.write_back import span

    rng = random.Random(1)
    bases = [torch.randn(12), torch.randn(12)]
    kept = [b[k:k + 3] for b in bases for k in (0, 3, 6, 9)] + [torch.randn(3)
                                                               for _ in range(3)]

    def draw():
        r = rng.random()
        if r < 0.45:
            return rng.choice(kept)
        if r < 0.65:
            k = rng.randint(0, 9)
            return rng.choice(bases)[k:k + 3]
        if r < 0.75:
            return rng.choice(kept).detach()
        return torch.randn(3)

    jf = thunder_mlir.jit(_write_two_read_one)
    synthetic = ran = 0
    for _ in range(150):
        args = [draw() for _ in range(3)]
        spans = [span(t) for t in args]
        overlap = any(spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]
                      for i in range(3) for j in range(i + 1, 3) if i < 2 or j < 2)
        want, after = _eager_then_restore(_write_two_read_one, args)
        torch.testing.assert_close(jf(*args), want)
        torch.testing.assert_close(args, after)
        used = _synthetic_ran(jf)
        assert used == overlap
        synthetic += used
        ran += not used
    print(f"150 calls: {ran} ran as traced, {synthetic} through a synthetic base")
    assert ran > 25 and synthetic > 25
    assert thunder_mlir.cache_misses(jf) == 1


def _writes(name: str) -> bool | None:
    """Whether calling ``torch.Tensor.<name>`` on a fresh tensor moves its version counter
    (eager's own record of a write); None where no call of it takes (tensor, tensor) or
    (tensor,) on an int64 or float32 tensor."""
    fn = getattr(torch.Tensor, name)
    makes = (lambda: torch.ones(1, dtype=torch.int64), lambda: torch.ones(1))
    for n_extra in (1, 0):  # (binary first: a unary call of a binary method may not raise)
        for make in makes:
            t, extra = make(), [make() for _ in range(n_extra)]
            try:
                fn(t, *extra)
            except Exception:  # noqa: BLE001 - a signature or dtype this call does not take
                continue
            return t._version > 0
    return None


@pytest.mark.parametrize("name", sorted(n for n in dir(torch.Tensor)
                                        if n.startswith("__i") and n.endswith("__")))
def test_in_place_name_rule_matches_eager(name):
    """The name rule (aliasing.writes_first_argument) the tracer uses where no meta run can
    tell agrees with eager's version counter on every ``__i*__`` method torch.Tensor has
    (``__iadd__`` writes; ``__int__``, ``__index__``, ``__invert__`` do not)."""
    from thunder_mlir.frontend.aliasing import writes_first_argument

    writes = _writes(name)
    if writes is None:
        pytest.skip(f"torch.Tensor.{name} takes no (tensor[, tensor]) call to observe")
    assert writes_first_argument(getattr(torch.Tensor, name)) == writes, name


# ------------------------------------------------------------ set_ (issue 46): refused
def _set_input(x, y):
    x.set_(y)
    return x * 2


def _set_intermediate(x, y):
    z = x * 1
    z.set_(y)
    return z + 1


def _set_empty(x, y):
    z = x * 1
    z.set_()
    return z


def _set_storage(x, y):
    z = x * 1
    z.set_(y.untyped_storage(), 1, (2,), (1,))
    return z + 1


def _set_typed_storage(x, y):
    z = x * 1
    z.set_(y.storage(), 0, (2, 2), (1, 2))
    return z + 1


@pytest.mark.parametrize("fn", [_set_input, _set_intermediate, _set_empty, _set_storage,
                                _set_typed_storage], ids=lambda f: f.__name__)
def test_set_is_refused_naming_the_line(fn):
    """``Tensor.set_`` (every form; eager runs them all) is refused with the user's line
    and what to write instead, never the internal "reached ATen dispatch" error: torch
    sends set_ past the torch-function layer, and a tensor that changes its memory is not
    modelled (docs/sharp_edges.md)."""
    fn(torch.randn(4), torch.randn(4))  # eager runs it
    with pytest.raises(thunder_mlir.UnsupportedError) as e:
        thunder_mlir.jit(fn)(torch.randn(4), torch.randn(4))
    text = str(e.value)
    assert "test_functionalization.py" in text and "set_" in text, text
    assert "as_strided" in text and "reached ATen dispatch" not in text, text
