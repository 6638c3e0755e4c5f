"""Index tensors out of range: eager raises, so the compiled program raises (issue 25's
"never a silent difference"; thunder_mlir/frontend/runtime_checks.py).

XLA clamps an out-of-range gather index and drops an out-of-range scatter update; before
the checks, each op below returned a result where eager raised (8 of 8). Each op is run
with index values in range, negative in range, negative out of range and past the end:
where eager raises, the jitted program raises the same exception type naming the user's
line, before returning or writing back anything; otherwise it returns eager's values.
The values come at run time (one compiled program per op serves all four).
"""

from __future__ import annotations


import pytest
import torch
from conftest import SWEEPS_ALL

import thunder_mlir

X = (3, 4)
OPS = {
    "getitem": lambda x, i: x[i],
    "getitem_2d": lambda x, i: x[:, i],
    "getitem_two_tensors": lambda x, i: x[i, i],
    "setitem": lambda x, i: x.clone().__setitem__(i, 1.0) or x,
    "setitem_intermediate": lambda x, i: (lambda y: (y.__setitem__(i, 0.0), y)[1])(x * 2),
    "index_select": lambda x, i: torch.index_select(x, 0, i),
    "gather": lambda x, i: torch.gather(x, 0, i.view(-1, 1).expand(-1, 4)),
    "scatter": lambda x, i: x.clone().scatter_(0, i.view(-1, 1).expand(-1, 4), 1.0),
    "scatter_add": lambda x, i: x.scatter_add(0, i.view(-1, 1).expand(-1, 4), x[:1]),
    "embedding": lambda x, i: torch.nn.functional.embedding(i, x),
    "index_add": lambda x, i: x.index_add(0, i, torch.ones(1, 4)),
    "index_copy": lambda x, i: x.index_copy(0, i, torch.ones(1, 4)),
    "index_fill": lambda x, i: x.index_fill(0, i, 1.0),
    "index_put": lambda x, i: x.index_put((i,), torch.ones(4)),
    "index_put_accumulate": lambda x, i: x.index_put((i,), torch.ones(4), accumulate=True),
}
VALUES = (1, -1, -4, 3, 7)  # in range, negative in range, then out of range


@pytest.mark.parametrize("name", OPS)
def test_index_out_of_range_raises_as_eager(name):
    fn = OPS[name]
    jitted = thunder_mlir.jit(fn)
    for v in VALUES:
        x, i = torch.randn(X), torch.tensor([v])
        try:
            want, eager_error = fn(x, i), None
        except (IndexError, RuntimeError) as e:
            want, eager_error = None, e
        if eager_error is None:
            torch.testing.assert_close(jitted(x, i), want, msg=lambda m: f"index {v}: {m}")
            continue
        with pytest.raises(type(eager_error)) as got:
            jitted(x, i)
        assert "test_index_bounds.py" in str(got.value), str(got.value)  # the user's line
        assert "out of" in str(got.value)
    assert thunder_mlir.cache_misses(jitted) == 1


def test_a_failed_check_writes_nothing_back():
    """The input written in place keeps its values when an index is out of range."""
    def f(buf, i):
        buf.add_(1)
        return buf[i]
    buf = torch.zeros(3)
    with pytest.raises(IndexError):
        thunder_mlir.jit(f)(buf, torch.tensor([3]))
    assert torch.equal(buf, torch.zeros(3))


def test_checks_with_autograd():
    """A program with a backward: in range it differentiates as eager, out of range it
    raises in the forward."""
    w = torch.randn(5, 3, requires_grad=True)
    f = thunder_mlir.jit(lambda w, i: torch.nn.functional.embedding(i, w).sum())
    f(w, torch.tensor([0, 4])).backward()
    torch.testing.assert_close(w.grad[[0, 4]], torch.ones(2, 3))
    with pytest.raises(IndexError):
        f(w, torch.tensor([5]))


def _cond(x, i):
    return torch.cond(x.sum() > -100, lambda x, i: x[i] * 2, lambda x, i: x[:1] + 1, (x, i))


def _cond_untaken(x, i):  # the branch that indexes is not taken: eager does not raise
    return torch.cond(x.sum() < -100, lambda x, i: x[i] * 2, lambda x, i: x[:1] + 1, (x, i))


def _while(x, i):  # the index grows with the iteration: out of range in a later one only
    from torch._higher_order_ops.while_loop import while_loop

    def body(k, acc):
        return k + 1, acc + torch.index_select(x, 0, i + k).sum()
    return while_loop(lambda k, acc: k < 2, body, (torch.tensor(0), torch.zeros(())))[1]


def _scan(x, i):
    from torch._higher_order_ops.scan import scan

    def combine(c, row):
        return c + row[i + 1].sum(), c * 1
    return scan(combine, torch.zeros(()), x)[0]


def _checkpoint(x, i):
    from torch.utils.checkpoint import checkpoint
    a, b = checkpoint(lambda x, i: (torch.index_select(x, 0, i).sin(), x.cos()), x, i,
                      use_reentrant=False)  # (two results: a checkpoint that returned
    return a.sum() + b.sum()                   # two values raised an AttributeError)


REGIONS = {"cond": _cond, "cond_untaken": _cond_untaken, "while_loop": _while,
           "scan": _scan, "checkpoint": _checkpoint}


def _eager_outcome(fn, *args):
    try:
        return fn(*args), None
    except (IndexError, RuntimeError) as e:
        return None, e


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", REGIONS)
def test_index_checked_inside_regions(name):
    """An index used inside a torch.cond branch, a while_loop/scan body or a checkpointed
    function is checked where the region runs: eager's values in range, eager's exception
    out of range (a loop: in whichever iteration), nothing where the branch is not taken."""
    fn = REGIONS[name]
    jitted = thunder_mlir.jit(fn)
    for v in (0, 1, 2, 3):
        x, i = torch.randn(X), torch.tensor([v])
        want, eager_error = _eager_outcome(fn, x, i)
        if eager_error is None:
            torch.testing.assert_close(jitted(x, i), want, msg=lambda m: f"index {v}: {m}")
            continue
        with pytest.raises(type(eager_error)) as got:
            jitted(x, i)
        assert "test_index_bounds.py" in str(got.value), str(got.value)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "grad_checkpoint"])
def test_index_checked_in_gradient_programs(api):
    """``thunder_mlir.grad``/``value_and_grad`` programs carry the checks too: eager's
    gradients in range, eager's exception out of range."""
    fn = _checkpoint if api == "grad_checkpoint" else \
        lambda x, i: (x[i] * 2).sum() + torch.index_select(x, 0, i).sum()
    transform = thunder_mlir.value_and_grad if api == "value_and_grad" else thunder_mlir.grad
    jitted = transform(fn)
    for v in (2, -1, 3):
        x, i = torch.randn(X), torch.tensor([v])
        xr = x.clone().requires_grad_()
        try:
            out = fn(xr, i)
            out.backward()
        except (IndexError, RuntimeError) as e:
            with pytest.raises(type(e)):
                jitted(x, i)
            continue
        got = jitted(x, i)
        grads = got[1] if api == "value_and_grad" else got
        torch.testing.assert_close(grads[0], xr.grad)
        if api == "value_and_grad":
            torch.testing.assert_close(got[0], out.detach())


# ops whose eager CPU kernel does not check an out-of-range value of this operand and reads
# memory outside the tensor (its result is undefined): the jitted program may raise instead,
# never return silently where eager raises
EAGER_UNCHECKED = {
    "take_along_dim": "eager's CPU take_along_dim returns a value read out of bounds "
                      "(torch 2.13: take_along_dim(x5x5, 10000-index, 0) returns a number)",
    "nn.functional.ctc_loss": "eager's CTC reads log_probs at a target class out of range",
}
BIG = 10_000  # out of range for every operand of op_db's CPU samples (a few elements)


def _integer_operand_cases():
    """From PyTorch's op_db: each op's first eager-valid float32 sample with an integer
    tensor operand (an index, a class target, a count, an offset, a weight), the sample's
    program over its tensors, and the positions of its integer tensors."""
    import test_opinfo as oi

    def ints(tensors):
        return [k for k, t in enumerate(tensors) if t.numel() > 0 and
                t.dtype in (torch.int64, torch.int32)] or None

    yield from oi.first_samples(ints)


def _outcome(fn, tensors):
    try:
        return fn(*[t.clone() for t in tensors]), None
    except Exception as e:  # noqa: BLE001 - the outcome compared
        return None, e


@pytest.mark.filterwarnings("ignore")
def test_opdb_integer_operands_out_of_range_as_eager():
    """The generator the index checks lacked: every op of PyTorch's op_db whose CPU sample
    takes an integer tensor is run with one element of each such operand set to +10000
    and to -10000, eagerly and through one jitted program per op (the values are run-time
    inputs). Where eager raises, the jitted call raises eager's exception type, never a
    result (XLA clamps gather indices and drops scatter updates out of range); where eager
    returns, the values match. On its first run it found 29 cases in 15 ops returning a
    result (or another exception type) where eager raises: cross_entropy, nll_loss,
    multi_margin_loss, multilabel_margin_loss, embedding_bag, scatter_reduce x 5,
    index_select/index_add of a 0-d tensor, put, cov's weights."""
    import test_opinfo as oi

    problems, n_ops = [], 0
    for op, name, program, tensors, ints in _integer_operand_cases():
        n_ops += 1
        jitted = thunder_mlir.jit(program, sharp_edges="allow")
        for k in ints:
            for v in (None, BIG, -BIG):
                ts = list(tensors)
                if v is not None:
                    ts[k] = ts[k].clone()
                    ts[k].view(-1)[0] = v
                want, eager_error = _outcome(program, ts)
                got, jit_error = _outcome(jitted, ts)
                case = f"{name} (operand {k} = {v})"
                if eager_error is not None and jit_error is None:
                    problems.append(f"{case}: eager raises {type(eager_error).__name__} "
                                    f"({eager_error}), the jitted program returns a result")
                elif eager_error is not None and not isinstance(jit_error, type(eager_error)):
                    problems.append(f"{case}: eager raises {type(eager_error).__name__}, the "
                                    f"jitted program {type(jit_error).__name__}: {jit_error}")
                elif eager_error is None and jit_error is not None:
                    if name not in EAGER_UNCHECKED:
                        problems.append(f"{case}: the jitted program raises "
                                        f"{type(jit_error).__name__}: {jit_error}")
                elif eager_error is None and name not in EAGER_UNCHECKED:
                    try:
                        oi._compare(got, want, oi._tolerance(op, torch.float32))
                    except AssertionError as e:
                        problems.append(f"{case}: values differ: {e}")
    print(f"op_db ops with an integer tensor operand: {n_ops}")
    assert n_ops >= (40 if SWEEPS_ALL else 7), n_ops  # the draw itself still finds the ops
    assert not problems, "\n".join(problems)
