// RUN: thunder-opt %s -p fused-attention --split-input-file | filecheck %s
// RUN: thunder-opt %s -p fused-attention,grad,cudnn-attention --split-input-file | filecheck %s --check-prefix=GPU

// fused-attention (passes/fused_attention.py): a causal bf16 call with grouped key/value
// heads becomes one flash_attention composite returning (out, lse); its decomposition is
// the float32 math. After grad and cudnn-attention (the GPU pipeline): the forward is the
// cudnn_attention prim and returns lse [1, 4, 8] f32 as a residual, the backward one
// cudnn_attention_backward; no [.., 8, 8] probabilities cross from forward to backward.
// CHECK-LABEL: func.func @computation
// CHECK:         %[[F:.*]]:2 = "thunder.composite"(%arg0, %arg1, %arg2) ({
// CHECK:           "thunder.dot_general"
// CHECK:           "thunder.log"
// CHECK:         }) {causal = true, name = "thunder.flash_attention", {{.*}}scale = 2.500000e-01 : f64}
// CHECK-SAME:      -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
// CHECK-NOT:     ltorch.scaled_dot_product_attention
// CHECK:         return %[[F]]#0
// GPU-LABEL:     func.func @forward
// GPU:           %[[F:.*]]:2 = "thunder.cudnn_attention"(%arg0, %arg1, %arg2) {causal = 1 : i64, scale = 2.500000e-01 : f64}
// GPU-NOT:       tensor<1x4x8x8x
// GPU:           return %[[F]]#0, {{.*}}tensor<1x4x8xf32>
// GPU-LABEL:     func.func @backward
// GPU:           "thunder.cudnn_attention_backward"
// GPU-NOT:       "thunder.composite"
func.func @computation(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x2x8x16xbf16>) -> tensor<1x4x8x16xbf16> attributes {thunder.device = "cuda:0"} {
  %0 = "thunder.composite"(%q, %k, %v) ({
  ^bb0(%a: tensor<1x4x8x16xbf16>, %b: tensor<1x2x8x16xbf16>, %c: tensor<1x2x8x16xbf16>):
    "thunder.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xbf16>) -> ()
  }) {name = "ltorch.scaled_dot_product_attention", is_causal = true, enable_gqa = true, dropout_p = 0 : i64, operand_names = ["query", "key", "value"], operandSegmentSizes = array<i32: 1, 2, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> tensor<1x4x8x16xbf16>
  return %0 : tensor<1x4x8x16xbf16>
}

// -----

// Calls cuDNN does not take keep their decomposition, marked with why: float32 operands,
// and dropout.
// CHECK-LABEL: func.func @computation
// CHECK:         name = "ltorch.scaled_dot_product_attention", {{.*}}thunder.fused_attention = "not taken: dtype torch.float32
// CHECK:         dropout_p = 1.000000e-01 : f64, {{.*}}thunder.fused_attention = "not taken: dropout_p=0.1"
// CHECK-NOT:     thunder.flash_attention
func.func @computation(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>, %q2: tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xbf16>) attributes {thunder.device = "cuda:0"} {
  %0 = "thunder.composite"(%q, %k, %v) ({
  ^bb0(%a: tensor<1x4x8x16xf32>, %b: tensor<1x4x8x16xf32>, %c: tensor<1x4x8x16xf32>):
    "thunder.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xf32>) -> ()
  }) {name = "ltorch.scaled_dot_product_attention", operand_names = ["query", "key", "value"], operandSegmentSizes = array<i32: 3, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  %1 = "thunder.composite"(%q2, %q2, %q2) ({
  ^bb0(%a: tensor<1x4x8x16xbf16>, %b: tensor<1x4x8x16xbf16>, %c: tensor<1x4x8x16xbf16>):
    "thunder.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xbf16>) -> ()
  }) {name = "ltorch.scaled_dot_product_attention", dropout_p = 0.1 : f64, operand_names = ["query", "key", "value"], operandSegmentSizes = array<i32: 3, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>) -> tensor<1x4x8x16xbf16>
  return %0, %1 : tensor<1x4x8x16xf32>, tensor<1x4x8x16xbf16>
}
