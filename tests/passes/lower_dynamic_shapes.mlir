// RUN: thunder-opt %s -p lower-to-stablehlo | filecheck %s

// Symbolic sizes (ir/symbolic.py): `?` dims, whose expressions ride on `thunder.arg_shapes`
// (arguments) and `thunder.shape` (op results). A size symbol is read once with
// get_dimension_size; ops whose shape is an operand take their dynamic forms.
// CHECK-LABEL: func.func @bias_add
// CHECK-SAME:    (%[[X:.*]]: tensor<?x4xf32>, %[[B:.*]]: tensor<4xf32>) -> tensor<?x4xf32>
// CHECK-NOT:     "thunder.
// CHECK:         %[[N:.*]] = stablehlo.get_dimension_size %[[X]], dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
// CHECK-NEXT:    %[[N64:.*]] = stablehlo.convert %[[N]] : (tensor<i32>) -> tensor<i64>
// CHECK:         %[[D0:.*]] = stablehlo.reshape %[[N64]] : (tensor<i64>) -> tensor<1xi64>
// CHECK:         %[[SHAPE:.*]] = stablehlo.concatenate %[[D0]], %{{.*}}, dim = 0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
// CHECK-NEXT:    %[[BB:.*]] = stablehlo.dynamic_broadcast_in_dim %[[B]], %[[SHAPE]], dims = [1] : (tensor<4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
// CHECK-NEXT:    %[[S:.*]] = stablehlo.add %[[X]], %[[BB]] : tensor<?x4xf32>
// CHECK-NEXT:    return %[[S]]
func.func @bias_add(%x: tensor<?x4xf32>, %b: tensor<4xf32>) -> tensor<?x4xf32> attributes {thunder.arg_shapes = [["s0", "4"], ["4"]]} {
  %0 = "thunder.broadcast_in_dim"(%b) {broadcast_dimensions = array<i64: 1>, thunder.shape = ["s0", "4"]} : (tensor<4xf32>) -> tensor<?x4xf32>
  %1 = "thunder.add"(%x, %0) {thunder.shape = ["s0", "4"]} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %1 : tensor<?x4xf32>
}

// A size expression: 2*s0 rows (a reshape of s0 x 2 x 3), computed from the symbol.
// CHECK-LABEL: func.func @merge_rows
// CHECK:         %[[N:.*]] = stablehlo.get_dimension_size %{{.*}}, dim = 0
// CHECK-NEXT:    %[[N64:.*]] = stablehlo.convert %[[N]]
// CHECK:         %[[TWO:.*]] = stablehlo.constant dense<2> : tensor<i64>
// CHECK-NEXT:    %[[ROWS:.*]] = stablehlo.multiply %[[TWO]], %[[N64]] : tensor<i64>
// CHECK:         stablehlo.dynamic_reshape %{{.*}}, %{{.*}} : (tensor<?x2x3xf32>, tensor<2xi64>) -> tensor<?x3xf32>
func.func @merge_rows(%x: tensor<?x2x3xf32>) -> tensor<?x3xf32> attributes {thunder.arg_shapes = [["s0", "2", "3"]]} {
  %0 = "thunder.reshape"(%x) {thunder.shape = ["2*s0", "3"]} : (tensor<?x2x3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}
