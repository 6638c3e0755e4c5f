// RUN: thunder-opt %s -p lower-to-stablehlo | filecheck %s

// One case per prim not exercised in lower_to_stablehlo.mlir, so that every prim's
// lowering (PrimDef.lower, ir/prim_defs.py) is pinned to the StableHLO/CHLO op(s) it emits
// (tests/test_prim_completeness.py checks that every prim has a case in one of the two
// files). The op lines come from tests/dialect/roundtrip.mlir.

// CHECK-LABEL: func.func @exp(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.exponential [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @exp(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.exp"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @log(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.log [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @log(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.log"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @log2(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.log [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    [[V2:%[a-z_0-9]+]] = stablehlo.constant dense<0.693147182> : tensor<4xf32>
// CHECK-NEXT:    [[V3:%[a-z_0-9]+]] = stablehlo.divide [[V0]], [[V2]] : tensor<4xf32>
// CHECK-NEXT:    return [[V3]] : tensor<4xf32>
func.func @log2(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.log2"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @log10(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.log [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    [[V2:%[a-z_0-9]+]] = stablehlo.constant dense<2.30258512> : tensor<4xf32>
// CHECK-NEXT:    [[V3:%[a-z_0-9]+]] = stablehlo.divide [[V0]], [[V2]] : tensor<4xf32>
// CHECK-NEXT:    return [[V3]] : tensor<4xf32>
func.func @log10(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.log10"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @log1p(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.log_plus_one [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @log1p(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.log1p"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @expm1(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.exponential_minus_one [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @expm1(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.expm1"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @sqrt(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.sqrt [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @sqrt(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.sqrt"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @rsqrt(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.rsqrt [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @rsqrt(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.rsqrt"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @cbrt(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.cbrt [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @cbrt(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.cbrt"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @tan(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.tan [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @tan(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.tan"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @asin(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.asin"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @asin(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.asin"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @acos(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.acos"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @acos(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.acos"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @atan(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.atan"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @atan(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.atan"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @sinh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.sinh"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @sinh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.sinh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @cosh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.cosh"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @cosh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.cosh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @tanh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.tanh [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @tanh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.tanh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @asinh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.asinh"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @asinh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.asinh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @acosh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.acosh"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @acosh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.acosh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @atanh(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.atanh"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @atanh(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.atanh"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @logistic(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.logistic [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @logistic(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.logistic"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @floor(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.floor [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @floor(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.floor"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @ceil(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.ceil [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @ceil(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.ceil"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @round(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.round_nearest_even [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @round(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.round"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @trunc(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.compare LT, [[V2:%[a-z_0-9]+]], [[V0]], FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    [[V3:%[a-z_0-9]+]] = stablehlo.ceil [[V2]] : tensor<4xf32>
// CHECK-NEXT:    [[V4:%[a-z_0-9]+]] = stablehlo.floor [[V2]] : tensor<4xf32>
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.select [[V1]], [[V3]], [[V4]] : tensor<4xi1>, tensor<4xf32>
// CHECK-NEXT:    return [[V5]] : tensor<4xf32>
func.func @trunc(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.trunc"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @sign(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.sign [[V1:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @sign(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.sign"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @bitwise_not(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.not [[V1:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @bitwise_not(%a0: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.bitwise_not"(%a0) : (tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @erfc(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.erfc"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @erfc(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.erfc"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @erfinv(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.erf_inv"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @erfinv(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.erfinv"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @digamma(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.digamma"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @digamma(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.digamma"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @isfinite(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.is_finite [[V1:%[a-z_0-9]+]] : (tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    return [[V0]] : tensor<4xi1>
func.func @isfinite(%a0: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "thunder.isfinite"(%a0) : (tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// CHECK-LABEL: func.func @real(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.real [[V1:%[a-z_0-9]+]] : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @real(%a0: tensor<4xcomplex<f32>>) -> tensor<4xf32> {
  %0 = "thunder.real"(%a0) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @imag(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.imag [[V1:%[a-z_0-9]+]] : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @imag(%a0: tensor<4xcomplex<f32>>) -> tensor<4xf32> {
  %0 = "thunder.imag"(%a0) : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @reciprocal(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.divide [[V0]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V1]] : tensor<4xf32>
func.func @reciprocal(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.reciprocal"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @sub(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.subtract [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @sub(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.sub"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @div(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.divide [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @div(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.div"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @fmod(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.remainder [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @fmod(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.fmod"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @pow(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.power [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @pow(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.pow"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @maximum(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.maximum [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @maximum(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.maximum"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @minimum(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.minimum [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @minimum(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.minimum"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @atan2(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.atan2 [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @atan2(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.atan2"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @bitwise_and(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.and [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @bitwise_and(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.bitwise_and"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @bitwise_or(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.or [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @bitwise_or(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.bitwise_or"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @bitwise_xor(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.xor [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @bitwise_xor(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.bitwise_xor"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @shift_left(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.shift_left [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @shift_left(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.shift_left"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @shift_right_arithmetic(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.shift_right_arithmetic [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @shift_right_arithmetic(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.shift_right_arithmetic"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @shift_right_logical(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.shift_right_logical [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]] : tensor<4xi32>
// CHECK-NEXT:    return [[V0]] : tensor<4xi32>
func.func @shift_right_logical(%a0: tensor<4xi32>, %a1: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "thunder.shift_right_logical"(%a0, %a1) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// CHECK-LABEL: func.func @eq(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.compare EQ, [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    return [[V0]] : tensor<4xi1>
func.func @eq(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "thunder.eq"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// CHECK-LABEL: func.func @le(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.compare LE, [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    return [[V0]] : tensor<4xi1>
func.func @le(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "thunder.le"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// CHECK-LABEL: func.func @gt(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.compare GT, [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    return [[V0]] : tensor<4xi1>
func.func @gt(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "thunder.gt"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// CHECK-LABEL: func.func @nextafter(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.next_after"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @nextafter(%a0: tensor<4xf32>, %a1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.nextafter"(%a0, %a1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @reduce_prod(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.reduce([[V2:%[a-z_0-9]+]] init: [[V0]]) applies stablehlo.multiply across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2xf32>
func.func @reduce_prod(%a0: tensor<2x3xf32>) -> tensor<2xf32> {
  %0 = "thunder.reduce_prod"(%a0) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// CHECK-LABEL: func.func @reduce_min(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<0x7F800000> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.reduce([[V2:%[a-z_0-9]+]] init: [[V0]]) applies stablehlo.minimum across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2xf32>
func.func @reduce_min(%a0: tensor<2x3xf32>) -> tensor<2xf32> {
  %0 = "thunder.reduce_min"(%a0) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// CHECK-LABEL: func.func @reduce_or(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<false> : tensor<i1>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.reduce([[V2:%[a-z_0-9]+]] init: [[V0]]) applies stablehlo.or across dimensions = [1] : (tensor<2x3xi1>, tensor<i1>) -> tensor<2xi1>
// CHECK-NEXT:    return [[V1]] : tensor<2xi1>
func.func @reduce_or(%a0: tensor<2x3xi1>) -> tensor<2xi1> {
  %0 = "thunder.reduce_or"(%a0) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
  return %0 : tensor<2xi1>
}

// CHECK-LABEL: func.func @clamp(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.clamp [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], [[V3:%[a-z_0-9]+]] : tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @clamp(%a0: tensor<2x3xf32>, %a1: tensor<2x3xf32>, %a2: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.clamp"(%a0, %a1, %a2) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @bitcast(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.bitcast_convert [[V1:%[a-z_0-9]+]] : (tensor<2x3xf32>) -> tensor<2x3xi32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xi32>
func.func @bitcast(%a0: tensor<2x3xf32>) -> tensor<2x3xi32> {
  %0 = "thunder.bitcast"(%a0) : (tensor<2x3xf32>) -> tensor<2x3xi32>
  return %0 : tensor<2x3xi32>
}

// CHECK-LABEL: func.func @slice(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.slice [[V1:%[a-z_0-9]+]] [0:2, 1:3:2] : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x1xf32>
func.func @slice(%a0: tensor<2x3xf32>) -> tensor<2x1xf32> {
  %0 = "thunder.slice"(%a0) {limit_indices = array<i64: 2, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// CHECK-LABEL: func.func @reverse(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.reverse [[V1:%[a-z_0-9]+]], dims = [0] : tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @reverse(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.reverse"(%a0) {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @pad(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.pad [[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], low = [1, -1], high = [0, 1], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<3x3xf32>
func.func @pad(%a0: tensor<2x3xf32>, %a1: tensor<f32>) -> tensor<3x3xf32> {
  %0 = "thunder.pad"(%a0, %a1) {high = array<i64: 0, 1>, interior = array<i64: 0, 0>, low = array<i64: 1, -1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// CHECK-LABEL: func.func @take_along(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.gather"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}> : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @take_along(%a0: tensor<2x3xf32>, %a1: tensor<2x3xi64>) -> tensor<2x3xf32> {
  %0 = "thunder.take_along"(%a0, %a1) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @index_add(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.scatter"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], [[V3:%[a-z_0-9]+]]) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
// CHECK-NEXT:    ^bb0([[V4:%[a-z_0-9]+]]: tensor<f32>, [[V5:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V6:%[a-z_0-9]+]] = stablehlo.add [[V4]], [[V5]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V6]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<3x4xf32>, tensor<5xi64>, tensor<5x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<3x4xf32>
func.func @index_add(%a0: tensor<3x4xf32>, %a1: tensor<5xi64>, %a2: tensor<5x4xf32>) -> tensor<3x4xf32> {
  %0 = "thunder.index_add"(%a0, %a1, %a2) {dim = 0 : i64} : (tensor<3x4xf32>, tensor<5xi64>, tensor<5x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// CHECK-LABEL: func.func @take_along_add(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.scatter"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], [[V3:%[a-z_0-9]+]]) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [1], input_batching_dims = [0], scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1], index_vector_dim = 2>, unique_indices = false}> ({
// CHECK-NEXT:    ^bb0([[V4:%[a-z_0-9]+]]: tensor<f32>, [[V5:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V6:%[a-z_0-9]+]] = stablehlo.add [[V4]], [[V5]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V6]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @take_along_add(%a0: tensor<2x3xf32>, %a1: tensor<2x3xi64>, %a2: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.take_along_add"(%a0, %a1, %a2) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @argmin(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.iota dim = 0 : tensor<2x3xi64>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = stablehlo.constant dense<0x7F800000> : tensor<f32>
// CHECK-NEXT:    [[V2:%[a-z_0-9]+]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK-NEXT:    [[V3:%[a-z_0-9]+]]:2 = stablehlo.reduce([[V4:%[a-z_0-9]+]] init: [[V1]]), ([[V0]] init: [[V2]]) across dimensions = [0] : (tensor<2x3xf32>, tensor<2x3xi64>, tensor<f32>, tensor<i64>) -> (tensor<3xf32>, tensor<3xi64>)
// CHECK-NEXT:    reducer([[V5:%[a-z_0-9]+]]: tensor<f32>, [[V6:%[a-z_0-9]+]]: tensor<f32>) ([[V7:%[a-z_0-9]+]]: tensor<i64>, [[V8:%[a-z_0-9]+]]: tensor<i64>)  {
// CHECK-NEXT:    [[V9:%[a-z_0-9]+]] = stablehlo.compare LT, [[V5]], [[V6]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V10:%[a-z_0-9]+]] = stablehlo.compare NE, [[V5]], [[V5]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V11:%[a-z_0-9]+]] = stablehlo.or [[V9]], [[V10]] : tensor<i1>
// CHECK-NEXT:    [[V12:%[a-z_0-9]+]] = stablehlo.compare EQ, [[V5]], [[V6]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V13:%[a-z_0-9]+]] = stablehlo.compare LT, [[V7]], [[V8]], SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
// CHECK-NEXT:    [[V14:%[a-z_0-9]+]] = stablehlo.and [[V12]], [[V13]] : tensor<i1>
// CHECK-NEXT:    [[V15:%[a-z_0-9]+]] = stablehlo.or [[V11]], [[V14]] : tensor<i1>
// CHECK-NEXT:    [[V16:%[a-z_0-9]+]] = stablehlo.select [[V15]], [[V5]], [[V6]] : tensor<i1>, tensor<f32>
// CHECK-NEXT:    [[V17:%[a-z_0-9]+]] = stablehlo.select [[V15]], [[V7]], [[V8]] : tensor<i1>, tensor<i64>
// CHECK-NEXT:    stablehlo.return [[V16]], [[V17]] : tensor<f32>, tensor<i64>
// CHECK-NEXT:    }
// CHECK-NEXT:    return [[V3]]#1 : tensor<3xi64>
func.func @argmin(%a0: tensor<2x3xf32>) -> tensor<3xi64> {
  %0 = "thunder.argmin"(%a0) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// CHECK-LABEL: func.func @bessel_i1e(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.bessel_i1e"([[V1:%[a-z_0-9]+]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @bessel_i1e(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.bessel_i1e"(%a0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @zeta(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.zeta"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @zeta(%a0: tensor<2x3xf32>, %a1: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.zeta"(%a0, %a1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @polygamma(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.polygamma"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @polygamma(%a0: tensor<2x3xf32>, %a1: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.polygamma"(%a0, %a1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @cumprod(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = "stablehlo.reduce_window"([[V2:%[a-z_0-9]+]], [[V0]]) <{padding = dense<{{\[\[}}0, 0], [2, 0{{\]\]}}> : tensor<2x2xi64>, window_dimensions = array<i64: 1, 3>}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.multiply [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V5]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2x3xf32>
func.func @cumprod(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.cumprod"(%a0) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @cummax(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = "stablehlo.reduce_window"([[V2:%[a-z_0-9]+]], [[V0]]) <{padding = dense<{{\[\[}}0, 0], [2, 0{{\]\]}}> : tensor<2x2xi64>, window_dimensions = array<i64: 1, 3>}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.maximum [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V5]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2x3xf32>
func.func @cummax(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.cummax"(%a0) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @cummin(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<0x7F800000> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = "stablehlo.reduce_window"([[V2:%[a-z_0-9]+]], [[V0]]) <{padding = dense<{{\[\[}}1, 0], [0, 0{{\]\]}}> : tensor<2x2xi64>, window_dimensions = array<i64: 2, 1>}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.minimum [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V5]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2x3xf32>
func.func @cummin(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.cummin"(%a0) {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @logcumsumexp(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]] = "stablehlo.reduce_window"([[V2:%[a-z_0-9]+]], [[V0]]) <{padding = dense<{{\[\[}}0, 0], [2, 0{{\]\]}}> : tensor<2x2xi64>, window_dimensions = array<i64: 1, 3>}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.maximum [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    [[V6:%[a-z_0-9]+]] = stablehlo.minimum [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    [[V7:%[a-z_0-9]+]] = stablehlo.subtract [[V6]], [[V5]] : tensor<f32>
// CHECK-NEXT:    [[V8:%[a-z_0-9]+]] = stablehlo.exponential [[V7]] : tensor<f32>
// CHECK-NEXT:    [[V9:%[a-z_0-9]+]] = stablehlo.log_plus_one [[V8]] : tensor<f32>
// CHECK-NEXT:    [[V10:%[a-z_0-9]+]] = stablehlo.add [[V5]], [[V9]] : tensor<f32>
// CHECK-NEXT:    [[V11:%[a-z_0-9]+]] = stablehlo.abs [[V5]] : tensor<f32>
// CHECK-NEXT:    [[V12:%[a-z_0-9]+]] = stablehlo.constant dense<0x7F800000> : tensor<f32>
// CHECK-NEXT:    [[V13:%[a-z_0-9]+]] = stablehlo.compare EQ, [[V11]], [[V12]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V14:%[a-z_0-9]+]] = stablehlo.select [[V13]], [[V5]], [[V10]] : tensor<i1>, tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V14]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V1]] : tensor<2x3xf32>
func.func @logcumsumexp(%a0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.logcumsumexp"(%a0) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @scatter(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.scatter"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]], [[V3:%[a-z_0-9]+]]) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>, unique_indices = false}> ({
// CHECK-NEXT:    ^bb0([[V4:%[a-z_0-9]+]]: tensor<f32>, [[V5:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V6:%[a-z_0-9]+]] = stablehlo.add [[V4]], [[V5]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V6]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<2x2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3xf32>
func.func @scatter(%a0: tensor<2x3xf32>, %a1: tensor<2x2xi64>, %a2: tensor<2xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.scatter"(%a0, %a1, %a2) {kind = "add"} : (tensor<2x3xf32>, tensor<2x2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @argsort(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.iota dim = 1 : tensor<2x3xi64>
// CHECK-NEXT:    [[V1:%[a-z_0-9]+]]:2 = "stablehlo.sort"([[V2:%[a-z_0-9]+]], [[V0]]) <{dimension = 1 : i64, is_stable = true}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>, [[V5:%[a-z_0-9]+]]: tensor<i64>, [[V6:%[a-z_0-9]+]]: tensor<i64>):
// CHECK-NEXT:    [[V7:%[a-z_0-9]+]] = stablehlo.compare LT, [[V4]], [[V3]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V8:%[a-z_0-9]+]] = stablehlo.compare NE, [[V3]], [[V3]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V9:%[a-z_0-9]+]] = stablehlo.compare EQ, [[V4]], [[V4]], FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:    [[V10:%[a-z_0-9]+]] = stablehlo.and [[V8]], [[V9]] : tensor<i1>
// CHECK-NEXT:    [[V11:%[a-z_0-9]+]] = stablehlo.or [[V7]], [[V10]] : tensor<i1>
// CHECK-NEXT:    stablehlo.return [[V11]] : tensor<i1>
// CHECK-NEXT:    }) : (tensor<2x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
// CHECK-NEXT:    return [[V1]]#1 : tensor<2x3xi64>
func.func @argsort(%a0: tensor<2x3xf32>) -> tensor<2x3xi64> {
  %0 = "thunder.argsort"(%a0) {descending = 1 : i64, dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xi64>
  return %0 : tensor<2x3xi64>
}

// CHECK-LABEL: func.func @convolution(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.convolution([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = {{\[\[}}1, 1{{\]\]}}, lhs_dilate = [1], rhs_dilate = [1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<1x2x5xf32>, tensor<4x2x3xf32>) -> tensor<1x4x5xf32>
// CHECK-NEXT:    return [[V0]] : tensor<1x4x5xf32>
func.func @convolution(%a0: tensor<1x2x5xf32>, %a1: tensor<4x2x3xf32>) -> tensor<1x4x5xf32> {
  %0 = "thunder.convolution"(%a0, %a1) {batch_group_count = 1 : i64, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 1, 1>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<1x2x5xf32>, tensor<4x2x3xf32>) -> tensor<1x4x5xf32>
  return %0 : tensor<1x4x5xf32>
}

// batch groups (a grouped convolution's weight gradient): the count is carried through
// CHECK-LABEL: func.func @convolution_batch_groups(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.convolution([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = {{\[\[}}1, 1{{\]\]}}, lhs_dilate = [1], rhs_dilate = [1]} {batch_group_count = 3 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<6x2x5xf32>, tensor<3x2x3xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT:    return [[V0]] : tensor<2x3x5xf32>
func.func @convolution_batch_groups(%a0: tensor<6x2x5xf32>, %a1: tensor<3x2x3xf32>) -> tensor<2x3x5xf32> {
  %0 = "thunder.convolution"(%a0, %a1) {batch_group_count = 3 : i64, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = array<i64: 1, 1>, rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<6x2x5xf32>, tensor<3x2x3xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// CHECK-LABEL: func.func @reduce_window(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.reduce_window"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) <{padding = dense<{{\[\[}}0, 0], [0, 0], [0, 1{{\]\]}}> : tensor<3x2xi64>, window_dimensions = array<i64: 1, 1, 2>, window_strides = array<i64: 1, 1, 2>}> ({
// CHECK-NEXT:    ^bb0([[V3:%[a-z_0-9]+]]: tensor<f32>, [[V4:%[a-z_0-9]+]]: tensor<f32>):
// CHECK-NEXT:    [[V5:%[a-z_0-9]+]] = stablehlo.maximum [[V3]], [[V4]] : tensor<f32>
// CHECK-NEXT:    stablehlo.return [[V5]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<1x2x5xf32>, tensor<f32>) -> tensor<1x2x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<1x2x3xf32>
func.func @reduce_window(%a0: tensor<1x2x5xf32>, %a1: tensor<f32>) -> tensor<1x2x3xf32> {
  %0 = "thunder.reduce_window"(%a0, %a1) {kind = "max", padding = array<i64: 0, 0, 0, 0, 0, 1>, window_dimensions = array<i64: 1, 1, 2>, window_strides = array<i64: 1, 1, 2>} : (tensor<1x2x5xf32>, tensor<f32>) -> tensor<1x2x3xf32>
  return %0 : tensor<1x2x3xf32>
}

// CHECK-LABEL: func.func @cholesky(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = stablehlo.cholesky [[V1:%[a-z_0-9]+]], lower = true : tensor<3x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<3x3xf32>
func.func @cholesky(%a0: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = "thunder.cholesky"(%a0) {lower = 1 : i64} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// CHECK-LABEL: func.func @triangular_solve(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "stablehlo.triangular_solve"([[V1:%[a-z_0-9]+]], [[V2:%[a-z_0-9]+]]) <{left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}> : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:    return [[V0]] : tensor<3x3xf32>
func.func @triangular_solve(%a0: tensor<3x3xf32>, %a1: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = "thunder.triangular_solve"(%a0, %a1) {left_side = 1 : i64, lower = 1 : i64, transpose_a = 0 : i64, unit_diagonal = 0 : i64} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// CHECK-LABEL: func.func @square(
// CHECK-NEXT:    [[V0:%[a-z_0-9]+]] = "chlo.square"([[V1:%[a-z_0-9]+]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return [[V0]] : tensor<4xf32>
func.func @square(%a0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.square"(%a0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// A take of a transposed tensor along a dim the transpose keeps, with 1-d indices, gathers
// from the transpose's operand and transposes the result (XLA then folds the transpose into
// a consuming dot instead of gathering with a stride per element: hlo.lower_take).
// CHECK-LABEL: func.func @take_of_transpose(
// CHECK-SAME:    %[[W:.*]]: tensor<4x5x6xf32>, %[[I:.*]]: tensor<3xi64>
// CHECK:         %[[G:.*]] = "stablehlo.gather"(%[[W]], %[[I]])
// CHECK-SAME:    slice_sizes = array<i64: 1, 5, 6>
// CHECK-SAME:    -> tensor<3x5x6xf32>
// CHECK-NEXT:    %[[T:.*]] = stablehlo.transpose %[[G]], dims = [0, 2, 1] : (tensor<3x5x6xf32>) -> tensor<3x6x5xf32>
// CHECK:         return %[[T]]
func.func @take_of_transpose(%w: tensor<4x5x6xf32>, %i: tensor<3xi64>) -> tensor<3x6x5xf32> {
  %0 = "thunder.transpose"(%w) {permutation = array<i64: 0, 2, 1>} : (tensor<4x5x6xf32>) -> tensor<4x6x5xf32>
  %1 = "thunder.take"(%0, %i) {dim = 0 : i64} : (tensor<4x6x5xf32>, tensor<3xi64>) -> tensor<3x6x5xf32>
  return %1 : tensor<3x6x5xf32>
}

// The taken dim moves under the transpose: gathered from the transposed tensor as before.
// CHECK-LABEL: func.func @take_of_transpose_moving_dim(
// CHECK:         %[[T:.*]] = stablehlo.transpose
// CHECK-NEXT:    "stablehlo.gather"(%[[T]],
func.func @take_of_transpose_moving_dim(%w: tensor<4x5xf32>, %i: tensor<3xi64>) -> tensor<3x4xf32> {
  %0 = "thunder.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<4x5xf32>) -> tensor<5x4xf32>
  %1 = "thunder.take"(%0, %i) {dim = 0 : i64} : (tensor<5x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  return %1 : tensor<3x4xf32>
}

// A chain of transposes composes: here to the identity, so the gather reads %w directly.
// CHECK-LABEL: func.func @take_of_transposed_transpose(
// CHECK-SAME:    %[[W:.*]]: tensor<4x5x6xf32>, %[[I:.*]]: tensor<3xi64>
// CHECK:         %[[G:.*]] = "stablehlo.gather"(%[[W]], %[[I]])
// CHECK-NEXT:    return %[[G]]
func.func @take_of_transposed_transpose(%w: tensor<4x5x6xf32>, %i: tensor<3xi64>) -> tensor<3x5x6xf32> {
  %0 = "thunder.transpose"(%w) {permutation = array<i64: 0, 2, 1>} : (tensor<4x5x6xf32>) -> tensor<4x6x5xf32>
  %1 = "thunder.transpose"(%0) {permutation = array<i64: 0, 2, 1>} : (tensor<4x6x5xf32>) -> tensor<4x5x6xf32>
  %2 = "thunder.take"(%1, %i) {dim = 0 : i64} : (tensor<4x5x6xf32>, tensor<3xi64>) -> tensor<3x5x6xf32>
  return %2 : tensor<3x5x6xf32>
}

// after(x, anchor): x's bits xor'ed twice with the anchor's first element, converted to
// x's width (a dependency XLA's CPU compiler keeps; it erases optimization barriers).
// CHECK-LABEL: func.func @after(
// CHECK-SAME:    %[[X:[a-z0-9]+]]: tensor<4x3xf32>, %[[A:[a-z0-9]+]]: tensor<2xi64>
// CHECK-NEXT:    %[[S:.*]] = stablehlo.slice %[[A]] [0:1] : (tensor<2xi64>) -> tensor<1xi64>
// CHECK-NEXT:    %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<1xi64>) -> tensor<i64>
// CHECK-NEXT:    %[[C:.*]] = stablehlo.convert %[[R]] : (tensor<i64>) -> tensor<i32>
// CHECK-NEXT:    %[[M:.*]] = stablehlo.broadcast_in_dim %[[C]], dims = [] : (tensor<i32>) -> tensor<4x3xi32>
// CHECK-NEXT:    %[[B:.*]] = stablehlo.bitcast_convert %[[X]] : (tensor<4x3xf32>) -> tensor<4x3xi32>
// CHECK-NEXT:    %[[X1:.*]] = stablehlo.xor %[[B]], %[[M]] : tensor<4x3xi32>
// CHECK-NEXT:    %[[X2:.*]] = stablehlo.xor %[[X1]], %[[M]] : tensor<4x3xi32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.bitcast_convert %[[X2]] : (tensor<4x3xi32>) -> tensor<4x3xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @after(%x: tensor<4x3xf32>, %a: tensor<2xi64>) -> tensor<4x3xf32> {
  %0 = "thunder.after"(%x, %a) : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// after(splat constant, anchor): the constant made from the anchor's bits m alone,
// ((m ^ bits(c)) ^ ~m) ^ -1, broadcast. XLA 0.11 folds (0 ^ m) ^ m back to the constant 0
// (x ^ 0 -> x, m ^ m -> 0), which XLA then schedules anywhere; it keeps m ^ ~m.
// CHECK-LABEL: func.func @after_splat(
// CHECK-SAME:    %[[A:[a-z0-9]+]]: tensor<2xi64>
// CHECK:         %[[S:.*]] = stablehlo.slice %[[A]] [0:1] : (tensor<2xi64>) -> tensor<1xi64>
// CHECK-NEXT:    %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<1xi64>) -> tensor<i64>
// CHECK-NEXT:    %[[M:.*]] = stablehlo.convert %[[R]] : (tensor<i64>) -> tensor<i32>
// CHECK-NEXT:    %[[C:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[B:.*]] = stablehlo.bitcast_convert %[[C]] : (tensor<f32>) -> tensor<i32>
// CHECK-NEXT:    %[[X1:.*]] = stablehlo.xor %[[M]], %[[B]] : tensor<i32>
// CHECK-NEXT:    %[[N:.*]] = stablehlo.not %[[M]] : tensor<i32>
// CHECK-NEXT:    %[[X2:.*]] = stablehlo.xor %[[X1]], %[[N]] : tensor<i32>
// CHECK-NEXT:    %[[ONES:.*]] = stablehlo.constant dense<-1> : tensor<i32>
// CHECK-NEXT:    %[[X3:.*]] = stablehlo.xor %[[X2]], %[[ONES]] : tensor<i32>
// CHECK-NEXT:    %[[F:.*]] = stablehlo.bitcast_convert %[[X3]] : (tensor<i32>) -> tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.broadcast_in_dim %[[F]], dims = [] : (tensor<f32>) -> tensor<4x3xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @after_splat(%a: tensor<2xi64>) -> tensor<4x3xf32> {
  %c = "thunder.full"() {value = 0.000000e+00 : f64} : () -> tensor<4x3xf32>
  %0 = "thunder.after"(%c, %a) : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// A complex x has no integer view: the optimization barrier, its first result.
// CHECK-LABEL: func.func @after_complex(
// CHECK-SAME:    %[[X:[a-z0-9]+]]: tensor<3xcomplex<f32>>, %[[A:[a-z0-9]+]]: tensor<f32>
// CHECK-NEXT:    %[[B:.*]]:2 = stablehlo.optimization_barrier %[[X]], %[[A]]
// CHECK-NEXT:    return %[[B]]#0
func.func @after_complex(%x: tensor<3xcomplex<f32>>, %a: tensor<f32>) -> tensor<3xcomplex<f32>> {
  %0 = "thunder.after"(%x, %a) : (tensor<3xcomplex<f32>>, tensor<f32>) -> tensor<3xcomplex<f32>>
  return %0 : tensor<3xcomplex<f32>>
}
