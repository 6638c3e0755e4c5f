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

With ``--whole`` (``--big``: GPT-2 4x512 too) only the whole-step table of issue 27: MLP,
nanoGPT block, GPT-2 tiny, Llama tiny, BERT tiny, four ways (eager, torch.compile of model
and opt.step, jit(model) + eager opt.step, jit(step)), with bytes saved for backward and the
peak step memory (benchmarks/README.md).

    .venv/bin/python benchmarks/optimizer_step.py [--quick] [--threads N]
    .venv/bin/python benchmarks/optimizer_step.py --whole [--big] [--threads N] [--only MLP]
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
    ap.add_argument("--whole", action="store_true",
                    help="only the whole-step table (MLP, nanoGPT block, GPT-2/Llama/BERT tiny)")
    ap.add_argument("--big", action="store_true", help="--whole with GPT-2 4x512 too")
    ap.add_argument("--only", help="--whole: only the models whose name contains this")
    ap.add_argument("--repeats", type=int, default=9, help="--whole: interleaved rounds")
    ap.add_argument("--peak-runs", type=int, default=3,
                    help="--whole: fresh processes per peak-memory cell (their median)")
    ap.add_argument("--peak-of", help=argparse.SUPPRESS)  # child: "model|system"
    opts = ap.parse_args()
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    from thunder_mlir.runtime.xla import start_backends

    start_backends()  # XLA's CPU pool sized to torch's threads (runtime/xla.py)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-optim-")
    thunder_mlir.set_compile_cache_dir(None)  # cold first calls, as bench.py
    if opts.peak_of:
        return _peak_child(*opts.peak_of.split("|"), opts.big)
    if opts.whole or opts.big:
        print(f"{cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} "
              f"thread(s); load avg {os.getloadavg()}")
        whole_rows(max(2, int(10 * (0.25 if opts.quick else 1.0))), opts.repeats,
                   opts.threads, opts.big, opts.only, opts.peak_runs)
        return 0
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
# the whole-step table (--whole): the four ways issue 27 compares, on six models
WHOLE = ("eager", "compile(model) + compile(opt.step)", "jit(model) + opt.step",
         "jit(step): one program")


def _whole_models(big: bool):
    """name -> (model factory, loss(model, *batch), batch): bench.py's training rows (MLP,
    GPT-2 tiny and 4x512, Llama tiny, BERT tiny; examples/mlp.py, examples/train_llama.py)
    and a nanoGPT block (examples/nanogpt_attention.py's CausalSelfAttention with
    nanoGPT's LayerNorm / 4x GELU MLP / residuals, 256 wide, 4 x 128 tokens, MSE loss)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "examples"))
    from torch import nn

    from mlp import make_mlp
    from nanogpt_attention import CausalSelfAttention
    from train_llama import make_model as make_llama
    from transformers import BertConfig, BertForMaskedLM

    class Block(nn.Module):
        """nanoGPT's Block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

        def __init__(self, n_embd=256, n_head=4):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    def seeded(f):
        def g():
            torch.manual_seed(0)
            return f()
        return g

    def bert():
        cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, vocab_size=1000, max_position_embeddings=128,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return BertForMaskedLM(cfg)

    def mse(m, x, y):
        return torch.nn.functional.mse_loss(m(x), y)

    def lm(m, ids):
        return m(input_ids=ids, labels=ids, use_cache=False).loss

    def mlm(m, ids):
        return m(input_ids=ids, labels=ids).loss

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 64), generator=g)
    rows = {
        "MLP, batch 64": (seeded(make_mlp), mse,
                          (torch.randn(64, 256, generator=g), torch.randn(64, 10, generator=g))),
        "nanoGPT block 256, 4x128": (seeded(Block), mse,
                                     (torch.randn(4, 128, 256, generator=g),
                                      torch.randn(4, 128, 256, generator=g))),
        "GPT-2 tiny, 2x64": (models()["GPT-2 tiny (2x128) AdamW step"], lm, (ids,)),
        "Llama tiny, 2x64": (make_llama, lm, (ids,)),
        "BERT tiny, 2x64": (seeded(bert), mlm, (ids,)),
    }
    if big:
        rows["GPT-2 4x512, 4x128"] = (models()["GPT-2 4x512 AdamW step"], lm,
                                      (torch.randint(0, 1000, (4, 128), generator=g),))
    return rows


def _whole_step(system: str, factory, loss_fn, batch):
    """(step callable, model, jitted object or None) of one way of running the step."""
    model = factory().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if system.startswith("jit(step)"):
        def train_step(model, opt, *batch):
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        jstep = thunder_mlir.jit(train_step)
        return (lambda: jstep(model, opt, *batch)), model, jstep
    if system == "eager":
        fwd, ostep, jobj = model, opt.step, None
    elif system.startswith("compile"):
        fwd, ostep, jobj = torch.compile(model), torch.compile(opt.step), None
    else:
        fwd = jobj = thunder_mlir.jit(model)
        ostep = thunder_mlir.jit(opt.step) if "jit(opt.step)" in system else opt.step

    def step():
        loss = loss_fn(fwd, *batch)
        loss.backward()
        ostep()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, model, jobj


def _saved_bytes(system, factory, loss_fn, batch):
    """Bytes saved for backward in one forward, parameters excluded: autograd's saved
    tensors (saved_tensors_hooks, examples/_train_common.py ``SavedBytes``) for eager,
    torch.compile and jit(model) (whose forward hands its residuals to autograd); "n/a"
    for jit(step), whose residuals never leave the one program (they are among its XLA
    temporaries, printed on a line of their own: :func:`_program_bytes`)."""
    from _train_common import SavedBytes

    if system.startswith("jit(step)"):
        return "n/a"
    step, model, jobj = _whole_step(system, factory, loss_fn, batch)
    fwd = {"eager": model}.get(system) or (torch.compile(model) if system.startswith(
        "compile") else jobj)
    with SavedBytes(model.parameters()) as sb:
        loss = loss_fn(fwd, *batch)
    loss.backward()
    return sb.activations


def _program_bytes(factory, loss_fn, batch) -> tuple[int, int, int]:
    """(temporaries, results, results written in place) in bytes of jit(step)'s XLA
    executables, from XLA's buffer assignment (``get_compiled_memory_stats``): the
    temporaries hold the residuals the backward reads and every intermediate; the results
    are the new parameters and optimizer state, computed into the donated buffers of the
    resident tensors they replace (aliased: runtime/resident.py, docs/optim.md)."""
    from thunder_mlir.runtime.plan import XlaStep

    step, _, jobj = _whole_step("jit(step): one program", factory, loss_fn, batch)
    step()
    temp = out = alias = 0
    for s in jobj._train._fn.last.plan.steps:
        if type(s) is XlaStep:
            stats = s.executable.get_compiled_memory_stats()
            temp += stats.temp_size_in_bytes
            out += stats.output_size_in_bytes
            alias += stats.alias_size_in_bytes
    return temp, out, alias


def _peak_child(name: str, system: str, big: bool) -> int:
    """In this (fresh) process: resident-set peak of one step minus the resident set before
    it, after 3 warm-up steps (VmHWM reset through /proc/self/clear_refs after
    malloc_trim; the method of bench.py ``peak_step_bytes``: XLA's and torch's
    allocations both count). Prints {"peak": bytes}."""
    import ctypes
    import gc
    import json

    factory, loss_fn, batch = _whole_models(big)[name]
    step, _, _ = _whole_step(system, factory, loss_fn, batch)
    for _ in range(3):
        step()

    def status(field):
        with open("/proc/self/status") as f:
            return int(next(ln for ln in f if ln.startswith(field)).split()[1]) * 1024
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    step()
    print(json.dumps({"peak": status("VmHWM") - before}))
    return 0


def whole_rows(iters: int, repeats: int, threads: int, big: bool, only: str | None,
               peak_runs: int = 3) -> None:
    """The whole-step table: per model, the four ways of ``WHOLE`` interleaved (median and
    minimum ms/step over ``repeats`` rounds of ``iters`` steps), ratios of jit(step) to
    eager and to torch.compile (model and opt.step compiled), parameters after the timed
    steps against eager's, bytes saved for backward and the peak step memory: the median
    of ``peak_runs`` fresh processes per system, their range in parentheses (one process's
    resident-set peak moved by up to 20% between runs: torch.compile's nanoGPT block step
    12,080-14,380 KiB on 2026-11-29)."""
    import json

    for name, (factory, loss_fn, batch) in _whole_models(big).items():
        if only and only not in name:
            continue
        steps, made = {}, {}
        for system in WHOLE:
            steps[system], made[system], _ = _whole_step(system, factory, loss_fn, batch)
        n = iters if "4x512" not in name else max(1, iters // 5)
        res = measure(steps, n, repeats)
        eager = res["eager"][1]
        comp = res["compile(model) + compile(opt.step)"][1]
        ref = list(made["eager"].parameters())
        print(f"\n{name} whole training step (AdamW), {torch.get_num_threads()} thread(s); "
              f"ms/step; ratios of medians; load avg {os.getloadavg()[0]:.1f}", flush=True)
        for system in WHOLE:
            first, med, low = res[system]
            diff = max((a - b).abs().max().item()
                       for a, b in zip(made[system].parameters(), ref))
            saved = _saved_bytes(system, factory, loss_fn, batch)
            cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(threads),
                   "--peak-of", f"{name}|{system}"] + (["--big"] if big else [])
            peaks = []
            for _ in range(peak_runs):  # (a fresh process each: the median of their peaks)
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if p.returncode == 0:
                    peaks.append(json.loads(p.stdout.strip().splitlines()[-1])["peak"])
            peak = int(statistics.median(peaks)) if len(peaks) == peak_runs else "error"
            spread = f" ({min(peaks) // 1024}-{max(peaks) // 1024})" \
                if peak != "error" and peak_runs > 1 else ""
            kib = (lambda v: f"{v / 1024:9.0f}" if isinstance(v, int) else f"{v:>9s}")
            print(f"  {system:36s} first {first:6.2f} s  median {med * 1e3:8.3f}  min "
                  f"{low * 1e3:8.3f}  /eager {med / eager:5.2f}x  /compile {med / comp:5.2f}x"
                  f"  max|p-eager| {diff:.1e}  saved {kib(saved)} KiB  peak {kib(peak)} KiB"
                  f"{spread}", flush=True)
        temp, out, alias = _program_bytes(factory, loss_fn, batch)
        print(f"  jit(step)'s XLA program: temporaries (residuals included) {temp / 1024:.0f} "
              f"KiB, results {out / 1024:.0f} KiB (new parameters and optimizer state), "
              f"{alias / 1024:.0f} KiB of them computed in place", flush=True)


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
