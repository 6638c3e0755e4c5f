// RUN: thunder-opt %s -p merge-dots --split-input-file | filecheck %s

// Three weight gradients g_i^T x sharing the layer input x, their gradients computed
// values of different widths (4, 2, 2): one dot of x with the gradients concatenated along
// their free dimension, each old result a slice of it.
// CHECK-LABEL: func.func @computation
// CHECK:         %[[C:.*]] = "thunder.concatenate"(%{{.*}}, %{{.*}}, %{{.*}}) {dimension = 1 : i64
// CHECK-SAME:      -> tensor<6x8xf32>
// CHECK-NEXT:    %[[D:.*]] = "thunder.dot_general"(%[[C]], %arg0) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<6x8xf32>, tensor<6x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT:    %[[A:.*]] = "thunder.slice"(%[[D]]) {limit_indices = array<i64: 4, 3>, start_indices = array<i64: 0, 0>
// CHECK-NEXT:    %[[B:.*]] = "thunder.slice"(%[[D]]) {limit_indices = array<i64: 6, 3>, start_indices = array<i64: 4, 0>
// CHECK-NEXT:    %[[E:.*]] = "thunder.slice"(%[[D]]) {limit_indices = array<i64: 8, 3>, start_indices = array<i64: 6, 0>
// CHECK-NOT:     thunder.dot_general
// CHECK:         return %[[A]], %[[B]], %[[E]]
func.func @computation(%x: tensor<6x3xf32>, %a: tensor<6x4xf32>, %b: tensor<6x2xf32>, %c: tensor<6x2xf32>) -> (tensor<4x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %ga = "thunder.tanh"(%a) : (tensor<6x4xf32>) -> tensor<6x4xf32>
  %gb = "thunder.tanh"(%b) : (tensor<6x2xf32>) -> tensor<6x2xf32>
  %gc = "thunder.tanh"(%c) : (tensor<6x2xf32>) -> tensor<6x2xf32>
  %0 = "thunder.dot_general"(%ga, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<6x4xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  %1 = "thunder.dot_general"(%gb, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<6x2xf32>, tensor<6x3xf32>) -> tensor<2x3xf32>
  %2 = "thunder.dot_general"(%gc, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<6x2xf32>, tensor<6x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2 : tensor<4x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// The dots of x with arguments (a layer's weights in the forward) are left as they are:
// merged, their concatenation would copy the weights at every call.
// CHECK-LABEL: func.func @computation
// CHECK-NOT:     thunder.concatenate
// CHECK-COUNT-2: thunder.dot_general
func.func @computation(%x: tensor<6x3xf32>, %w1: tensor<4x3xf32>, %w2: tensor<2x3xf32>) -> (tensor<6x4xf32>, tensor<6x2xf32>) {
  %0 = "thunder.dot_general"(%x, %w1) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 1>} : (tensor<6x3xf32>, tensor<4x3xf32>) -> tensor<6x4xf32>
  %1 = "thunder.dot_general"(%x, %w2) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 1>} : (tensor<6x3xf32>, tensor<2x3xf32>) -> tensor<6x2xf32>
  return %0, %1 : tensor<6x4xf32>, tensor<6x2xf32>
}

// -----

// The first dot's result is read by the second dot's gradient: one dot for both would
// read its own result, so nothing is merged.
// CHECK-LABEL: func.func @computation
// CHECK-NOT:     thunder.concatenate
// CHECK-COUNT-2: thunder.dot_general
func.func @computation(%x: tensor<3x3xf32>, %a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %ga = "thunder.tanh"(%a) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %0 = "thunder.dot_general"(%ga, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %gb = "thunder.tanh"(%0) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %1 = "thunder.dot_general"(%gb, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  return %1 : tensor<3x3xf32>
}
