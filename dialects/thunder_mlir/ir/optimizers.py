"""Optimizer update rules: one per ``torch.optim`` class, written as torch operations and
traced on proxies into the program that updates the parameters.

Every compiled optimizer step uses these rules, through one loop (``update_parameters``),
and no other copy of the formulas: ``thunder_mlir.jit(opt.step)``
(``thunder_mlir/optimizer.py``), the whole training step ``thunder_mlir.jit(step)``
(``thunder_mlir/train_step.py``) and the SPMD training step of
``thunder_mlir.distributed.train_step`` (``distributed/program.py``).

Each rule follows the single-tensor implementation of its class in torch/optim, operation
for operation: ``torch/optim/sgd.py: _single_tensor_sgd`` and ``torch/optim/adam.py:
_single_tensor_adam`` (``AdamW`` is ``Adam`` with ``decoupled_weight_decay=True``,
``torch/optim/adamw.py``), the algorithms in those classes' docstrings. torch.optim runs
that implementation on CPU tensors by default; its ``foreach`` and ``fused`` variants
compute the same formulas (``_multi_tensor_*``, ATen's fused kernels) and are not a
different result here.

What is a Python value in torch.optim stays one here, in two kinds:

* **options** (``maximize``, ``nesterov``, ``amsgrad``, whether ``weight_decay`` and
  ``momentum`` are nonzero, decoupled decay): they choose which operations run, so they
  are part of the traced program (``OptimizerRule.options``; a change re-traces);
* **scalars** (``lr``, ``weight_decay``, ``momentum``, betas, ``eps`` and the bias
  corrections): computed on the host in Python doubles at every step, exactly as
  torch.optim computes them, from the live ``param_group`` (so ``lr_scheduler.step()`` or
  editing ``param_groups`` needs no re-trace), and passed to the program as float32
  inputs (``OptimizerRule.scalars``): the float32 numbers ATen's tensor-scalar kernels
  cast the same doubles to.

Where an ATen kernel fixes an order of operations, the rule writes that order
(``aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp``: ``addcmul`` is ``self + value * t1
* t2``, ``addcdiv`` is ``self + value * t1 / t2``; ``aten/src/ATen/native/Lerp.h``: lerp
is ``self + w * (end - self)`` for ``|w| < 0.5``, else ``end - (end - self) * (1 - w)``).
ATen's vectorized CPU loops may contract a multiply and an add into one FMA, so results
agree with eager to float32 rounding, not always bitwise.

bfloat16 and float16 parameters (and their state, which torch.optim keeps in the
parameters' dtype) follow ATen's opmath rule (``_opmath``): each op computes in float32,
its Python scalar in float32 too, and rounds its result to the 16-bit dtype, as the
single-tensor and ``foreach`` implementations do op by op; a ``fused=True`` optimizer
rounds once per update, as its fused kernel does.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from thunder_mlir.errors import UnsupportedInputError


class OptimizerRule:
    """The update of one ``torch.optim`` class for fixed ``options``.

    Class attributes: ``name`` (the torch.optim class name), ``state_names`` (the
    per-parameter state tensors shaped like the parameter, torch.optim's ``state[p]``
    keys, in the order ``update`` takes and returns them), ``scalar_names`` (the float32
    host scalars ``scalars`` computes, in ``update``'s order), ``counts_steps`` (torch.optim
    keeps ``state[p]["step"]``, a 0-d float32 tensor, incremented before the update)."""

    name: str = ""
    state_names: tuple[str, ...] = ()
    scalar_names: tuple[str, ...] = ()
    counts_steps: bool = False

    def __init__(self, options: tuple):
        self.options = options

    @classmethod
    def options_of(cls, group: Mapping) -> tuple:
        """The options of ``group`` (a ``param_groups`` entry or the optimizer's
        ``defaults``) that choose the traced operations, as a hashable tuple. Raises
        UnsupportedInputError for settings the rule does not implement."""
        raise NotImplementedError

    def scalars(self, group: Mapping, step: float) -> list[float]:
        """The host scalars (Python doubles, ``scalar_names`` order) for a parameter of
        ``group`` at step ``step`` (1.0 at the first ``step()``)."""
        raise NotImplementedError

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Sequence[torch.Tensor],
               s: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """-> (new parameter, new state tensors). ``p``, ``g`` and ``state``: tensors of
        one shape and floating dtype; ``s``: 0-d float32 tensors, ``scalar_names``
        order. Traced on proxies (functional: no input is written)."""
        raise NotImplementedError


def _float(group: Mapping, key: str):
    """``group[key]`` as a Python float; a Tensor hyperparameter is refused (torch.optim
    then computes step sizes in float32 tensor arithmetic instead of doubles)."""
    v = group[key]
    if isinstance(v, torch.Tensor):
        raise UnsupportedInputError(
            f"a Tensor {key} is not supported by the compiled optimizer step; pass a float "
            f"(param_groups[i][{key!r}] = float(...))")
    return float(v)


def _check_common(name: str, group: Mapping) -> None:
    for flag in ("capturable", "differentiable"):
        if group.get(flag):
            raise UnsupportedInputError(
                f"torch.optim.{name}({flag}=True) is not supported by the compiled optimizer "
                f"step (its formulas differ from the default path); use {flag}=False")


def _opmath(p: torch.Tensor, per_op: bool = True):
    """(up, down, final, alpha) for a rule's arithmetic on parameter ``p``'s dtype, as ATen
    computes it. A bfloat16 or float16 tensor op with a Python scalar computes in float32
    (ATen's opmath type; the scalar is not rounded to the tensor's dtype) and rounds its
    result to the tensor's dtype: ``up`` converts an operand to float32, ``down`` rounds an
    op's result back, ``final`` rounds a value the rule returns. ``per_op`` False
    (``fused=True`` optimizers: one ATen kernel keeps the whole update in float32
    registers and rounds once on store): ``down`` keeps float32. ``alpha`` is a Python
    scalar of an ``add``/``add_`` (its ``alpha=``, or the scalar added): ATen's CPU kernel
    rounds it to the 16-bit dtype first (measured, torch 2.13: ``g.add(p, alpha=0.1)`` in
    bfloat16 equals ``g + bf16(0.1) * p`` computed in float32, and ``x.add_(1e-8)`` adds
    ``bf16(1e-8)``); the CUDA kernels keep it in the opmath type. ATen's vectorized CPU
    loops contract some multiply-adds (lerp's) into FMAs, so a 16-bit result can differ
    from eager's by one rounding, as float32 ones can. For float32 and float64 all four
    are the identity (the rule's ops are ATen's own)."""
    dtype = p.dtype
    if dtype not in (torch.float16, torch.bfloat16):
        same = lambda t: t  # noqa: E731
        return same, same, same, same

    def up(t):
        return t if t.dtype == torch.float32 else t.float()

    def final(t):
        return t.to(dtype)

    def alpha(s):
        return s.to(dtype).float() if p.device.type == "cpu" and per_op else s
    return up, (final if per_op else up), final, alpha


def _lerp(start, end, weight, small: bool):
    """``torch.lerp(start, end, weight)`` for a 0-d tensor ``weight``, ATen's formula
    (``aten/src/ATen/native/Lerp.h``); ``small``: ``is_lerp_weight_small(weight)``, i.e.
    ``|weight| < 0.5``, decided on the host (an option: the branch is not computed twice)."""
    diff = end - start
    return start + weight * diff if small else end - diff * (1 - weight)


class SGD(OptimizerRule):
    """``torch.optim.SGD`` (torch/optim/sgd.py ``_single_tensor_sgd``; the algorithm of
    ``SGD``'s docstring)::

        g = -g                                        if maximize
        g = g + weight_decay * p                      if weight_decay != 0 (add, alpha)
        buf = g                                       first step (grad.detach().clone())
        buf = momentum * buf + (1 - dampening) * g    later steps (mul_, add_ alpha)
        g = g + momentum * buf if nesterov else buf   if momentum != 0
        p = p + (-lr) * g                             (add_, alpha=-lr)

    The first-step branch is a ``where`` on the host scalar ``first`` (1.0 where the
    parameter has no momentum buffer yet), so one program serves every step."""

    name = "SGD"
    scalar_names = ("weight_decay", "momentum", "one_minus_dampening", "neg_lr", "first")

    def __init__(self, options: tuple):
        super().__init__(options)
        self.momentum, self.weight_decay, self.nesterov, self.maximize, self.fused = options
        self.state_names = ("momentum_buffer",) if self.momentum else ()

    @classmethod
    def options_of(cls, group: Mapping) -> tuple:
        """(momentum != 0, weight_decay != 0, nesterov, maximize, fused: one rounding per
        update for 16-bit parameters, ``_opmath``)."""
        _check_common(cls.name, group)
        for k in ("lr", "momentum", "dampening", "weight_decay"):
            _float(group, k)
        return (group["momentum"] != 0, group["weight_decay"] != 0, bool(group["nesterov"]),
                bool(group["maximize"]), bool(group.get("fused")))

    def scalars(self, group: Mapping, step: float) -> list[float]:
        """[weight_decay, momentum, 1 - dampening, -lr, first (1.0 at step 1)]."""
        return [_float(group, "weight_decay"), _float(group, "momentum"),
                1 - _float(group, "dampening"), -_float(group, "lr"),
                1.0 if step == 1 else 0.0]

    def update(self, p, g, state, s):
        """One parameter's SGD step (class docstring); ``state`` = [momentum_buffer]
        with momentum, else []."""
        weight_decay, momentum, one_minus_dampening, neg_lr, first = s
        up, down, final, alpha = _opmath(p, per_op=not self.fused)
        if self.maximize:
            g = -g
        if self.weight_decay:
            g = down(up(g) + alpha(weight_decay) * up(p))
        new_state = []
        if self.momentum:
            (buf,) = state
            later = down(up(down(up(buf) * momentum)) + alpha(one_minus_dampening) * up(g))
            buf = torch.where(first > 0, g, later)
            g = down(up(g) + alpha(momentum) * up(buf)) if self.nesterov else buf
            new_state = [final(buf)]
        return final(up(p) + alpha(neg_lr) * up(g)), new_state


class Adam(OptimizerRule):
    """``torch.optim.Adam`` and ``AdamW`` (torch/optim/adam.py ``_single_tensor_adam``,
    ``capturable=False``; the algorithms of ``Adam``'s and ``AdamW``'s docstrings)::

        step = step + 1                                  (state["step"], on the host)
        g = -g                                           if maximize
        p = p * (1 - lr * weight_decay)                  if decoupled (AdamW), wd != 0
        g = g + weight_decay * p                         if not decoupled (Adam), wd != 0
        exp_avg = lerp(exp_avg, g, 1 - beta1)
        exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g      (mul_, addcmul_)
        max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq)       if amsgrad
        denom = sqrt(exp_avg_sq or max_exp_avg_sq) / sqrt(1 - beta2**step) + eps
        p = p + (-lr / (1 - beta1**step)) * exp_avg / denom        (addcdiv_)

    ``1 - lr * weight_decay``, ``1 - beta1``, ``1 - beta2``, ``bias_correction2 ** 0.5``
    and ``-lr / bias_correction1`` are Python doubles in torch.optim (``step =
    state["step"].item()``): the host computes them (``scalars``)."""

    name = "Adam"
    scalar_names = ("weight_decay", "decay_factor", "one_minus_beta1", "beta2",
                    "one_minus_beta2", "bias_correction2_sqrt", "eps", "neg_step_size")
    counts_steps = True

    def __init__(self, options: tuple):
        super().__init__(options)
        (self.weight_decay, self.decoupled, self.amsgrad, self.maximize, self.lerp_small,
         self.fused) = options
        self.state_names = ("exp_avg", "exp_avg_sq") + (
            ("max_exp_avg_sq",) if self.amsgrad else ())

    @classmethod
    def options_of(cls, group: Mapping) -> tuple:
        """(weight_decay != 0, decoupled weight decay, amsgrad, maximize, |1 - beta1| <
        0.5: which of lerp's two formulas ATen uses, fused: one rounding per update for
        16-bit parameters, ``_opmath``)."""
        _check_common(cls.name, group)
        for k in ("lr", "eps", "weight_decay"):
            _float(group, k)
        for b in group["betas"]:
            if isinstance(b, torch.Tensor):
                raise UnsupportedInputError(
                    "Tensor betas are not supported by the compiled optimizer step; pass "
                    "floats")
        return (group["weight_decay"] != 0, bool(group.get("decoupled_weight_decay", False)),
                bool(group["amsgrad"]), bool(group["maximize"]),
                abs(1 - float(group["betas"][0])) < 0.5, bool(group.get("fused")))

    def scalars(self, group: Mapping, step: float) -> list[float]:
        """[weight_decay, 1 - lr * weight_decay, 1 - beta1, beta2, 1 - beta2,
        sqrt(1 - beta2**step), eps, -(lr / (1 - beta1**step))], as torch.optim computes
        them in doubles."""
        lr, wd, eps = _float(group, "lr"), _float(group, "weight_decay"), _float(group, "eps")
        beta1, beta2 = (float(b) for b in group["betas"])
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        return [wd, 1 - lr * wd, 1 - beta1, beta2, 1 - beta2, bias_correction2 ** 0.5, eps,
                -step_size]

    def update(self, p, g, state, s):
        """One parameter's Adam/AdamW step (class docstring); ``state`` = [exp_avg,
        exp_avg_sq] (+ [max_exp_avg_sq] with amsgrad)."""
        (weight_decay, decay_factor, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps,
         neg_step_size) = s
        exp_avg, exp_avg_sq = state[0], state[1]
        up, down, final, alpha = _opmath(p, per_op=not self.fused)
        if self.maximize:
            g = -g
        if self.weight_decay:
            if self.decoupled:
                p = down(up(p) * decay_factor)
            else:
                g = down(up(g) + alpha(weight_decay) * up(p))
        exp_avg = down(_lerp(up(exp_avg), up(g), one_minus_beta1, self.lerp_small))
        exp_avg_sq = down(up(exp_avg_sq) * beta2)  # (mul_, then addcmul_)
        exp_avg_sq = down(up(exp_avg_sq) + one_minus_beta2 * up(g) * up(g))
        new_state = [exp_avg, exp_avg_sq]
        second = exp_avg_sq
        if self.amsgrad:
            second = torch.maximum(up(state[2]), up(exp_avg_sq))
            new_state.append(second)
        denom = down(up(down(up(second).sqrt())) / bc2_sqrt)  # (sqrt, div, add_)
        denom = down(up(denom) + alpha(eps))
        return final(up(p) + neg_step_size * up(exp_avg) / up(denom)), \
            [final(t) for t in new_state]


class AdamW(Adam):
    """``torch.optim.AdamW``: ``Adam`` with ``decoupled_weight_decay=True``
    (torch/optim/adamw.py); its groups carry that key set to True."""

    name = "AdamW"


RULES: dict[type, type[OptimizerRule]] = {
    torch.optim.SGD: SGD, torch.optim.Adam: Adam, torch.optim.AdamW: AdamW}


def update_parameters(entries, in_place: bool):
    """The update every compiled step builds (``jit(opt.step)``: optimizer.py,
    ``jit(step)``: train_step.py, ``distributed.train_step``: distributed/program.py) —
    the one loop over parameters, traced on proxies. ``entries``: (rule, p, g, state, s)
    per parameter (``OptimizerRule.update``'s arguments); ``g`` None: torch.optim skips
    the parameter (no update, state unchanged). -> per entry (new p, new state), or None
    where ``g`` is None. ``in_place``: the new values are also written into ``p`` and
    ``state`` (``copy_``: mutated program inputs, written back into the caller's tensors
    by the runtime), as torch.optim updates them."""
    out = []
    for rule, p, g, state, s in entries:
        if g is None:
            out.append(None)
            continue
        if g.is_sparse:
            raise UnsupportedInputError(
                f"torch.optim.{rule.name}: sparse gradients are not supported by the "
                "compiled optimizer step")
        new_p, new_state = rule.update(p, g, state, s)
        if in_place:
            p.copy_(new_p)
            for t, v in zip(state, new_state):
                t.copy_(v)
        out.append((new_p, new_state))
    return out


def supported_names() -> str:
    """The classes with a rule, ``torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW``
    (for error messages)."""
    return ", ".join(f"torch.optim.{c.__name__}" for c in RULES)


def custom_step(optimizer_cls: type):
    """The ``step`` function of a custom ``torch.optim.Optimizer`` subclass, to be traced
    as plain tensor code (train_step.py): a class without a rule whose ``step`` is defined
    outside torch (a subclass of a torch.optim class that keeps torch's ``step`` is not
    custom: torch's step functions use host-side paths the trace cannot follow). The
    wrapper ``Optimizer._patch_step_function`` installs (``profile_hook_step``: it runs
    the step hooks) is removed. None for every other class."""
    if optimizer_cls in RULES or not (isinstance(optimizer_cls, type) and
                                      issubclass(optimizer_cls, torch.optim.Optimizer)):
        return None
    fn = optimizer_cls.step
    if getattr(fn, "hooked", False):  # profile_hook_step's functools.wraps wrapper
        fn = fn.__wrapped__
    module = getattr(fn, "__module__", None) or ""
    if module == "torch" or module.startswith("torch."):
        return None
    return fn


def rule_class(optimizer_cls: type) -> type[OptimizerRule]:
    """The rule of exactly ``optimizer_cls`` (a subclass may override ``step``: it gets
    none). Raises UnsupportedInputError naming the class, the supported ones and that a
    custom subclass's own ``step`` is traced (``custom_step``)."""
    rule = RULES.get(optimizer_cls)
    if rule is None:
        raise UnsupportedInputError(
            f"{optimizer_cls.__module__}.{optimizer_cls.__qualname__} has no update rule in "
            f"thunder_mlir (compiled optimizer steps); supported: {supported_names()}, "
            "and a custom torch.optim.Optimizer subclass whose own step() is plain tensor "
            "code (traced)")
    return rule


def rule_for(optimizer_cls: type, group: Mapping) -> OptimizerRule:
    """The rule of ``optimizer_cls`` for the options of ``group`` (a param group or the
    ``defaults`` of an optimizer of that class). Raises UnsupportedInputError (class or
    option without a rule)."""
    cls = rule_class(optimizer_cls)
    return cls(cls.options_of(group))


def defaults(optimizer_cls: type, kwargs: dict) -> dict:
    """``optimizer_cls([p], **kwargs).defaults``: torch validates the hyperparameters
    (its ValueError) and fills in its defaults. Raises UnsupportedInputError for a class
    without a rule."""
    rule_class(optimizer_cls)
    hyper = dict(optimizer_cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults)
    if not math.isfinite(float(hyper["lr"])):
        raise ValueError(f"lr must be finite, got {hyper['lr']}")
    return hyper
