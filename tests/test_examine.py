"""``thunder_mlir.examine``: its report must agree with what ``jit`` actually does (the
fallback ops ``jit`` records) and the jitted program must still match eager PyTorch."""

from __future__ import annotations

import pytest
import torch

import thunder_mlir
from conftest import assert_close_to_eager, unregistered_cumprod


def test_examine_gpt2_all_on_xla():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 1000, (2, 64))
    report = thunder_mlir.examine(model, ids, use_cache=False)
    assert report.all_on_xla, str(report)
    names = {o.name for o in report.xla_ops}
    assert {"ltorch.layer_norm", "ltorch.embedding"} <= names, names
    assert "on XLA" in str(report) and "torch fallback" in str(report)
    # the report agrees with jit: no fallbacks, eager result
    jm = thunder_mlir.jit(model)
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
        actual = jm(ids, use_cache=False).logits
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    assert thunder_mlir.fallback_ops(jm) == []


def _program(x, y):
    a = torch.einsum("...ij->...ji", x)  # the symbol declines: einsum with an ellipsis
    b = unregistered_cumprod(y, 1)  # a torch function with no symbol
    return a.sum() * 0 + (b.softmax(-1) + y).sum()


def test_examine_reports_fallbacks_and_reasons():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    report = thunder_mlir.examine(_program, x, y)
    assert not report.all_on_xla
    fb = {o.name: o for o in report.fallback_ops}
    cp = next(n for n in fb if n.endswith("unregistered_cumprod"))
    assert set(fb) == {"torch.functional.einsum", cp}, str(report)
    assert "ellipsis" in fb["torch.functional.einsum"].reason
    assert "no thunder_mlir symbol" in fb[cp].reason
    # the user's line (unregistered_cumprod's own frame is conftest.py, user code too)
    assert "test_examine.py" in fb["torch.functional.einsum"].locations[0], str(report)
    assert {"ltorch.softmax", "ltorch.add", "ltorch.sum"} <= {o.name for o in report.xla_ops}
    text = str(report)
    assert "unregistered_cumprod" in text and "why:" in text
    # jit falls back on exactly the ops examine names, and still gives the eager result
    jfn = assert_close_to_eager(_program, x, y, expect_fallback=True)
    assert set(thunder_mlir.fallback_ops(jfn)) == set(fb)


def test_examine_counts_and_unsupported_input():
    def f(x):
        return torch.cumsum(x, 0) + torch.cumsum(x, 1)

    report = thunder_mlir.examine(f, torch.randn(3, 3))
    cs = [o for o in report.ops if o.name == "ltorch.cumsum"]
    assert cs and cs[0].count == 2 and cs[0].executor == "xla"
    with pytest.raises(thunder_mlir.UnsupportedInputError):
        thunder_mlir.examine(f, object())
