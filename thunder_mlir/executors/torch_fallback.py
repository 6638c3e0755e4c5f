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

from thunder_mlir.dialects import ExecutorCallOp, fits_in_runs, segment_kwargs

from .. import autocast, dtypes
from ..errors import TraceError
from ..proxy import TensorProxy


def qualified_name(func: Callable) -> str:
    """A readable dotted name for a torch callable (``torch.Tensor.cumsum``, ``torch.cumsum``)."""
    q = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
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
    trial = False  # metadata from a trial run: checked against every real run
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
        meta_out = _trial_run(func, leaves, positions, spec, trace.device)
        if meta_out is None:
            from ..symbols import SYMBOLS
            from ..tracing import describe_frame, user_frame

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
    if inplace and (getattr(args[0], "_alias_root", None) is not None
                    or getattr(args[0], "_has_views", False)):
        from ..tracing import describe_frame, user_frame

        raise NotImplementedError(
            f"{describe_frame(user_frame())}\n  in-place {name} on a tensor that shares memory "
            "with a view (or is one): the compiled program is functional and would not update "
            "the aliases. Use the out-of-place form.")
    if inplace:
        out_leaves, out_spec, out_pos = [args[0].meta], optree.tree_structure(0), [0]
    result_types = [dtypes.tensor_type(out_leaves[i].shape, out_leaves[i].dtype) for i in out_pos]
    operand_types = [p.value.type for p in proxies]
    if not fits_in_runs(result_types) or not fits_in_runs(operand_types):
        raise TraceError(f"{name}: too many distinct tensor types for one executor call")

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
    key = trace.add_impl(run)
    with trace.ip:
        op = ExecutorCallOp(**segment_kwargs("in", [p.value for p in proxies]),
                            **segment_kwargs("out", result_types, type_of=lambda t: t),
                            executor=ir.StringAttr.get("torch"), callee=ir.StringAttr.get(name),
                            impl=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key))
    trace.fallbacks.append(name)
    results = list(op.operation.results)
    if inplace:
        args[0].value = results[0]
        for i, p in enumerate(trace.inputs):
            if p is args[0]:  # an input: written back to the caller's tensor after the run
                trace.mutated_inputs[i] = p
        return args[0]
    for k, i in enumerate(out_pos):
        m = out_leaves[i]
        out_leaves[i] = TensorProxy(results[k], tuple(m.shape), m.dtype, trace.device)
    return optree.tree_unflatten(out_spec, out_leaves)


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
