"""Random small programs for the differential fuzzer (tests/test_fuzz.py).

A program is a list of statements over a pool of tensors, all of shape (3, 4): inputs
``a`` and ``b`` (require grad) and ``buf`` (does not; updated in place as a buffer), then
one new value per statement. A statement applies an op (elementwise, reduction, softmax,
view, ...) or an idiom of issue 13 — ``detach``, ``.data``, an op under ``no_grad()`` or
``enable_grad()``, an in-place update of a computed value or of the buffer, custom
``autograd.Function``s (one with an identity forward), a branch on ``requires_grad``, a read of a global config object's
attribute or of a global flag (both changed between calls) — to earlier values chosen by
index. ``interpret`` runs a program on real tensors eagerly and, under
``thunder_mlir.jit``, on proxies: the same Python code both ways.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

SHAPE = (3, 4)


class Config:
    """A plain object read through a global, as a model reads its config."""

    def __init__(self):
        self.scale = 0.5


CONFIG = Config()
FLAG = True


class ScaledSquare(torch.autograd.Function):
    """x * x * 3 with its own backward (6 x g)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 6 * x * g


class Reverse(torch.autograd.Function):
    """Gradient reversal: an identity forward (a view) whose backward negates."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -g


UNARY = {
    "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "abs": torch.abs, "neg": torch.neg, "square": torch.square,
    "exp": lambda x: x.clamp(-3, 3).exp(), "floor": torch.floor,
    "softmax": lambda x: x.softmax(-1), "center": lambda x: x - x.mean(0, keepdim=True),
    "rowsum": lambda x: x.sum(1, keepdim=True).expand(*SHAPE),
    "clone": torch.clone, "t_t": lambda x: x.t().contiguous().t(),
    "flat": lambda x: x.reshape(-1).view(*SHAPE),
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "where": lambda x, y: torch.where(x > 0, x, y), "lerp": lambda x, y: x + 0.25 * (y - x),
}
IDIOMS = ("detach", "data", "no_grad", "enable_grad", "inplace", "buffer", "custom",
          "reverse", "requires_grad_branch", "config", "flag")


@dataclass(frozen=True)
class Statement:
    """``kind``: "unary" | "binary" | an idiom; ``op``: a UNARY/BINARY name (the idioms
    that apply an op); ``args``: indices into the pool (taken modulo its size)."""

    kind: str
    op: str
    args: tuple[int, ...]

    def __repr__(self) -> str:
        return f"S({self.kind!r}, {self.op!r}, {self.args})"


S = Statement


@st.composite
def programs(draw, max_statements: int = 6):
    """(statements, outputs): outputs index the pool (modulo its size)."""
    n = draw(st.integers(1, max_statements))
    stmts = []
    for _ in range(n):
        kind = draw(st.sampled_from(("unary", "binary") + IDIOMS))
        op = draw(st.sampled_from(sorted(BINARY if kind == "binary" else UNARY)))
        args = tuple(draw(st.integers(0, 12)) for _ in range(2))
        stmts.append(Statement(kind, op, args))
    outs = tuple(draw(st.lists(st.integers(0, 12), min_size=1, max_size=2)))
    return stmts, outs


def interpret(stmts, outs, a, b, buf):
    """Run the program; returns the chosen outputs (a tuple of tensors)."""
    pool = [a, b, buf]

    def arg(i):
        return pool[i % len(pool)]

    for s in stmts:
        x, y = arg(s.args[0]), arg(s.args[1])
        f = UNARY.get(s.op)
        if s.kind == "unary":
            v = f(x)
        elif s.kind == "binary":
            v = BINARY[s.op](x, y)
        elif s.kind == "detach":
            v = f(x.detach()) * x
        elif s.kind == "data":
            v = x * x.data
        elif s.kind == "no_grad":
            with torch.no_grad():
                v = f(x)
            v = v + y
        elif s.kind == "enable_grad":
            with torch.enable_grad():
                v = f(x) * y
        elif s.kind == "inplace":
            v = x * 1.5  # a computed value (never a leaf input)
            v.add_(f(y))
        elif s.kind == "buffer":
            buf.mul_(0.5).add_(f(x).detach())
            v = buf * y
        elif s.kind == "custom":
            v = ScaledSquare.apply(x) + y
        elif s.kind == "reverse":
            v = Reverse.apply(f(x)) * y
        elif s.kind == "requires_grad_branch":
            v = f(x) * 2 if x.requires_grad else f(x) * 3
        elif s.kind == "config":
            v = f(x) * CONFIG.scale
        else:  # "flag"
            v = f(x) if FLAG else x * y
        pool.append(v)
    return tuple(arg(i) for i in outs)


def make_inputs():
    """Fresh inputs (a, b require grad; buf does not)."""
    return (torch.randn(*SHAPE).requires_grad_(), torch.randn(*SHAPE).requires_grad_(),
            torch.randn(*SHAPE))


def change_globals(_target) -> None:
    """Between calls: a new config value and the other branch of the flag."""
    global FLAG
    CONFIG.scale = 2.0
    FLAG = False


def reset_globals() -> None:
    global FLAG
    CONFIG.scale = 0.5
    FLAG = True
