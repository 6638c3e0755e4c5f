"""``cudnn-attention``: ``flash_attention`` and ``flash_attention_backward`` composites
(passes/fused_attention.py) become the prims ``thunder.cudnn_attention`` and
``thunder.cudnn_attention_backward`` (ir/cudnn_attention.py), which lower to cuDNN's fused
attention custom calls. The GPU target runs it before ``decompose`` (pipeline.Target): the
composites are claimed whole instead of inlined, as an executor claims an op. A composite
whose operands cuDNN does not take (checked again here: a program may have been written
or transformed by hand) is left to ``decompose``.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from thunder_mlir.ir import attrs, dtypes, prims
from thunder_mlir.ir.cudnn_attention import supported
from thunder_mlir.ir.regions import nested_ops

NAME = "cudnn-attention"
_PRIMS = {"thunder.flash_attention": "cudnn_attention",
          "thunder.flash_attention_backward": "cudnn_attention_backward"}


def run(module: ir.Module, device: torch.device | None = None) -> None:
    """Replace each fused-attention composite cuDNN takes by its prim."""
    from thunder_mlir.ir.builder import Builder

    with module.context, ir.Location.unknown():
        ops = [op for f in module.body.operations for op in nested_ops(f.operation)
               if op.name == "thunder.composite"
               and ir.StringAttr(op.attributes["name"]).value in _PRIMS]
        if not ops:
            return
        builder = Builder(device or torch.device("cuda"), module=module)
        with builder.active():
            for op in ops:
                name = _PRIMS[ir.StringAttr(op.attributes["name"]).value]
                q, k, v = (ir.RankedTensorType(op.operands[i].type) for i in range(3))
                scale = attrs.get_float(op, "scale")
                causal = attrs.get_bool(op, "causal")
                if supported(list(q.shape), list(k.shape), list(v.shape),
                             dtypes.torch_dtype(q.element_type), causal) is not None:
                    continue
                operands = [builder.make_proxy(o) for o in op.operands]
                with op.location, builder.insertion_point(ir.InsertionPoint(op)):
                    results = prims.bind_many(name, operands, scale=scale, causal=int(causal))
                for old, new in zip(op.results, results):
                    old.replace_all_uses_with(new.value)
                op.erase()
