"""Random symbols, compiled to XLA with the program's seed (``thunder_mlir/rng.py``).

Factories (``rand``, ``randn``, ``randint``, their ``*_like`` forms, ``randperm``),
sampling (``bernoulli``, ``multinomial``, ``normal``), the in-place fills of
``torch.Tensor`` (``uniform_``, ``normal_``, ``bernoulli_``, ``random_``, ``exponential_``,
``geometric_``, ``log_normal_``, ``cauchy_``), dropout in all its variants and ``rrelu`` in
training mode. Output shapes and dtypes are torch's (factories run on the meta device);
the values follow the same distributions as torch's, not the same bits.

A call with an explicit ``generator=`` runs on the torch fallback: the compiled program
draws from the default generator's seed and cannot follow another Generator's state.
Transforms from uniform numbers: ``exponential`` -log(1 - u) / lambda, ``geometric``
ceil(log(1 - u) / log(1 - p)), ``cauchy`` median + sigma tan(pi (u - 1/2)),
``log_normal`` exp(mean + std z) (the inverse-CDF formulas of PyTorch's
``TransformationHelper.h``); dropout and alpha dropout as ATen's ``Dropout.cpp``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder_mlir.errors import Fallback
from thunder_mlir.ir import prims
from thunder_mlir.frontend import rng
from thunder_mlir.frontend.lang import expand_to, lift
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.locations import describe_frame, user_frame
from thunder_mlir.frontend.symbols.creation import _check_device, _meta_factory
from thunder_mlir.frontend.symbols.registry import T, register, register_inplace
from thunder_mlir.frontend.lang import full_like

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def user_error(cls, msg: str):
    """An exception naming the user's line (bad arguments to a random op)."""
    return cls(f"{describe_frame(user_frame())}\n  {msg}")


def _plain(generator=None, out=None) -> None:
    if generator is not None:
        raise Fallback("an explicit torch.Generator: the compiled program draws from the "
                       "default generator and cannot follow another Generator's state")
    if out is not None:
        raise Fallback("out= of a random op")


def _float_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        raise Fallback(f"{name} of complex numbers")
    if dtype not in _FLOATS:
        raise user_error(TypeError, f"{name} needs a floating point dtype, got {dtype}")
    return dtype


def _compute(dtype: torch.dtype) -> torch.dtype:
    """Transforms of 16-bit floats compute in float32 and round once."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# ------------------------------------------------------------------- factories
@register("rand", torch.rand)
def rand(*size, generator=None, out=None, dtype=None, layout=None, device=None,
         pin_memory=False, requires_grad=False):
    """Uniform [0, 1) floats of ``size`` (default dtype, or ``dtype``: a float dtype)."""
    _plain(generator, out)
    _check_device(device)
    m = _meta_factory(torch.rand, *size, dtype=dtype)
    return rng.uniform(m.shape, _float_dtype("torch.rand", m.dtype))


@register("randn", torch.randn)
def randn(*size, generator=None, out=None, dtype=None, layout=None, device=None,
          pin_memory=False, requires_grad=False):
    """Standard normal floats of ``size`` (default dtype, or ``dtype``: a float dtype)."""
    _plain(generator, out)
    _check_device(device)
    m = _meta_factory(torch.randn, *size, dtype=dtype)
    return rng.normal(m.shape, _float_dtype("torch.randn", m.dtype))


@register("rand_like", torch.rand_like)
def rand_like(input, *, generator=None, dtype=None, layout=None, device=None,
              requires_grad=False, memory_format=None, pin_memory=False):
    _plain(generator)
    return rng.uniform(input.tshape, _float_dtype("torch.rand_like", dtype or input.tdtype))


@register("randn_like", torch.randn_like)
def randn_like(input, *, generator=None, dtype=None, layout=None, device=None,
               requires_grad=False, memory_format=None, pin_memory=False):
    _plain(generator)
    return rng.normal(input.tshape, _float_dtype("torch.randn_like", dtype or input.tdtype))


def _bounds(name: str, args: tuple, low, high) -> tuple[int, int]:
    """(low, high) of ``randint(high)`` / ``randint(low, high)`` written either way."""
    nums = list(args)
    if high is None and nums:
        high = nums.pop()
    if low is None:
        low = nums.pop() if nums else 0
    if nums or high is None:
        raise user_error(TypeError, f"{name}: expected (high) or (low, high), got {args}")
    if type(low) is TensorProxy or type(high) is TensorProxy:
        raise Fallback(f"{name} with tensor bounds")
    if not low < high:
        raise user_error(RuntimeError, f"{name}: random_ expects 'from' to be less than 'to', but "
                                   f"got from={low} >= to={high}")
    return int(low), int(high)


def _integers(name, shape, low, high, dtype):
    if high - low > 1 << 63:
        raise Fallback(f"{name} over more than 2^63 values")
    if dtype.is_complex:
        raise Fallback(f"{name} of complex numbers")
    return rng.integers(shape, low, high, dtype)


@register("randint", torch.randint)
def randint(*args, low=None, high=None, size=None, generator=None, out=None, dtype=None,
            layout=None, device=None, pin_memory=False, requires_grad=False):
    """Integers uniform in [low, high) (``randint(high, size)`` or ``randint(low, high,
    size)``), int64 unless ``dtype`` says otherwise. RuntimeError when low >= high."""
    _plain(generator, out)
    _check_device(device)
    if size is None:
        if not args or not isinstance(args[-1], (tuple, list)):
            raise user_error(TypeError, "torch.randint: missing the size argument")
        args, size = args[:-1], args[-1]
    low, high = _bounds("torch.randint", args, low, high)
    m = _meta_factory(torch.randint, low, high, size, dtype=dtype)
    return _integers("torch.randint", m.shape, low, high, m.dtype)


@register("randint_like", torch.randint_like)
def randint_like(input, *args, low=None, high=None, generator=None, dtype=None, layout=None,
                 device=None, requires_grad=False, memory_format=None, pin_memory=False):
    _plain(generator)
    low, high = _bounds("torch.randint_like", args, low, high)
    return _integers("torch.randint_like", input.tshape, low, high, dtype or input.tdtype)


@register("randperm", torch.randperm)
def randperm(n, *, generator=None, out=None, dtype=torch.int64, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    """A random permutation of 0..n-1: the order that sorts n random 64-bit keys."""
    _plain(generator, out)
    _check_device(device)
    if type(n) is TensorProxy:
        raise Fallback("randperm of a tensor n")
    keys = rng.bits((int(n),), torch.int64)
    return prims.convert_element_type(prims.argsort(keys, 0, False), dtype)


# -------------------------------------------------------------------- sampling
@register("bernoulli", torch.bernoulli, T.bernoulli)
def bernoulli(input, p=None, *, generator=None, out=None):
    """``bernoulli(input)``: 1 where u < input (probabilities); ``bernoulli(input, p)``: a
    tensor like ``input`` of Bernoulli(p) draws. The result has ``input``'s dtype."""
    _plain(generator, out)
    if p is None and not input.tdtype.is_floating_point:
        raise user_error(TypeError, f"torch.bernoulli of {input.tdtype}: the probabilities must "
                                "be floating point")
    probs = input if p is None else p
    if type(probs) is TensorProxy:
        probs = expand_to(probs, input.tshape)
    return prims.convert_element_type(rng.bernoulli(probs, input.tshape), input.tdtype)


@register("multinomial", torch.multinomial, T.multinomial)
def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Category indices (int64, shape ``input.shape[:-1] + (num_samples,)``) drawn with
    probabilities proportional to the rows of ``input`` (1-D or 2-D, non-negative).

    With replacement: inverse CDF, index = #{k : cdf[k] <= u} with cdf the normalized
    cumulative sum (its last entry is exactly 1, so u < 1 never passes it). Without: the
    ``num_samples`` largest keys p / E, E ~ Exp(1) (Efraimidis-Spirakis, as torch's CPU
    kernel); zero-probability categories come last. Torch's checks that need the data
    (negative or all-zero rows, too few non-zero categories) are not made."""
    _plain(generator, out)
    shape = input.tshape
    if len(shape) not in (1, 2) or not input.tdtype.is_floating_point:
        raise user_error(RuntimeError, f"torch.multinomial: prob_dist must be a 1 or 2 dim float "
                                   f"tensor, got {len(shape)} dims of {input.tdtype}")
    n = shape[-1]
    if num_samples <= 0:
        raise user_error(RuntimeError, "torch.multinomial: cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > n:
        raise user_error(RuntimeError, f"torch.multinomial: cannot sample n_sample > "
                                   f"prob_dist.size(-1) samples without replacement ({num_samples}"
                                   f" > {n})")
    acc = _compute(input.tdtype)
    p = prims.convert_element_type(input, acc)
    d = len(shape) - 1
    rows = shape[:-1]
    if replacement:
        cdf = prims.cumsum(p, d)
        total = prims.slice_(cdf, [0] * d + [n - 1], list(rows) + [n])
        cdf = prims.elementwise("div", cdf, prims.broadcast_in_dim(total, shape, list(range(d + 1))))
        u = rng.uniform(rows + (num_samples,), acc)
        full = rows + (num_samples, n)
        le = prims.elementwise("le", prims.broadcast_in_dim(cdf, full, list(range(d)) + [d + 1]),
                               prims.broadcast_in_dim(u, full, list(range(d + 1))))
        return prims.reduce("reduce_sum", prims.convert_element_type(le, torch.int64), [d + 1])
    e = prims.elementwise("neg", prims.elementwise("log1p", prims.elementwise(
        "neg", rng.uniform(shape, acc))))
    keys = prims.where(prims.elementwise("gt", p, full_like(p, 0)), prims.elementwise("div", p, e),
                       full_like(p, -1))
    order = prims.argsort(keys, d, True)
    return prims.slice_(order, [0] * (d + 1), list(rows) + [num_samples])


@register("normal", torch.normal)
def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, pin_memory=False, requires_grad=False):
    """mean + std * z, z standard normal, for every overload of torch.normal (tensor or
    number mean and std; numbers with a size)."""
    _plain(generator, out)
    _check_device(device)

    def meta(x):
        return x.meta if type(x) is TensorProxy else x
    with torch._C.DisableTorchFunction():  # torch's overload resolution and shapes
        if size is None:
            m = torch.normal(meta(mean), meta(std))
        else:
            m = torch.normal(meta(mean), meta(std), size, device="meta",
                             **({} if dtype is None else {"dtype": dtype}))
    shape, out_dtype = tuple(m.shape), _float_dtype("torch.normal", m.dtype)
    acc = _compute(out_dtype)
    z = rng.normal(shape, acc)
    z = prims.elementwise("add", prims.elementwise("mul", z, lift(std, acc, shape)),
                          lift(mean, acc, shape))
    return prims.convert_element_type(z, out_dtype)


# ------------------------------------------------------------- in-place fills
# Functional forms ``op(self, ...)`` -> a new tensor like self; ``Tensor.op_`` writes it back.
def _like(self, values) -> TensorProxy:
    return prims.convert_element_type(values, self.tdtype)


@register("uniform")
def uniform(self, from_=0.0, to=1.0, *, generator=None):
    _plain(generator)
    if not from_ <= to:
        raise user_error(RuntimeError, f"uniform_ expects to return a [from, to) range, but found "
                                   f"from={from_} > to={to}")
    return rng.uniform(self.tshape, _float_dtype("Tensor.uniform_", self.tdtype), from_, to)


@register("normal_fill")
def normal_fill(self, mean=0.0, std=1.0, *, generator=None):
    _plain(generator)
    if std < 0:
        raise user_error(RuntimeError, f"normal expects std >= 0.0, but found std {std}")
    dtype = _float_dtype("Tensor.normal_", self.tdtype)
    z = rng.normal(self.tshape, _compute(dtype))
    return _like(self, prims.elementwise("add", prims.elementwise("mul", z, full_like(z, std)),
                                         full_like(z, mean)))


@register("bernoulli_fill")
def bernoulli_fill(self, p=0.5, *, generator=None):
    _plain(generator)
    if type(p) is TensorProxy:
        p = expand_to(p, self.tshape)
    elif not 0 <= p <= 1:
        raise user_error(RuntimeError, f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return _like(self, rng.bernoulli(p, self.tshape))


@register("random_fill")
def random_fill(self, *args, generator=None, **kwargs):
    """``random_()``: [0, 2^mantissa] for floats (every value representable), the dtype's
    range otherwise; ``random_(to)``: [0, to); ``random_(from, to)``: [from, to)."""
    _plain(generator)
    dtype = self.tdtype
    frm, to = (list(args) + [None, None])[:2] if len(args) != 1 else (0, args[0])
    frm = kwargs.get("from", frm if frm is not None else 0)
    to = kwargs.get("to", to)
    if to is None:
        if dtype.is_floating_point:
            to = (1 << (rng.MANTISSA_BITS[dtype] + 1)) + 1
        elif dtype == torch.bool:
            to = 2
        else:
            to = torch.iinfo(dtype).max + 1
    if not frm < to:
        raise user_error(RuntimeError, f"random_ expects 'from' to be less than 'to', but got "
                                   f"from={frm} >= to={to}")
    return _integers("Tensor.random_", self.tshape, int(frm), int(to), dtype)


def _uniform_compute(self, name):
    dtype = _float_dtype(name, self.tdtype)
    return rng.uniform(self.tshape, _compute(dtype))


@register("exponential")
def exponential(self, lambd=1.0, *, generator=None):
    _plain(generator)
    if not lambd > 0:
        raise user_error(RuntimeError, f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    u = _uniform_compute(self, "Tensor.exponential_")
    e = prims.elementwise("neg", prims.elementwise("log1p", prims.elementwise("neg", u)))
    return _like(self, prims.elementwise("div", e, full_like(e, lambd)))


@register("geometric")
def geometric(self, p, *, generator=None):
    _plain(generator)
    if not 0 < p < 1:
        raise user_error(RuntimeError, f"geometric_ expects p to be in (0, 1), but got p={p}")
    acc = _compute(self.tdtype) if self.tdtype.is_floating_point else torch.float64
    u = rng.uniform(self.tshape, acc)
    k = prims.elementwise("ceil", prims.elementwise("div", prims.elementwise(
        "log1p", prims.elementwise("neg", u)), full_like(u, math.log1p(-p))))
    return _like(self, prims.elementwise("maximum", k, full_like(k, 1)))  # u = 0 gives 0 trials


@register("log_normal")
def log_normal(self, mean=1.0, std=2.0, *, generator=None):
    _plain(generator)
    if not std > 0:
        raise user_error(RuntimeError, f"log_normal_ expects std > 0.0, but found std={std}")
    dtype = _float_dtype("Tensor.log_normal_", self.tdtype)
    z = rng.normal(self.tshape, _compute(dtype))
    return _like(self, prims.elementwise("exp", prims.elementwise(
        "add", prims.elementwise("mul", z, full_like(z, std)), full_like(z, mean))))


@register("cauchy")
def cauchy(self, median=0.0, sigma=1.0, *, generator=None):
    _plain(generator)
    u = _uniform_compute(self, "Tensor.cauchy_")
    t = prims.elementwise("tan", prims.elementwise("mul", prims.elementwise(
        "sub", u, full_like(u, 0.5)), full_like(u, math.pi)))
    return _like(self, prims.elementwise("add", prims.elementwise("mul", t, full_like(t, sigma)),
                                         full_like(t, median)))


register_inplace(uniform, T.uniform_)
register_inplace(normal_fill, T.normal_)
register_inplace(bernoulli_fill, T.bernoulli_)
register_inplace(random_fill, T.random_)
register_inplace(exponential, T.exponential_)
register_inplace(geometric, T.geometric_)
register_inplace(log_normal, T.log_normal_)
register_inplace(cauchy, T.cauchy_)


# --------------------------------------------------------------------- dropout
def _check_p(p) -> None:
    if not 0.0 <= p <= 1.0:
        raise user_error(ValueError, f"dropout probability has to be between 0 and 1, but got {p}")


def _dropout(x: TensorProxy, p: float, feature: bool, alpha: bool) -> TensorProxy:
    """ATen's ``_dropout_impl``: keep each element (each (N, C) channel with ``feature``)
    with probability 1 - p; kept values are scaled by 1 / (1 - p), or for alpha dropout
    become a * x + b on kept and a * (-alpha') + b elsewhere (SELU's fixed point)."""
    shape = x.tshape
    if math.prod(shape) == 0:
        return x
    if p == 1:  # x * 0, as ATen (NaN stays NaN)
        return prims.elementwise("mul", x, full_like(x, 0))
    noise_shape = shape[:2] + (1,) * (len(shape) - 2) if feature else shape
    keep = rng.bernoulli(1.0 - p, noise_shape)
    keep = prims.broadcast_in_dim(keep, shape, list(range(len(shape))))
    acc = _compute(x.tdtype) if x.tdtype.is_floating_point else x.tdtype
    xa = prims.convert_element_type(x, acc)
    if not alpha:
        out = prims.where(keep, prims.elementwise("mul", xa, full_like(xa, 1.0 / (1.0 - p))), full_like(xa, 0))
        return prims.convert_element_type(out, x.tdtype)
    a_ = 1.7580993408473766  # alpha * scale of SELU
    a = 1.0 / math.sqrt((a_ * a_ * p + 1) * (1 - p))
    b = prims.where(keep, full_like(xa, a_ * a * p), full_like(xa, a_ * a * p - a_ * a))
    out = prims.elementwise("add", prims.where(keep, prims.elementwise("mul", xa, full_like(xa, a)),
                                               full_like(xa, 0)), b)
    return prims.convert_element_type(out, x.tdtype)


@register("dropout", F.dropout, inplace_flag=True)
def dropout(input, p=0.5, training=True, inplace=False):
    _check_p(p)
    if not training or p == 0:
        return input
    return _dropout(input, p, feature=False, alpha=False)


@register("dropout_aten", torch.dropout)
def dropout_aten(input, p, train):
    return dropout(input, p, train)


def _feature_dropout(name: str, input, p, training, batched: bool):
    """dropout1d/2d/3d: one mask entry per (N, C) channel; an unbatched input is made a
    batch of one, as F.dropout1d/3d do (F.dropout2d takes any rank as (N, C, ...))."""
    _check_p(p)
    if not training or p == 0:
        return input
    x = input if batched else prims.reshape(input, (1,) + input.tshape)
    if len(x.tshape) < 2:
        raise user_error(RuntimeError, f"{name}: Feature dropout requires at least 2 dimensions in "
                                   f"the input, got {len(input.tshape)}")
    out = _dropout(x, p, feature=True, alpha=False)
    return out if batched else prims.reshape(out, input.tshape)


@register("dropout1d", F.dropout1d, inplace_flag=True)
def dropout1d(input, p=0.5, training=True, inplace=False):
    r = len(input.tshape)
    if r not in (2, 3):
        raise user_error(RuntimeError, f"dropout1d: Expected 2D or 3D input, but received a {r}D "
                                   "input")
    return _feature_dropout("dropout1d", input, p, training, batched=r == 3)


@register("dropout2d", F.dropout2d, inplace_flag=True)
def dropout2d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout2d", input, p, training, batched=True)


@register("dropout3d", F.dropout3d, inplace_flag=True)
def dropout3d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout3d", input, p, training, batched=len(input.tshape) == 5)


@register("alpha_dropout", F.alpha_dropout, inplace_flag=True)
def alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_p(p)
    if not training or p == 0:
        return input
    return _dropout(input, p, feature=False, alpha=True)


@register("feature_alpha_dropout", F.feature_alpha_dropout, inplace_flag=True)
def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_p(p)
    if not training or p == 0:
        return input
    if len(input.tshape) < 2:
        raise user_error(RuntimeError, "Feature dropout requires at least 2 dimensions in the input")
    return _dropout(input, p, feature=True, alpha=True)


def attention_dropout(attn: TensorProxy, p: float) -> TensorProxy:
    """The dropout of scaled_dot_product_attention's probabilities (torch's math
    backend: ``torch.dropout(attn, p, train=True)``)."""
    _check_p(p)
    return _dropout(attn, p, feature=False, alpha=False)


# ----------------------------------------------------------------------- rrelu
def rrelu_training(input, lower: float, upper: float) -> TensorProxy:
    """rrelu in training mode: negative inputs times a slope drawn uniformly from
    [lower, upper) per element (torch's rrelu_with_noise)."""
    acc = _compute(input.tdtype)
    x = prims.convert_element_type(input, acc)
    slope = rng.uniform(input.tshape, acc, lower, upper) if lower < upper else full_like(x, lower)
    neg = prims.elementwise("mul", x, slope)
    out = prims.where(prims.elementwise("ge", x, full_like(x, 0)), x, neg)
    return prims.convert_element_type(out, input.tdtype)

