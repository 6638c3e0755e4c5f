// RUN: thunder-opt %s -p 'grad{remat=true}' | filecheck %s --check-prefix=REMAT
// RUN: thunder-opt %s -p 'grad{remat=true save-materialized=true}' | filecheck %s --check-prefix=SAVE

// A gated MLP, down(silu(gate(x)) * up(x)): the product is the down projection's operand,
// read again by the backward's weight-gradient gemm. The fewest bytes (remat) save gate and
// up only and recompute the product in the backward, where the gemm makes XLA write it to
// memory a second time; save-materialized (the GPU target's choice, torch's partitioner's
// ban_if_materialized_backward) saves it, and the backward's gemm reads the residual.
// REMAT-LABEL: func.func @backward
// REMAT-SAME:    thunder.num_residuals = 6
// REMAT:         %[[P:[0-9]+]] = "thunder.mul"(%{{[0-9]+}}, %arg{{[0-9]+}}) {thunder.recomputed}
// REMAT:         "thunder.dot_general"(%arg0, %[[P]]) {{.*}}lhs_contracting_dimensions = array<i64: 0>
// SAVE-LABEL:  func.func @backward
// SAVE-SAME:     thunder.num_residuals = 7
// SAVE-NOT:      "thunder.dot_general"(%arg0, %{{[0-9]+}})
// SAVE:          "thunder.dot_general"(%arg0, %arg{{[0-9]+}}) {{.*}}lhs_contracting_dimensions = array<i64: 0>
func.func @computation(%x: tensor<8x16xf32>, %wg: tensor<16x64xf32>, %wu: tensor<16x64xf32>, %wd: tensor<64x16xf32>) -> tensor<8x16xf32> {
  %g = "thunder.dot_general"(%x, %wg) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<8x16xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  %u = "thunder.dot_general"(%x, %wu) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<8x16xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  %s = "thunder.logistic"(%g) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %a = "thunder.mul"(%g, %s) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %p = "thunder.mul"(%a, %u) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %y = "thunder.dot_general"(%p, %wd) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<8x64xf32>, tensor<64x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
