"""benchmarks/hlo_stats.py: kernels, bytes, FLOPs and sources counted from optimized HLO
text (the deviceless GPU benchmark's figures, benchmarks/gpu_programs.py). The module text
below is written in the format XLA 0.12's GPU compiler prints (``compiled.as_text()``);
each expected figure is worked out by hand from its shapes."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))

import hlo_stats  # noqa: E402

TEXT = '''HloModule jit_f, is_scheduled=true, entry_computation_layout={(bf16[64,32]{1,0})->bf16[64,16]{1,0}}

FileNames
1 "/tmp/model.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=10}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%fused_computation.gemm (param_0: bf16[64,32], param_1: bf16[32,16]) -> bf16[64,16] {
  %param_0 = bf16[64,32]{1,0} parameter(0), metadata={scheduling_name="param_0"}
  %param_1 = bf16[32,16]{1,0} parameter(1)
  ROOT %dot.3 = bf16[64,16]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general" stack_frame_id=1}
}

%fused_slice (param_0.1: f32[100,16], param_1.1: s32[]) -> f32[4,16] {
  %param_0.1 = f32[100,16]{1,0} parameter(0)
  %param_1.1 = s32[] parameter(1)
  %c = s32[] constant(0)
  ROOT %ds = f32[4,16]{1,0} dynamic-slice(%param_0.1, %param_1.1, %c), dynamic_slice_sizes={4,16}
}

%fused_dus (param_0.2: bf16[8,192,64], param_1.2: bf16[8,1,64], param_2.2: s32[]) -> bf16[8,192,64] {
  %param_0.2 = bf16[8,192,64]{2,1,0} parameter(0)
  %param_1.2 = bf16[8,1,64]{2,1,0} parameter(1)
  %param_2.2 = s32[] parameter(2)
  %c0 = s32[] constant(0)
  ROOT %dus = bf16[8,192,64]{2,1,0} dynamic-update-slice(%param_0.2, %param_1.2, %c0, %param_2.2, %c0)
}

%fused_f32 (param_0.3: f32[64,32], param_1.3: f32[32,16]) -> f32[64,16] {
  %param_0.3 = f32[64,32]{1,0} parameter(0)
  %param_1.3 = f32[32,16]{1,0} parameter(1)
  ROOT %dot.4 = f32[64,16]{1,0} dot(%param_0.3, %param_1.3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.1 (x: bf16[64,32], w: bf16[32,16], t: f32[100,16], i: s32[], cache: bf16[8,192,64], u: bf16[8,1,64], x32: f32[64,32], w32: f32[32,16]) -> bf16[64,16] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %t = f32[100,16]{1,0} parameter(2)
  %i = s32[] parameter(3)
  %cache = bf16[8,192,64]{2,1,0} parameter(4)
  %u = bf16[8,1,64]{2,1,0} parameter(5)
  %x32 = f32[64,32]{1,0} parameter(6)
  %w32 = f32[32,16]{1,0} parameter(7)
  %gemm = bf16[64,16]{1,0} fusion(%x, %w), kind=kCustom, calls=%fused_computation.gemm, metadata={op_name="jit(f)/dot_general" stack_frame_id=1}, backend_config={"operation_queue_id":"0","fusion_backend_config":{"kind":"__triton_gemm"}}
  %slice = f32[4,16]{1,0} fusion(%t, %i), kind=kLoop, calls=%fused_slice, metadata={op_name="jit(f)/slice" source_file="/tmp/other.py" source_line=7}
  %upd = bf16[8,192,64]{2,1,0} fusion(%cache, %u, %i), kind=kLoop, calls=%fused_dus
  %cc = (bf16[64,16]{1,0}, s8[0]{0}) custom-call(%x, %w), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"]}}}
  %gte = bf16[64,16]{1,0} get-tuple-element(%cc), index=0
  %wide = f32[64,16]{1,0} fusion(%x32, %w32), kind=kCustom, calls=%fused_f32, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
  ROOT %tuple = (bf16[64,16]{1,0}, f32[4,16]{1,0}, bf16[8,192,64]{2,1,0}, bf16[64,16]{1,0}, f32[64,16]{1,0}) tuple(%gemm, %slice, %upd, %gte, %wide)
}
'''

PEAKS = {"default": 1e12, "f32": 1e11}
BW = 1e9


def _stats():
    return hlo_stats.analyze(TEXT, PEAKS, BW, {"temp": 5})


def test_kernels_are_the_entry_instructions_that_do_work():
    stats = _stats()
    assert [k.name for k in stats.kernels] == ["gemm", "slice", "upd", "cc", "wide"]
    assert stats.kinds() == {"gemm (triton)": 2, "fusion (kLoop)": 2, "gemm (cublas)": 1}
    assert stats.memory == {"temp": 5}


def test_bytes_read_and_written():
    by = {k.name: k.bytes for k in _stats().kernels}
    # operands and result: 64*32*2 + 32*16*2 + 64*16*2
    assert by["gemm"] == 4096 + 1024 + 2048 == by["cc"]
    # a sliced operand counts its slice (4*16*4), the index 4, the result 4*16*4
    assert by["slice"] == 256 + 4 + 256
    # an in-place dynamic-update-slice: the update (8*1*64*2) read and written, the index
    assert by["upd"] == 1024 + 4 + 1024
    assert by["wide"] == 2 * (4096 + 1024 + 2048)


def test_matmul_flops_and_roofline_by_dtype():
    ks = {k.name: k for k in _stats().kernels}
    assert ks["gemm"].flops == ks["cc"].flops == ks["wide"].flops == 2 * 64 * 16 * 32
    assert ks["slice"].flops == 0
    # bf16: max(65536 / 1e12, 7168 / 1e9) -> bytes; f32 at its own peak (1e11)
    assert ks["gemm"].seconds == 7168 / BW
    assert ks["wide"].seconds == max(65536 / 1e11, 14336 / BW)


def test_sources_from_stack_frames_and_metadata():
    ks = {k.name: k for k in _stats().kernels}
    assert ks["gemm"].source == "/tmp/model.py:12"
    assert ks["gemm"].op_name == "jit(f)/dot_general"
    assert ks["slice"].source == "/tmp/other.py:7"
    assert ks["upd"].source == ""


def test_attention_flops_of_cudnn_calls():
    """cuDNN's fused attention: 4 B N T S D forward, 10 backward, halved by a causal mask."""
    cfg = ('{"cudnn_fmha_backend_config":{"intermediate_tensor_shape":{"dimensions":'
           '["2","4","8","8"]},"mask_type":"CAUSAL","bmm1_dot_dimension_numbers":'
           '{"lhs_contracting_dimensions":["3"]}}}')
    text = ("ENTRY %main (q: bf16[2,4,8,16]) -> bf16[2,4,8,16] {\n"
            "  %q = bf16[2,4,8,16]{3,2,1,0} parameter(0)\n"
            "  %a = (bf16[2,4,8,16]{3,2,1,0}, f32[2,4,8]{2,1,0}, u8[0]{0}) custom-call(%q, %q, "
            f'%q), custom_call_target="__cudnn$fmhaSoftmax", backend_config={cfg}\n'
            "  ROOT %g = bf16[2,4,8,16]{3,2,1,0} get-tuple-element(%a), index=0\n}\n")
    (k,) = hlo_stats.analyze(text, 1e12, 1e9).kernels
    assert k.kind == "attention (cudnn)"
    assert k.flops == 4 * 2 * 4 * 8 * 8 * 16 / 2
    assert k.bytes == 3 * 2048 + 2048 + 256


def test_a_text_without_entry_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="no ENTRY"):
        hlo_stats.analyze("HloModule m\n", 1e12, 1e9)


BITCAST_TEXT = '''HloModule jit_g, is_scheduled=true

%fused_slice (param_0: bf16[16,24]) -> bf16[1,16,8] {
  %param_0 = bf16[16,24]{1,0} parameter(0)
  %bitcast.1 = bf16[1,16,24]{2,1,0} bitcast(%param_0)
  ROOT %slice.1 = bf16[1,16,8]{2,1,0} slice(%bitcast.1), slice={[0:1], [0:16], [8:16]}
}

%fused_convert_slice (param_0.2: bf16[16,24]) -> f32[1,1] {
  %param_0.2 = bf16[16,24]{1,0} parameter(0)
  %convert.1 = f32[16,24]{1,0} convert(%param_0.2)
  ROOT %slice.2 = f32[1,1]{1,0} slice(%convert.1), slice={[0:1], [0:1]}
}

%fused_transpose (param_0.1: bf16[16,24]) -> bf16[24,16] {
  %param_0.1 = bf16[16,24]{1,0} parameter(0)
  %bitcast.2 = bf16[16,24]{1,0} bitcast(%param_0.1)
  ROOT %transpose.1 = bf16[24,16]{1,0} transpose(%bitcast.2), dimensions={1,0}
}

ENTRY %main.2 (x: bf16[16,24]) -> (bf16[1,16,8], bf16[24,16]) {
  %x = bf16[16,24]{1,0} parameter(0)
  %s = bf16[1,16,8]{2,1,0} fusion(%x), kind=kLoop, calls=%fused_slice
  %t = bf16[24,16]{1,0} fusion(%x), kind=kLoop, calls=%fused_transpose
  %c = f32[1,1]{1,0} fusion(%x), kind=kLoop, calls=%fused_convert_slice
  ROOT %tuple = (bf16[1,16,8]{2,1,0}, bf16[24,16]{1,0}, f32[1,1]{1,0}) tuple(%s, %t, %c)
}
'''


def test_a_slice_behind_a_bitcast_or_convert_reads_the_slice():
    by = {k.name: k.bytes for k in hlo_stats.analyze(BITCAST_TEXT, PEAKS, BW, {}).kernels}
    # the slice of a bitcast of the parameter reads its 16*8*2 bytes and writes as many
    assert by["s"] == 256 + 256
    # a bitcast read whole (transposed) reads the whole parameter, 16*24*2
    assert by["t"] == 768 + 768
    # one element of a converted parameter: 2 bytes read (bf16), 4 written (f32)
    assert by["c"] == 2 + 4


# the split-K pattern of a small gemm: 4 float32 partial sums reduced, a bias added and the
# sum rounded inside each consumer, which uses a third of it (q, k or v)
SPLIT_K_TEXT = '''HloModule jit_h, is_scheduled=true

%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_third (param_0: f32[4,8,96], param_1: bf16[96]) -> bf16[8,32] {
  %param_0 = f32[4,8,96]{2,1,0} parameter(0)
  %zero = f32[] constant(0)
  %reduce = f32[8,96]{1,0} reduce(%param_0, %zero), dimensions={0}, to_apply=%add_f32
  %param_1 = bf16[96]{0} parameter(1)
  %wide = f32[96]{0} convert(%param_1)
  %bias = f32[8,96]{1,0} broadcast(%wide), dimensions={1}
  %sum = f32[8,96]{1,0} add(%reduce, %bias)
  %round = bf16[8,96]{1,0} convert(%sum)
  %twice = bf16[8,96]{1,0} multiply(%round, %round)
  ROOT %third = bf16[8,32]{1,0} slice(%twice), slice={[0:8], [32:64]}
}

%fused_whole (param_0.1: f32[4,8,96], param_1.1: bf16[96]) -> bf16[8,96] {
  %param_0.1 = f32[4,8,96]{2,1,0} parameter(0)
  %zero.1 = f32[] constant(0)
  %reduce.1 = f32[8,96]{1,0} reduce(%param_0.1, %zero.1), dimensions={0}, to_apply=%add_f32
  %param_1.1 = bf16[96]{0} parameter(1)
  %wide.1 = f32[96]{0} convert(%param_1.1)
  %bias.1 = f32[8,96]{1,0} broadcast(%wide.1), dimensions={1}
  %sum.1 = f32[8,96]{1,0} add(%reduce.1, %bias.1)
  %head = f32[8,32]{1,0} slice(%sum.1), slice={[0:8], [0:32]}
  %tail = f32[8,64]{1,0} slice(%sum.1), slice={[0:8], [32:96]}
  %back = f32[8,96]{1,0} concatenate(%tail, %head), dimensions={1}
  ROOT %round.1 = bf16[8,96]{1,0} convert(%back)
}

%fused_rope (param_0.2: bf16[8,96]) -> bf16[8,64] {
  %param_0.2 = bf16[8,96]{1,0} parameter(0)
  %q = bf16[8,64]{1,0} slice(%param_0.2), slice={[0:8], [0:64]}
  %lo = bf16[8,32]{1,0} slice(%q), slice={[0:8], [0:32]}
  %hi = bf16[8,32]{1,0} slice(%q), slice={[0:8], [32:64]}
  %rot = bf16[8,64]{1,0} concatenate(%hi, %lo), dimensions={1}
  ROOT %sum.2 = bf16[8,64]{1,0} add(%q, %rot)
}

ENTRY %main.3 (p: f32[4,8,96], b: bf16[96], x: bf16[8,96]) -> (bf16[8,32], bf16[8,96], bf16[8,64]) {
  %p = f32[4,8,96]{2,1,0} parameter(0)
  %b = bf16[96]{0} parameter(1)
  %x = bf16[8,96]{1,0} parameter(2)
  %k = bf16[8,32]{1,0} fusion(%p, %b), kind=kLoop, calls=%fused_third
  %w = bf16[8,96]{1,0} fusion(%p, %b), kind=kLoop, calls=%fused_whole
  %r = bf16[8,64]{1,0} fusion(%x), kind=kLoop, calls=%fused_rope
  ROOT %tuple = (bf16[8,32]{1,0}, bf16[8,96]{1,0}, bf16[8,64]{1,0}) tuple(%k, %w, %r)
}
'''


def test_a_slice_after_a_reduction_reads_that_part_of_the_reduced_operand():
    """XLA's operand utilization (GpuHloCostAnalysis::FusionCalculateUtilizations): a
    fusion computes only the elements its slice keeps, through elementwise ops (shared,
    not added, where two paths meet: ``round`` read twice by ``multiply``), a reduction
    (each kept element reads its 4 partial sums) and a broadcast; an element used twice
    is read once."""
    by = {k.name: k.bytes for k in hlo_stats.analyze(SPLIT_K_TEXT, PEAKS, BW, {}).kernels}
    # a third of the partials (4*8*32*4) and of the bias (32*2), the result 8*32*2
    assert by["k"] == 4096 + 64 + 512
    # two slices that cover the sum between them read all of it: 4*8*96*4 + 96*2, 8*96*2
    assert by["w"] == 12288 + 192 + 1536
    # q used whole (by the add) and as two halves: its elements once, 8*64*2, not twice
    # its share of x (XLA's model counts the repeated use, for code size, not bytes)
    assert by["r"] == 1024 + 1024
