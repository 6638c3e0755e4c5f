"""Train a tiny Hugging Face Llama (2 layers, hidden 128, MLP 256, 4 heads / 2 KV heads,
vocab 1000, random weights) for 20 AdamW steps on a fixed random batch, jitted and eager
side by side from the same initialization; losses must match eager within 1e-4 relative at
every step and parameter gradients within 1e-4 after step 1 (see ``_train_common``). Also
reports the bytes saved for backward (thunder_mlir residuals vs eager autograd).

    HF_HUB_OFFLINE=1 .venv/bin/python examples/train_llama.py
"""

import sys

import torch

from _train_common import setup, train_side_by_side


def make_model():
    """LlamaForCausalLM with the tiny config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                      max_position_embeddings=128)
    return LlamaForCausalLM(cfg)


def main() -> int:
    setup()
    model = make_model()
    ids = torch.randint(0, 1000, (2, 64))
    return train_side_by_side("Llama tiny", model,
                              dict(input_ids=ids, labels=ids, use_cache=False))


if __name__ == "__main__":
    sys.exit(main())
