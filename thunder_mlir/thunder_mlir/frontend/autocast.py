"""``torch.autocast`` while tracing: each op gets the dtypes eager autocast would give it.

Eager autocast is a dispatcher key: an ATen op on autocast's lists (``autocast_lists.py``,
mirroring PyTorch's ``aten/src/ATen/autocast_mode.cpp``) casts its floating-point tensor
arguments before it runs; every other op runs unchanged, except that a composite op's
constituents meet the dispatcher again (``torch.einsum`` on CPU reaches ``bmm``, which is
on the CPU list). The tracer sees torch-level calls, so for each call made while an
autocast region is open for the program's device, ``prepare`` decides in this order:

1. the symbol reaches one ATen op directly (``SYMBOL_ATEN``): that op's policy on this
   device, if it is listed, is applied to the arguments (casts recorded as
   ``ltorch.autocast_cast`` composites, differentiable like eager's ``_to_copy``);
2. a symbol-level rule (``COMPOSITE``) for composites whose effect is known: the same
   policies, or ``torch``: run the call on the torch fallback executor;
3. anything else is *probed*: the torch function runs twice on fake tensors of the
   program's device (``FakeTensorMode``), with the device's autocast on and off, and the
   ATen ops it reaches are compared. No difference: the symbol runs unchanged. A
   difference (autocast would change what eager computes, and no rule here says how):
   the call goes to the torch fallback executor, which replays eager exactly.

Ops without a symbol already run on the torch fallback executor: it runs them under the
autocast state they were traced in (``run_pinned``; their output metadata comes from fake
tensors under that state, ``fake_metadata``), so they are exact by construction.

Inside a symbol chosen here, nested torch calls are not autocast again (ATen's
``ExcludeDispatchKeyGuard`` in each autocast wrapper); region symbols (``torch.cond``,
``while_loop``, ``scan``) are not excluded, so the user's functions inside them are.

The autocast state at call time is part of each compilation's cache key (``state_key``).
Errors: eager's own for banned ops and promote conflicts (RuntimeError); ``AutocastError``
(a NotImplementedError naming the op) where eager's behaviour cannot be reproduced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import optree
import torch

from thunder_mlir.errors import AutocastError
from thunder_mlir.frontend.autocast_lists import (
    ATEN_POLICIES, BANNED, BANNED_MESSAGE, FP32, FP32_APPEND_DTYPE, FP32_SET_OPT_DTYPE, LOWER,
    PROMOTE, TORCH)
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.frontend.symbol import Symbol

_local = threading.local()
SUPPORTED_DEVICES = ("cpu", "cuda")  # device types whose op lists autocast_lists.py holds


# ------------------------------------------------------------------------ state
def state_key() -> tuple | None:
    """The autocast state that a compiled program depends on, for the cache key: None
    when autocast is off everywhere, else ``((device_type, dtype), ...)`` for the enabled
    device types among ``SUPPORTED_DEVICES`` (None if only others are enabled: they do not
    affect cpu/cuda tensors). One C call when autocast is off (the per-call hot path)."""
    if not torch._C._is_any_autocast_enabled():
        return None
    return tuple((d, torch.get_autocast_dtype(d)) for d in SUPPORTED_DEVICES
                 if torch.is_autocast_enabled(d)) or None


def describe_state(state: tuple | None) -> str:
    """``state_key()`` in words, for cache_info and recompile reasons."""
    if not state:
        return "off"
    return ", ".join(f"{d} {str(t).removeprefix('torch.')}" for d, t in state)


def enabled(trace) -> bool:
    """Whether autocast applies to the next torch call traced into ``trace``: a region is
    open for the program's device and the call is not nested inside an op this module
    already handled."""
    if not torch._C._is_any_autocast_enabled() or getattr(_local, "excluded", 0):
        return False
    dev = trace.device.type
    if dev not in SUPPORTED_DEVICES:
        return torch.amp.is_autocast_available(dev) and torch.is_autocast_enabled(dev)
    return torch.is_autocast_enabled(dev)


def pin_state(device: torch.device) -> tuple | None:
    """The autocast state of ``device``'s type now, ``(device_type, enabled, dtype)``, for
    ``run_pinned``; None where autocast does not exist for that device type."""
    dev = device.type
    if not torch.amp.is_autocast_available(dev):
        return None
    return (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))


def run_pinned(pin: tuple | None, func: Callable, args, kwargs):
    """``func(*args, **kwargs)`` under the autocast state ``pin`` (from ``pin_state`` at
    trace time), whatever the state of the caller: a fallback op replays eager as traced,
    even where an ``autocast`` region inside the jitted function no longer runs."""
    if pin is None:
        return func(*args, **kwargs)
    dev, on, dtype = pin
    now = torch.is_autocast_enabled(dev)
    if now == on and (not on or torch.get_autocast_dtype(dev) == dtype):
        return func(*args, **kwargs)
    prev_dtype = torch.get_autocast_dtype(dev)
    torch.set_autocast_enabled(dev, on)
    torch.set_autocast_dtype(dev, dtype)
    try:
        return func(*args, **kwargs)
    finally:
        torch.set_autocast_enabled(dev, now)
        torch.set_autocast_dtype(dev, prev_dtype)


# ---------------------------------------------------------------- symbol tables
def _max_pool3d(func, b):
    return "max_pool3d_with_indices" if b.arguments.get("return_indices") else "max_pool3d"


def _pad(func, b):
    """``F.pad``: reflect/replicate modes reach ``{reflection,replication}_pad{n}d``, n =
    padded dimensions (ATen's ``at::pad``)."""
    mode, n = b.arguments.get("mode", "constant"), len(b.arguments["pad"]) // 2
    if mode == "reflect":
        return f"reflection_pad{n}d"
    if mode == "replicate":
        return f"replication_pad{n}d"
    return "constant_pad_nd" if mode == "constant" else f"_pad_{mode}"


_UPSAMPLE = {"nearest": "upsample_nearest{}d", "nearest-exact": "_upsample_nearest_exact{}d",
             "linear": "upsample_linear1d", "bilinear": "upsample_bilinear2d",
             "bicubic": "upsample_bicubic2d", "trilinear": "upsample_trilinear3d",
             "area": "adaptive_avg_pool{}d"}


def _interpolate(func, b):
    """``F.interpolate``: the ATen upsampling op its mode and rank reach (antialiased
    bilinear/bicubic have their own ``_aa`` ops)."""
    x, mode = b.arguments["input"], b.arguments.get("mode", "nearest")
    name = _UPSAMPLE.get(mode, f"interpolate_{mode}").format(x.ndim - 2)
    return name + "_aa" if b.arguments.get("antialias") and mode in ("bilinear", "bicubic") \
        else name


def _upsample_nearest(func, b):
    return f"upsample_nearest{b.arguments['input'].ndim - 2}d"


def _cross(func, b):
    return "linalg_cross" if func is torch.linalg.cross else "cross"


# ltorch symbol -> the ATen op (name.overload as in autocast_lists) its torch calls reach
# first, or a function (torch callable, bound arguments) -> that name.
SYMBOL_ATEN: dict[str, str | Callable] = {
    # matrix products and convolutions (lower precision)
    **{f"ltorch.{n}": n for n in (
        "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "addr",
        "mv", "dot", "vdot", "einsum", "tensordot", "bilinear", "prelu",
        "scaled_dot_product_attention")},
    "ltorch.rmatmul": "matmul", "ltorch.vecdot": "linalg_vecdot",
    "ltorch.multi_dot": "linalg_multi_dot",
    **{f"ltorch.conv{d}d": f"conv{d}d" for d in (1, 2, 3)},
    "ltorch.conv_transpose1d": "conv_transpose1d",
    "ltorch.conv_transpose2d": "conv_transpose2d.input",
    "ltorch.conv_transpose3d": "conv_transpose3d.input",
    # pooling, padding, upsampling
    "ltorch.avg_pool3d": "avg_pool3d", "ltorch.max_pool3d": _max_pool3d,
    "ltorch.max_pool3d_with_indices": "max_pool3d_with_indices",
    "ltorch.adaptive_avg_pool3d": "adaptive_avg_pool3d",
    "ltorch.adaptive_max_pool3d": "adaptive_max_pool3d",
    "ltorch.adaptive_max_pool3d_with_indices": "adaptive_max_pool3d",
    "ltorch.pad": _pad, "ltorch.interpolate": _interpolate,
    "ltorch.upsample_bilinear": "upsample_bilinear2d", "ltorch.upsample_nearest": _upsample_nearest,
    # reductions, norms, statistics
    **{f"ltorch.{n}": n for n in (
        "prod", "sum", "cumsum", "cumprod", "quantile", "trace", "logsumexp", "renorm",
        "dist", "pdist", "cosine_similarity", "layer_norm", "native_layer_norm",
        "group_norm", "rms_norm")},
    "ltorch.softmax": "softmax.int", "ltorch.log_softmax": "log_softmax.int",
    "ltorch.vector_norm": "linalg_vector_norm", "ltorch.matrix_norm": "linalg_matrix_norm",
    # pointwise
    **{f"ltorch.{n}": n for n in (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
        "reciprocal", "rsqrt", "sinh", "tan", "softplus", "addcdiv", "addcmul", "atan2")},
    "ltorch.pow": "pow.Tensor_Tensor", "ltorch.rpow": "pow.Scalar",
    "ltorch.square": "pow.Tensor_Scalar",  # at::square is pow(self, 2)
    "ltorch.rdiv": "reciprocal",  # Tensor.__rtruediv__ is self.reciprocal() * other
    # linear algebra
    **{f"ltorch.{n}": n for n in (
        "cholesky", "cholesky_inverse", "cholesky_solve", "triangular_solve")},
    "ltorch.linalg_cholesky": "linalg_cholesky", "ltorch.cholesky_ex": "linalg_cholesky_ex",
    # losses
    **{f"ltorch.{n}": n for n in (
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
        "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "poisson_nll_loss",
        "smooth_l1_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
        "triplet_margin_loss", "multi_margin_loss", "kl_div", "multilabel_margin_loss")},
    "ltorch.cross_entropy": "cross_entropy_loss",
    # data movement
    "ltorch.cat": "cat", "ltorch.stack": "stack", "ltorch.index_copy": "index_copy",
    "ltorch.index_put": "index_put", "ltorch.scatter_add": "scatter_add", "ltorch.cross": _cross,
}

# Symbol-level rules for composites (what the ATen op a symbol reaches decomposes into,
# where it is not itself listed); each is checked against eager (CPU) or fake tensors under
# CUDA autocast (tests/test_autocast.py).
COMPOSITE: dict[str, dict[str, str]] = {
    "cpu": {
        # ATen's CPU _trilinear kernel calls bmm through the dispatcher: eager computes the
        # product in the autocast dtype and returns float32, which only eager reproduces
        "ltorch.bilinear": TORCH,
        # a chain of mms (vectors reshaped to matrices first)
        "ltorch.multi_dot": LOWER,
        # cat of reshaped inputs
        **{f"ltorch.{n}": PROMOTE for n in ("hstack", "vstack", "dstack", "column_stack")},
    },
    "cuda": {
        # log_softmax (fp32_set_opt_dtype) then nll_loss (fp32)
        "ltorch.cross_entropy": FP32,
        # softmax(-x) / linalg norms, all with an optional dtype
        **{f"ltorch.{n}": FP32_SET_OPT_DTYPE for n in ("softmin", "norm", "linalg_norm")},
    },
}

# Symbols that never reach an autocast-listed op (data movement, views, elementwise ATen
# kernels that are not composites): no probe needed.
NEUTRAL = frozenset(f"ltorch.{n}" for n in (
    "reshape", "flatten", "permute", "transpose", "unsqueeze", "squeeze", "expand",
    "expand_as", "contiguous", "clone", "detach", "data", "to", "getitem", "type_as", "float",
    "half", "bfloat16", "double", "int", "long", "bool", "add", "sub", "mul", "div", "neg",
    "abs", "where", "masked_fill", "relu", "gelu", "silu", "sigmoid", "tanh", "mean",
    "maximum", "minimum", "clamp", "eq", "ne", "lt", "le", "gt", "ge", "embedding",
    "dropout", "split", "chunk", "narrow", "select", "unbind", "movedim", "t", "mT",
    "view_as", "broadcast_to", "repeat", "flip", "roll", "tril", "triu", "sqrt", "sin",
    "cos", "erf", "amax", "amin", "max", "min", "argmax", "argmin", "logical_not",
    "logical_and", "logical_or", "zeros_like", "ones_like", "full_like", "empty_like",
    "rand_like", "randn_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "unflatten", "set_grad_enabled", "is_floating_point", "numel"))
REGION_SYMBOLS = frozenset({"ltorch.cond", "ltorch.while_loop", "ltorch.scan"})


# ------------------------------------------------------------------ the policies
def _eligible(x) -> bool:
    """ATen's ``is_eligible``: a floating-point tensor other than float64 (on the autocast
    device: every tensor of a program is on its device)."""
    return type(x) is TensorProxy and x.tdtype.is_floating_point and x.tdtype != torch.float64


def _cast_impl(x, dtype):
    from thunder_mlir.ir import prims

    return prims.convert_element_type(x, dtype)


# A composite of its own, so that traces show where autocast cast (``last_traces``).
AUTOCAST_CAST = Symbol("ltorch.autocast_cast", _cast_impl)


def cast(x: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    """``x`` converted to ``dtype`` as autocast's ``cached_cast`` does (a differentiable
    cast: the gradient comes back in ``x``'s dtype); ``x`` itself if it has that dtype."""
    if x.tdtype == dtype:
        return x
    y = AUTOCAST_CAST(x, dtype)
    return TensorProxy(y.value, y.tshape, y.tdtype, y.tdevice, x.requires_grad)


def _cast_all(args, kwargs, dtype, trace=None, name: str = ""):
    def f(x):
        if not _eligible(x):
            return x
        if trace is not None:
            _check_weight_cache(trace, x, dtype, name)
        return cast(x, dtype)
    return (optree.tree_map(f, args, none_is_leaf=True),
            optree.tree_map(f, kwargs, none_is_leaf=True))


def _check_weight_cache(trace, x: TensorProxy, dtype: torch.dtype, name: str) -> None:
    """Eager autocast caches the cast of a float32 leaf that requires grad (a parameter) to
    the autocast dtype until the outermost region exits (``cached_cast``), and the cache is
    not keyed by dtype: a nested region with another autocast dtype gets the first cast
    back. Program inputs that require grad are taken as leaves; where that cache would hand
    an op a dtype other than the region's, raise instead of guessing what eager does."""
    if x.tdtype != torch.float32 or not x.requires_grad or \
            not torch.is_autocast_cache_enabled() or not any(x is p for p in trace.inputs):
        return
    cache = trace.__dict__.setdefault("autocast_weight_cache", {})
    first = cache.setdefault(id(x), (x, dtype))[1]
    if first != dtype:
        raise AutocastError(
            f"{_where()}\n  {name} inside a torch.autocast region with dtype {dtype} gets an "
            f"input that requires grad and was already cast to {first} in an enclosing "
            "autocast region: eager autocast's weight cache (autocast_mode.cpp, cached_cast) "
            f"would hand the op that {first} copy. Use one autocast dtype per outermost "
            "region, or torch.autocast(..., cache_enabled=False).")


def clear_weight_cache() -> None:
    """Forget the casts ``_check_weight_cache`` recorded for the trace being built (called
    when eager clears its cache: the outermost autocast region exits)."""
    from thunder_mlir.frontend.tracing import _local as tracing_state

    trace = getattr(tracing_state, "trace", None)
    if trace is not None:
        trace.__dict__.pop("autocast_weight_cache", None)


def _where() -> str:
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    return describe_frame(user_frame())


def _promote_type(args, kwargs, lower: torch.dtype) -> torch.dtype:
    """ATen's ``promote_type``/``prioritize`` (autocast_mode.h): float32 if any eligible
    tensor is float32, else ``lower``; float64 tensors are ignored; another 16-bit dtype is
    eager's error."""
    current = lower
    for x in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        if not _eligible(x):
            continue
        if current == torch.float32 or x.tdtype == torch.float32:
            current = torch.float32
        elif x.tdtype != lower:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _first_tensor(sym: Symbol, args, kwargs):
    b = sym.signature.bind(*args, **kwargs)
    first = next(iter(b.arguments.values()), None)
    return b, first


def _apply_policy(trace, policy: str, sym: Symbol, name: str, device: str, args, kwargs):
    lower = torch.get_autocast_dtype(device)
    if policy == LOWER:
        return _cast_all(args, kwargs, lower, trace, name)
    if policy == FP32:
        return _cast_all(args, kwargs, torch.float32)
    if policy == PROMOTE:
        to = _promote_type(args, kwargs, lower)
        return _cast_all(args, kwargs, to, trace if to == lower else None, name)
    if policy in (FP32_SET_OPT_DTYPE, FP32_APPEND_DTYPE):
        # the op with dtype=float32 casts its input to float32 first; an explicit dtype wins
        b, first = _first_tensor(sym, args, kwargs)
        if not _eligible(first) or b.arguments.get("dtype") is not None:
            return args, kwargs
        pname = next(iter(b.arguments))
        b.arguments[pname] = cast(first, torch.float32)
        return b.args, b.kwargs
    if policy == BANNED:
        raise RuntimeError(BANNED_MESSAGE)
    raise AssertionError(f"unknown autocast policy {policy!r} for {name}")


class _Excluding(Symbol):
    """``inner`` with autocast excluded for the torch calls its decomposition makes (as
    ATen's autocast wrappers exclude the autocast keys while the op runs)."""

    def __init__(self, inner: Symbol):
        self.inner, self.name, self.impl = inner, inner.name, inner.impl
        self.signature = inner.signature

    def __call__(self, *args, **kwargs):
        _local.excluded = getattr(_local, "excluded", 0) + 1
        try:
            return self.inner(*args, **kwargs)
        finally:
            _local.excluded -= 1


_EXCLUDING: dict[int, _Excluding] = {}


def _excluding(sym: Symbol) -> Symbol:
    if sym.name in REGION_SYMBOLS:
        return sym
    w = _EXCLUDING.get(id(sym))
    if w is None or w.inner is not sym:
        w = _EXCLUDING[id(sym)] = _Excluding(sym)
    return w


def policy_for(sym: Symbol, func: Callable, args, kwargs, device: str) -> tuple[str | None, str]:
    """(policy, ATen op name or symbol name) of ``sym`` called as ``func(*args,
    **kwargs)`` under ``device``'s autocast: a policy of autocast_lists (``lower``,
    ``fp32``, ...), ``torch`` (run on the fallback executor), ``None`` (no rule: probe)."""
    target = SYMBOL_ATEN.get(sym.name)
    if callable(target):
        try:
            target = target(func, sym.signature.bind(*args, **kwargs))
        except TypeError:
            target = None  # the symbol reports the bad call itself
    if target is not None:
        policy = ATEN_POLICIES[device].get(target)
        if policy is not None:
            return policy, target
    rule = COMPOSITE[device].get(sym.name)
    if rule is not None:
        return rule, sym.name
    return None, target or sym.name


def prepare(trace, func: Callable, sym: Symbol | None, args: tuple, kwargs: dict):
    """Apply autocast to one torch call while an autocast region is open (``enabled``).

    Returns ``(sym, args, kwargs)`` for ``dispatch.dispatch`` to go on with: the arguments
    cast as eager autocast casts them and the symbol wrapped so that its decomposition is
    not autocast again, or ``sym = None`` to run the call on the torch fallback executor
    (which replays eager under the traced autocast state). Raises RuntimeError where eager
    raises (banned ops, promote conflicts) and AutocastError for an unsupported device type.
    """
    device = trace.device.type
    if device not in SUPPORTED_DEVICES:
        raise AutocastError(
            f"torch.autocast is enabled for device type '{device}', the device of this "
            "program: thunder_mlir reproduces autocast's op lists for cpu and cuda only. "
            "Disable autocast for this device around the jitted call.")
    if sym is None or sym.name in REGION_SYMBOLS:
        return sym, args, kwargs  # the fallback executor replays eager; regions recurse
    policy, target = policy_for(sym, func, args, kwargs, device)
    if policy == TORCH:
        return None, args, kwargs
    if policy is not None:
        args, kwargs = _apply_policy(trace, policy, sym, target, device, args, kwargs)
        return _excluding(sym), args, kwargs
    if sym.name in NEUTRAL or _is_view(sym) or not _has_tensor(args, kwargs):
        return _excluding(sym), args, kwargs
    from thunder_mlir.frontend.autocast_probe import affected

    verdict = affected(func, args, kwargs, trace.device)
    if verdict is False:
        return _excluding(sym), args, kwargs
    return None, args, kwargs  # affected (or unknown): eager's meaning via the fallback


def _is_view(sym: Symbol) -> bool:
    from thunder_mlir.frontend.symbols.registry import _InlineView, _ViewSymbol

    return isinstance(sym, (_ViewSymbol, _InlineView))


def _has_tensor(args, kwargs) -> bool:
    return any(type(x) is TensorProxy
               for x in optree.tree_leaves((args, kwargs), none_is_leaf=True))


def device_exists(device: torch.device) -> bool:
    """Whether kernels can run on ``device`` in this process (False for a CUDA program
    traced on a machine without a GPU, as the fake-tensor tests do)."""
    from thunder_mlir.frontend.autocast_probe import _device_exists

    return _device_exists(device)


def fake_metadata(func: Callable, args, kwargs, device: torch.device) -> Any:
    """Output metadata (meta tensors) of a torch fallback op under the current autocast
    state: ``func`` run on fake tensors of ``device`` (meta tensors would skip autocast,
    which only casts tensors of its device). Raises what the op raises."""
    from thunder_mlir.frontend.autocast_probe import run_fake

    return run_fake(func, args, kwargs, device)
