"""Which symbols take complex numbers to XLA.

StableHLO has complex element types, and its elementwise ops, dot_general, reductions and
data movement accept them (https://openxla.org/stablehlo/spec). But a symbol written for
real tensors can be wrong on complex ones in ways no verifier catches: a result that should
be real (``var`` of complex is real), an order that complex numbers do not have
(``max``, ``sort``), a branch cut or a precision that differs from torch's. So a call with
a complex tensor, a complex ``dtype`` or a Python ``complex`` reaches a symbol's
decomposition only if the symbol is listed in ``COMPLEX_SYMBOLS``; any other runs on the
torch fallback (``thunder_mlir.examine`` says so). The list holds the symbols that the
OpInfo complex64 conformance pass (``tests/test_opinfo.py``, every sample) verified on XLA.
"""

from __future__ import annotations

import optree
import torch

from thunder_mlir.ir.proxy import TensorProxy

COMPLEX_SYMBOLS = frozenset(f"ltorch.{n}" for n in (
    "abs", "acos", "acosh", "add", "addbmm", "addcdiv", "addcmul", "addmm", "addmv", "addr",
    "alias_copy", "asin", "asinh", "atan", "atanh", "atleast_1d", "atleast_2d",
    "atleast_3d", "baddbmm", "bfloat16", "block_diag", "bmm", "bool", "broadcast_tensors",
    "broadcast_to", "byte", "cartesian_prod", "cat", "channel_shuffle", "char", "chunk",
    "clone", "column_stack", "combinations", "contiguous", "cos", "cosh", "cross",
    "cumprod", "cumsum", "cumulative_trapezoid", "diag", "diag_embed", "diagflat",
    "diagonal", "diagonal_copy", "diagonal_scatter", "diff", "dist", "div", "dot", "double",
    "dsplit", "dstack", "einsum", "empty", "empty_like", "eq", "exp", "exp2", "expand",
    "expand_as", "expand_copy", "expm1", "eye", "fill", "flatten",
    "flip", "fliplr", "flipud", "float", "full", "full_like", "gather", "getitem",
    "half", "hsplit", "hstack", "index_add", "index_copy", "index_fill", "index_put",
    "index_select", "inner", "int", "isfinite", "isinf", "isnan", "kron", "l1_loss",
    "ldexp", "linalg_diagonal", "linalg_norm", "linear", "linspace", "log", "log10",
    "log1p", "log2", "log_softmax", "logical_and", "logical_not", "logical_or",
    "logical_xor", "logspace", "long", "mT", "masked_fill", "masked_scatter", "matmul",
    "matrix_power", "mean", "meshgrid", "mm", "movedim", "mul",
    "multi_dot", "mv", "narrow", "narrow_copy", "ne", "neg", "new_empty", "new_full",
    "new_ones", "new_zeros", "norm", "ones", "ones_like", "outer", "pad",
    "pairwise_distance", "permute", "permute_copy", "pixel_shuffle", "pixel_unshuffle",
    "positive", "pow", "prod", "put", "ravel", "rdiv", "reciprocal", "renorm", "repeat",
    "repeat_interleave", "reshape", "rmatmul", "rms_norm", "roll", "rot90", "rsqrt", "rsub",
    "scalar_tensor", "scatter", "scatter_add", "select", "short", "sigmoid", "silu", "sin",
    "sinc", "sinh", "softmax", "softmin", "softsign", "split", "split_with_sizes",
    "split_with_sizes_copy", "sqrt", "square", "squeeze", "squeeze_copy", "stack", "sub",
    "sum", "sum_to_size", "t", "t_copy", "take", "take_along_dim", "tan", "tanh",
    "tanhshrink", "tensor", "tensor_split", "tensordot", "tile", "to", "trace", "transpose",
    "transpose_copy", "trapezoid", "trapz", "tril", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "triu", "unbind", "unbind_copy", "unflatten",
    "unfold", "unfold_copy", "unfold_im2col", "unsafe_chunk", "unsafe_split", "unsqueeze",
    "unsqueeze_copy", "vander", "vector_norm", "view_as", "view_copy", "vsplit", "vstack",
    "where", "zeros", "zeros_like", "zeros_like_", "var", "std", "var_mean", "std_mean",
))


def involves_complex(args: tuple, kwargs: dict) -> bool:
    """Whether a torch call's arguments hold a complex tensor, dtype or Python number."""
    for leaf in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        if type(leaf) is TensorProxy:
            if leaf.tdtype.is_complex:
                return True
        elif isinstance(leaf, complex) or (isinstance(leaf, torch.dtype) and leaf.is_complex):
            return True
    return False
