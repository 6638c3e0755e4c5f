"""A/B in one process: the 2x2-add cache-hit call with outputs made by jaxlib's result
handlers (runtime/plan.py ``XlaStep.execute``, the current path) vs the earlier
``execute_sharded(...).disassemble_into_single_device_arrays()``, interleaved 7 times, with
jax.jit on jax arrays as the floor; medians in µs and the ratios.

    .venv/bin/python benchmarks/result_handlers_ab.py
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import torch

import thunder_mlir
from thunder_mlir.runtime import plan as plan_module
from thunder_mlir.runtime.xla import start_backends


def add(a, b):
    return a + b


def disassemble_execute(self, args, device):  # the path before result handlers
    res = self.executable.execute_sharded(args)
    return [r[0] for r in res.disassemble_into_single_device_arrays()]


def per_call_us(fn, calls: int = 20000) -> float:
    for _ in range(500):
        fn()
    t = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t) / calls / 1e3


def main() -> None:
    torch.set_num_threads(1)
    thunder_mlir.set_compile_cache_dir(None)
    start_backends()
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    tf, jf = thunder_mlir.jit(add), jax.jit(add)
    torch.testing.assert_close(tf(a, b), a + b)
    handlers = plan_module.XlaStep.execute
    res = {"disassemble": [], "result handlers": [], "jax.jit": []}
    try:
        for _ in range(7):
            plan_module.XlaStep.execute = disassemble_execute
            res["disassemble"].append(per_call_us(lambda: tf(a, b)))
            plan_module.XlaStep.execute = handlers
            res["result handlers"].append(per_call_us(lambda: tf(a, b)))
            res["jax.jit"].append(per_call_us(lambda: jf(ja, jb).block_until_ready()))
    finally:
        plan_module.XlaStep.execute = handlers
    med = {k: statistics.median(v) for k, v in res.items()}
    for k, v in med.items():
        print(f"{k:<16} {v:7.2f} us/call  {v / med['jax.jit']:.2f}x jax.jit")
    print(f"result handlers / disassemble: {med['result handlers'] / med['disassemble']:.2f}x")


if __name__ == "__main__":
    main()
