"""``ThunderModule``: an ``nn.Module`` whose forward runs a thunder_mlir program.

Parameters and buffers are *inputs* of the compiled program (through
``torch.func.functional_call``), never constants: an optimizer's in-place update is seen by
the next call without re-tracing. The training flags of all submodules are part of the
cache key, so ``eval()``/``train()`` select the matching program (e.g. dropout on or off).
"""

from __future__ import annotations

import functools

import torch

from .jit import ThunderFunction


def _functional_forward(module: torch.nn.Module, training_flags, state, args, kwargs):
    # training_flags is unused in the body: as an input it is part of the cache key.
    # functional_call writes into the dict it gets (restoring state): give it a copy.
    return torch.func.functional_call(module, dict(state), tuple(args), dict(kwargs),
                                      tie_weights=False, strict=False)


class ThunderModule(torch.nn.Module):
    """Wraps ``module``; ``forward`` has the original's signature. ``_original`` is the
    wrapped module (its parameters are this module's parameters)."""

    def __init__(self, module: torch.nn.Module, **jit_options):
        super().__init__()
        self._original = module
        self._fn = ThunderFunction(functools.partial(_functional_forward, module), **jit_options)

    def forward(self, *args, **kwargs):
        m = self._original
        state = dict(m.named_parameters(remove_duplicate=False))
        state.update(m.named_buffers(remove_duplicate=False))
        flags = tuple(sub.training for sub in m.modules())
        return self._fn(flags, state, args, kwargs)
