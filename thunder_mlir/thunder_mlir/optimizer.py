"""``thunder_mlir.jit(opt.step)``: a ``torch.optim`` optimizer's step as one compiled program
(docs/optim.md).

``OptimizerStep`` does on the host what torch.optim's ``step()`` does in Python —
choose the parameters with a gradient, create the state lazily, advance the step
counters, compute the per-step scalars from the live ``param_groups`` — and runs the
update of every parameter of every group as one jitted program (a ``ThunderFunction``),
built from the rules of ``ir/optimizers.py`` (the ones ``distributed.train_step`` uses).
The program writes parameters and state in place: they are mutated inputs, which the
runtime writes back into the caller's tensors after the run (function.py).

Program inputs: ``config`` (per group: rule name, options, parameter count: Python values,
part of the cache key), the parameters, their gradients, their state tensors (rule order)
and one ``(n, k)`` table of scalars per group (float32, or float64 for float64
parameters). Scalars are run-time values: an ``lr`` change, ``lr_scheduler.step()`` or a
new step count reuses the program.
"""

from __future__ import annotations

import weakref

import torch
from torch.optim import optimizer as _torch_optimizer

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.function import ThunderFunction
from thunder_mlir.ir import optimizers

_PARAMETER_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _update_program(config, params, grads, states, scalars):
    """The traced program: every group's rule applied to its parameters, written in place.
    ``config``: ((rule name, options, n), ...) per group; ``params``/``grads``: flat lists;
    ``states``: per parameter, its state tensors; ``scalars``: per group, an (n, k)
    tensor (row i: parameter i's scalars in the rule's ``scalar_names`` order)."""
    by_name = {c.name: c for c in optimizers.RULES.values()}
    entries, i = [], 0
    for (name, options, n), table in zip(config, scalars):
        rule = by_name[name](options)
        k = len(rule.scalar_names)
        for r in range(n):
            entries.append((rule, params[i], grads[i], states[i],
                            [table[r, j] for j in range(k)]))
            i += 1
    optimizers.update_parameters(entries, in_place=True)


class OptimizerStep:
    """What ``thunder_mlir.jit(opt.step)`` returns for a ``torch.optim`` SGD, Adam or
    AdamW: ``jstep(closure=None)`` does ``opt.step(closure)`` with the update compiled.
    For a custom ``torch.optim.Optimizer`` subclass with its own ``step``
    (``optimizers.custom_step``), that ``step`` is traced as in a compiled training step
    (``train_step.TrainStep``; hooks run on the host, a closure is refused).

    After each call, the parameters, ``opt.state`` (``momentum_buffer``; ``step``,
    ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``) and so ``opt.state_dict()`` are as
    after eager's ``step()``, to float32 rounding (ir/optimizers.py): state is created on
    the first step a parameter has a gradient, as torch.optim creates it, and a parameter
    whose ``.grad`` is None is skipped. Step pre- and post-hooks run as in
    ``Optimizer.step``. ``foreach`` and ``fused`` do not change the computation.

    Attributes: ``optimizer``, ``_fn`` (the ThunderFunction of the update program;
    ``thunder_mlir.cache_misses(jstep)`` counts its compilations).

    Raises UnsupportedInputError (at ``jit``) for an optimizer class without a rule,
    naming it and the supported ones, and (at a call) for options without a rule
    (``capturable``, ``differentiable``, Tensor hyperparameters), sparse gradients, or
    parameters that are not float32/float64, not all of one dtype or not all on one
    device."""

    def __init__(self, optimizer: torch.optim.Optimizer, traced_step=None, **jit_options):
        self.optimizer = optimizer
        self._rules: dict = {}
        # a custom subclass (optimizers.custom_step): its own step() traced as inside
        # jit(step), by the train_step.TrainStep of ``optimizer_step`` jit passes (this
        # module does not import train_step, which imports it)
        self._traced = traced_step
        if traced_step is not None:
            self._fn = traced_step._fn
            return
        optimizers.rule_class(type(optimizer))  # refuse an unsupported class now
        self._fn = ThunderFunction(_update_program, **jit_options)

    def _rule(self, group) -> optimizers.OptimizerRule:
        cls = optimizers.rule_class(type(self.optimizer))
        options = cls.options_of(group)
        rule = self._rules.get((cls, options))
        if rule is None:
            rule = self._rules[(cls, options)] = cls(options)
        return rule

    def __call__(self, closure=None):
        opt = self.optimizer
        args, kwargs = (opt,), {} if closure is None else {"closure": closure}
        for pre_hook in (*_torch_optimizer._global_optimizer_pre_hooks.values(),
                         *opt._optimizer_step_pre_hooks.values()):
            result = pre_hook(opt, args, kwargs)
            if result is not None:
                args, kwargs = result
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        loss = None
        if self._traced is not None:
            if closure is not None:
                raise UnsupportedInputError(
                    f"{type(opt).__module__}.{type(opt).__qualname__}.step(closure) cannot be "
                    "compiled: a custom optimizer's step() is traced without a closure; call "
                    "the closure (loss and backward()) first, then the compiled step")
            self._traced.call((opt,), {}, hooks_on_host=True)
        elif closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._traced is None:
            with torch.no_grad():
                self._step()
        opt._opt_called = True  # what lr_scheduler's wrapper of opt.step records
        for post_hook in (*opt._optimizer_step_post_hooks.values(),
                          *_torch_optimizer._global_optimizer_post_hooks.values()):
            post_hook(opt, args, kwargs)
        return loss

    def _step(self) -> None:
        opt = self.optimizer
        config, params, grads, states, tables = [], [], [], [], []
        work = []  # checked before any state is created or counter advanced
        for group in opt.param_groups:
            rule = self._rule(group)
            ps = [p for p in group["params"] if p.grad is not None]
            if ps:
                work.append((rule, group, ps))
            for p in ps:
                if p.grad.is_sparse:
                    raise UnsupportedInputError(
                        f"torch.optim.{rule.name}: sparse gradients are not supported by "
                        "the compiled optimizer step")
        dtype, device = check_parameters(p for _, _, ps in work for p in ps)
        for rule, group, ps in work:
            steps = self._init_state(rule, group, ps)
            by_step: dict = {}  # (usually every parameter of a group is at one step)
            rows = [by_step[s] if s in by_step else by_step.setdefault(s, rule.scalars(group, s))
                    for s in steps]
            config.append((rule.name, rule.options, len(ps)))
            params += ps
            grads += [p.grad for p in ps]
            # (opt.state is a defaultdict: torch.optim.SGD without momentum adds no entry)
            states += [[opt.state[p][k] for k in rule.state_names] if rule.state_names else []
                       for p in ps]
            tables.append(rows)
        if not params:
            return
        # (on the parameters' device: a program's CPU inputs beside a GPU's are 0-d only)
        tables = [torch.tensor(rows, dtype=dtype, device=device) for rows in tables]
        self._fn(tuple(config), params, grads, states, tables)

    def _init_state(self, rule, group, ps) -> list[float]:
        """Create missing state as torch.optim's ``_init_group`` does and advance the step
        counters (``step_t += 1``); -> each parameter's step for ``rule.scalars``."""
        opt = self.optimizer
        if not rule.counts_steps:  # SGD: no counter; step 1 while the buffer is missing
            if not rule.state_names:
                return [1.0] * len(ps)
            out = []
            for p in ps:
                state = opt.state[p]
                if state.get("momentum_buffer") is None:
                    # torch.optim stores grad.detach().clone() at the first step: the
                    # program writes it (a `where` on the scalar `first`)
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                    out.append(1.0)
                else:
                    out.append(2.0)
            return out
        fused = group.get("fused")
        steps = []
        for p in ps:
            state = opt.state[p]
            if len(state) == 0:  # torch/optim/adam.py _init_group
                state["step"] = (torch.zeros((), dtype=torch.float32, device=p.device) if fused
                                 else torch.tensor(0.0, dtype=_scalar_dtype()))
                for k in rule.state_names:
                    state[k] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif any(k not in state for k in rule.state_names):
                # amsgrad turned on after state was created: torch.optim raises KeyError
                raise UnsupportedInputError(
                    f"torch.optim.{rule.name}: opt.state lacks "
                    f"{[k for k in rule.state_names if k not in state]} (options changed "
                    "after the first step)")
            steps.append(state["step"])
        advance_step_counters(steps)
        return [s.item() for s in steps]  # adam.py: step = _get_value(step_t)


_ONE = torch.tensor(1.0, dtype=torch.float32, device="cpu")  # (not the default device)


def advance_step_counters(steps: list) -> None:
    """``state["step"] += 1`` for each 0-d counter of ``steps``, as torch/optim/adam.py's
    ``_multi_tensor_adam`` does it: on the CPU with one 0-d tensor 1.0 and ``alpha``, which
    ``_foreach_add_`` runs as one fast loop (a Python scalar 1 is wrapped into a tensor per
    counter: 50 us against 13 us for 40 counters); elsewhere with the scalar."""
    if not steps:
        return
    if all(s.is_cpu for s in steps):
        torch._foreach_add_(steps, _ONE, alpha=1.0)
    else:
        torch._foreach_add_(steps, 1)


def check_parameters(params) -> tuple[torch.dtype | None, torch.device | None]:
    """The dtype of the per-step scalar table and the one device of the parameters a rule
    updates (``jit(opt.step)``, and ``jit(step)``'s optimizers with a rule); (None, None)
    for none. The table is float32, or float64 for float64 parameters: the precision
    ATen's kernels compute a Python scalar in for the parameters' dtype (its opmath type:
    float32 for bfloat16 and float16, ``ir/optimizers.py``). Raises UnsupportedInputError
    for a dtype other than float16/bfloat16/float32/float64, mixed dtypes, or parameters on
    several devices (one program runs on one device)."""
    dtype = device = None
    for p in params:
        if dtype is None:
            dtype, device = p.dtype, p.device
        if p.dtype != dtype or p.dtype not in _PARAMETER_DTYPES:
            raise UnsupportedInputError(
                "the compiled optimizer step supports parameters of one floating dtype "
                f"(float16, bfloat16, float32 or float64); got {dtype} and {p.dtype}"
                if p.dtype != dtype else
                f"the compiled optimizer step does not support {p.dtype} parameters "
                "(float16, bfloat16, float32 or float64)")
        if p.device != device:
            raise UnsupportedInputError(
                "the compiled optimizer step runs one program on one device; the parameters "
                f"are on {device} and {p.device}")
    return (torch.float64 if dtype == torch.float64 else torch.float32
            if dtype is not None else None), device


def optimizer_step(opt) -> None:
    """The step function a custom optimizer's ``jit(opt.step)`` traces (``TrainStep``,
    train_step.py)."""
    opt.step()


def optimizer_of_step(fn) -> torch.optim.Optimizer | None:
    """The optimizer whose ``step`` ``fn`` is: a bound ``Optimizer.step``, or the wrapper an
    ``lr_scheduler`` installs as ``opt.step`` (``_wrapped_by_lr_sched``, holding the
    optimizer by weak reference); None for anything else."""
    if isinstance(getattr(fn, "__self__", None), torch.optim.Optimizer) and \
            getattr(fn, "__name__", None) == "step":
        return fn.__self__
    if getattr(fn, "_wrapped_by_lr_sched", False):
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(v, weakref.ref):
                v = v()
            if isinstance(v, torch.optim.Optimizer):
                return v
    return None


def _scalar_dtype() -> torch.dtype:
    """torch/optim/optimizer.py ``_get_scalar_dtype()``: the dtype of ``state["step"]``."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
