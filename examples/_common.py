"""Shared helpers for the examples: time a callable, compare thunder_mlir with eager, report.

Every example calls ``compare(...)`` and exits with its return code, so a script fails
(non-zero exit) when the error exceeds the tolerance or an op unexpectedly ran on the torch
fallback.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.utils._pytree as pytree

import thunder_mlir


def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of one call."""
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def median_seconds(fn, *args, iters: int = 20, warmup: int = 3, **kwargs) -> float:
    """Median wall time of ``iters`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn(*args, **kwargs)
    return statistics.median(timed(fn, *args, **kwargs)[1] for _ in range(iters))


def max_abs_error(actual, expected) -> float:
    """Largest |actual - expected| over all tensor leaves of two matching pytrees."""
    a, b = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(a) == len(b), f"{len(a)} outputs vs {len(b)} expected"
    errs = [(x.double() - y.double()).abs().max().item() for x, y in zip(a, b)
            if isinstance(x, torch.Tensor) and x.numel()]
    return max(errs, default=0.0)


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:9.1f} us"
    return f"{seconds * 1e3:9.2f} ms" if seconds < 1 else f"{seconds:9.2f} s "


def compare(name: str, eager_fn, args: tuple, *, kwargs: dict | None = None, tol: float,
            iters: int = 20, jitted=None, select=lambda out: out,
            expect_fallbacks: bool = False, show_stages: bool = False) -> int:
    """Run ``eager_fn`` and ``thunder_mlir.jit(eager_fn)`` (or ``jitted``) on the same inputs,
    print error, fallbacks and timings, and return 0 on success, 1 on failure.

    ``select`` picks what to compare from an output (e.g. ``lambda o: o.logits``);
    ``show_stages`` prints the MLIR of every stage of the compilation.
    """
    kwargs = kwargs or {}
    jfn = jitted if jitted is not None else thunder_mlir.jit(eager_fn)
    with torch.no_grad():
        expected, eager_first = timed(eager_fn, *args, **kwargs)
        actual, jit_first = timed(jfn, *args, **kwargs)
        err = max_abs_error(select(actual), select(expected))
        fallbacks = thunder_mlir.fallback_ops(jfn)
        eager_steady = median_seconds(eager_fn, *args, iters=iters, **kwargs)
        jit_steady = median_seconds(jfn, *args, iters=iters, **kwargs)

    if show_stages:
        for stage in thunder_mlir.last_traces(jfn):
            print(stage)
    ok_err = err <= tol
    ok_fb = expect_fallbacks or not fallbacks

    def row(label, value):
        print(f"  {label:<24s}: {value}")

    print(f"== {name}")
    row("max abs error", f"{err:.3e}  (tolerance {tol:.0e})  {'OK' if ok_err else 'FAIL'}")
    row("fallback ops", f"{len(fallbacks)} {fallbacks if fallbacks else ''} "
        f"{'OK' if ok_fb else 'FAIL (none expected)'}")
    print(f"  {'':26s}{'thunder_mlir':>12s}  {'eager':>12s}")
    row("first call", f"{_fmt(jit_first)}  {_fmt(eager_first)}   (thunder: trace + compile)")
    row(f"steady (median of {iters})", f"{_fmt(jit_steady)}  {_fmt(eager_steady)}   "
        f"({jit_steady / eager_steady:.2f}x eager)")
    row("compile stages", ", ".join(f"{s.name} {s.seconds * 1e3:.0f} ms"
                                    for s in thunder_mlir.last_traces(jfn)))
    return 0 if ok_err and ok_fb else 1
