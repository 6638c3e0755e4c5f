"""peft's adapters on a transformers model (issue 48): a tiny random-init Llama wrapped by
``peft.get_peft_model`` with one adapter type each (LoRA, IA3, LoHa, LoKr, and the
prompt-learning methods: prefix tuning, prompt tuning, P-tuning), jitted whole and
compared with eager on the logits, the loss and the adapters' gradients (the base weights
are frozen: no gradient, as eager); and the training step of LoRA, prefix tuning and
prompt tuning, ``thunder_mlir.jit(step)`` with AdamW over the adapters, three steps equal
to eager's.

The prompt-learning models hold the base model's embedding also as ``word_embeddings``:
one submodule under two names, whose parameters the trace once left as proxies
(frontend/reparametrize.py). Prefix tuning passes its encoder's key/value prefixes to the
attention as ``past_key_values``, a transformers ``DynamicCache`` built inside forward.

The adapters' weights are moved off their initial values first (LoRA's ``B`` starts at
zero, which would make its product and the gradient of ``A`` zero: a comparison that
could not fail).
"""

from __future__ import annotations

import copy

import pytest
import torch

import thunder_mlir

peft = pytest.importorskip("peft", reason="peft is installed by `make setup` (Makefile PEFT)")
transformers = pytest.importorskip("transformers")

ADAPTERS = {
    "lora": lambda: peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                    lora_dropout=0.0),
    "ia3": lambda: peft.IA3Config(target_modules=["k_proj", "down_proj"],
                                  feedforward_modules=["down_proj"]),
    "loha": lambda: peft.LoHaConfig(r=4, target_modules=["q_proj", "v_proj"]),
    "lokr": lambda: peft.LoKrConfig(r=4, target_modules=["q_proj", "v_proj"]),
    # prompt learning: trained virtual tokens; the prefix encoder's key/value prefixes
    # reach the attention as past_key_values (a transformers DynamicCache built in forward)
    "prefix": lambda: peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "prompt": lambda: peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "p_tuning": lambda: peft.PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=4,
                                                 encoder_hidden_size=16),
}


def _model(adapter: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=128, max_position_embeddings=64)
    model = peft.get_peft_model(transformers.LlamaForCausalLM(cfg), ADAPTERS[adapter]())
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def _ids():
    return torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_adapter_forward_and_gradients_are_eagers(adapter):
    model = _model(adapter)
    twin = copy.deepcopy(model)
    ids = _ids()
    want = model(input_ids=ids, labels=ids)
    want.loss.backward()
    got = thunder_mlir.jit(twin)(input_ids=ids, labels=ids)
    got.loss.backward()
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss)
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())
    torch.testing.assert_close({n: p.grad for n, p in twin.named_parameters()
                                if p.requires_grad}, grads)
    assert all(p.grad is None for p in twin.parameters() if not p.requires_grad)


@pytest.mark.parametrize("adapter", ["lora", "prefix", "prompt"])
def test_training_step_with_adamw_is_eagers(adapter):
    # prompt learning reads ``self.prompt_tokens[adapter]``, a dict of tensors held as a
    # plain attribute: an input of the step (train_step.py ``TrainStep.lifted``)
    model = _model(adapter)
    twin = copy.deepcopy(model)
    opts = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
            for m in (model, twin)]
    ids = _ids()

    def step(model, opt, ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    jstep = thunder_mlir.jit(step)
    for _ in range(3):
        torch.testing.assert_close(jstep(twin, opts[1], ids), step(model, opts[0], ids).detach())
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, msg=n)

