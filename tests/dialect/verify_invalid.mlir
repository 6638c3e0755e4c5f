// RUN: not thunder-opt %s 2>&1 | filecheck %s
// A prim whose operand types its PrimDef inference rejects: thunder-opt's prim verifier
// (primdef.verify_prim_ops) reports it with the op's location, as mlir-opt's verifier does.
// CHECK: thunder-opt: error: invalid IR in '{{.*}}verify_invalid.mlir'
// CHECK-NEXT: {{.*}}verify_invalid.mlir:10:8: error: 'thunder.add' op operands differ: (2,)/torch.float32 vs (3,)/torch.float32 (operands: tensor<2xf32>, tensor<3xf32>; result: tensor<2xf32>)
// CHECK-NOT: Traceback
func.func @f(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {
  // the op below is line 10
  // (two comment lines keep the numbers readable)
  %0 = "thunder.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
