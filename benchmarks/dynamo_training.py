"""The two training designs of ``torch.compile(m, backend="thunder_mlir")`` compared
(thunder_mlir/dynamo_backend.py's docstring has the figures): an SGD step of an MLP
(64-256-256-10, batch 32) in eager PyTorch, through the backend (``jit`` of Dynamo's
graph, thunder_mlir's own VJP), and through AOTAutograd with ``jit`` compiling its
forward and backward ATen graphs. Per-step time: fastest and median of 7 rounds of 50
steps, the designs interleaved round by round.

    python benchmarks/dynamo_training.py
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd

import thunder_mlir
from thunder_mlir.dynamo_backend import ThunderMLIRBackend

ROUNDS, STEPS = 7, 50


def _aot_compiler(gm, example_inputs):
    from torch.fx._lazy_graph_module import _LazyGraphModule

    _LazyGraphModule.force_recompile(gm)  # as ThunderMLIRBackend does
    jitted = thunder_mlir.jit(gm, sharp_edges="allow")

    def run(args):
        return jitted(*args)

    run._boxed_call = True  # AOTAutograd's calling convention: one list of inputs
    return run


def main() -> None:
    warnings.simplefilter("ignore")
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    backends = {"eager": None, "own VJP": ThunderMLIRBackend(),
                "AOTAutograd": aot_autograd(fw_compiler=_aot_compiler,
                                            bw_compiler=_aot_compiler)}
    steps = {}
    for name, backend in backends.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                    torch.nn.Linear(256, 256), torch.nn.GELU(),
                                    torch.nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        run = model if backend is None else torch.compile(model, backend=backend)

        def step(run=run, opt=opt):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(run(x), y)
            loss.backward()
            opt.step()
            return loss

        start = time.perf_counter()
        step()
        print(f"{name}: first step (compile) {time.perf_counter() - start:.2f} s")
        for _ in range(5):
            step()
        steps[name] = step
    times = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(STEPS):
                step()
            times[name].append((time.perf_counter() - start) / STEPS * 1e3)
    for name, t in times.items():
        print(f"{name}: per step fastest {min(t):.2f} ms, median {statistics.median(t):.2f} ms")


if __name__ == "__main__":
    main()
