"""Library compatibility while tracing.

Hugging Face ``transformers`` skips building attention masks when it can prove from the
mask's *values* that none is needed (``masking_utils._ignore_causal_mask_sdpa`` and
friends read ``padding_mask.all()``), unless ``is_tracing()`` says a tracer is running — the
escape hatch it offers torch.fx, torch.jit and dynamo. While thunder_mlir traces, that
function answers True, so the mask is always built from tensor ops: one program correct
for every mask value, instead of a data-dependent branch.

PyTorch's higher-order operators run eagerly through ``torch.compile`` (an entry point that
differs between torch releases: ``torch_internals.hop_eager_hooks``); while thunder_mlir
traces, that entry calls the operator directly instead, so ``torch.cond``/``while_loop`` reach the
tracer's symbols however the user imported them. Likewise the context generator of
non-reentrant ``torch.utils.checkpoint.checkpoint`` and the ``CheckpointFunction`` of the
reentrant one open a checkpoint scope (``higher_order.checkpoint_scope``). torch looks all
three up at call time. ``torch.autograd.Function.apply`` traces a custom Function's forward
and records its backward as the VJP rule (``custom_function.py``).

``nn.BatchNorm*d(momentum=None)`` in training keeps a cumulative average of the batch
statistics: its ``forward`` computes the factor as ``1.0 / float(num_batches_tracked)``, a
Python number from a buffer's value, which a program cannot hold. While thunder_mlir traces,
``_BatchNorm.forward`` computes that factor as a 0-d float64 tensor instead (the same
double-precision ``1 / n``) and hands it to ``F.batch_norm``, whose symbol updates the
running statistics with it; every other configuration runs torch's own ``forward``.

``nn.TransformerEncoder``/``TransformerDecoder`` read the attention mask's values to decide
whether it is causal (``transformer._detect_is_causal_mask``), a hint that only selects an
attention kernel: the mask is applied either way. While thunder_mlir traces, the hint is
what the caller passed (``is_causal=True``) or False, without reading the mask: one
program for every mask, which applies the mask itself.

``torch.clear_autocast_cache`` (called when the outermost ``torch.autocast`` region exits)
also forgets the weight casts ``autocast.py`` tracks.
"""

from __future__ import annotations

import sys

import torch

from thunder_mlir.frontend import torch_internals
from thunder_mlir.frontend.tracing import _local
from thunder_mlir.ir.symbolic import has_symint

_PATCHED: set[str] = set()


def _wrap(original):
    def is_tracing(*args, **kwargs):
        if getattr(_local, "trace", None) is not None:
            return True
        return original(*args, **kwargs)
    is_tracing.__wrapped__ = original
    return is_tracing


def _is_tracing() -> bool:
    return getattr(_local, "trace", None) is not None


def _checkpoint_generator(original):
    def _checkpoint_without_reentrant_generator(*args, **kwargs):
        if getattr(_local, "trace", None) is None:
            return (yield from original(*args, **kwargs))
        from thunder_mlir.frontend.higher_order import checkpoint_scope

        with checkpoint_scope():
            yield
    _checkpoint_without_reentrant_generator.__wrapped__ = original
    return _checkpoint_without_reentrant_generator


def _checkpoint_function(original):
    class CheckpointFunction(original):
        """Reentrant checkpoint: a checkpoint scope while tracing, else torch's own."""

        @classmethod
        def apply(cls, function, preserve_rng_state, *args):
            if getattr(_local, "trace", None) is None:
                return original.apply(function, preserve_rng_state, *args)
            from thunder_mlir.frontend.higher_order import checkpoint_scope

            with checkpoint_scope():
                out = function(*args)
            # (eager's node saves the tensor arguments, version-checked: region_reads.py)
            from thunder_mlir.frontend.differentiability import opaque_twins
            from thunder_mlir.ir.proxy import TensorProxy
            from torch.utils._pytree import tree_leaves

            ins = [a for a in args if type(a) is TensorProxy]
            outs = [o for o in tree_leaves(out) if type(o) is TensorProxy]
            opaque_twins(outs, ins, list(range(len(ins))), [])
            if any(o.requires_grad for o in outs):  # (its backward checks how it is called)
                _local.trace.reentrant_checkpoint = True
            return out
    return CheckpointFunction


def _function_apply(original):
    def apply(cls, *args, **kwargs):
        from thunder_mlir.ir.proxy import TensorProxy

        # real (or meta, replayed while tracing) tensors: torch's own apply
        if getattr(_local, "trace", None) is None or not any(
                type(a) is TensorProxy for a in (*args, *kwargs.values())):
            return original.__func__(cls, *args, **kwargs)
        from thunder_mlir.frontend.custom_function import apply as traced_apply

        return traced_apply(cls, *args, **kwargs)
    apply.__wrapped__ = original
    return classmethod(apply)


def _causal_hint(original):
    def _detect_is_causal_mask(mask, is_causal=None, size=None):
        if getattr(_local, "trace", None) is not None:
            return is_causal is True
        return original(mask, is_causal, size)
    _detect_is_causal_mask.__wrapped__ = original
    return _detect_is_causal_mask


def _batch_norm_forward(original):
    def forward(self, input):
        if (getattr(_local, "trace", None) is None or self.momentum is not None
                or not (self.training and self.track_running_stats)
                or self.num_batches_tracked is None):
            return original(self, input)
        import torch.nn.functional as F

        self._check_input_dim(input)
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.to(torch.float64)
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            True, factor, self.eps)
    forward.__wrapped__ = original
    return forward
def _clear_autocast_cache(original):
    def clear_autocast_cache():
        original()
        if getattr(_local, "trace", None) is not None:
            from thunder_mlir.frontend.autocast import clear_weight_cache

            clear_weight_cache()
    clear_autocast_cache.__wrapped__ = original
    return clear_autocast_cache


def _symbolic_sizes(original):
    """A torch factory (``torch.arange``, ``torch.ones``, ...) whose C argument parser
    rejects a symbolic size (ir/symbolic.SymInt) before any torch-function mode sees the
    call: while tracing, a call with a SymInt among its arguments goes to dispatch
    directly, as the tracing mode would send it."""
    def factory(*args, **kwargs):
        if getattr(_local, "trace", None) is not None and has_symint((args, kwargs)):
            from thunder_mlir.ir import proxy

            return proxy._dispatch[0](original, args, kwargs)
        return original(*args, **kwargs)
    factory.__wrapped__ = original
    factory.__name__ = getattr(original, "__name__", "factory")
    return factory


_SIZE_FACTORIES = ("arange", "ones", "zeros", "full", "empty", "rand", "randn", "randint")

_TORCH_HOOKS = tuple(("torch", name, _symbolic_sizes) for name in _SIZE_FACTORIES) + (
                *torch_internals.hop_eager_hooks(_is_tracing),
                ("torch", "clear_autocast_cache", _clear_autocast_cache),
                ("torch.utils.checkpoint", "_checkpoint_without_reentrant_generator",
                 _checkpoint_generator),
                ("torch.utils.checkpoint", "CheckpointFunction", _checkpoint_function),
                ("torch.autograd.function", "Function.apply", _function_apply),
                ("torch.nn.modules.transformer", "_detect_is_causal_mask", _causal_hint),
                ("torch.nn.modules.batchnorm", "_BatchNorm.forward", _batch_norm_forward))


def install() -> None:
    """Patch ``is_tracing`` in the transformers modules already imported, torch's
    higher-order-operator entry points and ``_BatchNorm.forward`` (idempotent)."""
    import importlib

    for modname, attr, wrap in _TORCH_HOOKS:
        if f"{modname}.{attr}" not in _PATCHED:
            owner = importlib.import_module(modname)
            *path, name = attr.split(".")
            for p in path:
                owner = getattr(owner, p)
            # vars(): a classmethod is patched as the descriptor, not the bound method
            setattr(owner, name, wrap(vars(owner)[name] if path else getattr(owner, name)))
            _PATCHED.add(f"{modname}.{attr}")
    for modname in ("transformers.masking_utils", "transformers.modeling_utils",
                    "transformers.utils.import_utils", "transformers.integrations.sdpa_attention"):
        mod = sys.modules.get(modname)
        if mod is None or modname in _PATCHED:
            continue
        fn = getattr(mod, "is_tracing", None)
        if fn is not None:
            mod.is_tracing = _wrap(fn)
            _PATCHED.add(modname)
