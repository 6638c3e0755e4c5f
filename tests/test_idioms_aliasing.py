"""Idiom catalogue, area 5: outputs that alias inputs (issue 13).

Eager returns views: ``f(x) is x`` for ``return x``, and ``x.view(-1)``, ``x[0]``,
``x.t()``, ``x.detach()`` share memory with ``x``, so an in-place update of the output
after the call changes the input. ``idiom_harness.check_idiom`` compares which outputs
share storage with which inputs; these cases also update the outputs in place afterwards.
"""

from __future__ import annotations

import pytest
import torch

import thunder_mlir
from idiom_harness import Step, check_idiom


def x34():
    return (torch.randn(3, 4),)


@pytest.mark.parametrize("fn", [
    lambda x: x.view(-1),
    lambda x: x[0],
    lambda x: x[:, 1:3],
    lambda x: x.t(),
    lambda x: x.detach(),
    lambda x: x.reshape(4, 3),
    lambda x: x.unsqueeze(0).expand(2, 3, 4),
    lambda x: x.chunk(2, dim=1),
    lambda x: x.unbind(0),
    lambda x: (x * 2, x.T),
    lambda x: x.transpose(0, 1).reshape(12),  # eager copies: no alias
    lambda x: x[torch.tensor([0, 2])],  # advanced indexing copies
], ids=["view", "select", "slice", "t", "detach", "reshape", "expand", "chunk", "unbind",
        "computed-and-T", "reshape-copy", "index-copy"])
def test_view_of_an_input_aliases_it(fn):
    check_idiom(fn, x34)


def test_returning_the_input_returns_the_same_tensor():
    x = torch.randn(3)
    jf = thunder_mlir.jit(lambda x: x)
    assert jf(x) is x
    jg = thunder_mlir.jit(lambda x, y: (x, y * 2))
    out = jg(x, x)
    assert out[0] is x


def test_in_place_update_of_an_output_view_reaches_the_input():
    def f(x):
        return x[0], x.sum()
    x_e, x_j = torch.randn(3, 4), None
    x_j = x_e.clone()
    v_e, _ = f(x_e)
    v_j, _ = thunder_mlir.jit(f)(x_j)
    v_e.mul_(10)
    v_j.mul_(10)
    torch.testing.assert_close(x_j, x_e)


def test_view_of_another_output():
    def f(x):
        y = x * 2
        return y, y[1:]
    x = torch.randn(4)
    y, tail = thunder_mlir.jit(f)(x)
    tail.zero_()
    assert (y[1:] == 0).all() and y[0] == x[0] * 2


def test_view_of_an_input_updated_in_place():
    def f(x):
        x.add_(1)
        return x.view(2, 2)
    check_idiom(f, lambda: (torch.randn(4),))


def test_view_of_an_input_that_requires_grad():
    check_idiom(lambda w: (w.t(), (w * 2).sum()), lambda: (torch.randn(3, 4).requires_grad_(),))


def test_view_of_a_parameter_returned_by_a_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x), self.lin.weight.t()
    check_idiom(M(), x34)


def test_expand_as_with_a_computed_tensor_aliases():
    check_idiom(lambda x, y: x.expand_as(y * 2), lambda: (torch.randn(1, 4), torch.randn(3, 4)))


def test_select_by_a_computed_index_is_refused():
    def f(x):
        return x[x.sum().long().clamp(0, 2)]
    with pytest.raises(NotImplementedError, match="view of an input made with a tensor"):
        thunder_mlir.jit(f)(torch.randn(3, 4))


def test_expand_as_with_an_input_aliases():
    check_idiom(lambda x, y: x.expand_as(y), lambda: (torch.randn(1, 4), torch.randn(3, 4)))
