"""Optimizer updates written as torch operations, traced into the SPMD training step.

Each rule follows the single-tensor implementation of its ``torch.optim`` class
(``torch/optim/sgd.py: _single_tensor_sgd``, ``torch/optim/adam.py: _single_tensor_adam``
with ``decoupled_weight_decay=True`` for ``AdamW``; ``foreach=False``, which is what
torch.optim runs on CPU tensors by default) operation for operation, so the sharded step
computes what ``optimizer.step()`` computes. Values torch.optim computes in Python doubles
(AdamW's bias corrections) are computed in Python here too, at each step, and enter the
program as 0-d float32 inputs: the same float32 numbers eager's tensor-scalar ops use.

The hyperparameters are torch's own: ``optimizer_cls([p], **kwargs).defaults`` (torch
validates them and fills in its defaults).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from thunder_mlir.errors import UnsupportedInputError


class OptimizerRule:
    """The update of one optimizer class. ``state_names``: the per-parameter state tensors
    (shaped like the parameter, as torch.optim's ``state[p]`` keys); ``scalar_names``: the
    0-d float32 inputs computed on the host at each step (``scalars``)."""

    name: str
    state_names: tuple[str, ...] = ()
    scalar_names: tuple[str, ...] = ()

    def __init__(self, hyper: dict):
        self.hyper = hyper

    def scalars(self, step: int) -> list[float]:
        """The per-step scalars for step ``step`` (1 for the first ``step()``)."""
        return []

    def update(self, p: torch.Tensor, g: torch.Tensor, state: list, scalars: list):
        """-> (new parameter, new state tensors); traced on proxies."""
        raise NotImplementedError


class SGD(OptimizerRule):
    """``torch.optim.SGD`` (``_single_tensor_sgd``)::

        g = -g if maximize;  g = g + weight_decay * p
        buf = g (first step) | momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov) | buf
        p = p - lr * g
    The first-step branch is a ``where`` on the host scalar ``first`` (1.0 at step 1)."""

    name = "SGD"

    def __init__(self, hyper: dict):
        super().__init__(hyper)
        if hyper["momentum"] != 0:
            self.state_names = ("momentum_buffer",)
            self.scalar_names = ("first",)

    def scalars(self, step: int) -> list[float]:
        """Per-step host scalars fed to the program: [1.0 at step 1 else 0.0] (torch.optim.SGD
        initializes the momentum buffer to the gradient at the first step); [] without momentum."""
        return [1.0 if step == 1 else 0.0] if self.scalar_names else []

    def update(self, p, g, state, scalars):
        """Traced torch.optim.SGD step (single-tensor formula: weight_decay, momentum, dampening,
        nesterov, maximize) for parameter ``p`` and gradient ``g`` (same shape and dtype);
        returns (new p, new state tensors)."""
        h = self.hyper
        if h["maximize"]:
            g = -g
        if h["weight_decay"] != 0:
            g = g.add(p, alpha=h["weight_decay"])
        new_state = []
        if h["momentum"] != 0:
            (buf,), (first,) = state, scalars
            buf = torch.where(first > 0, g,
                              buf.mul(h["momentum"]).add(g, alpha=1 - h["dampening"]))
            g = g.add(buf, alpha=h["momentum"]) if h["nesterov"] else buf
            new_state = [buf]
        return p.add(g, alpha=-h["lr"]), new_state


class AdamW(OptimizerRule):
    """``torch.optim.AdamW`` (``_single_tensor_adam``, decoupled weight decay)::

        g = -g if maximize;  p = p * (1 - lr * weight_decay)
        exp_avg = exp_avg + (1 - beta1) * (g - exp_avg)          (lerp, weight < 0.5)
        exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g    (mul_, addcmul_)
        denom = sqrt(exp_avg_sq) / sqrt(1 - beta2**step) + eps
        p = p + (-lr / (1 - beta1**step)) * (exp_avg / denom)   (addcdiv_)
    ``step_size = lr / (1 - beta1**step)`` and ``sqrt(1 - beta2**step)`` are Python
    doubles in torch.optim; they are computed on the host and passed as float32."""

    name = "AdamW"
    state_names = ("exp_avg", "exp_avg_sq")
    scalar_names = ("neg_step_size", "bias_correction2_sqrt")
    decoupled = True

    def __init__(self, hyper: dict):
        super().__init__(hyper)
        if hyper.get("amsgrad"):
            raise UnsupportedInputError(
                f"{self.name}(amsgrad=True) is not supported by thunder_mlir.distributed; "
                "use amsgrad=False")

    def scalars(self, step: int) -> list[float]:
        """Per-step host scalars, computed in Python floats as torch.optim.Adam(W) computes them:
        [-lr / bias_correction1, sqrt(bias_correction2)]."""
        h = self.hyper
        beta1, beta2 = h["betas"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        return [-(h["lr"] / bias_correction1), bias_correction2 ** 0.5]

    def update(self, p, g, state, scalars):
        """Traced torch.optim.AdamW/Adam step (single-tensor formula, amsgrad=False) for parameter
        ``p`` and gradient ``g``; ``state`` = (exp_avg, exp_avg_sq); returns (new p, new state
        tensors)."""
        h = self.hyper
        beta1, beta2 = h["betas"]
        exp_avg, exp_avg_sq = state
        neg_step_size, bc2_sqrt = scalars
        if h["maximize"]:
            g = -g
        if h["weight_decay"] != 0:
            if self.decoupled:
                p = p.mul(1 - h["lr"] * h["weight_decay"])
            else:
                g = g.add(p, alpha=h["weight_decay"])
        exp_avg = exp_avg.lerp(g, 1 - beta1)
        exp_avg_sq = exp_avg_sq.mul(beta2).addcmul(g, g, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / bc2_sqrt).add(h["eps"])
        # addcdiv_(exp_avg, denom, value=-step_size): p + value * (exp_avg / denom)
        return p + neg_step_size * (exp_avg / denom), [exp_avg, exp_avg_sq]


class Adam(AdamW):
    """``torch.optim.Adam``: AdamW's update with L2 weight decay added to the gradient
    (``decoupled_weight_decay=False``)."""

    name = "Adam"
    decoupled = False


_RULES: dict[type, Callable[[dict], OptimizerRule]] = {
    torch.optim.SGD: SGD, torch.optim.AdamW: AdamW, torch.optim.Adam: Adam}


def rule_for(optimizer_cls: type, kwargs: dict) -> OptimizerRule:
    """The update rule of ``optimizer_cls`` with its keyword arguments ``kwargs``.

    Raises UnsupportedInputError for an optimizer class without a rule here, or options
    it does not implement (AdamW's amsgrad, Adam(decoupled_weight_decay=True) is AdamW);
    torch's own ValueError for invalid hyperparameters."""
    if optimizer_cls not in _RULES:
        raise UnsupportedInputError(
            f"thunder_mlir.distributed has no update rule for {optimizer_cls.__name__}; "
            f"supported: {', '.join(c.__name__ for c in _RULES)}")
    hyper = dict(optimizer_cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults)
    for k in ("lr", "weight_decay", "momentum", "dampening", "eps"):
        if isinstance(hyper.get(k), torch.Tensor):
            hyper[k] = float(hyper[k])
    if hyper.get("betas") is not None:
        hyper["betas"] = tuple(float(b) for b in hyper["betas"])
    if optimizer_cls is torch.optim.Adam and hyper.get("decoupled_weight_decay"):
        return AdamW(hyper)
    if not math.isfinite(hyper["lr"]):
        raise ValueError(f"lr must be finite, got {hyper['lr']}")
    return _RULES[optimizer_cls](hyper)
