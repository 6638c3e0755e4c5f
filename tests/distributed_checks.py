"""Checks of thunder_mlir.distributed that need several (virtual CPU) devices, run in a
subprocess by tests/test_distributed.py: XLA_FLAGS must be set before jax starts, which
pytest's process has already done.

    python distributed_checks.py single CHECK...     8 devices, one process
    python distributed_checks.py multi PID NPROC PORT CHECK...   one of NPROC processes
                                                     (jax.distributed over gloo)

Prints one JSON object per check on a line starting with ``RESULT ``: the step's losses,
eager PyTorch's losses (a torch.optim loop on a deepcopy of the model), the largest
parameter difference after the steps, collective bytes by kind, per-device bytes, and
check-specific facts. The test asserts on them.
"""

from __future__ import annotations

import json
import os
import sys

MODE = sys.argv[1]
if MODE == "multi":
    PID, NPROC, PORT = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    CHECKS = sys.argv[5:]
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={8 // NPROC}"
else:
    PID, NPROC = 0, 1
    CHECKS = sys.argv[2:]
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402

if MODE == "multi":  # toolchain.md §9
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{PORT}",
                               num_processes=NPROC, process_id=PID)

import torch  # noqa: E402
import transformers  # noqa: E402

import thunder_mlir.distributed as dist  # noqa: E402

transformers.logging.set_verbosity_error()
STEPS = 3
BATCH, SEQ, VOCAB = 8, 16, 64

GPT2_TP = {"*.c_attn.weight": dist.Fused(3, (None, "model")),
           "*.c_attn.bias": dist.Fused(3, ("model",)),
           "*.c_fc.weight": (None, "model"), "*.c_fc.bias": ("model",),
           "*.c_proj.weight": ("model", None)}  # Conv1D weights are (in, out)
LLAMA_TP = {"*.q_proj.weight": ("model", None), "*.k_proj.weight": ("model", None),
            "*.v_proj.weight": ("model", None), "*.o_proj.weight": (None, "model"),
            "*.gate_proj.weight": ("model", None), "*.up_proj.weight": ("model", None),
            "*.down_proj.weight": (None, "model")}  # Linear weights are (out, in)


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB,
                                  n_positions=SEQ, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def llama(kv_heads=4):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=kv_heads,
                                   vocab_size=VOCAB, max_position_embeddings=SEQ,
                                   bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def llama_gqa():
    """Llama tiny with grouped-query attention: 2 KV heads, fewer than the 4-way "model"
    axis."""
    return llama(kv_heads=2)


# with fewer KV heads than the "model" axis, Megatron replicates k_proj and v_proj
LLAMA_GQA_TP = {k: v for k, v in LLAMA_TP.items() if "k_proj" not in k and "v_proj" not in k}


def loss_fn(model, ids, labels):
    logits = model(input_ids=ids, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def constrained_loss_fn(model, ids, labels):
    """loss_fn with the logits constrained to be split over "data" (a no-op eagerly)."""
    logits = model(input_ids=ids, use_cache=False).logits
    logits = dist.with_sharding_constraint(logits, ("data", None, None))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def batch():
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),
            torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))


OPTIMIZERS = {"sgd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
              "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True,
                                                     dampening=0.0)),
              "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.01))}


def eager(model_fn, opt, fn=loss_fn):
    model = model_fn()
    cls, kw = OPTIMIZERS[opt]
    o = cls(model.parameters(), **kw)
    ids, labels = batch()
    losses = []
    for _ in range(STEPS):
        o.zero_grad()
        loss = fn(model, ids, labels)
        loss.backward()
        o.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def train(model_fn, opt, strategy, axes, tp=None, fn=loss_fn):
    """(losses, state_dict, step) of STEPS sharded steps; under several processes each
    process passes its share of the batch."""
    model = model_fn()
    cls, kw = OPTIMIZERS[opt]
    step = dist.train_step(model, fn, cls, dist.mesh(axes), strategy=strategy, tp_plan=tp,
                           **kw)
    ids, labels = batch()
    rows = BATCH // NPROC
    ids, labels = ids[PID * rows:(PID + 1) * rows], labels[PID * rows:(PID + 1) * rows]
    losses = [step(ids, labels).item() for _ in range(STEPS)]
    return losses, step.state_dict(), step


def compare(name, model_fn, opt, strategy, axes, tp=None, fn=loss_fn):
    losses, sd, step = train(model_fn, opt, strategy, axes, tp, fn)
    ref_losses, ref_sd = eager(model_fn, opt, fn)
    params = dict(model_fn().named_parameters())
    out = {"name": name, "losses": losses, "eager_losses": ref_losses,
           "max_param_diff": max((sd[k] - v).abs().max().item() for k, v in ref_sd.items()),
           "collectives": step.collective_bytes(),
           "device_bytes": step.device_bytes(),
           "param_bytes": sum(p.numel() * p.element_size() for p in params.values()),
           # each parameter's bytes on one device with the tensor-parallel split only
           "tp_param_bytes": sum(p.numel() * p.element_size() // (
               4 if any(a == "model" for d in step.param_specs[n] for a in d) else 1)
               for n, p in params.items()),
           "stage_names": [s.name for s in step.program.stages],
           "specs": {n: str(s) for n, s in step.param_specs.items()}}
    return out, step


def check_gpt2_ddp_sgd():
    out, step = compare("gpt2_ddp_sgd", gpt2, "sgd", "ddp", {"data": 8},
                        fn=constrained_loss_fn)
    stages = {s.name: s.text for s in step.program.stages}
    out["step_ir_has_sharding"] = 'thunder.sharding = "[{data}, {}]"' in stages["step"]
    out["step_ir_has_mesh"] = 'thunder.mesh = "[data=8]"' in stages["step"]
    out["constraint_in_initial"] = "thunder.sharding_constraint" in stages["initial"]
    out["stablehlo_has_gspmd"] = "mhlo.sharding" in stages["stablehlo"] and \
        "custom_call @Sharding" in stages["stablehlo"]
    out["collective_list"] = [str(c) for c in step.collectives()]
    out["thunder_opt_reproduces"] = _thunder_opt_reproduces(step.program.stages)
    import thunder_mlir

    exam = thunder_mlir.examine(step, *batch())
    out["examine_without_batch"] = [str(c) for c in thunder_mlir.examine(step).collectives]
    out["examine_collectives"] = [str(c) for c in exam.collectives]
    out["examine_all_on_xla"] = exam.all_on_xla
    out["examine_text_has_collectives"] = "collectives inserted by XLA" in str(exam)
    out["last_traces"] = [s.name for s in thunder_mlir.last_traces(step)]
    out["xla_stage_lists_all_reduce"] = "all-reduce" in thunder_mlir.last_traces(step)[-1].text
    # state_dict / load_state_dict round trip, and a loaded value is what the step uses
    sd = step.state_dict()
    step.load_state_dict(sd)
    again = step.state_dict()
    out["roundtrip_exact"] = all(torch.equal(sd[k], again[k]) for k in sd)
    sd2 = {k: v.clone() for k, v in sd.items()}
    sd2["transformer.ln_f.bias"] += 1.0
    step.load_state_dict(sd2)
    out["loaded_applied"] = torch.equal(step.state_dict()["transformer.ln_f.bias"],
                                        sd2["transformer.ln_f.bias"])
    # a token id past the vocabulary in the last row only (its shard is the last device's):
    # every device returns the check's verdict, the step raises and leaves the state
    ids, labels = batch()
    ids[-1, 3] = VOCAB + 5
    before, steps = step.state_dict(), step.steps
    try:
        step(ids, labels)
        out["bad_token_error"] = None
    except Exception as e:  # noqa: BLE001 - its type is the result
        out["bad_token_error"] = type(e).__name__
    after = step.state_dict()
    out["bad_token_state_unchanged"] = all(torch.equal(before[k], after[k]) for k in before)
    out["bad_token_steps_unchanged"] = step.steps == steps
    return out


def _thunder_opt_reproduces(stages, chains=(("step", ["prims", "plan"]),)) -> dict:
    """thunder-opt (in this process) reruns the passes of the stages: step (shardings +
    constraint op parsed back) -> decompose, partition. -> {stage: whether the output
    equals the stage's text}."""
    import contextlib
    import io
    import tempfile

    from thunder_mlir.tools.thunder_opt import main as thunder_opt_main

    by = {s.name: s for s in stages}
    out = {}
    for src, names in chains:
        with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
            f.write(by[src].text)
        elements = []
        for name in names:
            elements.append(by[name].pipeline[len("builtin.module("):-1])
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                code = thunder_opt_main([f.name, "--mlir-print-debuginfo",
                                         f"--pass-pipeline=builtin.module({','.join(elements)})"])
            out[name] = code == 0 and buf.getvalue().strip() == by[name].text.strip()
        os.unlink(f.name)
    return out


def check_gpt2_fsdp_sgd():
    return compare("gpt2_fsdp_sgd", gpt2, "sgd", "fsdp", {"data": 8})[0]


def check_gpt2_fsdp_tp_adamw():
    return compare("gpt2_fsdp_tp_adamw", gpt2, "adamw", "fsdp", {"data": 2, "model": 4},
                   GPT2_TP)[0]


def check_gpt2_fsdp_tp_sgd():
    """Fused c_attn: the traced step holds the split projections (split-fused-projections
    ran before the backward was traced: no (E, 3E) reshape of the weight is left) and
    thunder-opt reproduces the passes after it; state_dict() / load_state_dict()
    round-trip the model's (E, 3E) layout."""
    out, step = compare("gpt2_fsdp_tp_sgd", gpt2, "sgd", "fsdp", {"data": 2, "model": 4},
                        GPT2_TP)
    initial = next(s.text for s in step.program.stages if s.name == "initial")
    out["fused_weight_reshaped"] = "(tensor<32x3x32xf32>) -> tensor<32x96xf32>" in initial
    out["thunder_opt_reproduces"] = _thunder_opt_reproduces(step.program.stages)
    sd = step.state_dict()
    step.load_state_dict(sd)
    again = step.state_dict()
    out["roundtrip_exact"] = all(torch.equal(sd[k], again[k]) for k in sd)
    out["c_attn_shape"] = list(sd["transformer.h.0.attn.c_attn.weight"].shape)
    return out


def check_llama_gqa_fsdp_tp_sgd():
    return compare("llama_gqa_fsdp_tp_sgd", llama_gqa, "sgd", "fsdp", {"data": 2, "model": 4},
                   LLAMA_GQA_TP)[0]


def check_gpt2_ddp_adamw():
    return compare("gpt2_ddp_adamw", gpt2, "adamw", "ddp", {"data": 8})[0]


def check_gpt2_fsdp_adamw():
    return compare("gpt2_fsdp_adamw", gpt2, "adamw", "fsdp", {"data": 8})[0]


def check_llama_fsdp_sgd():
    return compare("llama_fsdp_sgd", llama, "sgd", "fsdp", {"data": 8})[0]


def check_llama_fsdp_tp_adamw():
    return compare("llama_fsdp_tp_adamw", llama, "adamw", "fsdp", {"data": 2, "model": 4},
                   LLAMA_TP)[0]


def check_llama_ddp_sgd():
    return compare("llama_ddp_sgd", llama, "sgd_nesterov", "ddp", {"data": 8})[0]


def check_llama_ddp_adamw():
    return compare("llama_ddp_adamw", llama, "adamw", "ddp", {"data": 8})[0]


def check_llama_fsdp_adamw():
    return compare("llama_fsdp_adamw", llama, "adamw", "fsdp", {"data": 8})[0]


def check_llama_fsdp_tp_sgd():
    return compare("llama_fsdp_tp_sgd", llama, "sgd", "fsdp", {"data": 2, "model": 4},
                   LLAMA_TP)[0]


def _shard_tp(name, model_fn, plan):
    """Inference with Megatron tensor parallelism on a {"data": 2, "model": 4} mesh:
    logits equal eager's; the collectives are the forward's all-reduces."""
    model = model_fn().eval()
    ids, _ = batch()
    sharded = dist.shard(model, dist.mesh({"data": 2, "model": 4}), plan)
    out = sharded(ids, use_cache=False)
    with torch.no_grad():
        ref = model(ids).logits
    import thunder_mlir

    exam = thunder_mlir.examine(sharded, ids, use_cache=False)
    return {"name": name,
            "examine_matches": [str(c) for c in exam.collectives] ==
            [str(c) for c in sharded.collectives()] and exam.all_on_xla,
            "last_traces": [s.name for s in thunder_mlir.last_traces(sharded)],
            "max_logit_diff": (out.logits - ref).abs().max().item(),
            "collective_list": [[c.kind, c.bytes, c.groups] for c in sharded.collectives()],
            "activation_bytes": (BATCH // 2) * SEQ * 32 * 4}


def check_llama_shard_tp():
    return _shard_tp("llama_shard_tp", llama, LLAMA_TP)


def check_gpt2_shard_tp():
    """GPT-2 with the fused q/k/v c_attn as Fused(3, ...)."""
    return _shard_tp("gpt2_shard_tp", gpt2, GPT2_TP)


def check_multi_fsdp():
    losses, sd, step = train(gpt2, "sgd", "fsdp", {"data": 8})
    return {"name": "multi_fsdp", "pid": PID, "losses": losses,
            "processes": jax.process_count(), "devices": len(jax.devices()),
            "local_devices": len(jax.local_devices()),
            "param_sum": float(sum(v.double().sum() for v in sd.values()))}


if __name__ == "__main__":
    for c in CHECKS:
        print("RESULT " + json.dumps(globals()[f"check_{c}"]()), flush=True)
    if MODE == "multi":  # skip jax.distributed's shutdown barrier (seconds); nothing to save
        sys.stderr.flush()
        os._exit(0)
