// RUN: thunder-opt %s | thunder-opt | filecheck %s
// RUN: thunder-opt %s --mlir-print-debuginfo | thunder-opt --mlir-print-debuginfo | filecheck %s --check-prefix=LOC

// Round trip (print -> parse -> print) of every op of the thunder dialect: the checks are
// the printed form of each op, attributes and types included. tests/test_thunder_opt.py
// checks that this file covers every op in the dialect (PRIM_OPS and Thunder.operations).

// Locations survive printing and parsing.
// LOC: "thunder.abs"{{.*}} loc(#[[L:loc[0-9]*]])
// LOC: #[[L]] = loc("roundtrip.py":1:2)

// CHECK-LABEL: func.func @unary(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.abs"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.neg"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.exp"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.exp2"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.log"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.log2"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.log10"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.log1p"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.expm1"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sqrt"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.rsqrt"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cbrt"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sin"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cos"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.tan"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.asin"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.acos"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.atan"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sinh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cosh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.tanh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.asinh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.acosh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.atanh"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.logistic"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.floor"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.ceil"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.round"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.trunc"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sign"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bitwise_not"(%{{[a-z0-9#]+}}) : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.erf"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.erfc"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.erfinv"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.lgamma"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.digamma"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.isfinite"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.real"(%{{[a-z0-9#]+}}) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.imag"(%{{[a-z0-9#]+}}) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reciprocal"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.square"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<4xf32>
func.func @unary(%f: tensor<4xf32>, %i: tensor<4xi32>, %c: tensor<4xcomplex<f32>>) -> (tensor<4xf32>) {
  %0 = "thunder.abs"(%f) : (tensor<4xf32>) -> tensor<4xf32> loc("roundtrip.py":1:2)
  %1 = "thunder.neg"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "thunder.exp"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "thunder.exp2"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "thunder.log"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "thunder.log2"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %6 = "thunder.log10"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %7 = "thunder.log1p"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %8 = "thunder.expm1"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %9 = "thunder.sqrt"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %10 = "thunder.rsqrt"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %11 = "thunder.cbrt"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %12 = "thunder.sin"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %13 = "thunder.cos"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %14 = "thunder.tan"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %15 = "thunder.asin"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %16 = "thunder.acos"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %17 = "thunder.atan"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %18 = "thunder.sinh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %19 = "thunder.cosh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %20 = "thunder.tanh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %21 = "thunder.asinh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %22 = "thunder.acosh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %23 = "thunder.atanh"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %24 = "thunder.logistic"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %25 = "thunder.floor"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %26 = "thunder.ceil"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %27 = "thunder.round"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %28 = "thunder.trunc"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %29 = "thunder.sign"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %30 = "thunder.bitwise_not"(%i) : (tensor<4xi32>) -> tensor<4xi32>
  %31 = "thunder.erf"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %32 = "thunder.erfc"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %33 = "thunder.erfinv"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %34 = "thunder.lgamma"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %35 = "thunder.digamma"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %36 = "thunder.isfinite"(%f) : (tensor<4xf32>) -> tensor<4xi1>
  %37 = "thunder.real"(%c) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %38 = "thunder.imag"(%c) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %39 = "thunder.reciprocal"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  %40 = "thunder.square"(%f) : (tensor<4xf32>) -> tensor<4xf32>
  return %39 : tensor<4xf32>
}

// CHECK-LABEL: func.func @binary(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.add"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sub"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.mul"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.div"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.fmod"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.pow"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.maximum"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.minimum"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.atan2"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bitwise_and"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bitwise_or"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bitwise_xor"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.shift_left"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.shift_right_arithmetic"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.shift_right_logical"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.eq"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.ne"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.lt"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.le"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.gt"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.ge"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.nextafter"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<4xf32>
func.func @binary(%f: tensor<4xf32>, %i: tensor<4xi32>) -> (tensor<4xf32>) {
  %0 = "thunder.add"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "thunder.sub"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "thunder.mul"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "thunder.div"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = "thunder.fmod"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %5 = "thunder.pow"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %6 = "thunder.maximum"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %7 = "thunder.minimum"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %8 = "thunder.atan2"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %9 = "thunder.bitwise_and"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %10 = "thunder.bitwise_or"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %11 = "thunder.bitwise_xor"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %12 = "thunder.shift_left"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %13 = "thunder.shift_right_arithmetic"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %14 = "thunder.shift_right_logical"(%i, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %15 = "thunder.eq"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %16 = "thunder.ne"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %17 = "thunder.lt"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %18 = "thunder.le"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %19 = "thunder.gt"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %20 = "thunder.ge"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %21 = "thunder.nextafter"(%f, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @reductions(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_sum"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_prod"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_max"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_min"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_and"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_or"(%{{[a-z0-9#]+}}) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<2xf32>
func.func @reductions(%x: tensor<2x3xf32>, %p: tensor<2x3xi1>) -> (tensor<2xf32>) {
  %0 = "thunder.reduce_sum"(%x) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %1 = "thunder.reduce_prod"(%x) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %2 = "thunder.reduce_max"(%x) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %3 = "thunder.reduce_min"(%x) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %4 = "thunder.reduce_and"(%p) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
  %5 = "thunder.reduce_or"(%p) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
  return %0 : tensor<2xf32>
}

// CHECK-LABEL: func.func @structural(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.where"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.clamp"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.convert_element_type"(%{{[a-z0-9#]+}}) : (tensor<2x3xf32>) -> tensor<2x3xbf16>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bitcast"(%{{[a-z0-9#]+}}) : (tensor<2x3xf32>) -> tensor<2x3xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.broadcast_in_dim"(%{{[a-z0-9#]+}}) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reshape"(%{{[a-z0-9#]+}}) : (tensor<2x3xf32>) -> tensor<6xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.transpose"(%{{[a-z0-9#]+}}) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.slice"(%{{[a-z0-9#]+}}) {limit_indices = array<i64: 2, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reverse"(%{{[a-z0-9#]+}}) {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.pad"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {high = array<i64: 0, 1>, interior = array<i64: 0, 0>, low = array<i64: 1, -1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.iota"() {dimension = 0 : i64} : () -> tensor<5xi64>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.full"() {value = -1.500000e+00 : f64} : () -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.full"() {value = 7 : i64} : () -> tensor<2x3xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.constant"() {value = dense<[[1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.dot_general"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.take"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 0 : i64} : (tensor<3x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.take_along"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.index_add"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 0 : i64} : (tensor<3x4xf32>, tensor<5xi64>, tensor<5x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.take_along_add"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.argmax"(%{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2xi64>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.argmin"(%{{[a-z0-9#]+}}) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<3xi64>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cumsum"(%{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.concatenate"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dimension = 1 : i64, operandSegmentSizes = array<i32: 2, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x7xf32>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<2x3xf32>
func.func @structural(%x: tensor<2x3xf32>, %p: tensor<2x3xi1>, %s: tensor<f32>, %y: tensor<3x4xf32>, %idx: tensor<5xi64>, %idx2: tensor<2x3xi64>, %row: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.where"(%p, %x, %x) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "thunder.clamp"(%x, %x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "thunder.convert_element_type"(%x) : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %3 = "thunder.bitcast"(%x) : (tensor<2x3xf32>) -> tensor<2x3xi32>
  %4 = "thunder.broadcast_in_dim"(%row) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
  %5 = "thunder.reshape"(%x) : (tensor<2x3xf32>) -> tensor<6xf32>
  %6 = "thunder.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %7 = "thunder.slice"(%x) {limit_indices = array<i64: 2, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %8 = "thunder.reverse"(%x) {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %9 = "thunder.pad"(%x, %s) {high = array<i64: 0, 1>, interior = array<i64: 0, 0>, low = array<i64: 1, -1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %10 = "thunder.iota"() {dimension = 0 : i64} : () -> tensor<5xi64>
  %11 = "thunder.full"() {value = -1.500000e+00 : f64} : () -> tensor<2x3xf32>
  %12 = "thunder.full"() {value = 7 : i64} : () -> tensor<2x3xi32>
  %13 = "thunder.constant"() {value = dense<[[1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %14 = "thunder.dot_general"(%x, %y) {lhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 1>, rhs_batching_dimensions = array<i64>, rhs_contracting_dimensions = array<i64: 0>} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %15 = "thunder.take"(%y, %idx) {dim = 0 : i64} : (tensor<3x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  %16 = "thunder.take_along"(%x, %idx2) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %ia = "thunder.index_add"(%y, %idx, %15) {dim = 0 : i64} : (tensor<3x4xf32>, tensor<5xi64>, tensor<5x4xf32>) -> tensor<3x4xf32>
  %ta = "thunder.take_along_add"(%x, %idx2, %x) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %17 = "thunder.argmax"(%x) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2xi64>
  %18 = "thunder.argmin"(%x) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<3xi64>
  %19 = "thunder.cumsum"(%x) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %20 = "thunder.concatenate"(%x, %x, %7) {dimension = 1 : i64, operandSegmentSizes = array<i32: 2, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x7xf32>
  return %0 : tensor<2x3xf32>
}

// Prims of the scans, scatter, sort, convolution, windows, Cholesky, CHLO functions and
// random bits.
// CHECK-LABEL: func.func @extra_prims(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.bessel_i1e"(%{{[a-z0-9#]+}}) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.zeta"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.polygamma"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cumprod"(%{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cummax"(%{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cummin"(%{{[a-z0-9#]+}}) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.logcumsumexp"(%{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.scatter"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {kind = "add"} : (tensor<2x3xf32>, tensor<2x2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.argsort"(%{{[a-z0-9#]+}}) {descending = 1 : i64, dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xi64>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.convolution"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {batch_group_count = 1 : i64, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 1, 1>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<1x2x5xf32>, tensor<4x2x3xf32>) -> tensor<1x4x5xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.reduce_window"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {kind = "max", padding = array<i64: 0, 0, 0, 0, 0, 1>, window_dimensions = array<i64: 1, 1, 2>, window_strides = array<i64: 1, 1, 2>} : (tensor<1x2x5xf32>, tensor<f32>) -> tensor<1x2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cholesky"(%{{[a-z0-9#]+}}) {lower = 1 : i64} : (tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.triangular_solve"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {left_side = 1 : i64, lower = 1 : i64, transpose_a = 0 : i64, unit_diagonal = 0 : i64} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.rng_bits"(%{{[a-z0-9#]+}}) {stream = 3 : i64} : (tensor<i64>) -> tensor<2x3xi32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.stop_gradient"(%{{[a-z0-9#]+}}) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.no_derivative"(%{{[a-z0-9#]+}}) {message = "derivative for aten::floor_divide is not implemented"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<2x3xf32>
func.func @extra_prims(%x: tensor<2x3xf32>, %m: tensor<3x3xf32>, %coords: tensor<2x2xi64>, %upd: tensor<2xf32>, %img: tensor<1x2x5xf32>, %w: tensor<4x2x3xf32>, %s: tensor<f32>, %seed: tensor<i64>) -> tensor<2x3xf32> {
  %0 = "thunder.bessel_i1e"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "thunder.zeta"(%x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "thunder.polygamma"(%x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "thunder.cumprod"(%x) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "thunder.cummax"(%x) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = "thunder.cummin"(%x) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = "thunder.logcumsumexp"(%x) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = "thunder.scatter"(%x, %coords, %upd) {kind = "add"} : (tensor<2x3xf32>, tensor<2x2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
  %8 = "thunder.argsort"(%x) {descending = 1 : i64, dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xi64>
  %9 = "thunder.convolution"(%img, %w) {batch_group_count = 1 : i64, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 1, 1>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<1x2x5xf32>, tensor<4x2x3xf32>) -> tensor<1x4x5xf32>
  %10 = "thunder.reduce_window"(%img, %s) {kind = "max", padding = array<i64: 0, 0, 0, 0, 0, 1>, window_dimensions = array<i64: 1, 1, 2>, window_strides = array<i64: 1, 1, 2>} : (tensor<1x2x5xf32>, tensor<f32>) -> tensor<1x2x3xf32>
  %11 = "thunder.cholesky"(%m) {lower = 1 : i64} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %12 = "thunder.triangular_solve"(%m, %m) {left_side = 1 : i64, lower = 1 : i64, transpose_a = 0 : i64, unit_diagonal = 0 : i64} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %13 = "thunder.rng_bits"(%seed) {stream = 3 : i64} : (tensor<i64>) -> tensor<2x3xi32>
  %14 = "thunder.stop_gradient"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %15 = "thunder.no_derivative"(%x) {message = "derivative for aten::floor_divide is not implemented"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// composite (with a nested composite and mixed type runs), executor_call and yield.
// CHECK-LABEL: func.func @structure(
// CHECK-NEXT:  %{{[a-z0-9#]+}}:2 = "thunder.composite"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) ({
// CHECK-NEXT:  ^bb0(%{{[a-z0-9#]+}}: tensor<2x3xf32>, %{{[a-z0-9#]+}}: tensor<2x3xi64>):
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.composite"(%{{[a-z0-9#]+}}) ({
// CHECK-NEXT:  ^bb0(%{{[a-z0-9#]+}}: tensor<2x3xi64>):
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.convert_element_type"(%{{[a-z0-9#]+}}) : (tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>) -> ()
// CHECK-NEXT:  }) {dtype = "float32", name = "ltorch.to", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.mul"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.gt"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi1>) -> ()
// CHECK-NEXT:  }) {name = "test.mul_gt", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
// CHECK-NEXT:  %{{[a-z0-9#]+}}:2 = "thunder.executor_call"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {callee = "torch.sort", executor = "torch", impl = @torch.sort$3, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
// CHECK-NEXT:  return %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}} : tensor<2x3xf32>, tensor<2x3xi1>
func.func @structure(%x: tensor<2x3xf32>, %i: tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi1>) {
  %0:2 = "thunder.composite"(%x, %i) ({
  ^bb0(%a: tensor<2x3xf32>, %b: tensor<2x3xi64>):
    %c = "thunder.composite"(%b) ({
    ^bb0(%d: tensor<2x3xi64>):
      %e = "thunder.convert_element_type"(%d) : (tensor<2x3xi64>) -> tensor<2x3xf32>
      "thunder.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>) -> ()
    }) {dtype = "float32", name = "ltorch.to", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xi64>) -> tensor<2x3xf32>
    %m = "thunder.mul"(%a, %c) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %g = "thunder.gt"(%m, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    "thunder.yield"(%m, %g) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi1>) -> ()
  }) {name = "test.mul_gt", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  %1:2 = "thunder.executor_call"(%0#0, %i) {callee = "torch.sort", executor = "torch", impl = @torch.sort$3, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
  return %1#0, %0#1 : tensor<2x3xf32>, tensor<2x3xi1>
}

// Higher-order ops: cond (regions capture from above), while (carried values as block
// arguments, mixed type runs) and checkpoint.
// CHECK-LABEL: func.func @higher_order(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cond"(%{{[a-z0-9#]+}}) ({
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.cos"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
// CHECK-NEXT:  }, {
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
// CHECK-NEXT:  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}}:2 = "thunder.while"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) ({
// CHECK-NEXT:  ^bb0(%{{[a-z0-9#]+}}: tensor<i64>, %{{[a-z0-9#]+}}: tensor<4xf32>):
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.lt"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<i64>, tensor<i64>) -> tensor<i1>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> ()
// CHECK-NEXT:  }, {
// CHECK-NEXT:  ^bb0(%{{[a-z0-9#]+}}: tensor<i64>, %{{[a-z0-9#]+}}: tensor<4xf32>):
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sin"(%{{[a-z0-9#]+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> ()
// CHECK-NEXT:  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> (tensor<i64>, tensor<4xf32>)
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.checkpoint"() ({
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.exp"(%{{[a-z0-9#]+}}#1) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:  "thunder.yield"(%{{[a-z0-9#]+}}) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
// CHECK-NEXT:  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4xf32>
// CHECK-NEXT:  return
func.func @higher_order(%p: tensor<i1>, %x: tensor<4xf32>, %n: tensor<i64>) -> (tensor<4xf32>, tensor<i64>) {
  %0 = "thunder.cond"(%p) ({
    %a = "thunder.cos"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }, {
    "thunder.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
  %1:2 = "thunder.while"(%n, %0) ({
  ^bb0(%i: tensor<i64>, %y: tensor<4xf32>):
    %c = "thunder.lt"(%i, %n) : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "thunder.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i64>, %y: tensor<4xf32>):
    %z = "thunder.sin"(%y) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%i, %z) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> (tensor<i64>, tensor<4xf32>)
  %2 = "thunder.checkpoint"() ({
    %e = "thunder.exp"(%1#1) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4xf32>
  return %2, %1#0 : tensor<4xf32>, tensor<i64>
}

// Run-time indexing along a dim (scan's loop body: dim 0; a KV-cache slot: the sequence dim).
// CHECK-LABEL: func.func @dynamic_indexing(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.dynamic_index"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<3xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.dynamic_index"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<5xf32>
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.dynamic_update_index"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {dim = 1 : i64} : (tensor<5x3xf32>, tensor<5xf32>, tensor<i64>) -> tensor<5x3xf32>
func.func @dynamic_indexing(%x: tensor<5x3xf32>, %i: tensor<i64>) -> tensor<5x3xf32> {
  %0 = "thunder.dynamic_index"(%x, %i) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<3xf32>
  %c = "thunder.dynamic_index"(%x, %i) {dim = 1 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<5xf32>
  %1 = "thunder.dynamic_update_index"(%x, %c, %i) {dim = 1 : i64} : (tensor<5x3xf32>, tensor<5xf32>, tensor<i64>) -> tensor<5x3xf32>
  return %1 : tensor<5x3xf32>
}

// shardings (ir/sharding.py): thunder.mesh on the function, thunder.sharding on arguments
// and results, and the sharding_constraint prim.
// CHECK-LABEL: func.func @shardings(
// CHECK-SAME:  {thunder.sharding = "[{data}, {}]"}
// CHECK-SAME:  -> (tensor<8x4xf32> {thunder.sharding = "[{data}, {model}]"})
// CHECK-SAME:  attributes {thunder.mesh = "[data=2, model=4]"}
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.sharding_constraint"(%{{[a-z0-9#]+}}) {mesh = "[data=2, model=4]", spec = "[{}, {model}]"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:  return %{{[a-z0-9#]+}} : tensor<8x4xf32>
func.func @shardings(%x: tensor<8x4xf32> {thunder.sharding = "[{data}, {}]"}) -> (tensor<8x4xf32> {thunder.sharding = "[{data}, {model}]"}) attributes {thunder.mesh = "[data=2, model=4]"} {
  %0 = "thunder.sharding_constraint"(%x) {mesh = "[data=2, model=4]", spec = "[{}, {model}]"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// after (grad's recomputation in a joint program): x's value, once the anchor exists.
// CHECK-LABEL: func.func @after(
// CHECK-NEXT:  %{{[a-z0-9#]+}} = "thunder.after"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>
func.func @after(%x: tensor<4x3xf32>, %a: tensor<2xi64>) -> tensor<4x3xf32> {
  %0 = "thunder.after"(%x, %a) : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// cuDNN's fused attention (ir/cudnn_attention.py): several results of different types.
// CHECK-LABEL: func.func @cudnn_attention(
// CHECK-NEXT:  %{{[a-z0-9#]+}}:2 = "thunder.cudnn_attention"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {causal = 1 : i64, scale = 2.500000e-01 : f64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
// CHECK-NEXT:  %{{[a-z0-9#]+}}:3 = "thunder.cudnn_attention_backward"(%{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}, %{{[a-z0-9#]+}}) {causal = 1 : i64, scale = 2.500000e-01 : f64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
func.func @cudnn_attention(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x2x8x16xbf16>, %g: tensor<1x4x8x16xbf16>) -> tensor<1x2x8x16xbf16> {
  %out, %lse = "thunder.cudnn_attention"(%q, %k, %v) {scale = 0.25 : f64, causal = 1 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
  %dq, %dk, %dv = "thunder.cudnn_attention_backward"(%q, %k, %v, %out, %lse, %g) {scale = 0.25 : f64, causal = 1 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  return %dk : tensor<1x2x8x16xbf16>
}
