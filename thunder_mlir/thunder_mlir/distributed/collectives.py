"""The collectives XLA's SPMD partitioner inserted, read from the compiled (partitioned,
optimized) HLO text of an executable (``exe.hlo_modules()[0].to_string()``).

HLO instruction syntax (XLA ``HloInstruction::ToString``)::

    %all-reduce.3 = f32[64,32]{1,0} all-reduce(f32[64,32]{1,0} %dot.1), channel_id=2,
        replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add

Bytes are per device and per execution, counted as the size of the full (unsharded over the
group) buffer the collective works on, the convention of bandwidth models such as
NCCL-tests' "size": an all-reduce's result, an all-gather's result (the gathered tensor),
a reduce-scatter's operand (the tensor before it is scattered), an all-to-all's and a
collective-permute's result. Asynchronous pairs (``*-start``/``*-done``) count once, at
the start, by its operands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# element sizes of HLO primitive types (xla/xla_data.proto PrimitiveType)
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b(pred|[suf]\d+|bf16|c64|c128)\[([0-9,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|\S+)\s+"
                    r"(?P<op>" + "|".join(KINDS) + r")(?P<start>-start)?\((?P<args>[^)]*)\)"
                    r"(?P<rest>.*)$")


@dataclass(frozen=True)
class Collective:
    """One collective instruction: ``kind`` (one of ``KINDS``), ``name`` (the HLO
    instruction's), ``shape`` (its result shape text), ``bytes`` (see the module
    docstring) and ``groups`` (its ``replica_groups`` text)."""

    kind: str
    name: str
    shape: str
    bytes: int
    groups: str

    def __str__(self) -> str:
        return f"{self.kind} {self.shape} ({self.bytes} B) groups={self.groups} [{self.name}]"


def array_bytes(shape_text: str) -> int:
    """The bytes of every array in an HLO shape text (a tuple counts all its elements)."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape_text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES.get(dtype, 4)
    return total


def collectives_of(hlo_text: str) -> list[Collective]:
    """Every collective in ``hlo_text`` (one HLO module), in text order."""
    out = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if m is None:
            continue
        kind = m.group("op")
        by_operand = kind == "reduce-scatter" or m.group("start")
        size = array_bytes(m.group("args") if by_operand else m.group("shape"))
        g = re.search(r"replica_groups=(\{[^=]*?\}\}|\{\}|\[[^ ,]*\]<=\[[^\]]*\][^,]*)",
                      m.group("rest"))
        out.append(Collective(kind, m.group("name"), m.group("shape"), size,
                              g.group(1) if g else "?"))
    return out


def bytes_by_kind(colls: list[Collective]) -> dict[str, int]:
    """{kind: total bytes} over ``colls`` (kinds with none left out)."""
    out: dict[str, int] = {}
    for c in colls:
        out[c.kind] = out.get(c.kind, 0) + c.bytes
    return out
