// RUN: thunder-opt %s -p grad,joint --split-input-file | filecheck %s

// The gradient program of f(x, y) = (sin(x * y), x * 2): one @computation, a cotangent
// of ones per output, and no forward result that the gradients do not need (the sin and
// the x * 2 outputs are gone; cos(x * y) stays for the backward).
// CHECK-LABEL: func.func @computation(%[[X:.*]]: tensor<3xf32>, %[[Y:.*]]: tensor<3xf32>)
// CHECK-NOT:     thunder.sin
// CHECK-NOT:     func.func @forward
// CHECK:         "thunder.cos"
// CHECK:         return %{{.*}}, %{{.*}} : tensor<3xf32>, tensor<3xf32>
// CHECK-NOT:     func.func @backward
func.func @computation(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = "thunder.mul"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = "thunder.sin"(%0) : (tensor<3xf32>) -> tensor<3xf32>
  %2 = "thunder.full"() {value = 2.0 : f64} : () -> tensor<3xf32>
  %3 = "thunder.mul"(%x, %2) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %1, %3 : tensor<3xf32>, tensor<3xf32>
}

// -----

// Rematerialization in one program: grad saves tanh(log1p(x)) only and the backward
// recomputes exp from it. joint takes the saved value through thunder.after, anchored on
// the cotangent the recomputation's first reader divides (so XLA neither merges the
// recomputed exp with the forward's nor computes it before the backward needs it), and
// moves the recomputation just before that reader.
// CHECK-LABEL: func.func @computation(%{{.*}}: tensor<4xf32>) -> tensor<4xf32>
// CHECK:         %[[T:.*]] = "thunder.tanh"
// CHECK-NEXT:    %[[E:.*]] = "thunder.exp"(%[[T]])
// CHECK:         %[[S:[0-9]+]] = "thunder.after"(%[[T]], %[[G:[0-9]+]])
// CHECK-NEXT:    %[[R:[0-9]+]] = "thunder.exp"(%[[S]])
// CHECK-NEXT:    %[[D:[0-9]+]] = "thunder.add"(%[[R]],
// CHECK-NEXT:    "thunder.div"(%[[G]], %[[D]])
// CHECK-NOT:     thunder.recomputed
// CHECK:         return
func.func @computation(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = "thunder.log1p"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %t = "thunder.tanh"(%h) : (tensor<4xf32>) -> tensor<4xf32>
  %u = "thunder.exp"(%t) : (tensor<4xf32>) -> tensor<4xf32>
  %a = "thunder.log1p"(%u) : (tensor<4xf32>) -> tensor<4xf32>
  %b = "thunder.log1p"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %c = "thunder.log1p"(%b) : (tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// A recomputation read at two points of the backward, a dot apart, is copied per point:
// grad recomputes exp(sin(x)) for the weight gradient (a dot) and for the input gradient
// (elementwise, after the dot with w). Each copy reads x through its own thunder.after,
// the second anchored on the first's, so that XLA's CSE does not make them one again (one
// exp read by both would be a buffer alive from the first point to the second).
// CHECK-LABEL: func.func @computation
// CHECK:         %[[D:[0-9]+]] = "thunder.dot_general"(%{{.*}}, %arg1)
// CHECK-NEXT:    %[[A:[0-9]+]] = "thunder.after"(%arg0, %[[D]])
// CHECK-NEXT:    %[[S:[0-9]+]] = "thunder.sin"(%[[A]])
// CHECK-NEXT:    %[[E:[0-9]+]] = "thunder.exp"(%[[S]])
// CHECK-NEXT:    "thunder.dot_general"(%{{.*}}, %[[E]])
// CHECK:         %[[B:[0-9]+]] = "thunder.after"(%arg0, %[[A]])
// CHECK-NEXT:    %[[T:[0-9]+]] = "thunder.sin"(%[[B]])
// CHECK-NEXT:    %[[F:[0-9]+]] = "thunder.exp"(%[[T]])
// CHECK-NEXT:    "thunder.mul"(%[[D]], %[[F]])
// CHECK-NOT:     thunder.exp
// CHECK:         return
func.func @computation(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %s = "thunder.sin"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = "thunder.exp"(%s) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = "thunder.dot_general"(%e, %w) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// A large constant that an op writes into (the embedding gradient's zeros, index_add's
// base) is read through thunder.after, anchored on the gradient index_add scatters, so
// XLA makes the buffer when the backward reaches the scatter and not among the forward's
// first ops. A base under 16 KiB (8x4) and the constants read elementwise (the cotangent
// of ones) stay as they are.
// CHECK-LABEL: func.func @computation
// CHECK:         %[[Z:.*]] = "thunder.full"() {value = 0.000000e+00 : f64} : () -> tensor<8x4xf32>
// CHECK-NEXT:    "thunder.index_add"(%[[Z]],
// CHECK:         %[[W:.*]] = "thunder.full"() {value = 0.000000e+00 : f64} : () -> tensor<64x64xf32>
// CHECK-NEXT:    %[[A:.*]] = "thunder.after"(%[[W]], %[[G:[0-9]+]])
// CHECK-NEXT:    "thunder.index_add"(%[[A]], %{{.*}}, %[[G]])
// CHECK-NOT:     thunder.after
// CHECK:         return
func.func @computation(%w: tensor<64x64xf32>, %i: tensor<2x3xi64>, %s: tensor<8x4xf32>,
                       %j: tensor<5xi64>) -> (tensor<2x3x64xf32>, tensor<5x4xf32>) {
  %e = "thunder.take"(%w, %i) {dim = 0 : i64} : (tensor<64x64xf32>, tensor<2x3xi64>) -> tensor<2x3x64xf32>
  %t = "thunder.tanh"(%e) : (tensor<2x3x64xf32>) -> tensor<2x3x64xf32>
  %f = "thunder.take"(%s, %j) {dim = 0 : i64} : (tensor<8x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  %u = "thunder.tanh"(%f) : (tensor<5x4xf32>) -> tensor<5x4xf32>
  return %t, %u : tensor<2x3x64xf32>, tensor<5x4xf32>
}
