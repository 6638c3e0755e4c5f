"""GPT-2 tiny trained as one SPMD program on 8 virtual CPU devices, three ways:

* ddp          on a {"data": 8} mesh (parameters replicated, batch split);
* fsdp         on a {"data": 8} mesh (parameters, gradients, AdamW state split: ZeRO-3);
* fsdp x tp    on a {"data": 2, "model": 4} mesh (Megatron column/row parallel Conv1D
               weights over "model", everything also split over "data").

Each run is checked against eager PyTorch (torch.optim.AdamW on a copy of the model):
losses within 1e-4. It prints the losses, the collectives XLA inserted (bytes per step per
device) and the parameter + optimizer-state bytes each device holds. Exits non-zero when a
check fails.

    python examples/train_gpt2_sharded.py [--steps 5]
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"  # before jax starts
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

import thunder_mlir.distributed as dist  # noqa: E402

VOCAB, SEQ, BATCH = 128, 32, 16
# HF GPT-2 uses Conv1D, whose weight is (in, out): column parallel splits dim 1. c_attn
# packs q, k and v: Fused(3, ...) splits each of them, so each device gets whole heads.
TP_PLAN = {"*.c_attn.weight": dist.Fused(3, (None, "model")),
           "*.c_attn.bias": dist.Fused(3, ("model",)),
           "*.c_fc.weight": (None, "model"), "*.c_fc.bias": ("model",),
           "*.c_proj.weight": ("model", None)}


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                  n_positions=SEQ, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def loss_fn(model, ids, labels):
    logits = model(input_ids=ids, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.roll(ids, -1, dims=1)
    opt_kwargs = dict(lr=3e-3, weight_decay=0.01)

    ref = make_model()
    opt = torch.optim.AdamW(ref.parameters(), **opt_kwargs)
    eager = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = loss_fn(ref, ids, labels)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    print(f"eager      losses {[round(v, 5) for v in eager]}")

    ok = True
    runs = [("ddp", {"data": 8}, None), ("fsdp", {"data": 8}, None),
            ("fsdp", {"data": 2, "model": 4}, TP_PLAN)]
    for strategy, axes, tp in runs:
        model = make_model()
        step = dist.train_step(model, loss_fn, torch.optim.AdamW, dist.mesh(axes),
                               strategy=strategy, tp_plan=tp, **opt_kwargs)
        losses = [step(ids, labels).item() for _ in range(args.steps)]
        err = max(abs(a - b) for a, b in zip(losses, eager))
        ok &= err <= 1e-4
        name = f"{strategy}{' x tp' if tp else ''} {axes}"
        print(f"{name:30} losses {[round(v, 5) for v in losses]}  max |diff| {err:.2e}")
        print(f"    collectives (bytes/step/device): {step.collective_bytes()}")
        print(f"    per-device bytes: {step.device_bytes()}")
        sd = step.state_dict()
        drift = max((sd[k] - v).abs().max().item() for k, v in copy.deepcopy(
            model.state_dict()).items())
        print(f"    parameters moved by up to {drift:.3e} from their initial values")
    print("OK" if ok else "FAILED: a loss differs from eager by more than 1e-4")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
