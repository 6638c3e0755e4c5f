// RUN: not thunder-opt %s --pass-pipeline='builtin.module(grad{remt=true})' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not thunder-opt %s -p 'decompose,grda' 2>&1 | filecheck %s --check-prefix=PASS
// RUN: not thunder-opt %s -p 'grad{remat=maybe}' 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: thunder-opt %s -p grad --verify-diagnostics

// Pipeline errors are usage errors (exit 2), reported before the input is read, with
// mlir-opt's "did you mean" for a misspelt pass or option.
// OPTION: thunder-opt: error: pass 'grad' has no option 'remt' (did you mean 'remat'?); its options: remat
// PASS: thunder-opt: error: unknown pass 'grda' (did you mean 'grad'?)
// VALUE: thunder-opt: error: pass 'grad': option 'remat' expects true or false, got 'maybe'

// A module the pass rejects as a whole: grad needs @computation; the diagnostic is at the
// module's location.
// expected-error @+1 {{grad: the module has no func.func @computation}}
module @no_computation {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
