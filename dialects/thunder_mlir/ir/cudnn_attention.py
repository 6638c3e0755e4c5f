"""cuDNN's fused (flash) attention as two prims, ``thunder.cudnn_attention`` and
``thunder.cudnn_attention_backward``, lowered to the custom calls XLA's GPU compiler
hands to cuDNN (``__cudnn$fmhaSoftmax``, ``__cudnn$fmhaSoftmaxBackward``): the calls
``jax.nn.dot_product_attention(implementation="cudnn")`` emits
(``jax/_src/cudnn/fused_attention_stablehlo.py``: its backend config and operand order).

* ``cudnn_attention(q, k, v) -> (out, lse)``: ``q`` [B, N, T, D], ``k``/``v``
  [B, K, S, D] (K divides N: grouped heads), bfloat16 or float16; ``out`` [B, N, T, D] of
  ``q``'s dtype, ``lse`` [B, N, T] float32: the log-sum-exp of each row of scaled scores,
  what the backward reads instead of the probabilities (FlashAttention-2, Dao 2023).
  Attributes: ``scale`` (a float), ``causal`` (0/1: the upper triangle masked, T == S).
* ``cudnn_attention_backward(q, k, v, out, lse, dout) -> (dq, dk, dv)``.

They stand for the ``flash_attention`` and ``flash_attention_backward`` composites
(frontend/symbols/attention.py, whose decompositions define their values) on a GPU: the
``cudnn-attention`` pass (passes/cudnn_attention.py) replaces those composites by them.
``supported`` says which calls cuDNN takes (jax's ``check_is_flash_attention``: 16-bit
floats, head dim a multiple of 8 up to 256 on Hopper).
"""

from __future__ import annotations

import json

import numpy as np
import torch
from torch_mlir import ir

from thunder_mlir.ir import attrs
from thunder_mlir.ir.hlo import hlo
from thunder_mlir.ir.primdef import INT, NUMBER, TensorSpec, check, define

FORWARD, BACKWARD = "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"
DTYPES = (torch.bfloat16, torch.float16)
MAX_HEAD_DIM = 256  # Hopper and later (128 before: the targets here are H100/H200)


def supported(q_shape, k_shape, v_shape, dtype: torch.dtype, causal: bool) -> str | None:
    """None when cuDNN's flash attention takes q/k/v of these shapes (BNTH layout) and
    dtype, else why not (shown in ``last_traces``)."""
    if dtype not in DTYPES:
        return f"dtype {dtype} (cuDNN's flash attention takes bfloat16 and float16)"
    if not (len(q_shape) == len(k_shape) == len(v_shape) == 4):
        return "not 4-d [batch, heads, sequence, head dim] operands"
    (b, n, t, d), (bk, kh, s, dk), (bv, vh, sv, dv) = q_shape, k_shape, v_shape
    if not (b == bk == bv and kh == vh and s == sv and d == dk == dv):
        return "key/value shapes cuDNN does not take (batch, heads or head dim differ)"
    if kh == 0 or n % kh:
        return f"{n} query heads are not a multiple of {kh} key/value heads"
    if d % 8 or d > MAX_HEAD_DIM:
        return f"head dim {d} (a multiple of 8 up to {MAX_HEAD_DIM})"
    if causal and t != s:
        return f"a causal mask with {t} queries and {s} keys (torch aligns it top-left)"
    if min(b, n, t, s) == 0:
        return "an empty operand"
    return None


def _infer_forward(ops: list[TensorSpec], attrs, result=None):
    q, k, v = ops
    why = supported(q.shape, k.shape, v.shape, q.dtype, bool(attrs.get("causal", 0)))
    check(why is None, f"cudnn_attention: {why}")
    check(q.dtype == k.dtype == v.dtype, "cudnn_attention: q, k, v dtypes differ")
    return (TensorSpec(tuple(q.shape), q.dtype), TensorSpec(tuple(q.shape[:3]), torch.float32))


def _infer_backward(ops: list[TensorSpec], attrs, result=None):
    q, k, v, out, lse, dout = ops
    check(tuple(out.shape) == tuple(q.shape) == tuple(dout.shape),
          "cudnn_attention_backward: out/dout shapes differ from q's")
    check(tuple(lse.shape) == tuple(q.shape[:3]) and lse.dtype == torch.float32,
          "cudnn_attention_backward: lse must be float32 [B, N, T]")
    return (TensorSpec(tuple(q.shape), q.dtype), TensorSpec(tuple(k.shape), k.dtype),
            TensorSpec(tuple(v.shape), v.dtype))


def _backend_config(q_type, k_type, scale: float, causal: bool, backward: bool) -> str:
    b, n, t, _ = ir.RankedTensorType(q_type).shape
    s = ir.RankedTensorType(k_type).shape[2]
    elem = "BF16" if isinstance(ir.RankedTensorType(q_type).element_type, ir.BF16Type) \
        else "F16"

    def dims(lc, rc, lb, rb):  # operands BTNH (batch dims 0, 2), scores/probs BNTS (0, 1)
        return {"lhs_contracting_dimensions": [str(lc)], "rhs_contracting_dimensions":
                [str(rc)], "lhs_batch_dimensions": [str(d) for d in lb],
                "rhs_batch_dimensions": [str(d) for d in rb]}
    config = {
        "algorithm": {"algo_id": "0", "math_type": "TENSOR_OP_MATH",
                      "tuning_knobs": {"17": "1", "24": "0"}, "is_cudnn_frontend": True,
                      "workspace_size": "0"},
        "fmha_scale": scale,
        "intermediate_tensor_shape": {
            "element_type": elem, "dimensions": [str(b), str(n), str(t), str(s)],
            "tuple_shapes": [],
            "layout": {"dim_level_types": [], "dim_unique": [], "dim_ordered": [],
                       "minor_to_major": ["3", "2", "1", "0"], "tiles": [],
                       "element_size_in_bits": "0", "memory_space": "0",
                       "index_primitive_type": "PRIMITIVE_TYPE_INVALID",
                       "pointer_primitive_type": "PRIMITIVE_TYPE_INVALID",
                       "dynamic_shape_metadata_prefix_bytes": "0"},
            "is_dynamic_dimension": [False] * 4},
        "is_flash_attention": True,
        "mask_type": "CAUSAL" if causal else "NO_MASK",
        "dropout_rate": 0.0, "seed": 42, "sliding_window_length": 0,
        "max_seg_per_batch": 1, "is_paged_attention": False,
    }
    # jax's BTNH dimension numbers (fused_attention_stablehlo.py), e.g. BMM1:
    # BTNH, BSNH -> BNTS contracts H (3, 3) over batch dims (B, N) = (0, 2)
    btnh, bnts = (0, 2), (0, 1)
    if backward:
        config.update(bmm1_grad_gemm1_dot_dimension_numbers=dims(2, 1, bnts, btnh),
                      bmm1_grad_gemm2_dot_dimension_numbers=dims(3, 1, bnts, btnh),
                      bmm2_grad_gemm1_dot_dimension_numbers=dims(2, 1, bnts, btnh),
                      bmm2_grad_gemm2_dot_dimension_numbers=dims(3, 3, btnh, btnh))
    else:
        config.update(bmm1_dot_dimension_numbers=dims(3, 3, btnh, btnh),
                      bmm2_dot_dimension_numbers=dims(3, 1, bnts, btnh))
    return json.dumps({"operation_queue_id": "0", "cudnn_fmha_backend_config": config})


def _layout(minor_to_major) -> ir.Attribute:
    """A custom call's operand or result layout (``minor_to_major``)."""
    return ir.DenseIntElementsAttr.get(
        np.asarray(minor_to_major, dtype=np.int64),
        type=ir.RankedTensorType.get([len(minor_to_major)], ir.IndexType.get()))


def _row_major(rank: int) -> ir.Attribute:
    return _layout(range(rank - 1, -1, -1))


# [B, N, T, D] results stored as [B, T, N, D] (jax's ``_bnth_output_layout_and_perm``)
_BTNH_STORED = (3, 1, 2, 0)


def _to_btnh(x, loc) -> ir.Value:
    """[B, N, T, D] -> [B, T, N, D]: the layout cuDNN is called with, as jax calls it. A
    model's q/k/v come from a [B, T, N*D] projection through ``transpose(1, 2)``, which this
    transpose cancels, so no copy is made on either side of the call."""
    b, n, t, d = ir.RankedTensorType(x.type).shape
    ty = ir.RankedTensorType.get([b, t, n, d], ir.RankedTensorType(x.type).element_type)
    return hlo("stablehlo.transpose", [x], [ty],
               {"permutation": ir.DenseI64ArrayAttr.get([0, 2, 1, 3])}, loc).result


def _custom_call(target: str, operands, result_types, n_btnh: int, config: str,
                 loc) -> ir.Operation:
    """The call on ``operands``, its first ``n_btnh`` results [B, N, T, D] stored BTNH (so
    a model's ``out.transpose(1, 2)`` after it is a bitcast), the rest row-major."""
    workspace = ir.RankedTensorType.get([0], ir.IntegerType.get_unsigned(8))
    types = list(result_types) + [workspace]
    i32 = ir.IntegerType.get_signless(32)
    attrs = {
        "call_target_name": ir.StringAttr.get(target),
        "api_version": ir.IntegerAttr.get(i32, 2),
        "backend_config": ir.StringAttr.get(config),
        "operand_layouts": ir.ArrayAttr.get(
            [_row_major(ir.RankedTensorType(o.type).rank) for o in operands]),
        "result_layouts": ir.ArrayAttr.get(
            [_layout(_BTNH_STORED) if i < n_btnh else
             _row_major(ir.RankedTensorType(t).rank) for i, t in enumerate(types)]),
    }
    return hlo("stablehlo.custom_call", operands, types, attrs, loc)


def _scale_causal(op) -> tuple[float, bool]:
    return attrs.get_float(op, "scale"), attrs.get_bool(op, "causal")


def lower_forward(op, operands, rw) -> None:
    """``cudnn_attention`` -> ``__cudnn$fmhaSoftmax`` -> (out, lse, workspace): the
    training form, whose statistics the backward reads, whatever reads ``lse`` here. A
    program may hold the same call twice, one reading ``lse`` and one not (a whole
    training step: the traced forward and the gradient's recomputation of it,
    passes/inline_backward.py); one form lets XLA's CSE merge them into one kernel, and an
    inference call only writes [B, N, T] float32 more."""
    scale, causal = _scale_causal(op)
    q, k, _ = operands
    config = _backend_config(q.type, k.type, scale, causal, backward=False)
    with rw.ip:
        call = _custom_call(FORWARD, [_to_btnh(x, op.location) for x in operands],
                            [r.type for r in op.results], 1, config, op.location)
    rw.replace_op(op, list(call.results)[:2])


def lower_backward(op, operands, rw) -> None:
    """``cudnn_attention_backward`` -> ``__cudnn$fmhaSoftmaxBackward(q, k, v, lse, dout,
    out)`` (jax's operand order) -> (dq, dk, dv, workspace)."""
    scale, causal = _scale_causal(op)
    q, k, v, out, lse, dout = operands
    config = _backend_config(q.type, k.type, scale, causal, backward=True)
    with rw.ip:
        q, k, v, dout, out = (_to_btnh(x, op.location) for x in (q, k, v, dout, out))
        call = _custom_call(BACKWARD, [q, k, v, lse, dout, out],
                            [r.type for r in op.results], 3, config, op.location)
    rw.replace_op(op, list(call.results)[:3])


def _no_second_derivative(op, x, y, g):
    from thunder_mlir.errors import GradError

    raise GradError(f"grad: the backward of fused attention at {op.location} is not "
                    "differentiable here (a second derivative through cuDNN attention); "
                    "compute it without the fused-attention pass")


def _forward_vjp(op, x, y, g):
    from thunder_mlir.ir import prims

    scale, causal = _scale_causal(op)
    dq, dk, dv = prims.bind_many("cudnn_attention_backward", [x[0], x[1], x[2], y[0], y[1],
                                                              g[0]],
                                 scale=scale, causal=int(causal))
    return [dq, dk, dv]


define("cudnn_attention", ("q", "k", "v"), _infer_forward, lower_forward,
       vjp=_forward_vjp, attributes={"scale": NUMBER, "causal": INT},
       results=("out", "lse"),
       doc="cuDNN's fused attention (cudnn_attention.py): (out, lse)")
define("cudnn_attention_backward", ("q", "k", "v", "out", "lse", "dout"), _infer_backward,
       lower_backward, vjp=_no_second_derivative, attributes={"scale": NUMBER, "causal": INT},
       results=("dq", "dk", "dv"),
       doc="the backward of cuDNN's fused attention (cudnn_attention.py): (dq, dk, dv)")
