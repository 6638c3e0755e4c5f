"""Scalar attributes are read through ``thunder_mlir.ir.attrs``, never by a raw cast.

A composite records a non-tensor argument typed by the Python value the user passed
(``dropout_p=0`` is an i64), so a reader that casts it to the schema's type
(``ir.FloatAttr(...)``) raises on an int (issue 45: GPT-2 with ``attn_pdrop=0``), and one
that casts a bool to ``ir.IntegerAttr`` reads ``True`` as -1. These tests hold the rule
(no raw cast anywhere in the package's sources), the accessor's conversions, and the two
failures the rule removed, each end to end.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_mlir import ir

import thunder_mlir
from thunder_mlir.ir import attrs
from thunder_mlir.ir.context import get_context

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("thunder_mlir", "dialects", "passes", "tools")
ACCESSOR = ROOT / "dialects" / "thunder_mlir" / "ir" / "attrs.py"
NUMERIC = {"FloatAttr", "IntegerAttr", "BoolAttr"}


def _raw_reads(path: Path, base: Path = ROOT) -> list[str]:
    """``file:line`` of each raw cast (``ir.FloatAttr(a)``, ``IntegerAttr(a)``, ...) and
    each type test (``isinstance(a, ir.FloatAttr)``) of a numeric attribute in ``path``.
    Building one (``ir.FloatAttr.get_f64(...)``) is not a read."""
    def numeric(node) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else \
            node.id if isinstance(node, ast.Name) else None
        return name in NUMERIC

    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        if numeric(node.func):
            out.append(f"{path.relative_to(base)}:{node.lineno}: cast")
        elif isinstance(node.func, ast.Name) and node.func.id == "isinstance" and \
                len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(numeric(k) for k in kinds):
                out.append(f"{path.relative_to(base)}:{node.lineno}: isinstance")
    return sorted(out, key=lambda h: int(h.split(":")[1]))


def test_no_raw_numeric_attribute_reads():
    """Every number read from an attribute goes through ``thunder_mlir.ir.attrs``: a raw
    cast anywhere in the package's sources fails here."""
    files = [p for root in SOURCES for p in (ROOT / root).rglob("*.py") if p != ACCESSOR]
    assert len(files) > 100
    bad = [hit for p in files for hit in _raw_reads(p)]
    assert not bad, ("numeric attributes read by a raw cast; read them with "
                     "thunder_mlir.ir.attrs.get_float/get_int/get_bool/get_value:\n  " +
                     "\n  ".join(bad))


def test_the_rule_sees_a_raw_cast(tmp_path):
    """The scan can fail: it finds the cast issue 45's rule made, and a type test."""
    p = tmp_path / "probe.py"
    p.write_text("def f(op):\n"
                 "    return ir.FloatAttr(op.attributes['dropout_p']).value\n"
                 "def g(a):\n"
                 "    return isinstance(a, (ir.StringAttr, ir.BoolAttr))\n"
                 "def h():\n"
                 "    return ir.FloatAttr.get_f64(0.0)\n")
    assert _raw_reads(p, tmp_path) == ["probe.py:2: cast", "probe.py:4: isinstance"]


def _attr(value):
    from thunder_mlir.frontend.symbol import to_attribute

    return to_attribute(value)


def test_accessor_converts_as_torch_parameters_do():
    with get_context(), ir.Location.unknown():
        assert attrs.to_float(_attr(0)) == 0.0 and type(attrs.to_float(_attr(0))) is float
        assert attrs.to_float(_attr(False)) == 0.0
        assert attrs.to_float(_attr(0.5)) == 0.5
        assert attrs.to_int(_attr(True)) == 1  # (ir.IntegerAttr(BoolAttr(true)) reads -1)
        assert attrs.to_int(_attr(-3)) == -3 and attrs.to_int(_attr(2.0)) == 2
        with pytest.raises(TypeError, match="not an integer"):
            attrs.to_int(_attr(0.5))
        assert attrs.to_bool(_attr(True)) is True and attrs.to_bool(_attr(0)) is False
        assert attrs.to_python(_attr(1)) == 1 and type(attrs.to_python(_attr(1))) is int
        assert type(attrs.to_python(_attr(1.0))) is float
        assert attrs.to_python(_attr([1, True, 2.5])) == [1, True, 2.5]
        with pytest.raises(TypeError, match="not a number"):
            attrs.to_float(_attr("mean"))


def test_get_reads_an_ops_attribute_or_its_default():
    with get_context(), ir.Location.unknown():
        op = ir.Operation.create("test.op", attributes={
            "p": _attr(0), "dim": _attr(True), "shape": _attr(8), "flags": _attr([True, 0])})
        assert attrs.get_float(op, "p") == 0.0
        assert attrs.get_int(op, "dim") == 1
        assert attrs.get_ints(op, "shape") == [8]
        assert attrs.get_bools(op, "flags") == [True, False]
        assert attrs.get_float(op, "scale", None) is None
        with pytest.raises(KeyError, match="'scale'"):
            attrs.get_float(op, "scale")


@pytest.mark.parametrize("dropout_p", [0, False, 0.0], ids=["int", "bool", "float"])
@pytest.mark.parametrize("scale", [None, 1], ids=["default-scale", "int-scale"])
def test_sdpa_backward_with_integer_dropout_p(dropout_p, scale):
    """Issue 45: an int ``dropout_p`` (GPT2Config(attn_pdrop=0)) crashed the attention
    rule's check; the shapes make the rule apply (probabilities over
    ``SDPA_SAVED_PROBS_BYTES``), and an int ``scale`` is read as a float too."""
    from thunder_mlir.transforms.vjp_composites import SDPA_SAVED_PROBS_BYTES

    q, k, v = (torch.randn(2, 2, 192, 16, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    assert 2 * 2 * 192 * 192 * 4 > SDPA_SAVED_PROBS_BYTES

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True,
                                              scale=scale)

    grads = []
    for fn in (f, thunder_mlir.jit(f)):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*ins)
        out.backward(torch.ones_like(out))
        grads.append((out.detach(), [t.grad for t in ins]))
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=1e-5, rtol=1e-5)
    for a, e in zip(grads[1][1], grads[0][1]):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


def test_bool_dim_is_one_not_minus_one_in_a_grad_rule():
    """A bool where an int is wanted (``aten._safe_softmax(x, True)``, which the op
    overload accepts): the softmax rule read ``True`` as -1 through ``ir.IntegerAttr`` and
    gave a silently wrong gradient (found by tests/test_opinfo_scalars.py)."""
    x = torch.randn(2, 3, 4)
    g = torch.randn(2, 3, 4)

    def f(x):
        return torch.ops.aten._safe_softmax.default(x, True)

    out = []
    for fn in (f, thunder_mlir.jit(f)):
        xi = x.clone().requires_grad_()
        (fn(xi) * g).sum().backward()
        out.append(xi.grad)
    torch.testing.assert_close(out[1], out[0])
