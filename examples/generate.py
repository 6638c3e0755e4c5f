"""Hugging Face ``generate()`` with a jitted ``forward``: tiny GPT-2 and Llama (random
weights), 32 tokens greedily, one sequence and a left-padded batch of 4, with the dynamic
and the static KV cache.

For each case it prints whether the tokens equal eager's, how many programs thunder_mlir
traced and XLA compiled, and the per-token decode latency of eager, torch.compile and
thunder_mlir (1 thread; see ``per_token_seconds``). The usual recipe is all it takes::

    model.forward = thunder_mlir.jit(model.forward)
    model.generate(input_ids, attention_mask=mask, cache_implementation="static")

With the static cache the position is a tensor: prefill is one program and every decode
step reuses one other. With the dynamic cache each new length is a new shape and a new
program (exact; a RecompileWarning past the recompile limit, raised here to 64).

    HF_HUB_OFFLINE=1 .venv/bin/python examples/generate.py [--tokens 32] [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

# an Inductor cache of this run's own (the shared /tmp/torchinductor_<user> may hold a
# half-written artifact of an interrupted run, which then fails to import)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="generate_inductor_"))

import torch  # noqa: E402
import transformers  # noqa: E402

import thunder_mlir  # noqa: E402
from thunder_mlir.runtime import xla  # noqa: E402

VOCAB = 256
PROMPT = 8


def make_model(kind: str) -> torch.nn.Module:
    """A tiny causal LM with random weights (seeded): "gpt2" (2 layers, 64 wide, 4 heads) or
    "llama" (2 layers, 64 wide, 4 heads, 2 KV heads)."""
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=256,
                                      **common)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256, **common)
    return transformers.LlamaForCausalLM(cfg).eval()


def make_prompt(batch: int):
    """(input_ids, attention_mask), both (batch, PROMPT) int64; row i is left-padded by i
    tokens (pad id 0)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (batch, PROMPT), generator=g)
    mask = torch.ones_like(ids)
    for i in range(batch):
        ids[i, :i], mask[i, :i] = 0, 0
    return ids, mask


def generate(model, ids, mask, cache: str | None, tokens: int) -> torch.Tensor:
    """Greedy ``generate`` of exactly ``tokens`` new tokens; (batch, PROMPT + tokens)."""
    return model.generate(ids, attention_mask=mask, max_new_tokens=tokens,
                          min_new_tokens=tokens, do_sample=False, eos_token_id=None,
                          cache_implementation=cache, disable_compile=True)


class _DecodeTimer:
    """Wraps a model's ``forward`` (eager, jitted or compiled) and records the wall time of
    each decode step: a call with one new token per row."""

    def __init__(self, forward):
        self.forward, self.seconds = forward, []

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        out = self.forward(*args, **kwargs)
        if kwargs["input_ids"].shape[1] == 1:
            self.seconds.append(time.perf_counter() - t)
        return out


def per_token_seconds(model, ids, mask, cache: str | None, tokens: int,
                      forwards: dict, repeats: int = 3) -> dict:
    """Per-token decode latency in seconds of each system in ``forwards`` (name -> the
    ``forward`` to install): the median wall time of one decode step's ``forward`` call
    inside ``generate`` (prefill and generate's own Python work, the same for every
    system, excluded). The systems take turns, ``repeats`` generations each, after a
    warm-up generation each (every program already compiled), so that a change of the
    machine's load falls on all of them. (The module's ``forward`` attribute is a guarded
    value: installing the timer re-traces once, in the warm-up.)"""
    timers = {name: _DecodeTimer(fwd) for name, fwd in forwards.items()}
    try:
        for timer in timers.values():
            model.forward = timer
            generate(model, ids, mask, cache, tokens)
            timer.seconds.clear()
        for _ in range(repeats):
            for timer in timers.values():
                model.forward = timer
                generate(model, ids, mask, cache, tokens)
    finally:
        del model.forward  # the class's forward again
    return {name: statistics.median(t.seconds) for name, t in timers.items()}


def run_case(kind: str, cache: str | None, batch: int, tokens: int, torch_compile: bool,
             repeats: int = 3) -> dict:
    """One row: tokens equal to eager's, traces, XLA compiles, per-token seconds per system
    (None for torch.compile when it fails or is not asked for: ``compile_error``)."""
    model = make_model(kind)
    ids, mask = make_prompt(batch)
    row = {"model": kind, "cache": cache or "dynamic", "batch": batch, "torch.compile": None}
    with torch.no_grad():
        expected = generate(model, ids, mask, cache, tokens)
        forwards = {"eager": model.forward}

        compiled_before = len(xla._EXECUTABLES)  # XLA executables compiled (cached by text)
        model.forward = jfn = thunder_mlir.jit(model.forward, recompile_limit=64)
        t = time.perf_counter()
        row["equal"] = torch.equal(generate(model, ids, mask, cache, tokens), expected)
        row["first"] = time.perf_counter() - t
        row["traces"] = thunder_mlir.cache_misses(jfn)
        row["compiles"] = len(xla._EXECUTABLES) - compiled_before
        forwards["thunder_mlir"] = jfn
        del model.forward

        if torch_compile:
            torch._dynamo.reset()
            model.forward = compiled = torch.compile(forwards["eager"])
            try:
                row["compile_equal"] = torch.equal(generate(model, ids, mask, cache, tokens),
                                                   expected)
                forwards["torch.compile"] = compiled
            except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler: reported, not fatal
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            del model.forward
        row.update(per_token_seconds(model, ids, mask, cache, tokens, forwards, repeats))
    return row


def _ms(s) -> str:
    return "     n/a" if s is None else f"{s * 1e3:8.3f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--no-torch-compile", action="store_true")
    opts = p.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':6} {'cache':8} {'batch':>5} {'equal':>6} {'traces':>6} {'compiles':>8} "
          f"{'first [s]':>9} | per-token ms: {'eager':>8} {'compile':>8} {'thunder':>8} "
          f"{'th/eager':>8} {'th/comp':>8}")
    failed = 0
    for kind in ("gpt2", "llama"):
        for cache in (None, "static"):
            for batch in (1, 4):
                r = run_case(kind, cache, batch, opts.tokens, not opts.no_torch_compile)
                failed += not r["equal"]
                comp = r.get("torch.compile")
                print(f"{r['model']:6} {r['cache']:8} {r['batch']:5} {str(r['equal']):>6} "
                      f"{r['traces']:6} {r['compiles']:8} {r['first']:9.2f} |"
                      f"              {_ms(r['eager'])} {_ms(comp)} {_ms(r['thunder_mlir'])} "
                      f"{r['thunder_mlir'] / r['eager']:7.2f}x "
                      + (f"{r['thunder_mlir'] / comp:7.2f}x" if comp else "     n/a"))
                if "compile_error" in r:
                    print(f"    torch.compile failed: {r['compile_error']}")
                elif "compile_equal" in r and not r["compile_equal"]:
                    print("    note: torch.compile's tokens differ from eager's")
    print("(timings on a shared machine are noisy: compare the ratios of one run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
