"""Per-call cost of two checkouts of thunder_mlir, A/B in one run: the cache-hit call of a
2x2 float32 add, and a BERT tiny training step (``jit(model)`` forward and backward, the
SGD update eager), each checkout in its own child process (its sources first on
``PYTHONPATH``: ``thunder_mlir/__init__`` adds that checkout's other source roots),
interleaved A, B, A, B, ... ``--rounds`` times, so both see the same machine load. Prints
each figure's median in µs, the ratio of the medians B / A and the median of each round's
B / A (paired: robust to load that changes between rounds). Issue 46 asks that the aliasing work not
grow either (docs/sharp_edges.md).

    .venv/bin/python benchmarks/checkout_ab.py --a /path/to/base --b . [--rounds 5]

A child measures, after a warm-up, the mean of ``--calls`` back-to-back add calls and of
``--steps`` steps (median of 5 such means), with torch.set_num_threads(1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def _mean_us(fn, n: int) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        times.append((time.perf_counter_ns() - t0) / n / 1e3)
    return statistics.median(times)


def child(calls: int, steps: int) -> dict:
    """The figures of the checkout this process imports (µs per call)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    import thunder_mlir

    torch.set_num_threads(1)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    add = thunder_mlir.jit(lambda x, y: x + y)
    for _ in range(200):
        add(a, b)
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, vocab_size=1000, max_position_embeddings=128,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(cfg).train()
    jm = thunder_mlir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 64), generator=torch.Generator().manual_seed(0))

    def step():
        loss = jm(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    return {"add_2x2_us": _mean_us(lambda: add(a, b), calls),
            "bert_tiny_step_us": _mean_us(step, steps),
            "module": os.path.dirname(thunder_mlir.__file__)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", help="checkout A (the base)")
    p.add_argument("--b", help="checkout B (the change)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.calls, args.steps)))
        return 0
    if not (args.a and args.b):
        p.error("--a and --b name the two checkouts")
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for name, root in (("A", args.a), ("B", args.b)):
            env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(root), "thunder_mlir"),
                       HF_HUB_OFFLINE="1")
            proc = subprocess.run([sys.executable, HERE, "--child", "--calls", str(args.calls),
                                   "--steps", str(args.steps)], env=env,
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"checkout {name} ({root}) failed:\n{proc.stderr[-3000:]}")
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {runs[name][-1]}", flush=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    print(f"\nCPU: {cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"medians of {args.rounds} interleaved rounds")
    print("| figure | A µs | B µs | B / A of the medians | median of each round's B / A |\n"
          "|---|---|---|---|---|")
    for key in ("add_2x2_us", "bert_tiny_step_us"):
        a = statistics.median(x[key] for x in runs["A"])
        b = statistics.median(x[key] for x in runs["B"])
        paired = statistics.median(y[key] / x[key] for x, y in zip(runs["A"], runs["B"]))
        print(f"| {key[:-3]} | {a:.1f} | {b:.1f} | {b / a:.3f} | {paired:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
