// RUN: thunder-opt %s -p partition --split-input-file | filecheck %s

// Without executor calls the whole program is one region, called from @computation.
// CHECK-LABEL: module @all_xla
// CHECK:       func.func @computation(%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[R:.*]] = call @xla_region_0(%[[A]], %[[B]])
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @xla_region_0(%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[S:.*]] = "thunder.add"(%[[X]], %[[Y]])
// CHECK-NEXT:    %[[E:.*]] = "thunder.exp"(%[[S]])
// CHECK-NEXT:    return %[[E]]
// CHECK-NOT:   xla_region_1
module @all_xla {
  func.func @computation(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %1 = "thunder.exp"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}

// -----

// An executor call in the middle splits the program into two regions, and the plan runs
// region 0, the executor call, region 1. The constant (thunder.full) is only used after
// the call, so it sinks into region 1 instead of being an output of region 0.
// CHECK-LABEL: module @executor_in_middle
// CHECK:       func.func @computation(%[[A:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[R0:.*]] = call @xla_region_0(%[[A]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[E:.*]] = "thunder.executor_call"(%[[R0]]) {callee = "torch.cumprod"
// CHECK-NEXT:    %[[R1:.*]] = call @xla_region_1(%[[E]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return %[[R1]]
// CHECK:       func.func private @xla_region_0(%[[X:.*]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = "thunder.neg"(%[[X]])
// CHECK-NEXT:    return %[[N]]
// CHECK:       func.func private @xla_region_1(%[[Y:.*]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[C:.*]] = "thunder.full"() {value = 1.000000e+00 : f64}
// CHECK-NEXT:    %[[S:.*]] = "thunder.add"(%[[Y]], %[[C]])
// CHECK-NEXT:    return %[[S]]
module @executor_in_middle {
  func.func @computation(%a: tensor<4xf32>) -> tensor<4xf32> {
    %one = "thunder.full"() {value = 1.0 : f64} : () -> tensor<4xf32>
    %0 = "thunder.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "thunder.executor_call"(%0) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "thunder.add"(%1, %one) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %2 : tensor<4xf32>
  }
}

// -----

// XLA ops that do not depend on the executor call stay in region 0, even when written
// after it; a value used on both sides is an output of region 0 and an input of region 1.
// CHECK-LABEL: module @independent_ops_stay_early
// CHECK:       func.func @computation(%[[A:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[R0:.*]]:2 = call @xla_region_0(%[[A]]) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT:    %[[E:.*]] = "thunder.executor_call"(%[[A]])
// CHECK-NEXT:    %[[R1:.*]] = call @xla_region_1(%[[R0]]#0, %[[E]], %[[R0]]#1)
// CHECK-NEXT:    return %[[R1]]
// CHECK:       func.func private @xla_region_0
// CHECK-NEXT:    "thunder.exp"
// CHECK-NEXT:    "thunder.sin"
// CHECK-NEXT:    return
// CHECK:       func.func private @xla_region_1
// CHECK-NEXT:    "thunder.add"
// CHECK-NEXT:    "thunder.mul"
// CHECK-NEXT:    return
module @independent_ops_stay_early {
  func.func @computation(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "thunder.executor_call"(%a) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "thunder.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "thunder.sin"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %4 = "thunder.mul"(%2, %3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %4 : tensor<4xf32>
  }
}

// -----

// Two chained executor calls need three regions.
// CHECK-LABEL: module @two_executor_calls
// CHECK:       call @xla_region_0
// CHECK-NEXT:  "thunder.executor_call"{{.*}}callee = "torch.first"
// CHECK-NEXT:  call @xla_region_1
// CHECK-NEXT:  "thunder.executor_call"{{.*}}callee = "torch.second"
// CHECK-NEXT:  call @xla_region_2
// CHECK:       func.func private @xla_region_0
// CHECK:       func.func private @xla_region_1
// CHECK:       func.func private @xla_region_2
module @two_executor_calls {
  func.func @computation(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "thunder.executor_call"(%0) {callee = "torch.first", executor = "torch", impl = @torch.first$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "thunder.exp"(%1) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "thunder.executor_call"(%2) {callee = "torch.second", executor = "torch", impl = @torch.second$1, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %4 = "thunder.abs"(%3) : (tensor<4xf32>) -> tensor<4xf32>
    return %4 : tensor<4xf32>
  }
}

// -----

// Only @computation is partitioned; other functions are left as they are.
// CHECK-LABEL: module @other_functions_untouched
// CHECK:       func.func @helper
// CHECK-NEXT:    "thunder.neg"
// CHECK-NEXT:    return
// CHECK-NOT:   xla_region
module @other_functions_untouched {
  func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "thunder.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// A cond moves into a region function whole; what its branches capture from above (%b,
// the executor call's result) becomes an input of that region, so the cond runs after
// the executor call (region 0, before it, is empty).
// CHECK-LABEL: module @cond_captures
// CHECK:       func.func @computation(%[[P:.*]]: tensor<i1>, %[[A:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[E:.*]] = "thunder.executor_call"(%[[A]])
// CHECK-NEXT:    %[[R:.*]] = call @xla_region_1(%[[P]], %[[E]], %[[A]])
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @xla_region_1(%[[Q:.*]]: tensor<i1>, %[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[C:.*]] = "thunder.cond"(%[[Q]]) ({
// CHECK-NEXT:      %[[S:.*]] = "thunder.sin"(%[[X]])
// CHECK-NEXT:      "thunder.yield"(%[[S]])
// CHECK-NEXT:    }, {
// CHECK-NEXT:      "thunder.yield"(%[[Y]])
// CHECK-NEXT:    })
// CHECK-NEXT:    return %[[C]]
module @cond_captures {
  func.func @computation(%p: tensor<i1>, %a: tensor<4xf32>) -> tensor<4xf32> {
    %b = "thunder.executor_call"(%a) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
    %0 = "thunder.cond"(%p) ({
      %s = "thunder.sin"(%b) : (tensor<4xf32>) -> tensor<4xf32>
      "thunder.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }, {
      "thunder.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
    }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
