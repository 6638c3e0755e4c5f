"""An MLP (Linear -> ReLU -> Linear -> GELU -> Linear -> Tanh -> Linear) on a batch of 64,
jitted as an ``nn.Module`` and compared with eager PyTorch.

    HF_HUB_OFFLINE=1 .venv/bin/python examples/mlp.py
"""

import sys

import torch
from torch import nn

from _common import compare


def make_mlp(d_in: int = 256, hidden: int = 512, d_out: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, d_out),
    ).eval()


def main() -> int:
    torch.manual_seed(0)
    model = make_mlp()
    x = torch.randn(64, 256)
    return compare("MLP 256-512-512-512-10, batch 64", model, (x,), tol=1e-5)


if __name__ == "__main__":
    sys.exit(main())
