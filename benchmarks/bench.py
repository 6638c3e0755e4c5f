"""eager PyTorch vs torch.compile vs thunder_mlir (vs jax.jit where the math is simple), in one run.

Rows: per-call time of a 2x2 float32 add (torch tensors in and out; jax arrays for jax.jit),
median forward time of an MLP and of a tiny GPT-2, and the first call (trace + compile) of
each; then a training step (forward + backward + AdamW step) of the MLP (MSE loss) and of
GPT-2 tiny (LM loss) for eager, torch.compile and thunder_mlir, with the bytes each saves
for backward (thunder_mlir's residuals vs eager autograd's saved tensors, measured with
saved_tensors_hooks, parameters excluded). See benchmarks/README.md.

    .venv/bin/python benchmarks/bench.py [--quick] [--threads N]
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
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for every system (default 1): torch's intra-op threads "
                        "and the intra-op pool of XLA's CPU client (jax.jit and thunder_mlir "
                        "share it; thunder_mlir sizes it to torch.get_num_threads())")
    return p.parse_args()


OPTS = parse_args()
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
    }


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

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 256, generator=g), torch.randn(64, 10, generator=g)
    ids = torch.randint(0, 1000, (2, 64), generator=g)
    return {"MLP train step, batch 64": (mlp, (x, y), 1e-5),
            "GPT-2 tiny train step, 2x64": (gpt2, (ids,), 1e-4)}


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
        steady, first, saved = {}, {}, {}
        for system in TRAIN_SYSTEMS:
            try:
                module = factory()
                step, model = train_step_fn(system, module)
                f, s, _ = measure(step, args, iters, repeats)
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
                first[system] = steady[system] = saved[system] = f"error ({type(e).__name__})"
                notes.append(f"{name} / {system}: {type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
                if os.environ.get("BENCH_TRACEBACK"):
                    traceback.print_exc()
        rows.append((f"{name} [ms/step]", steady, "ms"))
        rows.append((f"{name} first step [s]", first, "s"))
        rows.append((f"{name} saved for bwd [KiB]", saved, "KiB"))
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
    torch.set_num_threads(OPTS.threads)
    # before anything creates jax's CPU client: its intra-op pool gets torch's threads
    from thunder_mlir.runtime.xla import start_backends

    start_backends()
    # a fresh Inductor cache, so torch.compile's first call is a cold compile like the others
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-inductor-")
    torch.manual_seed(0)
    scale = 0.25 if OPTS.quick else 1.0
    plan = {  # workload -> (iters per measurement, repeats, unit)
        "add 2x2 f32": (int(2000 * scale), 7, "us"),
        "MLP fwd, batch 64": (int(20 * scale), 7, "ms"),
        "GPT-2 tiny fwd, 2x64": (int(12 * scale), 7, "ms"),
    }
    xla = sum(open(f"/proc/self/task/{t}/comm").read().strip() == "tf_XLAEigen"
              for t in os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else "?"
    print(f"torch {torch.__version__}, jax {jax.__version__}, {os.cpu_count()} cores; threads: "
          f"torch {torch.get_num_threads()}, XLA {xla}{'; --quick' if OPTS.quick else ''}")

    rows, notes = [], []
    t_start = time.perf_counter()
    for name, (fn, args, jfn, jargs, tol) in workloads().items():
        iters, repeats, unit = plan[name]
        steady, first, expected = {}, {}, None
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
        rows.append((f"{name} first call [s]", first, "s"))
        print(f"  ... {name} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
    train_plan = {"MLP train step, batch 64": (max(1, int(20 * scale)), 5),
                  "GPT-2 tiny train step, 2x64": (max(1, int(8 * scale)), 5)}
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
