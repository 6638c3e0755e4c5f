"""Kernels, HBM bytes, matmul FLOPs and roofline time of a GPU program, read from the
optimized HLO text XLA gives after compiling it (``compiled.as_text()``).

XLA's compile-only GPU client has no cost analysis ("GetCostAnalysis is not supported",
toolchain.md section 11), so the figures are counted from the text, per kernel: every
instruction of the entry computation that launches work (a fusion, a library call such as
a cuBLAS gemm or cuDNN attention, a copy; not parameters, constants, tuples,
get-tuple-element or bitcasts), and the instructions of the computations it calls where
it is a ``call`` or a command buffer (``while`` bodies are counted once and flagged).

* **Bytes** of a kernel: its operands plus its results (what it reads from and writes to
  HBM), with two refinements that follow what a kernel really touches: a fusion's operand
  counts the fraction of its elements the fused computation uses, by XLA's own operand
  utilization model (``_utilizations``: a slice, also one behind elementwise ops, a
  reduction or a broadcast, reads its part), and a fusion whose root is an in-place
  ``dynamic-update-slice`` of one of its operands counts the update, not the whole
  buffer, on both sides.
* **FLOPs**: matmuls only: 2 M N K per ``dot`` (batch included) inside a kernel, the same
  for a cuBLAS gemm custom call, and for cuDNN's fused attention 4 B H L S D forward and
  10 B H L S D backward (two and five matmuls: FlashAttention-2, Dao 2023, section 3), half
  of that with a causal mask.
* **Roofline** of a kernel: max(FLOPs / peak FLOP/s, bytes / HBM bandwidth), the peak
  of the dots' operand dtype (a float32 dot at precision HIGHEST does not run on the
  16-bit tensor cores); a program's is the sum over its kernels (kernels run one after
  another on one stream).

Pure Python on purpose: it runs in the deviceless XLA venv (``make gpu-aot``) and in the
test suite (tests/test_hlo_stats.py) alike.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

# bytes per element of HLO's element types
_ELEMENT_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3b11fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1, "s4": 0.5, "u4": 0.5,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8,
    "u64": 8, "f64": 8, "c64": 8, "c128": 16, "token": 0,
}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,<=]*)\]")
_NO_WORK = frozenset(("parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                      "after-all", "partition-id", "replica-id", "opt-barrier",
                      "add-dependency", "domain"))
# ops whose first operand is read only where the result is: the fraction of its elements
_SLICING = frozenset(("slice", "dynamic-slice", "gather"))


@dataclass
class Instruction:
    """One HLO instruction: ``name``, result ``type`` text, ``opcode``, ``operands``
    (names), ``attrs`` (the text after the operand list)."""

    name: str
    type: str
    opcode: str
    operands: list[str]
    attrs: str
    root: bool = False
    param_number: int | None = None  # a ``parameter``'s number


@dataclass
class Kernel:
    """One launched kernel: ``name``, ``kind`` (see ``kernel_kind``), ``bytes`` (HBM read +
    written), ``flops`` (matmul FLOPs), ``source`` ("file:line" of the user's code, or
    "") and ``op_name`` (the framework op, from the HLO metadata), ``seconds`` (roofline)."""

    name: str
    kind: str
    bytes: float
    flops: float
    source: str = ""
    op_name: str = ""
    seconds: float = 0.0


@dataclass
class ProgramStats:
    """The kernels of one compiled program and XLA's buffer assignment
    (``memory``: temp/argument/output/alias bytes from ``memory_analysis()``)."""

    kernels: list[Kernel]
    memory: dict = field(default_factory=dict)
    loops: int = 0  # while loops found (their bodies are counted once)

    @property
    def bytes(self) -> float:
        return sum(k.bytes for k in self.kernels)

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def kinds(self) -> Counter:
        return Counter(k.kind for k in self.kernels)


def array_bytes(type_text: str) -> float:
    """Bytes of every array in an HLO type text (``bf16[2,3]{1,0}``, a tuple of them)."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(type_text):
        n = 1
        for d in dims.split(","):
            d = d.replace("<=", "")
            if d:
                n *= int(d)
        total += n * _ELEMENT_BYTES.get(dtype, 4)
    return total


def array_dims(type_text: str) -> list[int]:
    """The dimensions of the first array in an HLO type text."""
    m = _ARRAY.search(type_text)
    if m is None:
        return []
    return [int(d.replace("<=", "")) for d in m.group(2).split(",") if d]


def _balanced(text: str, start: int) -> int:
    """The index just past the bracket closing the one at ``text[start]``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    i = start
    in_string = False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return len(text)


_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")


def parse_instruction(line: str) -> Instruction | None:
    """An instruction line of HLO text, or None for other lines."""
    m = _INSTR.match(line)
    if m is None:
        return None
    i = m.end()
    if line[i:i + 1] == "(":
        j = _balanced(line, i)
        type_text = line[i:j]
    else:
        j = line.find(" ", i)
        if j < 0:
            return None
        type_text = line[i:j]
    rest = line[j:].lstrip()
    k = rest.find("(")
    if k < 0:
        return None
    opcode = rest[:k].strip()
    end = _balanced(rest, k)
    operand_text = rest[k + 1:end - 1]
    operands = re.findall(r"%([\w.\-]+)", operand_text)
    number = int(operand_text) if opcode == "parameter" and operand_text.strip().isdigit() \
        else None
    return Instruction(m.group(2), type_text, opcode, operands, rest[end:], bool(m.group(1)),
                       number)


def parse_module(text: str) -> tuple[dict[str, list[Instruction]], str | None, dict]:
    """(computations by name, the entry computation's name, stack-frame source table
    {frame id: "file:line"}) of an HLO module's text."""
    comps: dict[str, list[Instruction]] = {}
    entry = None
    current = None
    section = None
    files, locations, frames = {}, {}, {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = stripped
            continue
        if section is not None and stripped and stripped[0].isdigit():
            key, _, value = stripped.partition(" ")
            if section == "FileNames":
                files[int(key)] = value.strip().strip('"')
            elif section == "FileLocations":
                fid = re.search(r"file_name_id=(\d+)", value)
                ln = re.search(r"\bline=(\d+)", value)
                if fid and ln:
                    locations[int(key)] = (int(fid.group(1)), int(ln.group(1)))
            elif section == "StackFrames":
                loc = re.search(r"file_location_id=(\d+)", value)
                if loc:
                    frames[int(key)] = int(loc.group(1))
            continue
        if not stripped:
            section = None if section is not None else section
            continue
        header = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$", stripped)
        if header and not _INSTR.match(stripped):
            current = header.group(2)
            comps[current] = []
            if header.group(1):
                entry = current
            section = None
            continue
        if stripped == "}":
            current = None
            continue
        if current is not None:
            ins = parse_instruction(line)
            if ins is not None:
                comps[current].append(ins)
    sources = {}
    for fid, loc in frames.items():
        if loc in locations:
            f, ln = locations[loc]
            sources[fid] = f"{files.get(f, '?')}:{ln}"
    return comps, entry, sources


def _called(ins: Instruction, key: str) -> list[str]:
    m = re.search(key + r"=\{?([%\w.\-, ]+)\}?", ins.attrs)
    if m is None:
        return []
    return [c.strip().lstrip("%") for c in m.group(1).split(",") if c.strip()]


def _backend_config(ins: Instruction) -> dict:
    i = ins.attrs.find("backend_config=")
    if i < 0:
        return {}
    j = i + len("backend_config=")
    if ins.attrs[j:j + 1] == "{":
        end = _balanced(ins.attrs, j)
        try:
            return json.loads(ins.attrs[j:end])
        except ValueError:
            return {}
    if ins.attrs[j:j + 1] == '"':  # an escaped JSON string
        m = re.match(r'"((?:[^"\\]|\\.)*)"', ins.attrs[j:])
        if m:
            try:
                return json.loads(json.loads(f'"{m.group(1)}"'))
            except ValueError:
                return {}
    return {}


def kernel_kind(ins: Instruction) -> str:
    """The kernel's kind: ``gemm (triton)``, ``gemm (cublas)``, ``attention (cudnn)``,
    ``fusion (kLoop)`` / ``(kInput)`` / ``(kOutput)`` / ``(<custom kind>)``, or the opcode
    (``copy``, ``custom-call <target>``, ...)."""
    if ins.opcode == "fusion":
        kind = re.search(r"kind=(k\w+)", ins.attrs)
        kind = kind.group(1) if kind else "?"
        if kind == "kCustom":
            custom = _backend_config(ins).get("fusion_backend_config", {}).get("kind", "")
            if "gemm" in custom:
                return "gemm (triton)"
            if "cudnn" in custom:
                return "cudnn fusion"
            return f"fusion ({custom or 'custom'})"
        return f"fusion ({kind})"
    if ins.opcode == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', ins.attrs)
        target = target.group(1) if target else "?"
        if "fmha" in target:
            return "attention (cudnn)"
        if "gemm" in target or "matmul" in target:
            return "gemm (cublas)"
        return f"custom-call {target}"
    return ins.opcode


def _operand_dtype(ins: Instruction, shapes: dict[str, str]) -> str:
    m = _ARRAY.search(shapes.get(ins.operands[0], "")) if ins.operands else None
    return m.group(1) if m else "bf16"


def _dot_flops(ins: Instruction, shapes: dict[str, str]) -> float:
    if ins.opcode not in ("dot", "convolution") or not ins.operands:
        return 0.0
    out = 1
    for d in array_dims(ins.type):
        out *= d
    lhs = array_dims(shapes.get(ins.operands[0], ""))
    if ins.opcode == "dot":
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
        k = 1
        for d in (m.group(1).split(",") if m and m.group(1) else []):
            k *= lhs[int(d)]
        return 2.0 * out * k
    rhs = array_dims(shapes.get(ins.operands[1], "")) if len(ins.operands) > 1 else []
    if not rhs:
        return 0.0
    # convolution: each output element takes (kernel elements / output features) MACs
    kernel = 1
    for d in rhs:
        kernel *= d
    feats = max(array_dims(ins.type)[-1] if array_dims(ins.type) else 1, 1)
    return 2.0 * out * kernel / feats


def _gemm_call_flops(ins: Instruction, shapes: dict[str, str]) -> float:
    cfg = _backend_config(ins)
    gemm = cfg.get("gemm_backend_config", cfg)
    dims = gemm.get("dot_dimension_numbers", {})
    lhs = array_dims(shapes.get(ins.operands[0], "")) if ins.operands else []
    out_type = ins.type[1:] if ins.type.startswith("(") else ins.type
    out = 1
    for d in array_dims(out_type):
        out *= d
    k = 1
    for d in dims.get("lhs_contracting_dimensions", []):
        k *= lhs[int(d)] if int(d) < len(lhs) else 1
    return 2.0 * out * k


def _attention_flops(ins: Instruction, shapes: dict[str, str]) -> float:
    cfg = _backend_config(ins).get("cudnn_fmha_backend_config", {})
    inter = [int(d) for d in cfg.get("intermediate_tensor_shape", {}).get("dimensions", [])]
    q = array_dims(shapes.get(ins.operands[0], "")) if ins.operands else []
    bmm1 = cfg.get("bmm1_dot_dimension_numbers", {})
    contracting = [int(d) for d in bmm1.get("lhs_contracting_dimensions", [])]
    if len(inter) != 4 or not q or not contracting:
        return 0.0
    head = 1
    for d in contracting:
        head *= q[d]
    b, h, lq, lk = inter
    target = re.search(r'custom_call_target="([^"]+)"', ins.attrs)
    backward = target is not None and "Backward" in target.group(1)
    flops = (10.0 if backward else 4.0) * b * h * lq * lk * head
    if cfg.get("mask_type", "") == "CAUSAL":
        flops /= 2
    return flops


def _operand_bytes(ins: Instruction, shapes: dict[str, str], comps: dict) -> float:
    """Bytes a kernel reads: each operand's, times the fraction of its elements the fused
    computation uses (``_utilizations``, at most 1: an element read twice is served by the
    cache), or nothing for the buffer an in-place dynamic-update-slice root writes into."""
    called = _called(ins, "calls")
    body = comps.get(called[0], []) if ins.opcode == "fusion" and called else []
    params = {b.param_number: b.name for b in body if b.opcode == "parameter"}
    in_place = _in_place_buffers(body)
    used = _utilizations(body) if body else {}
    total = 0.0
    for k, o in enumerate(ins.operands):
        full = array_bytes(shapes.get(o, ""))
        pname = params.get(k)
        if pname is None:
            total += full
        elif pname not in in_place:  # (the written slice is counted with the results)
            total += full * min(1.0, used.get(pname, 1.0))
    return total


# ops that compute each result element from the operands' elements at the same index
# (HloInstruction::IsElementwise): in a fusion they are computed only for the elements
# their users read
_ELEMENTWISE = frozenset((
    "abs", "add", "and", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "clz",
    "compare", "complex", "convert", "copy", "cosine", "divide", "erf", "exponential",
    "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one",
    "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power",
    "real", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even",
    "rsqrt", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "sine", "sqrt", "stochastic-convert", "subtract", "tan", "tanh", "xor"))


def _utilizations(body: list[Instruction]) -> dict[str, float]:
    """{name: fraction of its elements computed or read} for the instructions of a fused
    computation, the root's taken whole: XLA's own model of what a fused kernel touches
    (``GpuHloCostAnalysis::FusionCalculateUtilizations``, xla/service/gpu/model/
    gpu_hlo_cost_analysis.cc). Walking from the root to the parameters, an elementwise op
    passes its users' utilization to its operands (shared, not added, where two
    elementwise paths meet); any other op starts a new sum: its utilization times the
    fraction of the operand it reads (``slice``, ``dynamic-slice``, ``gather``: result
    elements / operand elements; everything else, ``reduce``, ``broadcast``, ``dot``...:
    all of it). So a slice of a converted sum of split-K partials reads that slice of the
    partials. The fraction is rounded up to whole elements, as XLA does. Unlike XLA's
    (which counts repeated accesses, for code size), it is capped at 1 at every
    instruction: the fraction of distinct elements, since an element used twice is read
    from HBM once (a slice of a value used twice reads the slice's part once)."""
    by_name = {b.name: b for b in body}
    root = next((b for b in body if b.root), body[-1] if body else None)
    if root is None:
        return {}
    roots_of: dict[str, set[str]] = {root.name: {root.name}}
    root_use: dict[str, float] = {root.name: 1.0}
    used: dict[str, float] = {}
    for ins in reversed(body):
        u = min(1.0, sum(root_use.get(r, 0.0) for r in roots_of.get(ins.name, ())))
        used[ins.name] = u
        passes = ins.opcode in _ELEMENTWISE or ins.opcode in ("tuple", "get-tuple-element")
        for k, o in enumerate(ins.operands):
            operand = by_name.get(o)
            if operand is None:
                continue
            if passes:
                roots_of.setdefault(o, set()).update(roots_of.get(ins.name, ()))
                continue
            n = max(1, math.prod(array_dims(operand.type)))
            frac = 1.0
            if ins.opcode in _SLICING and k == 0:
                frac = math.prod(array_dims(ins.type)) / n
            roots_of.setdefault(o, set()).add(o)
            root_use[o] = root_use.get(o, 0.0) + math.ceil(u * frac * n) / n
    return used


def _in_place_buffers(body: list[Instruction]) -> dict[str, float]:
    """{parameter name: update bytes} for the fused computation's root values that are a
    ``dynamic-update-slice`` of a parameter (XLA updates such a buffer in place)."""
    by_name = {b.name: b for b in body}
    root = next((b for b in body if b.root), None)
    if root is None:
        return {}
    roots = [by_name.get(o) for o in root.operands] if root.opcode == "tuple" else [root]
    out = {}
    for r in roots:
        if r is not None and r.opcode == "dynamic-update-slice" and len(r.operands) > 1:
            base = by_name.get(r.operands[0])
            if base is not None and base.opcode == "parameter":
                out[base.name] = array_bytes(by_name[r.operands[1]].type) \
                    if r.operands[1] in by_name else 0.0
    return out


def _result_bytes(ins: Instruction, comps: dict) -> float:
    called = _called(ins, "calls")
    body = comps.get(called[0], []) if ins.opcode == "fusion" and called else []
    in_place = _in_place_buffers(body)
    if not in_place:
        return array_bytes(ins.type)
    # the in-place results write their updates only
    by_name = {b.name: b for b in body}
    root = next(b for b in body if b.root)
    roots = [by_name.get(o) for o in root.operands] if root.opcode == "tuple" else [root]
    total = 0.0
    for r in roots:
        if r is None:
            continue
        if r.opcode == "dynamic-update-slice" and r.operands[0] in in_place:
            total += in_place[r.operands[0]]
        else:
            total += array_bytes(r.type)
    return total


def _flops_within(names: list[str], comps: dict, seen: set, by_dtype: dict) -> float:
    """The matmul FLOPs of the computations ``names`` (nested calls included), also added
    to ``by_dtype`` by the element type of each dot's left operand."""
    total = 0.0
    for c in names:
        if c in seen or c not in comps:
            continue
        seen.add(c)
        shapes = {i.name: i.type for i in comps[c]}
        for i in comps[c]:
            f = _dot_flops(i, shapes)
            if f:
                dt = _operand_dtype(i, shapes)
                by_dtype[dt] = by_dtype.get(dt, 0.0) + f
            total += f
            total += _flops_within(_called(i, "calls") + _called(i, "to_apply"), comps, seen,
                                   by_dtype)
    return total


def _source(ins: Instruction, sources: dict) -> tuple[str, str]:
    op = re.search(r'op_name="([^"]*)"', ins.attrs)
    f = re.search(r'source_file="([^"]*)"', ins.attrs)
    ln = re.search(r"source_line=(\d+)", ins.attrs)
    src = f"{f.group(1)}:{ln.group(1)}" if f and ln else ""
    if not src:
        sf = re.search(r"stack_frame_id=(\d+)", ins.attrs)
        if sf:
            src = sources.get(int(sf.group(1)), "")
    return src, (op.group(1) if op else "")


def analyze(text: str, peak_flops, bandwidth: float, memory: dict | None = None
            ) -> ProgramStats:
    """The ``ProgramStats`` of an optimized HLO module's text, for a device of
    ``peak_flops`` (matmul FLOP/s: one number, or a dict by operand dtype, ``peak_of``) and
    HBM ``bandwidth`` (bytes/s). ``memory``: XLA's
    ``memory_analysis()`` figures to keep with it. Raises ValueError for a text without an
    entry computation."""
    comps, entry, sources = parse_module(text)
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    stats = ProgramStats([], dict(memory or {}))
    _collect(comps, entry, stats, sources, peak_flops, bandwidth, set())
    return stats


def _collect(comps, name, stats, sources, peak_flops, bandwidth, seen) -> None:
    body = comps.get(name, [])
    shapes = {i.name: i.type for i in body}
    for ins in body:
        if ins.opcode in _NO_WORK:
            continue
        if ins.opcode in ("call", "async-start") or (
                ins.opcode == "custom-call" and "command_buffer" in ins.attrs):
            for c in _called(ins, "to_apply") + _called(ins, "calls"):
                if c not in seen:
                    seen.add(c)
                    _collect(comps, c, stats, sources, peak_flops, bandwidth, seen)
            continue
        if ins.opcode in ("async-done", "async-update", "copy-done", "send-done", "recv-done"):
            continue
        if ins.opcode == "while":
            stats.loops += 1
            for c in _called(ins, "body"):
                _collect(comps, c, stats, sources, peak_flops, bandwidth, seen)
            continue
        kind = kernel_kind(ins)
        by_dtype: dict[str, float] = {}
        if ins.opcode == "fusion":
            flops = _flops_within(_called(ins, "calls"), comps, set(), by_dtype)
        else:
            if kind == "gemm (cublas)":
                flops = _gemm_call_flops(ins, shapes)
            elif kind == "attention (cudnn)":
                flops = _attention_flops(ins, shapes)
            else:
                flops = _dot_flops(ins, shapes)
            if flops:
                by_dtype[_operand_dtype(ins, shapes)] = flops
        nbytes = _operand_bytes(ins, shapes, comps) + _result_bytes(ins, comps)
        src, op = _source(ins, sources)
        k = Kernel(ins.name, kind, nbytes, flops, src, op)
        compute = sum(f / peak_of(peak_flops, dt) for dt, f in by_dtype.items())
        k.seconds = max(compute, nbytes / bandwidth)
        stats.kernels.append(k)


def peak_of(peak_flops, dtype: str) -> float:
    """The peak FLOP/s for matmuls of ``dtype`` operands: ``peak_flops`` itself, or its
    entry for the dtype (a dict: "bf16", "f16", "f32", "f64", ...; "default" otherwise)."""
    if isinstance(peak_flops, dict):
        return peak_flops.get(dtype, peak_flops["default"])
    return peak_flops
