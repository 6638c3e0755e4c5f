"""XLA's CPU intra-op pool gets the threads torch uses (runtime/xla.py ``start_backends``):
``torch.set_num_threads(1)`` before the first compile gives one pool thread; torch's default
gives one per CPU the process may use; and no thread is left pinned to fewer CPUs. The CPU
client runs computations inline (jax's ``jax_cpu_enable_async_dispatch`` off), unless the
user's environment sets that option. Each case is a fresh process (the pool is made once per
process); results are checked against eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys, torch
    import jax
    if sys.argv[1] != "default":
        torch.set_num_threads(int(sys.argv[1]))
    import thunder_mlir
    a = torch.randn(64, 64)
    torch.testing.assert_close(thunder_mlir.jit(lambda x, y: x @ y)(a, a), a @ a)
    tasks = os.listdir("/proc/self/task")
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
    mask = os.sched_getaffinity(0)
    print(json.dumps({"pool": names.count("tf_XLAEigen"), "torch": torch.get_num_threads(),
                      "cpus": len(mask),
                      "async": jax.config.values["jax_cpu_enable_async_dispatch"],
                      "pinned": sum(os.sched_getaffinity(int(t)) != mask for t in tasks)}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_xla_pool_follows_torch_threads():
    procs = {arg: subprocess.Popen([sys.executable, "-c", SCRIPT, arg], text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, "THUNDER_MLIR_CACHE_DIR": "0"})
             for arg in ("1", "default")}
    # the user's choice of asynchronous dispatch is kept
    procs["user"] = subprocess.Popen([sys.executable, "-c", SCRIPT, "1"], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "THUNDER_MLIR_CACHE_DIR": "0",
                                          "JAX_CPU_ENABLE_ASYNC_DISPATCH": "1"})
    res = {}
    for arg, p in procs.items():
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        res[arg] = json.loads(out.strip().splitlines()[-1])
    assert res["1"]["pool"] == 1 and res["1"]["pinned"] == 0, res
    assert res["1"]["async"] is False and res["default"]["async"] is False, res
    assert res["user"]["async"] is True and res["user"]["pool"] == 1, res
    d = res["default"]
    assert d["pool"] == min(d["torch"], d["cpus"]) and d["pinned"] == 0, res
