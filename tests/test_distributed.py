"""thunder_mlir.distributed: one training step as one SPMD program (issue 16).

The multi-device checks run in a subprocess (tests/distributed_checks.py) because
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before jax starts; one
subprocess runs them all (a compile each), and this file asserts on what it reports:

* losses and final parameters against eager PyTorch (a torch.optim loop on a copy of the
  model): SGD within 1e-5, AdamW losses within 1e-4 (issue 16's tolerances);
* collective bytes per step against each strategy's theory, within 10%;
* fsdp's per-device parameter + optimizer-state bytes, measured from the device buffers,
  1/8 of ddp's within 10%;
* shardings visible in the stages (``thunder.sharding``, ``thunder.mesh``, the
  ``sharding_constraint`` op, GSPMD ``mhlo.sharding`` after lowering);
* two processes joined by ``jax.distributed`` (gloo, loopback) train to the same losses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import thunder_mlir
import thunder_mlir.distributed as dist
from thunder_mlir.ir import sharding
from conftest import mse_training_step

HELPER = Path(__file__).parent / "distributed_checks.py"
# every model (GPT-2, Llama) x strategy (ddp, fsdp, fsdp x tp) x optimizer (SGD with
# momentum, AdamW), plus Llama with fewer KV heads than the "model" axis and inference
SGD_RUNS = ["gpt2_ddp_sgd", "gpt2_fsdp_sgd", "gpt2_fsdp_tp_sgd", "llama_ddp_sgd",
            "llama_fsdp_sgd", "llama_fsdp_tp_sgd", "llama_gqa_fsdp_tp_sgd"]
ADAMW_RUNS = ["gpt2_ddp_adamw", "gpt2_fsdp_adamw", "gpt2_fsdp_tp_adamw", "llama_ddp_adamw",
              "llama_fsdp_adamw", "llama_fsdp_tp_adamw"]
# CI runs each model, strategy and optimizer, and every run a test below reads by name (the
# single-process run of all 15 took 288 s of a make test past CI's 30 minutes on
# 2026-12-02); THUNDER_DISTRIBUTED_ALL=1 runs every combination
# (2026-12-02, stop 51: CI at 34 minutes) also Llama's ddp AdamW, whose strategy and
# optimizer run on GPT-2 and Llama separately
_NOT_IN_CI = set() if os.environ.get("THUNDER_DISTRIBUTED_ALL") == "1" else {
    "gpt2_ddp_adamw", "gpt2_fsdp_adamw", "llama_ddp_sgd", "llama_fsdp_sgd",
    "llama_fsdp_tp_adamw", "llama_ddp_adamw"}
SGD_RUNS = [n for n in SGD_RUNS if n not in _NOT_IN_CI]
ADAMW_RUNS = [n for n in ADAMW_RUNS if n not in _NOT_IN_CI]
CHECKS = SGD_RUNS + ADAMW_RUNS + ["llama_shard_tp", "gpt2_shard_tp"]


def _env():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("XLA_FLAGS", None)
    return env


def _parse(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            d = json.loads(line[len("RESULT "):])
            out[d["name"] if "pid" not in d else f"{d['name']}{d['pid']}"] = d
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs():
    """The one-process run of CHECKS and the two processes of the jax.distributed run,
    started together (their compiles overlap) -> ({check: result}, [(rc, out, err)])."""
    port = str(_free_port())
    multi = [subprocess.Popen([sys.executable, str(HELPER), "multi", str(i), "2", port,
                               "multi_fsdp"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env()) for i in range(2)]
    # (a loaded machine needs longer: `make compat` runs beside other jobs and sets 1800)
    limit = float(os.environ.get("THUNDER_TEST_SUBPROCESS_TIMEOUT", "600"))
    p = subprocess.run([sys.executable, str(HELPER), "single", *CHECKS], capture_output=True,
                       text=True, timeout=limit, env=_env())
    comms = [m.communicate(timeout=300) for m in multi]
    multi_outs = [(m.returncode, o, e) for m, (o, e) in zip(multi, comms)]
    assert p.returncode == 0, p.stderr[-4000:]
    out = _parse(p.stdout)
    assert sorted(out) == sorted(CHECKS), p.stderr[-4000:]
    return out, multi_outs


@pytest.fixture(scope="module")
def results(runs):
    return runs[0]


@pytest.mark.parametrize("name", SGD_RUNS)
def test_sgd_matches_eager(results, name):
    r = results[name]
    assert r["losses"] == pytest.approx(r["eager_losses"], abs=1e-5, rel=0)
    assert r["max_param_diff"] < 1e-5


@pytest.mark.parametrize("name", ADAMW_RUNS)
def test_adamw_losses_match_eager(results, name):
    r = results[name]
    assert r["losses"] == pytest.approx(r["eager_losses"], abs=1e-4, rel=0)
    assert r["losses"][-1] < r["losses"][0] - 0.1  # it trains


@pytest.mark.parametrize("name", [n for n in CHECKS if "_ddp_" in n])
def test_ddp_collectives(results, name):
    """ddp: one all-reduce of the gradient bytes (XLA combines them; GPT-2's tied
    embedding/LM-head gradient is reduced once per use, +7%), nothing else."""
    r = results[name]
    assert set(r["collectives"]) == {"all-reduce"}, r["collectives"]
    assert r["collectives"]["all-reduce"] == pytest.approx(r["param_bytes"], rel=0.1)


@pytest.mark.parametrize("name", [n for n in CHECKS if "_fsdp_" in n and "_tp_" not in n])
def test_fsdp_collectives(results, name):
    """fsdp: the parameters all-gathered once (the backward reuses them) and the gradients
    reduced once and scattered. XLA's CPU pipeline has no ReduceScatterCreator pass, so
    the reduction shows as an all-reduce followed by a slice; either counts. No
    all-to-all or collective-permute (no resharding fsdp does not need)."""
    r = results[name]
    c = r["collectives"]
    assert set(c) <= {"all-gather", "all-reduce", "reduce-scatter"}, c
    assert c["all-gather"] == pytest.approx(r["param_bytes"], rel=0.1)
    reduced = c.get("all-reduce", 0) + c.get("reduce-scatter", 0)
    assert reduced == pytest.approx(r["param_bytes"], rel=0.1)


@pytest.mark.parametrize("name", [n for n in CHECKS if "_fsdp_tp_" in n and "gqa" not in n])
def test_fsdp_tp_collectives(results, name):
    """fsdp x tp on {"data": 2, "model": 4} (Megatron plans; GPT-2's fused q/k/v
    ``c_attn`` as ``dist.Fused(3, ...)``): each parameter is all-gathered over "data" into
    its tensor-parallel shard (the sharding constraint fsdp puts on it), activations and
    gradients are all-reduced; no all-to-all or collective-permute (no resharding the
    strategies do not need)."""
    r = results[name]
    c = r["collectives"]
    assert set(c) <= {"all-gather", "all-reduce", "reduce-scatter"}, c
    assert c["all-gather"] == pytest.approx(r["tp_param_bytes"], rel=0.1)


def test_fewer_kv_heads_than_model_axis(results):
    """Llama with 2 KV heads on a 4-way "model" axis, k_proj/v_proj replicated (Megatron's
    rule when the tensor-parallel size exceeds the KV heads): each device slices its query
    heads' KV groups locally; the backward reduces each KV head's gradient over the
    devices sharing it. Trains as eager (test_sgd_matches_eager) with no all-to-all or
    collective-permute; k_proj/v_proj split over "data" only."""
    r = results["llama_gqa_fsdp_tp_sgd"]
    assert set(r["collectives"]) <= {"all-gather", "all-reduce", "reduce-scatter"}, \
        r["collectives"]
    assert r["specs"]["model.layers.0.self_attn.k_proj.weight"] == "(('data',), ())"
    assert r["specs"]["model.layers.0.self_attn.q_proj.weight"] == "(('model',), ('data',))"


def test_fused_qkv_layout(results):
    """GPT-2's c_attn under ``Fused(3, (None, "model"))``: held as (E, 3, E) split on the
    last dimension (each device its own q, k and v heads); state_dict() gives the model's
    (E, 3E) layout (the parameter comparison with eager would fail otherwise)."""
    r = results["gpt2_fsdp_tp_adamw"]
    assert r["specs"]["transformer.h.0.attn.c_attn.weight"] == "(('data',), (), ('model',))"
    assert r["specs"]["transformer.h.0.attn.c_attn.bias"] == "((), ('model',))"
    assert r["stage_names"][:2] == ["initial", "step"]
    assert r["max_param_diff"] < 1e-3  # AdamW: 3 steps of lr 1e-2; a layout error is ~0.1
    r = results["gpt2_fsdp_tp_sgd"]  # SGD: parameters equal eager's (test_sgd_matches_eager)
    assert r["c_attn_shape"] == [32, 96] and r["roundtrip_exact"]
    # split before the backward was traced: the stored (E, 3, E) weight is never used
    # reshaped to (E, 3E); thunder-opt reruns the passes after tracing to the stages' text
    assert not r["fused_weight_reshaped"]
    assert r["thunder_opt_reproduces"] == {"prims": True, "plan": True}


def test_fsdp_memory_is_an_eighth_of_ddp(results):
    ddp, fsdp = results["gpt2_ddp_sgd"]["device_bytes"], results["gpt2_fsdp_sgd"]["device_bytes"]
    assert sum(fsdp.values()) == pytest.approx(sum(ddp.values()) / 8, rel=0.1)
    # AdamW (two state tensors per parameter) on Llama, against the unsharded size
    r = results["llama_fsdp_adamw"]
    assert sum(r["device_bytes"].values()) == pytest.approx(3 * r["param_bytes"] / 8, rel=0.1)


@pytest.mark.parametrize("name", ["llama_shard_tp", "gpt2_shard_tp"])
def test_tp_forward_has_megatrons_two_all_reduces_per_block(results, name):
    """shard() with column/row-parallel Linears (Llama) or Conv1Ds (GPT-2, its fused
    q/k/v c_attn as Fused(3, ...)) on {"data": 2, "model": 4}: the logits equal eager's,
    and the forward's collectives are two all-reduces of the activations per block over
    the "model" groups, plus the gather of the (replicated) logits, plus one all-reduce of
    a few bytes over the "data" groups: the index checks of the token ids (split over
    "data"), whose verdict every device returns (frontend/runtime_checks.py)."""
    r = results[name]
    assert r["max_logit_diff"] < 1e-5
    assert r["examine_matches"]
    assert r["last_traces"][0] == "initial"
    assert r["last_traces"][-4:] == ["prims", "plan", "stablehlo", "xla-compile"]
    colls = r["collective_list"]
    model_groups = "{{0,1,2,3},{4,5,6,7}}"
    reduces = [c for c in colls if c[0] == "all-reduce" and c[2] == model_groups]
    assert reduces == [["all-reduce", r["activation_bytes"], model_groups]] * 4  # 2 blocks
    checks = [c for c in colls if c[0] == "all-reduce" and c[2] != model_groups]
    assert len(checks) == 1 and checks[0][1] <= 16, checks
    assert checks[0][2] == "{{0,4},{1,5},{2,6},{3,7}}"  # "data": the token ids' split
    others = [c for c in colls if c[0] != "all-reduce"]
    assert [c[0] for c in others] == ["all-gather"]  # the replicated logits, over "data"


def test_tp_shards_parameters(results):
    r = results["llama_fsdp_tp_sgd"]
    assert r["specs"]["model.layers.0.self_attn.q_proj.weight"] == "(('model',), ('data',))"
    assert r["specs"]["model.layers.0.mlp.down_proj.weight"] == "(('data',), ('model',))"
    assert r["specs"]["model.embed_tokens.weight"] == "(('data',), ())"


def test_shardings_in_the_ir(results):
    r = results["gpt2_ddp_sgd"]
    assert r["stage_names"] == ["initial", "step", "prims", "plan",
                                "stablehlo", "xla-compile"]
    assert r["step_ir_has_sharding"] and r["step_ir_has_mesh"]
    assert r["constraint_in_initial"]  # with_sharding_constraint in loss_fn
    assert r["stablehlo_has_gspmd"]
    # thunder-opt parses the stages back and reruns their passes to the same text
    assert r["thunder_opt_reproduces"] == {"prims": True, "plan": True}


def test_examine_and_last_traces_report_collectives(results):
    r = results["gpt2_ddp_sgd"]
    assert r["examine_collectives"] == r["collective_list"]
    assert r["examine_without_batch"] == r["collective_list"]
    assert r["examine_all_on_xla"] and r["examine_text_has_collectives"]
    assert r["last_traces"] == r["stage_names"]
    assert r["xla_stage_lists_all_reduce"]


def test_state_dict_round_trip(results):
    r = results["gpt2_ddp_sgd"]
    assert r["roundtrip_exact"] and r["loaded_applied"]


def test_two_processes_train_like_one(runs):
    """jax.distributed over gloo on loopback: 2 processes x 4 virtual CPU devices, each
    feeding its half of the batch, train GPT-2 under fsdp to one process's losses."""
    results, outs = runs
    for rc, _, err in outs:
        assert rc == 0, err[-4000:]
    res = [_parse(o)[f"multi_fsdp{i}"] for i, (_, o, _) in enumerate(outs)]
    single = results["gpt2_fsdp_sgd"]["losses"]
    for r in res:
        assert (r["processes"], r["devices"], r["local_devices"]) == (2, 8, 4)
        assert r["losses"] == pytest.approx(single, abs=1e-5, rel=0)
    assert res[0]["param_sum"] == res[1]["param_sum"]


# --------------------------------------------------------------- in this process
def test_gspmd_strings():
    """XLA HloSharding text (xla/hlo/ir/hlo_sharding.cc) for specs on a 2x4 mesh."""
    mesh = (("data", 2), ("model", 4))
    assert sharding.gspmd(mesh, ((), ())) == "{replicated}"
    assert sharding.gspmd(mesh, (("data",), ("model",))) == "{devices=[2,4]0,1,2,3,4,5,6,7}"
    assert sharding.gspmd(mesh, (("model",), ("data",))) == "{devices=[4,2]0,4,1,5,2,6,3,7}"
    assert sharding.gspmd(mesh, ((), ("model",))) == \
        "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    assert sharding.gspmd(mesh, (("data", "model"),)) == "{devices=[8]0,1,2,3,4,5,6,7}"


def test_sharding_text_round_trip_and_errors():
    assert sharding.parse_spec("[{data}, {}, {data, model}]") == \
        (("data",), (), ("data", "model"))
    assert sharding.format_spec((("data",), ())) == "[{data}, {}]"
    assert sharding.parse_mesh("[data=2, model=4]") == (("data", 2), ("model", 4))
    with pytest.raises(ValueError, match="does not split evenly"):
        sharding.check_spec((("data", 8),), (("data",),), (12,))
    with pytest.raises(ValueError, match="no axis 'x'"):
        sharding.check_spec((("data", 8),), (("x",),), (8,))
    with pytest.raises(ValueError):
        sharding.parse_mesh("data=2")


def test_api_errors():
    from thunder_mlir.errors import UnsupportedInputError

    with pytest.raises(UnsupportedInputError, match="devices"):
        dist.mesh({"data": 3})  # this process has one CPU device
    m = dist.mesh({"data": 1})
    with pytest.raises(UnsupportedInputError, match="strategy"):
        dist.train_step(torch.nn.Linear(2, 2), lambda m, x: m(x).sum(), torch.optim.SGD, m,
                        strategy="zero", lr=0.1)
    with pytest.raises(UnsupportedInputError, match="no update rule"):
        dist.train_step(torch.nn.Linear(2, 2), lambda m, x: m(x).sum(), torch.optim.RMSprop,
                        m, lr=0.1)
    with pytest.raises(UnsupportedInputError, match="capturable"):
        dist.train_step(torch.nn.Linear(2, 2), lambda m, x: m(x).sum(), torch.optim.AdamW,
                        m, capturable=True)


def test_one_device_step_matches_eager_with_dropout_refused():
    """A one-device mesh in this process: SGD with nesterov momentum on an MLP equals
    torch.optim's; a loss_fn with dropout (random) is refused with a clear error."""
    from thunder_mlir.errors import UnsupportedInputError

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ref = __import__("copy").deepcopy(model)
    kw = dict(lr=0.05, momentum=0.8, dampening=0.0, nesterov=True, weight_decay=0.1)
    loss_fn = lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)  # noqa: E731
    step = dist.train_step(model, loss_fn, torch.optim.SGD, dist.mesh({"data": 1}), **kw)
    opt = torch.optim.SGD(ref.parameters(), **kw)
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    for _ in range(3):
        loss = step(x, y)
        opt.zero_grad()
        expected = loss_fn(ref, x, y)
        expected.backward()
        opt.step()
        assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    sd = step.state_dict()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(sd[k], v, atol=1e-6, rtol=0)
    drop = dist.train_step(torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Dropout(0.5)),
                           lambda m, x: m(x).sum(), torch.optim.SGD, dist.mesh({"data": 1}),
                           lr=0.1)
    with pytest.raises(UnsupportedInputError, match="dropout"):
        drop(x)


class _PartlyUsed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.frozen = torch.nn.Linear(8, 8).requires_grad_(False)
        self.b = torch.nn.Linear(8, 1)
        self.unused = torch.nn.Linear(4, 4)  # no output depends on it: eager's grad is None

    def forward(self, x):
        return self.b(torch.tanh(self.frozen(self.a(x))))


@pytest.mark.parametrize("opt", [(torch.optim.SGD, dict(lr=0.1, momentum=0.9,
                                                         weight_decay=0.1)),
                                 (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1,
                                                          amsgrad=True))])
def test_frozen_and_unused_parameters_as_torch_optim(opt):
    """torch.optim skips parameters whose grad is None (frozen, or unused by the loss): no
    weight decay, no state; the step leaves them unchanged too."""
    cls, kw = opt
    torch.manual_seed(0)
    model = _PartlyUsed()
    ref = __import__("copy").deepcopy(model)
    loss_fn = lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)  # noqa: E731
    step = dist.train_step(model, loss_fn, cls, dist.mesh({"data": 1}), **kw)
    o = cls([p for p in ref.parameters() if p.requires_grad], **kw)
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    for _ in range(3):
        loss = step(x, y)
        o.zero_grad()
        expected = loss_fn(ref, x, y)
        expected.backward()
        o.step()
        assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    sd = step.state_dict()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(sd[k], v, atol=1e-6, rtol=0)
    assert torch.equal(sd["unused.weight"], model.unused.weight)


def test_index_check_on_one_shard_stops_the_whole_sharded_step(results):
    """8 devices, batch split over "data": a token id past the vocabulary in the last row
    only (one device's shard) makes the step raise eager's IndexError, and no device's
    parameters or optimizer state change (the checks' verdict is global)."""
    r = results["gpt2_ddp_sgd"]
    assert r["bad_token_error"] == "IndexError", r["bad_token_error"]
    assert r["bad_token_state_unchanged"] and r["bad_token_steps_unchanged"]


def test_index_out_of_range_raises_as_eager_and_leaves_the_step_unchanged():
    """An index out of range (a token id past the vocabulary) in a distributed training
    step or sharded forward raises eager's exception type naming the user's line (was:
    XLA's clamped gather, a silently different loss); the failed step leaves parameters,
    optimizer state and the step count as they were, as eager's raises before
    ``opt.step()``, and the next steps equal torch.optim's."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 1))
    ref = copy.deepcopy(model)
    loss_fn = lambda m, x: m(x).square().mean()  # noqa: E731
    kw = dict(lr=0.1, weight_decay=0.1)
    step = dist.train_step(model, loss_fn, torch.optim.AdamW, dist.mesh({"data": 1}), **kw)
    opt = torch.optim.AdamW(ref.parameters(), **kw)
    good, bad = torch.tensor([[1, 2, 3], [4, 5, 9]]), torch.tensor([[1, 12, 3], [4, 5, 9]])
    with pytest.raises(Exception) as eager:
        loss_fn(ref, bad)
    step(good)
    before = step.state_dict()
    with pytest.raises(eager.type) as got:
        step(bad)
    assert "test_distributed.py" in str(got.value), got.value  # the user's line
    assert step.steps == 1
    for k, v in step.state_dict().items():
        assert torch.equal(v, before[k]), k
    for x in (good, good, good.flip(0)):  # resumes where it was: Adam's step count too
        opt.zero_grad()
        loss_fn(ref, x).backward()
        opt.step()
    step(good)
    step(good.flip(0))
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(step.state_dict()[k], v, atol=1e-6, rtol=0)

    sharded = dist.shard(ref.eval(), dist.mesh({"data": 1}))
    with pytest.raises(eager.type):
        sharded(bad)
    with torch.no_grad():
        torch.testing.assert_close(sharded(good), ref(good))


def test_one_step_builder_with_jit_step(monkeypatch):
    """distributed.train_step and jit(step) build the step the same way: the gradients by
    the code ``loss.backward()`` runs inside a compiled step (train_step._GradTable.backward,
    once per traced backward) and the update by ``optimizers.update_parameters``; and both
    give eager's parameters (a one-device mesh, SGD with momentum)."""
    from thunder_mlir import train_step
    from thunder_mlir.ir import optimizers

    calls = {"backward": 0, "update": 0}
    backward, update = train_step._GradTable.backward, optimizers.update_parameters

    def counted_backward(self, *a, **k):
        calls["backward"] += 1
        return backward(self, *a, **k)

    def counted_update(*a, **k):
        calls["update"] += 1
        return update(*a, **k)
    monkeypatch.setattr(train_step._GradTable, "backward", counted_backward)
    monkeypatch.setattr(optimizers, "update_parameters", counted_update)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    twin, ref = __import__("copy").deepcopy(model), __import__("copy").deepcopy(model)
    loss_fn = lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)  # noqa: E731
    kw = dict(lr=0.05, momentum=0.9)
    sharded = dist.train_step(model, loss_fn, torch.optim.SGD, dist.mesh({"data": 1}), **kw)
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    sharded(x, y)
    assert calls == {"backward": 1, "update": 1}
    step = mse_training_step  # (loss_fn's loss, then backward, step, zero_grad)
    opt, opt_ref = torch.optim.SGD(twin.parameters(), **kw), torch.optim.SGD(ref.parameters(), **kw)
    thunder_mlir.jit(step)(twin, opt, x, y)
    assert calls == {"backward": 2, "update": 2}
    step(ref, opt_ref, x, y)
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(sharded.state_dict()[k], v, atol=1e-6, rtol=0)
        torch.testing.assert_close(twin.state_dict()[k], v, atol=1e-6, rtol=0)
