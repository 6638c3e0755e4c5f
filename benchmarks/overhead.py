"""Per-call overhead of the cache-hit path: a 2x2 float32 add, side by side in one run.

Systems: eager torch, torch.compile (mode default), thunder_mlir (torch tensors in and out)
and jax.jit on jax arrays (the floor XLA dispatch allows). Each number is the median over
``--repeats`` measurements of ``--calls`` back-to-back calls after a warm-up, with
torch.set_num_threads(1). Then a profile of one thunder_mlir call: its components are
called individually (perf_counter_ns around loops of each) — input flatten + key, cache
lookup, DLPack import of the inputs, XLA execute, DLPack export of the output, output
unflatten — and the remainder of the measured call is reported as glue.

    .venv/bin/python benchmarks/overhead.py [--calls 5000] [--repeats 7] [--no-compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import thunder_mlir  # noqa: E402
import thunder_mlir.runtime.xla  # noqa: E402


def add(a, b):
    return a + b


def per_call_us(fn, calls: int, repeats: int, finish=lambda r: r) -> float:
    """Median over ``repeats`` of the mean time of ``calls`` back-to-back ``fn()`` (µs)."""
    for _ in range(max(100, calls // 10)):  # warm-up
        r = fn()
    finish(r)
    times = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        for _ in range(calls):
            r = fn()
        finish(r)
        times.append((time.perf_counter_ns() - t) / calls / 1e3)
    return statistics.median(times)


def systems(calls: int, repeats: int, with_compile: bool) -> dict[str, float]:
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    out = {}
    out["eager torch"] = per_call_us(lambda: add(a, b), calls, repeats)
    if with_compile:
        try:
            cf = torch.compile(add)
            for _ in range(3):
                cf(a, b)
            torch.testing.assert_close(cf(a, b), a + b)
            out["torch.compile"] = per_call_us(lambda: cf(a, b), calls, repeats)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"torch.compile failed: {type(e).__name__}: {e}", file=sys.stderr)
    tf = thunder_mlir.jit(add)
    torch.testing.assert_close(tf(a, b), a + b)
    out["thunder_mlir"] = per_call_us(lambda: tf(a, b), calls, repeats)
    assert thunder_mlir.cache_misses(tf) == 1
    jf = jax.jit(add)
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    jf(ja, jb).block_until_ready()
    out["jax.jit (jax arrays)"] = per_call_us(lambda: jf(ja, jb), calls, repeats,
                                              finish=lambda r: r.block_until_ready())
    return out


class GuardedMLP(torch.nn.Module):
    """4 Linear layers whose forward reads plain attributes (a scale, a flag), each a
    guard of the compiled program (thunder_mlir/guards.py)."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
        self.scale = 0.5
        self.use_tanh = True

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            x = x.tanh() if self.use_tanh else x.relu()
        return x * self.scale


def module_systems(calls: int, repeats: int, with_compile: bool) -> dict[str, float]:
    """Per-call µs of ``GuardedMLP`` on a (2, 8) input, inference (no grad)."""
    m, x = GuardedMLP(), torch.randn(2, 8)
    out = {}
    with torch.no_grad():
        out["eager torch"] = per_call_us(lambda: m(x), calls, repeats)
        if with_compile:
            try:
                cm = torch.compile(m)
                for _ in range(3):
                    cm(x)
                out["torch.compile"] = per_call_us(lambda: cm(x), calls, repeats)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"torch.compile failed: {type(e).__name__}: {e}", file=sys.stderr)
        tm = thunder_mlir.jit(m)
        torch.testing.assert_close(tm(x), m(x))
        out["thunder_mlir"] = per_call_us(lambda: tm(x), calls, repeats)
        assert thunder_mlir.cache_misses(tm) == 1
        cache = tm._fn.cache
        out[f"  of which: guard key ({len(cache.schema)} guards)"] = per_call_us(
            cache._guard_key, calls, repeats)
        out["  of which: module state (flags, params, hooks)"] = per_call_us(
            tm._state.current, calls, repeats)
    return out


# ------------------------------------------------------------------- profile
def profile(calls: int, repeats: int) -> list[tuple[str, float]]:
    """µs per component of one thunder_mlir cache-hit call, each timed on its own."""
    from thunder_mlir.runtime import dlpack

    a, b = torch.randn(2, 2), torch.randn(2, 2)
    tf = thunder_mlir.jit(add)
    tf(a, b)
    entry, cache = tf.last, tf.cache
    plan = entry.plan
    exe, dev = plan.steps[0].executable, plan._jax_device
    args = (a, b)

    def flatten_key():
        metas = tuple(("tensor", t.shape, t.dtype, t.device, t.requires_grad) for t in args)
        return cache.key(len(args), metas)

    key = flatten_key()
    assert cache.lookup(key) is entry, "the profile's key does not hit the cache"

    def lookup():
        return cache.lookup(key)

    def import_inputs():  # what a call does: the same tensors hit the plan's cache
        return plan._imports.buffers(args)

    def import_new_inputs():  # a fresh tensor each call pays the DLPack import
        return [dlpack.to_xla(t, dev) for t in args]

    bufs = import_inputs()
    plan.run(list(args))  # the plan's result handlers are built by its first run

    def dispatch():  # returns as soon as XLA has the work (asynchronous CPU client)
        return exe.execute_sharded(bufs)

    def outputs():  # execute + jaxlib's result handlers + wait for the result + export
        return [dlpack.to_torch(r, True) for r in plan.steps[0].execute(bufs, dev)]

    outs = outputs()

    def unflatten():
        return entry.rebuild(outs)

    rows = [("flatten + key (metadata, grad mode, dtype, guards)", flatten_key),
            ("cache lookup (dict.get on the hashed key)", lookup),
            ("input buffers (2 tensors, ArgumentImports hits)", import_inputs),
            ("XLA execute_sharded (dispatch only)", dispatch),
            ("output unflatten (rebuild the pytree)", unflatten)]
    timed = [(name, per_call_us(fn, calls, repeats)) for name, fn in rows]
    roundtrip = per_call_us(outputs, calls, repeats)
    timed.insert(4, ("run + result handler + wait + DLPack export (beyond dispatch)",
                     max(0.0, roundtrip - timed[3][1])))
    total = per_call_us(lambda: tf(a, b), calls, repeats)
    timed.append(("glue (rest of __call__ and Plan.run: hit count, checks, lists)",
                  max(0.0, total - sum(t for _, t in timed))))
    timed.append(("total: one thunder_mlir call", total))
    # not part of a cache-hit call with repeated tensors; shown for new input tensors
    timed.append(("(new input tensors instead: DLPack import of 2 tensors)",
                  per_call_us(import_new_inputs, calls, repeats)))
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    opts = ap.parse_args()
    torch.set_num_threads(1)
    thunder_mlir.runtime.xla.start_backends()  # XLA's pool: 1 thread, as torch's
    t0 = time.perf_counter()
    res = systems(opts.calls, opts.repeats, not opts.no_compile)
    tc = res.get("torch.compile", float("nan"))
    floor = res["jax.jit (jax arrays)"]
    print(f"\nPer-call time of a 2x2 float32 add (median of {opts.repeats} x {opts.calls} calls, "
          f"torch threads 1, {os.cpu_count()} CPUs)")
    print(f"{'system':<24}{'us/call':>10}{'/ torch.compile':>17}{'/ jax.jit':>11}")
    for name, us in res.items():
        print(f"{name:<24}{us:>10.2f}{us / tc:>16.2f}x{us / floor:>10.2f}x")
    mres = module_systems(opts.calls // 5, opts.repeats, not opts.no_compile)
    print(f"\nPer-call time of an nn.Module (4 Linear(8, 8) + tanh, 2 guarded attributes; "
          f"batch 2, no grad)")
    mtc = mres.get("torch.compile", float("nan"))
    for name, us in mres.items():
        print(f"{name:<50}{us:>10.2f}{us / mtc:>16.2f}x")
    print("\nthunder_mlir cache-hit call, component by component (each timed alone):")
    prof = profile(opts.calls, opts.repeats)
    total = next(us for name, us in prof if name.startswith("total"))
    print(f"{'component':<62}{'us':>8}{'share':>8}")
    for name, us in prof:
        print(f"{name:<62}{us:>8.2f}{us / total * 100:>7.0f}%")
    print(f"\n(run took {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
