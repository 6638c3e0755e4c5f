"""Random small programs for the differential fuzzer (tests/test_fuzz.py).

Since issue 25 the programs also write: ``__setitem__`` with index forms generated
structurally (ints, negative ints, slices with steps, ``None``, ``Ellipsis``, integer tensors
of broadcasting shapes, adjacent or separated, 0-d integer tensors, lists, bool masks of one or more dims, 0-d
bools, a data-dependent mask), with scalar, 0-d, broadcast, full, integer or float64 values,
plain or augmented; every in-place variant of PyTorch's ``op_db`` with the non-tensor
arguments of its sample inputs (``fuzz_opdb.py``); each applied to an intermediate, to a view
of one (views listed in ``VIEWS``, read after the write through the base or through a view
made before it), to a view of the buffer input (written back), to a view of a leaf that
requires grad (eager's error), after an in-place op that only the torch fallback runs, or
to zeros made from a value that requires grad (``zeros_like``: an accumulator).
Data-dependent statements (mask reads and writes, ``nonzero``, one-argument ``where``,
``unique``, a branch on a value, ``.item()`` and ``.tolist()`` used as numbers) see new
values at every call, as every call draws new inputs.

A program is a list of statements over a pool of tensors, all of shape (3, 4): inputs
``a`` and ``b`` (require grad) and ``buf`` (does not; updated in place as a buffer), then
one new value per statement. A statement applies an op (elementwise, reduction, softmax,
view, ...) or an idiom of issue 13 — ``detach``, ``.data``, an op under ``no_grad()`` or
``enable_grad()``, an in-place update of a computed value or of the buffer, a checkpointed
function reading the buffer that is written after it, a copy of the buffer then the buffer
written (both since session 18), custom
``autograd.Function``s (one with an identity forward), a branch on ``requires_grad``, a read of a global config object's
attribute or of a global flag (both changed between calls) — to earlier values chosen by
index. ``interpret`` runs a program on real tensors eagerly and, under
``thunder_mlir.jit``, on proxies: the same Python code both ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

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
          "reverse", "requires_grad_branch", "config", "flag", "checkpoint", "copy_then_write")


WRITES = ("setitem", "inplace_op", "native_op", "datadep")


@dataclass(frozen=True)
class Statement:
    """``kind``: "unary" | "binary" | an idiom | a write (``WRITES``); ``op``: a
    UNARY/BINARY name (the idioms that apply an op); ``args``: indices into the pool (taken
    modulo its size); ``spec``: what a write does (see ``interpret``)."""

    kind: str
    op: str
    args: tuple[int, ...]
    spec: tuple = ()

    def __repr__(self) -> str:
        extra = f", {self.spec!r}" if self.spec else ""
        return f"S({self.kind!r}, {self.op!r}, {self.args}{extra})"


S = Statement


@st.composite
def programs(draw, max_statements: int = 6):
    """(statements, outputs): outputs index the pool (modulo its size)."""
    n = draw(st.integers(1, max_statements))
    stmts = []
    for _ in range(n):
        kind = draw(st.sampled_from(("unary", "binary") + IDIOMS + WRITES))
        op = draw(st.sampled_from(sorted(BINARY if kind == "binary" else UNARY)))
        args = tuple(draw(st.integers(0, 12)) for _ in range(2))
        spec = draw(write_spec(kind)) if kind in WRITES else ()
        stmts.append(Statement(kind, op, args, spec))
    outs = tuple(draw(st.lists(st.integers(0, 12), min_size=1, max_size=2)))
    # what a write produced is always observed: the value read after it is an output
    writes = [3 + i for i, s in enumerate(stmts) if s.kind in WRITES]
    if writes and not any(o % (3 + n) in writes for o in outs):
        outs += (draw(st.sampled_from(writes)),)
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
        elif s.kind == "flag":
            v = f(x) if FLAG else x * y
        elif s.kind == "checkpoint":  # its closure's buffer written after: eager's
            v = checkpoint(lambda t, f=f: f(t) * buf, x, use_reentrant=False)  # backward
            buf.mul_(0.5)  # re-runs the function on the written buffer
        elif s.kind == "copy_then_write":  # a copy keeps the value it had
            v = buf.clone()
            buf.add_(f(x).detach())
        elif s.kind == "datadep":
            v = data_dependent(s.spec, x, y)
        else:  # a write
            v = write(s, x, y, a, buf)
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


# ------------------------------------------------------------------ writes (issue 25)
# Views of a (3, 4) tensor that a write may go through (name -> view).
VIEWS = {
    "id": lambda t: t,
    "t": lambda t: t.t(),
    "row": lambda t: t[1],
    "col_neg": lambda t: t[:, -1],
    "cols": lambda t: t[:, 1:3],
    "step": lambda t: t[::2],
    "flat": lambda t: t.view(-1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "diagonal": lambda t: t.diagonal(),
    "narrow": lambda t: t.narrow(1, 1, 2),
    "permute": lambda t: t.view(3, 2, 2).permute(2, 0, 1),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "t_select": lambda t: t.t()[1],
    "view_of_view": lambda t: t.view(2, 6)[:, ::2],
}
VIEW_SHAPES = {k: tuple(v(torch.zeros(SHAPE)).shape) for k, v in VIEWS.items()}
# Where a write lands: an intermediate; the buffer input (written back after the call); a
# leaf input that requires grad (eager raises); an intermediate first written by an
# in-place op that only the torch fallback runs; zeros made from a value that may require
# grad, not requiring grad themselves until the write (an accumulator, as transformers'
# MoE experts' ``next_states = torch.zeros_like(hidden_states)``).
TARGETS = ("intermediate", "intermediate", "intermediate", "buffer", "leaf", "after_fallback",
           "zeros_like")
# What the program reads after the write: the base, or a view made before the write.
READS = ("base", "base", "view_made_before")
VALUES = ("scalar", "int_scalar", "zero_d", "full", "last_dim", "int_full", "double_full")
WRITE_OPS = ("=", "=", "+=", "*=")


def _index_parts(spec, t):
    parts = []
    for p in spec:
        k = p[0]
        if k == "int":
            parts.append(p[1])
        elif k == "slice":
            parts.append(slice(*p[1:]))
        elif k == "none":
            parts.append(None)
        elif k == "ellipsis":
            parts.append(Ellipsis)
        elif k == "int_tensor":
            parts.append(torch.tensor(p[2], dtype=torch.long).reshape(p[1]))
        elif k == "int0_tensor":  # a 0-d integer tensor, indexing as an int does
            parts.append(torch.tensor(p[1]))
        elif k == "list":
            parts.append(list(p[1]))
        elif k == "bool_tensor":
            parts.append(torch.tensor(p[2], dtype=torch.bool).reshape(p[1]))
        elif k == "bool0":
            parts.append(torch.tensor(p[1]))
        else:  # "data_mask": which elements are positive, known at run time only
            parts.append(t > 0)
    return tuple(parts)


@st.composite
def index_spec(draw, shape):
    """A structurally generated index of a tensor of ``shape``: its parts are drawn dim by
    dim from every form ``__getitem__``/``__setitem__`` accept."""
    nd = len(shape)
    ellipsis = nd > 0 and draw(st.booleans())
    m = draw(st.integers(0 if ellipsis else min(1, nd), nd))
    dims = list(range(nd - m, nd)) if ellipsis else list(range(m))
    length = draw(st.integers(1, 3))
    parts, extra, i = [], 0, 0
    while i < len(dims):
        size = shape[dims[i]]
        forms = ["int", "slice", "int_tensor", "list", "bool_tensor", "int0_tensor"]
        if extra < 2:
            forms += ["none", "bool0"]
        form = draw(st.sampled_from(forms))
        if form in ("int", "int0_tensor"):
            parts.append((form, draw(st.integers(-size, size - 1))))
        elif form == "slice":
            bound = st.none() | st.integers(-size - 1, size + 1)
            start, stop = draw(bound), draw(bound)
            parts.append(("slice", start, stop, draw(st.sampled_from((None, 1, 2, 3)))))
        elif form == "int_tensor":
            tshape = draw(st.sampled_from(((length,), (1,), (length, 1), (1, length))))
            vals = draw(st.lists(st.integers(-size, size - 1), min_size=math.prod(tshape),
                                 max_size=math.prod(tshape)))
            parts.append(("int_tensor", tshape, tuple(vals)))
        elif form == "list":
            vals = draw(st.lists(st.integers(-size, size - 1), min_size=length, max_size=length))
            parts.append(("list", tuple(vals)))
        elif form == "bool_tensor":
            d = draw(st.integers(1, len(dims) - i))
            bshape = tuple(shape[j] for j in dims[i:i + d])
            vals = draw(st.lists(st.booleans(), min_size=math.prod(bshape),
                                 max_size=math.prod(bshape)))
            parts.append(("bool_tensor", bshape, tuple(vals)))
            i += d
            continue
        else:  # "none" / "bool0": consume no dim
            parts.append(("none",) if form == "none" else ("bool0", draw(st.booleans())))
            extra += 1
            continue
        i += 1
    if ellipsis:
        parts.insert(0, ("ellipsis",))
    return tuple(parts)


def _indexed(spec, shape):
    """(result shape, whether an element is written twice) of indexing a tensor of ``shape``
    with ``spec``, or None if eager refuses the index."""
    ar = torch.arange(math.prod(shape)).reshape(shape)
    try:
        pos = ar[_index_parts(spec, ar)]
    except (IndexError, RuntimeError, ValueError):
        return None
    return tuple(pos.shape), pos.unique().numel() < pos.numel()


@st.composite
def write_spec(draw, kind):
    if kind == "datadep":
        return (draw(st.sampled_from(DATA_DEPENDENT)),)
    target = draw(st.sampled_from(TARGETS))
    read = draw(st.sampled_from(READS))
    if kind == "native_op":
        import fuzz_opdb
        return (target, read, draw(st.sampled_from(fuzz_opdb.native_entries())))
    if kind == "inplace_op":
        import fuzz_opdb
        key = draw(st.sampled_from(fuzz_opdb.view_entries()))
        view = draw(st.sampled_from(fuzz_opdb.table()[key].views))
        return (target, read, view, key)
    view = draw(st.sampled_from(sorted(VIEWS)))
    shape = VIEW_SHAPES[view]
    if draw(st.integers(0, 7)) == 0:  # a mask of the target's own values
        return (target, read, view, (("data_mask",),), draw(st.sampled_from(
            ("scalar", "zero_d", "masked_source"))), draw(st.sampled_from(WRITE_OPS)), ())
    spec = draw(index_spec(shape))
    indexed = _indexed(spec, shape)
    if indexed is None:
        spec, indexed = (("int", 0),), _indexed((("int", 0),), shape)
    rshape, repeated = indexed
    values = VALUES if not repeated else ("scalar", "int_scalar", "zero_d")
    if not rshape:
        values = tuple(v for v in values if v != "last_dim")
    return (target, read, view, spec, draw(st.sampled_from(values)),
            draw(st.sampled_from(WRITE_OPS)), rshape)


def _value(kind, shape, y, mask):
    if kind == "scalar":
        return 0.5
    if kind == "int_scalar":
        return 3
    if kind == "zero_d":
        return y.sum() * 0.1
    if kind == "full":
        return _adapt(y, shape)
    if kind == "last_dim":
        return _adapt(y, shape[-1:])
    if kind == "int_full":
        return torch.arange(math.prod(shape)).reshape(shape)
    if kind == "double_full":
        return _adapt(y, shape).double()
    return _adapt(y, mask.shape)[mask]  # "masked_source"


def _adapt(t, shape):
    import fuzz_opdb
    return fuzz_opdb.adapt(t, shape)


def write(s, x, y, a, buf):
    """A write statement: returns the (3, 4) value the program reads after it."""
    import fuzz_opdb
    target, read = s.spec[0], s.spec[1]
    if s.kind == "native_op":
        entry = fuzz_opdb.table()[s.spec[2]]
        dom = fuzz_opdb.DOMAINS[entry.domain]
        base = dom(_adapt(x, entry.native_shape)) if target != "buffer" else None
        if target == "buffer":
            base = buf.view(-1)[:0] if math.prod(entry.native_shape) > buf.numel() else \
                buf.view(-1)[:math.prod(entry.native_shape)].view(entry.native_shape)
            y = y.detach()
        elif target == "leaf":
            base = a.view(-1)[:math.prod(entry.native_shape)].view(entry.native_shape) \
                if math.prod(entry.native_shape) <= a.numel() else base
        if base.numel() == 0:
            base = dom(_adapt(x, entry.native_shape))
        before = base.view(-1)[1:] if read == "view_made_before" and base.numel() > 1 else None
        if target == "after_fallback":
            _fallback_write(base.view(-1), y)
        fuzz_opdb.apply(entry, base, y)
        return _adapt(before if before is not None else base, SHAPE) * 1
    if target == "buffer":
        base, y = buf, y.detach()
    elif target == "leaf":
        base = a
    elif target == "zeros_like":
        base = torch.zeros_like(x)
    else:
        base = x * 1.5
        if target == "after_fallback":
            _fallback_write(base, y)
    before = base[:, 1:] if read == "view_made_before" else None
    if s.kind == "inplace_op":
        view, key = s.spec[2], s.spec[3]
        entry = fuzz_opdb.table()[key]
        if target == "zeros_like":  # into the op's domain in place: still the zeros' tensor
            base.copy_(fuzz_opdb.DOMAINS[entry.domain](base))
        elif target != "leaf" and target != "buffer":
            base = fuzz_opdb.DOMAINS[entry.domain](base)
            before = base[:, 1:] if read == "view_made_before" else None
        elif target == "buffer" and entry.domain != "real":
            # the buffer is written in place into the op's domain first: log_ of a value
            # whose sign the rounding of the statements before decides (an FMA or not) would
            # compare NaN with a number
            base.copy_(fuzz_opdb.DOMAINS[entry.domain](base))
        fuzz_opdb.apply(entry, VIEWS[view](base), y)
    else:  # setitem
        view, spec, value, op, shape = s.spec[2:]  # shape: of t[index], known statically
        t = VIEWS[view](base)
        index = _index_parts(spec, t)
        mask = index[0] if spec == (("data_mask",),) else None
        v = _value(value, shape, y, mask)
        if op == "=":
            t[index] = v
        elif op == "+=":
            t[index] += v
        else:
            t[index] *= v
    return _adapt(before if before is not None else base, SHAPE) * 1


def _fallback_write(base, y):
    """An in-place op that only the torch fallback runs, on the whole of ``base``."""
    import fuzz_opdb
    writers = [k for k in fuzz_opdb.fallback_writers() if not k.startswith("squeeze")]
    if not writers or base.numel() % 2:  # (squeeze_ writes no value) an op that no symbol
        from conftest import unregistered_mul_  # will ever have
        unregistered_mul_(base, 0.5)
        return
    key = writers[int(base.numel()) % len(writers)]
    entry = fuzz_opdb.table()[key]
    fuzz_opdb.apply(entry, base, y)


DATA_DEPENDENT = ("mask_assign", "mask_assign_source", "mask_read", "nonzero", "where1",
                  "masked_select", "unique", "branch", "item", "tolist", "any_branch")


def data_dependent(spec, x, y):
    """Statements whose sizes or control flow depend on values (new at every call)."""
    k = spec[0]
    if k == "mask_assign":
        v = x * 1.5
        v[v > 0] = 0.0
        return v
    if k == "mask_assign_source":
        v = x * 1.5
        m = v < y
        v[m] = y[m] * 2
        return v
    if k == "mask_read":
        return x + x[x > 0].sum()
    if k == "nonzero":
        nz = (x > 0).nonzero()
        return x * nz.shape[0] + nz.sum()
    if k == "where1":
        r, c = torch.where(x > y)
        return x.index_put((r, c), y[r, c] * 3)
    if k == "masked_select":
        return x * torch.masked_select(y, x > 0).sum()
    if k == "unique":
        u, counts = torch.unique((x * 2).round().detach(), return_counts=True)
        return x + (u * counts).sum()
    if k == "branch":
        return x * 2 if x.sum() > 0 else y - 1
    if k == "item":
        return x * y.sum().item()
    if k == "tolist":
        return x * max(y[0].tolist())
    return x.exp() if (x > 1.5).any() else x * y  # "any_branch"
