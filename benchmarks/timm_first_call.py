"""First-call time of timm's models: ``thunder_mlir.jit`` against ``torch.compile``
(Inductor, mode default), infer and train, side by side in one run (issue 48 item 4).

The models and inputs are tests/test_timm.py's (random init, batch 2, 64-px images, 75 px
for the Inception models, no stochastic depth or dropout). ``infer``: the eval-mode forward
under ``no_grad``; ``train``: a train-mode forward, ``cross_entropy(...).backward()``. The
first call is timed from the wrapper's creation to the gradients (trace, passes and XLA
compile for thunder_mlir; Dynamo, AOTAutograd and Inductor's C++ codegen and compile for
torch.compile), each (system, model, mode) in a fresh process with empty in-memory
caches; persistent caches are off (``THUNDER_MLIR_CACHE_DIR=0``, Inductor's FX graph
and autotune caches disabled, a fresh ``TORCHINDUCTOR_CACHE_DIR``). An eager call of the
same cell is timed beside them. Prints the CPU, a markdown table and the ratio jit /
torch.compile.

    .venv/bin/python benchmarks/timm_first_call.py [--models a,b] [--modes infer,train]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYSTEMS = ("eager", "thunder_mlir", "torch.compile")


def child(system: str, name: str, mode: str) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_timm
    import torch

    model = test_timm.make_model(name)
    x, target = test_timm.make_inputs(name)
    model.train(mode == "train")
    t0 = time.perf_counter()
    if system == "thunder_mlir":
        import thunder_mlir

        fn = thunder_mlir.jit(model)
    elif system == "torch.compile":
        fn = torch.compile(model)
    else:
        fn = model
    test_timm.run_cell(fn, mode, x, target)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    test_timm.run_cell(fn, mode, x, target)
    return {"first_s": first, "second_s": time.perf_counter() - t1}


def run_one(system: str, name: str, mode: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HF_HUB_OFFLINE="1", THUNDER_MLIR_CACHE_DIR="0",
                   TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE="0")
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                   system, name, mode], env=env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"over {timeout:.0f} s"}
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:160]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None, help="comma-separated (default: test_timm.MODELS)")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per first call")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_timm

    models = args.models.split(",") if args.models else list(test_timm.MODELS)
    rows = []
    for name in models:
        for mode in args.modes.split(","):
            row = {"model": name, "mode": mode}
            for system in SYSTEMS:
                row[system] = run_one(system, name, mode, args.timeout)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nCPU: {_cpu()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print("| model | mode | eager s | thunder_mlir first call s | torch.compile first call s "
          "| jit / torch.compile |\n|---|---|---|---|---|---|")

    def cell(r):
        return r["error"] if "error" in r else f"{r['first_s']:.1f}"
    for r in rows:
        j, c = r["thunder_mlir"], r["torch.compile"]
        ratio = f"{j['first_s'] / c['first_s']:.2f}x" if "error" not in j and \
            "error" not in c else "-"
        print(f"| {r['model']} | {r['mode']} | {cell(r['eager'])} | {cell(j)} | {cell(c)} "
              f"| {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
