// RUN: thunder-opt %s -p grad,joint | filecheck %s

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
