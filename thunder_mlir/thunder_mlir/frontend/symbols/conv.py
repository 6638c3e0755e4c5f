"""Convolutions: conv1d/2d/3d and conv_transpose1d/2d/3d.

Convolutions are stablehlo.convolution (spec section "convolution"); a transposed
convolution is the convolution of the stride-dilated input with the spatially flipped,
in/out-swapped kernel (the gradient of conv w.r.t. its input, as torch defines
conv_transpose).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend.symbols.registry import register


def _tuple(v, n):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    return v * n if len(v) == 1 else v


def _batched(input, n):
    """(input with a batch dim, whether it was added) for n spatial dims."""
    if len(input.tshape) == n + 1:
        return prims.reshape(input, (1,) + input.tshape), True
    return input, False


def _up(x):
    """float16/bfloat16 compute in float32 (torch's CPU kernels accumulate in float32)."""
    if x.tdtype in (torch.float16, torch.bfloat16):
        return prims.convert_element_type(x, torch.float32)
    return x


def _bias(out, bias):
    if bias is None:
        return out
    return prims.elementwise("add", out, prims.broadcast_in_dim(
        prims.convert_element_type(bias, out.tdtype), out.tshape, [1]))


def _conv(n):
    def impl(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        if input.tdtype != weight.tdtype or not input.tdtype.is_floating_point:
            raise Fallback("convolution of non-float or mixed dtypes")
        x, added = _batched(input, n)
        x, weight, out_dt = _up(x), _up(weight), input.tdtype
        stride, dilation = _tuple(stride, n), _tuple(dilation, n)
        ks = weight.tshape[2:]
        if isinstance(padding, str):
            if padding == "valid":
                pads = [(0, 0)] * n
            elif padding == "same":
                pads = []
                for k, d in zip(ks, dilation):
                    total = d * (k - 1)
                    pads.append((total // 2, total - total // 2))
            else:
                raise ValueError(f"Invalid padding string {padding!r}")
        else:
            pads = [(p, p) for p in _tuple(padding, n)]
        out = prims.convolution(x, weight, stride, pads, (1,) * n, dilation, groups)
        out = prims.convert_element_type(_bias(out, bias), out_dt)
        return prims.reshape(out, out.tshape[1:]) if added else out
    return impl


conv1d = register("conv1d", F.conv1d, torch.conv1d)(_conv(1))
conv2d = register("conv2d", F.conv2d, torch.conv2d)(_conv(2))
conv3d = register("conv3d", F.conv3d, torch.conv3d)(_conv(3))


def _conv_t(n):
    def impl(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
             dilation=1):
        if input.tdtype != weight.tdtype or not input.tdtype.is_floating_point:
            raise Fallback("transposed convolution of non-float or mixed dtypes")
        if isinstance(padding, str):
            raise Fallback("conv_transpose with string padding")
        x, added = _batched(input, n)
        x, weight, out_dt = _up(x), _up(weight), input.tdtype
        stride, padding = _tuple(stride, n), _tuple(padding, n)
        output_padding, dilation = _tuple(output_padding, n), _tuple(dilation, n)
        cin, coutg, *ks = weight.tshape
        g = groups
        w = prims.reshape(weight, (g, cin // g, coutg) + tuple(ks))
        w = prims.transpose(w, [0, 2, 1] + list(range(3, 3 + n)))
        w = prims.reshape(w, (g * coutg, cin // g) + tuple(ks))
        w = prims.reverse(w, list(range(2, 2 + n)))
        pads = [(d * (k - 1) - p, d * (k - 1) - p + op)
                for k, d, p, op in zip(ks, dilation, padding, output_padding)]
        out = prims.convolution(x, w, (1,) * n, pads, stride, dilation, g)
        out = prims.convert_element_type(_bias(out, bias), out_dt)
        return prims.reshape(out, out.tshape[1:]) if added else out
    return impl


register("conv_transpose1d", F.conv_transpose1d, torch.conv_transpose1d)(_conv_t(1))
register("conv_transpose2d", F.conv_transpose2d, torch.conv_transpose2d)(_conv_t(2))
register("conv_transpose3d", F.conv_transpose3d, torch.conv_transpose3d)(_conv_t(3))
