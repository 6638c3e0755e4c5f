"""Control flow: an RNN written with ``scan`` and a data-dependent ``torch.cond``, under
eager PyTorch, torch.compile, thunder_mlir and jax.jit (``lax.scan``/``lax.cond``), in one
run, reported as ratios to eager.

* ``rnn scan``: ``h = tanh(h @ W + x_t)`` over T steps, returning the final state and every
  step's state (``torch._higher_order_ops.scan``; eager runs torch's own scan; jax.jit runs
  ``lax.scan`` of the same math). thunder_mlir compiles it to one ``stablehlo.while``.
* ``cond``: ``torch.cond(x.sum() > 0, cos-branch, sin-branch)`` on a 256x256 tensor
  (``stablehlo.if`` in thunder_mlir; ``lax.cond`` in jax; a Python ``if`` in eager, which
  reads the predicate back to the host).

    .venv/bin/python benchmarks/control_flow.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import torch
from torch._higher_order_ops.scan import scan

import thunder_mlir

T, B, H = 64, 8, 128


def rnn_scan(h0, xs, w):
    def cell(h, x):
        h = torch.tanh(h @ w + x)
        return h, h.clone()
    return scan(cell, h0, xs)


def rnn_loop(h0, xs, w):  # what eager and torch.compile run: the same math as a loop
    h, hs = h0, []
    for t in range(xs.shape[0]):
        h = torch.tanh(h @ w + xs[t])
        hs.append(h)
    return h, torch.stack(hs)


def jax_rnn(h0, xs, w):
    def cell(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h
    return jax.lax.scan(cell, h0, xs)


def branches(x):
    return torch.cond(x.sum() > 0, lambda t: t.cos() * 2, lambda t: t.sin() + 1, (x,))


def eager_branches(x):
    return x.cos() * 2 if x.sum() > 0 else x.sin() + 1


def jax_branches(x):
    return jax.lax.cond(x.sum() > 0, lambda t: jnp.cos(t) * 2, lambda t: jnp.sin(t) + 1, x)


def timed(fn, args, iters, repeats=7):
    t = time.perf_counter()
    out = fn(*args)
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            r = fn(*args)
        times.append((time.perf_counter() - t) / iters)
    return first, statistics.median(times), out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4x fewer timed iterations")
    opts = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    scale = 4 if opts.quick else 1
    h0, xs, w = torch.randn(B, H), torch.randn(T, B, H), torch.randn(H, H) * 0.1
    x = torch.randn(256, 256)
    def synced(f):  # each call waits for its result, as torch calls return finished tensors
        return lambda *a: jax.block_until_ready(f(*a))
    rows = []
    with torch.no_grad():
        ref = rnn_loop(h0, xs, w)
        cells = {
            "eager": timed(rnn_loop, (h0, xs, w), 40 // scale),
            "torch.compile": timed(torch.compile(rnn_loop), (h0, xs, w), 40 // scale),
            "thunder_mlir": timed(thunder_mlir.jit(rnn_scan), (h0, xs, w), 40 // scale),
            "jax.jit": timed(synced(jax.jit(jax_rnn)),
                             tuple(jnp.asarray(t.numpy()) for t in (h0, xs, w)), 40 // scale),
        }
        rows.append((f"rnn scan T={T} B={B} H={H} [ms]", cells, ref))
        xa = jnp.asarray(x.numpy())
        cells = {
            "eager": timed(eager_branches, (x,), 400 // scale),
            "torch.compile": timed(torch.compile(eager_branches), (x,), 400 // scale),
            "thunder_mlir": timed(thunder_mlir.jit(branches), (x,), 400 // scale),
            "jax.jit": timed(synced(jax.jit(jax_branches)), (xa,), 400 // scale),
        }
        rows.append(("cond 256x256 [ms]", cells, eager_branches(x)))
    print(f"{'row':34} {'eager':>8} {'compile':>8} {'thunder':>8} {'jax':>8}   "
          f"{'compile/eager':>13} {'thunder/eager':>13} {'thunder/jax':>11}  max|thunder-eager|")
    for name, cells, ref in rows:
        ms = {k: v[1] * 1e3 for k, v in cells.items()}
        got = cells["thunder_mlir"][2]
        err = max((a - b).abs().max().item() for a, b in
                  zip(*(torch.utils._pytree.tree_leaves(t) for t in (got, ref))))
        print(f"{name:34} {ms['eager']:8.3f} {ms['torch.compile']:8.3f} "
              f"{ms['thunder_mlir']:8.3f} {ms['jax.jit']:8.3f}   "
              f"{ms['torch.compile'] / ms['eager']:12.2f}x {ms['thunder_mlir'] / ms['eager']:12.2f}x "
              f"{ms['thunder_mlir'] / ms['jax.jit']:10.2f}x  {err:.1e}")
    print("first call [s]: " + "; ".join(
        f"{name.split(' [')[0]}: " + ", ".join(f"{k} {v[0]:.2f}" for k, v in cells.items())
        for name, cells, _ in rows))


if __name__ == "__main__":
    sys.exit(main())
