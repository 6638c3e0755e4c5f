// RUN: thunder-opt %s -p lower-to-stablehlo --split-input-file | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(lower-to-stablehlo{computed-once=false accumulate-f32=false narrow-dots=true})' --split-input-file | filecheck %s --check-prefix=GPU

// cuDNN's fused attention (ir/cudnn_attention.py): a training forward (its lse read by
// the backward) is the three-result __cudnn$fmhaSoftmax (out, lse, workspace), the
// backward __cudnn$fmhaSoftmaxBackward on (q, k, v, lse, dout, out), jax's operand order;
// grouped key/value heads are passed as they are. As jax calls it: q/k/v/out/dout passed
// [B, T, N, D] (a model's transpose(1, 2) before the call cancels these), results
// [B, N, T, D] stored BTNH (minor_to_major 3, 1, 2, 0: the transpose after is a bitcast).
// CHECK-LABEL: func.func @training
// CHECK:         %[[Q:.*]] = stablehlo.transpose %arg0, dims = [0, 2, 1, 3] : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>
// CHECK:         %[[F:.*]]:3 = stablehlo.custom_call @__cudnn$fmhaSoftmax(%[[Q]], %{{.*}}, %{{.*}}) {api_version = 2 : i32, backend_config = "{{.*}}\22fmha_scale\22: 0.25,{{.*}}\22mask_type\22: \22CAUSAL\22
// CHECK-SAME:      result_layouts = [dense<[3, 1, 2, 0]> : tensor<4xindex>, dense<[2, 1, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]
// CHECK-SAME:      (tensor<2x8x4x16xbf16>, tensor<2x8x2x16xbf16>, tensor<2x8x2x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>, tensor<0xui8>)
// CHECK:         %[[G:.*]] = stablehlo.transpose %arg3, dims = [0, 2, 1, 3]
// CHECK:         %[[O:.*]] = stablehlo.transpose %[[F]]#0, dims = [0, 2, 1, 3]
// CHECK:         %[[B:.*]]:4 = stablehlo.custom_call @__cudnn$fmhaSoftmaxBackward(%{{.*}}, %{{.*}}, %{{.*}}, %[[F]]#1, %[[G]], %[[O]])
// CHECK-SAME:      result_layouts = [dense<[3, 1, 2, 0]> : tensor<4xindex>, dense<[3, 1, 2, 0]> : tensor<4xindex>, dense<[3, 1, 2, 0]> : tensor<4xindex>, dense<0> : tensor<1xindex>]
// CHECK-SAME:      -> (tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<0xui8>)
// CHECK:         return %[[F]]#0, %[[B]]#0, %[[B]]#1, %[[B]]#2
func.func @training(%q: tensor<2x4x8x16xbf16>, %k: tensor<2x2x8x16xbf16>, %v: tensor<2x2x8x16xbf16>, %g: tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>) {
  %out, %lse = "thunder.cudnn_attention"(%q, %k, %v) {scale = 0.25 : f64, causal = 1 : i64} : (tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
  %dq, %dk, %dv = "thunder.cudnn_attention_backward"(%q, %k, %v, %out, %lse, %g) {scale = 0.25 : f64, causal = 1 : i64} : (tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>)
  return %out, %dq, %dk, %dv : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>
}

// -----

// An inference forward (lse not read): the same three-result call (one form: XLA's CSE
// merges a training step's forward with the gradient's recomputation of it).
// CHECK-LABEL: func.func @inference
// CHECK:         %[[F:.*]]:3 = stablehlo.custom_call @__cudnn$fmhaSoftmax({{.*}}) {{.*}}\22mask_type\22: \22NO_MASK\22
// CHECK-SAME:      -> (tensor<2x4x8x16xf16>, tensor<2x4x8xf32>, tensor<0xui8>)
// CHECK:         return %[[F]]#0
func.func @inference(%q: tensor<2x4x8x16xf16>, %k: tensor<2x4x8x16xf16>, %v: tensor<2x4x8x16xf16>) -> tensor<2x4x8x16xf16> {
  %out, %lse = "thunder.cudnn_attention"(%q, %k, %v) {scale = 0.25 : f64, causal = 0 : i64} : (tensor<2x4x8x16xf16>, tensor<2x4x8x16xf16>, tensor<2x4x8x16xf16>) -> (tensor<2x4x8x16xf16>, tensor<2x4x8xf32>)
  return %out : tensor<2x4x8x16xf16>
}

// -----

// The target's lowering options (pipeline.Target). A bf16 dot: on the CPU its result is
// float32 and one convert (accumulate-f32); for a GPU the 16-bit result (XLA:GPU's gemms
// accumulate in float32). A float32 dot of values converted from bf16 (ATen's opmath
// addmm): on the CPU a float32 dot at HIGHEST; for a GPU the bf16 values' dot with a
// float32 result (narrow-dots).
// CHECK-LABEL: func.func @dots
// CHECK:         %[[D:.*]] = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>
// CHECK-NEXT:    stablehlo.convert %[[D]] : (tensor<2x4xf32>) -> tensor<2x4xbf16>
// CHECK:         stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// GPU-LABEL:     func.func @dots
// GPU:           stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xbf16>
// GPU-NOT:       stablehlo.convert %{{.*}} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
// GPU:           stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>
func.func @dots(%a: tensor<2x3xbf16>, %b: tensor<3x4xbf16>) -> (tensor<2x4xbf16>, tensor<2x4xf32>) {
  %0 = "thunder.dot_general"(%a, %b) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xbf16>
  %a32 = "thunder.convert_element_type"(%a) : (tensor<2x3xbf16>) -> tensor<2x3xf32>
  %b32 = "thunder.convert_element_type"(%b) : (tensor<3x4xbf16>) -> tensor<3x4xf32>
  %1 = "thunder.dot_general"(%a32, %b32) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0, %1 : tensor<2x4xbf16>, tensor<2x4xf32>
}

// -----

// A one-row float32 dot of bf16 values (a decode step's addmm, ATen's opmath): for a GPU a
// two-row gemm of the bf16 values, its first row taken (hlo._gemv_as_two_row_gemm: XLA:GPU's
// one-row dots become a multiply and a reduction that can write the float32 product first).
// CHECK-LABEL: func.func @gemv
// CHECK:         stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
// GPU-LABEL:     func.func @gemv
// GPU:           %[[X:.*]] = stablehlo.broadcast_in_dim %arg0, dims = [0, 1] : (tensor<1x8xbf16>) -> tensor<2x8xbf16>
// GPU-NEXT:      %[[D:.*]] = stablehlo.dot_general %[[X]], %arg1, contracting_dims = [1] x [0] : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xf32>
// GPU-NEXT:      %[[R:.*]] = stablehlo.slice %[[D]] [0:1, 0:4] : (tensor<2x4xf32>) -> tensor<1x4xf32>
// GPU-NEXT:      return %[[R]]
func.func @gemv(%x: tensor<1x8xbf16>, %w: tensor<8x4xbf16>) -> tensor<1x4xf32> {
  %x32 = "thunder.convert_element_type"(%x) : (tensor<1x8xbf16>) -> tensor<1x8xf32>
  %w32 = "thunder.convert_element_type"(%w) : (tensor<8x4xbf16>) -> tensor<8x4xf32>
  %0 = "thunder.dot_general"(%x32, %w32) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}

// -----

// sine and cosine: on the CPU divided by ones XLA cannot fold (computed-once); for a GPU
// plain.
// CHECK-LABEL: func.func @sine
// CHECK:         stablehlo.sine
// CHECK:         stablehlo.divide
// GPU-LABEL:     func.func @sine
// GPU:           %[[S:.*]] = stablehlo.sine %arg0
// GPU-NEXT:      return %[[S]]
func.func @sine(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.sin"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
