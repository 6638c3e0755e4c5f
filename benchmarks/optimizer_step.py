"""torch.optim.AdamW's step: eager vs torch.compile(opt.step) vs thunder_mlir.jit(opt.step).

The parameters of the training benchmark's models (bench.py: GPT-2 tiny, 2 layers x 128,
28 tensors; GPT-2 4 layers x 512), gradients set once (random, fixed), then ``opt.step()``
timed alone: the median of ``repeats`` measurements of ``iters`` back-to-back steps, after
the first call (trace + compile) and one warm-up, the systems interleaved. Every system runs the same number of
steps from the same parameters, so the last column checks its parameters against eager's
(max abs difference). torch and XLA at 1 thread by default (``--threads N``, 0: torch's
default); the CPU is named in the header. Then GPT-2 tiny's whole training step (forward,
backward, AdamW step, zero_grad) five ways: eager, ``jit(model)`` with eager or jitted
``opt.step``, ``torch.compile`` of both, and ``thunder_mlir.jit(step)`` (one program).

    .venv/bin/python benchmarks/optimizer_step.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402




def models():
    """name -> a model factory (the configurations of bench.py's training rows)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    def gpt2(n_layer, n_embd, n_head):
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=1000,
                         n_positions=256, bos_token_id=999, eos_token_id=999,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(cfg)

    return {"GPT-2 tiny (2x128) AdamW step": lambda: gpt2(2, 128, 4),
            "GPT-2 4x512 AdamW step": lambda: gpt2(4, 512, 8)}


def prepared(factory, **opt_kwargs):
    """(model, AdamW on its parameters) with fixed random gradients."""
    model = factory()
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g) * 1e-2
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01,
                                    **opt_kwargs)


def measure(steps: dict, iters: int, repeats: int):
    """{system: (first-call seconds, median and minimum seconds per step)}: each system's
    first call (trace + compile) and one warm-up, then ``repeats`` rounds, each timing
    ``iters`` back-to-back steps of every system in turn (interleaved, so load from other
    processes falls on all systems alike)."""
    first, times = {}, {k: [] for k in steps}
    for k, step in steps.items():
        t = time.perf_counter()
        step()
        first[k] = time.perf_counter() - t
        step()
    for _ in range(repeats):
        for k, step in steps.items():
            t = time.perf_counter()
            for _ in range(iters):
                step()
            times[k].append((time.perf_counter() - t) / iters)
    return {k: (first[k], statistics.median(times[k]), min(times[k])) for k in steps}


SYSTEMS = ("eager", "eager foreach", "torch.compile", "thunder_mlir")


def step_of(system: str, opt):
    if system in ("eager", "eager foreach"):
        return opt.step
    if system == "torch.compile":
        return torch.compile(opt.step)
    return thunder_mlir.jit(opt.step)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="4x fewer timed steps")
    ap.add_argument("--no-train", action="store_true", help="only the optimizer-step rows")
    ap.add_argument("--train-only", action="store_true", help="only the whole-step rows")
    opts = ap.parse_args()
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    from thunder_mlir.runtime.xla import start_backends

    start_backends()  # XLA's CPU pool sized to torch's threads (runtime/xla.py)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-optim-")
    scale = 0.25 if opts.quick else 1.0
    print(f"{cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"{'workload':30s} {'system':14s} {'first [s]':>9s} {'median':>8s} {'min':>8s} "
          f"{'/eager':>7s} {'/compile':>9s} {'max|p-eager|':>12s}   (ms/step; ratios of "
          "medians)")
    for name, factory in ({} if opts.train_only else models()).items():
        iters = max(2, int((20 if "tiny" in name else 4) * scale))
        made, steps = {}, {}
        for system in SYSTEMS:
            model, opt = prepared(factory, **({"foreach": True}
                                              if system == "eager foreach" else {}))
            made[system], steps[system] = model, step_of(system, opt)
        res = measure(steps, iters, 9)
        eager, comp = res["eager"], res["torch.compile"]
        ref = list(made["eager"].parameters())
        for system in SYSTEMS:
            first, med, low = res[system]
            diff = max((a - b).abs().max().item()
                       for a, b in zip(made[system].parameters(), ref))
            print(f"{name:30s} {system:14s} {first:9.2f} {med * 1e3:8.3f} {low * 1e3:8.3f} "
                  f"{med / eager[1]:6.2f}x {med / comp[1]:8.2f}x {diff:12.2e}")
    if not opts.no_train:
        train_rows(iters=max(2, int(10 * scale)))
    return 0


TRAIN = ("eager", "jit(model) + opt.step", "jit(model) + jit(opt.step)",
         "compile(model) + compile(opt.step)", "jit(step): one program")


def train_rows(iters: int) -> None:
    """Whole training steps of GPT-2 tiny (LM loss, batch 2 x 64; the model and optimizer
    of bench.py's "GPT-2 tiny train step" row): forward, ``loss.backward()``, AdamW
    ``step()``, ``zero_grad()``; the five ways of compiling it, interleaved (the last:
    ``thunder_mlir.jit(step)(model, opt, ids)``, the whole step as one program,
    train_step.py)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 64), generator=g)
    steps, made = {}, {}
    for system in TRAIN:
        model = models()["GPT-2 tiny (2x128) AdamW step"]()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if system.startswith("jit(step)"):
            def lm_step(model, opt, ids):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss
            jstep = thunder_mlir.jit(lm_step)
            steps[system] = lambda jstep=jstep, model=model, opt=opt: jstep(model, opt, ids)
            made[system] = model
            continue
        if system == "eager":
            fwd, ostep = model, opt.step
        elif system.startswith("compile"):
            fwd, ostep = torch.compile(model), torch.compile(opt.step)
        else:
            fwd = thunder_mlir.jit(model)
            ostep = thunder_mlir.jit(opt.step) if "jit(opt.step)" in system else opt.step

        def step(fwd=fwd, opt=opt, ostep=ostep):
            loss = fwd(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            ostep()
            opt.zero_grad(set_to_none=True)
        steps[system], made[system] = step, model
    res = measure(steps, iters, 9)
    eager = res["eager"][1]
    comp = res["compile(model) + compile(opt.step)"][1]
    ref = list(made["eager"].parameters())
    print(f"\nGPT-2 tiny whole training step, 2x64 (ms/step; ratios of medians)")
    for system in TRAIN:
        first, med, low = res[system]
        diff = max((a - b).abs().max().item() for a, b in zip(made[system].parameters(), ref))
        print(f"{system:36s} first {first:6.2f} s  median {med * 1e3:7.3f}  min {low * 1e3:7.3f}"
              f"  /eager {med / eager:5.2f}x  /compile {med / comp:5.2f}x  max|p-eager| "
              f"{diff:.2e}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import thunder_mlir

    sys.exit(main())
