"""Gradients of convolutions against eager PyTorch (``torch.autograd.grad``), over the
parameters that change the convolution prim's VJP (``ir/vjp_rules.convolution``): 1-, 2- and
3-d, stride, padding, dilation, groups 1, groups between, depthwise (groups = in_channels),
a channel multiplier (out_channels = k * groups), batch > 1, and transposed convolutions
(whose weight gradient takes the input as the window, ``_convolution_rhs_grad``).

float64, so the comparison is eager's own tolerance, not float32 rounding (float32 3-d
convolutions are differentiated by ATen instead, ``vjp_composites._conv3d``). Each gradient
is one XLA convolution whatever the groups (issue 48: a per-group loop made a depthwise
Conv2d of C channels C + 2 convolutions and timm's mobilenets never finished compiling).
On the CPU target a depthwise weight gradient (batch groups of one row) is lowered as one
multiply-and-reduce per window position instead (``hlo._batch_group_taps``: XLA:CPU runs a
batch-grouped convolution densely); each case runs with that lowering (``taps``) and with
the GPU's single batch-grouped convolution (``conv``, the depthwise cases).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir import pipeline
from thunder_mlir.ir import hlo as hlo_lowering

# (spatial sizes, batch, in channels, out channels, groups, kernel, stride, padding,
#  dilation, output_padding of the transposed convolution, or None for none)
CASES = {
    "1d_depthwise_x2_strided_dilated": ((11,), 3, 6, 12, 6, 3, 2, 2, 2, 1),
    "1d_groups3_of2_to3": ((13,), 1, 6, 9, 3, 4, 3, 0, 1, None),
    "2d_depthwise": ((7, 7), 2, 8, 8, 8, 3, 1, 1, 1, None),
    "2d_depthwise_x2_mixed": ((7, 6), 2, 8, 16, 8, (3, 2), (2, 1), (1, 0), (1, 2), (1, 0)),
    "2d_groups2_strided_dilated": ((9, 8), 3, 6, 4, 2, 3, 2, 0, 2, None),
    "3d_depthwise": ((4, 5, 3), 2, 4, 4, 4, 2, 1, 1, 1, None),
    "3d_groups3_strided": ((5, 5, 4), 2, 6, 6, 3, 3, 2, 1, 1, 1),
    "3d_groups1_dilated": ((5, 4, 5), 1, 2, 4, 1, 2, 1, (1, 0, 1), 2, None),
}


def _t(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _case(case):
    """(arguments, program) of ``case``: float64 input, weight and bias, and the transposed
    convolution's weight and bias where the case has one."""
    spatial, batch, cin, cout, groups, k, stride, padding, dilation, out_pad = CASES[case]
    n = len(spatial)
    stride, padding, dilation = (_t(v, n) for v in (stride, padding, dilation))
    conv, conv_t = getattr(F, f"conv{n}d"), getattr(F, f"conv_transpose{n}d")
    d = torch.float64
    args = [torch.randn(batch, cin, *spatial, dtype=d),
            torch.randn(cout, cin // groups, *_t(k, n), dtype=d), torch.randn(cout, dtype=d)]
    if out_pad is None:
        return args, lambda x, w, b: conv(x, w, b, stride, padding, dilation, groups)
    # conv_t's weight is (in, out / groups, *k): it maps the cout channels back to cin
    args += [torch.randn(cout, cin // groups, *_t(k, n), dtype=d), torch.randn(cin, dtype=d)]
    out_pad = _t(out_pad, n)

    def f(x, w, b, wt, bt):
        # the transposed convolution reads the convolution's output: x's gradient flows
        # back through both
        y = conv(x, w, b, stride, padding, dilation, groups)
        return y, conv_t(y.tanh(), wt, bt, stride, padding, out_pad, groups, dilation)
    return args, f


def _grads(fn, args, cots):
    leaves = [a.detach().clone().requires_grad_() for a in args]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return outs, torch.autograd.grad(outs, leaves, cots)


def _one_row_batch_groups(hlo: str) -> int:
    """The convolutions of ``hlo`` with batch_group_count G > 1 and an lhs batch of G."""
    n = 0
    for c in re.findall(r"stablehlo\.convolution\(.*", hlo):
        g = re.search(r"batch_group_count = (\d+)", c)
        lhs = re.search(r": \(tensor<(\d+)x", c)
        n += bool(g and lhs and int(g.group(1)) > 1 and g.group(1) == lhs.group(1))
    return n


# every case with the CPU's lowering; the depthwise ones (where the lowerings differ) with
# the GPU's too
_LOWERINGS = [(c, "taps") for c in CASES] + [
    (c, "conv") for c, v in CASES.items() if v[2] == v[4]]


@pytest.mark.parametrize("case,lowering", _LOWERINGS)
def test_convolution_gradients_are_eagers(case, lowering, monkeypatch):
    monkeypatch.setattr(pipeline.Target, "batch_group_taps",
                        property(lambda self: lowering == "taps"))
    monkeypatch.setattr(hlo_lowering, "MIN_TAP_PRODUCTS", 0)  # (the cases are small)
    torch.manual_seed(0)
    args, fn = _case(case)
    with torch.no_grad():
        first = fn(*args)
    cots = [torch.randn_like(o) for o in (first if isinstance(first, tuple) else (first,))]
    expected, e_grads = _grads(fn, args, cots)
    jfn = thunder_mlir.jit(fn)
    actual, a_grads = _grads(jfn, args, cots)
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, msg=lambda m, i=i: f"{case} output {i}: {m}")
    names = ("x", "w", "b", "wt", "bt")
    for name, a, e in zip(names, a_grads, e_grads):
        torch.testing.assert_close(a, e, msg=lambda m, name=name: f"{case} d{name}: {m}")
    # each gradient of each convolution is one XLA convolution (the forward's, the input
    # gradient's, the weight gradient's), not one per group; with taps, a depthwise weight
    # gradient is none
    hlo = next(s for s in thunder_mlir.last_traces(jfn) if s.name == "stablehlo").text
    convs = re.findall(r"stablehlo\.convolution\(.*", hlo)
    groups, cin = CASES[case][4], CASES[case][2]
    taps = len(expected) if lowering == "taps" and groups == cin else 0
    assert len(convs) == 3 * len(expected) - taps, case
    if groups > 1:  # the forward's feature groups are the weight gradient's batch groups
        assert sum(f"batch_group_count = {groups} :" in c for c in convs) == \
            len(expected) - taps
    assert _one_row_batch_groups(hlo) == (
        0 if lowering == "taps" else len(expected) if groups == cin else 0), case


def test_batch_grouped_convolution_gradients_are_the_specs():
    """The VJP of a convolution with ``batch_group_count`` > 1 (the weight gradient of a
    grouped convolution, differentiated again when a program's backward is): eager's oracle
    is the StableHLO spec's meaning, the batch and the output channels split into B blocks,
    block b of the output convolving block b of the batch, concatenated over channels.
    No torch function makes such a convolution, so the program calls the prim; the
    ``+ 0 * (...)`` makes the output one that requires grad (prims do not set the flag)."""
    from thunder_mlir.ir import prims

    B = 3

    def spec(x, w):
        return torch.cat([F.conv2d(a, b, None, (2, 1), (1, 0), (1, 2))
                          for a, b in zip(x.chunk(B, 0), w.chunk(B, 0))], 1)

    def prim(x, w):
        y = prims.convolution(x, w, (2, 1), [(1, 1), (0, 0)], (1, 1), (1, 2), 1, B)
        return y + (x.sum() + w.sum()) * 0

    torch.manual_seed(0)
    args = (torch.randn(6, 4, 7, 6, dtype=torch.float64),
            torch.randn(9, 4, 3, 2, dtype=torch.float64))
    with torch.no_grad():
        cots = [torch.randn_like(spec(*args))]
    (expected,), e_grads = _grads(spec, args, cots)
    (actual,), a_grads = _grads(thunder_mlir.jit(prim), args, cots)
    torch.testing.assert_close(actual, expected)
    for name, a, e in zip(("x", "w"), a_grads, e_grads):
        torch.testing.assert_close(a, e, msg=lambda m, name=name: f"d{name}: {m}")


def test_pointwise_weight_gradient_is_as_close_to_float64_as_eagers():
    """The weight gradient of a float32 1 x 1 convolution contracts N x H x W products per
    output (2 x 32 x 32 = 2,048 here). XLA:CPU summed that convolution in one running sum,
    6.5x further from the float64 gradient than eager float32 is (11x at 64 x 64: the
    pointwise convolutions of mobilenets); the CPU target sums it in blocks
    (``hlo._blocked_contraction``): 1.1x. The jit must be within 2x of eager's distance."""
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32, 32)
    w = torch.randn(144, 16, 1, 1) * 0.25
    cot = torch.randn(2, 144, 32, 32)

    def dw(fn, dtype):
        leaves = [x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()]
        (g,) = torch.autograd.grad(fn(*leaves), leaves[1:], cot.to(dtype))
        return g.double()

    conv = F.conv2d
    ref = dw(conv, torch.float64)
    eager = (dw(conv, torch.float32) - ref).abs().max().item()
    jit = (dw(thunder_mlir.jit(conv), torch.float32) - ref).abs().max().item()
    assert jit <= 2 * eager, f"|jit - f64| {jit:.3g}, |eager - f64| {eager:.3g}"
