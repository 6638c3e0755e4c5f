"""torch.autocast's op lists, as data: which ATen op is cast how, per device type.

Source: PyTorch's ``aten/src/ATen/autocast_mode.cpp`` (the ``AutocastCPU`` registrations,
and the ``AutocastCUDA`` ones built from the ``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` and ``AT_FORALL_PROMOTE`` lists of
``autocast_mode.h``), as registered in the torch build this project pins (2.13: names with
their overload, as the dispatcher spells them). ``tests/test_autocast.py`` checks these
tables against the dispatcher of the installed torch (an op gaining or losing an autocast
kernel in a torch upgrade fails that test). The user-facing description is PyTorch's
"Autocast Op Reference" (docs/source/amp.rst).

Policies (``CastPolicy`` in ``autocast_mode.h``):

* ``lower``: floating-point tensor arguments (not float64) are cast to the autocast dtype
  (``torch.get_autocast_dtype(device)``: bfloat16 by default on CPU, float16 on CUDA);
* ``fp32``: they are cast to float32;
* ``fp32_set_opt_dtype``: if the first argument is such a tensor and no ``dtype`` was
  passed, the op runs with ``dtype=torch.float32``;
* ``fp32_append_dtype``: ``norm`` without a dtype runs as ``norm(..., dtype=float32)``
  when the first argument is such a tensor;
* ``promote``: such tensors are cast to the widest of their dtypes (float32 if any is
  float32, else the autocast dtype; a 16-bit dtype other than the autocast dtype is an
  error);
* ``banned``: the op raises (CUDA ``binary_cross_entropy``).
"""

from __future__ import annotations

from thunder_mlir.frontend import torch_internals

LOWER, FP32, FP32_SET_OPT_DTYPE, FP32_APPEND_DTYPE, PROMOTE, BANNED = (
    "lower", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")
# Policies of the symbol-level tables (autocast.py) beyond ATen's: run the call on the
# torch fallback executor under the traced autocast state (exactly eager's meaning).
TORCH = "torch"

# ------------------------------------------------------------------------------- CPU
_CPU_LOWER = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding",
    "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "_addmm_activation", "addbmm",
    "linear", "_convolution.deprecated", "matmul", "conv_tbc", "mkldnn_rnn_layer",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "prelu",
    "scaled_dot_product_attention", "_native_multi_head_attention")
_CPU_FP32 = (
    # pooling, padding, sampling
    "avg_pool3d", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d",
    "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d",
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "grid_sampler", "grid_sampler_2d", "_grid_sampler_2d_cpu_fallback",
    "grid_sampler_3d",
    # reductions and statistics
    "prod", "prod.dim_int", "quantile", "quantile.scalar", "nanquantile",
    "nanquantile.scalar", "trace", "cdist",
    # losses
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss",
    "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss",
    "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div", "multilabel_margin_loss",
    "multilabel_margin_loss_forward",
    # spectral and complex
    "stft", "stft.center", "polar", "view_as_complex",
    "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft",
    "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft",
    "fft_ihfft",
    # linear algebra
    "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr",
    "ormqr", "pinverse", "geqrf", "_lu_with_info", "qr", "svd", "triangular_solve",
    "linalg_cond", "linalg_cond.p_str", "linalg_matrix_rank", "linalg_matrix_rank.tol_tensor",
    "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float",
    "linalg_solve", "linalg_cholesky", "linalg_cholesky_ex", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_inv_ex",
    "linalg_householder_product", "linalg_tensorinv", "linalg_tensorsolve", "linalg_qr",
    "linalg_svd", "linalg_eig", "linalg_eigh", "linalg_lstsq",
    # quantization
    "fake_quantize_per_tensor_affine")
_CPU_PROMOTE = ("stack", "cat", "index_copy")

# ------------------------------------------------------------------------------ CUDA
_CUDA_LOWER = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution",
    "cudnn_convolution", "cudnn_convolution_transpose", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention")
_CUDA_FP32 = (
    # pointwise
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus",
    # normalization and norms
    "layer_norm", "native_layer_norm", "group_norm", "rms_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "renorm", "logsumexp",
    # distances
    "cosine_similarity", "dist", "pdist", "cdist",
    # losses
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits",
    # upsampling
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa")
_CUDA_FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList")
_CUDA_FP32_APPEND_DTYPE = ("norm.Scalar", "norm.ScalarOpt_dim")
_CUDA_PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot",
                 "grid_sampler", "index_put", "tensordot", "scatter_add")
_CUDA_BANNED = ("binary_cross_entropy",)


# torch < 2.13 (checked on 2.11.0 by make compat, against its dispatcher; docs/compat.md):
# * AutocastCPU and AutocastCUDA also register Dimname overloads, with their base op's
#   policy. Named tensors are never traced, so these entries only keep the tables equal to
#   the installed dispatcher's.
# * AutocastCUDA also registers ``_cudnn_rnn`` (aten/src/ATen/cudnn/AutocastRNN.cpp: casts
#   to the autocast dtype and reflattens the weights; cuDNN's RNN is never traced).
# * AutocastCUDA has **no** ``rms_norm`` kernel (2.13 added it to the fp32 list): on 2.11
#   ``rms_norm`` falls through to its decomposition, whose ops (``pow``, ``rsqrt``, ...) are
#   cast one by one. Without a table entry the trace-level probe (autocast_probe.py) runs
#   eager's decomposition under autocast and follows it.
_OLD_TORCH = torch_internals.TORCH_BEFORE_2_13
_CPU_FP32_OLD = ("prod.dim_Dimname",) if _OLD_TORCH else ()
_CPU_PROMOTE_OLD = ("index_copy.dimname",) if _OLD_TORCH else ()
_CUDA_LOWER_OLD = ("_cudnn_rnn",) if _OLD_TORCH else ()
_CUDA_FP32_OLD_DROPPED = ("rms_norm",) if _OLD_TORCH else ()
_CUDA_FP32_SET_OPT_DTYPE_OLD = (
    "prod.dim_Dimname", "softmax.Dimname", "log_softmax.Dimname", "cumprod.dimname",
    "cumsum.dimname", "sum.dim_DimnameList") if _OLD_TORCH else ()
_CUDA_FP32_APPEND_DTYPE_OLD = ("norm.names_ScalarOpt_dim",) if _OLD_TORCH else ()


def _table(**groups: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for policy, names in groups.items():
        for n in names:
            assert n not in out, f"{n} listed twice"
            out[n] = policy
    return out


# device type -> ATen op name (with overload) -> policy
ATEN_POLICIES: dict[str, dict[str, str]] = {
    "cpu": _table(lower=_CPU_LOWER, fp32=_CPU_FP32 + _CPU_FP32_OLD,
                  promote=_CPU_PROMOTE + _CPU_PROMOTE_OLD),
    "cuda": _table(lower=_CUDA_LOWER + _CUDA_LOWER_OLD,
                   fp32=tuple(n for n in _CUDA_FP32 if n not in _CUDA_FP32_OLD_DROPPED),
                   fp32_set_opt_dtype=_CUDA_FP32_SET_OPT_DTYPE + _CUDA_FP32_SET_OPT_DTYPE_OLD,
                   fp32_append_dtype=_CUDA_FP32_APPEND_DTYPE + _CUDA_FP32_APPEND_DTYPE_OLD,
                   promote=_CUDA_PROMOTE, banned=_CUDA_BANNED),
}

# Eager's error for an op the CUDA list bans (autocast_mode.cpp, binary_cross_entropy_banned).
BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using "
    "torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")
