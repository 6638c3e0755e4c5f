"""A tiny Hugging Face GPT-2 (2 layers, 128 wide, 4 heads, vocab 1000, random weights)
jitted as a whole ``GPT2LMHeadModel`` and compared with eager PyTorch: batch 2, sequence 64,
with an attention mask that pads the end of the second row.

    HF_HUB_OFFLINE=1 .venv/bin/python examples/gpt2_tiny.py
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from _common import compare


def make_gpt2_tiny() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                        bos_token_id=999, eos_token_id=999)  # the defaults (50256) exceed vocab
    return GPT2LMHeadModel(config).eval()


def make_inputs(batch: int = 2, seq: int = 64, pad: int = 16):
    input_ids = torch.randint(0, 1000, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1, seq - pad:] = 0  # row 1 is shorter: its last `pad` tokens are padding
    return input_ids, attention_mask


def main() -> int:
    model = make_gpt2_tiny()
    input_ids, attention_mask = make_inputs()
    return compare("GPT2LMHeadModel (2 layers, 128 wide), batch 2 x seq 64, padded mask", model,
                   (), kwargs=dict(input_ids=input_ids, attention_mask=attention_mask,
                                   use_cache=False),
                   tol=1e-4, select=lambda out: out.logits)


if __name__ == "__main__":
    sys.exit(main())
