// RUN: not thunder-opt %s 2>&1 | filecheck %s
// A sharding_constraint whose spec does not fit its operand is rejected by the prim
// verifier (its PrimDef inference runs ir/sharding.py check_spec).
// CHECK: thunder-opt: error: invalid IR in '{{.*}}verify_sharding_invalid.mlir'
// CHECK-NEXT: {{.*}}verify_sharding_invalid.mlir:{{[0-9]+}}:8: error: 'thunder.sharding_constraint' op sharding [{data}] of shape (12,): dimension of size 12 does not split evenly over 8 devices
// CHECK-NOT: Traceback
func.func @c(%a: tensor<12xf32>) -> tensor<12xf32> {
  %0 = "thunder.sharding_constraint"(%a) {mesh = "[data=8]", spec = "[{data}]"} : (tensor<12xf32>) -> tensor<12xf32>
  return %0 : tensor<12xf32>
}
