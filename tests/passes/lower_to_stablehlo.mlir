// RUN: thunder-opt %s -p lower-to-stablehlo | filecheck %s
// RUN: thunder-opt %s -p lower-to-stablehlo --mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: thunder-opt %s -p cse,lower-to-stablehlo | filecheck %s --check-prefix=CSE

// Elementwise prims: 1:1 to StableHLO, 1:n where StableHLO has no such op (exp2), and to
// CHLO where XLA legalizes the op itself (erf, lgamma).
// CHECK-LABEL: func.func @elementwise
// CHECK-SAME:    (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<2x3xf32>)
// CHECK-NOT:     thunder.
// CHECK:         %[[S:.*]] = stablehlo.add %[[A]], %[[B]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[N:.*]] = stablehlo.negate %[[S]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[LN2:.*]] = stablehlo.constant dense<0.693147{{[0-9]*}}> : tensor<2x3xf32>
// CHECK-NEXT:    %[[M:.*]] = stablehlo.multiply %[[N]], %[[LN2]]
// CHECK-NEXT:    %[[E:.*]] = stablehlo.exponential %[[M]]
// CHECK-NEXT:    %[[ERF:.*]] = "chlo.erf"(%[[E]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %[[LG:.*]] = "chlo.lgamma"(%[[ERF]])
// CHECK-NEXT:    return %[[LG]]
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("model.py":7:0)
  %1 = "thunder.neg"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "thunder.exp2"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "thunder.erf"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "thunder.lgamma"(%3) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %4 : tensor<2x3xf32>
}
// Sine and cosine of reals: the function divided by ones XLA cannot fold (the bits of
// 1.0 xor x's bits, twice), so that XLA's fusion computes it once where a broadcast reads
// each element many times (hlo.lower_computed_once).
// CHECK-LABEL: func.func @computed_once
// CHECK-SAME:    (%[[X:.*]]: tensor<64x32xf32>)
// CHECK:         %[[S:.*]] = stablehlo.sine %[[X]] : tensor<64x32xf32>
// CHECK-NEXT:    %[[M:.*]] = stablehlo.bitcast_convert %[[X]] : (tensor<64x32xf32>) -> tensor<64x32xi32>
// CHECK-NEXT:    %[[C:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<64x32xf32>
// CHECK-NEXT:    %[[CB:.*]] = stablehlo.bitcast_convert %[[C]] : (tensor<64x32xf32>) -> tensor<64x32xi32>
// CHECK-NEXT:    %[[X1:.*]] = stablehlo.xor %[[CB]], %[[M]]
// CHECK-NEXT:    %[[X2:.*]] = stablehlo.xor %[[X1]], %[[M]]
// CHECK-NEXT:    %[[ONE:.*]] = stablehlo.bitcast_convert %[[X2]] : (tensor<64x32xi32>) -> tensor<64x32xf32>
// CHECK-NEXT:    %[[D:.*]] = stablehlo.divide %[[S]], %[[ONE]]
// CHECK-NEXT:    %[[B:.*]] = stablehlo.broadcast_in_dim %[[D]], dims = [2, 3]
// CHECK-NEXT:    %[[K:.*]] = stablehlo.cosine %[[X]] : tensor<64x32xf32>
// CHECK-NEXT:    %[[M2:.*]] = stablehlo.bitcast_convert %[[X]]
// CHECK:         %[[ONE2:.*]] = stablehlo.bitcast_convert %{{.*}} : (tensor<64x32xi32>) -> tensor<64x32xf32>
// CHECK-NEXT:    %[[D2:.*]] = stablehlo.divide %[[K]], %[[ONE2]]
// CHECK-NEXT:    return %[[B]], %[[D2]]
func.func @computed_once(%x: tensor<64x32xf32>) -> (tensor<2x8x64x32xf32>, tensor<64x32xf32>) {
  %0 = "thunder.sin"(%x) : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %1 = "thunder.broadcast_in_dim"(%0) {shape = array<i64: 2, 8, 64, 32>, broadcast_dimensions = array<i64: 2, 3>} : (tensor<64x32xf32>) -> tensor<2x8x64x32xf32>
  %2 = "thunder.cos"(%x) : (tensor<64x32xf32>) -> tensor<64x32xf32>
  return %1, %2 : tensor<2x8x64x32xf32>, tensor<64x32xf32>
}

// The lowered op keeps the user's location.
// LOC-LABEL: func.func @elementwise
// LOC:         stablehlo.add {{.*}} loc(#[[L:loc[0-9]*]])
// LOC:       #[[L]] = loc("model.py":7:0)

// Comparisons: the compare type follows the element type; where is select.
// CHECK-LABEL: func.func @compare
// CHECK-SAME:    (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>, %[[I:.*]]: tensor<4xi32>, %[[J:.*]]: tensor<4xi32>, %[[U:.*]]: tensor<4xui8>)
// CHECK:         %[[LT:.*]] = stablehlo.compare LT, %[[A]], %[[B]], FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    stablehlo.compare NE, %[[I]], %[[J]], SIGNED
// CHECK-NEXT:    stablehlo.compare GE, %[[U]], %[[U]], UNSIGNED
// CHECK-NEXT:    stablehlo.select %[[LT]], %[[A]], %[[B]] : tensor<4xi1>, tensor<4xf32>
func.func @compare(%a: tensor<4xf32>, %b: tensor<4xf32>, %i: tensor<4xi32>, %j: tensor<4xi32>, %u: tensor<4xui8>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xf32>) {
  %0 = "thunder.lt"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = "thunder.ne"(%i, %j) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
  %2 = "thunder.ge"(%u, %u) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xi1>
  %3 = "thunder.where"(%0, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xf32>
}

// Reductions: stablehlo.reduce with the identity of the reduction as init value.
// CHECK-LABEL: func.func @reductions
// CHECK-SAME:    (%[[A:.*]]: tensor<2x3xf32>, %[[P:.*]]: tensor<2x3xi1>)
// CHECK:         %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    stablehlo.reduce(%[[A]] init: %[[Z]]) applies stablehlo.add across dimensions = [0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
// CHECK-NEXT:    %[[NEGINF:.*]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:    stablehlo.reduce(%[[A]] init: %[[NEGINF]]) applies stablehlo.maximum across dimensions = [1]
// CHECK-NEXT:    %[[T:.*]] = stablehlo.constant dense<true> : tensor<i1>
// CHECK-NEXT:    stablehlo.reduce(%[[P]] init: %[[T]]) applies stablehlo.and across dimensions = [1]
// argmax: a variadic reduce over (value, iota index), returning the index.
// CHECK-NEXT:    %[[IDX:.*]] = stablehlo.iota dim = 1 : tensor<2x3xi64>
// CHECK:         %[[AM:.*]]:2 = stablehlo.reduce(%[[A]] init: %{{.*}}), (%[[IDX]] init: %{{.*}}) across dimensions = [1]
// CHECK:           stablehlo.return
// CHECK:         return {{.*}}, %[[AM]]#1 :
func.func @reductions(%a: tensor<2x3xf32>, %p: tensor<2x3xi1>) -> (tensor<3xf32>, tensor<2xf32>, tensor<2xi1>, tensor<2xi64>) {
  %0 = "thunder.reduce_sum"(%a) {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %1 = "thunder.reduce_max"(%a) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %2 = "thunder.reduce_and"(%p) {dims = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2xi1>
  %3 = "thunder.argmax"(%a) {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2xi64>
  return %0, %1, %2, %3 : tensor<3xf32>, tensor<2xf32>, tensor<2xi1>, tensor<2xi64>
}

// cumsum: reduce_window over the whole dim, padded on the low side.
// CHECK-LABEL: func.func @cumsum
// CHECK:         "stablehlo.reduce_window"
// CHECK-SAME:      padding = dense<{{\[\[}}3, 0]]> : tensor<1x2xi64>, window_dimensions = array<i64: 4>
// CHECK:           stablehlo.add
func.func @cumsum(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.cumsum"(%a) {dim = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Batched matmul as dot_general, at full f32 precision.
// CHECK-LABEL: func.func @matmul
// CHECK:         stablehlo.dot_general %{{.*}}, %{{.*}}, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [HIGHEST, HIGHEST] : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
func.func @matmul(%a: tensor<5x2x3xf32>, %b: tensor<5x3x4xf32>) -> tensor<5x2x4xf32> {
  %0 = "thunder.dot_general"(%a, %b) {lhs_batching_dimensions = array<i64: 0>, rhs_batching_dimensions = array<i64: 0>, lhs_contracting_dimensions = array<i64: 2>, rhs_contracting_dimensions = array<i64: 1>} : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
  return %0 : tensor<5x2x4xf32>
}

// bf16 matmul (a weight gradient's two contracting dims): accumulated in f32, rounded once
// to bf16, as ATen's kernels (XLA:CPU in jaxlib 0.11.2 accumulates this one in bf16).
// CHECK-LABEL: func.func @matmul_bf16
// CHECK:         %[[D:.*]] = stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [0, 1] x [0, 1] : (tensor<2x4x3xbf16>, tensor<2x4x8xbf16>) -> tensor<3x8xf32>
// CHECK-NEXT:    stablehlo.convert %[[D]] : (tensor<3x8xf32>) -> tensor<3x8xbf16>
func.func @matmul_bf16(%g: tensor<2x4x3xbf16>, %x: tensor<2x4x8xbf16>) -> tensor<3x8xbf16> {
  %0 = "thunder.dot_general"(%g, %x) {lhs_batching_dimensions = array<i64>, rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0, 1>, rhs_contracting_dimensions = array<i64: 0, 1>} : (tensor<2x4x3xbf16>, tensor<2x4x8xbf16>) -> tensor<3x8xbf16>
  return %0 : tensor<3x8xbf16>
}

// take (index_select) is a gather collapsing the indexed dim.
// CHECK-LABEL: func.func @take
// CHECK-SAME:    (%[[X:.*]]: tensor<10x4xf32>, %[[I:.*]]: tensor<3xi64>)
// CHECK:         "stablehlo.gather"(%[[X]], %[[I]])
// CHECK-SAME:      offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1
// CHECK-SAME:      slice_sizes = array<i64: 1, 4>
// CHECK-SAME:      (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
func.func @take(%x: tensor<10x4xf32>, %idx: tensor<3xi64>) -> tensor<3x4xf32> {
  %0 = "thunder.take"(%x, %idx) {dim = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// Creation prims: iota, full (a splat constant) and literal constants.
// CHECK-LABEL: func.func @creation
// CHECK:         stablehlo.iota dim = 1 : tensor<2x3xi64>
// CHECK-NEXT:    stablehlo.constant dense<2.500000e+00> : tensor<2x3xf32>
// CHECK-NEXT:    stablehlo.constant dense<[1, 2, 3]> : tensor<3xi32>
func.func @creation() -> (tensor<2x3xi64>, tensor<2x3xf32>, tensor<3xi32>) {
  %0 = "thunder.iota"() {dimension = 1 : i64} : () -> tensor<2x3xi64>
  %1 = "thunder.full"() {value = 2.5 : f64} : () -> tensor<2x3xf32>
  %2 = "thunder.constant"() {value = dense<[1, 2, 3]> : tensor<3xi32>} : () -> tensor<3xi32>
  return %0, %1, %2 : tensor<2x3xi64>, tensor<2x3xf32>, tensor<3xi32>
}

// Shape prims; concatenate takes operands of different types (two type runs).
// CHECK-LABEL: func.func @shapes
// CHECK:         stablehlo.transpose %{{.*}}, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    stablehlo.broadcast_in_dim %{{.*}}, dims = [0, 1] : (tensor<2x1xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    stablehlo.concatenate %{{.*}}, %{{.*}}, dim = 1 : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    stablehlo.convert %{{.*}} : (tensor<2x3xf32>) -> tensor<2x3xf16>
// CHECK-NEXT:    stablehlo.reshape %{{.*}} : (tensor<2x3xf32>) -> tensor<6xf32>
func.func @shapes(%a: tensor<2x3xf32>, %b: tensor<2x1xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf16>, tensor<6xf32>) {
  %0 = "thunder.transpose"(%a) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = "thunder.broadcast_in_dim"(%b) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x3xf32>
  %2 = "thunder.concatenate"(%a, %b) {dimension = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %3 = "thunder.convert_element_type"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %4 = "thunder.reshape"(%a) : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0, %1, %2, %3, %4 : tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf16>, tensor<6xf32>
}

// Random bits: rng_bit_generator (THREE_FRY) with state [seed, stream << 40] (stream 3:
// 3 * 2^40), unsigned bits bitcast to the prim's signless type.
// CHECK-LABEL: func.func @random
// CHECK-SAME:    (%[[SEED:.*]]: tensor<i64>)
// CHECK:         %[[U:.*]] = stablehlo.bitcast_convert %[[SEED]] : (tensor<i64>) -> tensor<ui64>
// CHECK-NEXT:    %[[KEY:.*]] = stablehlo.reshape %[[U]] : (tensor<ui64>) -> tensor<1xui64>
// CHECK-NEXT:    %[[CTR:.*]] = stablehlo.constant dense<3298534883328> : tensor<1xui64>
// CHECK-NEXT:    %[[STATE:.*]] = stablehlo.concatenate %[[KEY]], %[[CTR]], dim = 0 : (tensor<1xui64>, tensor<1xui64>) -> tensor<2xui64>
// CHECK-NEXT:    %{{.*}}, %[[BITS:.*]] = stablehlo.rng_bit_generator %[[STATE]], algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<2x3xui32>)
// CHECK-NEXT:    %[[R:.*]] = stablehlo.bitcast_convert %[[BITS]] : (tensor<2x3xui32>) -> tensor<2x3xi32>
// CHECK:         stablehlo.rng_bit_generator %{{.*}}, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui64>)
// CHECK-NEXT:    stablehlo.bitcast_convert %{{.*}} : (tensor<4xui64>) -> tensor<4xi64>
// CHECK:         return %[[R]]
// Two draws of one program have distinct streams: CSE keeps both.
// CSE-LABEL: func.func @random
// CSE-COUNT-3: stablehlo.rng_bit_generator
func.func @random(%seed: tensor<i64>) -> (tensor<2x3xi32>, tensor<4xi64>, tensor<4xi64>) {
  %0 = "thunder.rng_bits"(%seed) {stream = 3 : i64} : (tensor<i64>) -> tensor<2x3xi32>
  %1 = "thunder.rng_bits"(%seed) {stream = 4 : i64} : (tensor<i64>) -> tensor<4xi64>
  %2 = "thunder.rng_bits"(%seed) {stream = 5 : i64} : (tensor<i64>) -> tensor<4xi64>
  return %0, %1, %2 : tensor<2x3xi32>, tensor<4xi64>, tensor<4xi64>
}

// Autograd markers lower to their operand: no op in the StableHLO.
// CHECK-LABEL: func.func @autograd_markers
// CHECK-SAME:    (%[[X:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.multiply %[[X]], %[[X]]
// CHECK-NEXT:    return %[[Y]]
func.func @autograd_markers(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "thunder.stop_gradient"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "thunder.no_derivative"(%0) {message = "derivative for aten::floor_divide is not implemented"} : (tensor<3xf32>) -> tensor<3xf32>
  %2 = "thunder.mul"(%1, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %2 : tensor<3xf32>
}

// The plan function @computation is not lowered: its executor calls stay; regions are.
// CHECK-LABEL: func.func @computation
// CHECK:         call @xla_region_0
// CHECK-NEXT:    "thunder.executor_call"
// CHECK-LABEL: func.func private @xla_region_0
// CHECK-NEXT:    stablehlo.abs
func.func @computation(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @xla_region_0(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "thunder.executor_call"(%0) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @xla_region_0(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// cond -> stablehlo.if and while -> stablehlo.while, regions moved over (captures stay
// captured), thunder.yield -> stablehlo.return, the ops inside lowered too.
// CHECK-LABEL: func.func @control_flow
// CHECK-SAME:    (%[[P:.*]]: tensor<i1>, %[[X:.*]]: tensor<4xf32>, %[[N:.*]]: tensor<i64>)
// CHECK-NOT:     thunder.
// CHECK:         %[[IF:.*]] = "stablehlo.if"(%[[P]]) ({
// CHECK-NEXT:      %[[C:.*]] = stablehlo.exponential %[[X]]
// CHECK-NEXT:      stablehlo.return %[[C]]
// CHECK-NEXT:    }, {
// CHECK-NEXT:      stablehlo.return %[[X]]
// CHECK-NEXT:    }) : (tensor<i1>) -> tensor<4xf32>
// CHECK-NEXT:    %[[W:.*]]:2 = stablehlo.while(%[[I:.*]] = %[[N]], %[[Y:.*]] = %[[IF]]) : tensor<i64>, tensor<4xf32>
// CHECK-NEXT:    cond {
// CHECK-NEXT:      %[[LT:.*]] = stablehlo.compare  LT, %[[I]], %[[N]]
// CHECK-NEXT:      stablehlo.return %[[LT]]
// CHECK-NEXT:    } do {
// CHECK-NEXT:      %[[S:.*]] = stablehlo.tanh %[[Y]]
// CHECK-NEXT:      stablehlo.return %[[I]], %[[S]]
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[W]]#1, %[[W]]#0
func.func @control_flow(%p: tensor<i1>, %x: tensor<4xf32>, %n: tensor<i64>) -> (tensor<4xf32>, tensor<i64>) {
  %0 = "thunder.cond"(%p) ({
    %a = "thunder.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
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
    %z = "thunder.tanh"(%y) : (tensor<4xf32>) -> tensor<4xf32>
    "thunder.yield"(%i, %z) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<4xf32>) -> (tensor<i64>, tensor<4xf32>)
  return %1#1, %1#0 : tensor<4xf32>, tensor<i64>
}

// Run-time indexing along dim 0: dynamic_slice/dynamic_update_slice with zero starts for
// the other dims, and a reshape dropping (adding) the unit dim.
// CHECK-LABEL: func.func @dynamic_indexing
// CHECK-SAME:    (%[[X:.*]]: tensor<5x3xf32>, %[[I:.*]]: tensor<i64>)
// CHECK:         %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK-NEXT:    %[[S:.*]] = stablehlo.dynamic_slice %[[X]], %[[I]], %[[Z]], sizes = [1, 3]
// CHECK-NEXT:    %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<1x3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %[[U:.*]] = stablehlo.reshape %[[R]] : (tensor<3xf32>) -> tensor<1x3xf32>
// CHECK-NEXT:    %{{.*}} = stablehlo.constant dense<0> : tensor<i64>
// CHECK-NEXT:    %[[D:.*]] = stablehlo.dynamic_update_slice %[[X]], %[[U]], %[[I]], %{{.*}} : (tensor<5x3xf32>, tensor<1x3xf32>, tensor<i64>, tensor<i64>) -> tensor<5x3xf32>
// CHECK-NEXT:    return %[[D]]
func.func @dynamic_indexing(%x: tensor<5x3xf32>, %i: tensor<i64>) -> tensor<5x3xf32> {
  %0 = "thunder.dynamic_index"(%x, %i) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<i64>) -> tensor<3xf32>
  %1 = "thunder.dynamic_update_index"(%x, %0, %i) {dim = 0 : i64} : (tensor<5x3xf32>, tensor<3xf32>, tensor<i64>) -> tensor<5x3xf32>
  return %1 : tensor<5x3xf32>
}

// Along another dim (a KV cache's sequence dim, index_copy_ of one position): the run-time
// start at that dim, zeros elsewhere; the update gets its unit dim there.
// CHECK-LABEL: func.func @dynamic_indexing_dim2
// CHECK-SAME:    (%[[C:.*]]: tensor<2x3x8x4xf32>, %[[K:.*]]: tensor<2x3x4xf32>, %[[P:.*]]: tensor<i64>)
// CHECK:         %[[U:.*]] = stablehlo.reshape %[[K]] : (tensor<2x3x4xf32>) -> tensor<2x3x1x4xf32>
// CHECK-NEXT:    %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK-NEXT:    %[[D:.*]] = stablehlo.dynamic_update_slice %[[C]], %[[U]], %[[Z]], %[[Z]], %[[P]], %[[Z]] : (tensor<2x3x8x4xf32>, tensor<2x3x1x4xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x3x8x4xf32>
// CHECK-NEXT:    return %[[D]]
func.func @dynamic_indexing_dim2(%c: tensor<2x3x8x4xf32>, %k: tensor<2x3x4xf32>, %p: tensor<i64>) -> tensor<2x3x8x4xf32> {
  %0 = "thunder.dynamic_update_index"(%c, %k, %p) {dim = 2 : i64} : (tensor<2x3x8x4xf32>, tensor<2x3x4xf32>, tensor<i64>) -> tensor<2x3x8x4xf32>
  return %0 : tensor<2x3x8x4xf32>
}
