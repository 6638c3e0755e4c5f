"""Mixture-of-experts models: eager PyTorch vs torch.compile vs thunder_mlir, at 1 thread.

Rows: the forward (logits, ``torch.no_grad()``) and the training step (forward with the LM
loss, backward, AdamW step) of a tiny Mixtral and a tiny GPT-OSS from transformers
(random weights; the default ``grouped_mm`` experts implementation: sort by expert,
``histc`` for the group sizes, ``torch._grouped_mm``), with thunder_mlir's ratios to eager
and to torch.compile, the first call (trace + compile) of each, thunder_mlir's logits
error against eager and its fallback ops (``thunder_mlir.examine``: op names and calls).

    .venv/bin/python benchmarks/moe.py [--quick]
    .venv/bin/python benchmarks/moe.py --examine-only   # the fallback ops only (no timing)

Each system gets 1 CPU thread: ``torch.set_num_threads(1)`` before XLA's CPU client exists
(thunder_mlir sizes its pool to torch's threads). torch.compile runs transformers' own
path under dynamo (float32 weights: ``transformers::grouped_mm_fallback``, a custom op).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

import thunder_mlir  # noqa: E402

VOCAB, BATCH, SEQ = 1000, 2, 64


def make_model(name: str) -> torch.nn.Module:
    """Mixtral tiny: 2 layers, hidden 128, 4 heads / 2 KV heads, 4 experts of width 256, 2
    per token; GPT-OSS tiny: the same sizes, head_dim 32, a sliding and a full attention
    layer (window 32), experts with biases and GPT-OSS's clamped SwiGLU."""
    T = transformers
    common = dict(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, intermediate_size=256,
                  num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    if name == "Mixtral":
        return T.MixtralForCausalLM(T.MixtralConfig(**common))
    if name == "GPT-OSS":
        return T.GptOssForCausalLM(T.GptOssConfig(
            **common, head_dim=32, sliding_window=32,
            layer_types=["sliding_attention", "full_attention"]))
    raise KeyError(name)


def timed(fn, iters: int, repeats: int = 7):
    """(first-call seconds, median per-call seconds, first output)."""
    t = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t) / iters)
    return first, statistics.median(times), out


def fallbacks(model, ids) -> str:
    """thunder_mlir's fallback ops of the model's forward: 'N calls: op xk, ...'."""
    ex = thunder_mlir.examine(model, ids, use_cache=False)
    ops = ex.fallback_ops
    return f"{sum(o.count for o in ops)} calls" + (": " + ", ".join(
        f"{o.name} x{o.count}" for o in ops) if ops else "")


def forward_cells(model, ids, iters):
    cells = {}
    for system in ("eager", "torch.compile", "thunder_mlir"):
        fn = {"eager": model, "torch.compile": torch.compile(model),
              "thunder_mlir": thunder_mlir.jit(model)}[system]
        try:
            with torch.no_grad():
                cells[system] = timed(lambda: fn(ids, use_cache=False).logits, iters)
        except Exception as e:  # noqa: BLE001 (a failing system is reported, the run goes on)
            cells[system] = f"error ({type(e).__name__}: {str(e)[:120]})"
    return cells


def train_cells(make, ids, iters):
    cells = {}
    for system in ("eager", "torch.compile", "thunder_mlir"):
        model = make()
        fn = {"eager": model, "torch.compile": torch.compile(model),
              "thunder_mlir": thunder_mlir.jit(model)}[system]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            loss = fn(ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        try:
            cells[system] = timed(step, iters)
        except Exception as e:  # noqa: BLE001
            cells[system] = f"error ({type(e).__name__}: {str(e)[:120]})"
    return cells




def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4x fewer timed iterations")
    p.add_argument("--examine-only", action="store_true", help="only the fallback ops")
    opts = p.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_moe_"))
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    names = ("Mixtral", "GPT-OSS")
    print(f"{cpu_name()}; 1 thread; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; batch {BATCH} x {SEQ} tokens")
    for name in names:
        print(f"{name} tiny fallback ops: {fallbacks(make_model(name), ids)}")
    if opts.examine_only:
        return 0
    scale = 4 if opts.quick else 1
    rows, notes = [], []
    for name in names:
        model = make_model(name)
        cells = forward_cells(model, ids, 20 // scale)
        rows.append((f"{name} tiny fwd [ms]", cells))
        if not isinstance(cells["thunder_mlir"], str):
            with torch.no_grad():
                ref = model(ids, use_cache=False).logits
            err = (cells["thunder_mlir"][2] - ref).abs().max().item()
            notes.append(f"{name} fwd: max |thunder_mlir - eager| logits = {err:.1e}")
        rows.append((f"{name} tiny train step [ms]",
                     train_cells(lambda: make_model(name), ids, 8 // scale)))

    def ms(c):
        return c if isinstance(c, str) else f"{c[1] * 1e3:.2f}"

    def ratio(a, b):
        return "-" if isinstance(a, str) or isinstance(b, str) else f"{a[1] / b[1]:.2f}x"

    print(f"\n{'row':30} {'eager':>8} {'compile':>8} {'thunder':>8}   {'compile/eager':>13} "
          f"{'thunder/eager':>13} {'thunder/compile':>15}")
    for label, c in rows:
        e, tc, th = c["eager"], c["torch.compile"], c["thunder_mlir"]
        print(f"{label:30} {ms(e):>8} {ms(tc):>8} {ms(th):>8}   {ratio(tc, e):>13} "
              f"{ratio(th, e):>13} {ratio(th, tc):>15}")
    print("first call [s]: " + "; ".join(
        f"{label.split(' [')[0]}: " + ", ".join(
            f"{k} {v[0]:.1f}" for k, v in c.items() if not isinstance(v, str))
        for label, c in rows))
    for label, c in rows:
        for k, v in c.items():
            if isinstance(v, str):
                notes.append(f"{label} {k}: {v}")
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
