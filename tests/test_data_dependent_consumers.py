"""Ops applied to a tensor whose leading size is data-dependent (``x[mask]``: an unbacked
size, ir/symbolic.py), traced at one size and called again at 0, 1 and larger sizes.

Data-dependent sizes stand for every size >= 0, so a decision on 0 or 1 (a reduction
without identity over an empty dimension, the number of pieces of ``chunk``) must record a
guard, and a later call on the other side of it must trace again and do what eager does:
eager's values, or eager's error. Before this sweep, ``amax``/``argmax``/``min()`` over a
data-dependent size that became 0 returned ``-inf``/0 where eager raises, ``max(0)`` failed
inside XLA, and ``chunk`` raised an internal error. Each op runs one sequence of sizes in
CI (the sequences alternate over the ops); ``THUNDER_MLIR_SLOW_TESTS=1`` runs all four.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir

D = 4
OPS = {
    "view(-1)": lambda y: y.view(-1),
    "reshape(-1, 2)": lambda y: y.reshape(-1, 2),
    "expand": lambda y: y[:, None, :].expand(-1, 3, -1),
    "broadcast": lambda y: y + torch.ones(1, D),
    "squeeze(0)": lambda y: y.squeeze(0),
    "squeeze()": lambda y: y.squeeze(),
    "t() @": lambda y: y.t() @ y,
    "@ t()": lambda y: y @ y.t(),
    "sum(0)": lambda y: y.sum(0),
    "mean(0)": lambda y: y.mean(0),
    "amax(0)": lambda y: y.amax(0),
    "amin()": lambda y: y.amin(),
    "max(0)": lambda y: y.max(0).values,
    "min()": lambda y: y.min(),
    "argmax(0)": lambda y: y.argmax(0),
    "argmin()": lambda y: y.argmin(),
    "aminmax": lambda y: torch.aminmax(y, dim=0).max,
    "softmax(0)": lambda y: y.softmax(0),
    "logsumexp(0)": lambda y: y.logsumexp(0),
    "var(0)": lambda y: y.var(0),
    "cat": lambda y: torch.cat([y, y], 0),
    "cumsum": lambda y: y.cumsum(0),
    "sort": lambda y: y.sort(0).values,
    "flip": lambda y: y.flip(0),
    "y[1:]": lambda y: y[1:],
    "y[-1]": lambda y: y[-1],
    "chunk": lambda y: torch.cat(y.chunk(2, 0), 0) * 2,
    "split": lambda y: torch.cat(y.split(1, 0), 0) * 2,
    "unbind": lambda y: sum(y.unbind(0)) if y.shape[0] else y.sum(0),
    "layer_norm": lambda y: F.layer_norm(y, (D,)),
    "batch_norm": lambda y: F.batch_norm(y, None, None, training=True),
    "pad": lambda y: F.pad(y, (0, 0, 1, 1)),
    "repeat_interleave": lambda y: y.repeat_interleave(2, 0),
    "y * numel": lambda y: y * y.numel(),
    "index_add": lambda y: torch.zeros(5, D).index_add(
        0, torch.zeros(y.shape[0], dtype=torch.long), y),
    "view(u, 2, 2)": lambda y: y.view(y.shape[0], 2, 2),
    "tril(y @ y.T)": lambda y: (y @ y.t()).tril(),
    "y[y > 0]": lambda y: y[y[:, 0] > 0],
    "cross_entropy": lambda y: F.cross_entropy(y, torch.zeros(y.shape[0], dtype=torch.long)),
    "sdpa": lambda y: F.scaled_dot_product_attention(y[None, None], y[None, None],
                                                     y[None, None]),
}
# the size of the traced call first, then the later calls' sizes
SEQUENCES = [(1, 0, 3, 1), (0, 2, 1, 0), (2, 0, 1, 4), (3, 1, 0, 2)]
ALL = bool(os.environ.get("THUNDER_MLIR_SLOW_TESTS"))


def _cases():
    out = []
    for k, name in enumerate(OPS):
        for j, seq in enumerate(SEQUENCES):
            if ALL or j == k % len(SEQUENCES):
                out.append(pytest.param(name, seq, id=f"{name}-{'-'.join(map(str, seq))}"))
    return out


def _outcome(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - eager's error is the expected outcome too
        return None, e


@pytest.mark.parametrize(("name", "sizes"), _cases())
def test_op_on_a_data_dependent_size_is_eager_at_0_1_and_more(name, sizes):
    op = OPS[name]

    def f(x, mask):
        return op(x[mask])
    jf = thunder_mlir.jit(f)
    x = torch.randn(6, D, generator=torch.Generator().manual_seed(0))
    for u in sizes:
        mask = torch.zeros(6, dtype=torch.bool)
        mask[:u] = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (eager's degrees-of-freedom warnings)
            want, eager_error = _outcome(f, x, mask)
            got, error = _outcome(jf, x, mask)
        if eager_error is not None:
            assert isinstance(error, type(eager_error)), (u, eager_error, error)
            continue
        assert error is None, (u, error)
        assert got.shape == want.shape, (u, got.shape, want.shape)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, equal_nan=True,
                                   msg=lambda m, u=u: f"size {u}: {m}")
