"""Tensors a checkpointed function or a ``torch.cond`` branch reads from outside it, written
after the region (issue 25; frontend/region_reads.py).

* ``torch.utils.checkpoint`` re-runs its function in the backward on the memory as it is
  then, with no version check: a write after the checkpoint changes eager's gradient. The
  jitted backward recomputed from the values at the checkpoint (a silently wrong gradient
  where the read went through ``.data``), or raised eager's "modified by an inplace
  operation" where eager runs.
* ``torch.cond``'s autograd node saves every tensor its branches read (Dynamo lifts them
  as operands), version-checked: eager's backward raises after such a write; the jitted
  one returned gradients.

The generator: every op of PyTorch's op_db whose first eager-valid float32 CPU sample has
two floating-point operands, run inside a non-reentrant checkpoint that reads the second
operand from its closure, which is written after the checkpoint: values, the gradient and
the written tensor as eager's, or the same exception type, or the jit's clear refusal. (The
same draw through ``torch.cond`` is not a generator here: eager's cond runs each program
through Dynamo, ~1.5 s an op, and raises Dynamo's own errors for a third of them.)
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from conftest import SWEEPS_ALL
from test_data_reads import _float_pair_cases, _leaf_and_buffer, _same

REFUSAL = "is written later in the function"  # (pipeline.py: a read not paired)


def _ckpt_closure(a, buf):  # eager's recomputation reads the written buffer
    y = checkpoint(lambda a: (a * buf).sin(), a, use_reentrant=False)
    buf.mul_(0.5)
    return y


def _ckpt_data_closure(a, buf):  # was silently wrong: the value at the checkpoint
    y = checkpoint(lambda a: (a * buf.data).sin(), a, use_reentrant=False)
    buf.mul_(0.5)
    return y


def _ckpt_reentrant_closure(a, buf):
    y = checkpoint(lambda a: (a * buf.data).sin(), a, use_reentrant=True)
    buf.mul_(0.5)
    return y


def _ckpt_reentrant_arg_written(a, buf):  # a saved argument, version-checked: eager raises
    h = a * 2
    y = checkpoint(lambda h: h.sin() * 3, h, use_reentrant=True)
    h.mul_(0.5)
    return y


def _ckpt_intermediate_closure(a, buf):  # a value that requires grad, written after
    h = a * buf
    y = checkpoint(lambda a: a * h.exp(), a, use_reentrant=False)
    h.add_(1)
    return y


def _ckpt_view_written(a, buf):  # the write goes through a view of the read tensor
    y = checkpoint(lambda a: a.cos() * buf, a, use_reentrant=False)
    buf[1:].mul_(-2)
    buf.t()[0].add_(3)
    return y


def _two_ckpts_then_write(a, buf):
    y = checkpoint(lambda a: a * buf, a, use_reentrant=False)
    z = checkpoint(lambda a: (a + buf).tanh(), a, use_reentrant=False)
    buf.mul_(3)
    return y + z


def _ckpt_write_between(a, buf):  # the second checkpoint reads the first write
    y = checkpoint(lambda a: a * buf, a, use_reentrant=False)
    buf.add_(1)
    z = checkpoint(lambda a: a * buf, a, use_reentrant=False)
    buf.mul_(2)
    return y + z


def _ckpt_linear_module(a, buf):  # parameters read inside, a buffer written after
    lin = torch.nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(buf.t() / 10)
        lin.bias.fill_(0.5)
    lin.requires_grad_(False)
    y = checkpoint(lambda a: lin(a).relu(), a, use_reentrant=False)
    with torch.no_grad():
        lin.weight.mul_(2)
    return y


def _ckpt_arg_data(a, buf):  # a `.data` read outside, passed in
    y = checkpoint(lambda a, b: (a * b).sin(), a, buf.data, use_reentrant=False)
    buf.mul_(0.5)
    return y


def _cond_closure_written(a, buf):  # eager's cond node saves buf: the backward raises
    y = torch.cond(a.sum() > -100, lambda a: a * buf, lambda a: a * 2 * buf, (a,))
    buf.mul_(0.5)
    return y


def _cond_data_closure_written(a, buf):
    y = torch.cond(a.sum() > -100, lambda a: a * buf.data, lambda a: a - buf.data, (a,))
    buf.mul_(0.5)
    return y


def _cond_unsaved_read_written(a, buf):  # saved by the cond node though `add` needs none
    y = torch.cond(a.sum() > 100, lambda a: a + buf, lambda a: a - buf, (a,))
    buf.mul_(0.5)
    return y


def _cond_operand_written(a, buf):
    h = a * 3
    y = torch.cond(a.sum() > -100, lambda h: h.sin(), lambda h: h.cos(), (h,))
    h.mul_(0.5)
    return y


def _cond_read_not_written(a, buf):
    y = torch.cond(a.sum() > -100, lambda a: a * buf.data, lambda a: a - buf, (a,))
    z = buf * 2  # a read after the cond, no write
    return y, z


def _cond_write_under_no_grad(a, buf):  # no graph for the write to break: both run
    with torch.no_grad():
        y = torch.cond(a.sum() > -100, lambda a: a * buf, lambda a: a - buf, (a,))
    buf.mul_(0.5)
    return y * a


IDIOMS = [_ckpt_closure, _ckpt_data_closure, _ckpt_reentrant_closure,
          _ckpt_reentrant_arg_written, _ckpt_intermediate_closure, _ckpt_view_written,
          _two_ckpts_then_write, _ckpt_write_between, _ckpt_linear_module, _ckpt_arg_data,
          _cond_closure_written, _cond_data_closure_written, _cond_unsaved_read_written,
          _cond_operand_written, _cond_read_not_written, _cond_write_under_no_grad]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fn", IDIOMS, ids=lambda f: f.__name__.strip("_"))
def test_region_read_then_written_as_eager(fn):
    _same(fn, _leaf_and_buffer)


@pytest.mark.filterwarnings("ignore")
def test_data_read_in_a_while_loop_written_after_is_refused():
    """A `.data` read inside a while_loop body cannot be paired with its final value: a
    clear error when a backward is needed (was: the value at the op), none otherwise."""
    import thunder_mlir
    from torch._higher_order_ops.while_loop import while_loop

    def fn(a, buf):
        _, x = while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * buf.data),
                          (torch.tensor(0), a))
        buf.mul_(0.5)
        return x

    with pytest.raises(NotImplementedError, match=REFUSAL):
        thunder_mlir.jit(fn)(*_leaf_and_buffer())
    a, buf = _leaf_and_buffer()
    a.requires_grad_(False)
    want = fn(a.clone(), buf.clone())
    torch.testing.assert_close(thunder_mlir.jit(fn)(a.clone(), buf.clone()), want)


def _region_cases(wrap):
    """op_db's two-float-operand programs (test_data_reads._float_pair_cases), the first
    operand requiring grad, run through ``wrap(program, tensors, k0, k1)``."""
    import test_opinfo as oi

    for op, name, program, tensors, (k0, k1) in _float_pair_cases():
        def make(tensors=tensors, k0=k0):
            ts = [t.clone() for t in tensors]
            ts[k0].requires_grad_()
            return ts

        yield name, wrap(program, k0, k1), make, k0, oi._tolerance(op, torch.float32)


def _checkpointed(program, k0, k1):
    def fn(*ts):
        ts = list(ts)
        buf = ts[k1]

        def inner(x):  # the second operand read from the closure
            return program(*[x if k == k0 else t for k, t in enumerate(ts)])

        out = checkpoint(inner, ts[k0], use_reentrant=False)
        buf.mul_(-1.5)
        return out
    return fn


# open differences, printed by the test: each still differs silently (none now: cov's
# weight check and linear_cross_entropy.chunked's ctx tensors, which eager's recomputation
# redoes or keeps, are refused: region_reads.stale_recomputation)
KNOWN: dict[str, str] = {}
# the jit's clear refusals (pipeline.py): a write inside a checkpoint into outside memory
# (eager's recomputation writes it again), a read it cannot pair with its final value
REFUSALS = ("writes it a second time", REFUSAL,
            "thunder_mlir's backward does not reproduce this")


@pytest.mark.filterwarnings("ignore")
def test_opdb_checkpoint_reads_operand_written_after_as_eager():
    """The generator (module docstring): per op, values, the gradient and the written
    tensor as eager's, or the same exception type; the count of each outcome printed."""
    import thunder_mlir
    from test_data_reads import _run

    problems, known, refused, ran, raised, n = [], [], [], 0, 0, 0
    for name, fn, make, k0, tol in _region_cases(_checkpointed):
        n += 1
        got = _run(thunder_mlir.jit(fn), make, k0)
        if isinstance(got[3], NotImplementedError) and any(r in str(got[3])
                                                           for r in REFUSALS):
            refused.append(name)
            continue
        try:
            eager = _run(fn, make, k0)
            _same(fn, make, grad_of=k0, tol=tol)
            ran += eager[3] is None
            raised += eager[3] is not None
        except AssertionError as e:
            (known if name in KNOWN else problems).append(f"{name}: {str(e)[:300]}")
    print(f"checkpointed: {n} ops; eager ran {ran}, eager raised {raised} (the jit "
          f"too); refused with a clear error: {len(refused)} {refused}; differing: "
          f"{len(problems)}; known to differ: {len(known)}")
    for k in known:
        print("  known (KNOWN):", k.splitlines()[0])
    assert n >= (100 if SWEEPS_ALL else 18), n
    assert not problems, "\n".join(problems)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fn", [_ckpt_reentrant_closure, _ckpt_data_closure],
                         ids=["reentrant", "non-reentrant"])
def test_checkpoint_recomputes_from_written_memory_with_backward(fn):
    """``.backward()`` (a reentrant checkpoint refuses ``autograd.grad``): the leaf's
    ``.grad`` is eager's, computed from the buffer as written after the checkpoint."""
    import thunder_mlir

    grads = []
    for f in (fn, thunder_mlir.jit(fn)):
        a, buf = _leaf_and_buffer()
        f(a, buf).sum().backward()
        grads.append(a.grad)
    torch.testing.assert_close(grads[1], grads[0])


def test_checkpointed_write_into_outside_memory_is_refused():
    """Eager's backward re-runs a checkpointed BatchNorm and updates its running statistics
    a second time: a clear error when a backward is needed (was: one update, silently);
    without grad both update once."""
    import thunder_mlir

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(3)

        def forward(self, x):
            return checkpoint(self.bn, x, use_reentrant=False)

    with pytest.raises(NotImplementedError, match="writes it a second time"):
        thunder_mlir.jit(Block())(torch.randn(4, 3, requires_grad=True))
    blocks = [Block(), Block()]
    x = torch.randn(4, 3)
    with torch.no_grad():
        blocks[0](x)
        thunder_mlir.jit(blocks[1])(x)
    bns = [b.bn for b in blocks]
    torch.testing.assert_close(bns[1].running_var, bns[0].running_var)


class _KeepsGradOnCtx(torch.autograd.Function):
    """``a * w`` whose backward reads a tensor the forward kept on ctx (not saved): eager's
    checkpoint recomputation does not replace it (as linear_cross_entropy's chunked path)."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.w_at_forward = w.clone()
        return a * w

    @staticmethod
    def backward(ctx, g):
        return g * ctx.w_at_forward, None


def _ckpt_index_written(a, idx):  # eager's recomputation checks the written index
    y = checkpoint(lambda a: a[idx].sin(), a, use_reentrant=False)
    idx.add_(5)
    return y


def _ckpt_index_written_in_range(a, idx):  # the same, written in range: eager runs
    y = checkpoint(lambda a: a[idx].sin(), a, use_reentrant=False)
    idx.add_(1)
    return y


def _ckpt_index_other_written(a, idx):  # the check reads idx; only `a`'s buffer written
    buf = torch.ones(3)
    y = checkpoint(lambda a: a[idx].sin() * buf, a, use_reentrant=False)
    buf.mul_(2)
    return y


def _ckpt_ctx_kept_written(a, w):  # a user's Function: the jit traces it as eager runs it
    y = checkpoint(lambda a: _KeepsGradOnCtx.apply(a, w), a, use_reentrant=False)
    w.mul_(-1.5)
    return y


def _ckpt_chunked_loss_written(a, w):  # a torch op (custom op) keeping its gradient on ctx
    t = torch.tensor([1, 0])
    y = checkpoint(lambda a: torch.nn.functional.linear_cross_entropy(
        a, w, t, options=torch.nn.LinearCrossEntropyOptions()), a, use_reentrant=False)
    w.mul_(-1.5)
    return y


def _ckpt_ctx_kept_not_written(a, w):
    return checkpoint(lambda a: _KeepsGradOnCtx.apply(a, w).exp(), a, use_reentrant=False)


def _index_case():
    torch.manual_seed(0)
    return [torch.randn(6, requires_grad=True), torch.tensor([0, 2, 1])]


def _ctx_case():
    torch.manual_seed(0)
    return [torch.randn(3, requires_grad=True), torch.randn(3)]


def _loss_case():
    torch.manual_seed(0)
    return [torch.randn(2, 3, requires_grad=True), torch.randn(4, 3)]


STALE = "thunder_mlir's backward does not reproduce this"


@pytest.mark.parametrize("fn,make", [
    (_ckpt_index_written, _index_case), (_ckpt_index_written_in_range, _index_case),
    pytest.param(_ckpt_chunked_loss_written, _loss_case, marks=pytest.mark.skipif(
        not hasattr(torch.nn.functional, "linear_cross_entropy"),
        reason=f"torch {torch.__version__} has no F.linear_cross_entropy (torch 2.13 has): "
               "the torch op keeping tensors on its autograd ctx is its chunked path"))],
    ids=["index-check", "index-check-in-range", "ctx-tensor"])
def test_checkpoint_redoing_what_recomputation_skips_is_refused(fn, make):
    """Inside a checkpoint, a value check (eager's recomputation checks the written index
    again, and raises in the backward for one out of range) or an op keeping tensors on its
    autograd ctx (kept from the forward by eager's recomputation) reads memory written after
    the checkpoint: a clear error when a backward is needed (was: the backward recomputed
    from the written memory without the check, or with the ctx tensor recomputed)."""
    import thunder_mlir
    from test_data_reads import _run

    got = _run(thunder_mlir.jit(fn), make)
    assert isinstance(got[3], NotImplementedError) and STALE in str(got[3]), got[3]
    assert "test_region_reads.py" in str(got[3])  # the user's line
    with torch.no_grad():  # no backward: eager never recomputes; both run alike
        ins = make()
        want = fn(*[t.clone() for t in ins])
        torch.testing.assert_close(thunder_mlir.jit(fn)(*[t.clone() for t in ins]), want)


@pytest.mark.parametrize("fn,make", [(_ckpt_index_other_written, _index_case),
                                     (_ckpt_ctx_kept_not_written, _ctx_case),
                                     (_ckpt_ctx_kept_written, _ctx_case)],
                         ids=["index-check-other-write", "ctx-tensor-unwritten",
                              "user-function-ctx-tensor"])
def test_checkpoint_check_or_ctx_tensor_without_a_later_write_runs(fn, make):
    """The refusal above needs a write into memory the check or the op reads: a checkpoint
    whose check reads unwritten memory, or whose ctx-keeping op's operands are not written,
    runs and matches eager. A user's ``autograd.Function`` keeping a tensor on ctx is traced
    with its own backward, which reads the ctx tensor from the forward as eager's does."""
    _same(fn, make)


@pytest.mark.parametrize("fn", [lambda a, buf: a * buf.data,
                                lambda a, buf: checkpoint(lambda a: (a * buf).sin(), a,
                                                          use_reentrant=False)],
                         ids=["data", "checkpoint"])
def test_input_written_between_call_and_backward_is_refused(fn):
    """Eager's backward reads an input read through `.data` or by a checkpoint as it is
    when the backward runs; the compiled backward read it as it was at the call (the
    `.data` case returned eager's gradient of the old values, silently). A write between
    the two now makes the backward raise; without one it matches eager."""
    import thunder_mlir

    jf = thunder_mlir.jit(fn)
    a, buf = _leaf_and_buffer()
    y = jf(a, buf)
    buf.mul_(2)
    with pytest.raises(RuntimeError, match="written in place after the call"):
        y.sum().backward()
    grads = []
    for f in (fn, jf):
        a, buf = _leaf_and_buffer()
        f(a, buf).sum().backward()
        grads.append(a.grad)
    torch.testing.assert_close(grads[1], grads[0])
