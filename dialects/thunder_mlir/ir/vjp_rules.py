"""VJP rules of the prims, emitting the backward computation as prims; ``prim_defs.py``
gives each prim its rule (``PrimDef.vjp``).

A rule gets the forward op, proxies of its operands (``x``) and results (``y``), and the
cotangents of its results (``g``, None where zero); it returns one cotangent per operand
(None where the operand gets no gradient). Rules are the standard reverse-mode derivatives
(e.g. JAX's ``jax._src.lax`` transpose/JVP rules; PyTorch's derivatives.yaml for the
torch-level conventions such as splitting ties of max/min evenly).
"""

from __future__ import annotations

import math

import torch

from thunder_mlir.ir import attrs, dtypes, prims
from thunder_mlir.ir.primdef import GradNotImplemented
from thunder_mlir.ir.proxy import TensorProxy


def _e(name, *xs):
    return prims.elementwise(name, *xs)


def _c(like: TensorProxy, v) -> TensorProxy:
    return prims.full(like.tshape, v, like.tdtype)


def _attr_ints(op, name) -> list[int]:
    from torch_mlir import ir

    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _attr_int(op, name) -> int:
    return attrs.get_int(op, name)


# ----------------------------------------------------------------- elementwise
def add(op, x, y, g):
    """VJP of add: both operands get g (derivatives.yaml ``add``)."""
    return [g[0], g[0]]


def sub(op, x, y, g):
    """VJP of sub: g and -g (derivatives.yaml ``sub``)."""
    return [g[0], _e("neg", g[0])]


def mul(op, x, y, g):
    """VJP of mul: g b and g a (derivatives.yaml ``mul``)."""
    return [_e("mul", g[0], x[1]), _e("mul", g[0], x[0])]


def div(op, x, y, g):
    """VJP of div: g / b and -g a / b^2 = -(g / b) y (derivatives.yaml ``div``)."""
    ga = _e("div", g[0], x[1])
    return [ga, _e("neg", _e("mul", ga, y[0]))]


def neg(op, x, y, g):
    """VJP of neg: -g."""
    return [_e("neg", g[0])]


def exp(op, x, y, g):
    """VJP of exp: g y."""
    return [_e("mul", g[0], y[0])]


def expm1(op, x, y, g):
    """VJP of expm1: g (y + 1)."""
    return [_e("mul", g[0], _e("add", y[0], _c(y[0], 1)))]


def log(op, x, y, g):
    """VJP of log: g / x."""
    return [_e("div", g[0], x[0])]


def log1p(op, x, y, g):
    """VJP of log1p: g / (x + 1)."""
    return [_e("div", g[0], _e("add", x[0], _c(x[0], 1)))]


def sqrt(op, x, y, g):
    """VJP of sqrt: g / (2 y)."""
    return [_e("div", g[0], _e("mul", _c(y[0], 2), y[0]))]


def rsqrt(op, x, y, g):
    """VJP of rsqrt: -g y^3 / 2."""
    # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 * y^3
    y3 = _e("mul", y[0], _e("mul", y[0], y[0]))
    return [_e("mul", g[0], _e("mul", _c(y[0], -0.5), y3))]


def tanh(op, x, y, g):
    """VJP of tanh: g (1 - y^2)."""
    return [_e("mul", g[0], _e("sub", _c(y[0], 1), _e("mul", y[0], y[0])))]


def logistic(op, x, y, g):
    """VJP of logistic: g y (1 - y)."""
    return [_e("mul", g[0], _e("mul", y[0], _e("sub", _c(y[0], 1), y[0])))]


def sin(op, x, y, g):
    """VJP of sin: g cos(x)."""
    return [_e("mul", g[0], _e("cos", x[0]))]


def cos(op, x, y, g):
    """VJP of cos: -g sin(x)."""
    return [_e("neg", _e("mul", g[0], _e("sin", x[0])))]


def erf(op, x, y, g):
    """VJP of erf: g 2/sqrt(pi) exp(-x^2)."""
    d = _e("mul", _c(x[0], 2 / math.sqrt(math.pi)), _e("exp", _e("neg", _e("mul", x[0], x[0]))))
    return [_e("mul", g[0], d)]


def abs_(op, x, y, g):
    """VJP of abs: g sign(x) (derivatives.yaml ``abs``: 0 at 0)."""
    return [_e("mul", g[0], _e("sign", x[0]))]


def pow_(op, x, y, g):
    """PyTorch's pow_backward_self / pow_backward_exponent: ga = g b a^(b-1), 0 where
    b = 0 (0^-1 would give 0 * inf = NaN); gb = g a^b log a, 0 where a = 0 and b >= 0."""
    a, b = x
    one = _c(b, 1)
    ga = _e("mul", g[0], _e("mul", b, _e("pow", a, _e("sub", b, one))))
    ga = prims.where(_e("eq", b, _c(b, 0)), _c(ga, 0), ga)
    gb = _e("mul", g[0], _e("mul", y[0], _e("log", a)))
    zero_base = _e("bitwise_and", _e("eq", a, _c(a, 0)), _e("ge", b, _c(b, 0)))
    gb = prims.where(zero_base, _c(gb, 0), gb)
    return [ga, gb]


def minmax(op, x, y, g):
    """VJP of maximum/minimum: g to the chosen operand, split evenly on ties
    (derivatives.yaml ``maximum``/``minimum``)."""
    a, b = x
    eq = _e("eq", a, b)
    pick_a = _e("eq", y[0], a)
    half = _e("mul", g[0], _c(g[0], 0.5))
    zero = _c(g[0], 0)
    ga = prims.where(eq, half, prims.where(pick_a, g[0], zero))
    gb = prims.where(eq, half, prims.where(pick_a, zero, g[0]))
    return [ga, gb]


def where(op, x, y, g):
    """VJP of where: g to the chosen branch, zero to the other; none to the predicate."""
    zero = _c(g[0], 0)
    return [None, prims.where(x[0], g[0], zero), prims.where(x[0], zero, g[0])]


def clamp(op, x, y, g):
    """VJP of clamp(lo, x, hi): g where lo <= x <= hi, else 0; none to the bounds."""
    lo, v, hi = x
    inside = _e("bitwise_and", _e("ge", v, lo), _e("le", v, hi))
    return [None, prims.where(inside, g[0], _c(g[0], 0)), None]


def convert(op, x, y, g):
    """VJP of convert_element_type: g converted back to x's dtype; none for integer x."""
    if not (x[0].tdtype.is_floating_point or x[0].tdtype.is_complex):
        return [None]
    return [prims.convert_element_type(g[0], x[0].tdtype)]


def zero_grad(op, x, y, g):
    """VJP of the piecewise-constant floor, ceil, round, trunc and sign: zero
    (derivatives.yaml ``zeros_like(grad)``)."""
    return [_c(x[0], 0)]


# --------------------------------------------------------------------- shapes
def reshape(op, x, y, g):
    """VJP of reshape: g reshaped to x's shape."""
    return [prims.reshape(g[0], x[0].tshape)]


def transpose(op, x, y, g):
    """VJP of transpose: g transposed by the inverse permutation."""
    perm = _attr_ints(op, "permutation")
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [prims.transpose(g[0], inv)]


def broadcast(op, x, y, g):
    """VJP of broadcast_in_dim: g summed over the broadcast dims, reshaped to x's shape
    (JAX's ``_broadcast_in_dim_transpose_rule``)."""
    dims = _attr_ints(op, "broadcast_dimensions")
    xs, ys = x[0].tshape, y[0].tshape
    summed = [d for d in range(len(ys)) if d not in dims]
    summed += [dims[i] for i, s in enumerate(xs) if s == 1 and ys[dims[i]] != 1]
    r = prims.reduce("reduce_sum", g[0], sorted(summed))
    return [prims.reshape(r, xs)]


def slice_(op, x, y, g):
    """VJP of slice: g padded back to x's shape with zeros (strides as interior padding;
    JAX's ``_slice_transpose_rule``)."""
    start, limit, strides = (_attr_ints(op, n) for n in ("start_indices", "limit_indices",
                                                          "strides"))
    lo, hi, interior = [], [], []
    for d, (s, st, n) in enumerate(zip(start, strides, y[0].tshape)):
        last = s + (n - 1) * st if n else s
        lo.append(s)
        interior.append(st - 1 if n > 1 else 0)
        hi.append(x[0].tshape[d] - (last + 1) if n else x[0].tshape[d] - s)
    return [prims.pad(g[0], prims.full((), 0, g[0].tdtype), lo, hi, interior)]


def pad(op, x, y, g):
    """VJP of pad: g un-padded (JAX's ``_pad_transpose``); the padding value gets the sum
    of g over the padding."""
    # JAX's _pad_transpose: un-pad (negative padding crops, positive pads with zeros),
    # then take every (interior + 1)-th element
    lo, hi, interior = (_attr_ints(op, n) for n in ("low", "high", "interior"))
    zero = prims.full((), 0, g[0].tdtype)
    if any(v < 0 for v in lo + hi):
        unpadded = prims.pad(g[0], zero, [-v for v in lo], [-v for v in hi], [0] * len(lo))
    else:
        unpadded = prims.slice_(g[0], lo, [n - h for n, h in zip(g[0].tshape, hi)])
    gx = prims.slice_(unpadded, [0] * len(lo), list(unpadded.tshape), [i + 1 for i in interior])
    gv = prims.reduce("reduce_sum", g[0], list(range(len(g[0].tshape))))
    gv = _e("sub", gv, prims.reduce("reduce_sum", gx, list(range(len(gx.tshape)))))
    return [gx, gv]


def reverse(op, x, y, g):
    """VJP of reverse: g reversed along the same dims."""
    return [prims.reverse(g[0], _attr_ints(op, "dims"))]


def concatenate(op, x, y, g):
    """VJP of concatenate: each operand gets its slice of g."""
    d = _attr_int(op, "dimension")
    out, start = [], 0
    for xi in x:
        n = xi.tshape[d]
        starts = [0] * len(xi.tshape)
        limits = list(g[0].tshape)
        starts[d], limits[d] = start, start + n
        out.append(prims.slice_(g[0], starts, limits))
        start += n
    return out


# ----------------------------------------------------------------- reductions
def _unreduce(g: TensorProxy, x: TensorProxy, dims) -> TensorProxy:
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.tshape))
    return prims.broadcast_in_dim(prims.reshape(g, keep), x.tshape, list(range(len(x.tshape))))


def reduce_sum(op, x, y, g):
    """VJP of reduce_sum: g broadcast back over the reduced dims."""
    return [_unreduce(g[0], x[0], _attr_ints(op, "dims"))]


def reduce_extreme(op, x, y, g):
    """VJP of reduce_max/reduce_min: g to the extreme elements, shared evenly by ties
    (as torch.amax/amin)."""
    dims = _attr_ints(op, "dims")
    mask = prims.convert_element_type(_e("eq", x[0], _unreduce(y[0], x[0], dims)), x[0].tdtype)
    count = prims.reduce("reduce_sum", mask, dims)
    share = _e("div", g[0], count)  # ties share the gradient evenly (as torch.amax)
    return [_e("mul", mask, _unreduce(share, x[0], dims))]


def reduce_prod(op, x, y, g):
    """PyTorch's prod_backward: g * prod / x when the input holds no zero; otherwise
    ``prod_safe_zeros_backward``, g times the product of the other elements of the slice
    (exclusive products from both ends, no division: the chain rule gave 0 / 0 = NaN).
    For a reduction over every dim the input is flattened, as eager's ``prod()``; a
    reduction over several but not all dims (no torch op makes one) keeps the division."""
    xs = x[0]
    dims = _attr_ints(op, "dims")
    gb, yb = _unreduce(g[0], xs, dims), _unreduce(y[0], xs, dims)
    divided = _e("div", _e("mul", gb, yb), xs)
    r = len(xs.tshape)
    if r == 0 or not dims or (len(dims) > 1 and sorted(dims) != list(range(r))):
        return [divided]
    flat = len(dims) > 1 or r == 1
    t = prims.reshape(xs, (math.prod(xs.tshape),)) if flat else xs
    d = 0 if flat else dims[0]
    n = t.tshape[d]
    if n == 0:
        return [divided]
    one = prims.full((), 1, t.tdtype)

    def shifted_cumprod(v):  # prod of the elements before each one (1 for the first)
        lo = [0] * len(v.tshape)
        hi = [0] * len(v.tshape)
        lo[d] = 1
        hi[d] = -1
        return prims.cumulative("cumprod", prims.pad(v, one, lo, hi, [0] * len(v.tshape)), d)

    before = shifted_cumprod(t)
    after = prims.reverse(shifted_cumprod(prims.reverse(t, [d])), [d])
    others = _e("mul", before, after)
    if flat:
        others = prims.reshape(others, xs.tshape)
    safe = _e("mul", gb, others)
    has_zero = prims.reduce("reduce_or", _e("eq", xs, _c(xs, 0)), list(range(r)))
    has_zero = prims.broadcast_in_dim(has_zero, xs.tshape, [])
    return [prims.where(has_zero, safe, divided)]


def cumsum(op, x, y, g):
    """VJP of cumsum: the reversed cumulative sum of g along the dim."""
    d = _attr_int(op, "dim")
    return [prims.reverse(prims.cumsum(prims.reverse(g[0], [d]), d), [d])]


# -------------------------------------------------------------- linear algebra
def dot_general(op, x, y, g):
    """VJP of dot_general: g contracted with the other operand over the free dims and
    transposed back (JAX's ``_dot_general_transpose_lhs``/``_rhs``)."""
    lhs, rhs = x
    lb, rb, lc, rc = (_attr_ints(op, n) for n in (
        "lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
        "rhs_contracting_dimensions"))
    nb = len(lb)
    lf = [d for d in range(len(lhs.tshape)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rhs.tshape)) if d not in rb and d not in rc]
    g_batch = list(range(nb))
    g_lf = list(range(nb, nb + len(lf)))
    g_rf = list(range(nb + len(lf), nb + len(lf) + len(rf)))
    # d lhs: g (batch, lf, rf) . rhs (batch, rc, rf) contracting rf -> (batch, lf, rc)
    dl = prims.dot_general(g[0], rhs, g_batch, rb, g_rf, rf)
    order = lb + lf + [lc[rc.index(r)] for r in [d for d in range(len(rhs.tshape)) if d in rc]]
    dl = prims.transpose(dl, _inverse(order))
    # d rhs: g (batch, lf, rf) . lhs (batch, lf, lc) contracting lf -> (batch, rf, lc)
    dr = prims.dot_general(g[0], lhs, g_batch, lb, g_lf, lf)
    order_r = rb + rf + [rc[lc.index(c)] for c in [d for d in range(len(lhs.tshape)) if d in lc]]
    dr = prims.transpose(dr, _inverse(order_r))
    return [dl, dr]


def _inverse(order: list[int]) -> list[int]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return inv


# ------------------------------------------------------------------- indexing
def take(op, x, y, g):
    """VJP of take (index_select): g index-added into zeros of x's shape; none to indices."""
    d = _attr_int(op, "dim")
    zeros = _c(x[0], 0)
    return [prims.index_add(zeros, x[1], g[0], d), None]


def take_along(op, x, y, g):
    """VJP of take_along (gather): g scatter-added into zeros; none to indices."""
    d = _attr_int(op, "dim")
    return [prims.take_along_add(_c(x[0], 0), x[1], g[0], d), None]


def index_add(op, x, y, g):
    """VJP of index_add: x gets g, src g's selected slices; none to indices."""
    d = _attr_int(op, "dim")
    return [g[0], None, prims.take(g[0], x[1], d)]


# ------------------------------------------------ more elementwise (derivatives.yaml)
def derivative(fn):
    """A rule ``g * fn(x, y)`` for a unary elementwise prim."""
    def r(op, x, y, g):
        return [_e("mul", g[0], fn(x[0], y[0]))]
    return r


def one_minus_sq(x):
    """1 - x^2, elementwise (the asin/acos/atanh derivatives' factor)."""
    return _e("sub", _c(x, 1), _e("mul", x, x))


def trigamma(x):
    """polygamma(1, x); below 1/2 by reflection, psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)
    (chlo.polygamma is wrong for negative x)."""
    one = _c(x, 1)
    direct = _e("polygamma", one, x)
    s = _e("sin", _e("mul", _c(x, math.pi), x))
    refl = _e("sub", _e("div", _c(x, math.pi ** 2), _e("mul", s, s)),
              _e("polygamma", one, _e("sub", one, x)))
    return prims.where(_e("lt", x, _c(x, 0.5)), refl, direct)




def polygamma(op, x, y, g):
    """VJP of polygamma(n, x): g polygamma(n + 1, x) for x; none for n."""
    n, v = x  # d/dx polygamma(n, x) = polygamma(n + 1, x); no gradient for n
    return [None, _e("mul", g[0], _e("polygamma", _e("add", n, _c(n, 1)), v))]


def atan2(op, x, y, g):
    """PyTorch's atan2_backward: recip = 1 / (a^2 + b^2), 0 where a = b = 0 (the chain
    rule gave 0 * inf = NaN there); ga = g b recip, gb = g (-a) recip."""
    a, b = x
    denom = _e("add", _e("mul", a, a), _e("mul", b, b))
    recip = prims.where(_e("eq", denom, _c(denom, 0)), _c(denom, 0),
                        _e("div", _c(denom, 1), denom))
    return [_e("mul", _e("mul", g[0], b), recip), _e("mul", _e("mul", g[0], _e("neg", a)), recip)]


def fmod(op, x, y, g):
    """VJP of fmod: g and -g trunc(a / b) (derivatives.yaml ``fmod``); none for integers."""
    a, b = x  # torch: self -> grad, other -> -grad * self.div(other, rounding_mode="trunc")
    if not a.tdtype.is_floating_point:
        return [None, None]
    q = _e("trunc", _e("div", a, b))
    return [g[0], _e("neg", _e("mul", g[0], q))]


def cum_extreme(op, x, y, g):
    """VJP of cummax/cummin: g to the position of the running extreme (the latest
    index holding it, as torch.cummax's indices)."""
    # the gradient goes to the (last) position of the running extreme, as torch.cummax's
    # indices (recomputed as in the cummax symbol: latest index where x equals the value)
    d = _attr_int(op, "dim")
    xs = x[0]
    hit = _e("bitwise_or", _e("eq", xs, y[0]), _e("ne", xs, xs))
    pos = prims.iota(xs.tshape, torch.int64, d)
    idx = prims.where(hit, pos, prims.full(xs.tshape, -1, torch.int64))
    idx = prims.cumulative("cummax", idx, d)
    return [prims.take_along_add(_c(xs, 0), idx, g[0], d)]


def logcumsumexp(op, x, y, g):
    """VJP of logcumsumexp (torch's ``logcumsumexp_backward``), accumulated as
    ATen's scan kernel."""
    # d x_k = sum_{j >= k} g_j exp(x_k - y_j), in log space for the positive and negative
    # parts of g separately (torch's logcumsumexp_backward); its reversed logcumsumexp
    # accumulates as ATen's scan kernel does (float64 for float32 on CPU)
    d = _attr_int(op, "dim")
    xs, ys, gs = x[0], y[0], g[0]
    ninf = _c(gs, float("-inf"))
    acc_dtype = dtypes.scan_acc_dtype(gs.tdtype, gs.tdevice)

    def part(mask, mag):
        lg = prims.where(mask, _e("log", prims.where(mask, mag, _c(gs, 1))), ninf)
        rev = prims.reverse(_e("sub", lg, ys), [d])
        scan = prims.cumulative("logcumsumexp", prims.convert_element_type(rev, acc_dtype), d)
        acc = prims.reverse(prims.convert_element_type(scan, gs.tdtype), [d])
        return _e("exp", _e("add", acc, xs))

    zero = _c(gs, 0)
    pos = part(_e("gt", gs, zero), gs)
    neg = part(_e("lt", gs, zero), _e("neg", gs))
    return [_e("sub", pos, neg)]


def take_along_add(op, x, y, g):
    """VJP of take_along_add (scatter_add): x gets g, src g gathered at the indices."""
    d = _attr_int(op, "dim")
    return [g[0], None, prims.take_along(g[0], x[1], d)]


def _gather_points(t: TensorProxy, indices: TensorProxy) -> TensorProxy:
    """``t[indices[..., 0], ..., indices[..., k-1]]`` (B + t.shape[k:]), zero where an index
    vector is out of range (the inverse of scatter, which skips those)."""
    k = indices.tshape[-1]
    batch = indices.tshape[:-1]
    rest = t.tshape[k:]
    lin = prims.full(batch, 0, torch.int64)
    valid = prims.full(batch, 1, torch.bool)
    for i in range(k):
        starts = [0] * len(indices.tshape)
        limits = list(indices.tshape)
        starts[-1], limits[-1] = i, i + 1
        col = prims.reshape(prims.slice_(indices, starts, limits), batch)
        n = t.tshape[i]
        ok = _e("bitwise_and", _e("ge", col, prims.full(batch, 0, torch.int64)),
                _e("lt", col, prims.full(batch, n, torch.int64)))
        valid = _e("bitwise_and", valid, ok)
        lin = _e("add", _e("mul", lin, prims.full(batch, n, torch.int64)), col)
    lin = prims.where(valid, lin, prims.full(batch, 0, torch.int64))
    flat = 1
    for s in t.tshape[:k]:
        flat *= s
    got = prims.take(prims.reshape(t, (flat,) + tuple(rest)), lin, 0)
    mask = prims.broadcast_in_dim(valid, tuple(batch) + tuple(rest), list(range(len(batch))))
    return prims.where(mask, got, _c(got, 0))


def scatter(op, x, y, g):
    """VJP of scatter (kinds add and set; others raise NotImplementedError): see the
    comments for duplicate indices."""
    from torch_mlir import ir

    kind = ir.StringAttr(op.attributes["kind"]).value
    xs, idx, upd = x
    if kind == "add":
        return [g[0], None, _gather_points(g[0], idx)]
    if kind == "set":
        # overwritten positions get no gradient in x; each update gets the cotangent of
        # its position (with duplicate indices every duplicate gets it, as the result holds
        # one of them: a documented difference from torch's unspecified choice)
        gx = prims.scatter(g[0], idx, _c(upd, 0), "set")
        return [gx, None, _gather_points(g[0], idx)]
    raise NotImplementedError(f"VJP of scatter kind {kind!r}")


def _dilate(n: int, d: int) -> int:
    return 0 if n == 0 else 1 + d * (n - 1)


def convolution(op, x, y, g):
    """VJP of convolution for the prim's NC*/OI* layout, by JAX's
    ``_conv_general_dilated_transpose_lhs``/``_rhs`` (jax/_src/lax/convolution.py): each
    gradient is ONE convolution whatever the groups. The input gradient convolves the
    cotangent with the reversed, regrouped kernel using ``feature_group_count``; the weight
    gradient (``_convolution_rhs_grad``) uses ``batch_group_count`` where the forward has
    feature groups and ``feature_group_count`` where it has batch groups.

    With ``P`` groups of either kind, the kernel (O, I, *K) regrouped for the input
    gradient is (P * I, O / P, *K), entry [p * I + i, o] = kernel[p * O / P + o, i]; with
    batch groups the result's channels hold the P batch blocks, moved back into the batch."""
    lhs, rhs = x
    gy = g[0]
    strides, flat, ld, rd = (_attr_ints(op, n) for n in (
        "window_strides", "padding", "lhs_dilation", "rhs_dilation"))
    groups = _attr_int(op, "feature_group_count")
    batch_groups = _attr_int(op, "batch_group_count")
    n = len(strides)
    lo = flat[0::2]
    in_sp, k_sp, out_sp = lhs.tshape[2:], rhs.tshape[2:], gy.tshape[2:]
    lhs_d = [_dilate(a, b) for a, b in zip(in_sp, ld)]
    rhs_d = [_dilate(a, b) for a, b in zip(k_sp, rd)]
    out_d = [_dilate(a, b) for a, b in zip(out_sp, strides)]
    sp = list(range(2, 2 + n))
    O, I = rhs.tshape[0], rhs.tshape[1]
    P = max(groups, batch_groups)
    # d lhs: g (N / B, O, *) conv reversed, regrouped kernel (P * I, O / P, *K)
    if P == 1:
        kt = prims.transpose(rhs, [1, 0] + sp)
    else:
        k5 = prims.reshape(rhs, (P, O // P, I) + tuple(k_sp))
        k5 = prims.transpose(k5, [0, 2, 1] + [i + 1 for i in sp])
        kt = prims.reshape(k5, (P * I, O // P) + tuple(k_sp))
    kt = prims.reverse(kt, sp)
    pb = [r - l - 1 for r, l in zip(rhs_d, lo)]
    pa = [a + r - 1 - o - b for a, r, o, b in zip(lhs_d, rhs_d, out_d, pb)]
    dl = prims.convolution(gy, kt, ld, list(zip(pb, pa)), strides, rd, P)
    if batch_groups > 1:  # (N / B, B * C, *) -> (N, C, *): the batch blocks back in order
        nb, C = gy.tshape[0], lhs.tshape[1]
        dl = prims.reshape(dl, (nb, batch_groups, C) + tuple(in_sp))
        dl = prims.transpose(dl, [1, 0, 2] + [i + 1 for i in sp])
        dl = prims.reshape(dl, tuple(lhs.tshape))
    return [dl, _convolution_rhs_grad(lhs, rhs, gy, strides, lo, ld, rd, groups, batch_groups)]


def _convolution_rhs_grad(lhs, rhs, gy, strides, lo, ld, rd, groups, batch_groups=1):
    """d rhs of ``convolution``: dW[o, c, k] = sum over n, i of g[n, o, i] *
    x_padded[n, c, i * stride + k * rhs_dilation], over the n and c of o's group, as ONE
    convolution (JAX's ``_conv_general_dilated_transpose_rhs``): the forward's feature
    groups become ``batch_group_count`` (the transposed input's batch is the channels C,
    split into the groups; the window's output channels O split alike), its batch groups
    ``feature_group_count`` (the transposed input's channels are the batch N).

    Two formulations compute it; the one whose window is smaller is taken (the other
    multiplies zeros):
    * the cotangent as the window: lhs^T (C, N, *) padded and dilated as in the forward,
      window g^T (O, N / B, *I) dilated by the stride -> (C / G, O, *K) (JAX's
      ``_conv_general_dilated_transpose_rhs``);
    * the input as the window, as ATen computes a transposed convolution's weight
      gradient: g^T (O, N, *I) dilated by the stride and padded by ``(K - 1) * rd - lo``
      below, window lhs^T (C, N, *J) dilated by the lhs dilation -> (O / G, C, *K)
      (batch groups of O / G rows, each reading its C / G channels), regrouped to
      (O, C / G, *K) and reversed. Not with batch groups (their batch is not the window's).
    A transposed convolution's forward is a convolution over its input padded by K - 1 on
    each side (and dilated by its stride): with the first formulation its weight gradient
    runs through (I / J)^d times more products, all of them zero but for J^d of them, and
    XLA's contraction over that longer window rounds farther from the float64 result
    (ConvTranspose3d's ModuleInfo samples: 1.4x eager's distance, 1.1x with the input as
    the window; float32 3-d convolutions are differentiated by ATen, ``vjp_composites``)."""
    n = len(strides)
    sp = list(range(2, 2 + n))
    swap = [1, 0] + sp
    in_sp, k_sp, out_sp = lhs.tshape[2:], rhs.tshape[2:], gy.tshape[2:]
    lhs_d = [_dilate(a, b) for a, b in zip(in_sp, ld)]
    rhs_d = [_dilate(a, b) for a, b in zip(k_sp, rd)]
    out_d = [_dilate(a, b) for a, b in zip(out_sp, strides)]
    O, Cg = rhs.tshape[0], rhs.tshape[1]
    # the input as the window: padding of the strided cotangent below and above
    below = [(k - 1) * r - low for k, r, low in zip(k_sp, rd, lo)]
    above = [(j - 1) * d + low - (i - 1) * s
             for j, d, low, i, s in zip(in_sp, ld, lo, out_sp, strides)]
    input_window = (batch_groups == 1 and math.prod(in_sp) < math.prod(out_sp)
                    and min(below + above) >= 0 and all(in_sp) and all(out_sp))
    if input_window:
        gt, lt = prims.transpose(gy, swap), prims.transpose(lhs, swap)
        r = prims.convolution(gt, lt, rd, list(zip(below, above)), strides, ld, 1, groups)
        if groups > 1:  # (O / G, G * Cg, *K) -> (O, Cg, *K)
            r = prims.reshape(r, (O // groups, groups, Cg) + tuple(k_sp))
            r = prims.transpose(r, [1, 0, 2] + [i + 1 for i in sp])
            r = prims.reshape(r, tuple(rhs.tshape))
        return prims.reverse(r, sp)
    hi = [(o - a) + (r - l - 1) for o, a, r, l in zip(out_d, lhs_d, rhs_d, lo)]
    lt, gt = prims.transpose(lhs, swap), prims.transpose(gy, swap)
    r = prims.convolution(lt, gt, rd, list(zip(lo, hi)), ld, strides, batch_groups, groups)
    return prims.transpose(r, swap)


def reduce_window(op, x, y, g):
    """VJP of reduce_window: sum windows by JAX's
    ``_reduce_window_sum_transpose_rule``; max/min windows send g to the first extreme
    element of each window (torch's pooling kernels)."""
    from torch_mlir import ir

    kind = ir.StringAttr(op.attributes["kind"]).value
    xs = x[0]
    window, strides, flat = (_attr_ints(op, n) for n in (
        "window_dimensions", "window_strides", "padding"))
    lo, hi = flat[0::2], flat[1::2]
    zero = prims.full((), 0, g[0].tdtype)
    if kind == "sum":  # JAX's _reduce_window_sum_transpose_rule
        out_d = [_dilate(o, s) for o, s in zip(g[0].tshape, strides)]
        pb = [w - l - 1 for w, l in zip(window, lo)]
        pa = [n + w - 1 - o - b for n, w, o, b in zip(xs.tshape, window, out_d, pb)]
        padded = prims.pad(g[0], zero, pb, pa, [s - 1 for s in strides])
        return [prims.reduce_window(padded, zero, "sum", window, [1] * len(window),
                                    [(0, 0)] * len(window)), None]
    # max / min: the cotangent goes to the first extreme element of each window (in
    # row-major window order, as torch's pooling kernels pick it)
    import itertools

    fill = prims.full((), float("-inf") if kind == "max" else float("inf"), xs.tdtype)
    px = prims.pad(xs, fill, lo, hi, [0] * len(lo))
    taken = prims.full(y[0].tshape, 0, torch.bool)
    acc = prims.full(px.tshape, 0, g[0].tdtype)
    for off in itertools.product(*[range(w) for w in window]):
        limit = [o + (n - 1) * s + 1 for o, n, s in zip(off, y[0].tshape, strides)]
        win = prims.slice_(px, list(off), limit, strides)
        hit = _e("bitwise_and", _e("eq", win, y[0]), _e("bitwise_not", taken))
        taken = _e("bitwise_or", taken, hit)
        contrib = prims.where(hit, g[0], _c(g[0], 0))
        back = [p - lm for p, lm in zip(px.tshape, limit)]
        acc = _e("add", acc, prims.pad(contrib, zero, list(off), back,
                                       [s - 1 for s in strides]))
    gx = prims.pad(acc, zero, [-v for v in lo], [-v for v in hi], [0] * len(lo))
    return [gx, None]


def cumprod(op, x, y, g):
    """VJP of cumprod, exact with zeros (torch's ``cumprod_backward``)."""
    # exact with zeros (torch's cumprod_backward): before the first zero z of a slice,
    # d x_k = revcumsum(g y)_k / x_k; at z, revcumsum(g * cumprod(x with x_z := 1))_z;
    # after z, 0
    d = _attr_int(op, "dim")
    xs, ys, gs = x[0], y[0], g[0]

    def revcumsum(t):
        return prims.reverse(prims.cumsum(prims.reverse(t, [d]), d), [d])

    zero = _c(xs, 0)
    is_zero = _e("eq", xs, zero)
    nz = prims.cumsum(prims.convert_element_type(is_zero, xs.tdtype), d)
    before = _e("eq", nz, zero)
    first = _e("bitwise_and", is_zero, _e("eq", nz, _c(xs, 1)))
    a = _e("div", revcumsum(_e("mul", gs, ys)), prims.where(before, xs, _c(xs, 1)))
    c = prims.cumulative("cumprod", prims.where(first, _c(xs, 1), xs), d)
    b = revcumsum(_e("mul", gs, c))
    return [prims.where(before, a, prims.where(first, b, zero))]


# ------------------------------------------------------- factorizations and solves
def _mT(t: TensorProxy) -> TensorProxy:
    """Transpose of the last two dims."""
    r = len(t.tshape)
    return prims.transpose(t, list(range(r - 2)) + [r - 1, r - 2])


def _bmm(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """Batched matrix product of (..., m, k) and (..., k, n) with equal batch dims."""
    nb = len(a.tshape) - 2
    batch = list(range(nb))
    return prims.dot_general(a, b, batch, batch, [nb + 1], [nb])


def _triangle(t: TensorProxy, lower: bool, diagonal: bool) -> TensorProxy:
    """The lower (or upper) triangle of the last two dims of ``t``, with or without its
    diagonal; zeros elsewhere."""
    n, m = t.tshape[-2], t.tshape[-1]
    row = prims.iota((n, m), torch.int64, 0)
    col = prims.iota((n, m), torch.int64, 1)
    keep = _e(("ge" if diagonal else "gt") if lower else ("le" if diagonal else "lt"), row, col)
    keep = prims.broadcast_in_dim(keep, t.tshape, [len(t.tshape) - 2, len(t.tshape) - 1])
    return prims.where(keep, t, _c(t, 0))


def triangular_solve(op, x, y, g):
    """op(a) y = b (left) or y op(a) = b (right), op(a) = a or a^T: gb solves the system
    with op(a)^T, ga = -gb y^T (left) or -y^T gb (right), transposed back for
    ``transpose_a``, and kept on the triangle the solve reads (the strict one for a unit
    diagonal) -- PyTorch's linalg_solve_triangular_backward (FunctionsManual.cpp)."""
    a, _ = x
    left, lower, unit, trans = (bool(_attr_int(op, n)) for n in (
        "left_side", "lower", "unit_diagonal", "transpose_a"))
    gb = prims.triangular_solve(a, g[0], left, lower, unit, not trans)
    gm = _e("neg", _bmm(gb, _mT(y[0])) if left else _bmm(_mT(y[0]), gb))
    if trans:
        gm = _mT(gm)
    return [_triangle(gm, lower, not unit), gb]


def cholesky(op, x, y, g):
    """A = L L^T (lower factor; the prim's other triangle is unspecified, so L is read as
    its lower triangle): gA = L^-T phi(tril(L^T gL)) L^-1 with phi(P) = (P + tril(P, -1)^T)
    / 2, PyTorch's cholesky_backward (FunctionsManual.cpp, after Murray 2016)."""
    if not bool(_attr_int(op, "lower")):
        raise NotImplementedError("VJP of an upper cholesky prim")
    L = _triangle(y[0], True, True)
    p = _triangle(_bmm(_mT(L), g[0]), True, True)
    phi = _e("mul", _e("add", p, _mT(_triangle(p, True, False))), _c(p, 0.5))
    ga = prims.triangular_solve(L, phi, True, True, False, True)
    ga = prims.triangular_solve(L, ga, False, True, False, False)
    return [ga]


def nextafter(op, x, y, g):
    """derivatives.yaml (torch 2.13): ``self: at::where(self != other, grad, 0)`` (where
    they tie, nextafter returns ``other``), ``other: zeros_like(other)``."""
    return [prims.where(_e("eq", x[0], x[1]), _c(g[0], 0), g[0]), _c(x[1], 0)]


# ------------------------------------------------------- complex parts, zeta, markers
def real(op, x, y, g):
    """derivatives.yaml ``real``: the cotangent as the real part of a complex one."""
    if not x[0].tdtype.is_complex:
        return [g[0]]
    return [prims.convert_element_type(g[0], x[0].tdtype)]


def imag(op, x, y, g):
    """derivatives.yaml ``imag``: the cotangent times i (eager's grad of ``z.imag`` is
    ``1j``); zero for a real operand."""
    if not x[0].tdtype.is_complex:
        return [_c(x[0], 0)]
    gc = prims.convert_element_type(g[0], x[0].tdtype)
    return [_e("mul", gc, _c(gc, 1j))]


def zeta(op, x, y, g):
    """derivatives.yaml ``special_zeta``: ``other`` (q) gets ``g * -x * zeta(x + 1, q)``;
    ``self`` (x) is ``not_implemented("zeta")``."""
    a, q = x
    gq = _e("mul", g[0], _e("mul", _e("neg", a), _e("zeta", _e("add", a, _c(a, 1)), q)))
    return [GradNotImplemented("the derivative for 'zeta' is not implemented.", _c(a, 0)), gq]


def no_derivative(op, x, y, g):
    """The cotangent passes through; the backward raises the op's ``message`` (eager
    autograd's NotImplemented node) when it runs."""
    from torch_mlir import ir

    return [GradNotImplemented(ir.StringAttr(op.attributes["message"]).value, g[0])]


def dynamic_index(op, x, y, g):
    """The cotangent of ``x[index]`` goes to row ``index`` of zeros (JAX's
    dynamic_slice transpose: a dynamic_update_slice); the index gets none."""
    xs, index = x
    dim = _attr_int(op, "dim")
    return [prims.dynamic_update_index(_c(xs, 0), g[0], index, dim), None]


def dynamic_update_index(op, x, y, g):
    """``x`` gets the cotangent with row ``index`` zeroed, ``update`` that row (JAX's
    dynamic_update_slice transpose); the index gets none."""
    xs, upd, index = x
    dim = _attr_int(op, "dim")
    return [prims.dynamic_update_index(g[0], _c(upd, 0), index, dim),
            prims.dynamic_index(g[0], index, dim), None]
