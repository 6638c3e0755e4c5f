"""``merge-dots`` (transforms/merge_dots.py) in compiled programs: the weight gradients of
linear layers that share an input become one dot in a training step, and the step still
matches eager PyTorch; the forward's dots with the weights are left as they are.

Oracle: eager PyTorch (loss, parameters and AdamW state after each step). The merge is
observed in the ``prims`` stage, against the same program with the pass turned off.
"""

from __future__ import annotations

import copy

import torch

import thunder_mlir
from thunder_mlir.transforms import merge_dots


class SharedInput(torch.nn.Module):
    """q, k, v projections of one input (widths 32, 16, 16), then a mix of them."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(32, 32, bias=False)
        self.k = torch.nn.Linear(32, 16, bias=False)
        self.v = torch.nn.Linear(32, 16)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        return self.out(torch.tanh(q) * torch.cat([k, v], -1).sigmoid())


def _step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _prims(jstep) -> str:
    return next(s.text for s in thunder_mlir.last_traces(jstep._train._fn) if s.name == "prims")


def _run_steps(monkeypatch=None) -> str:
    """The prims stage of a jitted AdamW step after 3 steps, each checked against eager's."""
    torch.manual_seed(0)
    model = SharedInput()
    twin = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt2 = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    jstep = thunder_mlir.jit(_step)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(4, 8, 32, generator=g), torch.randn(4, 8, 32, generator=g)
        torch.testing.assert_close(jstep(model, opt, x, y), _step(twin, opt2, x, y))
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(opt.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"],
                                       rtol=1e-5, atol=1e-8)
    return _prims(jstep)


def test_weight_gradients_of_a_shared_input_are_one_dot(monkeypatch):
    """The q, k and v weight gradients (g^T x, x the shared input) are one dot of x with
    the three output gradients concatenated (widths 32 + 16 + 16); without the pass there
    are two more dots and no concatenation feeding one."""
    merged = _run_steps()
    assert "-> tensor<64x32xf32>" in merged, "the merged weight gradient [64, 32]"
    monkeypatch.setattr(merge_dots, "run", lambda module: 0)
    plain = _run_steps()
    assert "-> tensor<64x32xf32>" not in plain
    assert merged.count('"thunder.dot_general"') == plain.count('"thunder.dot_general"') - 2


def test_forward_dots_with_weights_are_not_merged():
    """An inference call: the dots of x with the three weights (arguments of the program)
    stay three dots; merging them would copy the weights at every call."""
    torch.manual_seed(0)
    model = SharedInput()
    jmodel = thunder_mlir.jit(model)
    x = torch.randn(4, 8, 32)
    with torch.no_grad():
        torch.testing.assert_close(jmodel(x), model(x))
    prims = next(s.text for s in thunder_mlir.last_traces(jmodel) if s.name == "prims")
    assert prims.count('"thunder.dot_general"') == 4
