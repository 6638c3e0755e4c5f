"""An op's result, then its operands written in place (issue 25).

Eager's result of an out-of-place op is a new tensor: writing its operands afterwards
does not change it. Where the compiled program returns an input unchanged (``x.clone()``
is the identity on SSA values; ``triangular_solve``'s ``cloned_coefficient``,
``x.to(dtype, copy=True)``), the runtime handed back the input tensor itself, and the
write-back of a later in-place update reached the result: ``y = x.clone(); x.mul_(2);
return y`` returned ``2 * x``. The runtime now copies such outputs before the write-backs
(``CacheEntry.fresh_outputs``).

The generator: every op of PyTorch's op_db whose first eager-valid float32 CPU sample has a
floating-point tensor operand; every float operand is an input written (``mul_(-1.5)``)
after the op. Outputs and the written inputs as eager's, with and without autograd.
"""

from __future__ import annotations

import pytest
import torch
from conftest import SWEEPS_ALL

import thunder_mlir


def _clone_then_write(x):
    y = x.clone()
    x.mul_(2)
    return y


def _copy_to_then_write(x):
    y = x.to(torch.float32, copy=True)
    x.add_(1)
    return y


def _contiguous_clone_then_write_view(x):  # the write goes through a view of the input
    y = x.contiguous().clone()
    x[0].fill_(7)
    return y, x.sum()


def _solve_coefficient_then_write(x):
    a = torch.eye(3) + x[:3, :3].triu()
    y = torch.triangular_solve(x[:, :1][:3], a).cloned_coefficient
    return y, a.mul_(2)


def _same_value_twice(x):  # two outputs of one value, then the input written
    y = x.clone()
    z = x.clone()
    x.sub_(3)
    return y, z


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("fn", [_clone_then_write, _copy_to_then_write,
                                _contiguous_clone_then_write_view,
                                _solve_coefficient_then_write, _same_value_twice],
                         ids=lambda f: f.__name__.strip("_"))
def test_result_then_input_written_as_eager(fn, grad):
    x = torch.linspace(-1, 1, 12).view(4, 3)
    xs = [x.clone(), x.clone()]
    with torch.set_grad_enabled(grad):
        want = fn(xs[0])
        got = thunder_mlir.jit(fn)(xs[1])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(xs[1], xs[0])


# open differences (issue 25), printed by the test: none now. Found by this generator and
# fixed: views not recorded as views (ravel, unsafe_chunk/unsafe_split, meshgrid,
# linalg.diagonal, H/mH), running statistics ATen writes without a version bump
# (native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update)
KNOWN: dict[str, str] = {}


@pytest.mark.filterwarnings("ignore")
def test_opdb_result_then_operands_written_as_eager():
    """The generator (module docstring): per op, outputs and written inputs as eager's, or
    the same exception type; counts printed."""
    import test_opinfo as oi

    def floats(tensors):
        ks = [k for k, t in enumerate(tensors) if t.dtype is torch.float32 and t.numel()]
        return ks or None

    problems, known, n, raised = [], [], 0, 0
    for op, name, program, tensors, ks in oi.first_samples(floats, n=4):
        n += 1

        def fn(*ts, program=program, ks=ks):
            out = program(*ts)
            for k in ks:
                ts[k].mul_(-1.5)
            return out

        def run(f):
            ts = [t.clone() for t in tensors]
            try:
                out = f(*ts)
            except Exception as e:  # noqa: BLE001 - compared below
                return None, None, e
            return out, ts, None

        want, got = run(fn), run(thunder_mlir.jit(fn))
        if want[2] is not None or got[2] is not None:
            raised += 1
            if want[2] is None and "thunder_mlir" not in type(got[2]).__module__:
                problems.append(f"{name}: eager ran; the jit raised {got[2]!r}"[:300])
            continue
        try:
            if op.name not in oi._UNDEFINED_VALUES:  # (uninitialized memory)
                torch.testing.assert_close(got[0], want[0], equal_nan=True,
                                           **oi._tolerance(op, torch.float32))
            torch.testing.assert_close(got[1], want[1], equal_nan=True)
        except AssertionError as e:
            (known if name in KNOWN else problems).append(f"{name}: {str(e)[:300]}")
    print(f"op_db ops with a float operand: {n}; raised (eager or the jit's clear "
          f"error): {raised}; differing: {len(problems)}; known to differ: {len(known)}")
    for k in known:
        print("  known (KNOWN):", k.splitlines()[0])
    assert n >= (300 if SWEEPS_ALL else 60), n
    assert not problems, "\n".join(problems)


def _ravel_then_write(x):
    y = x.ravel()
    x.mul_(2)
    return y


def _meshgrid_then_write(x):
    g = torch.meshgrid(x[0], x[:, 1], indexing="xy")
    x[0].add_(5)
    return g


def _unsafe_chunk_then_write(x):
    a, b = torch.unsafe_chunk(x, 2)
    x.mul_(2)
    return a, b


def _write_through_ravel(x):
    x.ravel().add_(3)
    return x.mH


def _aten_batch_norm_then_write(x):
    mean, var = x[0].clone(), x[1].clone().abs()
    torch.native_batch_norm(x, None, None, mean, var, True, 0.1, 1e-5)
    mean.mul_(-1.5)
    return mean, var


@pytest.mark.parametrize("fn", [_ravel_then_write, _meshgrid_then_write,
                                _unsafe_chunk_then_write, _write_through_ravel,
                                _aten_batch_norm_then_write],
                         ids=lambda f: f.__name__.strip("_"))
def test_view_or_aten_write_then_written_as_eager(fn):
    """Views eager returns (a later write reaches them) and ATen's undeclared writes
    (running statistics), found by the generator above: each failed on the previous tree."""
    x = torch.linspace(-1, 1, 12).view(4, 3)
    xs = [x.clone(), x.clone()]
    want = fn(xs[0])
    got = thunder_mlir.jit(fn)(xs[1])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(xs[1], xs[0])


def test_write_the_twin_replay_cannot_run_still_moves_the_version():
    """``buf * b`` saves ``buf``; ``buf[torch.tensor(True)] = v`` (a 0-d bool index, which
    no meta replay runs) writes it: eager's backward raises "modified by an inplace
    operation", the jitted one returned gradients (fuzzer programs 999-1000)."""
    def fn(b, buf):
        v = buf * b
        buf[torch.tensor(True), torch.tensor([2])] = 0.5
        return v

    for f in (fn, thunder_mlir.jit(fn)):
        b = torch.ones(3, 4, requires_grad=True)
        y = f(b, torch.randn(3, 4))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# ------------------------------------------- saved for backward, then written (issue 46)
MODIFIED = "one of the variables needed for gradient computation has been modified by an " \
    "inplace operation"


def _saved_then_written(x):
    y = x * 2
    z = y.sin()   # saves y
    y.mul_(3)
    return z


def _result_saved_then_written(x):
    y = x.exp()   # saves its result
    y[0] = 1.0
    return y


def _view_saved_then_base_written(x):
    y = x * 2
    z = y[1:].tanh()
    y.add_(1)
    return z


def _saved_then_written_without_grad(x):
    y = x * 2
    z = y * y
    with torch.no_grad():
        y.zero_()
    return z


def _written_then_saved(x):  # eager runs it: the write comes before the op saves y
    y = x * 2
    y.mul_(3)
    return y.sin()


SAVED_PROGRAMS = [_saved_then_written, _result_saved_then_written,
                  _view_saved_then_base_written, _saved_then_written_without_grad,
                  _written_then_saved]
# outputs the caller writes after the call, before the backward: eager's graph saved some
AFTER_CALL = {
    "exp result": (lambda x: x.exp(), 0),
    "saved intermediate returned": (lambda x: (lambda y: (y.sin(), y))(x * 2), 1),
    "base of a saved view": (lambda x: (lambda y: (y[1:].sin(), y))(x * 2), 1),
    "view of a saved result": (lambda x: torch.tanh(x * 2)[0:2], 0),
    "reshaped sigmoid": (lambda x: (x * 2).sigmoid().view(2, 2), 0),
    "not saved (mul by a constant)": (lambda x: x * 2, 0),
    "not saved (sin's result)": (lambda x: (lambda y: (y.sin(), y))(x * 2), 0),
}


def _backward_outcome(fn, x, write=None):
    """The gradient of ``x``, or eager's in-place error, for fn's outputs summed (output
    ``write`` multiplied in place by 2 after the call)."""
    try:
        out = fn(x)
        out = list(out) if isinstance(out, tuple) else [out]
        if write is not None:
            out[write].mul_(2)
        sum(o.sum() for o in out).backward()
    except RuntimeError as e:
        assert MODIFIED in str(e), e
        return "modified"
    return x.grad


def _same_outcome(fn, write=None):
    x = torch.randn(4)
    e = _backward_outcome(fn, x.clone().requires_grad_(), write)
    j = _backward_outcome(thunder_mlir.jit(fn), x.clone().requires_grad_(), write)
    if isinstance(e, str) or isinstance(j, str):
        assert e == j, (e, j)
    else:
        torch.testing.assert_close(j, e)


@pytest.mark.parametrize("fn", SAVED_PROGRAMS, ids=lambda f: f.__name__)
def test_saved_for_backward_then_written_raises_as_eager(fn):
    """A tensor eager's graph saves, written in place later in the function: eager's
    backward raises "modified by an inplace operation"; so does the jit's (never a silent
    gradient); a write before the op saves runs."""
    _same_outcome(fn)


@pytest.mark.parametrize("name", list(AFTER_CALL))
def test_output_saved_for_backward_written_after_the_call_raises_as_eager(name):
    """An output eager's graph saves (exp's result, a view of a saved tensor, the base of
    one) written by the caller between the call and the backward: eager's backward raises;
    the jit's read its own residuals and returned a gradient (issue 46). Outputs eager does
    not save stay writable."""
    fn, write = AFTER_CALL[name]
    _same_outcome(fn, write)
