"""Issue 48: a generator over the kinds of tensor attributes a jitted module holds, what
the program does with them and what the caller does between calls, compared with eager.

Each example is a module holding a tensor as a plain attribute, in one of five places
(the attribute itself, an element of a list, a value of a dict beside a plain value, an
attribute of a plain object, an attribute of a submodule); its forward reads the tensor
and maybe writes it in place (``add_``, ``index_copy_``, ``t[0] = ...``) or assigns a
new tensor (or a new list or dict holding it) to the attribute; between its
three calls the caller does nothing, reassigns the tensor (same shape or another), writes
it in place, or replaces the container or object holding it. The jitted twin must return
eager's outputs and leave eager's tensors on the module after every call. The module is
jitted whole (``jit(module)``) or run by a jitted training step with SGD
(``jit(step)(model, opt, x)``: the attributes are the step's inputs too, and the parameter
after each step is eager's). Hypothesis draws
``THUNDER_ATTR_EXAMPLES`` examples (default 40, ~7 s; 150 took 19 s), derandomized, so
every run checks the same ones.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

import thunder_mlir

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

KINDS = ("tensor", "list", "dict", "object", "submodule")
WRITES = ("none", "add_", "index_copy_", "setitem", "rebind")
BETWEEN = ("nothing", "reassign", "reassign_shape", "in_place", "replace_holder")
EXAMPLES = int(os.environ.get("THUNDER_ATTR_EXAMPLES", "24"))  # (40 until stop 51: CI time)


class Holder:
    """A plain object holding a tensor."""

    def __init__(self, t):
        self.t = t


class Attrs(torch.nn.Module):
    def __init__(self, kind: str, write: str, t: torch.Tensor):
        super().__init__()
        self.kind, self.write = kind, write
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self.sub = torch.nn.Module()
        self.put(t, new_holder=True)

    def put(self, t, new_holder):
        """Make ``t`` the attribute's tensor: a new holder, or into the present one."""
        k = self.kind
        if k == "tensor":
            self.a = t
        elif k == "submodule":
            self.sub.a = t
        elif k == "list":
            if new_holder:
                self.a = [torch.ones(3), t]
            else:
                self.a[1] = t
        elif k == "dict":
            if new_holder:
                self.a = {"w": t, "n": 2}
            else:
                self.a["w"] = t
        elif new_holder:
            self.a = Holder(t)
        else:
            self.a.t = t

    def get(self):
        k = self.kind
        if k == "tensor":
            return self.a
        if k == "submodule":
            return self.sub.a
        if k == "list":
            return self.a[1]
        if k == "dict":
            return self.a["w"]
        return self.a.t

    def forward(self, x):
        t = self.get()
        if self.write == "add_":
            t.add_(x)
        elif self.write == "index_copy_":
            t.index_copy_(0, torch.tensor([t.shape[0] - 1]), x[None])
        elif self.write == "setitem":
            t[0] = x
        elif self.write == "rebind":  # a new tensor (a new list or dict) on the attribute
            self.put(t * x, new_holder=self.kind in ("list", "dict"))
            t = self.get()
        out = (t * x * self.w).sum(0)
        if self.kind == "list":
            out = out + self.a[0]
        elif self.kind == "dict":
            out = out * self.a["n"]
        return out


def _act(m: Attrs, action: str, g: torch.Generator):
    t = m.get()
    if action == "reassign":
        m.put(torch.randn(t.shape, generator=g), new_holder=False)
    elif action == "reassign_shape":
        m.put(torch.randn(t.shape[0] + 1, 3, generator=g), new_holder=False)
    elif action == "in_place":
        t.mul_(-2)
    elif action == "replace_holder":
        m.put(torch.randn(t.shape, generator=g), new_holder=True)


@hypothesis.settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
                     suppress_health_check=list(hypothesis.HealthCheck), database=None)
@hypothesis.given(kind=st.sampled_from(KINDS), write=st.sampled_from(WRITES),
                  actions=st.lists(st.sampled_from(BETWEEN), min_size=2, max_size=2),
                  form=st.sampled_from(("module", "step")))
def test_attribute_kinds_writes_and_reassignments_are_eager(kind, write, actions, form):
    g = torch.Generator().manual_seed(0)
    eager = Attrs(kind, write, torch.randn(2, 3, generator=g))
    mine = copy.deepcopy(eager)
    if form == "module":
        jitted, run = thunder_mlir.jit(mine), eager
    else:  # a training step: the attributes are inputs of the step's program
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, mine)]
        jstep = thunder_mlir.jit(_step)
        jitted = lambda x: jstep(mine, opts[1], x)  # noqa: E731
        run = lambda x: _step(eager, opts[0], x)  # noqa: E731
    ge, gm = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for call, action in enumerate(["nothing"] + actions):
        _act(eager, action, ge)
        _act(mine, action, gm)
        x = torch.full((3,), float(call + 2))
        torch.testing.assert_close(jitted(x), run(x).detach(),
                                   msg=lambda m, c=call: f"call {c}: {m}")
        torch.testing.assert_close(mine.get(), eager.get(),
                                   msg=lambda m, c=call: f"the attribute after call {c}: {m}")
        torch.testing.assert_close(mine.w, eager.w)


def _step(model, opt, x):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss
