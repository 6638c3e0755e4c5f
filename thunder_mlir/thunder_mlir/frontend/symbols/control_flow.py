"""Symbols of torch's higher-order operators (``torch.ops.higher_order.*``).

They run inline (no composite): :mod:`thunder_mlir.frontend.higher_order` emits the region ops.
"""

from __future__ import annotations

import torch

from thunder_mlir.frontend import higher_order
from thunder_mlir.frontend.symbols.registry import register


@register("cond", torch.ops.higher_order.cond, composite=False)
def cond(pred, true_fn, false_fn, operands=()):
    """``torch.ops.higher_order.cond`` (what ``torch.cond`` calls): see higher_order.cond."""
    return higher_order.cond(pred, true_fn, false_fn, operands)


@register("while_loop", torch.ops.higher_order.while_loop, composite=False)
def while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=()):
    """``torch.ops.higher_order.while_loop``: see higher_order.while_loop."""
    return higher_order.while_loop(cond_fn, body_fn, carried_inputs, additional_inputs)


@register("scan", torch.ops.higher_order.scan, composite=False)
def scan(combine_fn, init, xs, additional_inputs=()):
    """``torch.ops.higher_order.scan`` (what ``torch._higher_order_ops.scan`` calls): see
    higher_order.scan."""
    return higher_order.scan(combine_fn, init, xs, additional_inputs)
