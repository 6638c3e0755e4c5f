// RUN: thunder-opt %s -p lower-to-stablehlo --verify-diagnostics --split-input-file
// RUN: not thunder-opt %s -p lower-to-stablehlo --split-input-file 2>&1 | filecheck %s --check-prefix=PLAIN

// mlir-opt's --verify-diagnostics: each chunk's expected-error comments must be exactly the
// diagnostics thunder-opt produces, at the lines named (@+N relative to the comment).
// Without the flag the first failing chunk stops the run, with the diagnostic in
// file:line:col: error: form (PLAIN).

// An op the pass rejects: a composite left in an XLA region (decompose did not run).
// PLAIN: thunder-opt: error: pass 'lower-to-stablehlo{{.*}}' failed
// PLAIN-NEXT: verify_diagnostics.mlir:[[# @LINE + 3]]:8: error: lower-to-stablehlo: no lowering for 'thunder.composite'
func.func private @xla_region_0(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{no lowering for 'thunder.composite'}}
  %0 = "thunder.composite"(%a) ({
  ^bb0(%x: tensor<4xf32>):
    "thunder.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  }) {name = "ltorch.identity", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An executor call inside an XLA region (partition did not run).
func.func private @xla_region_0(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.executor_call"(%a) {callee = "torch.cumprod", executor = "torch", impl = @torch.cumprod$0, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>  // expected-error {{no lowering for 'thunder.executor_call'}}
  return %0 : tensor<4xf32>
}

// -----

// An invalid thunder op: add takes two operands (the parser's verifier).
func.func @computation(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{expects exactly 2 operands, but got 1}}
  %0 = "thunder.add"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// A result type the op's inputs do not give.
func.func @computation(%a: tensor<2xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{doesn't match function result type}}
  return %a : tensor<2xf32>
}

// -----

// A valid chunk: lowered, no diagnostic expected.
func.func private @xla_region_0(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "thunder.add"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
