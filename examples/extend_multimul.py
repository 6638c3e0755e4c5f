"""Thunder's "Extending Thunder" notebook, with thunder_mlir.

An executor ``myex`` with one NumPy operator, ``multimul(a, b, c, d) -> (a*b, c*d)``:
called from a jitted function, differentiated through its ``like`` function, used to run
``mul`` (``register_implementation`` with a CPU-only checker), given a grad transform that
makes the backward call it once, and given a "prologue" that makes inputs contiguous.

    python examples/extend_multimul.py   # prints each step's final plan
"""

from __future__ import annotations

from numbers import Number

import numpy as np
import torch

import thunder_mlir
import thunder_mlir.torch as ltorch
from thunder_mlir import TensorProxy
from thunder_mlir.extend import OperatorExecutor, get_grad, put_grads, register_executor

myex = OperatorExecutor("myex", version="0.1")
register_executor(myex)


def multimul_impl(a, b, c, d):
    """Two multiplications with NumPy (torch CPU tensors in, tensors/arrays out)."""
    return np.multiply(a, b), np.multiply(c, d)


def multimul_like(a: Number | TensorProxy, b, c, d):
    """What multimul computes, in traceable torch ops: metadata, grad and fallback."""
    return a * b, c * d


multimul = myex.register_operator("multimul", like=multimul_like, fn=multimul_impl)


def foo(a, b, c, d):
    return multimul(a, b, c, d)


def mul_to_multimul(a, b):
    result, _ = multimul(a, b, 0, 0)
    return result


def mul_to_multimul_checker(a, b) -> bool:
    def is_cpu(x) -> bool:
        return x.device.type == "cpu" if isinstance(x, TensorProxy) else True
    return all(is_cpu(x) for x in (a, b))


def mymul_grad(a, b):
    fwd = a * b
    g = get_grad(fwd)
    a_grad, b_grad = multimul(b, g, a, g)
    put_grads((a, b), (a_grad, b_grad))
    return fwd


def mul_to_contiguous_multimul(a, b):
    a = a.contiguous()
    b = b.contiguous()
    result, _ = multimul(a, b, 0, 0)
    return result


def bar(a, b):
    return a * b


def stage(jfn, name: str) -> str:
    """The text of stage ``name`` of ``jfn``'s last compilation, without locations."""
    import re

    text = next(s.text for s in thunder_mlir.last_traces(jfn) if s.name == name)
    text = re.sub(r" loc\([^()]*(\([^()]*\))?[^()]*\)", "", text)
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("#loc"))


def main() -> None:
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    cfoo = thunder_mlir.jit(foo, executors=[myex])
    print(cfoo(a, b, a, b))
    print(stage(cfoo, "initial"), stage(cfoo, "plan"), sep="\n")
    print(thunder_mlir.grad(cfoo)(a, b, a, b))

    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker,
                                 execution_transform=mul_to_multimul)
    cbar = thunder_mlir.jit(bar, executors=[myex])
    print(cbar(a, b))
    print(stage(cbar, "plan"))
    print(thunder_mlir.grad(cbar)(a, b))
    print(stage(cbar, "plan"))  # two multimuls in @backward

    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker,
                                 execution_transform=mul_to_multimul,
                                 grad_transform=mymul_grad)
    print(thunder_mlir.grad(cbar)(a, b))
    print(stage(cbar, "plan"))  # one multimul in @backward

    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker,
                                 execution_transform=mul_to_contiguous_multimul)
    ccaz = thunder_mlir.jit(bar, executors=[myex])
    print(ccaz(a, b))
    print(stage(ccaz, "plan"))


if __name__ == "__main__":
    main()
