"""Programs whose sizes and branches depend on tensor values (issue 25, items 3 and 4).

``bool(t)``, ``if t.any():``, ``t.item()``, ``t.tolist()``, ``int(t)``, ``float(t)`` and the
output sizes of ``nonzero``, ``argwhere``, one-argument ``where``, ``masked_select``,
``x[mask]``, ``unique``, ``unique_consecutive``, ``repeat_interleave`` by tensor,
``tensor_split`` by tensor, ``bincount``: the trace specializes on the value of the call
it was traced on (the program prefix compiled and run on the inputs) and guards it at run
time (frontend/value_guards.py, thunder_mlir/value_specialization.py); data-dependent
output sizes are unbacked size symbols where the program allows (traced once, the XLA
regions after the op compiled per size). Every test calls with values that change between
calls (branches flip, sizes change) and compares with eager.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import thunder_mlir
from thunder_mlir.errors import RecompileWarning


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), (a, b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b and type(a) is type(b), (a, b)


def _calls(fn, inputs):
    """Run jit(fn) and fn on each input tuple; assert equal results; the jitted function."""
    jfn = thunder_mlir.jit(fn)
    for args in inputs:
        _same(jfn(*args), fn(*args))
    return jfn


def _site(info) -> list[str]:
    return list(info["value_guards"])


# ----------------------------------------------------------- item 4: branches on values
def branch(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_branch_flips_both_entries_stay_cached():
    pos, neg = torch.rand(4) + 0.1, -torch.rand(4) - 0.1
    jfn = _calls(branch, [(pos,), (pos,), (neg,), (neg,), (pos,), (neg,)])
    info = thunder_mlir.cache_info(jfn)
    assert info["misses"] == 2  # one program per branch, then only hits
    assert info["hits"] == 4
    assert len(info["entries"]) == 2
    [site] = _site(info)
    assert site.startswith("bool(tensor) at ") and "if x.sum() > 0:" in site
    # the entry whose guards held last is tried first (FunctionCache.promote): each flip
    # fails one guard (neg, pos, neg) and runs the other entry; a repeat hits directly
    assert info["value_guards"][site] == 3
    assert sorted(e["value_guards"][site] for e in info["entries"]) == [False, True]
    assert "a value guard failed: bool(tensor)" in info["recompile_reasons"][0]
    assert "was True when traced, now False" in info["recompile_reasons"][0]


def test_the_guard_is_in_the_plan_after_the_value_is_computed():
    jfn = thunder_mlir.jit(branch)
    jfn(torch.ones(3))
    plan = next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == "plan")
    assert "value_guard[0] bool(tensor)" in plan
    # the guard reads the region's result (the comparison), after that region
    assert plan.index("call @") < plan.index("value_guard[0]")


def any_branch(x, m):
    if m.any():
        return x.masked_fill(m, 0.0).sum(0)
    return x.sum(0) * 3


def test_if_t_any():
    x = torch.randn(3, 4)
    masks = [torch.zeros(3, 4, dtype=torch.bool), torch.rand(3, 4) > 0.5,
             torch.zeros(3, 4, dtype=torch.bool)]
    masks[1][0, 0] = True
    jfn = _calls(any_branch, [(x, m) for m in masks])
    assert thunder_mlir.cache_misses(jfn) == 2


def test_nested_branches_in_order():
    def f(x):
        if x[0] > 0:
            if x[1] > 0:
                return x + 1
            return x + 2
        if x[2] > 0:
            return x + 3
        return x + 4
    inputs = [torch.tensor(v) for v in
              ([1., 1, 1], [1., -1, 1], [-1., 1, 1], [-1., 1, -1], [1., 1, 1], [-1., 1, -1])]
    jfn = _calls(f, [(t,) for t in inputs])
    assert thunder_mlir.cache_misses(jfn) == 4


def test_item_that_changes_every_call_stays_correct_and_warns():
    def f(x, s):
        return x * s.item() + s.item()
    jfn = thunder_mlir.jit(f, recompile_limit=2)
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(6):
            s = torch.tensor(float(k) + 0.5)
            _same(jfn(x, s), f(x, s))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RecompileWarning)]
    assert any("tensor.item() at" in m and "torch.cond" in m for m in msgs), msgs
    assert any(os.path.basename(__file__) == os.path.basename(w.filename)
               for w in caught if issubclass(w.category, RecompileWarning))


@pytest.mark.parametrize("name", ["tolist", "int", "float", "item_size"])
def test_python_values_used_as_numbers(name):
    def tolist(x, n):
        a, b = n.tolist()
        return x[a:b] * 2

    def to_int(x, n):
        return x[:int(n)].sum() + int(n)

    def to_float(x, n):
        return x * float(n)

    def item_size(x, n):
        return torch.zeros(n.item(), 2) + x.sum()

    fn = {"tolist": tolist, "int": to_int, "float": to_float, "item_size": item_size}[name]
    x = torch.randn(6)
    ns = {"tolist": [torch.tensor([1, 4]), torch.tensor([0, 2]), torch.tensor([1, 4])],
          "int": [torch.tensor(2), torch.tensor(5), torch.tensor(2)],
          "float": [torch.tensor(0.5), torch.tensor(-2.0), torch.tensor(0.5)],
          "item_size": [torch.tensor(1), torch.tensor(3), torch.tensor(1)]}[name]
    jfn = _calls(fn, [(x, n) for n in ns])
    assert thunder_mlir.cache_misses(jfn) == 2


def test_bool_of_several_elements_raises_eagers_error():
    def f(x):
        if x > 0:
            return x
        return -x
    with pytest.raises(RuntimeError, match="ambiguous"):
        f(torch.ones(3))
    with pytest.raises(RuntimeError, match="ambiguous"):
        thunder_mlir.jit(f)(torch.ones(3))


def test_value_guard_with_grad():
    def f(x):
        y = x * x
        if y.sum() > 1:
            return y.sum()
        return (x * 3).sum()
    jfn = thunder_mlir.jit(f)
    for v in ([1., 2.], [0.1, 0.2], [1., 2.]):
        x1 = torch.tensor(v, requires_grad=True)
        x2 = torch.tensor(v, requires_grad=True)
        jfn(x1).backward()
        f(x2).backward()
        _same(x1.grad, x2.grad)
    assert thunder_mlir.cache_misses(jfn) == 2


def test_input_writes_happen_only_for_the_branch_taken():
    def f(x, buf):
        if x.sum() > 0:
            buf.add_(1)
        else:
            buf.sub_(1)
        return x + 1
    jfn = thunder_mlir.jit(f)
    b1, b2 = torch.zeros(2), torch.zeros(2)
    for x in (torch.ones(2), -torch.ones(2), -torch.ones(2), torch.ones(2)):
        _same(jfn(x, b1), f(x, b2))
        _same(b1, b2)


# ------------------------------------------------------- item 3: data-dependent sizes
def _masks(shape, seeds=(0, 1, 2, 0)):
    out = []
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        out.append(torch.rand(shape, generator=g) > 0.3 + 0.2 * s)
    return out


@pytest.mark.parametrize("name", [
    "nonzero", "argwhere", "where1", "masked_select", "bool_index", "bool_index_rows",
    "unique", "unique_consecutive", "repeat_interleave", "tensor_split", "bincount",
    "one_hot"])
def test_data_dependent_sizes_follow_the_values(name):
    def nonzero(x, m):
        return torch.nonzero(m) * 2, x.sum()

    def argwhere(x, m):
        return torch.argwhere(m).float().sum(0) + x[0, :2]

    def where1(x, m):
        i, j = torch.where(m)
        return x[i, j] * 2

    def masked_select(x, m):
        return torch.masked_select(x, m).exp().sum() + 1

    def bool_index(x, m):
        return x[m] * 2 + 1

    def bool_index_rows(x, m):
        return x[m[:, 0]].sum(0)

    def unique(x, m):
        u, inv, c = torch.unique((x * 1.5).round()[m], return_inverse=True,
                                 return_counts=True)
        return u * 10, inv, c

    def unique_consecutive(x, m):
        return torch.unique_consecutive(m.flatten().int(), return_counts=True)

    def repeat_interleave(x, m):
        return torch.repeat_interleave(x, m.sum(1), dim=0) * 2

    def tensor_split(x, m):
        return [t.sum(0) for t in torch.tensor_split(x, torch.nonzero(m[:, 0]).flatten())]

    def bincount(x, m):
        return torch.bincount(m.sum(1)) + 1

    def one_hot(x, m):
        return torch.nn.functional.one_hot(m.sum(1)).sum(0)

    fn = locals()[name]
    inputs = [(torch.randn(5, 4, generator=torch.Generator().manual_seed(s)), m)
              for s, m in zip((0, 1, 2, 0), _masks((5, 4)))]
    shapes = {str([t.shape for t in torch.utils._pytree.tree_leaves(fn(*a))]) for a in inputs}
    assert len(shapes) >= 2 or name in ("argwhere", "masked_select", "bool_index_rows"), \
        shapes  # the output sizes vary (or a reduction of them)
    jfn = _calls(fn, inputs)
    info = thunder_mlir.cache_info(jfn)
    if name in _SPECIALIZED:  # the sizes changed: guarded and re-traced
        assert info["misses"] >= 2, info
        assert any(site.startswith("the output size of") for site in info["value_guards"])
        assert len(info["entries"]) == info["misses"]
    else:  # traced once: the sizes are unbacked size symbols
        assert info["misses"] == 1, info
        assert info["entries"][0]["unbacked_sizes"], info
        assert "tensor<?" in thunder_mlir.last_traces(jfn)[-2].text or \
            "x?" in thunder_mlir.last_traces(jfn)[-2].text


# data-dependent sizes that stay specialized on values (re-traced per value), and why
_SPECIALIZED = {"one_hot": "num_classes=-1 is max(input) + 1, a Python int in torch's own "
                           "kernel (no unbacked size for it)",
                "tensor_split": "indices from nonzero: the number of outputs depends on the "
                                "values (a Python structure, not a size)"}


def _mask_rows(n: int, total: int = 6) -> torch.Tensor:
    m = torch.zeros(total, dtype=torch.bool)
    m[:n] = True
    return m


def test_unbacked_sizes_0_and_1_share_the_symbolic_entry():
    """Every size, 0 and 1 included, shares one trace (torch.compile does not specialize
    unbacked sizes at 0 and 1 either; issue 48)."""
    def f(x, m):
        y = x[m]
        return y * 2 + 1, y.sum(0), torch.nonzero(m).sum(0)
    jfn = thunder_mlir.jit(f)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    misses = []
    for n in (3, 0, 1, 4, 1, 0, 5, 6, 2, 3):
        _same(jfn(x, _mask_rows(n)), f(x, _mask_rows(n)))
        misses.append(thunder_mlir.cache_misses(jfn))
    assert misses == [1] * 10, misses
    unbacked = [e["unbacked_sizes"] for e in thunder_mlir.cache_info(jfn)["entries"]
                if e.get("unbacked_sizes")]
    assert len(unbacked) == 1 and len(unbacked[0]) == 2, unbacked  # x[m] and nonzero


def _route_moe(x, route, w):
    """A mixture of experts' loop (litgpt's LLaMAMoE, transformers' eager experts): each
    expert's rows come from torch.where, 0, 1 or more of them per call."""
    y = torch.zeros_like(x)
    for k in range(w.shape[0]):
        idx, = torch.where(route == k)
        y = y.index_add(0, idx, x[idx] @ w[k])
        y[idx] += x[idx] * (k + 1)
    return y


def _route_branch(x, route):
    """A branch on a data-dependent size: ``numel() == 1`` must be a guard, not assumed."""
    out = []
    for k in range(2):
        idx, = torch.where(route == k)
        out.append(x[idx].sum() + 100 if idx.numel() == 1 else x[idx].sum(0).sum())
    return torch.stack(out)


# routes of 4 tokens among 3 experts: each expert gets 0, 1, 2, 3 or 4 of them
_ROUTES = ([0, 0, 1, 2], [0, 1, 1, 1], [2, 2, 2, 2], [0, 1, 2, 2], [1, 1, 1, 1],
           [0, 0, 0, 1], [2, 1, 0, 0], [1, 0, 2, 1], [0, 0, 1, 1], [2, 2, 0, 1])


def test_unbacked_sizes_0_and_1_share_the_program_of_an_expert_loop():
    """Issue 48: a data-dependent size stands for every size >= 0 (torch.compile does not
    specialize unbacked sizes at 0 and 1): a per-expert loop whose experts get 0, 1 or
    more rows is traced once (it was once per routing pattern), with eager's results."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 3, generator=gen), torch.randn(3, 3, 3, generator=gen)
    jfn = thunder_mlir.jit(_route_moe)
    for r in _ROUTES:
        _same(jfn(x, torch.tensor(r), w), _route_moe(x, torch.tensor(r), w))
    assert thunder_mlir.cache_misses(jfn) == 1, thunder_mlir.cache_info(jfn)


def test_a_branch_on_an_unbacked_size_of_1_is_a_guard():
    """``if idx.numel() == 1:`` on sizes 0, 1 or more: the comparison is answered at the
    traced size and recorded as a guard checked where torch.where runs, so each call takes
    eager's side of the branch (the sides differ by 100); one program per pair of sides."""
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    jfn = thunder_mlir.jit(_route_branch)
    for r in _ROUTES:
        _same(jfn(x, torch.tensor(r)), _route_branch(x, torch.tensor(r)))
    assert thunder_mlir.cache_misses(jfn) <= 6, thunder_mlir.cache_info(jfn)


def test_a_size_computed_by_floor_from_a_size_of_0_is_eagers():
    """``(n - 1) // 2 + 1`` of a data-dependent n of 0 is 0 (floor of -1/2 is -1): the XLA
    shape computation floors, where stablehlo.divide truncates (exact for n >= 1 only)."""
    def f(x, m):
        y = x[m]
        return torch.ones((y.shape[0] - 1) // 2 + 1, 3) * y.sum()
    jfn = thunder_mlir.jit(f)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    for n in (3, 0, 1, 4, 0):
        _same(jfn(x, _mask_rows(n)), f(x, _mask_rows(n)))


def test_unbacked_sizes_past_the_limit_warn_naming_the_op_without_retracing():
    jfn = thunder_mlir.jit(lambda x, m: x[m].exp(), recompile_limit=2)
    x = torch.randn(6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(2, 6):
            _same(jfn(x, _mask_rows(n)), x[_mask_rows(n)].exp())
    assert thunder_mlir.cache_misses(jfn) == 1
    ws = [w for w in caught if issubclass(w.category, RecompileWarning)]
    msgs = [str(w.message) for w in ws]
    assert len(msgs) == 1 and "torch.Tensor.__getitem__" in msgs[0] and \
        "3 distinct values" in msgs[0], msgs
    assert ws[0].filename == __file__, ws[0].filename  # attributed to the caller's line


def test_a_guard_relating_two_unbacked_sizes_specializes_on_values():
    """``x[m1] + x[m2]``: equal sizes at the traced call; the guard s0 == s1 could only be
    checked once both ops ran, so the function specializes on values (and says why)."""
    def f(x, m1, m2):
        return x[m1] + x[m2]
    jfn = thunder_mlir.jit(f)
    x = torch.randn(6)
    for a, b in ((3, 3), (4, 4), (2, 2)):
        _same(jfn(x, _mask_rows(a), _mask_rows(b).flip(0)), f(x, _mask_rows(a),
                                                           _mask_rows(b).flip(0)))
    with pytest.raises(RuntimeError, match="must match the size"):
        f(x, _mask_rows(2), _mask_rows(3))
    with pytest.raises(RuntimeError, match="must match the size"):
        jfn(x, _mask_rows(2), _mask_rows(3))
    info = thunder_mlir.cache_info(jfn)
    assert info["misses"] == 3, info
    assert "relates a data-dependent size" in info["entries"][0]["values_specialized_because"]


def test_a_size_seen_before_hits():
    """Every size (1 included) is the symbolic entry: the first call, of size 1, traces it
    (its size guessed); every later call hits it."""
    jfn = thunder_mlir.jit(lambda x: torch.nonzero(x).sum())
    a, b, c = torch.tensor([1., 0, 0]), torch.tensor([1., 1, 0]), torch.tensor([1., 1, 1])
    for x in (a, b, a, c, a):
        _same(jfn(x), torch.nonzero(x).sum())
    info = thunder_mlir.cache_info(jfn)
    assert info["misses"] == 1 and info["hits"] == 4, info


def test_unbacked_sizes_are_traced_without_their_values(monkeypatch):
    """The first trace needs no value of a data-dependent size: no program prefix is
    compiled to compute one (before, k such ops cost k prefix compiles and k + 1 traces).
    A size read as a Python int still needs its value, and gets it from its prefix."""
    import thunder_mlir.value_specialization as vs

    prefixes = []
    real = vs.prefix_value
    monkeypatch.setattr(vs, "prefix_value", lambda *a: prefixes.append(1) or real(*a))

    def f(x, m):
        idx = torch.nonzero(m).flatten()
        vals, counts = torch.unique(x[m].round(), return_counts=True)
        return x[idx].exp().sum() + vals.sum(), counts * 2
    jfn = thunder_mlir.jit(f)
    x = torch.randn(8, generator=torch.Generator().manual_seed(0)) * 3
    for n in (5, 3, 8):
        m = _mask_rows(n, 8)
        _same(jfn(x, m), f(x, m))
    assert prefixes == [] and thunder_mlir.cache_misses(jfn) == 1, prefixes

    def g(x, m):  # range(n) over a data-dependent size: its value is needed
        total = x.new_zeros(())
        for r in torch.nonzero(m).flatten():
            total = total + x[r]
        return total
    jg = thunder_mlir.jit(g)
    _same(jg(x, _mask_rows(3, 8)), g(x, _mask_rows(3, 8)))
    assert len(prefixes) == 1 and thunder_mlir.cache_misses(jg) == 1, prefixes


def test_distinct_sizes_past_the_limit_warn_naming_the_op():
    jfn = thunder_mlir.jit(lambda x: torch.nonzero(x) + 1, recompile_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            x = torch.zeros(6)
            x[:n] = 1
            _same(jfn(x), torch.nonzero(x) + 1)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RecompileWarning)]
    assert any("the output size of torch.nonzero" in m and "depends on the input values"
               in m for m in msgs), msgs


@pytest.mark.parametrize("how", ["masked_select", "bool_index"])
def test_grads_through_data_dependent_reads(how):
    def f(x, m):
        y = torch.masked_select(x, m) if how == "masked_select" else x[m]
        return (y * y).sum() + y.sum()
    jfn = thunder_mlir.jit(f)
    for m in _masks((3, 4)):
        v = torch.randn(3, 4)
        x1, x2 = v.clone().requires_grad_(), v.clone().requires_grad_()
        l1, l2 = jfn(x1, m), f(x2, m)
        _same(l1.detach(), l2.detach())
        l1.backward()
        l2.backward()
        _same(x1.grad, x2.grad)


def test_size_then_branch():
    def f(x):
        idx = torch.nonzero(x > 0)
        if idx.shape[0] > 2:
            return x[idx[:, 0]].sum()
        return x.sum() * 0
    # sizes 3, 1, 4, 2, 4, 1, 2: one symbolic entry for sizes > 2 (its guard s > 2 is
    # checked where nonzero runs), one for the guard's other side (sizes 1 and 2)
    jfn = _calls(f, [(torch.tensor(v),) for v in
                     ([1., 2, 3, -1], [1., -2, -3, -1], [1., 2, 3, 4], [1., 2, -3, -1],
                      [4., 3, 2, 1], [1., -2, -3, -1], [-1., 2, -3, 4])])
    assert thunder_mlir.cache_misses(jfn) == 2


# ----------------------------------------------------------------- a model: Longformer
def _longformer():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.LongformerConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, attention_window=[4, 4], max_position_embeddings=64,
        pad_token_id=1)
    torch.manual_seed(0)
    return transformers.LongformerModel(cfg).eval(), cfg


def test_longformer_forward_matches_eager():
    model, cfg = _longformer()
    jm = thunder_mlir.jit(model)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(2, 64, (2, 8), generator=g)
        global_mask = torch.zeros(2, 8, dtype=torch.long)
        with torch.no_grad():
            want = model(ids, global_attention_mask=global_mask).last_hidden_state
            got = jm(ids, global_attention_mask=global_mask).last_hidden_state
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    sites = thunder_mlir.cache_info(jm)["value_guards"]
    assert thunder_mlir.cache_misses(jm) == 1, thunder_mlir.cache_info(jm)
    del sites


def test_longformer_training_step_matches_eager():
    model, cfg = _longformer()
    model.train()
    model.config.hidden_dropout_prob = 0.0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if isinstance(getattr(mod, "dropout", None), float):  # attention's F.dropout rate
            mod.dropout = 0.0  # (thunder_mlir draws other random numbers than torch)
    import copy

    ref = copy.deepcopy(model)
    jm = thunder_mlir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(2, 64, (2, 8), generator=g)
        proj = torch.randn(2, 8, cfg.hidden_size, generator=g)
        for m, o in ((jm, opt), (ref, ref_opt)):
            o.zero_grad()
            # (not pow(2).mean() of LayerNorm outputs: a loss of about 1 whatever the
            # weights, whose gradients are cancellation, 1.5e-4 off float64 in eager too)
            loss = (m(ids).last_hidden_state * proj).sum()
            loss.backward()
            o.step()
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=n)


# ------------------------------------------------------------ with dynamic shapes
def test_value_guards_with_symbolic_sizes():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    jfn = thunder_mlir.jit(f, dynamic=True)
    for n, s in ((3, 1), (5, 1), (5, -1), (7, -1), (3, 1)):
        x = (torch.rand(n) + 0.1) * s
        _same(jfn(x), f(x))
    assert thunder_mlir.cache_misses(jfn) == 2  # one symbolic program per branch


def test_a_value_computed_from_random_numbers_is_never_stale():
    # the prefix run and the program draw other numbers: the guard catches the change
    def f(x):
        r = torch.rand(())
        if r > 0.5:
            return x + 1, r
        return x - 1, r
    jfn = thunder_mlir.jit(f)
    x = torch.zeros(2)
    for _ in range(6):
        try:
            out, r = jfn(x)
        except thunder_mlir.DataDependentControlFlowError as e:  # refused, never wrong
            assert "random" in str(e)
            continue
        _same(out, x + 1 if r > 0.5 else x - 1)


def test_values_of_tensors_made_from_python_numbers_need_no_guard():
    def f(x):
        n = int(torch.div(x.shape[0], 2, rounding_mode="trunc"))
        return x[:n] + torch.tensor(3).item()
    jfn = _calls(f, [(torch.randn(4),), (torch.randn(4),)])
    info = thunder_mlir.cache_info(jfn)
    assert info["misses"] == 1 and "value_guards" not in info["entries"][0]


# ----------------------------------- transformers' eager experts path (torch.where per expert)
def _mixtral_eager_experts():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.MixtralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=64)
    cfg._experts_implementation = "eager"  # the loop over experts with torch.where(mask)
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(cfg)


def test_mixtral_eager_experts_forward_and_grads_match_eager():
    model = _mixtral_eager_experts()
    assert model.config._experts_implementation == "eager"
    jm = thunder_mlir.jit(model)
    for seed in (0, 1, 0):  # (0, 1, 2, 0) until stop 51: CI time
        ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
        model.zero_grad()
        want = model(ids).logits
        want.pow(2).mean().backward()
        want_grads = {n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None}
        model.zero_grad()
        got = jm(ids).logits
        got.pow(2).mean().backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for n, p in model.named_parameters():
            if n in want_grads:
                torch.testing.assert_close(p.grad, want_grads[n], rtol=1e-4, atol=1e-6,
                                           msg=n)
    info = thunder_mlir.cache_info(jm)
    assert info["misses"] >= 2, info["misses"]  # the routing (the sizes) changed
    sites = [s for e in info["entries"] for s in e["value_guards"]]
    assert any("the output size of torch.where" in s for s in sites), sites


def test_examine_refuses_a_value_with_a_clear_error():
    # examine traces without running anything: it names the line instead of guessing
    with pytest.raises(thunder_mlir.DataDependentControlFlowError,
                       match="bool\\(tensor\\) needs the tensor's data"):
        thunder_mlir.examine(branch, torch.ones(3))


# ------------------------------------------------- two ops Longformer uses (fixed here)
def test_tensor_where_method_takes_self_as_the_input():
    # x.where(cond, other) is torch.where(cond, x, other) (it was traced as where(x, ...))
    def f(x, m):
        return x.where(m, -x), x.where(m, 0.5)
    x, m = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    _calls(f, [(x, m)])


def test_new_ones_with_size_keyword():
    def f(x):
        return x.new_ones(size=x.size()) + x.new_zeros(size=(2, 1)).sum(), \
            x.new_ones((2,), dtype=torch.int64)
    _calls(f, [(torch.randn(2, 3),)])
    with pytest.raises(TypeError):
        thunder_mlir.jit(lambda x: x.new_ones(shape=(2,)))(torch.randn(2))


def test_a_constant_written_in_place_is_asked_of_the_program():
    def f(x):
        t = torch.tensor(3.0)
        t.add_(x.sum())  # no longer the constant 3
        return x * t.item()
    _calls(f, [(torch.ones(2),), (torch.zeros(2),)])


def test_item_of_several_elements_raises_eagers_error():
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        torch.ones(3).item()
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        thunder_mlir.jit(lambda x: x * x.item())(torch.ones(3))


def test_an_unbacked_size_read_as_an_int_is_specialized_there_alone():
    """Iterating over ``nonzero``'s rows reads its size as a Python int: that size is
    specialized (the guard size == traced, checked where nonzero runs) while
    ``masked_select``'s size stays a symbol: a new count of rows re-traces, a new
    masked_select size does not."""
    def f(x, m1, m2):
        total = x.new_zeros(x.shape[1])
        for r in torch.nonzero(m1).flatten():
            total = total + x[r]
        return total, torch.masked_select(x[:, 0], m2) * 2
    jfn = thunder_mlir.jit(f)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    misses = []
    for a, b in ((3, 2), (3, 4), (3, 5), (4, 2), (4, 6), (3, 3)):
        args = (x, _mask_rows(a), _mask_rows(b).flip(0))
        _same(jfn(*args), f(*args))
        misses.append(thunder_mlir.cache_misses(jfn))
    assert misses == [1, 1, 1, 2, 2, 2], misses
    [entry, _] = thunder_mlir.cache_info(jfn)["entries"]
    assert len(entry["unbacked_sizes"]) == 2, entry


def test_index_add_at_data_dependent_indices_is_traced_once():
    """transformers' eager MoE experts: gather the routed rows, scatter-add them back."""
    def f(x, m):
        idx = torch.nonzero(m).flatten()
        return torch.zeros(6, 3).index_add(0, idx, x[idx] * 2).sum(1)
    jfn = thunder_mlir.jit(f)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    for n in (2, 5, 3, 6):
        _same(jfn(x, _mask_rows(n).roll(n)), f(x, _mask_rows(n).roll(n)))
    assert thunder_mlir.cache_misses(jfn) == 1, thunder_mlir.cache_info(jfn)


# ------------------------------------ a value guard failing in the call that compiled
def _rows(x, mask):
    idx, = torch.where(mask)  # a data-dependent size
    return x[idx] * 2


class _Rows(torch.nn.Module):
    def forward(self, x, mask):
        return _rows(x, mask)


class _ScaledRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(3))

    def forward(self, x, mask):
        return _rows(x, mask) * self.scale


def _guard_inputs():
    """(x, mask) per call: the first selects one row (traced with a guessed size, whose
    guard fails in that same call: compiled again knowing it), the next 3 rows, then none."""
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(6, 3, generator=gen), _mask_rows(n).roll(2)) for n in (1, 3, 0)]


@pytest.mark.parametrize("kind", ["function", "module"])
def test_value_guard_failing_in_the_compiling_call_as_eager(kind):
    """Issue 48 B: a module's first call wraps its arguments as (flags, params, args,
    kwargs) for the trace; a value guard failing in that same call compiled again with them
    wrapped a second time (``forward() takes 3 positional arguments but 5 were given``).
    ``function.function_arguments`` alone wraps them now."""
    fn = _rows if kind == "function" else _Rows()
    jfn = thunder_mlir.jit(fn)
    for i, (x, m) in enumerate(_guard_inputs()):
        _same(jfn(x, m), fn(x, m))
        # (the first call's size 1 no longer fails the guessed trace's check, sizes 0 and
        # 1 being symbolic too: one program for the three sizes)
        assert thunder_mlir.cache_misses(jfn) == 1, thunder_mlir.cache_info(jfn)


def test_value_guard_failing_in_a_training_step_as_eager():
    """``jit(step)`` of a training step (module, optimizer, ``loss.backward()``) whose
    forward selects rows by a mask: loss and parameters as eager's at every call while the
    selected size changes (with gradients the size is specialized on values; its guard
    fails on later calls)."""
    import copy

    def step(model, opt, x, mask):
        loss = model(x, mask).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    torch.manual_seed(0)
    eager = _ScaledRows()
    mine = copy.deepcopy(eager)
    e_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    j_opt = torch.optim.SGD(mine.parameters(), lr=0.1)
    jstep = thunder_mlir.jit(step)
    for x, m in _guard_inputs():
        _same(jstep(mine, j_opt, x, m), step(eager, e_opt, x, m))
        torch.testing.assert_close(mine.scale, eager.scale)
    assert sum(thunder_mlir.cache_info(jstep._train._fn)["value_guards"].values()) >= 1


def _same_tree(a, b):
    """``_same`` for outputs holding dicts: sizes must be eager's ints and ``torch.Size``."""
    if isinstance(a, dict):
        assert type(b) is dict and a.keys() == b.keys(), (a, b)
        for k in a:
            _same_tree(a[k], b[k])
    elif isinstance(a, (tuple, list)) and not isinstance(a, torch.Size):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same_tree(x, y)
    else:
        _same(a, b)


@pytest.mark.parametrize("name,fn", [
    ("unique numel", lambda x: (torch.unique(x).float().sum(), torch.unique(x).numel())),
    ("nonzero shape and sizes", lambda x: (torch.nonzero(x).shape, torch.nonzero(x).size(0),
                                           [torch.nonzero(x).size(1),
                                            {"k": torch.nonzero(x).numel()}])),
    ("masked_select in containers", lambda x: (
        {"n": len(torch.masked_select(x, x > 0)), "twice": x[x > 0].shape[0] * 2},
        torch.masked_select(x, x > 0).size(), torch.masked_select(x, x > 0))),
    ("size expression", lambda x: (torch.unique(x).size(0) * torch.nonzero(x).size(0) - 1,)),
])
def test_data_dependent_sizes_in_outputs_are_ints(name, fn):
    """A size that reaches a Python output is eager's int (torch.Size for a shape), the
    size of this call, not the unbacked symbol (issue 46: ``u.numel()`` returned ``s0``)."""
    jfn = thunder_mlir.jit(fn)
    for x in (torch.tensor([1., 2, 2, 3, 0, -1]), torch.tensor([1., 2, 5, 6, 0, -1, 7, 7]),
              torch.tensor([4., 4, 0, 3, 3, 3])):
        _same_tree(jfn(x), fn(x))


def test_dynamic_input_sizes_in_outputs_are_ints():
    """Sizes of inputs traced as symbols (dynamic=True) reach outputs as this call's ints."""
    def fn(x):
        return x.shape, x.size(0) * 2, x.numel(), x.sum()
    jfn = thunder_mlir.jit(fn, dynamic=True)
    for n in (3, 5, 7):
        x = torch.ones(n, 2)
        _same_tree(jfn(x), fn(x))


# ------------------------------- t.item() of an integer tensor: a symbol (issue 48)
# (frontend/value_guards.py ``_value_symbol``): guarded by the comparisons it meets,
# specialized to its value where a tensor op, a float or a non-integer operation reads it


def test_item_compared_only_keeps_one_program_past_the_branch():
    # litgpt's sliding-window KV cache: the cache is sliced to max_pos + 1 while max_pos is
    # inside the window; every max_pos past it uses one program
    def f(cache, pos):
        max_pos = pos.max().item()
        if max_pos < 8:
            cache = cache[:, :max_pos + 1]
        return cache.softmax(-1) * 2
    cache = torch.randn(2, 8)
    jfn = _calls(f, [(cache, torch.tensor([p])) for p in (6, 7, 8, 9, 30, 7, 100)])
    # one program for 6 and 7 (the slice's length max_pos + 1 is a symbol), one for p >= 8
    assert thunder_mlir.cache_misses(jfn) == 2

    class Cache(torch.nn.Module):  # the same as a module's forward
        def forward(self, cache, pos):
            return f(cache, pos)
    jm = thunder_mlir.jit(Cache())
    for p in (9, 6, 40, 6):
        _same(jm(cache, torch.tensor([p])), f(cache, torch.tensor([p])))
    assert thunder_mlir.cache_misses(jm) == 2


def test_slice_by_item_is_one_program_for_every_length():
    # x[:n + 1] and x[n:] with n read from a tensor: symbolic lengths (value_guards.py
    # ``slice_by_value``), one trace for every n whose lengths are at least 2, as
    # torch.compile's unbacked symbols (XLA compiles each length's regions, not a trace)
    def f(x, pos):
        n = pos.max().item()
        head = x[None, :, :n + 1]
        tail = x[..., n:]
        return head.softmax(-1) * 2, tail.sum(-1), head.shape[-1]
    x = torch.randn(3, 12)
    # 11: a tail of length 1, specialized (a program of its own); 3 to 10 share one
    jfn = _calls(f, [(x, torch.tensor([0, v])) for v in (3, 5, 9, 2, 7, 11, 4, 10)])
    assert thunder_mlir.cache_misses(jfn) == 2

    def tail(x, pos):  # the XLA region reads n back from the length 12 - n alone
        return x[:, pos.max().item():].softmax(-1)
    jfn = thunder_mlir.jit(tail, recompile_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for v in (3, 8, 5):  # the third length passes the limit: XLA compiles per length
            _same(jfn(x, torch.tensor([v])), tail(x, torch.tensor([v])))
    assert thunder_mlir.cache_misses(jfn) == 1
    assert [w for w in caught if issubclass(w.category, RecompileWarning) and
            "3 distinct lengths" in str(w.message) and
            os.path.basename(w.filename) == os.path.basename(__file__)]

    def written(x, pos):  # a write into x reaches the slice (eager's view); one program
        n = pos.max().item()
        v = x[:, :n]
        x.mul_(2)
        return v + 1

    def write_into(x, pos):  # a write into the slice reaches x (specialized per value)
        n = pos.max().item()
        x[:, 1:n].add_(1)
        return x * 2, x[:, :n].stride()
    for fn, values, programs in ((written, (3, 5, 9, 4), 1), (write_into, (3, 5, 3), 2)):
        jfn = thunder_mlir.jit(fn)
        for v in values:
            x = torch.randn(3, 12)
            mine = x.clone()
            _same(jfn(mine, torch.tensor([v])), fn(x, torch.tensor([v])))
            _same(mine, x)
        assert thunder_mlir.cache_misses(jfn) == programs


def test_item_in_integer_arithmetic_is_eagers_int_at_every_call():
    def f(x, n):
        k = n.item()
        if k > 4:
            return x + 1, k + 1, k * 3 - 2, k // 2, k % 3, max(k, 3), -k
        return x - 1, k, 0, 0, 0, 0, 0
    x = torch.randn(3)
    jfn = _calls(f, [(x, torch.tensor(v)) for v in (5, 6, 9, 2, 3, 5, 70)])
    assert thunder_mlir.cache_misses(jfn) == 2  # one program per side of k > 4


@pytest.mark.parametrize("values", [(3, 5, 3), (-3, 0, 1, 2, 0)])
def test_item_read_as_a_value_is_specialized(values):
    def f(x, n):
        k = n.item()
        return (x * k, x[:k], torch.full((2,), k), k * 0.5, k / 4, 2 ** k, k & 3, k >> 1,
                abs(k), str(k), f"{k:>4}", k == 3.0, round(k), float(k), int(k),
                {3: "three"}.get(k), k in {0, 5}, k.bit_length(), divmod(k, 2))
    x = torch.randn(6)
    _calls(f, [(x, torch.tensor(v)) for v in values])


def test_item_compared_with_a_dynamic_size_is_exact():
    def f(x, n):
        k = n.item()
        if k < x.shape[0]:
            return x[k:] * 2
        return x + k
    jfn = thunder_mlir.jit(f, dynamic=True)
    for size, v in ((6, 3), (7, 3), (5, 9), (8, 2), (6, 4)):
        x = torch.randn(size)
        _same(jfn(x, torch.tensor(v)), f(x, torch.tensor(v)))
