"""Composite-level VJP rules: a better backward than differentiating the decomposition.

Keyed by the composite's symbol name. ``APPLIES[name](op)`` says whether the rule covers
this call (otherwise the grad pass inlines the composite and differentiates its prims).
Formulas: embedding as ATen's ``embedding_dense_backward`` (padding row gets no
gradient); softmax/log_softmax as in PyTorch's ``_softmax_backward_data`` /
``_log_softmax_backward_data``; layer_norm as in ATen's ``layer_norm_backward`` (mean and
rstd are recomputed from the saved input, so only the input is a residual); for 16-bit
floats these three compute in float32 and round each gradient once, as ATen does
(``_opmath``).
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from thunder_mlir.ir import attrs, prims
from thunder_mlir.ir.dtypes import nbytes

COMPOSITE_VJP: dict = {}
APPLIES: dict = {}


def composite_rule(name: str, applies=lambda op: True):
    def deco(fn):
        COMPOSITE_VJP[name] = fn
        APPLIES[name] = applies
        return fn
    return deco


def _names(op) -> list[str]:
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["operand_names"])]


def _int_attr(op, name, default=None):
    return attrs.get_int(op, name, default)


def _f32_or_f64(op) -> bool:
    t = ir.RankedTensorType(op.operands[0].type).element_type
    return isinstance(t, (ir.F32Type, ir.F64Type)) and "dtype" not in op.attributes


def _float_input(op) -> bool:
    """A floating-point first operand (16-bit included) and no ``dtype`` argument."""
    t = ir.RankedTensorType(op.operands[0].type).element_type
    return isinstance(t, (ir.F32Type, ir.F64Type, ir.BF16Type, ir.F16Type)) and \
        "dtype" not in op.attributes


def _opmath(rule):
    """``rule`` computed in float32 when an operand, output or cotangent is a 16-bit float:
    they are converted to float32 (exactly) and each gradient is rounded once to its
    operand's dtype, as ATen's CPU backward kernels compute in ``at::opmath_type``
    (``_softmax_backward_data``, ``layer_norm_backward``), from the saved 16-bit output."""
    import torch

    low = (torch.bfloat16, torch.float16)

    def wrapped(op, x, y, g):
        if not any(v is not None and v.tdtype in low for v in (*x, *y, *g)):
            return rule(op, x, y, g)
        up = [[prims.convert_element_type(v, torch.float32)
               if v is not None and v.tdtype in low else v for v in vs] for vs in (x, y, g)]
        out = rule(op, *up)
        return [o if o is None or o.tdtype == xi.tdtype
                else prims.convert_element_type(o, xi.tdtype) for o, xi in zip(out, x)]
    wrapped.__doc__ = rule.__doc__
    return wrapped


def _bcast(r, like, dims):
    keep = tuple(1 if i in dims else s for i, s in enumerate(like.tshape))
    return prims.broadcast_in_dim(prims.reshape(r, keep), like.tshape, list(range(len(keep))))


def _e(name, *xs):
    return prims.elementwise(name, *xs)


def _dim(op, x) -> int:
    r = max(len(x.tshape), 1)
    return _int_attr(op, "dim") % r


@composite_rule("ltorch.div", applies=lambda op: "rounding_mode" in op.attributes)
def _div_rounded(op, x, y, g):
    """``torch.div`` with ``rounding_mode`` (trunc, floor): zero gradients for both operands
    (derivatives.yaml, ``div.Tensor_mode``: ``grad.new_zeros``). The decomposition's own
    VJP (the division's, of the rounding's zero cotangent) is nan where the divisor is 0:
    0 / 0 (fuzzer programs 927-928)."""
    return [prims.full(xi.tshape, 0, xi.tdtype)
            if xi.tdtype.is_floating_point or xi.tdtype.is_complex else None for xi in x]


@composite_rule("ltorch.softmax", applies=lambda op: _float_input(op) and "dim" in op.attributes)
@_opmath
def _softmax(op, x, y, g):
    if len(y[0].tshape) == 0:
        return [prims.full((), 0.0, y[0].tdtype)]
    d = _dim(op, y[0])
    gy = _e("mul", g[0], y[0])
    return [_e("sub", gy, _e("mul", y[0], _bcast(prims.reduce("reduce_sum", gy, [d]), gy, [d])))]


@composite_rule("ltorch.log_softmax",
                applies=lambda op: _float_input(op) and "dim" in op.attributes)
@_opmath
def _log_softmax(op, x, y, g):
    if len(y[0].tshape) == 0:
        return [prims.full((), 0.0, y[0].tdtype)]
    d = _dim(op, y[0])
    s = _bcast(prims.reduce("reduce_sum", g[0], [d]), g[0], [d])
    return [_e("sub", g[0], _e("mul", _e("exp", y[0]), s))]


def _recomputed_from(x, g):
    """``x`` as the input a rule recomputes forward values from (a norm's statistics and
    normalized input): ``thunder.after(x, g)``, the same value, made after the cotangent
    ``g``. Read directly, the recomputation is the forward's own ops on the same operand,
    and in a one-program training step XLA's CSE merges the two, so the forward's
    intermediates stay alive until the backward: each LayerNorm's centered and normalized
    input, two activations (XLA temporaries of benchmarks/optimizer_step.py's steps: nanoGPT
    block 13,316 -> 12,288 KiB, GPT-2 tiny 3,988 -> 3,663, BERT tiny 3,989 -> 3,472, GPT-2
    4x512 83,712 -> 75,488; in-process A/B time: BERT tiny -5%, the others within noise).
    The same mechanism as joint.py's separation of grad's recomputation."""
    return prims.bind("after", (x, g))


def _layer_norm_applies(op) -> bool:
    names = _names(op)
    return _float_input(op) and names[0] == "input" and set(names[1:]) <= {"weight", "bias"}


@composite_rule("ltorch.layer_norm", applies=_layer_norm_applies)
@_opmath
def _layer_norm(op, x, y, g):
    named = dict(zip(_names(op), x))
    inp, w = _recomputed_from(named["input"], g[0]), named.get("weight")
    k = len(attrs.get_ints(op, "normalized_shape"))
    eps = attrs.get_float(op, "eps", 1e-5)
    r = len(inp.tshape)
    dims = list(range(r - k, r))
    lead = list(range(r - k))
    n = 1
    for d in dims:
        n *= inp.tshape[d]

    def full(like, v):
        return prims.full(like.tshape, v, like.tdtype)

    mean = _e("div", prims.reduce("reduce_sum", inp, dims), full(
        prims.reduce("reduce_sum", inp, dims), n))
    c = _e("sub", inp, _bcast(mean, inp, dims))
    var = prims.reduce("reduce_sum", _e("mul", c, c), dims)
    var = _e("div", var, full(var, n))
    rstd = _e("rsqrt", _e("add", var, full(var, eps)))
    xhat = _e("mul", c, _bcast(rstd, inp, dims))
    gxhat = g[0] if w is None else _e("mul", g[0], prims.broadcast_in_dim(
        w, inp.tshape, dims))
    m1 = prims.reduce("reduce_sum", gxhat, dims)
    m1 = _e("div", m1, full(m1, n))
    m2 = prims.reduce("reduce_sum", _e("mul", gxhat, xhat), dims)
    m2 = _e("div", m2, full(m2, n))
    gx = _e("mul", _bcast(rstd, inp, dims), _e("sub", _e("sub", gxhat, _bcast(m1, inp, dims)),
                                                   _e("mul", xhat, _bcast(m2, inp, dims))))
    out = []
    for name, v in zip(_names(op), x):
        if name == "input":
            out.append(gx)
        elif name == "weight":
            out.append(prims.reduce("reduce_sum", _e("mul", g[0], xhat), lead))
        else:
            out.append(prims.reduce("reduce_sum", g[0], lead))
    return out


def _float_operand(op, name) -> bool:
    names = _names(op)
    if name not in names:
        return False
    t = ir.RankedTensorType(op.operands[names.index(name)].type).element_type
    return isinstance(t, (ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type))


def _embedding_rule(index_name: str, no_padding: int | None):
    """torch.embedding_backward: scatter-add of the cotangent rows into a zero weight
    gradient; the ``padding_idx`` row gets no gradient (ATen embedding_dense_backward)."""
    def rule(op, x, y, g):
        named = dict(zip(_names(op), x))
        w, idx = named["weight"], named[index_name]
        import torch

        gw = prims.index_add(prims.full(w.tshape, 0, w.tdtype), idx, g[0], 0)
        pad = _int_attr(op, "padding_idx")
        if pad is not None and pad != no_padding:
            rows = w.tshape[0]
            row = prims.iota(w.tshape, torch.int64, 0)
            is_pad = _e("eq", row, prims.full(w.tshape, pad % rows, torch.int64))
            gw = prims.where(is_pad, prims.full(w.tshape, 0, w.tdtype), gw)
        return [gw if n == "weight" else None for n in _names(op)]
    return rule


composite_rule("ltorch.embedding", applies=lambda op: _float_operand(op, "weight"))(
    _embedding_rule("input", None))
composite_rule("ltorch.embedding_aten", applies=lambda op: _float_operand(op, "weight"))(
    _embedding_rule("indices", -1))


def _rms_norm_applies(op) -> bool:
    names = _names(op)
    return _f32_or_f64(op) and names[0] == "input" and set(names[1:]) <= {"weight"}


@composite_rule("ltorch.rms_norm", applies=_rms_norm_applies)
def _rms_norm(op, x, y, g):
    """rms_norm backward (ATen ``_fused_rms_norm_backward``): with xhat = x * rstd,
    gx = rstd * (g*w - xhat * mean(g*w*xhat)), gw = sum(g * xhat) over leading dims."""
    import torch

    named = dict(zip(_names(op), x))
    inp, w = _recomputed_from(named["input"], g[0]), named.get("weight")
    k = len(attrs.get_ints(op, "normalized_shape"))
    eps = attrs.get_float(op, "eps", None)
    eps = torch.finfo(inp.tdtype).eps if eps is None else eps
    r = len(inp.tshape)
    dims, lead = list(range(r - k, r)), list(range(r - k))
    n = 1
    for d in dims:
        n *= inp.tshape[d]

    def full(like, v):
        return prims.full(like.tshape, v, like.tdtype)

    ms = prims.reduce("reduce_sum", _e("mul", inp, inp), dims)
    rstd = _e("rsqrt", _e("add", _e("div", ms, full(ms, n)), full(ms, eps)))
    xhat = _e("mul", inp, _bcast(rstd, inp, dims))
    gxhat = g[0] if w is None else _e("mul", g[0], prims.broadcast_in_dim(w, inp.tshape, dims))
    m = prims.reduce("reduce_sum", _e("mul", gxhat, xhat), dims)
    m = _e("div", m, full(m, n))
    gx = _e("mul", _bcast(rstd, inp, dims), _e("sub", gxhat, _e("mul", xhat,
                                                                _bcast(m, inp, dims))))
    return [gx if nm == "input" else prims.reduce("reduce_sum", _e("mul", g[0], xhat), lead)
            for nm in _names(op)]


def _linear_applies(op) -> bool:
    names = _names(op)
    if names[:2] != ["input", "weight"] or not set(names[2:]) <= {"bias"}:
        return False
    return ir.RankedTensorType(op.operands[1].type).rank == 2 and \
        ir.RankedTensorType(op.operands[0].type).rank >= 1


@composite_rule("ltorch.linear", applies=_linear_applies)
def _linear(op, x, y, g):
    """y = x W^T + b: gx = g W, gW = g^T x (summed over leading dims), gb = sum(g)."""
    named = dict(zip(_names(op), x))
    inp, w = named["input"], named["weight"]
    r = len(inp.tshape)
    lead = list(range(r - 1))
    gx = prims.dot_general(g[0], w, [], [], [r - 1], [0])
    gw = prims.dot_general(g[0], inp, [], [], lead, lead)
    from thunder_mlir.frontend.symbols.reduction import sum_accumulated

    # the bias gradient sums 16-bit floats in float32, as ATen's sum kernel does
    out = {"input": gx, "weight": gw, "bias": sum_accumulated(g[0], lead)}
    return [out[n] for n in _names(op)]


def _cross_entropy_applies(op) -> bool:
    names = _names(op)
    if names != ["input", "target"] or not _f32_or_f64(op):
        return False
    t = ir.RankedTensorType(op.operands[1].type).element_type
    smoothing = attrs.get_float(op, "label_smoothing", 0.0)
    reduction = ir.StringAttr(op.attributes["reduction"]).value \
        if "reduction" in op.attributes else "mean"
    legacy = "size_average" in op.attributes or "reduce" in op.attributes
    return isinstance(t, ir.IntegerType) and smoothing == 0.0 and not legacy and \
        reduction in ("mean", "sum", "none")


@composite_rule("ltorch.cross_entropy", applies=_cross_entropy_applies)
def _cross_entropy(op, x, y, g):
    """Class-index cross entropy (no weight, no smoothing): gx = (softmax(x) - onehot(t))
    times the per-row cotangent (divided by the count of non-ignored targets for mean)."""
    import torch

    inp, tgt = x
    cd = 0 if len(inp.tshape) == 1 else 1
    ignore_index = _int_attr(op, "ignore_index", -100)
    reduction = ir.StringAttr(op.attributes["reduction"]).value \
        if "reduction" in op.attributes else "mean"
    t = prims.convert_element_type(tgt, torch.int64)
    keep = _e("ne", t, prims.full(t.tshape, ignore_index, torch.int64))
    keep_f = prims.convert_element_type(keep, inp.tdtype)
    if reduction == "none":
        coeff = _e("mul", g[0], keep_f)
    else:
        coeff = _e("mul", prims.broadcast_in_dim(g[0], t.tshape, []), keep_f)
        if reduction == "mean":
            count = prims.reduce("reduce_sum", keep_f, list(range(len(t.tshape))))
            coeff = _e("div", coeff, prims.broadcast_in_dim(count, t.tshape, []))
    m = prims.reduce("reduce_max", inp, [cd])
    m = prims.where(_e("isfinite", m), m, prims.full(m.tshape, 0.0, m.tdtype))
    e = _e("exp", _e("sub", inp, _bcast(m, inp, [cd])))
    p = _e("div", e, _bcast(prims.reduce("reduce_sum", e, [cd]), inp, [cd]))
    classes = prims.iota(inp.tshape, torch.int64, cd)
    t_b = prims.broadcast_in_dim(t, inp.tshape, [i for i in range(len(inp.tshape)) if i != cd])
    onehot = prims.convert_element_type(_e("eq", classes, t_b), inp.tdtype)
    c_b = prims.broadcast_in_dim(coeff, inp.tshape, [i for i in range(len(inp.tshape))
                                                     if i != cd])
    return [_e("mul", _e("sub", p, onehot), c_b), None]


def _attr_bool(op, name) -> bool:
    return attrs.get_bool(op, name, False)


# attention probabilities of at most this many bytes are saved for the backward (the
# generic VJP of the decomposed attention) instead of recomputed from q and k by the
# flash-style rule below: the recomputation costs the backward a q k^T matmul and a softmax
# for memory that, this small, does not move the step's peak. Measured on the whole-step
# rows of benchmarks/optimizer_step.py (AMD EPYC, 1 thread; time against the rule, XLA
# temporaries): Llama tiny (128 KiB of probabilities per layer) -5% and +205 KiB, BERT
# tiny -3.5% and +12 KiB; the nanoGPT block's (1 MiB per layer) saved would cost +1.5 MiB
# of temporaries and 2% more time, so it keeps the rule.
SDPA_SAVED_PROBS_BYTES = 256 << 10


def _sdpa_applies(op) -> bool:
    names = _names(op)
    if names[:3] != ["query", "key", "value"] or not set(names[3:]) <= {"attn_mask"}:
        return False
    if not _f32_or_f64(op):
        return False
    if attrs.get_float(op, "dropout_p", 0.0) > 0:  # (an int 0 from GPT2Config(attn_pdrop=0))
        return False
    q, k, v = (ir.RankedTensorType(op.operands[i].type).shape for i in range(3))
    if len(q) < 2 or not (q[:-2] == k[:-2] == v[:-2]):  # no batch broadcasting or GQA
        return False
    if all(d >= 0 for d in q + k) and nbytes(ir.RankedTensorType.get(
            list(q[:-1]) + [k[-2]], ir.RankedTensorType(op.operands[0].type).element_type)) \
            <= SDPA_SAVED_PROBS_BYTES:
        return False  # (the probabilities are saved; a dynamic size keeps the rule)
    if "attn_mask" in names:
        m = ir.RankedTensorType(op.operands[names.index("attn_mask")].type).shape
        scores = list(q[:-1]) + [k[-2]]
        if len(m) > len(scores) or any(a not in (1, b) for a, b in
                                       zip(m, scores[len(scores) - len(m):])):
            return False  # the mask would enlarge the scores' shape
    return True


@composite_rule("ltorch.scaled_dot_product_attention", applies=_sdpa_applies)
def _sdpa(op, x, y, g):
    """Attention backward with the probabilities recomputed from q and k (not saved), as
    FlashAttention's backward does: dv = P^T g, dP = g v^T, dS = P (dP - rowsum(dP P)),
    dq = dS k * scale, dk = dS^T q * scale (float masks get dS summed to their shape)."""
    import math

    from thunder_mlir.frontend.symbols.nn import attention_probs

    named = dict(zip(_names(op), x))
    q, k, v, mask = named["query"], named["key"], named["value"], named.get("attn_mask")
    scale = attrs.get_float(op, "scale", None)
    scale = 1.0 / math.sqrt(q.tshape[-1]) if scale is None else scale
    p = attention_probs(q, k, mask, _attr_bool(op, "is_causal"), scale)
    nb = len(q.tshape) - 2
    batch = list(range(nb))
    dv = prims.dot_general(p, g[0], batch, batch, [nb], [nb])
    dp = prims.dot_general(g[0], v, batch, batch, [nb + 1], [nb + 1])
    row = prims.reduce("reduce_sum", _e("mul", dp, p), [nb + 1])
    ds = _e("mul", p, _e("sub", dp, _bcast(row, dp, [nb + 1])))
    s = prims.full(q.tshape, scale, q.tdtype)
    dq = _e("mul", prims.dot_general(ds, k, batch, batch, [nb + 1], [nb]), s)
    dk = _e("mul", prims.dot_general(ds, q, batch, batch, [nb], [nb]),
            prims.full(k.tshape, scale, k.tdtype))
    out = {"query": dq, "key": dk, "value": dv}
    if mask is not None:
        if mask.tdtype.is_floating_point:
            off = len(ds.tshape) - len(mask.tshape)
            summed = list(range(off)) + [off + i for i, m in enumerate(mask.tshape)
                                         if m == 1 and ds.tshape[off + i] != 1]
            out["attn_mask"] = prims.reshape(prims.reduce("reduce_sum", ds, summed),
                                             mask.tshape)
        else:
            out["attn_mask"] = None
    return [out[n] for n in _names(op)]


def _py_attr(op, name, default=None):
    """A composite's attribute as a Python value as recorded (int, float, bool, str or
    list), or ``default`` when the call left the argument out."""
    return attrs.get_value(op, name, default)


def _real_float_operand(op, i: int = 0) -> bool:
    t = ir.RankedTensorType(op.operands[i].type).element_type
    return isinstance(t, (ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type))


def _vector_norm_applies(op) -> bool:
    if not _real_float_operand(op) or _names(op) != ["x"]:
        return False
    ord_ = _py_attr(op, "ord", 2)
    return isinstance(ord_, (int, float)) and not isinstance(ord_, bool)


@composite_rule("ltorch.vector_norm", applies=_vector_norm_applies)
def _vector_norm(op, x, y, g):
    """``linalg_vector_norm`` backward as PyTorch's ``norm_backward``
    (torch/csrc/autograd/FunctionsManual.cpp), which defines the subgradient at a zero
    norm as 0 (the chain rule through ``sqrt(sum(x^2))`` gives 0 * inf = NaN there):

    * ord 0: no gradient (zeros); ord 1: ``sgn(x) g``;
    * ord 2: ``g * x / norm``, 0 where the norm is 0;
    * ord +-inf: ``sgn(x) g / count * mask``, mask = ``|x| == norm`` or NaN (ties share);
    * ord < 1: ``sgn(x) |x|^(ord-1) g norm^(1-ord)``, with ``|x|^(ord-1)`` := 0 at x = 0;
    * 1 < ord < 2: ``sgn(x) |x|^(ord-1) g / norm^(ord-1)``, 0 where the norm is 0;
    * ord > 2: ``x |x|^(ord-2) g / norm^(ord-1)``, 0 where the norm is 0.

    ``dtype=`` computes in that dtype (the input is converted first, as the forward does)
    and the gradient is converted back to the input's dtype."""
    import math

    from thunder_mlir.frontend.lang import canonical_dims

    xin = x[0]
    p = float(_py_attr(op, "ord", 2))
    dims = canonical_dims(_py_attr(op, "dim"), len(xin.tshape))
    norm, gy = y[0], g[0]
    a = xin if xin.tdtype == norm.tdtype else prims.convert_element_type(xin, norm.tdtype)

    def full(v):
        return prims.full(a.tshape, v, a.tdtype)

    gb, nb = _bcast(gy, a, dims), _bcast(norm, a, dims)
    zero = full(0.0)
    norm_zero = _e("eq", nb, zero)
    if p == 0.0:
        out = zero
    elif p == 1.0:
        out = _e("mul", _e("sign", a), gb)
    elif p == 2.0:
        out = _e("mul", gb, prims.where(norm_zero, zero, _e("div", a, nb)))
    elif math.isinf(p):
        absx = _e("abs", a)
        mask = _e("bitwise_or", _e("eq", absx, nb), _e("ne", absx, absx))
        maskf = prims.convert_element_type(mask, a.tdtype)
        count = _bcast(prims.reduce("reduce_sum", maskf, dims), a, dims)
        out = _e("mul", _e("sign", a), _e("mul", _e("div", gb, count), maskf))
    elif p < 1.0:
        scaled = prims.where(_e("eq", a, zero), zero,
                             _e("pow", _e("abs", a), full(p - 1.0)))
        out = _e("mul", _e("mul", _e("mul", _e("sign", a), scaled), gb),
                 _e("pow", nb, full(1.0 - p)))
    else:
        if p < 2.0:
            scaled = _e("mul", _e("sign", a), _e("pow", _e("abs", a), full(p - 1.0)))
        else:
            scaled = _e("mul", a, _e("pow", _e("abs", a), full(p - 2.0)))
        scale = prims.where(norm_zero, zero, _e("div", gb, _e("pow", nb, full(p - 1.0))))
        out = _e("mul", scaled, scale)
    if out.tdtype != xin.tdtype:
        out = prims.convert_element_type(out, xin.tdtype)
    return [out]


@composite_rule("ltorch.log_ndtr", applies=lambda op: _real_float_operand(op))
def _log_ndtr(op, x, y, g):
    """d/dx log(ndtr(x)) = exp(-(log_ndtr(x) + x^2 / 2)) / sqrt(2 pi), from the result
    (PyTorch's derivatives.yaml, ``special_log_ndtr``, in its order of operations). The
    chain rule through the decomposition is not used: in the lower tail its ``erfc``
    underflows and the discarded branches of its ``where`` give 0 * inf = NaN."""
    import math

    xs, ys = x[0], y[0]
    if xs.tdtype != ys.tdtype:
        xs = prims.convert_element_type(xs, ys.tdtype)

    def full(v):
        return prims.full(ys.tshape, v, ys.tdtype)

    half_sq = _e("div", _e("mul", xs, xs), full(2.0))
    e = _e("exp", _e("neg", _e("add", ys, half_sq)))
    out = _e("mul", _e("div", g[0], full(math.sqrt(2 * math.pi))), e)
    if out.tdtype != x[0].tdtype:
        out = prims.convert_element_type(out, x[0].tdtype)
    return [out]


@composite_rule("ltorch.normal")
def _normal(op, x, y, g):
    """``torch.normal(mean, std)``: PyTorch defines no reparameterization gradient; its
    derivatives.yaml gives ``mean`` and ``std`` zero gradients (every overload), which the
    chain rule through ``mean + std * z`` would not."""
    return [prims.full(v.tshape, 0, v.tdtype) if v.tdtype.is_floating_point else None
            for v in x]


def _sum_to(t, shape):
    """``t`` summed to ``shape`` (the inverse of broadcasting ``shape`` to ``t``'s)."""
    lead = len(t.tshape) - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and t.tshape[lead + i] != 1]
    if not dims:
        return t
    return prims.reshape(prims.reduce("reduce_sum", t, dims), tuple(shape))


def _matrix_t(t):
    r = len(t.tshape)
    return prims.transpose(t, list(range(r - 2)) + [r - 1, r - 2])


@composite_rule("ltorch.cholesky_solve",
                applies=lambda op: _f32_or_f64(op) and _names(op) == ["B", "L"])
def _cholesky_solve(op, x, y, g):
    """X = (L L^T)^-1 B (or (U^T U)^-1 B): gB = cholesky_solve(gX, L), and with
    C = gB X^T + X gB^T, gL = -C L (or -U C) -- PyTorch's cholesky_solve_backward
    (FunctionsManual.cpp). The gradient of L is a full matrix, as eager's, although the
    solve reads one triangle of L. Batch dims broadcast in the forward are summed."""
    from thunder_mlir.frontend.symbols.linalg import matmul
    from thunder_mlir.frontend.symbols.linalg import cholesky_solve

    b, lf = x
    upper = bool(_py_attr(op, "upper", False))
    gb = cholesky_solve(g[0], lf, upper)
    c = matmul(gb, _matrix_t(y[0]))
    c = _e("add", c, _matrix_t(c))
    gl = _e("neg", matmul(lf, c) if upper else matmul(c, lf))
    return [_sum_to(gb, b.tshape), _sum_to(gl, lf.tshape)]


@composite_rule("ltorch.cholesky_inverse",
                applies=lambda op: _f32_or_f64(op) and _names(op) == ["L"])
def _cholesky_inverse(op, x, y, g):
    """inv = (L L^T)^-1 (or (U^T U)^-1): with C = inv (g + g^T) inv, gL = -C L (or -U C)
    -- PyTorch's cholesky_inverse_backward (FunctionsManual.cpp); a full matrix, as
    eager's."""
    from thunder_mlir.frontend.symbols.linalg import matmul

    lf, inv = x[0], y[0]
    upper = bool(_py_attr(op, "upper", False))
    c = matmul(inv, matmul(_e("add", g[0], _matrix_t(g[0])), inv))
    return [_e("neg", matmul(lf, c) if upper else matmul(c, lf))]


def _torch_reduce_applies(op) -> bool:
    return _py_attr(op, "reduce") in ("amax", "amin", "prod") and _real_float_operand(op)


def _torch_reduce_rule(torch_fn, source_name: str):
    """scatter_reduce / index_reduce with amax, amin or prod: PyTorch's
    scatter_reduce_backward / index_reduce_backward share the gradient among tied
    extrema (the input's element included unless ``include_self=False``) and handle
    zeros in products; the backward runs that formula on the torch executor
    (``torch_vjp.torch_vjp``, torch.autograd through the same call). The forward stays on XLA."""
    def rule(op, x, y, g):
        from thunder_mlir.transforms.torch_vjp import torch_vjp

        names = _names(op)
        if names != ["input", "index", source_name]:
            raise NotImplementedError(f"{torch_fn.__name__} with operands {names}")
        dim, reduce = _py_attr(op, "dim"), _py_attr(op, "reduce")
        include_self = bool(_py_attr(op, "include_self", True))

        def call(inp, index, src):
            return torch_fn(inp, dim, index, src, reduce, include_self=include_self)
        return torch_vjp(f"torch.{torch_fn.__name__}", call, x, g)
    return rule


def _register_torch_reduce_rules():
    import torch

    composite_rule("ltorch.scatter_reduce", applies=_torch_reduce_applies)(
        _torch_reduce_rule(torch.scatter_reduce, "src"))
    composite_rule("ltorch.index_reduce", applies=_torch_reduce_applies)(
        _torch_reduce_rule(torch.index_reduce, "source"))


_register_torch_reduce_rules()


# ------------------------------------------------------------------ activations
# Rules as PyTorch's derivatives.yaml: the subgradient eager picks at a kink (relu at 0,
# clamp and hardtanh at their bounds), and no NaN from a discarded branch that overflows
# (elu's, softplus's exp at large inputs: the chain rule gives 0 * inf there).
def _float_input(op) -> bool:
    return _real_float_operand(op) and _names(op)[:1] == ["input"]


def _scalar(op, name, default):
    v = _py_attr(op, name, default)
    return None if v is None else float(v)


def _where(cond, a, b):
    return prims.where(cond, a, b)


def _full_like(t, v):
    return prims.full(t.tshape, v, t.tdtype)


@composite_rule("ltorch.relu", applies=lambda op: _float_input(op))
def _relu(op, x, y, g):
    """threshold_backward(grad, result, 0): the gradient where the result is > 0, so 0
    at x = 0."""
    return [_where(_e("gt", y[0], _full_like(y[0], 0)), g[0], _full_like(g[0], 0))]


def _clamp_applies(op) -> bool:
    names = _names(op)
    return _float_input(op) and names == ["input"] and \
        ir.RankedTensorType(op.results[0].type) == ir.RankedTensorType(op.operands[0].type)


def _same_float_operands(op) -> bool:
    """Every operand and the result: one real floating-point element type."""
    if not _real_float_operand(op):
        return False
    t = [ir.RankedTensorType(v.type).element_type for v in list(op.operands) + [op.results[0]]]
    return all(e == t[0] for e in t)


def _bcast_to(t, shape):
    if t.tshape == tuple(shape):
        return t
    return prims.broadcast_in_dim(t, tuple(shape),
                                  list(range(len(shape) - len(t.tshape), len(shape))))


@composite_rule("ltorch.clamp", applies=lambda op: _names(op)[:1] == ["input"]
                and set(_names(op)) <= {"input", "min", "max"} and _same_float_operands(op))
def _clamp(op, x, y, g):
    """clamp_backward / clamp_backward_min_max (FunctionsManual.cpp): the input gets the
    gradient where min <= x <= max (1 at the bounds, where the chain rule through max/min
    would split it in halves); a tensor min gets it where x < min (and min < max), a
    tensor max where x > max (or max < min). Broadcast bounds get theirs summed."""
    named = dict(zip(_names(op), x))
    shape = y[0].tshape
    xs, gs = _bcast_to(named["input"], shape), g[0]
    zero = _full_like(gs, 0)
    lo, hi = named.get("min"), named.get("max")
    lo_b = _bcast_to(lo, shape) if lo is not None else None
    hi_b = _bcast_to(hi, shape) if hi is not None else None
    if lo_b is None and _scalar(op, "min", None) is not None:
        lo_b = _full_like(xs, _scalar(op, "min", None))
    if hi_b is None and _scalar(op, "max", None) is not None:
        hi_b = _full_like(xs, _scalar(op, "max", None))
    keep = None
    for bound, cmp in ((lo_b, "ge"), (hi_b, "le")):
        if bound is not None:
            c = _e(cmp, xs, bound)
            keep = c if keep is None else _e("bitwise_and", keep, c)
    out = {"input": _sum_to(_where(keep, gs, zero), named["input"].tshape)}
    if lo is not None:
        below = _e("lt", xs, lo_b)
        if hi_b is not None:
            below = _e("bitwise_and", below, _e("lt", lo_b, hi_b))
        out["min"] = _sum_to(_where(below, gs, zero), lo.tshape)
    if hi is not None:
        above = _e("gt", xs, hi_b)
        if lo_b is not None:
            above = _e("bitwise_or", above, _e("lt", hi_b, lo_b))
        out["max"] = _sum_to(_where(above, gs, zero), hi.tshape)
    return [out[n] for n in _names(op)]


def _fmax_rule(cmp: str):
    def rule(op, x, y, g):
        """fmax / fmin (derivatives.yaml): ``self`` gets the gradient where self >= other
        (fmin: <=) or other is NaN, ``other`` elsewhere: ties go to ``self``, where the
        chain rule through maximum would split them."""
        a, b = x
        shape = y[0].tshape
        ab, bb = _bcast_to(a, shape), _bcast_to(b, shape)
        to_a = _e("bitwise_or", _e(cmp, ab, bb), _e("ne", bb, bb))
        zero = _full_like(g[0], 0)
        return [_sum_to(_where(to_a, g[0], zero), a.tshape),
                _sum_to(_where(to_a, zero, g[0]), b.tshape)]
    return rule


composite_rule("ltorch.fmax", applies=lambda op: _names(op) == ["input", "other"]
               and _same_float_operands(op))(_fmax_rule("ge"))
composite_rule("ltorch.fmin", applies=lambda op: _names(op) == ["input", "other"]
               and _same_float_operands(op))(_fmax_rule("le"))


@composite_rule("ltorch.copysign", applies=lambda op: _names(op) == ["input", "other"]
               and _same_float_operands(op))
def _copysign(op, x, y, g):
    """copysign (derivatives.yaml): ``self`` gets ``copysign_tensor_self_backward``, the
    gradient times ``result / self`` with 0 where ``self`` is 0; ``other`` gets
    ``zeros_like(other)``: a zero gradient, not none (the chain rule through the sign bit
    would leave ``other`` out of the graph, and eager's ``other.grad`` is a zero tensor)."""
    a, b = x
    shape = y[0].tshape
    ab = _bcast_to(a, shape)
    zero = _full_like(g[0], 0)
    ratio = _where(_e("eq", ab, zero), zero, _e("div", y[0], ab))
    return [_sum_to(_e("mul", g[0], ratio), a.tshape), _full_like(b, 0)]


def _bce_applies(op) -> bool:
    names = _names(op)
    return names[:2] == ["input", "target"] and set(names) <= {"input", "target", "weight"} \
        and _f32_or_f64(op) and _same_float_operands(op) \
        and "size_average" not in op.attributes and "reduce" not in op.attributes


@composite_rule("ltorch.binary_cross_entropy", applies=_bce_applies)
def _binary_cross_entropy(op, x, y, g):
    """binary_cross_entropy_backward (CPU): input: g (x - t) / max((1 - x) x, 1e-12) times
    the weight (0 at x = t = 0 or 1, where the chain rule through the clamped logs gave
    0 * inf = NaN); target: binary_cross_entropy_target_backward, -logit(x) g times the
    weight; both divided by the element count for ``mean``."""
    named = dict(zip(_names(op), x))
    xs, ts, w = named["input"], named["target"], named.get("weight")
    reduction = _py_attr(op, "reduction", "mean")
    gs = g[0] if reduction == "none" else prims.broadcast_in_dim(g[0], xs.tshape, [])
    if reduction == "mean":
        n = 1
        for s_ in xs.tshape:
            n *= s_
        gs = _e("div", gs, _full_like(gs, n))
    tb = _bcast_to(ts, xs.tshape)
    one = _full_like(xs, 1.0)
    denom = _e("maximum", _e("mul", _e("sub", one, xs), xs), _full_like(xs, 1e-12))
    gx = _e("div", _e("mul", gs, _e("sub", xs, tb)), denom)
    gt = _e("mul", _e("neg", _e("log", _e("div", xs, _e("sub", one, xs)))), gs)
    if w is not None:
        wb = _bcast_to(w, xs.tshape)
        gx, gt = _e("mul", gx, wb), _e("mul", gt, wb)
    out = {"input": gx, "target": _sum_to(gt, ts.tshape), "weight": None}
    return [out[n] for n in _names(op)]


@composite_rule("ltorch.hardtanh", applies=_clamp_applies)
def _hardtanh(op, x, y, g):
    """hardtanh_backward: the gradient where min_val < x < max_val (0 at the bounds)."""
    xs = x[0]
    lo, hi = _scalar(op, "min_val", -1.0), _scalar(op, "max_val", 1.0)
    keep = _e("bitwise_and", _e("gt", xs, _full_like(xs, lo)), _e("lt", xs, _full_like(xs, hi)))
    return [_where(keep, g[0], _full_like(g[0], 0))]


@composite_rule("ltorch.hardsigmoid", applies=_clamp_applies)
def _hardsigmoid(op, x, y, g):
    """hardsigmoid_backward: g / 6 where -3 < x < 3, else 0."""
    xs = x[0]
    keep = _e("bitwise_and", _e("gt", xs, _full_like(xs, -3.0)), _e("lt", xs, _full_like(xs, 3.0)))
    return [_where(keep, _e("div", g[0], _full_like(g[0], 6.0)), _full_like(g[0], 0))]


@composite_rule("ltorch.hardswish", applies=_clamp_applies)
def _hardswish(op, x, y, g):
    """hardswish_backward: 0 for x <= -3, g (x / 3 + 0.5) for -3 < x < 3, g from 3."""
    xs, gs = x[0], g[0]
    mid = _e("mul", gs, _e("add", _e("div", xs, _full_like(xs, 3.0)), _full_like(xs, 0.5)))
    return [_where(_e("le", xs, _full_like(xs, -3.0)), _full_like(gs, 0),
                   _where(_e("lt", xs, _full_like(xs, 3.0)), mid, gs))]


def _elu_rule(input_scale_of_alpha: bool):
    def rule(op, x, y, g):
        """elu_backward(grad, alpha, scale=1, input_scale, is_result=False, self): g for
        x > 0, g * input_scale * alpha * exp(x * input_scale) otherwise (celu:
        input_scale = 1 / alpha); no NaN from exp overflowing in the other branch."""
        xs, gs = x[0], g[0]
        alpha = _scalar(op, "alpha", 1.0)
        s = 1.0 / alpha if input_scale_of_alpha else 1.0
        neg = _e("mul", _e("mul", gs, _full_like(gs, s * alpha)),
                 _e("exp", _e("mul", xs, _full_like(xs, s))))
        return [_where(_e("gt", xs, _full_like(xs, 0)), gs, neg)]
    return rule


composite_rule("ltorch.elu", applies=_clamp_applies)(_elu_rule(False))
composite_rule("ltorch.celu", applies=_clamp_applies)(_elu_rule(True))


@composite_rule("ltorch.softplus", applies=_clamp_applies)
def _softplus(op, x, y, g):
    """softplus_backward: g where beta x > threshold, else g z / (z + 1), z = exp(beta x)
    (the overflowing z of the other branch is selected away, not multiplied)."""
    xs, gs = x[0], g[0]
    beta, threshold = _scalar(op, "beta", 1.0), _scalar(op, "threshold", 20.0)
    bx = _e("mul", xs, _full_like(xs, beta))
    z = _e("exp", bx)
    soft = _e("div", _e("mul", gs, z), _e("add", z, _full_like(z, 1.0)))
    return [_where(_e("gt", bx, _full_like(bx, threshold)), gs, soft)]


@composite_rule("ltorch.mish", applies=_clamp_applies)
def _mish(op, x, y, g):
    """mish_backward: g (t + x sigmoid(x) (1 - t^2)), t = tanh(log1p(exp(x)))."""
    xs, gs = x[0], g[0]
    t = _e("tanh", _e("log1p", _e("exp", xs)))
    d = _e("add", t, _e("mul", _e("mul", xs, _e("logistic", xs)),
                        _e("sub", _full_like(t, 1.0), _e("mul", t, t))))
    return [_e("mul", gs, d)]


@composite_rule("ltorch.entr", applies=_clamp_applies)
def _entr(op, x, y, g):
    """d/dx (-x log x) = -(1 + log x): +inf at 0, as eager (the chain rule gave NaN)."""
    xs = x[0]
    return [_e("mul", g[0], _e("neg", _e("add", _full_like(xs, 1.0), _e("log", xs))))]


def _xlogy_applies(op) -> bool:
    if _names(op) != ["input", "other"] or not _real_float_operand(op, 0):
        return False
    t = [ir.RankedTensorType(v.type) for v in list(op.operands) + [op.results[0]]]
    return all(a.element_type == t[0].element_type for a in t)


def _xlogy_rule(log1p: bool):
    def rule(op, x, y, g):
        """xlogy / xlog1py (derivatives.yaml): self: g * xlogy(self != 0, other) (0 where
        self is 0, where the chain rule gave 0 * log 0 = NaN); other: g * self / other (or
        / (other + 1)). Broadcast operands get their gradients summed to their shapes."""
        a, b = x
        shape = y[0].tshape
        ab, bb = (prims.broadcast_in_dim(t, shape, list(range(len(shape) - len(t.tshape),
                                                               len(shape))))
                  if t.tshape != shape else t for t in (a, b))
        nz = prims.convert_element_type(_e("ne", ab, _full_like(ab, 0)), ab.tdtype)
        logb = _e("log1p" if log1p else "log", bb)
        term = _where(_e("eq", nz, _full_like(nz, 0)), _full_like(nz, 0), _e("mul", nz, logb))
        term = _where(_e("ne", bb, bb), bb, term)  # xlogy(0, NaN) is NaN
        denom = _e("add", bb, _full_like(bb, 1.0)) if log1p else bb
        return [_sum_to(_e("mul", g[0], term), a.tshape),
                _sum_to(_e("div", _e("mul", g[0], ab), denom), b.tshape)]
    return rule


composite_rule("ltorch.xlogy", applies=_xlogy_applies)(_xlogy_rule(False))
composite_rule("ltorch.xlog1py", applies=_xlogy_applies)(_xlogy_rule(True))
def _conv_ints(op, name, default: int, n: int = 3) -> tuple[int, ...]:
    """A convolution composite's int-or-list attribute as n ints (``default`` if absent)."""
    vals = tuple(attrs.get_ints(op, name, [default]))
    return vals * n if len(vals) == 1 else vals


def _conv_padding(op) -> tuple[int, ...] | None:
    """conv3d's padding as ints, or None where ATen pads asymmetrically ('same' with an even
    dilated kernel)."""
    a = op.attributes["padding"] if "padding" in op.attributes else None
    if isinstance(a, ir.StringAttr):
        mode = a.value
        if mode == "valid":
            return (0, 0, 0)
        w = ir.RankedTensorType(op.operands[1].type).shape[2:]
        totals = [d * (k - 1) for d, k in zip(_conv_ints(op, "dilation", 1), w)]
        return None if any(t % 2 for t in totals) else tuple(t // 2 for t in totals)
    return _conv_ints(op, "padding", 0)


def _conv3d_applies(op) -> bool:
    t = ir.RankedTensorType(op.operands[0].type)
    return (isinstance(t.element_type, ir.F32Type)
            and _names(op)[:2] == ["input", "weight"] and _conv_padding(op) is not None)


@composite_rule("ltorch.conv3d", applies=_conv3d_applies)
@composite_rule("ltorch.conv_transpose3d", applies=_conv3d_applies)
def _conv3d(op, x, y, g):
    """3-d (transposed) convolution: input, weight and bias gradients by ATen's
    ``convolution_backward`` on the torch executor (the forward stays on XLA).

    XLA's convolution on the CPU (Eigen) sums a 3-d weight gradient's N·D·H·W products in
    one chain; ATen's kernels (oneDNN, or per-sample GEMMs for transposed convolutions)
    sum them otherwise, and on small volumes XLA's sum is up to 1.7x farther from the
    float64 result than eager's — past float32's tolerance on ModuleInfo's Conv3d and
    ConvTranspose3d samples. Eager's own backward kernel gives eager's gradients."""
    from thunder_mlir.ir.dialect import ExecutorCallOp, segment_kwargs
    from thunder_mlir.frontend.torch_fallback import permuted, type_order, unpermute
    from thunder_mlir.frontend.tracing import current_trace
    from thunder_mlir.ir import implementations

    bt = current_trace()
    names = _names(op)
    transposed = ir.StringAttr(op.attributes["name"]).value == "ltorch.conv_transpose3d"
    stride, dilation = _conv_ints(op, "stride", 1), _conv_ints(op, "dilation", 1)
    padding = _conv_padding(op)
    out_pad = _conv_ints(op, "output_padding", 0) if transposed else (0, 0, 0)
    groups = _int_attr(op, "groups", 1)
    has_bias = "bias" in names
    inp, w = x[0], x[1]
    unbatched = len(inp.tshape) == 4
    bias_sizes = [w.tshape[1] * groups if transposed else w.tshape[0]] if has_bias else None

    def backward(gy, i, wt):
        if unbatched:
            gy, i = gy.unsqueeze(0), i.unsqueeze(0)
        gi, gw, gb = torch.ops.aten.convolution_backward(
            gy, i, wt, bias_sizes, list(stride), list(padding), list(dilation), transposed,
            list(out_pad), groups, [True, True, has_bias])
        return [gi.squeeze(0) if unbatched else gi, gw] + ([gb] if has_bias else [])

    operands = [g[0].value, inp.value, w.value]
    results = [inp.value.type, w.value.type] + ([x[2].value.type] if has_bias else [])
    in_order = type_order([v.type for v in operands])
    out_order = type_order(results)
    impl = implementations.register_attr("torch.ops.aten.convolution_backward",
                                         permuted(backward, in_order, out_order))
    with bt.ip:
        call = ExecutorCallOp(**segment_kwargs("in", [operands[k] for k in in_order]),
                              **segment_kwargs("out", [results[k] for k in out_order],
                                               type_of=lambda t: t),
                              executor=ir.StringAttr.get("torch"),
                              callee=ir.StringAttr.get("torch.ops.aten.convolution_backward"),
                              impl=impl)
    grads = [bt.make_proxy(v) for v in unpermute(list(call.operation.results), out_order)]
    return grads + [None] * (len(x) - len(grads))


def _grouped_mm_applies(op) -> bool:
    return _names(op)[:2] == ["mat_a", "mat_b"] and set(_names(op)[2:]) <= {"offs"} and \
        _real_float_operand(op, 0) and _real_float_operand(op, 1)


@composite_rule("ltorch.grouped_mm", applies=_grouped_mm_applies)
def _grouped_mm(op, x, y, g):
    """derivatives.yaml's ``_grouped_mm``: ``_grouped_mm_mat1_backward`` is
    ``grouped_mm(grad, mat2^T, offs)`` and ``_grouped_mm_mat2_backward`` is
    ``grouped_mm(mat1^T, grad, offs)`` (torch/csrc/autograd/FunctionsManual.cpp), each a
    grouped product of another form (2d x 3d <-> 2d x 2d, 3d x 2d <-> 2d x 2d, 3d x 3d
    bmm), computed as the forward is (``frontend/symbols/moe.py``, ``grouped_product``).
    Rows of mat_a owned by no group get 0 (eager: uninitialized memory)."""
    from thunder_mlir.frontend.symbols.moe import grouped_product

    named = dict(zip(_names(op), x))
    a, b, offs = named["mat_a"], named["mat_b"], named.get("offs")

    def t(m):  # transpose of the last two dims
        r = len(m.tshape)
        return prims.transpose(m, list(range(r - 2)) + [r - 1, r - 2])

    out = {"mat_a": grouped_product(g[0], t(b), offs), "mat_b": grouped_product(t(a), g[0], offs),
           "offs": None}
    return [out[n] for n in _names(op)]


@composite_rule("ltorch.no_grad_write")
def _no_grad_write(op, x, y, g):
    """A write made under ``no_grad()`` into a tensor that requires grad
    (frontend/functionalization.py): the value is the written one, and the gradient flows
    to the tensor as it was before the write, as eager's autograd graph, which the write
    does not enter, sends it."""
    return [g[0] if n == "base" else None for n in _names(op)]


@composite_rule("ltorch.zero_grad_edge")
def _zero_grad_edge(op, x, y, g):
    """An edge of eager's autograd graph that the dataflow lacks
    (frontend/functionalization.py ``keep_edge``): ``value`` gets the gradient, ``source``
    a zero one, as eager's node for a write over all of ``source`` (``fill_``, ``zero_``,
    ``copy_``: derivatives.yaml ``self: zeros_like(grad)``) or of an empty index with
    ``source`` as its value gives it."""
    return [g[0] if n == "value" else prims.full(v.tshape, 0, v.tdtype)
            for n, v in zip(_names(op), x)]
