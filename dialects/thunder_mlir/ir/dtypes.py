"""torch dtypes <-> MLIR element types.

StableHLO convention: signed integers are signless (``i32``), unsigned ones are ``ui8``,
bool is ``i1``. The same element types are used in the thunder dialect. Functions that
build MLIR types need an active ``ir.Context``.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from thunder_mlir.errors import UnsupportedDtypeError

_TO_MLIR = {
    torch.float32: lambda: ir.F32Type.get(),
    torch.float64: lambda: ir.F64Type.get(),
    torch.float16: lambda: ir.F16Type.get(),
    torch.bfloat16: lambda: ir.BF16Type.get(),
    torch.int8: lambda: ir.IntegerType.get_signless(8),
    torch.int16: lambda: ir.IntegerType.get_signless(16),
    torch.int32: lambda: ir.IntegerType.get_signless(32),
    torch.int64: lambda: ir.IntegerType.get_signless(64),
    torch.uint8: lambda: ir.IntegerType.get_unsigned(8),
    torch.bool: lambda: ir.IntegerType.get_signless(1),
    torch.complex64: lambda: ir.ComplexType.get(ir.F32Type.get()),
    torch.complex128: lambda: ir.ComplexType.get(ir.F64Type.get()),
}
_FROM_MLIR_STR = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
    "ui8": torch.uint8, "i1": torch.bool, "complex<f32>": torch.complex64,
    "complex<f64>": torch.complex128,
}


def element_type(dtype: torch.dtype) -> ir.Type:
    """MLIR element type of a torch dtype. Raises UnsupportedDtypeError."""
    try:
        return _TO_MLIR[dtype]()
    except KeyError:
        raise UnsupportedDtypeError(
            f"dtype {dtype} is not supported by thunder_mlir; supported: "
            f"{', '.join(str(d) for d in _TO_MLIR)}") from None


def tensor_type(shape, dtype: torch.dtype) -> ir.RankedTensorType:
    """``tensor<shape x elem>`` for a torch shape and dtype; a symbolic size
    (``ir/symbolic.SymInt``) is a ``?`` dimension."""
    dims = [s if isinstance(s, int) else ir.ShapedType.get_dynamic_size() for s in shape]
    return ir.RankedTensorType.get(dims, element_type(dtype))


def complex_splat(t: ir.RankedTensorType, value) -> ir.Attribute:
    """A DenseElementsAttr of complex tensor type ``t`` with every element ``value``. The
    bindings have no complex scalar attribute (``IntegerAttr.get`` on a complex type hangs
    the process): a one-element NumPy array of the element's width makes the splat."""
    import numpy as np

    width = ir.FloatType(ir.ComplexType(t.element_type).element_type).width
    arr = np.array([complex(value)], dtype=np.complex64 if width == 32 else np.complex128)
    return ir.DenseElementsAttr.get(arr, type=t)


def torch_dtype(t: ir.Type) -> torch.dtype:
    """torch dtype of an MLIR element type or ranked tensor type."""
    if isinstance(t, ir.RankedTensorType):
        t = t.element_type
    return _FROM_MLIR_STR[str(t)]


def nbytes(t: ir.Type) -> int:
    """Bytes of a value of type ``t``: a static ranked tensor's element count times its
    element's size in torch (bool: 1 byte); 0 for a value that is not a ranked tensor.
    Raises KeyError for an element type torch has no dtype for."""
    if not isinstance(t, ir.RankedTensorType) and not ir.RankedTensorType.isinstance(t):
        return 0
    n = 1
    for d in ir.RankedTensorType(t).shape:
        n *= d
    return n * torch.empty((), dtype=torch_dtype(t)).element_size()


def shape_of(t: ir.Type) -> tuple[int, ...]:
    """Static shape of a ranked tensor type."""
    return tuple(ir.RankedTensorType(t).shape)


def is_inexact(dtype: torch.dtype) -> bool:
    """Floating-point or complex: the dtypes autograd differentiates and true division
    keeps (NumPy's "inexact")."""
    return dtype.is_floating_point or dtype.is_complex


def scan_acc_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The accumulation dtype of ATen's scan kernels (``at::acc_type<scalar_t, is_cuda>``):
    on CPU, float32 scans accumulate in float64 and 16-bit floats in float32; on CUDA,
    16-bit floats in float32."""
    if device.type == "cpu" and dtype is torch.float32:
        return torch.float64
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype
