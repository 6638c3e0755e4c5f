"""Programs specialized on the values of tensors: computing the values while compiling, and
the run-time side of value guards (frontend/value_guards.py).

While compiling, a Python value of tensors the trace needs (``bool(t)``, ``t.item()``, the
output size of ``nonzero``) is computed by ``prefix_value``: the trace so far (the program
prefix, returning the tensors the value is computed from) is compiled like any program
(decompose, partition, lower-to-stablehlo, XLA) and run on this call's real inputs.

At run time, a value guard that sees another value raises ``ValueGuardFailed``;
``guard_failed`` then runs the entry of the same key traced with that value, or compiles
one (a re-trace knowing the new value), and keeps every entry: a program whose branch flips
between two values compiles twice and then only hits. Past the function's recompile limit
of distinct values at one guard, a ``RecompileWarning`` names the guard's line.
"""

from __future__ import annotations

import warnings

import torch

from thunder_mlir.errors import DataDependentControlFlowError, RecompileWarning
from thunder_mlir.frontend.value_guards import ValueGuardFailed, ValueNeeded, same_value
from thunder_mlir.ir.context import COMPILE_LOCK

MAX_ATTEMPTS = 4  # compilations one call may make after failed value guards


def prefix_value(need: ValueNeeded, ext, tensors: list[torch.Tensor]):
    """The value ``need`` asks for at this call: its prefix trace (``need.trace``, whose
    function returns ``need.tensors``) compiled and run on the call's input ``tensors``
    (torch's generators left untouched, no autograd), then ``need.compute`` of its
    results. ``ext``: the compilation's executor state (executors/extend.py
    ``compiling``). Raises eager's error where ``need.compute`` raises one,
    ValueGuardFailed where a size the trace guessed (``trace.guessed``) is not one its
    symbols stand for, and
    DataDependentControlFlowError where an earlier value of the prefix differs between two
    runs on the same inputs (a value computed from random numbers)."""
    from thunder_mlir.runtime.plan import build_plan
    from thunder_mlir.transforms.registry import PassContext, parse_element

    trace = need.trace
    # a value of the inputs themselves (``dim=torch.tensor(1)``, frontend/scalar_args.py;
    # ``n.item()`` of an input n): computed from them, without compiling a prefix
    args = list(trace.entry.arguments)[:len(tensors)]  # (then the seed, if any)
    if need.tensors and all(p.value in args for p in need.tensors):
        with torch.no_grad():
            return need.compute(*[tensors[args.index(p.value)].detach()
                                  for p in need.tensors])
    ctx = PassContext(compile_state=ext, device=trace.device)
    for element in ("decompose", "partition", "lower-to-stablehlo"):
        parse_element(element)(trace.module, ctx)
    plan, _ = build_plan(trace.module, trace.device)
    cuda = [trace.device] if trace.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            outs = plan.run(tensors)
    except ValueGuardFailed as e:
        if e.index in (trace.guessed or ()):  # a guessed unbacked size failing a guard:
            raise                             # the caller traces again with the real one
        raise DataDependentControlFlowError(
            f"{need.where}\n  {need.what}: an earlier value the program depends on "
            f"({e}) differs between two runs of the program on the same inputs (computed "
            "from random numbers?); compute it outside the jitted function") from None
    return need.compute(*outs)


def accepts(entry, j: int, observed) -> bool:
    """Whether ``entry``'s value guard ``j`` passes for ``observed``: the value it was
    traced with, or, for a data-dependent size traced as unbacked size symbols, any size
    they stand for."""
    test = entry.value_accepts.get(j)
    return test(observed) if test is not None else same_value(entry.value_path[j], observed)


def describe_value(value) -> str:
    """A traced value for messages: a data-dependent op's output shapes as shapes."""
    if type(value) is tuple and len(value) == 2 and type(value[1]) is tuple and \
            all(m is None or (type(m) is tuple and len(m) == 2) for m in value[1]):
        return ", ".join("None" if m is None else f"shape {m[0]}" for m in value[1])
    return repr(value)


def _execute(entry, tensors):
    if entry.backward_plan is not None:
        from thunder_mlir.runtime.autograd import run_with_autograd

        return run_with_autograd(entry, tensors)
    return entry.plan.run(tensors)


def guard_failed(fn, entry, failed: ValueGuardFailed, leaves, spec, key, dims, nodes,
                 tensors, args, kwargs, state):
    """After ``entry``'s value guard ``failed.index`` saw ``failed.observed`` at a call
    of ``fn`` (a ThunderFunction; the other arguments are ``ThunderFunction._run``'s,
    ``args``/``kwargs`` the call's own, wrapped for ``fn`` by ``_compile_miss`` alone):
    the (entry, plan outputs) of this call, from an entry of the same key traced with that
    value, else from a new compilation. Counts the miss at the guard in
    ``fn.cache.value_guard_misses`` and warns past the recompile limit. Each run is
    checked by all its guards, so a result comes only from an entry whose every traced
    value held at this call."""
    cache = fn.cache
    cache.hits = max(cache.hits - 1, 0)  # (counted by the lookup): a miss, or a hit below
    tried = {id(entry)}
    for _ in range(MAX_ATTEMPTS):
        j, observed = failed.index, failed.observed
        what, where = entry.value_sites[j]
        site = f"{what} at {where}"
        cache.value_guard_misses[site] = cache.value_guard_misses.get(site, 0) + 1
        group = entry.value_group
        prefix = entry.value_path[:j]
        candidates = [e for e in reversed(group) if id(e) not in tried
                      and len(e.value_path) > j and e.value_sites[:j + 1] ==
                      entry.value_sites[:j + 1]
                      and all(same_value(a, b) for a, b in zip(e.value_path[:j], prefix))
                      and accepts(e, j, observed)]
        if candidates:
            new = candidates[0]
            cache.hits += 1
        else:
            new = _compile(fn, entry, j, observed, leaves, spec, key, dims, nodes, args,
                           kwargs, state, site)
        tried.add(id(new))
        try:
            outs = _execute(new, tensors)
        except ValueGuardFailed as again:
            entry, failed = new, again
        else:
            cache.promote(key, new)
            return new, outs
    raise DataDependentControlFlowError(
        f"{entry.value_sites[failed.index][1]}\n  {entry.value_sites[failed.index][0]} "
        f"differed from the value it was traced with {MAX_ATTEMPTS} times in one call "
        "(computed from random numbers?); compute it outside the jitted function")


def _compile(fn, entry, j: int, observed, leaves, spec, key, dims, nodes, args, kwargs,
             state, site: str):
    """A new entry for this call, traced knowing value ``j`` is ``observed`` (and, where
    ``j`` is 0, nothing else: later values are computed by their prefixes; an earlier
    guard may not have run yet when guard ``j`` failed, so only guard 0's value is sure),
    added to ``entry``'s group of the same key."""
    cache = fn.cache
    known = [observed] if j == 0 and observed is not None else []
    with COMPILE_LOCK:
        # (no guessed sizes: a guessed one may be what failed, and would fail again)
        new = fn._compile_miss(args, kwargs, leaves, spec, key, dims, nodes, state=state,
                               known_values=known, guess_sizes=False)
    if cache.reasons:
        cache.reasons[-1] = (f"a value guard failed: {site} was "
                             f"{describe_value(entry.value_path[j])} when traced, now "
                             f"{describe_value(observed)}")
    group = entry.value_group
    if new.value_group is not group:
        if new.value_group:
            new.value_group.remove(new)
        group.append(new)
        new.value_group = group
    limit = cache.recompile_limit
    while len(group) > max(limit, 2):  # the oldest other entry goes
        group.pop(next(i for i, e in enumerate(group) if e is not new))
    if cache.value_guard_misses.get(site, 0) == limit + 1:
        from thunder_mlir.frontend.locations import user_stacklevel

        sizes = what_changes(entry.value_sites[j][0])
        warnings.warn(
            f"{cache.name}: {site} has changed {limit + 1} times since it was traced "
            f"(recompile limit {limit}); {sizes}each new value re-traces and compiles the "
            "program. For a branch on tensor values use torch.cond, or compute with tensor "
            "ops (torch.where, masking) instead of Python values.",
            RecompileWarning, stacklevel=user_stacklevel())
    return new


def what_changes(what: str) -> str:
    """The warning's note for a data-dependent output size."""
    return "its output size depends on the input values: " \
        if what.startswith("the output size of") else ""
