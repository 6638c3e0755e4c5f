"""GPU benchmark: eager PyTorch, torch.compile and thunder_mlir in one process (docs/gpu.md).

Models (random init, bf16): GPT-2 small (124M) and a Llama-style model of about 1.1B
parameters (22 layers, hidden 2048, MLP 5632, 32 heads, 4 KV heads: TinyLlama's shape).
For each model and system:

* **train**: one AdamW step (forward with the loss, backward, ``optimizer.step``), tokens/s
  and MFU, against a bf16 matmul roofline measured in this run (the best of
  ``torch.matmul`` at 8192^3: the achievable peak, not the datasheet's);
  FLOP per token = 6 N + 12 L H S (parameters N, layers L, hidden H, sequence S: the
  PaLM appendix's count, attention included);
* **prefill**: one forward over 2,048 tokens (batch 1, no grad), tokens/s;
* **decode**: ``generate`` with ``cache_implementation="static"`` at batch 1 and 8, new
  tokens/s (the jitted or compiled ``forward`` serves every step);
* **memory**: torch's peak allocated bytes of the section, plus XLA's peak on the device
  (``memory_stats``; XLA's counter cannot be reset: it is the process's peak so far).

Ratios divide thunder_mlir's throughput by eager's and by torch.compile's (above 1.00x:
thunder_mlir is faster). Each row is written to ``--out`` (JSON lines) as soon as it is
measured, so a run cut short by its time limit keeps what it measured.

    python benchmarks/gpu.py --out OUT/bench.jsonl        # on a GPU (tools/gpu_check.sh)
    python benchmarks/gpu.py --dry-run                    # tiny models on the CPU: checks the logic
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

SYSTEMS = ("eager", "torch.compile", "thunder_mlir")


def make_model(kind: str, tiny: bool, device, dtype):
    """A random-init Hugging Face causal LM: ``gpt2`` (124M) or ``llama1b`` (~1.1B);
    ``tiny``: 2 layers, width 64 (the dry run)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=2048) \
            if tiny else GPT2Config(n_positions=2048)
        cfg.attn_implementation = "sdpa"
        model = GPT2LMHeadModel(cfg)
    elif kind == "llama1b":
        cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=176,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                          max_position_embeddings=2048) if tiny else \
            LlamaConfig(num_hidden_layers=22, hidden_size=2048, intermediate_size=5632,
                        num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                        max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg)
    else:
        raise ValueError(f"unknown model {kind!r}: gpt2 or llama1b")
    return model.to(device=device, dtype=dtype)


def shape_of(model) -> tuple[int, int, int]:
    """(parameters, layers, hidden) of a GPT-2 or Llama model."""
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
    hidden = getattr(cfg, "hidden_size", None) or cfg.n_embd
    return sum(p.numel() for p in model.parameters()), layers, hidden


def train_flops_per_token(n_params: int, layers: int, hidden: int, seq: int) -> float:
    """6 N + 12 L H S: forward and backward of the weights' matmuls and of attention."""
    return 6.0 * n_params + 12.0 * layers * hidden * seq


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup: int, iters: int) -> float:
    """Median seconds of ``fn()`` over ``iters`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def matmul_roofline(device, dtype, n: int) -> float:
    """Achieved FLOP/s of an n^3 matmul in ``dtype`` (the best of 10)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def wrap(system: str, model):
    """The callable model of ``system``: the module itself, ``torch.compile``d, or
    ``thunder_mlir.jit``ted."""
    if system == "eager":
        return model
    if system == "torch.compile":
        return torch.compile(model)
    import thunder_mlir

    return thunder_mlir.jit(model)


def peak_memory(device) -> dict:
    """torch's peak allocated bytes since the last reset and XLA's process peak."""
    out = {"torch_peak_bytes": None, "xla_peak_bytes": None}
    if device.type != "cuda":
        return out
    out["torch_peak_bytes"] = torch.cuda.max_memory_allocated(device)
    try:
        from jax.extend import backend

        stats = backend.get_backend("cuda").devices()[device.index or 0].memory_stats() or {}
        out["xla_peak_bytes"] = stats.get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001 - no jax GPU backend started (eager/compile only)
        pass
    return out


def bench_train(kind, system, args, device, dtype, roofline):
    model = make_model(kind, args.dry_run, device, dtype)
    n, layers, hidden = shape_of(model)
    run = wrap(system, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4,
                            fused=device.type == "cuda")
    ids = torch.randint(0, model.config.vocab_size, (args.train_batch, args.train_seq),
                        device=device)

    def step():
        loss = run(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t = timed(step, device, args.warmup, args.iters)
    tokens = args.train_batch * args.train_seq
    flops = train_flops_per_token(n, layers, hidden, args.train_seq) * tokens / t
    return {"tokens_per_s": tokens / t, "step_s": t, "mfu": flops / roofline,
            "params": n, **peak_memory(device)}


def bench_prefill(kind, system, args, device, dtype):
    model = make_model(kind, args.dry_run, device, dtype).eval()
    run = wrap(system, model)
    ids = torch.randint(0, model.config.vocab_size, (1, args.prefill), device=device)

    def fwd():
        with torch.no_grad():
            run(input_ids=ids)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t = timed(fwd, device, args.warmup, args.iters)
    return {"tokens_per_s": args.prefill / t, "step_s": t, **peak_memory(device)}


def bench_decode(kind, system, batch, args, device, dtype):
    model = make_model(kind, args.dry_run, device, dtype).eval()
    if system == "thunder_mlir":  # as examples/generate.py: the bound forward, jitted
        import thunder_mlir

        model.forward = thunder_mlir.jit(model.forward, recompile_limit=64)
    elif system == "torch.compile":
        model.forward = torch.compile(model.forward)
    ids = torch.randint(0, model.config.vocab_size, (batch, args.prompt), device=device)
    mask = torch.ones_like(ids)

    def gen():
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                  min_new_tokens=args.new_tokens, do_sample=False,
                                  cache_implementation="static", disable_compile=True,
                                  pad_token_id=0)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t = timed(gen, device, 1, max(1, args.iters // 2))
    return {"tokens_per_s": batch * args.new_tokens / t, "generate_s": t,
            "_tokens": gen()[:, args.prompt:].cpu(), **peak_memory(device)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true",
                   help="tiny models on the CPU, float32, 1 iteration: checks the logic")
    p.add_argument("--models", default="gpt2,llama1b")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--sections", default="train,prefill,decode")
    p.add_argument("--out", default=None, help="JSON lines, one per measured row")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--train-seq", type=int, default=1024)
    p.add_argument("--prefill", type=int, default=2048)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--decode-batches", default="1,8")
    args = p.parse_args(argv)
    if args.dry_run:
        device, dtype = torch.device("cpu"), torch.float32
        args.warmup, args.iters = 1, 1
        args.train_batch, args.train_seq, args.prefill = 2, 32, 64
        args.prompt, args.new_tokens = 8, 4
        roof_n = 256
    else:
        if not torch.cuda.is_available():
            print("benchmarks/gpu.py needs a CUDA device (use --dry-run on a CPU)")
            return 2
        device, dtype = torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
        roof_n = 8192
    out = open(args.out, "a") if args.out else None

    def emit(row: dict) -> None:
        print(json.dumps(row), flush=True)
        if out is not None:
            out.write(json.dumps(row) + "\n")
            out.flush()

    import jax
    import transformers

    env = {"kind": "env", "device": torch.cuda.get_device_name(device)
           if device.type == "cuda" else "cpu", "torch": torch.__version__,
           "jax": jax.__version__, "transformers": transformers.__version__,
           "python": sys.version.split()[0], "dtype": str(dtype)}
    roofline = matmul_roofline(device, dtype, roof_n)
    env["matmul_roofline_tflops"] = roofline / 1e12
    emit(env)
    systems = args.systems.split(",")
    failed = 0
    for kind in args.models.split(","):
        cases = []
        if "train" in args.sections:
            cases.append(("train", None))
        if "prefill" in args.sections:
            cases.append(("prefill", None))
        if "decode" in args.sections:
            cases += [("decode", int(b)) for b in args.decode_batches.split(",")]
        for section, batch in cases:
            rows = {}
            for system in systems:
                t0 = time.perf_counter()
                try:
                    if section == "train":
                        r = bench_train(kind, system, args, device, dtype, roofline)
                    elif section == "prefill":
                        r = bench_prefill(kind, system, args, device, dtype)
                    else:
                        r = bench_decode(kind, system, batch, args, device, dtype)
                except Exception as e:  # noqa: BLE001 - one failing system must not end the run
                    r = {"error": f"{type(e).__name__}: {e}"[:500]}
                    failed += system == "thunder_mlir"
                r.update(kind="row", model=kind, section=section, batch=batch, system=system,
                         wall_s=time.perf_counter() - t0)
                tokens = r.pop("_tokens", None)
                if tokens is not None:  # greedy decode: the same tokens as eager's?
                    r["_tok"] = tokens
                    ref = rows.get("eager", {}).get("_tok")
                    r["tokens_equal_eager"] = None if ref is None else torch.equal(tokens, ref)
                rows[system] = r
                emit({k: v for k, v in r.items() if k != "_tok"})
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            th = rows.get("thunder_mlir", {}).get("tokens_per_s")
            ratios = {f"thunder/{s}": th / rows[s]["tokens_per_s"] for s in ("eager",
                      "torch.compile") if th and rows.get(s, {}).get("tokens_per_s")}
            emit({"kind": "ratio", "model": kind, "section": section, "batch": batch,
                  **ratios})
    if out is not None:
        out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
