// RUN: thunder-opt %s -p lower-to-stablehlo | filecheck %s

// Shardings (ir/sharding.py) lower to GSPMD mhlo.sharding strings (XLA HloSharding text):
// tile dims per tensor dim, a trailing replication dim for unused mesh axes, and the
// partition ids of the tiles (mesh row-major, axes reordered as the tiles enumerate them).

// CHECK-LABEL: func.func @region(
// CHECK-SAME:  %{{.*}}: tensor<16x4xf32> {mhlo.sharding = "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"}
// CHECK-SAME:  %{{.*}}: tensor<4x4xf32> {jax.buffer_donor = true, mhlo.sharding = "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"}
// CHECK-SAME:  %{{.*}}: tensor<4xf32> {mhlo.sharding = "{replicated}"}
// CHECK-SAME:  -> (tensor<16x4xf32> {mhlo.sharding = "{devices=[2,4]0,1,2,3,4,5,6,7}"}, tensor<4x4xf32> {mhlo.sharding = "{devices=[4,2]0,4,1,5,2,6,3,7}"})
// CHECK-NOT:   thunder.mesh
// CHECK:       stablehlo.custom_call @Sharding(%{{.*}}) {mhlo.sharding = "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"}
func.func @region(%a: tensor<16x4xf32> {thunder.sharding = "[{data}, {}]"}, %b: tensor<4x4xf32> {jax.buffer_donor = true, thunder.sharding = "[{}, {model}]"}, %c: tensor<4xf32> {thunder.sharding = "[{}]"}) -> (tensor<16x4xf32> {thunder.sharding = "[{data}, {model}]"}, tensor<4x4xf32> {thunder.sharding = "[{model}, {data}]"}) attributes {thunder.mesh = "[data=2, model=4]"} {
  %0 = "thunder.sharding_constraint"(%a) {mesh = "[data=2, model=4]", spec = "[{}, {model}]"} : (tensor<16x4xf32>) -> tensor<16x4xf32>
  return %0, %b : tensor<16x4xf32>, tensor<4x4xf32>
}

// A function without thunder.mesh keeps its attributes as they are.
// CHECK-LABEL: func.func @plain(
// CHECK-SAME:  {thunder.sharding = "[{data}]"}
func.func @plain(%a: tensor<8xf32> {thunder.sharding = "[{data}]"}) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}
