"""Lowerings of the prims that index with run-time values (``dynamic_index``,
``dynamic_update_index``, used by ``scan``): StableHLO spec "dynamic_slice" and
"dynamic_update_slice", whose start indices are clamped into range."""

from __future__ import annotations

from torch_mlir import ir

from thunder_mlir.transforms.lowerings import hlo, splat


def _starts(index: ir.Value, rank: int, loc) -> list[ir.Value]:
    zero = splat(index.type, 0, loc)
    return [index] + [zero] * (rank - 1)


def lower_dynamic_index(op, operands, rw):
    x, index = operands
    xt = ir.RankedTensorType(x.type)
    loc = op.location
    with rw.ip:
        sizes = [1] + list(xt.shape[1:])
        one = ir.RankedTensorType.get(sizes, xt.element_type)
        sliced = hlo("stablehlo.dynamic_slice", [x] + _starts(index, xt.rank, loc), [one],
                     {"slice_sizes": ir.DenseI64ArrayAttr.get(sizes)}, loc).result
        out = hlo("stablehlo.reshape", [sliced], [op.result.type], loc=loc)
    rw.replace_op(op, out)


def lower_dynamic_update_index(op, operands, rw):
    x, update, index = operands
    xt = ir.RankedTensorType(x.type)
    loc = op.location
    with rw.ip:
        one = ir.RankedTensorType.get([1] + list(xt.shape[1:]), xt.element_type)
        upd = hlo("stablehlo.reshape", [update], [one], loc=loc).result
        out = hlo("stablehlo.dynamic_update_slice", [x, upd] + _starts(index, xt.rank, loc),
                  [x.type], loc=loc)
    rw.replace_op(op, out)


DYNAMIC_LOWERINGS = {"dynamic_index": lower_dynamic_index,
                     "dynamic_update_index": lower_dynamic_update_index}
