// RUN: thunder-opt %s -p decompose | filecheck %s

// A composite is replaced by its body; block arguments become the operands.
// CHECK-LABEL: func.func @single
// CHECK-SAME:    (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<2x3xf32>)
// CHECK-NOT:     thunder.composite
// CHECK:         %[[SUM:.*]] = "thunder.add"(%[[A]], %[[B]])
// CHECK-NEXT:    return %[[SUM]]
func.func @single(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.composite"(%a, %b) ({
  ^bb0(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>):
    %s = "thunder.add"(%x, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "thunder.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>) -> ()
  }) {name = "ltorch.add", operandSegmentSizes = array<i32: 2, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// A composite nested in another one's decomposition is inlined too, in order.
// CHECK-LABEL: func.func @nested
// CHECK-SAME:    (%[[A:.*]]: tensor<4xf32>)
// CHECK-NOT:     thunder.composite
// CHECK:         %[[E:.*]] = "thunder.exp"(%[[A]])
// CHECK-NEXT:    %[[ONE:.*]] = "thunder.full"() {value = 1.000000e+00 : f64}
// CHECK-NEXT:    %[[P:.*]] = "thunder.add"(%[[E]], %[[ONE]])
// CHECK-NEXT:    %[[L:.*]] = "thunder.log"(%[[P]])
// CHECK-NEXT:    return %[[L]]
func.func @nested(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.composite"(%a) ({
  ^bb0(%x: tensor<4xf32>):
    %e = "thunder.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %p = "thunder.composite"(%e) ({
    ^bb0(%y: tensor<4xf32>):
      %one = "thunder.full"() {value = 1.0 : f64} : () -> tensor<4xf32>
      %s = "thunder.add"(%y, %one) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      "thunder.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }) {name = "ltorch.add", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %l = "thunder.log"(%p) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%l) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {name = "ltorch.softplus", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Mixed operand types (two type runs) and two results of different types.
// CHECK-LABEL: func.func @mixed_runs
// CHECK-SAME:    (%[[X:.*]]: tensor<3xf32>, %[[I:.*]]: tensor<3xi64>)
// CHECK-NOT:     thunder.composite
// CHECK:         %[[C:.*]] = "thunder.convert_element_type"(%[[I]]) : (tensor<3xi64>) -> tensor<3xf32>
// CHECK-NEXT:    %[[M:.*]] = "thunder.mul"(%[[X]], %[[C]])
// CHECK-NEXT:    %[[G:.*]] = "thunder.gt"(%[[M]], %[[X]])
// CHECK-NEXT:    return %[[M]], %[[G]] : tensor<3xf32>, tensor<3xi1>
func.func @mixed_runs(%x: tensor<3xf32>, %i: tensor<3xi64>) -> (tensor<3xf32>, tensor<3xi1>) {
  %0, %1 = "thunder.composite"(%x, %i) ({
  ^bb0(%a: tensor<3xf32>, %b: tensor<3xi64>):
    %c = "thunder.convert_element_type"(%b) : (tensor<3xi64>) -> tensor<3xf32>
    %m = "thunder.mul"(%a, %c) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %g = "thunder.gt"(%m, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
    "thunder.yield"(%m, %g) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<3xf32>, tensor<3xi1>) -> ()
  }) {name = "test.mul_gt", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<3xf32>, tensor<3xi64>) -> (tensor<3xf32>, tensor<3xi1>)
  return %0, %1 : tensor<3xf32>, tensor<3xi1>
}

// Prims and executor calls outside composites are left alone.
// CHECK-LABEL: func.func @no_composites
// CHECK:         "thunder.neg"
// CHECK-NEXT:    "thunder.executor_call"
// CHECK-SAME:      callee = "torch.cumprod"
// CHECK-NEXT:    return
func.func @no_composites(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "thunder.executor_call"(%0) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// Composites inside a control-flow region are inlined in place (the cond stays); a
// checkpoint is inlined like a composite (its effect on grad has been applied).
// CHECK-LABEL: func.func @regions
// CHECK-SAME:    (%[[P:.*]]: tensor<i1>, %[[A:.*]]: tensor<4xf32>)
// CHECK-NOT:     thunder.composite
// CHECK-NOT:     thunder.checkpoint
// CHECK:         %[[E:.*]] = "thunder.exp"(%[[A]])
// CHECK-NEXT:    %[[C:.*]] = "thunder.cond"(%[[P]]) ({
// CHECK-NEXT:      %[[N:.*]] = "thunder.neg"(%[[E]])
// CHECK-NEXT:      "thunder.yield"(%[[N]])
// CHECK-NEXT:    }, {
// CHECK-NEXT:      "thunder.yield"(%[[E]])
// CHECK-NEXT:    })
// CHECK-NEXT:    return %[[C]]
func.func @regions(%p: tensor<i1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.checkpoint"() ({
    %e = "thunder.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4xf32>
  %1 = "thunder.cond"(%p) ({
    %n = "thunder.composite"(%0) ({
    ^bb0(%x: tensor<4xf32>):
      %m = "thunder.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      "thunder.yield"(%m) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }) {name = "ltorch.neg", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%n) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }, {
    "thunder.yield"(%0) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
