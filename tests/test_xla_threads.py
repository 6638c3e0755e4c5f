"""XLA's CPU intra-op pool gets the threads torch uses (runtime/xla.py ``start_backends``):
``torch.set_num_threads(1)`` before the first compile gives one pool thread; torch's default
gives one per CPU the process may use; and no thread is left pinned to fewer CPUs. The CPU
client runs computations inline (jax's ``jax_cpu_enable_async_dispatch`` off), unless the
user's environment sets that option: then a CPU run waits for its results
(``xla.runs_inline``), checked with a training step, whose resident parameters torch reads
right after the run (without the wait they were 1e-2 off eager). ``thunder_mlir.export``
before any jit call starts the clients as a jit call would (it lowers through jax's export,
which would make them with jax's defaults: async, every CPU). Programs with little work
per kernel run on a second CPU client with a one-thread pool (runtime/plan.py
``place_small_programs``), large ones on the main pool. Each case is a fresh process (the
pools are made once per process); results are checked against eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import copy, json, os, sys, torch
    import jax
    if sys.argv[1] != "default":
        torch.set_num_threads(int(sys.argv[1]))
    import thunder_mlir
    from thunder_mlir.runtime import xla
    if sys.argv[2] == "export":  # before any jit call: jax's export would make the clients
        thunder_mlir.export(lambda x: torch.tanh(x) * 2, torch.randn(3))
    a = torch.randn(64, 64)
    torch.testing.assert_close(thunder_mlir.jit(lambda x, y: x @ y)(a, a), a @ a)
    diffs = []
    if sys.argv[2] == "step":  # AdamW, two micro-batches, against eager
        F = torch.nn.functional

        def step(model, opt, xs, ys):
            for x, y in zip(xs, ys):
                (F.mse_loss(model(x), y) / len(xs)).backward()
            opt.step()
            opt.zero_grad()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        m2 = copy.deepcopy(m)
        o, o2 = (torch.optim.AdamW(k.parameters(), lr=0.01) for k in (m, m2))
        jstep = thunder_mlir.jit(step)
        for i in range(3):
            xs, ys = torch.randn(2, 5, 4), torch.randn(2, 5, 3)
            step(m, o, xs, ys)
            jstep(m2, o2, xs, ys)
            diffs.append(max((p - q).abs().max().item()
                             for p, q in zip(m.parameters(), m2.parameters())))
    tasks = os.listdir("/proc/self/task")
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
    mask = os.sched_getaffinity(0)
    print(json.dumps({"pool": names.count("tf_XLAEigen"), "torch": torch.get_num_threads(),
                      "cpus": len(mask),
                      "async": jax.config.values["jax_cpu_enable_async_dispatch"],
                      "inline": xla.runs_inline(xla.jax_device(torch.device("cpu"))),
                      "diffs": diffs,
                      "pinned": sum(os.sched_getaffinity(int(t)) != mask for t in tasks)}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_xla_pool_follows_torch_threads():
    procs = {arg: subprocess.Popen([sys.executable, "-c", SCRIPT, arg, mode], text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, "THUNDER_MLIR_CACHE_DIR": "0"})
             for arg, mode in (("1", "export"), ("default", "-"))}
    # the user's choice of asynchronous dispatch is kept (its runs wait for their results)
    procs["user"] = subprocess.Popen([sys.executable, "-c", SCRIPT, "1", "step"], text=True,
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
    assert res["1"]["inline"] is True and res["default"]["inline"] is True, res
    assert res["user"]["async"] is True and res["user"]["pool"] == 1, res
    assert res["user"]["inline"] is False and max(res["user"]["diffs"]) < 1e-5, res
    d = res["default"]
    n = min(d["torch"], d["cpus"])
    # a 64x64 matmul is a small program: the one-thread client is made too (beside n > 1)
    assert d["pool"] == n + (n > 1) and d["pinned"] == 0, res


PLACEMENT = textwrap.dedent("""
    import json, torch
    import thunder_mlir
    torch.manual_seed(0)
    small = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x = torch.randn(8, 16)
    js = thunder_mlir.jit(small)
    with torch.no_grad():
        for _ in range(2):  # the second call reuses the imported parameter buffers
            torch.testing.assert_close(js(x), small(x))
    notes = {"small": thunder_mlir.last_traces(js)[-1].text}
    out = js(x)  # a training step: forward and backward stay on the main pool
    out.sum().backward()
    grads = [p.grad for p in small.parameters()]
    small.zero_grad(set_to_none=True)
    ref = small(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for g, p in zip(grads, small.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-6, atol=1e-6)
    notes["train"] = thunder_mlir.last_traces(js)[-1].text
    a = torch.randn(512, 512)
    jb = thunder_mlir.jit(lambda u, v: torch.tanh(u @ v))
    with torch.no_grad():
        torch.testing.assert_close(jb(a, a), torch.tanh(a @ a), rtol=1e-4, atol=1e-4)
    notes["big"] = thunder_mlir.last_traces(jb)[-1].text
    print(json.dumps(notes))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and 2 or more CPUs (the main pool then has 2+ threads)")
def test_small_inference_programs_run_on_a_one_thread_client():
    """A tiny module's forward (a few hundred FLOP per kernel) runs on the one-thread
    client; its training step, and a 512x512 matmul (2.7e8 FLOP in one kernel), on the main
    pool; all equal eager, gradients included."""
    p = subprocess.run([sys.executable, "-c", PLACEMENT], text=True, capture_output=True,
                       timeout=240, env={**os.environ, "THUNDER_MLIR_CACHE_DIR": "0"})
    assert p.returncode == 0, p.stderr
    notes = json.loads(p.stdout.strip().splitlines()[-1])
    assert notes["small"].endswith("FLOP/kernel: 1-thread CPU client"), notes
    # (the target's choices come first, as comments; the module, donated residuals shown,
    # after the compiled line)
    compiled = [ln for ln in notes["train"].splitlines() if "region(s) compiled" in ln]
    assert len(compiled) == 1 and "FLOP/kernel" not in compiled[0], notes
    assert "1-thread" not in notes["big"] and notes["big"].endswith("-thread CPU client"), notes
