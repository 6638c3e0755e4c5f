"""``fused-attention``: ``scaled_dot_product_attention`` calls that cuDNN's flash attention
takes become ``flash_attention`` composites, which compute the output and each row's
log-sum-exp of scores (FlashAttention-2, Dao 2023): what a fused kernel returns, and all
its backward reads besides q, k, v and the output. The GPU target runs it before ``grad``
(pipeline.Target), so the backward saves no probabilities; ``cudnn-attention`` then
lowers the composites to cuDNN's custom calls.

A call is taken when it has no ``attn_mask``, no dropout, an ``is_causal`` mask only with
as many queries as keys, and q/k/v that ``ir/cudnn_attention.supported`` accepts (4-d,
bfloat16/float16, head dim a multiple of 8 up to 256, query heads a multiple of key/value
heads). A call not taken keeps its decomposition and carries the reason as the attribute
``thunder.fused_attention`` (shown in ``last_traces``).

The composites' decompositions (below) define their values, in float32 for 16-bit inputs
as the decomposed attention computes (frontend/symbols/nn.py), so a program transformed
here runs on the CPU too, with eager's results to 16-bit rounding (tests/
test_fused_attention.py):

* ``flash_attention(q, k, v, scale, causal) -> (out, lse)``: ``out`` = softmax(q k^T *
  scale) v, ``lse`` [B, N, T] float32 = log(sum(exp(scores))) per row;
* ``flash_attention_backward(q, k, v, out, lse, dout, scale, causal) -> (dq, dk, dv)``:
  P = exp(S - lse), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO * O)), dQ = dS K *
  scale, dK = dS^T Q * scale (FlashAttention-2's Algorithm 2), key/value head groups
  summed.
"""

from __future__ import annotations

import math

import torch
from torch_mlir import ir

from thunder_mlir.ir import attrs, prims
from thunder_mlir.ir.cudnn_attention import supported
from thunder_mlir.ir.regions import nested_ops

NAME = "fused-attention"
SDPA = "ltorch.scaled_dot_product_attention"
REASON_ATTR = "thunder.fused_attention"  # on a call not taken: why


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _repeat_heads(t, rep: int):
    """[B, K, S, D] -> [B, K * rep, S, D], head h reading key/value head h // rep (torch's
    ``enable_gqa``: ``repeat_interleave`` over heads)."""
    if rep == 1:
        return t
    b, kh, s, d = t.tshape
    t5 = prims.broadcast_in_dim(t, (b, kh, rep, s, d), [0, 1, 3, 4])
    return prims.reshape(t5, (b, kh * rep, s, d))


def _sum_groups(t, kh: int):
    """[B, K * rep, S, D] -> [B, K, S, D]: the sum over each group of repeated heads."""
    b, n, s, d = t.tshape
    if n == kh:
        return t
    return prims.reduce("reduce_sum", prims.reshape(t, (b, kh, n // kh, s, d)), [2])


def _scores(q, k, scale: float, causal: bool):
    """q k^T * scale, [B, N, T, S], with the causal mask's -inf above the diagonal."""
    s = prims.dot_general(q, k, [0, 1], [0, 1], [3], [3])
    s = prims.elementwise("mul", s, prims.full(s.tshape, scale, s.tdtype))
    if causal:
        t, n = s.tshape[2], s.tshape[3]
        keep = prims.broadcast_in_dim(prims.elementwise(
            "le", prims.iota((t, n), torch.int64, 1), prims.iota((t, n), torch.int64, 0)),
            s.tshape, [2, 3])
        s = prims.where(keep, s, prims.full(s.tshape, -math.inf, s.tdtype))
    return s


def _row(x, like):
    """A [B, N, T] row statistic broadcast over [B, N, T, S]."""
    return prims.broadcast_in_dim(x, like.tshape, [0, 1, 2])


def flash_attention_impl(q, k, v, scale: float, causal: bool):
    """The decomposition of ``flash_attention``: (out of q's dtype, lse float32)."""
    acc = _acc(q.tdtype)
    rep = q.tshape[1] // k.tshape[1]
    qf, kf, vf = (prims.convert_element_type(t, acc) for t in
                  (q, _repeat_heads(k, rep), _repeat_heads(v, rep)))
    s = _scores(qf, kf, scale, causal)
    m = prims.reduce("reduce_max", s, [3])
    e = prims.elementwise("exp", prims.elementwise("sub", s, _row(m, s)))
    total = prims.reduce("reduce_sum", e, [3])
    p = prims.elementwise("div", e, _row(total, e))
    out = prims.dot_general(p, vf, [0, 1], [0, 1], [3], [2])
    lse = prims.elementwise("add", m, prims.elementwise("log", total))
    return prims.convert_element_type(out, q.tdtype), prims.convert_element_type(
        lse, torch.float32)


def flash_attention_backward_impl(q, k, v, out, lse, dout, scale: float, causal: bool):
    """The decomposition of ``flash_attention_backward``: (dq, dk, dv) in the dtypes of
    q, k, v."""
    acc = _acc(q.tdtype)
    kh, rep = k.tshape[1], q.tshape[1] // k.tshape[1]
    qf, kf, vf, of, dof = (prims.convert_element_type(t, acc) for t in
                           (q, _repeat_heads(k, rep), _repeat_heads(v, rep), out, dout))
    s = _scores(qf, kf, scale, causal)
    p = prims.elementwise("exp", prims.elementwise(
        "sub", s, _row(prims.convert_element_type(lse, acc), s)))
    dv = prims.dot_general(p, dof, [0, 1], [0, 1], [2], [2])  # [B, N, S, D]
    dp = prims.dot_general(dof, vf, [0, 1], [0, 1], [3], [3])  # [B, N, T, S]
    d = prims.reduce("reduce_sum", prims.elementwise("mul", dof, of), [3])
    ds = prims.elementwise("mul", p, prims.elementwise("sub", dp, _row(d, dp)))
    dq = prims.dot_general(ds, kf, [0, 1], [0, 1], [3], [2])
    dk = prims.dot_general(ds, qf, [0, 1], [0, 1], [2], [2])

    def scaled(t):
        return prims.elementwise("mul", t, prims.full(t.tshape, scale, t.tdtype))
    return (prims.convert_element_type(scaled(dq), q.tdtype),
            prims.convert_element_type(_sum_groups(scaled(dk), kh), k.tdtype),
            prims.convert_element_type(_sum_groups(dv, kh), v.tdtype))


def _symbols():
    from thunder_mlir.frontend.symbol import Symbol

    if not _SYMBOLS:
        _SYMBOLS["forward"] = Symbol("thunder.flash_attention", flash_attention_impl)
        _SYMBOLS["backward"] = Symbol("thunder.flash_attention_backward",
                                      flash_attention_backward_impl)
    return _SYMBOLS


_SYMBOLS: dict = {}


def flash_attention(q, k, v, scale: float, causal: bool):
    """Record a ``flash_attention`` composite at the current builder: (out, lse)."""
    from thunder_mlir.frontend.symbol import emit_composite

    return emit_composite(_symbols()["forward"], (q, k, v, scale, causal), {}, required=True)


def flash_attention_backward(q, k, v, out, lse, dout, scale: float, causal: bool):
    """Record a ``flash_attention_backward`` composite: (dq, dk, dv)."""
    from thunder_mlir.frontend.symbol import emit_composite

    return emit_composite(_symbols()["backward"], (q, k, v, out, lse, dout, scale, causal),
                          {}, required=True)


def _names(op) -> list[str]:
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["operand_names"])]


def why_not(op) -> str | None:
    """None when the SDPA composite ``op`` is taken, else the reason it is not."""
    names = _names(op)
    if names != ["query", "key", "value"]:
        extra = [n for n in names if n not in ("query", "key", "value")]
        return f"an {extra[0]} operand" if extra else "operands other than query, key, value"
    dropout = attrs.get_value(op, "dropout_p", 0)
    if dropout:
        return f"dropout_p={dropout}"
    causal = attrs.get_bool(op, "is_causal", False)
    q, k, v = (ir.RankedTensorType(op.operands[i].type) for i in range(3))
    if not all(t.has_static_shape for t in (q, k, v)):
        return "symbolic sizes"
    from thunder_mlir.ir.dtypes import torch_dtype

    dt = torch_dtype(q.element_type)
    if torch_dtype(k.element_type) != dt or torch_dtype(v.element_type) != dt:
        return "q, k, v of different dtypes"
    return supported(list(q.shape), list(k.shape), list(v.shape), dt, causal)


def run(module: ir.Module, device: torch.device | None = None) -> None:
    """Rewrite every SDPA composite cuDNN takes (nested regions included) into a
    ``flash_attention`` composite; mark the others with ``REASON_ATTR``."""
    from thunder_mlir.frontend.tracing import Trace

    with module.context, ir.Location.unknown():
        calls = [op for f in module.body.operations for op in nested_ops(f.operation)
                 if op.name == "thunder.composite"
                 and ir.StringAttr(op.attributes["name"]).value == SDPA]
        if not calls:
            return
        trace = Trace(device or torch.device("cpu"), module=module)
        with trace.building():
            for op in calls:
                why = why_not(op)
                if why is not None:
                    op.attributes[REASON_ATTR] = ir.StringAttr.get(f"not taken: {why}")
                    continue
                q, k, v = (trace.make_proxy(op.operands[i]) for i in range(3))
                scale = attrs.get_float(op, "scale", 1.0 / math.sqrt(q.tshape[-1]))
                causal = attrs.get_bool(op, "is_causal", False)
                trace.loc = op.location
                with op.location, trace.insertion_point(ir.InsertionPoint(op)):
                    out, _ = flash_attention(q, k, v, scale, causal)
                op.results[0].replace_all_uses_with(out.value)
                op.erase()


# ------------------------------------------------------------------ VJP rules
def _scale_causal(op) -> tuple[float, bool]:
    return attrs.get_float(op, "scale"), attrs.get_bool(op, "causal")


def _flash_attention_vjp(op, x, y, g):
    """dq, dk, dv from the saved q, k, v, out and lse: one ``flash_attention_backward``
    (the lse's cotangent is zero: only the backward reads it)."""
    scale, causal = _scale_causal(op)
    return list(flash_attention_backward(x[0], x[1], x[2], y[0], y[1], g[0], scale, causal))


def _no_second_derivative(op, x, y, g):
    from thunder_mlir.errors import GradError

    raise GradError(f"grad: fused attention's backward at {op.location} is not "
                    "differentiated (a second derivative through attention): not supported "
                    "with the fused-attention pass")


def _register_rules() -> None:
    from thunder_mlir.transforms.vjp_composites import composite_rule

    composite_rule("thunder.flash_attention")(_flash_attention_vjp)
    composite_rule("thunder.flash_attention_backward")(_no_second_derivative)


_register_rules()
