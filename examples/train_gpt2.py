"""Train a tiny Hugging Face GPT-2 (2 layers, 128 wide, 4 heads, vocab 1000, dropout 0,
random weights) for 20 AdamW steps on a fixed random batch, jitted and eager side by side
from the same initialization; losses must match eager within 1e-4 relative at every step
and parameter gradients within 1e-4 after step 1 (see ``_train_common``). Also reports
the bytes saved for backward (thunder_mlir residuals vs eager autograd).

    HF_HUB_OFFLINE=1 .venv/bin/python examples/train_gpt2.py
"""

import sys

import torch

from _train_common import setup, train_side_by_side


def make_model():
    """GPT2LMHeadModel with the tiny config and dropout probabilities 0."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                     bos_token_id=999, eos_token_id=999)
    return GPT2LMHeadModel(cfg)


def main() -> int:
    setup()
    model = make_model()
    ids = torch.randint(0, 1000, (2, 64))
    return train_side_by_side("GPT-2 tiny", model,
                              dict(input_ids=ids, labels=ids, use_cache=False))


if __name__ == "__main__":
    sys.exit(main())
