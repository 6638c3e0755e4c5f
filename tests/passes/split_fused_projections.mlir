// RUN: thunder-opt %s -p split-fused-projections | filecheck %s

// A Conv1D with a fused q/k/v weight (GPT-2's c_attn), the weight held as (E, 3, N) and
// reshaped to (E, 3N) before use: addmm(bias, x, W).view(B, T, 3N).split(N, -1) becomes
// one dot_general on the (E, 3, N) weight plus the (3, N) bias, and slices of the parts
// dimension (distributed/fused.py). The reshapes of the stored parts go when unused.

// CHECK-LABEL: func.func @fused(
// CHECK-NOT:   ltorch.addmm
// CHECK-NOT:   ltorch.split
// CHECK:       %[[Y:.*]] = "thunder.dot_general"(%arg1, %arg0) {{.*}}lhs_contracting_dimensions = array<i64: 1>{{.*}}rhs_contracting_dimensions = array<i64: 0>{{.*}} : (tensor<2x4xf32>, tensor<4x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK:       %[[B:.*]] = "thunder.broadcast_in_dim"(%arg2) {broadcast_dimensions = array<i64: 1, 2>} : (tensor<3x4xf32>) -> tensor<2x3x4xf32>
// CHECK:       %[[S:.*]] = "thunder.add"(%[[B]], %[[Y]])
// CHECK:       %[[P0:.*]] = "thunder.slice"(%[[S]]) {limit_indices = array<i64: 2, 1, 4>, start_indices = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>}
// CHECK:       %[[Q:.*]] = "thunder.reshape"(%[[P0]]) : (tensor<2x1x4xf32>) -> tensor<1x2x4xf32>
// CHECK:       "thunder.slice"(%[[S]]) {limit_indices = array<i64: 2, 2, 4>, start_indices = array<i64: 0, 1, 0>
// CHECK:       "thunder.slice"(%[[S]]) {limit_indices = array<i64: 2, 3, 4>, start_indices = array<i64: 0, 2, 0>
// CHECK-NOT:   ltorch.reshape
// CHECK:       return %[[Q]],
func.func @fused(%w3: tensor<4x3x4xf32>, %x: tensor<2x4xf32>, %b3: tensor<3x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
  %w = "thunder.composite"(%w3) ({
  ^bb0(%a: tensor<4x3x4xf32>):
    %r = "thunder.reshape"(%a) : (tensor<4x3x4xf32>) -> tensor<4x12xf32>
    "thunder.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x12xf32>) -> ()
  }) {name = "ltorch.reshape", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["input"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, shape = [[4, 12]]} : (tensor<4x3x4xf32>) -> tensor<4x12xf32>
  %b = "thunder.composite"(%b3) ({
  ^bb0(%a: tensor<3x4xf32>):
    %r = "thunder.reshape"(%a) : (tensor<3x4xf32>) -> tensor<12xf32>
    "thunder.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<12xf32>) -> ()
  }) {name = "ltorch.reshape", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["input"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, shape = [[12]]} : (tensor<3x4xf32>) -> tensor<12xf32>
  %y = "thunder.composite"(%b, %x, %w) ({
  ^bb0(%bb: tensor<12xf32>, %xx: tensor<2x4xf32>, %ww: tensor<4x12xf32>):
    %m = "thunder.dot_general"(%xx, %ww) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x4xf32>, tensor<4x12xf32>) -> tensor<2x12xf32>
    %bc = "thunder.broadcast_in_dim"(%bb) {broadcast_dimensions = array<i64: 1>} : (tensor<12xf32>) -> tensor<2x12xf32>
    %s = "thunder.add"(%bc, %m) : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
    "thunder.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x12xf32>) -> ()
  }) {name = "ltorch.addmm", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, operand_names = ["input", "mat1", "mat2"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<12xf32>, tensor<2x4xf32>, tensor<4x12xf32>) -> tensor<2x12xf32>
  %v = "thunder.composite"(%y) ({
  ^bb0(%a: tensor<2x12xf32>):
    %r = "thunder.reshape"(%a) : (tensor<2x12xf32>) -> tensor<1x2x12xf32>
    "thunder.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x2x12xf32>) -> ()
  }) {name = "ltorch.reshape", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["input"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, shape = [[1, 2, 12]]} : (tensor<2x12xf32>) -> tensor<1x2x12xf32>
  %q:3 = "thunder.composite"(%v) ({
  ^bb0(%a: tensor<1x2x12xf32>):
    %s0 = "thunder.slice"(%a) {limit_indices = array<i64: 1, 2, 4>, start_indices = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>} : (tensor<1x2x12xf32>) -> tensor<1x2x4xf32>
    %s1 = "thunder.slice"(%a) {limit_indices = array<i64: 1, 2, 8>, start_indices = array<i64: 0, 0, 4>, strides = array<i64: 1, 1, 1>} : (tensor<1x2x12xf32>) -> tensor<1x2x4xf32>
    %s2 = "thunder.slice"(%a) {limit_indices = array<i64: 1, 2, 12>, start_indices = array<i64: 0, 0, 8>, strides = array<i64: 1, 1, 1>} : (tensor<1x2x12xf32>) -> tensor<1x2x4xf32>
    "thunder.yield"(%s0, %s1, %s2) {operandSegmentSizes = array<i32: 3, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> ()
  }) {dim = 2 : i64, name = "ltorch.split", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["tensor"], resultSegmentSizes = array<i32: 3, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = 4 : i64} : (tensor<1x2x12xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  return %q#0, %q#1, %q#2 : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>
}

// The projection's output also used whole: left as it is.
// CHECK-LABEL: func.func @used_whole(
// CHECK:       ltorch.addmm
// CHECK:       ltorch.split
func.func @used_whole(%w3: tensor<4x2x4xf32>, %x: tensor<2x4xf32>, %b: tensor<8xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x8xf32>) {
  %w = "thunder.composite"(%w3) ({
  ^bb0(%a: tensor<4x2x4xf32>):
    %r = "thunder.reshape"(%a) : (tensor<4x2x4xf32>) -> tensor<4x8xf32>
    "thunder.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>) -> ()
  }) {name = "ltorch.reshape", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["input"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, shape = [[4, 8]]} : (tensor<4x2x4xf32>) -> tensor<4x8xf32>
  %y = "thunder.composite"(%b, %x, %w) ({
  ^bb0(%bb: tensor<8xf32>, %xx: tensor<2x4xf32>, %ww: tensor<4x8xf32>):
    %m = "thunder.dot_general"(%xx, %ww) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %bc = "thunder.broadcast_in_dim"(%bb) {broadcast_dimensions = array<i64: 1>} : (tensor<8xf32>) -> tensor<2x8xf32>
    %s = "thunder.add"(%bc, %m) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    "thunder.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x8xf32>) -> ()
  }) {name = "ltorch.addmm", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, operand_names = ["input", "mat1", "mat2"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<8xf32>, tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %v = "thunder.composite"(%y) ({
  ^bb0(%a: tensor<2x8xf32>):
    %r = "thunder.reshape"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    "thunder.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x8xf32>) -> ()
  }) {name = "ltorch.reshape", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["input"], resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, shape = [[2, 8]]} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %q:2 = "thunder.composite"(%v) ({
  ^bb0(%a: tensor<2x8xf32>):
    %s0 = "thunder.slice"(%a) {limit_indices = array<i64: 2, 4>, start_indices = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
    %s1 = "thunder.slice"(%a) {limit_indices = array<i64: 2, 8>, start_indices = array<i64: 0, 4>, strides = array<i64: 1, 1>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
    "thunder.yield"(%s0, %s1) {operandSegmentSizes = array<i32: 2, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> ()
  }) {dim = 1 : i64, name = "ltorch.split", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, operand_names = ["tensor"], resultSegmentSizes = array<i32: 2, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = 4 : i64} : (tensor<2x8xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
  return %q#0, %q#1, %y : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x8xf32>
}
