"""The ``torch`` executor: runs a torch op with no thunder_mlir symbol eagerly.

While tracing, the op runs on meta tensors to learn its outputs' shapes and dtypes (an op
with no meta kernel runs once on zero-filled inputs instead, and every real run is checked
against what that trial gave; inside a ``torch.autocast`` region, meta tensors would skip
autocast's casts, so the trial run on zeros (under that state) is used, or fake tensors of
the program's device where it has no kernels here), and is recorded as
``thunder.executor_call`` with ``executor = "torch"``. The partition pass leaves it between
XLA regions; the runtime calls the real torch function there, under the autocast state it
was traced in. So an unsupported op costs speed (a region boundary and an eager kernel),
never correctness.
"""

from __future__ import annotations

from typing import Any, Callable

import optree
import torch
from torch_mlir import ir

from thunder_mlir.ir.dialect import ExecutorCallOp, fits_in_runs, segment_kwargs

from thunder_mlir.frontend import autocast
from thunder_mlir.ir import dtypes
from thunder_mlir.errors import TraceError
from thunder_mlir.ir.proxy import TensorProxy


def qualified_name(func: Callable) -> str:
    """A readable dotted name for a torch callable (``torch.Tensor.cumsum``, ``torch.cumsum``)."""
    q = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if "<locals>" in q:  # a function made by a factory (F.boolean_dispatch): its own name
        q = getattr(func, "__name__", q)
    q = q.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "")
    if q.startswith("Tensor."):
        return "torch." + q
    mod = getattr(func, "__module__", None) or "torch"
    # builtins of torch's C submodules: torch._C._special.special_i0 -> torch.special.i0
    for c_mod, public in (("torch._C._special", "special"), ("torch._C._linalg", "linalg"),
                          ("torch._C._fft", "fft"), ("torch._C._nn", "nn.functional")):
        if mod == c_mod:
            prefix = public.split(".")[0] + "_"
            return f"torch.{public}.{q[len(prefix):] if q.startswith(prefix) else q}"
    if mod.startswith("torch._C"):
        mod = "torch"
    return f"{mod}.{q}" if not q.startswith(mod) else q


def _is_inplace(func: Callable, args) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__") and args and type(args[0]) is TensorProxy


def emit_fallback(trace, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Record ``func(*args, **kwargs)`` as a torch executor call; return output proxies."""
    name = qualified_name(func)
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    positions = [i for i, leaf in enumerate(leaves) if type(leaf) is TensorProxy]
    proxies = [leaves[i] for i in positions]
    meta_leaves = list(leaves)
    for i in positions:
        meta_leaves[i] = leaves[i].meta
    m_args, m_kwargs = optree.tree_unflatten(spec, meta_leaves)
    trial = False  # metadata from a trial run or a documented rule: checked every real run
    pin = autocast.pin_state(trace.device)  # the autocast state the op runs under
    try:
        if pin is not None and pin[1]:
            # in an autocast region: meta tensors skip autocast's casts and fake tensors the
            # ones a kernel makes inside (linalg.pinv's matmul); real kernels run on zeros,
            # else fake tensors, and every real run is checked against what they gave
            trial = True
            meta_out = _trial_run(func, leaves, positions, spec, trace.device) \
                if autocast.device_exists(trace.device) else None
            if meta_out is None:
                meta_out = autocast.fake_metadata(func, args, kwargs, trace.device)
        else:
            with torch._C.DisableTorchFunction(), torch.device("meta"):
                meta_out = func(*m_args, **m_kwargs)
    except Exception as e:
        meta_out = _documented_metadata(func, m_args, m_kwargs)
        if meta_out is None:
            meta_out = _trial_run(func, leaves, positions, spec, trace.device)
        if meta_out is None:
            from thunder_mlir.frontend.symbols import SYMBOLS
            from thunder_mlir.frontend.locations import describe_frame, user_frame

            why = (f"its symbol {SYMBOLS[func].name} declined this call" if func in SYMBOLS
                   else "has no thunder_mlir symbol")
            raise TraceError(
                f"{describe_frame(user_frame())}\n  {name} {why}, and the "
                f"torch fallback cannot run it because its output metadata is not computable "
                f"on meta tensors ({type(e).__name__}: {e}) nor by a trial run on zeros. "
                "Data-dependent output shapes (nonzero, masked_select, unique) and Python "
                "results (allclose, equal) cannot be compiled; compute them outside the "
                "jitted function.") from None
        trial = True
    out_leaves, out_spec = optree.tree_flatten(meta_out, none_is_leaf=True)
    out_pos = [i for i, leaf in enumerate(out_leaves) if isinstance(leaf, torch.Tensor)]
    inplace = _is_inplace(func, args)
    if inplace and getattr(args[0], "_alias_root", None) is not None:
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  in-place {name} on a tensor that shares memory "
            "with a view (or is one): the compiled program is functional and would not update "
            "the aliases. Use the out-of-place form.")
    if inplace:
        out_leaves, out_spec, out_pos = [args[0].meta], optree.tree_structure(0), [0]
    result_types = [dtypes.tensor_type(out_leaves[i].shape, out_leaves[i].dtype) for i in out_pos]
    operand_types = [p.value.type for p in proxies]
    in_order, out_order = type_order(operand_types), type_order(result_types)
    if not fits_in_runs([operand_types[i] for i in in_order]) or \
            not fits_in_runs([result_types[i] for i in out_order]):
        raise TraceError(f"{name}: more than 8 distinct tensor types among its tensor "
                         "arguments or among its outputs, the most one executor call holds")

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        vals = list(leaves)
        for i, t in zip(positions, tensors):
            vals[i] = t
        if inplace:
            vals[positions[0]] = tensors[0].clone()
        a, k = optree.tree_unflatten(spec, vals)
        out = autocast.run_pinned(pin, func, a, k)
        if inplace:
            return [vals[positions[0]]]
        flat = optree.tree_leaves(out, none_is_leaf=True)
        outs = [x for x in flat if isinstance(x, torch.Tensor)]
        if trial:
            _check_trial_metadata(name, outs, traced)
        return outs

    traced = [(tuple(out_leaves[i].shape), out_leaves[i].dtype) for i in out_pos]
    differentiable = None if inplace or not any(p.requires_grad for p in proxies) else \
        _output_differentiability(
        func, leaves, positions, spec, trace.device, meta=not trial)
    impl = permuted(run, in_order, out_order)
    if not inplace:  # the generators its backward must replay (see with_rng_state)
        impl.generators = _generators(leaves, trace.device)
    key = trace.add_impl(impl)
    with trace.ip:
        op = ExecutorCallOp(**segment_kwargs("in", [proxies[i].value for i in in_order]),
                            **segment_kwargs("out", [result_types[i] for i in out_order],
                                             type_of=lambda t: t),
                            executor=ir.StringAttr.get("torch"), callee=ir.StringAttr.get(name),
                            impl=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key))
    if differentiable is not None and len(differentiable) == len(result_types):
        op.operation.attributes[DIFFERENTIABLE] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(differentiable[i]) for i in out_order])  # per op result
    trace.fallbacks.append(name)
    results = unpermute(list(op.operation.results), out_order)
    if inplace:
        args[0].value = results[0]
        if getattr(args[0], "_has_views", False):  # its views see the update, as in eager
            from thunder_mlir.frontend.aliasing import refresh_views

            refresh_views(args[0])
        for i, p in enumerate(trace.inputs):
            if p is args[0]:  # an input: written back to the caller's tensor after the run
                trace.mutated_inputs[i] = p
        return args[0]
    for k, i in enumerate(out_pos):
        m = out_leaves[i]
        out_leaves[i] = TensorProxy(results[k], tuple(m.shape), m.dtype, trace.device)
    return optree.tree_unflatten(out_spec, out_leaves)


# Attribute of a torch executor call: one bool per result, whether torch.autograd makes it
# differentiable (linalg.lu's permutation P is a float tensor that is not). The grad pass
# gives the others no cotangent, and jit marks them non-differentiable (requires_grad False,
# as in eager).
DIFFERENTIABLE = "thunder.differentiable"


def _output_differentiability(func: Callable, leaves: list, positions: list[int], spec,
                              device, meta: bool) -> list[bool] | None:
    """For each tensor output of ``func``, whether torch.autograd makes it differentiable:
    ``requires_grad`` of the output when the floating-point inputs require grad, from a run
    on meta tensors (or, for an op without meta kernels, on zeros, under ``fork_rng``).
    An op refusing grad for some input (batch_norm's running statistics) is probed with
    one floating-point input requiring grad at a time. None when no probe runs (the
    caller keeps the dtype rule: floating-point outputs are differentiable)."""
    floats = [i for i in positions
              if leaves[i].tdtype.is_floating_point or leaves[i].tdtype.is_complex]
    if not floats:
        return None

    def probe(wrt: list[int]) -> list[bool] | None:
        try:
            with torch._C.DisableTorchFunction(), torch.enable_grad(), \
                    torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                vals = list(leaves)
                for i in positions:
                    p = leaves[i]
                    vals[i] = torch.zeros(p.tshape, dtype=p.tdtype,
                                          device="meta" if meta else device)
                    vals[i].requires_grad_(i in wrt)
                a, k = optree.tree_unflatten(spec, vals)
                if meta:
                    with torch.device("meta"):
                        out = func(*a, **k)
                else:
                    out = func(*a, **k)
        except Exception:  # noqa: BLE001 - another probe, or the dtype rule
            return None
        return [x.requires_grad for x in optree.tree_leaves(out, none_is_leaf=True)
                if isinstance(x, torch.Tensor)]

    found = probe(floats)
    if found is not None:
        return found
    for i in floats:
        one = probe([i])
        if one is not None:
            found = one if found is None else [a or b for a, b in zip(found, one)]
    return found


def _ctc_loss_metadata(log_probs, targets, input_lengths, target_lengths, blank=0,
                       reduction="mean", zero_infinity=False):
    """``F.ctc_loss``: one loss per sequence (reduction "none" of a batch), else a scalar,
    in ``log_probs``' dtype (torch.nn.CTCLoss documentation). Its lengths as tensors that
    must sum to a 1-d ``targets``' size defeat the trial run on zeros."""
    batched = log_probs.dim() == 3
    shape = (log_probs.shape[1],) if reduction == "none" and batched else ()
    return torch.empty(shape, dtype=log_probs.dtype, device="meta")


# Ops with no meta kernel whose output metadata the documentation gives (on meta tensors;
# checked against every real run, like the trial run's).
_DOCUMENTED_METADATA: dict[Callable, Callable] = {
    torch.nn.functional.ctc_loss: _ctc_loss_metadata,
}


def _documented_metadata(func: Callable, m_args, m_kwargs):
    rule = _DOCUMENTED_METADATA.get(func)
    if rule is None:
        return None
    try:
        return rule(*m_args, **m_kwargs)
    except Exception:  # noqa: BLE001 - arguments the rule does not know: trial run instead
        return None


def _trial_run(func: Callable, leaves: list, positions: list[int], spec, device):
    """Output metadata of an op with no meta kernel (geqrf, lstsq, histogram, istft, ...):
    the op run once on zero-filled (then one-filled) tensors of the inputs' shapes and dtypes,
    under ``fork_rng`` so that torch's generator is untouched. Returns meta tensors shaped
    like the outputs, or None when neither run works or the result holds anything but
    tensors (a Python value computed from zeros would be a wrong constant). An output shape
    that depends on the values (nonzero) is caught at run time by ``_check_trial_metadata``.
    """
    for fill in (0, 1):
        vals = list(leaves)
        for i in positions:
            p = leaves[i]
            vals[i] = torch.full(p.tshape, fill, dtype=p.tdtype, device=device)
        a, k = optree.tree_unflatten(spec, vals)
        try:
            with torch._C.DisableTorchFunction(), torch.no_grad(), torch.random.fork_rng(
                    devices=[device] if device.type == "cuda" else []):
                out = func(*a, **k)
        except Exception:  # noqa: BLE001 - the caller reports the meta failure
            continue
        flat, out_spec = optree.tree_flatten(out, none_is_leaf=True)
        if not all(x is None or isinstance(x, torch.Tensor) for x in flat):
            return None
        return optree.tree_unflatten(out_spec, [
            x if x is None else torch.empty(x.shape, dtype=x.dtype, device="meta")
            for x in flat])
    return None


def _check_trial_metadata(name: str, outs: list[torch.Tensor], traced: list) -> None:
    """Raise RuntimeError if a trial-run op's real outputs differ from its traced metadata
    (its output shape depends on the input values, which a compiled program cannot
    follow)."""
    got = [(tuple(t.shape), t.dtype) for t in outs]
    if got != traced:
        raise RuntimeError(
            f"{name}: its outputs {got} differ from the metadata it was traced with "
            f"{traced} (learned by a trial run on zeros, as the op has no meta kernel): its "
            "output shape depends on the input values, which a compiled program cannot "
            "follow. Compute it outside the jitted function.")


# ------------------------------------------------------------ random ops and the backward
# The backward of a fallback op re-runs it under torch.autograd. An op that draws random
# numbers (fractional_max_pool2d's pooling regions, a dropout inside a torch function, a
# draw from a user's Generator) would draw again there: another draw than the forward's,
# so a wrong gradient, and the generator advanced twice. The grad pass therefore makes the
# forward call also return the state of the generators it may draw from, taken just
# before it runs (``with_rng_state``), saves it as a residual, and the backward re-runs
# the op with that state restored (``replaying_rng_state``), leaving the generators as
# they were.


def _generators(leaves: list, device) -> list[torch.Generator]:
    """The generators a call may draw from: the ``torch.Generator`` arguments it was given,
    else the default generators of the CPU and, for a CUDA program, of its device."""
    given = []
    for x in leaves:
        if isinstance(x, torch.Generator) and all(x is not g for g in given):
            given.append(x)
    if given:
        return given
    gens = [torch.default_generator]
    if device.type == "cuda" and torch.cuda.is_available():  # (traced for a CUDA device
        # on a machine without one, autocast's trace-level checks: the program never runs)
        gens.append(torch.cuda.default_generators[
            device.index if device.index is not None else torch.cuda.current_device()])
    return gens


def rng_state_size(generators: list[torch.Generator]) -> int:
    """Bytes of the concatenated states of ``generators`` (a uint8 vector)."""
    return sum(g.get_state().numel() for g in generators)


def with_rng_state(run: Callable, generators: list[torch.Generator]) -> Callable:
    """``run`` that also returns, last, the concatenated states (uint8) of ``generators``
    as they were before it ran."""
    def forward(*tensors: torch.Tensor) -> list[torch.Tensor]:
        state = torch.cat([g.get_state() for g in generators])
        return list(run(*tensors)) + [state]
    return forward


def replaying_rng_state(generators: list[torch.Generator], state: torch.Tensor, fn: Callable):
    """``fn()`` with ``generators`` set to ``state`` (from ``with_rng_state``), restoring
    their current states afterwards."""
    saved = [g.get_state() for g in generators]
    try:
        offset = 0
        for g, old in zip(generators, saved):
            n = old.numel()
            g.set_state(state[offset:offset + n].cpu().clone())
            offset += n
        return fn()
    finally:
        for g, old in zip(generators, saved):
            g.set_state(old)


# ------------------------------------------------------------------- type runs
def type_order(types: list) -> list[int]:
    """Positions of ``types`` reordered so that equal types are adjacent (types in order of
    first appearance, positions stable within a type): an executor call's operands and
    results are stored as runs of equal type, at most ``SEGMENTS`` of them, so an op with
    few distinct types fits however its arguments interleave them (``torch.lstm``'s
    weights and biases, attention's projections)."""
    first: dict[str, int] = {}
    for i, t in enumerate(types):
        first.setdefault(str(t), i)
    return sorted(range(len(types)), key=lambda i: first[str(types[i])])


def permuted(fn: Callable, in_order: list[int], out_order: list[int]) -> Callable:
    """``fn`` (inputs and outputs in their own order) as an implementation taking its
    inputs in ``in_order`` and returning its outputs in ``out_order`` (see
    ``type_order``)."""
    if in_order == sorted(in_order) and out_order == sorted(out_order):
        return fn

    def run(*tensors):
        args = [None] * len(in_order)
        for k, i in enumerate(in_order):
            args[i] = tensors[k]
        outs = fn(*args)
        return [outs[i] for i in out_order]
    return run


def unpermute(values: list, order: list[int]) -> list:
    """Values stored in ``order`` back in their own order."""
    out = [None] * len(order)
    for k, i in enumerate(order):
        out[i] = values[k]
    return out
