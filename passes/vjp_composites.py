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

from torch_mlir import ir

from thunder_mlir import prims

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
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else default


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


def _layer_norm_applies(op) -> bool:
    names = _names(op)
    return _float_input(op) and names[0] == "input" and set(names[1:]) <= {"weight", "bias"}


@composite_rule("ltorch.layer_norm", applies=_layer_norm_applies)
@_opmath
def _layer_norm(op, x, y, g):
    named = dict(zip(_names(op), x))
    inp, w = named["input"], named.get("weight")
    k = len(ir.ArrayAttr(op.attributes["normalized_shape"]))
    eps = ir.FloatAttr(op.attributes["eps"]).value if "eps" in op.attributes else 1e-5
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
    inp, w = named["input"], named.get("weight")
    k = len(ir.ArrayAttr(op.attributes["normalized_shape"]))
    eps = ir.FloatAttr(op.attributes["eps"]).value if "eps" in op.attributes else \
        torch.finfo(inp.tdtype).eps
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
    from thunder_mlir.symbols.reduction import sum_accumulated

    # the bias gradient sums 16-bit floats in float32, as ATen's sum kernel does
    out = {"input": gx, "weight": gw, "bias": sum_accumulated(g[0], lead)}
    return [out[n] for n in _names(op)]


def _cross_entropy_applies(op) -> bool:
    names = _names(op)
    if names != ["input", "target"] or not _f32_or_f64(op):
        return False
    t = ir.RankedTensorType(op.operands[1].type).element_type
    smoothing = ir.FloatAttr(op.attributes["label_smoothing"]).value \
        if "label_smoothing" in op.attributes else 0.0
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
    return name in op.attributes and ir.BoolAttr(op.attributes[name]).value


def _sdpa_applies(op) -> bool:
    names = _names(op)
    if names[:3] != ["query", "key", "value"] or not set(names[3:]) <= {"attn_mask"}:
        return False
    if not _f32_or_f64(op):
        return False
    if "dropout_p" in op.attributes and ir.FloatAttr(op.attributes["dropout_p"]).value > 0:
        return False
    q, k, v = (ir.RankedTensorType(op.operands[i].type).shape for i in range(3))
    if len(q) < 2 or not (q[:-2] == k[:-2] == v[:-2]):  # no batch broadcasting or GQA
        return False
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

    from thunder_mlir.symbols.nn import attention_probs

    named = dict(zip(_names(op), x))
    q, k, v, mask = named["query"], named["key"], named["value"], named.get("attn_mask")
    scale = ir.FloatAttr(op.attributes["scale"]).value if "scale" in op.attributes else \
        1.0 / math.sqrt(q.tshape[-1])
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
