"""The smallest thunder_mlir program: ``a + b`` on two 2x2 tensors.

Prints the MLIR of every compilation stage (initial thunder dialect, prims after
decomposition, the partition plan, StableHLO, XLA compile) and compares with eager PyTorch.

    HF_HUB_OFFLINE=1 .venv/bin/python examples/foo_add.py
"""

import sys

import torch

from _common import compare


def foo(a, b):
    return a + b


def main() -> int:
    torch.manual_seed(0)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    return compare("foo(a, b) = a + b on 2x2 float32", foo, (a, b), tol=0.0, iters=1000,
                   show_stages=True)


if __name__ == "__main__":
    sys.exit(main())
