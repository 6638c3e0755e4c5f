// RUN: thunder-opt %s -p grad --split-input-file | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(grad{remat=false})' --split-input-file | filecheck %s --check-prefix=NOREMAT

// cond: the backward is a cond on the same predicate (a residual) whose branches
// recompute their forward branch and differentiate it; the residuals are the predicate
// and the captured inputs, not the branches' intermediates.
// CHECK-LABEL: module @cond
// CHECK:       func.func @forward(%[[P:.*]]: tensor<i1>, %[[X:.*]]: tensor<4xf32>)
// CHECK:         return %{{.*}}, %[[P]], %[[X]] :
// CHECK:       func.func @backward(%[[G:.*]]: tensor<4xf32>, %[[RP:.*]]: tensor<i1>, %[[RX:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[DX:.*]] = "thunder.cond"(%[[RP]]) ({
// CHECK-NEXT:      %[[E:.*]] = "thunder.exp"(%[[RX]])
// CHECK-NEXT:      %[[M:.*]] = "thunder.mul"(%[[G]], %[[E]])
// CHECK-NEXT:      "thunder.yield"(%[[M]])
// CHECK-NEXT:    }, {
// CHECK-NEXT:      "thunder.yield"(%[[G]])
// CHECK-NEXT:    })
// CHECK-NEXT:    return %[[DX]]
module @cond {
  func.func @computation(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.cond"(%p) ({
      %e = "thunder.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      "thunder.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }, {
      "thunder.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// checkpoint: the forward saves the checkpoint's input, not the intermediate sin (which
// `cos` in the backward would otherwise read); the backward recomputes it.
// CHECK-LABEL: module @checkpoint
// CHECK:       func.func @forward(%[[X:.*]]: tensor<4xf32>)
// CHECK:         "thunder.checkpoint"
// CHECK:         return %{{.*}}, %[[X]] : tensor<4xf32>, tensor<4xf32>
// CHECK:       func.func @backward(%[[G:.*]]: tensor<4xf32>, %[[RX:.*]]: tensor<4xf32>)
// CHECK-NOT:     thunder.checkpoint
// CHECK:         %[[S:.*]] = "thunder.sin"(%[[RX]])
// CHECK:         "thunder.cos"(%[[S]])
// CHECK:         "thunder.cos"(%[[RX]])
// CHECK:         return
module @checkpoint {
  func.func @computation(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.checkpoint"() ({
      %s = "thunder.sin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      %t = "thunder.sin"(%s) : (tensor<4xf32>) -> tensor<4xf32>
      "thunder.yield"(%t) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// stop_gradient: x * stop_gradient(x) differentiates only the first factor (torch's
// x * x.detach()); the backward multiplies the cotangent by x, not 2x.
// CHECK-LABEL: module @stop_gradient
// CHECK:       func.func @backward(%[[G:[a-z0-9]+]]: tensor<3xf32>, %[[X:[a-z0-9]+]]: tensor<3xf32>)
// CHECK-NEXT:    %[[R:.*]] = "thunder.mul"(%[[G]], %[[X]])
// CHECK-NEXT:    return %[[R]]
module @stop_gradient {
  func.func @computation(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "thunder.stop_gradient"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = "thunder.mul"(%x, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}

// -----

// no_derivative: the backward is built, and carries eager's error for the runtime to
// raise when it runs.
// CHECK-LABEL: module @no_derivative
// CHECK:       func.func @backward
// CHECK-SAME:    thunder.backward_error = "derivative for aten::floor_divide is not implemented"
module @no_derivative {
  func.func @computation(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "thunder.floor"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = "thunder.no_derivative"(%0) {message = "derivative for aten::floor_divide is not implemented"} : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}

// -----

// convolution's weight gradient with the input as the window when it is the smaller
// operand (a transposed convolution: the input padded by kernel - 1 on each side): a
// window of 3 products per output, not the cotangent's 5 over the padded input (3 of them
// zero), which XLA's contraction also rounds farther from eager (ConvTranspose3d).
// CHECK-LABEL: module @conv_transpose_weight_grad
// CHECK:       func.func @backward(%[[G:.*]]: tensor<1x4x5xf32>, %{{.*}}: tensor<4x2x3xf32>, %[[X:.*]]: tensor<1x2x3xf32>)
// CHECK:         %[[GT:.*]] = "thunder.transpose"(%[[G]]) {{.*}} -> tensor<4x1x5xf32>
// CHECK:         %[[XT:.*]] = "thunder.transpose"(%[[X]]) {{.*}} -> tensor<2x1x3xf32>
// CHECK:         %[[DW:.*]] = "thunder.convolution"(%[[GT]], %[[XT]]) {{.*}}padding = array<i64: 0, 0>{{.*}} -> tensor<4x2x3xf32>
// CHECK:         %[[R:.*]] = "thunder.reverse"(%[[DW]]) {dims = array<i64: 2>}
// CHECK:         return %{{.*}}, %[[R]]
module @conv_transpose_weight_grad {
  func.func @computation(%x: tensor<1x2x3xf32>, %w: tensor<4x2x3xf32>) -> tensor<1x4x5xf32> {
    %0 = "thunder.convolution"(%x, %w) {batch_group_count = 1 : i64, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 2, 2>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<1x2x3xf32>, tensor<4x2x3xf32>) -> tensor<1x4x5xf32>
    return %0 : tensor<1x4x5xf32>
  }
}

// -----

// a depthwise convolution (4 channels, 4 groups, 2 outputs per channel): each gradient is
// ONE convolution, the input's with feature groups (the kernel regrouped to 4 x 2), the
// weight's with batch groups (JAX's _conv_general_dilated_transpose_rhs), not one per group
// CHECK-LABEL: module @depthwise_conv_grad
// CHECK:       func.func @backward(
// CHECK:         "thunder.convolution"({{.*}}) {batch_group_count = 1 : i64, feature_group_count = 4 : i64{{.*}} : (tensor<2x8x5xf32>, tensor<4x2x3xf32>) -> tensor<2x4x5xf32>
// CHECK:         "thunder.convolution"({{.*}}) {batch_group_count = 4 : i64, feature_group_count = 1 : i64{{.*}} : (tensor<4x2x5xf32>, tensor<8x2x5xf32>) -> tensor<1x8x3xf32>
// CHECK-NOT:     "thunder.convolution"
// CHECK:         return
module @depthwise_conv_grad {
  func.func @computation(%x: tensor<2x4x5xf32>, %w: tensor<8x1x3xf32>) -> tensor<2x8x5xf32> {
    %0 = "thunder.convolution"(%x, %w) {batch_group_count = 1 : i64, feature_group_count = 4 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 1, 1>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<2x4x5xf32>, tensor<8x1x3xf32>) -> tensor<2x8x5xf32>
    return %0 : tensor<2x8x5xf32>
  }
}

// -----

// The forward/backward split: @forward returns the output, then the residuals (the two
// inputs); @backward takes the cotangent, then the residuals in the same order, and
// returns one gradient per input. The product x * w that log1p's VJP reads is
// rematerialized (a cheap mul of values saved anyway); without remat it is a third
// residual that the backward reads instead of recomputing.
// CHECK-LABEL: module @split
// CHECK:       func.func @forward(%[[X:[a-z0-9]+]]: tensor<3xf32>, %[[W:[a-z0-9]+]]: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
// CHECK-SAME:    thunder.num_outputs = 1
// CHECK-NEXT:    %[[P:.*]] = "thunder.mul"(%[[X]], %[[W]])
// CHECK-NEXT:    %[[Y:.*]] = "thunder.log1p"(%[[P]])
// CHECK-NEXT:    return %[[Y]], %[[W]], %[[X]] :
// CHECK:       func.func @backward(%[[G:[a-z0-9]+]]: tensor<3xf32>, %[[RW:[a-z0-9]+]]: tensor<3xf32>, %[[RX:[a-z0-9]+]]: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
// CHECK-SAME:    thunder.num_residuals = 2
// CHECK-NEXT:    %[[RP:.*]] = "thunder.mul"(%[[RX]], %[[RW]])
// CHECK-NEXT:    %[[ONE:.*]] = "thunder.full"()
// CHECK-NEXT:    %[[D:.*]] = "thunder.add"(%[[RP]], %[[ONE]])
// CHECK-NEXT:    %[[GP:.*]] = "thunder.div"(%[[G]], %[[D]])
// CHECK-NEXT:    %[[GX:.*]] = "thunder.mul"(%[[GP]], %[[RW]])
// CHECK-NEXT:    %[[GW:.*]] = "thunder.mul"(%[[GP]], %[[RX]])
// CHECK-NEXT:    return %[[GX]], %[[GW]]
// NOREMAT-LABEL: module @split
// NOREMAT:       func.func @forward(%[[X:[a-z0-9]+]]: tensor<3xf32>, %[[W:[a-z0-9]+]]: tensor<3xf32>)
// NOREMAT-NEXT:    %[[P:.*]] = "thunder.mul"(%[[X]], %[[W]])
// NOREMAT-NEXT:    %[[Y:.*]] = "thunder.log1p"(%[[P]])
// NOREMAT-NEXT:    return %[[Y]], %[[P]], %[[W]], %[[X]] :
// NOREMAT:       func.func @backward(%[[G:[a-z0-9]+]]: tensor<3xf32>, %[[RP:[a-z0-9]+]]: tensor<3xf32>, %[[RW:[a-z0-9]+]]: tensor<3xf32>, %[[RX:[a-z0-9]+]]: tensor<3xf32>)
// NOREMAT-SAME:    thunder.num_residuals = 3
// NOREMAT-NEXT:    %[[ONE:.*]] = "thunder.full"()
// NOREMAT-NEXT:    %[[D:.*]] = "thunder.add"(%[[RP]], %[[ONE]])
module @split {
  func.func @computation(%x: tensor<3xf32>, %w: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "thunder.mul"(%x, %w) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %1 = "thunder.log1p"(%0) : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}

// -----

// Rematerialization of a chain of cheap ops: tanh(exp(x)) saves only x (4 floats) and the
// backward recomputes exp and tanh from it; grad{remat=false} saves exp(x) and tanh(exp(x))
// (8 floats) and the backward computes neither.
// CHECK-LABEL: module @remat
// CHECK:       func.func @forward(%[[X:[a-z0-9]+]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         return %{{.*}}, %[[X]] : tensor<4xf32>, tensor<4xf32>
// CHECK:       func.func @backward(%[[G:[a-z0-9]+]]: tensor<4xf32>, %[[RX:[a-z0-9]+]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-SAME:    thunder.num_residuals = 1
// CHECK-NEXT:    %[[E:.*]] = "thunder.exp"(%[[RX]])
// CHECK-NEXT:    %[[T:.*]] = "thunder.tanh"(%[[E]])
// CHECK:         "thunder.mul"(%[[T]], %[[T]])
// CHECK:         return
// NOREMAT-LABEL: module @remat
// NOREMAT:       func.func @forward(%[[X:[a-z0-9]+]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// NOREMAT-NEXT:    %[[E:.*]] = "thunder.exp"(%[[X]])
// NOREMAT-NEXT:    %[[T:.*]] = "thunder.tanh"(%[[E]])
// NOREMAT-NEXT:    return %[[T]], %[[T]], %[[E]] :
// NOREMAT:       func.func @backward(%[[G:[a-z0-9]+]]: tensor<4xf32>, %[[RT:[a-z0-9]+]]: tensor<4xf32>, %[[RE:[a-z0-9]+]]: tensor<4xf32>) -> tensor<4xf32>
// NOREMAT-SAME:    thunder.num_residuals = 2
// NOREMAT-NOT:     thunder.exp
// NOREMAT-NOT:     thunder.tanh
// NOREMAT:         "thunder.mul"(%[[RT]], %[[RT]])
// NOREMAT-NOT:     thunder.exp
// NOREMAT:         "thunder.mul"(%{{.*}}, %[[RE]])
// NOREMAT-NEXT:    return
module @remat {
  func.func @computation(%x: tensor<4xf32>) -> tensor<4xf32> {
    %e = "thunder.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %y = "thunder.tanh"(%e) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// dynamic_index / dynamic_update_index (JAX's dynamic_slice / dynamic_update_slice
// transposes): x[i]'s cotangent goes to row i of zeros; x[i] = v gives x the cotangent
// with row i zeroed and v row i of it; the index gets none.
// CHECK-LABEL: module @dynamic_index
// CHECK:       func.func @backward(%[[G:.*]]: tensor<5x3xf32>, %[[I:.*]]: tensor<i64>, %[[U:.*]]: tensor<3xf32>, %[[XI:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[Z3:.*]] = "thunder.full"() {value = 0.000000e+00 : f64} : () -> tensor<3xf32>
// CHECK-NEXT:    %[[GX1:.*]] = "thunder.dynamic_update_index"(%[[G]], %[[Z3]], %[[I]])
// CHECK-NEXT:    %[[GV:.*]] = "thunder.dynamic_index"(%[[G]], %[[I]])
// CHECK-NEXT:    %[[GXI:.*]] = "thunder.mul"(%[[GV]], %[[U]])
// CHECK-NEXT:    %[[GU:.*]] = "thunder.mul"(%[[GV]], %[[XI]])
// CHECK-NEXT:    %[[Z53:.*]] = "thunder.full"() {value = 0.000000e+00 : f64} : () -> tensor<5x3xf32>
// CHECK-NEXT:    %[[GX2:.*]] = "thunder.dynamic_update_index"(%[[Z53]], %[[GXI]], %[[I]])
// CHECK-NEXT:    %[[GX:.*]] = "thunder.add"(%[[GX1]], %[[GX2]])
// CHECK-NEXT:    return %[[GX]], %[[GU]]
module @dynamic_index {
  func.func @computation(%x: tensor<5x3xf32>, %u: tensor<3xf32>, %i: tensor<i64>) -> tensor<5x3xf32> {
    %0 = "thunder.dynamic_index"(%x, %i) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<3xf32>
    %1 = "thunder.mul"(%0, %u) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %2 = "thunder.dynamic_update_index"(%x, %1, %i) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<3xf32>, tensor<i64>) -> tensor<5x3xf32>
    return %2 : tensor<5x3xf32>
  }
}

// -----

// Min-cut residual choice (torch's min_cut_rematerialization_partition): GPT-2's tanh GELU
// of h = log1p(x) (standing for a matmul, which is not recomputed). The backward reads h,
// the GELU's halves and its tanh; the smallest set they can all be recomputed from is h
// (with x for log1p's own VJP), so only those are saved, and the backward recomputes the
// chain from h (the full constants cost nothing to recompute). The greedy rule this
// replaced also saved the tanh's input: a mul by a constant had two operands not saved.
// CHECK-LABEL: module @min_cut_gelu
// CHECK:       func.func @forward(%[[X:[a-z0-9]+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[H:.*]] = "thunder.log1p"(%[[X]])
// CHECK:         return %{{.*}}, %[[H]], %[[X]] : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK:       func.func @backward(%{{[a-z0-9]+}}: tensor<4xf32>, %[[RH:[a-z0-9]+]]: tensor<4xf32>, %{{[a-z0-9]+}}: tensor<4xf32>)
// CHECK-SAME:    thunder.num_residuals = 2
// CHECK-NEXT:    "thunder.full"()
// CHECK-NEXT:    "thunder.mul"(%[[RH]],
// CHECK-NEXT:    "thunder.full"()
// CHECK-NEXT:    "thunder.pow"(%[[RH]],
module @min_cut_gelu {
  func.func @computation(%x: tensor<4xf32>) -> tensor<4xf32> {
    %h = "thunder.log1p"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %c0 = "thunder.full"() {value = 5.000000e-01 : f64} : () -> tensor<4xf32>
    %0 = "thunder.mul"(%h, %c0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %c1 = "thunder.full"() {value = 3.000000e+00 : f64} : () -> tensor<4xf32>
    %1 = "thunder.pow"(%h, %c1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %c2 = "thunder.full"() {value = 4.471500e-02 : f64} : () -> tensor<4xf32>
    %2 = "thunder.mul"(%1, %c2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "thunder.add"(%h, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %c3 = "thunder.full"() {value = 0.79788456080286541 : f64} : () -> tensor<4xf32>
    %4 = "thunder.mul"(%3, %c3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %5 = "thunder.tanh"(%4) : (tensor<4xf32>) -> tensor<4xf32>
    %c4 = "thunder.full"() {value = 1.000000e+00 : f64} : () -> tensor<4xf32>
    %6 = "thunder.add"(%5, %c4) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %7 = "thunder.mul"(%0, %6) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %y = "thunder.log1p"(%7) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
