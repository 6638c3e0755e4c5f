"""ATen's ZeroTensors inside a jitted function (frontend/zero_tensors.py, issue 46): a
ZeroTensor has no memory (a null data pointer), which the torch fallback once handed XLA
through DLPack: the process died of a segmentation fault. Eager is the oracle: values
(ZeroTensor kernels give zeros, or inf for a division by one, whatever the other operand
holds), gradients and eager's error for a write."""

from __future__ import annotations

import pytest
import torch

import thunder_mlir

X = torch.tensor([float("inf"), -1.0, float("nan"), 2.0])


def _zeros(n=4):
    return torch._efficientzerotensor(n)


PROGRAMS = {
    "aten factory plus x": lambda x: x + torch.ops.aten._efficientzerotensor([4]),
    "returned": lambda x: (_zeros(), _zeros().sum(), _zeros().exp()),
    "products": lambda x: (_zeros() * x, x * _zeros(), torch.dot(_zeros(), x),
                           _zeros()[1:] * x[1:], torch.vdot(x, _zeros())),
    "divisions": lambda x: (x / _zeros(), _zeros() / _zeros(), _zeros() / x,
                            torch.div(x, _zeros()), 1 / _zeros(), x.int() / _zeros(),
                            x.div(_zeros(), rounding_mode="floor")),
    "views and sums": lambda x: (_zeros().view(2, 2).t() + x.view(2, 2), _zeros()[::2] - 1),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_zero_tensor_values_match_eager(name):
    fn = PROGRAMS[name]
    torch.testing.assert_close(thunder_mlir.jit(fn)(X.clone()), fn(X.clone()),
                               equal_nan=True)


def test_zero_tensor_gradient_matches_eager():
    def fn(x):
        return (_zeros() * x + x.sin()).sum()
    x = torch.randn(4, requires_grad=True)
    xj = x.detach().clone().requires_grad_()
    fn(x).backward()
    thunder_mlir.jit(fn)(xj).backward()
    torch.testing.assert_close(xj.grad, x.grad)


@pytest.mark.parametrize("write", [
    lambda z, x: z.add_(1),
    lambda z, x: z[1:].mul_(x[1:]),
    lambda z, x: z.__setitem__(0, 3.0),
    lambda z, x: (z * x).copy_(x),
])
def test_write_into_zero_tensor_raises_eagers_error(write):
    def fn(x):
        z = _zeros()
        write(z, x)
        return z + x
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable") as eager:
        fn(X.clone())
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable") as jit:
        thunder_mlir.jit(fn)(X.clone())
    assert "test_zero_tensors.py" in str(jit.value)  # the user's line
    del eager


def test_sparse_factory_keeps_eagers_layout_and_feeds_xla_dense():
    """A factory with ``layout=torch.sparse_coo`` returned its dense twin (the symbols
    dropped ``layout``); one read by XLA raised "unsupported memory format option"."""
    def fn(x):
        return x.new_zeros(4, layout=torch.sparse_coo), x + torch.zeros(4, layout=torch.sparse_coo)
    x = torch.randn(4)
    (js, jd), (es, ed) = thunder_mlir.jit(fn)(x), fn(x)
    assert js.layout == es.layout == torch.sparse_coo
    torch.testing.assert_close(js.to_dense(), es.to_dense())
    torch.testing.assert_close(jd, ed)
