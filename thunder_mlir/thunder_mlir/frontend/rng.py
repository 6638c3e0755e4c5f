"""Random numbers in a compiled program: the per-call seed, one stream per random op, and
the transforms from random bits to distributions.

**Seed.** A program that draws random numbers has one extra input, a 0-d int64 seed,
appended to its arguments by the first random op traced (``Trace.rng_seed``; the function
attribute ``thunder.rng_seed`` holds its argument index). At every call the runtime draws
it from torch's default generator of the program's device (``runtime/plan.py``,
``draw_seed``), so ``torch.manual_seed(s)`` makes runs reproducible and successive calls
differ. Programs without random ops have no seed input and pay nothing for it.

**Streams.** Every random op (``prims.rng_bits``) gets a stream number k from its trace. Its
bits come from ``stablehlo.rng_bit_generator`` with algorithm THREE_FRY and state
``[seed, k << 40]``: ThreeFry-2x32 in counter mode under the key ``seed``, with counters
starting at k * 2^40 (XLA advances the counter once per 64 output bits). Random ops of one
program read disjoint counter ranges, so their values are independent, and never equal
values that CSE could merge.

**Distributions** follow jax.random (``jax/_src/random.py``): ``uniform`` puts the top
mantissa bits of a word under the exponent of 1.0, bitcasts and subtracts 1 (values
k * 2^-mantissa in [0, 1)); ``normal`` is sqrt(2) * erfinv(u) for u uniform in (-1, 1);
integers in [low, high) are 63 random bits modulo (high - low) (bias below
(high - low) / 2^63). The values are statistically right but not bit-equal to torch's
(torch draws from mt19937 on CPU and Philox on CUDA, with other transforms).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from thunder_mlir.ir import prims
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.tracing import current_trace


# The bit pattern of 1.0 (sign 0, exponent bias, mantissa 0) in each float format.
_ONE_BITS = {torch.float32: 0x3F800000, torch.float64: 0x3FF0000000000000,
             torch.float16: 0x3C00, torch.bfloat16: 0x3F80}
MANTISSA_BITS = {torch.float32: 23, torch.float64: 52, torch.float16: 10, torch.bfloat16: 7}
_SAME_WIDTH_INT = {torch.float32: torch.int32, torch.float64: torch.int64,
                   torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _full(like: TensorProxy, value) -> TensorProxy:
    return prims.full(like.tshape, value, like.tdtype)


def bits(shape: Sequence[int], dtype: torch.dtype = torch.int32) -> TensorProxy:
    """Uniformly random int32 or int64 bits of ``shape``, from a stream of their own."""
    trace = current_trace()
    return prims.rng_bits(trace.rng_seed(), trace.next_rng_stream(), shape, dtype)


def uniform(shape: Sequence[int], dtype: torch.dtype, low: float = 0.0,
            high: float = 1.0) -> TensorProxy:
    """Uniform floats of ``dtype`` (float16/bfloat16/float32/float64) in [low, high).

    jax.random.uniform's construction: the top ``nmant`` bits of a random word become the
    mantissa of a float in [1, 2), minus 1 gives k * 2^-nmant in [0, 1); then
    ``max(low, u * (high - low) + low)``. Raises TypeError for other dtypes.
    """
    if dtype not in _ONE_BITS:
        raise TypeError(f"uniform random numbers of {dtype} (floating dtypes only)")
    word = torch.int64 if dtype == torch.float64 else torch.int32
    width = 64 if word == torch.int64 else 32
    b = bits(shape, word)
    mant = prims.elementwise("shift_right_logical", b, _full(b, width - MANTISSA_BITS[dtype]))
    one = prims.elementwise("bitwise_or", mant, _full(b, _ONE_BITS[dtype]))
    # the value fits the narrower integer (at most 0x3FFF for 16-bit floats): exact
    f = prims.bitcast(prims.convert_element_type(one, _SAME_WIDTH_INT[dtype]), dtype)
    u = prims.elementwise("sub", f, _full(f, 1.0))
    if (low, high) == (0.0, 1.0):
        return u
    u = prims.elementwise("add", prims.elementwise("mul", u, _full(u, high - low)),
                          _full(u, low))
    return prims.elementwise("maximum", u, _full(u, low))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def normal(shape: Sequence[int], dtype: torch.dtype) -> TensorProxy:
    """Standard normal floats of ``dtype``: sqrt(2) * erfinv(u), u uniform in
    (-1, 1) (jax.random.normal). 16-bit floats are computed in float32 and rounded."""
    acc = _compute_dtype(dtype)
    with torch._C.DisableTorchFunction():
        lo = torch.nextafter(torch.tensor(-1.0, dtype=acc), torch.tensor(0.0, dtype=acc)).item()
    u = uniform(shape, acc, lo, 1.0)
    z = prims.elementwise("mul", prims.elementwise("erfinv", u), _full(u, math.sqrt(2.0)))
    return prims.convert_element_type(z, dtype)


def bernoulli(p: TensorProxy | float, shape: Sequence[int]) -> TensorProxy:
    """A bool tensor of ``shape``, True with probability ``p`` (a float, or a float tensor
    of ``shape``): ``u < p`` for u uniform in [0, 1) (16-bit ``p`` is compared in float32)."""
    dtype = _compute_dtype(p.tdtype) if type(p) is TensorProxy else torch.float32
    u = uniform(shape, dtype)
    p = prims.convert_element_type(p, dtype) if type(p) is TensorProxy else _full(u, p)
    return prims.elementwise("lt", u, p)


def integers(shape: Sequence[int], low: int, high: int, dtype: torch.dtype) -> TensorProxy:
    """Integers uniform in [low, high) (Python ints, ``0 < high - low <= 2^63``), of
    ``dtype``: 63 random bits modulo ``high - low``, plus ``low``. Raises ValueError for an
    empty or larger range."""
    span = high - low
    if not 0 < span <= 1 << 63:
        raise ValueError(f"random integers in [{low}, {high}): the range must hold 1 to 2^63 "
                         "values")
    b = bits(shape, torch.int64)
    r = prims.elementwise("shift_right_logical", b, _full(b, 1))  # in [0, 2^63)
    if span < 1 << 63:
        r = prims.elementwise("fmod", r, _full(r, span))
    if low != 0:
        r = prims.elementwise("add", r, _full(r, low))
    return prims.convert_element_type(r, dtype)
