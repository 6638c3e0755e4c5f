"""Library compatibility while tracing.

Hugging Face ``transformers`` skips building attention masks when it can prove from the
mask's *values* that none is needed (``masking_utils._ignore_causal_mask_sdpa`` and
friends read ``padding_mask.all()``), unless ``is_tracing()`` says a tracer is running — the
escape hatch it offers torch.fx, torch.jit and dynamo. While thunder_mlir traces, that
function answers True, so the mask is always built from tensor ops: one program correct
for every mask value, instead of a data-dependent branch.
"""

from __future__ import annotations

import sys

from .tracing import _local

_PATCHED: set[str] = set()


def _wrap(original):
    def is_tracing(*args, **kwargs):
        if getattr(_local, "trace", None) is not None:
            return True
        return original(*args, **kwargs)
    is_tracing.__wrapped__ = original
    return is_tracing


def install() -> None:
    """Patch ``is_tracing`` in the transformers modules already imported (idempotent)."""
    for modname in ("transformers.masking_utils", "transformers.modeling_utils",
                    "transformers.utils.import_utils", "transformers.integrations.sdpa_attention"):
        mod = sys.modules.get(modname)
        if mod is None or modname in _PATCHED:
            continue
        fn = getattr(mod, "is_tracing", None)
        if fn is not None:
            mod.is_tracing = _wrap(fn)
            _PATCHED.add(modname)
