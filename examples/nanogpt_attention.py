"""nanoGPT's CausalSelfAttention block (c_attn, split into q/k/v, heads via view+transpose,
causal ``F.scaled_dot_product_attention``, merge heads, c_proj), jitted and compared with
eager PyTorch.

    HF_HUB_OFFLINE=1 .venv/bin/python examples/nanogpt_attention.py
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F

from _common import compare


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int = 128, n_head: int = 4):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads
        return self.c_proj(y)


def main() -> int:
    torch.manual_seed(0)
    attn = CausalSelfAttention().eval()
    x = torch.randn(4, 64, 128)
    return compare("nanoGPT CausalSelfAttention, B=4 T=64 C=128 heads=4", attn, (x,), tol=1e-5)


if __name__ == "__main__":
    sys.exit(main())
