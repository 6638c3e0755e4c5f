// RUN: not thunder-opt %s -p lower-to-stablehlo 2>&1 | filecheck %s

// A thunder.sharding that does not fit its value is a lowering error naming the problem
// (ir/sharding.py check_spec), not a malformed mhlo.sharding handed to XLA.
// CHECK: does not split evenly over 8 devices (on @uneven)
func.func @uneven(%a: tensor<12xf32> {thunder.sharding = "[{data}]"}) -> tensor<12xf32> attributes {thunder.mesh = "[data=8]"} {
  return %a : tensor<12xf32>
}
