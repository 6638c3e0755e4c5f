"""Programs of views and in-place ops, generated, and eager's oracle for them (issue 46).

A program takes one or two tensors and runs a few statements drawn from tables:

* a *source* ``t``: the input itself, or a tensor computed from it;
* a *view* ``v`` of ``t`` (select, slices, ``t()``, ``view``, ``unbind``, ``as_strided``,
  ``diagonal``, ``unfold``, ``detach``, ...);
* an *in-place op* on ``v`` or ``t`` (arithmetic, ``copy_``, ``zero_``, a value that requires
  grad, and the in-place view ops ``t_``, ``transpose_``, ``squeeze_``, ``unsqueeze_``,
  ``detach_``);
* optionally a second view ``w``, made after the write;
* a tuple of outputs among ``t``, ``v``, ``w``, the input and values computed from them.

Inputs come in *kinds*: a leaf that requires grad, a non-leaf that requires grad (a clone of
one), a tensor without grad, a view the caller made of a larger tensor; a second input may
be a view of the same base as the first (overlapping or apart).

``compare(program)`` runs the program eagerly and jitted on equal inputs and compares what a
user can observe: exceptions (type), outputs (values, shapes, dtypes, ``requires_grad``),
the inputs after the call (values, shapes, ``requires_grad``, leaf or not), which tensors
are the same object and which share memory, the gradients a backward over every output and
every input that requires grad gives to the leaves, and, after that, what an in-place update
of each output shows through the others and through the inputs. It returns one of
``"pass"``, ``"refused"`` (the jit raised a ``NotImplementedError`` naming the reason where
eager runs), ``"eager error"`` (both raised, the same type) or ``"different: ..."``.

``generate_aliased`` draws programs over two inputs that are views of one base (synthetic
bases, synthetic_bases.py): overlapping, identical (the same object or two equal views),
interleaved, apart, a tensor and its row, a ``.detach()`` alias; the base a tensor without
grad, a leaf that requires grad or a non-leaf that does, or a caller's view of a larger
one; written through one input or the other (or a view of it, or under ``no_grad``), with a
value that may require grad, then read through both.

``python tests/aliasing_generator.py N [SEED] [aliased]`` surveys N programs and prints the
counts and each difference.
"""

from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass

import torch

import thunder_mlir

# (name, source text over ``t``, needs 2-D, ...); {t} is the viewed tensor
VIEWS = [
    ("select", "{t}[1]"), ("slice", "{t}[:, 1:3]"), ("step", "{t}[::2]"), ("t", "{t}.t()"),
    ("transpose", "{t}.transpose(0, 1)"), ("view", "{t}.view(-1)"),
    ("reshape", "{t}.reshape(2, -1)"), ("unsqueeze", "{t}.unsqueeze(0)"),
    ("diagonal", "{t}.diagonal()"), ("narrow", "{t}.narrow(1, 1, 2)"),
    ("unbind", "{t}.unbind(0)[1]"), ("split", "{t}.split(2)[1]"), ("chunk", "{t}.chunk(2, 1)[0]"),
    ("as_strided", "{t}.as_strided((2, 2), (1, 3), 1)"), ("detach", "{t}.detach()"),
    ("flatten", "{t}.flatten()"), ("permute", "{t}.permute(1, 0)"), ("index_none", "{t}[None]"),
    ("ellipsis", "{t}[..., 0]"), ("movedim", "{t}.movedim(0, 1)"), ("view_as", "{t}.view_as({t})"),
    ("unfold", "{t}.unfold(0, 2, 2)"), ("expand", "{t}[0].expand(2, -1)"),
    ("squeeze", "{t}[:1].squeeze(0)"), ("alias", "{t}[...]"),
    # the geometry eager reports, read and used (a view's strides are its base's)
    ("restride", "{t}.as_strided({t}.shape, {t}.stride(), {t}.storage_offset())"),
    ("if_contiguous", "({t}.view(-1) if {t}.is_contiguous() else {t}.reshape(-1))"),
]
# in-place ops on {x}; {y}: a 0-d value computed from the second input
INPLACE = [
    ("add", "{x}.add_(1)"), ("mul", "{x}.mul_(2)"), ("zero", "{x}.zero_()"),
    ("fill", "{x}.fill_(3)"), ("copy", "{x}.copy_(torch.full_like({x}, 5))"),
    ("clamp", "{x}.clamp_(0, 1)"), ("sin", "{x}.sin_()"), ("add_y", "{x}.add_({y})"),
    ("mul_y", "{x}.mul_({y})"), ("setitem", "{x}[0] = 7"), ("iadd", "{x} += 1"),
    ("t_", "{x}.t_()"), ("transpose_", "{x}.transpose_(0, -1)"),
    ("unsqueeze_", "{x}.unsqueeze_(0)"),
    ("squeeze_", "{x}.squeeze_()"), ("detach_", "{x}.detach_()"),
    ("add_out", "torch.add({x}, 1, out={x})"),
]
SOURCES = [("input", "x0"), ("computed", "x0 * 2"), ("clone", "x0.clone()")]
OUTPUTS = ["t", "v", "w", "x0", "t + 1", "v * 2"]
KINDS = ["leaf", "nonleaf", "nograd", "view"]
SECOND = ["none", "leaf", "nograd", "overlap", "apart"]


@dataclass
class Program:
    """A generated program: its source text and the kinds of its inputs."""

    source: str
    kinds: tuple[str, ...]
    shape: tuple[int, int]
    name: str

    def function(self):
        ns = {"torch": torch}
        exec(compile(self.source, f"<{self.name}>", "exec"), ns)  # noqa: S102 - generated
        return ns["f"]


def generate(rng: random.Random, index: int) -> Program:
    """One program drawn with ``rng`` (see the module docstring)."""
    shape = rng.choice([(4, 6), (4, 4), (4, 6)])
    src_name, src = rng.choice(SOURCES)
    view_name, view = rng.choice(VIEWS)
    op_name, op = rng.choice(INPLACE)
    second = rng.choice(SECOND)
    kind = rng.choice(KINDS)
    y = "x1.sum()" if second != "none" else "x0.sum()"
    lines = ["def f(x0, x1):" if second != "none" else "def f(x0):", f"    t = {src}",
             f"    v = {view.format(t='t')}"]
    target = rng.choice(["v", "t", "v"])
    lines.append("    " + op.format(x=target, y=y))
    outs = rng.sample(OUTPUTS, rng.randint(1, 3))
    if "w" in outs or rng.random() < 0.3:
        w_view = rng.choice(VIEWS)[1]
        lines.append(f"    w = {w_view.format(t=rng.choice(['t', 'v']))}")
    else:
        outs = [o for o in outs if o != "w"] or ["t"]
    if rng.random() < 0.2:  # a second write, through another name
        lines.append("    " + rng.choice(INPLACE[:8])[1].format(x=rng.choice(["t", "v"]), y=y))
    lines.append(f"    return {', '.join(outs)},")
    name = f"prog{index}_{src_name}_{view_name}_{op_name}_{kind}_{second}"
    return Program("\n".join(lines) + "\n", (kind, second), shape, name)


def make_inputs(program: Program, seed: int):
    """(the call's arguments, the leaves whose .grad is compared), fresh, equal for equal
    seeds."""
    if program.kinds[0] == "aliased":
        return make_aliased_inputs(program, seed)
    g = torch.Generator().manual_seed(seed)
    kind, second = program.kinds
    shape = program.shape
    leaves = []

    def leaf(shape, rg):
        t = torch.randn(shape, generator=g)
        if rg:
            t.requires_grad_()
            leaves.append(t)
        return t
    base = None
    if kind == "leaf":
        x0 = leaf(shape, True)
    elif kind == "nonleaf":
        x0 = leaf(shape, True).clone()
    elif kind == "nograd":
        x0 = leaf(shape, False)
    else:  # a view the caller made
        base = leaf((shape[0] + 2, shape[1]), False)
        x0 = base[1:1 + shape[0]]
    args = [x0]
    if second == "leaf":
        args.append(leaf(shape, True))
    elif second == "nograd":
        args.append(leaf(shape, False))
    elif second in ("overlap", "apart"):
        if base is None:
            base = leaf((2 * shape[0] + 2, shape[1]), False)
            x0 = base[:shape[0]]
            args[0] = x0
        start = shape[0] - 1 if second == "overlap" else base.shape[0] - shape[0]
        args.append(base[start:start + shape[0]])
    return args, leaves


# (name, x0, x1) over ``b``, a base of shape (8, 4); x1 "x0": the same object twice
RELATIONS = [
    ("overlap", "b[0:4]", "b[3:7]"), ("same", "b[0:4]", "x0"),
    ("identical", "b[0:4]", "b[0:4]"), ("apart", "b[0:4]", "b[4:8]"),
    ("interleaved", "b[::2]", "b[1::2]"), ("row", "b", "b[2]"),
    ("columns", "b[:, 1:3]", "b[2:5]"), ("transposed", "b[0:4].t()", "b[2:6]"),
    ("detach", "b[0:4]", "b[0:4].detach()"),
]
BASES = ["nograd", "leaf", "nonleaf", "view"]
# writes through {x}; {o}: the other input; {w}: a 0-d leaf that requires grad
WRITES = [
    ("add", "{x}.add_(1)"), ("mul", "{x}.mul_(2)"), ("zero", "{x}.zero_()"),
    ("copy", "{x}.copy_(torch.full_like({x}, 5) + {o}.sum())"),
    ("sin", "{x}.sin_()"), ("add_o", "{x}.add_({o}.sum())"), ("setitem", "{x}[0] = 7"),
    ("iadd", "{x} += 1"), ("mul_w", "{x}.mul_({w})"), ("add_w", "{x}.add_({w})"),
    ("t_", "{x}.t_()"), ("unsqueeze_", "{x}.unsqueeze_(0)"),
]
ALIASED_OUTPUTS = ["x0", "x1", "x0 * 2 + x1.sum()", "x1[0]", "v", "x0.sum() * x1.sum()"]


def generate_aliased(rng: random.Random, index: int) -> Program:
    """One program over two inputs that share a base (module docstring), drawn with
    ``rng``."""
    relation, base = rng.choice(RELATIONS), rng.choice(BASES)
    lines = ["def f(x0, x1, w):", "    v = x0[1]"]
    writes = [rng.choice(WRITES) for _ in range(rng.choice([1, 1, 2]))]
    for name, text in writes:
        k = rng.choice(["x0", "x1", "x1"])
        x = rng.choice([k, k, f"{k}[1:]"]) if not name.endswith("_") else k
        stmt = text.format(x=x, o="x1" if k == "x0" else "x0", w="w")
        if base == "leaf" and rng.random() < 0.7:  # (in grad mode eager refuses the write)
            lines += ["    with torch.no_grad():", f"        {stmt}"]
        else:
            lines.append(f"    {stmt}")
    outs = rng.sample(ALIASED_OUTPUTS, rng.randint(1, 3))
    lines.append(f"    return {', '.join(outs)},")
    name = f"aliased{index}_{relation[0]}_{base}_{'_'.join(n for n, _ in writes)}"
    wgrad = any(name.endswith("_w") for name, _ in writes)
    return Program("\n".join(lines) + "\n", ("aliased", base, relation, wgrad), (8, 4),
                   name)


def make_aliased_inputs(program: Program, seed: int):
    """``make_inputs`` for ``generate_aliased``'s programs: (x0, x1, w), the leaves."""
    g = torch.Generator().manual_seed(seed)
    _, base, (_, x0, x1), wgrad = program.kinds
    b = torch.randn(10 if base == "view" else 8, 4, generator=g)
    leaves = []
    if base in ("leaf", "nonleaf"):
        b.requires_grad_()
        leaves.append(b)
        if base == "nonleaf":
            b = b.clone()
    elif base == "view":
        b = b[1:9]
    w = torch.randn((), generator=g)
    if wgrad:  # (only where a write reads it: a leaf that requires grad is a gradient)
        leaves.append(w.requires_grad_())
    ns = {"b": b}
    ns["x0"] = eval(x0, ns)  # (the generator's own table)
    ns["x1"] = eval(x1, ns)
    return [ns["x0"], ns["x1"], w], leaves


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - compared
        return None, e


def _tensors(out) -> list:
    return [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]


def _relations(tensors: list) -> list:
    """Per pair: (the same object, sharing memory)."""
    def storage(t):
        try:
            return t.untyped_storage().data_ptr()
        except RuntimeError:
            return None
    rel = []
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            rel.append((a is b, a.numel() > 0 and b.numel() > 0 and storage(a) == storage(b)))
    return rel


def _same(a: torch.Tensor, e: torch.Tensor) -> bool:
    return a.shape == e.shape and a.dtype == e.dtype and torch.allclose(
        a.detach(), e.detach(), atol=1e-5, rtol=1e-5, equal_nan=True)


def _describe(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.dtype, t.requires_grad, t.requires_grad and t.grad_fn is None)


def _backward(outs: list, args: list):
    """Backward of every output and every non-leaf input that requires grad, with fixed
    weights; returns the exception or None."""
    roots = [t for t in outs + [a for a in args if a.requires_grad and a.grad_fn is not None]
             if t.requires_grad]
    if not roots:
        return None
    try:
        loss = sum(((t.float() * (k + 1)).sum() for k, t in enumerate(roots)))
        loss.backward()
    except Exception as e:  # noqa: BLE001 - compared
        return e
    return None


def _probe(outs: list) -> list:
    """Update each output in place (no grad), in order; per output whether it raised."""
    raised = []
    for k, o in enumerate(outs):
        try:
            with torch.no_grad():
                o.add_(k + 10)
            raised.append(False)
        except Exception:  # noqa: BLE001 - compared
            raised.append(True)
    return raised


REFUSALS = (NotImplementedError, thunder_mlir.UnsupportedError)


def compare(program: Program, seed: int = 0) -> str:
    """Run ``program`` eagerly and jitted; the verdict (module docstring)."""
    fn = program.function()
    e_args, e_leaves = make_inputs(program, seed)
    a_args, a_leaves = make_inputs(program, seed)
    e_out, e_err = _run(fn, e_args)
    a_out, a_err = _run(thunder_mlir.jit(fn), a_args)
    if e_err is not None:
        if a_err is None:
            return f"different: eager raised {type(e_err).__name__}: {e_err}; jit returned"
        if not isinstance(a_err, type(e_err)):
            return (f"different: eager raised {type(e_err).__name__}: {e_err}; jit "
                    f"{type(a_err).__name__}: {a_err}")
        return "eager error"
    if a_err is not None:
        if isinstance(a_err, REFUSALS) and not isinstance(a_err, thunder_mlir.TorchOpError):
            return "refused"
        return f"different: jit raised {type(a_err).__name__}: {a_err}"
    e_outs, a_outs = _tensors(e_out), _tensors(a_out)
    if len(e_outs) != len(a_outs):
        return "different: number of outputs"
    for k, (a, e) in enumerate(zip(a_outs, e_outs)):
        if not _same(a, e):
            return f"different: output {k} value/shape {tuple(a.shape)} vs {tuple(e.shape)}"
        if a.requires_grad != e.requires_grad:
            return f"different: output {k} requires_grad {a.requires_grad} vs eager's"
    for k, (a, e) in enumerate(zip(a_args, e_args)):
        if not _same(a, e):
            return f"different: input {k} after the call: {tuple(a.shape)} vs {tuple(e.shape)}"
        if _describe(a) != _describe(e):
            return f"different: input {k} after the call: {_describe(a)} vs {_describe(e)}"
    e_all, a_all = e_args + e_outs, a_args + a_outs
    if _relations(a_all) != _relations(e_all):
        return (f"different: aliasing (inputs then outputs): jit {_relations(a_all)}, eager "
                f"{_relations(e_all)}")
    e_b, a_b = _backward(e_outs, e_args), _backward(a_outs, a_args)
    if (e_b is None) != (a_b is None):
        return f"different: backward: eager {e_b!r}, jit {a_b!r}"
    if e_b is None:
        for k, (a, e) in enumerate(zip(a_leaves, e_leaves)):
            if (a.grad is None) != (e.grad is None) or (
                    e.grad is not None and not _same(a.grad, e.grad)):
                return f"different: gradient of leaf {k}"
    if _probe(a_outs) != _probe(e_outs):
        return "different: in-place update of an output raised differently"
    for k, (a, e) in enumerate(zip(a_all, e_all)):
        if not _same(a, e):
            return f"different: after updating the outputs, tensor {k} (inputs then outputs)"
    return "pass"


def survey(n: int, seed: int = 0, show: bool = True, draw=None) -> dict:
    """Generate (with ``draw``, ``generate`` by default) and compare ``n`` programs;
    returns the counts by verdict (the differences by their first line)."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for i in range(n):
        program = (draw or generate)(rng, i)
        try:
            verdict = compare(program, seed=i)
        except Exception as e:  # noqa: BLE001 - the oracle itself failed
            verdict = f"different: harness error {type(e).__name__}: {e}"
            if show:
                traceback.print_exc()
        key = verdict if not verdict.startswith("different") else "different"
        counts[key] = counts.get(key, 0) + 1
        if show and key == "different":
            print(f"--- {program.name}\n{program.source}{verdict[:600]}\n", flush=True)
    return counts


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    print(survey(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0,
                 draw=generate_aliased if sys.argv[3:] == ["aliased"] else None))
