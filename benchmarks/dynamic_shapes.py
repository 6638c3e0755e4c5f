"""Dynamic shapes: the first compile of a symbolic program vs the cost of a new concrete shape.

A tiny HF BertModel (random weights, eval, no_grad) is jitted with ``dynamic=True`` and
called at several sequence lengths, and, for comparison, with ``dynamic=False`` (a re-trace
and full compile per length). Reported, in seconds (wall clock, one process, noisy on a
shared machine: compare the ratios of one run):

* first call (dynamic=True): trace + thunder passes + refinement + XLA compile + run;
* each new length (dynamic=True): refinement (``refine_polymorphic_shapes``) + XLA compile
  + run; no trace, no passes (the trace count stays 1);
* each new length (dynamic=False): trace + passes + XLA compile + run;
* a cache hit (the same length again, median of 30 calls), for scale;

and the ratio new-length / first-call (issue 14's target: at most 25%). A new length costs
one XLA compile of the refined program, which takes as long as the compile of the same
program traced statically (checked: same module size and time); the ratio is therefore
XLA compile / (trace + passes + XLA compile) and is bounded by how much of a first call
XLA's compile is.

    .venv/bin/python benchmarks/dynamic_shapes.py [--layers N] [--hidden N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2, help="encoder layers (default 2)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    p.add_argument("--lengths", type=str, default="8,12,17,23,31,40",
                   help="sequence lengths, comma-separated (the first is the first call)")
    return p.parse_args()


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main():
    opts = parse_args()
    import torch
    import transformers

    import thunder_mlir

    # every compile is a real one: the persistent cache would serve the shapes an earlier
    # run compiled from disk (a new length then costs ~5% of a first call, not the ~35%
    # of a shape no process has seen)
    thunder_mlir.set_compile_cache_dir(None)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=opts.hidden,
                                  num_hidden_layers=opts.layers, num_attention_heads=4,
                                  intermediate_size=4 * opts.hidden, max_position_embeddings=128)
    model = transformers.BertModel(cfg).eval()
    lengths = [int(n) for n in opts.lengths.split(",")]
    inputs = {n: torch.randint(0, 1000, (2, n)) for n in lengths}

    rows, stages = {}, {}
    with torch.no_grad():
        # one-time process costs (MLIR context, XLA client, sympy) out of both first calls
        warm = thunder_mlir.jit(lambda x: torch.softmax(x * 2, -1), dynamic=True)
        warm(torch.randn(3, 4))
        warm(torch.randn(5, 4))
        for dynamic in (False, True):
            jm = thunder_mlir.jit(model, dynamic=dynamic)
            times = []
            for n in lengths:
                out, dt = timed(lambda: jm(inputs[n]))
                ref = model(inputs[n])
                err = (out.last_hidden_state - ref.last_hidden_state).abs().max().item()
                assert err < 1e-4, f"length {n}: max error {err}"
                times.append(dt)
            hit = statistics.median(timed(lambda: jm(inputs[lengths[-1]]))[1]
                                    for _ in range(30))
            info = thunder_mlir.cache_info(jm)
            rows[dynamic] = (times, hit, info["misses"],
                             info["entries"][0].get("static_because"))
            if dynamic:
                first_entry = next(iter(jm._fn.cache.entries.values()))
            jm(inputs[lengths[0]])  # (last_traces: the first length's entry)
            stages[dynamic] = {s.name: s.seconds for s in thunder_mlir.last_traces(jm)}

    dyn_times, dyn_hit, dyn_traces, why = rows[True]
    st_times, st_hit, st_traces, _ = rows[False]
    first, new = dyn_times[0], statistics.median(dyn_times[1:])
    print(f"BertModel: {opts.layers} layers, hidden {opts.hidden}, batch 2, lengths {lengths}")
    print(f"{'':38s}{'dynamic=True':>14s}{'dynamic=False':>15s}")
    print(f"{'traces (cache misses)':38s}{dyn_traces:>14d}{st_traces:>15d}")
    print(f"{'first call (s)':38s}{first:>14.3f}{st_times[0]:>15.3f}")
    print(f"{'new length, median (s)':38s}{new:>14.3f}"
          f"{statistics.median(st_times[1:]):>15.3f}")
    print(f"{'cache hit, median (ms)':38s}{dyn_hit * 1e3:>14.2f}{st_hit * 1e3:>15.2f}")
    for dynamic in (True, False):
        print(f"first call's stages (dynamic={dynamic}): " + ", ".join(
            f"{k} {v * 1e3:.0f} ms" for k, v in stages[dynamic].items())
            + " (xla-compile: plan building; a symbolic program compiles at its first run)")
    exe = [s.executable for s in first_entry.plan.steps
           if hasattr(s.executable, "seconds")]
    if exe:
        per_shape = list(exe[0].seconds.values())
        print("refinement + XLA compile per concrete shape (s): "
              + ", ".join(f"{t:.3f}" for t in per_shape))
    if why:
        print(f"NOTE: compiled static because {why}")
    print(f"new concrete shape / first compile = {new / first:.1%} (target <= 25%)")
    print(f"new concrete shape, dynamic=True / dynamic=False = "
          f"{new / statistics.median(st_times[1:]):.1%}")


if __name__ == "__main__":
    main()
