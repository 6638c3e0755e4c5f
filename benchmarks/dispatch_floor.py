"""The floor of each layer of a thunder_mlir cache-hit call (2x2 float32 add), against
jax.jit's whole call on jax arrays, in one run.

Rows, each a loop of ``--calls`` calls repeated ``--repeats`` times, interleaved:
jax.jit on jax arrays (the anchor); eager torch; our compiled executable's
``LoadedExecutable.execute_sharded`` alone (returns once XLA has the work), ``execute``
(jaxlib builds per-output sharding objects), ``execute_sharded`` + jaxlib's C++ result
handlers (``consume_with_handlers``, what Plan.run does), jax's own C++ dispatch
(``_jax.pjit``) fed our executable through a ``MeshExecutableFastpathData``, execute +
handlers + wait + DLPack export to torch, the argument-buffer hits of two tensors, the
whole ``Plan.run`` and the whole ``thunder_mlir`` call. Reported: the median wall time
and the minimum thread CPU time (``time.thread_time_ns``: not inflated by other processes
preempting this one on a shared machine; work XLA hands to its own threads is not in it,
which for this 2x2 add matches the wall minima of a quiet machine), each also as a ratio
to jax.jit's.

    .venv/bin/python benchmarks/dispatch_floor.py [--calls 2000] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import torch

import thunder_mlir
import thunder_mlir.runtime.xla


def add(a, b):
    return a + b


def rows() -> dict:
    """name -> zero-argument callable, one per layer."""
    from jax._src import core, tree_util
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax
    from jax.sharding import SingleDeviceSharding

    a, b = torch.randn(2, 2), torch.randn(2, 2)
    tf = thunder_mlir.jit(add)
    tf(a, b)
    tf(a, b)  # the plan's result handlers and prepared run exist after its first run
    plan = tf.last.plan
    step = plan.steps[0]
    exe, handlers, dev = step.executable, step.handlers, plan._jax_device
    bufs = plan._imports.buffers([a, b])
    sharding = SingleDeviceSharding(dev)
    outs = exe.execute_sharded(bufs).consume_with_handlers(handlers)
    out_tree = tree_util.dispatch_registry.flatten(list(outs), None)[1]
    fastpath = pxla.MeshExecutableFastpathData(
        exe, out_tree, [sharding, sharding], [sharding],
        [core.ShapedArray(o.shape, o.dtype) for o in outs], [True], [True, True],
        [None, None], [])

    def cache_miss(*args):
        return list(exe.execute_sharded(list(args)).consume_with_handlers(handlers)), \
            fastpath, False

    pjit_ours = _jax.pjit("add", add, cache_miss, [], [], pxla.JitGlobalCppCacheKeys(),
                          tree_util.dispatch_registry, pxla.cc_shard_arg,
                          _jax.PjitFunctionCache(capacity=4))
    torch.testing.assert_close(torch.from_dlpack(pjit_ours(*bufs)[0]), a + b)
    jf = jax.jit(add)
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    jf(ja, jb).block_until_ready()
    export, from_dlpack = _jax.buffer_to_dlpack_managed_tensor, torch._C._from_dlpack
    return {
        "jax.jit on jax arrays (anchor)": lambda: jf(ja, jb),
        "eager torch a + b": lambda: a + b,
        "execute_sharded (dispatch only)": lambda: exe.execute_sharded(bufs),
        "execute (sharding objects per output)": lambda: exe.execute(bufs),
        "execute_sharded + result handlers": lambda: exe.execute_sharded(bufs)
        .consume_with_handlers(handlers),
        "jax C++ pjit dispatch of our executable": lambda: pjit_ours(*bufs),
        "  + wait + DLPack export to torch": lambda: [
            from_dlpack(export(r))
            for r in exe.execute_sharded(bufs).consume_with_handlers(handlers)],
        "argument buffers, 2 hits": lambda: plan._imports.buffers([a, b]),
        "Plan.run": lambda: plan.run([a, b]),
        "thunder_mlir call": lambda: tf(a, b),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    opts = ap.parse_args()
    torch.set_num_threads(1)
    thunder_mlir.runtime.xla.start_backends()  # XLA's pool: 1 thread, as torch's
    fns = rows()

    def per_call(fn, clock) -> float:
        for _ in range(100):
            fn()
        t = clock()
        for _ in range(opts.calls):
            fn()
        return (clock() - t) / opts.calls / 1e3

    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(opts.repeats):
        for k, fn in fns.items():
            wall[k].append(per_call(fn, time.perf_counter_ns))
            cpu[k].append(per_call(fn, time.thread_time_ns))
    anchor = next(iter(fns))
    w0, c0 = statistics.median(wall[anchor]), min(cpu[anchor])
    print(f"2x2 float32 add, torch threads 1 ({opts.repeats} x {opts.calls} calls per row)")
    print(f"{'layer':<42}{'wall med us':>12}{'/ jax':>7}{'CPU min us':>12}{'/ jax':>7}")
    for k in fns:
        w, c = statistics.median(wall[k]), min(cpu[k])
        print(f"{k:<42}{w:>12.2f}{w / w0:>7.2f}{c:>12.2f}{c / c0:>7.2f}")


if __name__ == "__main__":
    main()
