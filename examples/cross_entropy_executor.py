"""A CPU cross-entropy executor, in the spirit of Thunder's apex cross-entropy executor.

``F.cross_entropy(logits, target)`` (2-D float logits, int64 class targets, no weights or
label smoothing, reduction mean or sum) runs as two executor ops implemented with eager
torch kernels:

* ``xent.cross_entropy_fwd(logits, target, reduction, ignore_index) -> (loss, log_probs)``
  — a fused log_softmax + nll_loss that also returns the log-probabilities as the residual
  the backward needs (apex returns ``max_log_sum_exp``);
* ``xent.cross_entropy_bwd(grad, log_probs, target, reduction, ignore_index) -> dlogits``
  — ``(softmax - one_hot) * grad`` per row, zero for ignored targets.

The grad transform makes jitted training use both: the forward plan calls
``xent.cross_entropy_fwd``, the backward plan ``xent.cross_entropy_bwd``.

    python examples/cross_entropy_executor.py   # trains an MLP, jitted vs eager
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunder_mlir
import thunder_mlir.torch as ltorch
from thunder_mlir.extend import OperatorExecutor, get_grad, put_grads, register_executor

xent = OperatorExecutor("xent", version="0.1")
register_executor(xent)


# ------------------------------------------------------------------ forward operator
def _fwd_like(logits, target, reduction, ignore_index):
    log_probs = torch.log_softmax(logits, 1)
    loss = F.nll_loss(log_probs, target, ignore_index=ignore_index, reduction=reduction)
    return loss, log_probs


def _fwd_impl(logits, target, reduction, ignore_index):
    log_probs = torch.log_softmax(logits, 1)
    return F.nll_loss(log_probs, target, ignore_index=ignore_index,
                      reduction=reduction), log_probs


cross_entropy_fwd = xent.register_operator("cross_entropy_fwd", like=_fwd_like, fn=_fwd_impl)


# ----------------------------------------------------------------- backward operator
def _bwd(grad, log_probs, target, reduction, ignore_index):
    """d loss / d logits; written with torch ops, so it is both the ``like`` (traced on
    proxies) and, run eagerly, the implementation."""
    n_classes = log_probs.shape[1]
    valid = (target != ignore_index).to(log_probs.dtype)
    classes = torch.arange(n_classes, device=log_probs.device)
    one_hot = (target.unsqueeze(1) == classes.unsqueeze(0)).to(log_probs.dtype)
    rows = valid * grad
    if reduction == "mean":
        rows = rows / valid.sum()
    return (torch.exp(log_probs) - one_hot) * rows.unsqueeze(1)


cross_entropy_bwd = xent.register_operator("cross_entropy_bwd", like=_bwd, fn=_bwd)


# ------------------------------------------------------------ claiming cross_entropy
def _checker(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean", label_smoothing=0.0):
    return (input.ndim == 2 and target.ndim == 1 and target.dtype == torch.int64
            and input.dtype in (torch.float32, torch.float64) and input.device.type == "cpu"
            and weight is None and size_average is None and reduce is None
            and reduction in ("mean", "sum") and label_smoothing == 0.0)


def _execution(input, target, weight=None, size_average=None, ignore_index=-100,
               reduce=None, reduction="mean", label_smoothing=0.0):
    loss, _ = cross_entropy_fwd(input, target, reduction, ignore_index)
    return loss


def _grad(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
          reduction="mean", label_smoothing=0.0):
    loss, log_probs = cross_entropy_fwd(input, target, reduction, ignore_index)
    g = get_grad(loss)
    put_grads(input, cross_entropy_bwd(g, log_probs, target, reduction, ignore_index))
    return loss


xent.register_implementation(ltorch.cross_entropy, checker=_checker,
                             execution_transform=_execution, grad_transform=_grad)


# ----------------------------------------------------------------------- training
def make_mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


class WithLoss(torch.nn.Module):
    """``model`` followed by ``F.cross_entropy`` (what a training step differentiates)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return F.cross_entropy(self.model(x), y)


def train(model: torch.nn.Module, jitted: bool, steps: int = 10, seed: int = 1):
    """SGD on a fixed random classification batch. Returns (losses per step, the module
    that computed them: ``thunder_mlir.jit(WithLoss(model), executors=[xent])`` when
    ``jitted``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    step = WithLoss(model)
    if jitted:
        step = thunder_mlir.jit(step, executors=[xent])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = step(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, step


def main() -> None:
    eager, _ = train(make_mlp(), jitted=False)
    jitted, jstep = train(make_mlp(), jitted=True)
    for i, (e, j) in enumerate(zip(eager, jitted)):
        print(f"step {i}: eager {e:.6f}  jitted+xent {j:.6f}")
    plan = next(s for s in thunder_mlir.last_traces(jstep) if s.name == "plan")
    calls = [ln.strip().split(" {")[0] + " ... " + ln.split("callee = ")[1].split(",")[0]
             for ln in plan.text.splitlines() if "thunder.executor_call" in ln]
    print("executor calls in the plan:", *calls, sep="\n  ")


if __name__ == "__main__":
    main()
