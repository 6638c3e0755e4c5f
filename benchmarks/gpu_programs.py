"""thunder_mlir's GPU programs compiled for an H100 or H200 without a GPU, beside the same
models written in plain jax: kernels, HBM bytes, matmul FLOPs, roofline time and memory
(docs/gpu.md, "Measured without a device").

    make gpu-aot                                   # once: the deviceless XLA venv
    .venv/bin/python benchmarks/gpu_programs.py --target h100
    .venv/bin/python benchmarks/gpu_programs.py --workloads gpt2-prefill --batch-scale 0.25

Two halves, two processes:

1. Here (the project's venv): each workload's model is built on the meta device, and its
   call is jitted inside ``pipeline.compile_only`` for ``cuda:0``: thunder_mlir traces
   and transforms it exactly as for that GPU (the program's device is CUDA: autocast
   lists, fused attention, donation, the passes of the GPU target) and captures the
   StableHLO of every region instead of compiling it. Written to ``--dir``.
2. ``benchmarks/gpu_compile.py`` in ``.venv-gpu-aot`` compiles those regions with XLA's
   GPU compiler for the target, and the plain-jax references (benchmarks/jax_models.py,
   with plain and with cuDNN attention), and counts each program's kernels
   (benchmarks/hlo_stats.py).

Workloads (the GPU bench's, benchmarks/gpu.py; bfloat16; dropout 0 in both, as the
references have none):

* ``gpt2-train-model``: GPT-2 124M, ``jit(model)`` forward + backward at 8 x 1024 (the
  AdamW update is torch's own kernel, outside XLA: not counted); reference: jax's
  ``value_and_grad``;
* ``gpt2-train-step``: ``jit(step)`` of forward, backward, ``AdamW.step`` and
  ``zero_grad`` at 8 x 1024; reference: the same step, parameters and state donated;
* ``gpt2-prefill``: one 2,048-token forward without gradients (logits and the cache);
* ``gpt2-decode-b1``, ``gpt2-decode-b8``: one token against a static cache of 192
  positions (``StaticCache``: a 128-token prompt and 64 new tokens), ``jit(model.forward)``;
* ``llama1b-train-step``: ``jit(step)`` of TinyLlama's shape (1.1B) at 8 x 1024;
* ``timm-<model>-train`` (issue 48, not in the default list): ``jit(model)`` forward +
  backward of a timm vision model (random init, train mode: BatchNorm's batch statistics
  and running-statistics writes), bfloat16 as the GPT-2 rows (torch's CPU build turns
  ``torch.autocast("cuda")`` off), on 128 x 3 x 224 x 224 images, the cross-entropy
  outside the jit; no plain-jax reference: the kernel counts and roofline
  are thunder_mlir's alone. ``TIMM_DEPTHWISE`` lists the models with depthwise
  convolutions, whose weight gradients are one convolution each (batch_group_count).

Columns: kernels, HBM GiB, matmul TFLOP, roofline ms, and the memory a step needs
beyond its arguments (gpu_compile.beyond_parameters), for thunder_mlir and each
reference, with the ratios thunder / reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
AOT_PYTHON = os.path.join(ROOT, ".venv-gpu-aot", "bin", "python")
sys.path.insert(0, HERE)

WORKLOADS = ("gpt2-train-model", "gpt2-train-step", "gpt2-prefill", "gpt2-decode-b1",
             "gpt2-decode-b8", "llama1b-train-step")
PROMPT, NEW_TOKENS = 128, 64
#: torch.compile's TIMM list's models with depthwise convolutions (issue 48 item 4)
TIMM_DEPTHWISE = ("mobilenetv2_100", "mobilenetv3_large_100", "ghostnet_100",
                  "tf_efficientnet_b0", "convnextv2_nano", "mobilevit_s")
TIMM_BATCH, TIMM_PX = 128, 224


def meta_model(kind: str):
    """A bfloat16 GPT-2 124M or TinyLlama-shaped 1.1B on the meta device, dropout 0."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if kind == "gpt2":
        cfg = GPT2Config(n_positions=2048, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
        cls = GPT2LMHeadModel
    else:
        cfg = LlamaConfig(num_hidden_layers=22, hidden_size=2048, intermediate_size=5632,
                          num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                          max_position_embeddings=2048)
        cls = LlamaForCausalLM
    cfg.attn_implementation = "sdpa"
    with torch.device("meta"):
        model = cls(cfg).to(torch.bfloat16)
    return model


def eager_saved_bytes(kind: str, batch: int, seq: int) -> int:
    """Bytes autograd saves in one eager training forward of the model (the loss of
    ``labels=input_ids``), parameters excluded: every tensor ``saved_tensors_hooks`` packs,
    counted once per storage, on the meta device, with attention as eager runs it on a GPU
    (the flash kernel: q, k, v, the output and its log-sum-exp; grouped key/value heads
    repeated first, which counts their copies)."""
    import torch.nn.functional as F

    model = meta_model(kind)
    ids = torch.zeros((batch, seq), dtype=torch.int64, device="meta")
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st._cdata not in params:
            saved[st._cdata] = st.nbytes()
        return t

    plain = F.scaled_dot_product_attention

    def flash(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
        if attn_mask is not None or dropout_p:
            return plain(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                         enable_gqa=enable_gqa)
        if k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, is_causal, scale=scale)[0]

    F.scaled_dot_product_attention = flash
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, labels=ids)
    finally:
        F.scaled_dot_product_attention = plain
    return sum(saved.values())


def timm_meta_model(name: str):
    """timm's ``name``, random-init, on the meta device, without dropout or stochastic
    depth (tests/test_timm.py imports timm from ``.venv/timm-site``)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_timm

    timm = test_timm._import_timm()
    with torch.device("meta"):
        for extra in ({"drop_rate": 0.0, "drop_path_rate": 0.0}, {"drop_rate": 0.0}, {}):
            try:  # (ghostnet's head drops out at 0.2 by default, in no module)
                return timm.create_model(name, pretrained=False, **extra)
            except TypeError:
                continue
    raise ValueError(f"timm cannot create {name}")


def capture_timm(name: str, target):
    """(captured programs, reference spec, stages) of ``timm-<model>-train``."""
    import thunder_mlir
    from thunder_mlir import pipeline

    model_name = name[len("timm-"):-len("-train")]
    model = timm_meta_model(model_name).train().to(torch.bfloat16)
    x = torch.zeros((TIMM_BATCH, 3, TIMM_PX, TIMM_PX), dtype=torch.bfloat16, device="meta")
    with pipeline.compile_only(target):
        try:
            thunder_mlir.jit(model)(x)
        except pipeline.ProgramsCaptured as c:
            ref = {"model": f"timm:{model_name}", "program": "train", "batch": TIMM_BATCH,
                   "seq": TIMM_PX, "write_back_bytes": c.write_back_bytes}
            return c.programs, ref, c.stages
    raise RuntimeError(f"{name}: the call returned without capturing its programs")


def reference_of(name: str, batch: int, seq: int) -> dict:
    model = "llama" if name.startswith("llama") else "gpt2"
    program = {"train-model": "loss_and_grads", "train-step": "train_step",
               "prefill": "prefill"}.get(name.split("-", 1)[1], "decode")
    return {"model": model, "program": program, "batch": batch, "seq": seq}


def capture(name: str, target, batch_scale: float):
    """(captured programs, reference spec, stages) of workload ``name`` for ``target``."""
    import thunder_mlir
    from thunder_mlir import pipeline

    if name.startswith("timm-"):
        return capture_timm(name, target)
    kind = "llama" if name.startswith("llama") else "gpt2"
    model = meta_model(kind)
    section = name.split("-", 1)[1]
    if section.startswith("train"):
        batch, seq = max(1, int(8 * batch_scale)), 1024
    elif section == "prefill":
        batch, seq = 1, 2048
    else:
        batch, seq = int(section.rsplit("-b", 1)[1]), PROMPT + NEW_TOKENS
    ids = torch.zeros((batch, seq), dtype=torch.int64, device="meta")
    with pipeline.compile_only(target):
        try:
            if section == "train-model":
                thunder_mlir.jit(model)(input_ids=ids, labels=ids)
            elif section == "train-step":
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

                def step(model, opt, ids):
                    loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    return loss
                thunder_mlir.jit(step)(model, opt, ids)
            elif section == "prefill":
                model.eval()
                with torch.no_grad():
                    thunder_mlir.jit(model)(input_ids=ids)
            else:
                from transformers import StaticCache

                model.eval()
                cache = StaticCache(config=model.config, max_cache_len=seq)
                with torch.no_grad():  # the prompt, eagerly on meta: the cache's layers
                    model(input_ids=ids[:, :PROMPT], past_key_values=cache, use_cache=True)
                    forward = thunder_mlir.jit(model.forward)
                    forward(input_ids=ids[:, :1], past_key_values=cache, use_cache=True,
                            cache_position=torch.tensor([PROMPT], device="meta"))
        except pipeline.ProgramsCaptured as c:
            ref = reference_of(name, batch, seq)
            ref["write_back_bytes"] = c.write_back_bytes
            if section.startswith("train"):  # the forward -> backward boundary
                ref["eager_saved_bytes"] = eager_saved_bytes(kind, batch, seq)
                ref["thunder_residual_bytes"] = c.residual_bytes
            return c.programs, ref, c.stages
    raise RuntimeError(f"{name}: the call returned without capturing its programs")


def write_programs(name: str, programs, reference: dict, root: str) -> dict:
    entry = {"name": name, "reference": reference, "programs": []}
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for prog in programs:
        regions = []
        for (region, text), options in zip(prog.regions, prog.options):
            rel = os.path.join(name, f"{prog.name}.{region}.mlir")
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
            regions.append({"name": region, "file": rel, "options": options})
        entry["programs"].append({"name": prog.name, "regions": regions,
                                  "torch_steps": prog.torch_steps})
    return entry


def _gib(b):
    return f"{b / 2**30:.2f}"


def _references(w: dict) -> list[str]:
    return [k for k in w if k.startswith("jax_") and not k.endswith(("_error", "_parameters"))]


def report(results: dict) -> str:
    """The markdown table of a gpu_compile.py result: per workload, thunder_mlir and each
    plain-jax reference, with thunder_mlir's roofline time and memory beyond its arguments
    as ratios to each reference's."""
    lines = [f"Target: {results['device']} (compiled without a device, jax {results['jax']})",
             "", "| workload | system | kernels | HBM GiB | matmul TFLOP | roofline ms | "
             "beyond args GiB | roofline / ref | memory / ref |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in results["workloads"]:
        refs = _references(w)
        for key in ["thunder"] + refs:
            label = "thunder_mlir" if key == "thunder" else f"jax ({key[4:]})"
            progs = w.get(key)
            if progs is None:
                err = w.get(f"{key}_error", "missing")
                lines.append(f"| {w['name']} | {label} | error: {err.splitlines()[0][:120]} "
                             "| | | | | | |")
                continue
            n = sum(p["kernels"] for p in progs)
            by = sum(p["bytes"] for p in progs)
            fl = sum(p["flops"] for p in progs)
            sec = sum(p["seconds"] for p in progs)
            mem = w.get(f"{key}_beyond_parameters", 0)
            r1 = r2 = ""
            if key == "thunder":
                for rk in refs:
                    rs = sum(p["seconds"] for p in w[rk])
                    rm = w.get(f"{rk}_beyond_parameters", 0)
                    r1 += f"{sec / rs:.2f}x ({rk[4:]}) "
                    r2 += f"{mem / rm:.2f}x ({rk[4:]}) " if rm else f"- ({rk[4:]}) "
            lines.append(f"| {w['name']} | {label} | {n} | {_gib(by)} | {fl / 1e12:.2f} | "
                         f"{sec * 1e3:.2f} | {_gib(mem)} | {r1.strip()} | {r2.strip()} |")
    lines.append("")
    for w in results["workloads"]:
        ref = w["reference"]
        if ref.get("thunder_residual_bytes"):
            lines.append(f"{w['name']}: residuals {_gib(ref['thunder_residual_bytes'])} GiB "
                         f"(parameters excluded); eager saves "
                         f"{_gib(ref['eager_saved_bytes'])} GiB (saved_tensors_hooks, flash "
                         f"attention): {ref['thunder_residual_bytes'] / ref['eager_saved_bytes']:.2f}x")
        if ref.get("write_back_bytes"):
            lines.append(f"{w['name']}: written inputs copied back by torch after the run: "
                         f"{_gib(ref['write_back_bytes'])} GiB (counted, read and written, as "
                         "a kernel of thunder_mlir's)")
    for w in results["workloads"]:
        for p in w.get("thunder", []):
            lines.append(f"{w['name']}, thunder_mlir's {p['name']} ({p['regions']} region(s), "
                         f"torch steps {len(p['torch_steps'])}): kernels by kind "
                         f"{p['kinds']}; temp {_gib(p['memory'].get('temp', 0))} GiB, "
                         f"arguments {_gib(p['memory'].get('argument', 0))}, outputs "
                         f"{_gib(p['memory'].get('output', 0))}, aliased "
                         f"{_gib(p['memory'].get('alias', 0))}")
            for k in p["top"]:
                lines.append(f"    {k['seconds'] * 1e6:8.1f} us  {k['kind']:<22} "
                             f"{k['bytes'] / 2**20:9.1f} MiB {k['flops'] / 1e9:9.1f} GFLOP  "
                             f"{k['source'] or '?'}  {k['op'][:60]}")
        for rk in _references(w):
            for p in w[rk]:
                lines.append(f"{w['name']}, {rk}: kernels by kind {p['kinds']}; temp "
                             f"{_gib(p['memory'].get('temp', 0))} GiB")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="h100", choices=("h100", "h200"))
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--dir", default=os.path.join(ROOT, "build", "gpu-programs"))
    p.add_argument("--batch-scale", type=float, default=1.0,
                   help="multiply the training batch (8) by this (quick runs)")
    p.add_argument("--capture-only", action="store_true")
    p.add_argument("--skip-capture", action="store_true",
                   help="compile the programs an earlier run captured in --dir")
    p.add_argument("--reuse-references", action="store_true",
                   help="keep the plain-jax rows of the last run (same shapes) instead of "
                        "compiling them again")
    p.add_argument("--references", default="xla,cudnn,cudnn-opmath",
                   help="the plain-jax references' attention (jax_models.py); cudnn-opmath: "
                        "cuDNN attention and torch's rounding of biased linear layers")
    args = p.parse_args(argv)
    from thunder_mlir.pipeline import Target

    names = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200 141GB HBM3e"}
    target = Target(torch.device("cuda", 0), names[args.target], compile_only=True)
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "manifest.json")
    manifest = {"target": args.target, "workloads": []}
    if os.path.exists(path):  # (workloads captured by an earlier run are kept)
        with open(path) as f:
            manifest["workloads"] = json.load(f)["workloads"]
    names = args.workloads.split(",")
    for name in ([] if args.skip_capture else names):
        t0 = time.perf_counter()
        programs, reference, stages = capture(name, target, args.batch_scale)
        entry = write_programs(name, programs, reference, args.dir)
        manifest["workloads"] = [w for w in manifest["workloads"] if w["name"] != name]
        manifest["workloads"].append(entry)
        with open(os.path.join(args.dir, name, "stages.txt"), "w") as f:
            f.write("\n\n".join(str(s) for s in stages))
        print(f"captured {name}: {[(p.name, len(p.regions), len(p.torch_steps)) for p in programs]}"
              f" in {time.perf_counter() - t0:.1f} s", flush=True)
        with open(path, "w") as f:
            json.dump(manifest, f, indent=1)
    manifest["workloads"].sort(key=lambda w: WORKLOADS.index(w["name"])
                               if w["name"] in WORKLOADS else len(WORKLOADS))
    if args.capture_only:
        return 0
    if not os.path.exists(AOT_PYTHON):
        print(f"{AOT_PYTHON} is missing: run `make gpu-aot` first")
        return 2
    out = os.path.join(args.dir, f"results-{args.target}.json")
    fresh = os.path.join(args.dir, "results-new.json")
    subprocess.run([AOT_PYTHON, os.path.join(HERE, "gpu_compile.py"), "--target", args.target,
                    "--programs", args.dir, "--out", fresh, "--references",
                    "" if args.reuse_references else args.references,
                    "--workloads", ",".join(names)], check=True)
    with open(fresh) as f:
        results = json.load(f)
    if os.path.exists(out):  # (the workloads of earlier runs, not compiled again, are kept)
        with open(out) as f:
            old = {w["name"]: w for w in json.load(f)["workloads"]}
        if args.reuse_references:  # the plain-jax rows of the last run, same programs
            for w in results["workloads"]:
                prev = old.get(w["name"], {})
                same = {k: v for k, v in prev.get("reference", {}).items()
                        if k in ("model", "program", "batch", "seq")} == \
                    {k: v for k, v in w["reference"].items()
                     if k in ("model", "program", "batch", "seq")}
                for k, v in prev.items():
                    if k.startswith("jax_") and same:
                        w[k] = v
        kept = [w for n, w in old.items()
                if n not in {r["name"] for r in results["workloads"]}]
        results["workloads"] = sorted(
            kept + results["workloads"],
            key=lambda w: WORKLOADS.index(w["name"]) if w["name"] in WORKLOADS else 99)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    text = report(results)
    print(text)
    with open(os.path.join(args.dir, "report.md"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
