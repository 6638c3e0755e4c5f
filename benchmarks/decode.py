"""Per-token decode latency with the static KV cache: eager vs torch.compile vs thunder_mlir,
in one run, 1 thread.

Hugging Face ``generate()`` of the tiny GPT-2 and Llama of ``examples/generate.py`` (random
weights), 32 new tokens greedily, ``cache_implementation="static"``, with ``forward`` left
eager, ``torch.compile``d or ``thunder_mlir.jit``ted. A row's time is the median wall time of
one decode step's ``forward`` call (``examples/generate.py: per_token_seconds``); the ratio
columns divide thunder_mlir's by eager's and by torch.compile's (below 1.00x: faster).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/decode.py [--tokens 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import torch  # noqa: E402

from generate import run_case  # noqa: E402  (one XLA thread, its own Inductor cache)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5, help="timed generations per system")
    opts = p.parse_args()
    torch.set_num_threads(1)
    print(f"{'static-cache decode [ms/token]':34} {'eager':>8} {'compile':>8} {'thunder':>8} "
          f"{'thunder/eager':>13} {'thunder/compile':>15}  tokens==eager")
    failed = 0
    for kind in ("gpt2", "llama"):
        for batch in (1, 4):
            r = run_case(kind, "static", batch, opts.tokens, True, opts.repeats)
            comp = r["torch.compile"]
            name = f"{kind} tiny, batch {batch}, {opts.tokens} tokens"
            print(f"{name:34} {r['eager'] * 1e3:8.3f} "
                  + (f"{comp * 1e3:8.3f}" if comp else "   error")
                  + f" {r['thunder_mlir'] * 1e3:8.3f} {r['thunder_mlir'] / r['eager']:12.2f}x "
                  + (f"{r['thunder_mlir'] / comp:14.2f}x" if comp else "            n/a")
                  + f"  {r['equal']} (traces {r['traces']})")
            if "compile_error" in r:
                print(f"  note: torch.compile failed: {r['compile_error']}")
            failed += not r["equal"]
    print("(1 thread; on a shared machine compare the ratios of one run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
