"""A jitted function (``ThunderFunction``, what ``thunder_mlir.jit`` returns for a function):
trace, transform, lower, compile, cache and run.

Pipeline (design.md): trace -> [initial] -> decompose, merge-dots -> [prims] -> partition -> [plan]
-> lower-to-stablehlo -> [stablehlo] -> XLA. Each stage's module text is kept for
``last_traces``. Entries are cached by ``cache.FunctionCache`` (hashed key of input
metadata, Python values, grad mode, default dtype and guards).
"""

from __future__ import annotations

import functools
import inspect
import operator
import time
import types
from typing import Any, Callable

import optree
import torch
import torch.utils._pytree as torch_pytree
from torch_mlir import ir

from thunder_mlir.frontend import aliasing, compat, cpu_scalars, differentiability, \
    functionalization, pytrees, region_reads, runtime_checks
from thunder_mlir.ir import dtypes
from thunder_mlir.cache import CacheEntry, FunctionCache
from thunder_mlir.ir.context import COMPILE_LOCK
from thunder_mlir.error_reporting import argument_paths as _paths, boundary_exception, \
    check_tensor_inputs, unsupported_tensor
from thunder_mlir import dynamic as _dynamic, value_specialization
from thunder_mlir.dynamic import DynamicPolicy
from thunder_mlir.errors import DataDependentControlFlowError, DynamicShapeFallback, \
    TraceError, UnsupportedError, UnsupportedInputError
from thunder_mlir.ir import symbolic
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.runtime.write_back import check_separate, write_back
from thunder_mlir.frontend.sharp_edges import SharpEdgeMonitor, freeze_containers
from thunder_mlir.frontend.value_guards import ValueGuardFailed, ValueNeeded
from thunder_mlir.frontend.tracing import Trace, _local as _tracing_state

_SCALARS = (bool, int, float, complex, str, type(None), torch.dtype, torch.device,
            type(Ellipsis), slice, torch.Size,  # torch.Size: an optree leaf (tuple subclass)
            type)  # classes (an input object's attribute holding one): keyed by identity
# Functions are accepted inputs (e.g. the branches handed to torch.cond), specialized on
# and guarded by identity: a function hashes and compares by identity, so the cache key
# holds it as it holds a Python number. The values their code reads from globals and
# closures are guarded by the sharp-edge monitor like the program's own. Bound methods and
# other callable objects are refused: their state (self) would not be guarded.
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
              types.WrapperDescriptorType)
_ACCEPTED = _SCALARS + _FUNCTIONS
CACHE_OPTIONS = ("constant values", "no caching")
WRITE_BACKS_ATTR = "thunder.num_write_backs"  # trailing results copied back into inputs


class Stage:
    """One stage of a compilation: ``name``, MLIR ``text``, ``seconds`` it took and
    ``pipeline``: the pass pipeline that makes ``text`` from the previous stage's text
    (``builtin.module(grad{remat=true})``, the syntax of ``thunder-opt --pass-pipeline``;
    None for the ``initial`` trace and the ``xla-compile`` step, which are not passes)."""

    __slots__ = ("name", "text", "seconds", "pipeline")

    def __init__(self, name: str, text: str, seconds: float, pipeline: str | None = None):
        self.name, self.text, self.seconds = name, text, seconds
        self.pipeline = pipeline

    def __str__(self) -> str:
        return f"// ----- {self.name} ({self.seconds * 1e3:.1f} ms)\n{self.text}"

    def __repr__(self) -> str:
        return (f"Stage({self.name!r}, {len(self.text)} chars, {self.seconds * 1e3:.1f} ms, "
                f"pipeline={self.pipeline!r})")


def _training_call(args: tuple, kwargs: dict) -> bool:
    """Whether a call runs as a training step (``train_step.TrainStep``) instead of the
    functional path: a ``torch.optim`` optimizer or an ``nn.Module`` among the top-level
    positional or keyword arguments. A module argument (plain, or a ``thunder_mlir.jit``
    module: TrainStep uses its original) makes one even without an optimizer, e.g. a
    micro-step calling ``loss.backward()`` before an ``opt.step()`` outside: its
    parameters and buffers become program inputs and its parameters' ``.grad`` are
    written, which the functional path, accepting no modules, cannot do. A module or
    optimizer nested in a list or dict does not count (the functional path refuses it)."""
    return any(isinstance(a, _TRAINING_ARGUMENTS) for a in (*args, *kwargs.values()))


_TRAINING_ARGUMENTS = (torch.optim.Optimizer, torch.nn.Module)


def _unsupported(x, path: str):
    if isinstance(x, torch.Tensor) and unsupported_tensor(x) is not None:
        raise UnsupportedInputError(f"the input at {path} is {unsupported_tensor(x)}.")
    raise UnsupportedInputError(
        f"thunder_mlir.jit cannot accept an input of type {type(x).__module__}."
        f"{type(x).__qualname__} (at {path}). Accepted: tensors, numbers, strings, dtypes, "
        f"devices, None, slices, Ellipsis, torch.Size, classes and functions (by identity), "
        f"and tuples/lists/dicts, registered pytree nodes and objects whose state is their "
        f"__dict__ of those. Unpack the object into accepted values before the call.")


def _metas(leaves) -> tuple:
    """Per-leaf cache-key metadata; raises UnsupportedInputError for other types."""
    out = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if type(x) is not torch.Tensor and not isinstance(x, torch.nn.Parameter):
                return None  # a subclass: its methods would not run in the compiled program
            out.append(("tensor", x.shape, x.dtype, _CPU if x.is_cpu else x.device,
                        x.requires_grad))
        elif isinstance(x, _ACCEPTED) or type(x) is ThunderFunction:
            # slices are unhashable before Python 3.12: key them by their fields
            out.append((type(x), (x.start, x.stop, x.step) if type(x) is slice else x))
        else:
            return None
    return tuple(out)


# exact types whose key metadata is (type, value): ``_metas``'s rule, without its tests
_PLAIN = frozenset({bool, int, float, complex, str, type(None), torch.dtype, torch.device,
                    type(Ellipsis), torch.Size, type})
_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter
# a CPU tensor's device in key metadata: equal to ``t.device``, read through ``t.is_cpu``
# (~70 ns, against ~150 ns for building a torch.device per tensor) and compared by identity
_CPU = torch.device("cpu")


def _metas_tensors(leaves) -> tuple:
    """(``_metas(leaves)``, the tensor leaves), or (None, None) where ``_metas`` is None;
    the common leaf types take a shortcut (the cache-hit path)."""
    metas, tensors = [], []
    meta, tensor = metas.append, tensors.append
    for x in leaves:
        t = type(x)
        if t is _TENSOR or t is _PARAMETER:
            meta(("tensor", x.shape, x.dtype, _CPU if x.is_cpu else x.device,
                  x.requires_grad))
            tensor(x)
        elif t in _PLAIN:
            meta((t, x))
        else:
            m = _metas((x,))
            if m is None:
                return None, None
            metas.append(m[0])
            if isinstance(x, torch.Tensor):
                tensors.append(x)
    return tuple(metas), tensors


def _flatten_inputs(args: tuple, kwargs: dict) -> tuple:
    """(leaves, tree structure, input objects, key metadata, tensor leaves) of a call's
    arguments (frontend/pytrees.py); raises UnsupportedInputError naming an input that is
    not accepted."""
    leaves, spec, nodes = pytrees.flatten_with_objects((args, kwargs))
    metas, tensors = _metas_tensors(leaves)
    # first sight of a pytree node class (an object, a torch pytree node)
    while metas is None and pytrees.register_types(leaves):
        leaves, spec, nodes = pytrees.flatten_with_objects((args, kwargs))
        metas, tensors = _metas_tensors(leaves)
    if metas is None:
        paths = _paths(args, kwargs)
        bad = next(i for i, x in enumerate(leaves) if _metas([x]) is None)
        _unsupported(leaves[bad], paths[bad])
    return leaves, spec, nodes, metas, tensors


class ThunderFunction:
    """The callable ``jit`` returns: same signature as ``fn``, compiled per input metadata.

    Attributes: ``fn`` (the original), ``cache`` (its FunctionCache), ``last`` (the
    CacheEntry of the last call).
    """

    def __init__(self, fn: Callable, *, sharp_edges: str = "warn",
                 cache: str = "constant values", recompile_limit: int = 8,
                 executors=None, dynamic: bool | None = None, _joint: str | None = None):
        from thunder_mlir.executors.extend import OperatorExecutor

        self.joint = _joint  # "grad" | "value_and_grad": the gradient program (grad_api.py)
        # () -> [(object, description)]: objects whose attribute reads the trace guards
        # (a ThunderModule's module tree; guards.py)
        self.watch: Callable[[], list] | None = None
        self.executors = tuple(executors or ())
        if not all(isinstance(e, OperatorExecutor) for e in self.executors):
            raise TypeError("executors must be thunder_mlir.extend.OperatorExecutor objects")
        if cache not in CACHE_OPTIONS:
            raise ValueError(f"cache must be one of {CACHE_OPTIONS}, got {cache!r}")
        SharpEdgeMonitor(fn, sharp_edges)  # validates the policy now, not at first call
        self.fn = fn
        self.sharp_edges = sharp_edges
        name = getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None),
                                                            "__qualname__", repr(fn))
        self.cache = FunctionCache(name, recompile_limit, enabled=cache == "constant values")
        self.dynamic = DynamicPolicy(dynamic)  # dynamic shapes (dynamic.py)
        # why data-dependent sizes are specialized on values, not unbacked size symbols
        # (value_guards.py), once a program could not keep them symbolic; dynamic=False
        # specializes them always
        self.unbacked_off: str | None = None if dynamic is not False else "dynamic=False"
        if _joint is not None:  # a gradient program: no gradients through symbolic sizes
            self.dynamic.disabled = _dynamic.GRAD_REASON
        self.last: CacheEntry | None = None
        # () -> a TrainStep (train_step.py, set by jit): what a call with a torch.optim
        # optimizer or nn.Module argument runs, made at the first such call (``_train``)
        self.training_step: Callable | None = None
        self._train = None
        # keep the tensors the program writes in XLA's memory, donated to each run
        # (runtime/resident.py); set by a TrainStep for its program
        self.donate_writes = False
        functools.update_wrapper(self, fn)

    def signature_target(self) -> Callable | None:
        """The user's callable whose signature a call must fit (error messages)."""
        return None if isinstance(self.fn, functools.partial) else self.fn

    def __call__(self, *args, **kwargs):
        # error_boundary's handler, inlined: a wrapper frame would cost ~0.4 us of the
        # ~16 us cache-hit call (benchmarks/overhead.py)
        try:
            if getattr(_tracing_state, "trace", None) is not None:
                # called while another jitted function is traced: inlined, i.e. traced
                # reentrantly into the caller's program (whose monitor records this
                # function's guards), not run as an opaque compiled call
                return self.fn(*args, **kwargs)
            # Fast path: only tensor positional arguments (the common case) need no pytree
            # flattening; their key is the argument count instead of a tree spec.
            if not kwargs and all(type(a) is torch.Tensor for a in args):
                leaves, spec, nodes, tensors = args, len(args), None, args
                metas, _ = _metas_tensors(args)
            else:
                if self.training_step is not None and _training_call(args, kwargs):
                    # a whole training step (train_step.py)
                    if self._train is None:
                        self._train = self.training_step()
                    return self._train(*args, **kwargs)
                leaves, spec, nodes, metas, tensors = _flatten_inputs(args, kwargs)
            return self._run(leaves, spec, nodes, metas, tensors, args, kwargs)
        except Exception as e:
            shown = boundary_exception(e, self, args, kwargs)
            if shown is e:
                raise  # a bare raise adds no frame: the trimmed traceback stays as set
            tb = shown.__traceback__
            try:
                raise shown  # noqa: B904 - the cause is set (or hidden) by report()
            except Exception:
                shown.__traceback__ = tb  # drop this frame, added by the raise
                raise

    def call_module(self, state, current: tuple, args: tuple, kwargs: dict):
        """``self(flags, params, args, kwargs)`` for a module's function (``fn`` takes the
        training flags and the {qualified name: parameter or buffer} dict of
        ``state``, a ``module._ModuleState``, then the call's arguments), without building
        that dict or flattening it on a cache hit: ``current`` is ``state.current()``, the
        flags and the parameters in the order optree flattens the dict in, their tree
        structure ``state.token``. The key holds the same metadata, leaf by leaf, as the
        general path's; its tree-structure part is (``state.token``, the arguments'
        structure)."""
        if getattr(_tracing_state, "trace", None) is not None:  # inlined (__call__)
            flags, params = state.read()
            return self.fn(flags, params, args, kwargs)
        try:
            flags, values = current
            cached_flags, flag_metas = state.flag_metas
            # the flags' metadata of the last call, if each flag is the same object (True
            # and 1 are equal, but key apart)
            if len(flags) != len(cached_flags) or not all(map(operator.is_, flags,
                                                              cached_flags)):
                flag_metas = _metas(flags)
                state.flag_metas = (flags, flag_metas)
            if not kwargs and all(type(a) is torch.Tensor for a in args):
                rest, spec, nodes, rest_tensors = args, len(args), None, args
                rest_metas, _ = _metas_tensors(args)
            else:
                rest, spec, nodes, rest_metas, rest_tensors = _flatten_inputs(args, kwargs)
            param_metas, _ = _metas_tensors(values)
            if param_metas is None:
                raise UnsupportedInputError("a parameter or buffer is a tensor subclass")
        except Exception:  # noqa: BLE001 - an input refused: the general path reports it
            flags, params = state.read()
            return self(flags, params, args, kwargs)
        self.dynamic.static_tensors = len(values)  # they keep static shapes (dynamic.py)
        try:
            return self._run((*flags, *values, *rest), (state.token, spec), nodes,
                             flag_metas + param_metas + rest_metas,
                             [*values, *rest_tensors], args, kwargs, state)
        except Exception as e:
            flags, params = state.read()
            shown = boundary_exception(e, self, (flags, params, args, kwargs), {})
            if shown is e:
                raise
            tb = shown.__traceback__
            try:
                raise shown  # noqa: B904 - the cause is set (or hidden) by report()
            except Exception:
                shown.__traceback__ = tb  # drop this frame, added by the raise
                raise

    def _run(self, leaves, spec, nodes, metas: tuple, tensors, args, kwargs, state=None):
        """The cache lookup (a compilation on a miss) and the run, for a call whose inputs
        are flattened: ``leaves`` with their tree structure ``spec``, their key ``metas``,
        the input objects ``nodes`` (frontend/pytrees.py; None for plain inputs) and the
        tensor leaves ``tensors``. ``args``/``kwargs``: the call's arguments; with ``state``, a
        module's call (``call_module``): the arguments after the flags and parameters, which
        are read from ``state`` on a miss."""
        cache = self.cache
        dims = None
        if self.dynamic.on():  # dynamic shapes: None in the key for symbolic sizes
            dims = self.dynamic.dims(tensors)
            metas = _dynamic.mask(metas, dims) if dims else metas
        # user executors: their registrations so far are part of the key
        key = cache.key((spec, tuple((e.name, e.generation) for e in self.executors))
                        if self.executors else spec, metas)
        entry = cache.lookup(key)
        if entry is not None and entry.sym_check is not None:
            entry = _dynamic_entry(entry, leaves)
        if entry is None:
            with COMPILE_LOCK:
                if state is not None:
                    flags, params = state.read()
                    args, kwargs = (flags, params, args, kwargs), {}
                entry = self._compile_miss(args, kwargs, leaves, spec, key, dims, nodes)
        else:
            cache.hits += 1
        self.last = entry
        if entry.mutated_inputs:  # (written inputs must not share memory: write_back.py)
            check_separate(entry, tensors, lambda: [
                p for p, x in zip(_paths(args, kwargs), leaves)
                if isinstance(x, torch.Tensor)])
        try:
            if entry.backward_plan is not None:
                from thunder_mlir.runtime.autograd import run_with_autograd

                outs = run_with_autograd(entry, tensors)
            elif entry.resident is not None:  # (it writes the written inputs itself)
                outs = entry.resident.run(tensors)
            else:
                outs = entry.plan.run(tensors)
                if entry.fresh_outputs:  # (before the write-backs below reach them)
                    from thunder_mlir.runtime.autograd import copy_outputs

                    outs = copy_outputs(outs, entry.fresh_outputs)
        except ValueGuardFailed as failed:  # another value than traced: another entry
            entry, outs = value_specialization.guard_failed(
                self, entry, failed, leaves, spec, key, dims, nodes, tensors, args, kwargs,
                state)
            self.last = entry
        if entry.checks:  # before any write-back or result (frontend/runtime_checks.py)
            runtime_checks.raise_failed(entry.checks, outs[-1])
            outs = outs[:-1]
        if entry.mutated_inputs:
            k = len(entry.mutated_inputs)
            if entry.resident is None:  # (a resident entry's run wrote them)
                if torch.is_grad_enabled():
                    with torch.no_grad():
                        write_back(tensors, entry.mutated_inputs, outs[-k:])
                else:  # (generate's decode loop: the context manager is ~1.5 us a call)
                    write_back(tensors, entry.mutated_inputs, outs[-k:])
            outs = outs[:-k]
            if entry.unversioned_inputs and entry.backward_plan is not None:
                from thunder_mlir.runtime.autograd import note_input_versions

                note_input_versions(outs)
        if entry.output_views:  # outputs that alias inputs: eager's views of them
            outs = aliasing.apply(entry.output_views, outs, tensors)
        if entry.attribute_writes:  # self.calls += 1 in forward, as eager leaves it
            for obj, name, value in entry.attribute_writes:
                setattr(obj, name, value)
        if entry.object_state is not None:  # writes to input objects, objects returned
            return _object_results(entry, nodes, tensors, outs)
        return entry.rebuild(outs)

    def _compile_static(self, compile_args, known_values, guess_sizes: bool = True):
        """``compile_function`` for static input shapes. Data-dependent output sizes are
        traced as unbacked size symbols first; where the program cannot keep them symbolic
        (a DynamicShapeFallback: a size read as a Python int, a gradient, a prim without a
        dynamic lowering, a guard relating two such sizes) the function specializes them on
        values from then on (value_guards.py), the reason in ``entry.unbacked_fallback``."""
        limit = self.cache.recompile_limit
        # (a program that needs a backward: gradients through symbolic sizes are not
        # supported, so it would trace twice; it specializes on values at once)
        grad = self.joint is not None or torch.is_grad_enabled() and any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in compile_args[3])
        if self.unbacked_off is None and not grad:
            try:
                return compile_function(*compile_args, known_values=known_values,
                                        unbacked=True, recompile_limit=limit,
                                        guess_sizes=guess_sizes,
                                        donate_writes=self.donate_writes)
            except Exception as e:  # noqa: BLE001 - only a DynamicShapeFallback retries
                why = _dynamic_fallback(e)
                if why is None:
                    raise
                self.unbacked_off = why
        entry = compile_function(*compile_args, known_values=known_values,
                                 recompile_limit=limit, donate_writes=self.donate_writes)
        if entry.value_sites:
            entry.unbacked_fallback = self.unbacked_off or (
                "a gradient is needed (requires_grad inputs under grad mode): gradients "
                "through symbolic sizes are not supported" if grad else None)
        return entry

    def _compile_miss(self, args, kwargs, leaves, spec, key, dims, nodes, known_values=(),
                      guess_sizes: bool = True):
        """Compile for a cache miss; dynamic shapes (dynamic.py): automatic dims, the
        symbolic compile, and the static compile when symbols cannot be used. ``nodes``:
        the input objects of the call (frontend/pytrees.py), None for plain inputs.
        ``known_values``: Python values of tensors known for this call (a failed value
        guard: value_specialization.py); ``guess_sizes``: whether unbacked sizes may be
        traced with guessed hints (not after a failed value guard)."""
        cache, policy = self.cache, self.dynamic
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        automatic = None
        if policy.dynamic is None and policy.disabled is None and cache.entries \
                and not known_values:
            # automatic dynamic: a size that changed since an earlier compilation
            before = {i: set(ds) for i, ds in policy.auto.items()}
            if any(policy.observe(k[1], key[1]) for k in list(cache.entries)
                   if k[0] == key[0] and k[2:] == key[2:]):
                paths = _paths_of_tensors(*pytrees.flatten((args, kwargs)))
                new = [f"{paths[i]}[{d}]" for i, ds in policy.auto.items() for d in ds
                       if d not in before.get(i, ())]
                automatic = (f"{cache._why(key, _paths(args, kwargs))}; dynamic from now on "
                             f"(automatic): {', '.join(new)}")
                dims = policy.dims(tensors)
                key = key[:1] + (_dynamic.mask(key[1], dims),) + key[2:]
                entry = cache.lookup(key)
                if entry is not None and entry.sym_check is not None:
                    entry = _dynamic_entry(entry, leaves)
                if entry is not None:
                    cache.hits += 1
                    return entry
        full_leaves, full_spec = pytrees.flatten((args, kwargs))
        if nodes:
            pytrees.check_unshared(nodes)
        compile_args = (self.fn, args, kwargs, full_leaves, full_spec, self.sharp_edges,
                        self.executors, self.joint,
                        self.watch() if self.watch is not None else ())
        fallback = None
        if dims:
            try:
                entry = compile_function(*compile_args,
                                         dynamic_dims=policy.reasons(tensors, dims),
                                         known_values=known_values,
                                         donate_writes=self.donate_writes)
            except Exception as e:  # noqa: BLE001 - any failure: compile for static shapes
                # (a DynamicShapeFallback names what needs a concrete size; another error
                # is the static compile's to report, if it fails there too)
                fallback = _dynamic_fallback(e) or \
                    f"tracing with symbolic sizes failed: {type(e).__name__}: " \
                    f"{str(e).splitlines()[0] if str(e) else ''}"
                policy.disabled = fallback
                key = key[:1] + (_static_metas(key[1], tensors),) + key[2:]
        if not dims or fallback is not None:
            entry = self._compile_static(compile_args, known_values, guess_sizes)
            if fallback is None and policy.on() and _dynamic.needs_grad(tensors):
                fallback = _dynamic.GRAD_REASON  # (dims() chose no symbols for this call)
            entry.dynamic_fallback = fallback
        old = cache.entries.get(key) if cache.enabled else None
        cache.insert(key, entry, _paths(args, kwargs), entry.guards)
        if automatic is not None and cache.reasons and cache.misses > 1:
            cache.reasons[-1] = automatic
        if old is not None and old.sym_check is not None:  # a shape guard failed
            entry.alternatives = [old] + old.alternatives
            if cache.reasons:
                cache.reasons[-1] = ("a shape guard failed: " +
                                     "; ".join(old.failed_guards(leaves)))
        if entry.sym_sources:
            paths = _paths_of_tensors(full_leaves, full_spec)
            entry.dynamic_dims = {f"{paths[i]}[{d}]": f"s{k} ({why})"
                                  for k, ((i, d), why) in
                                  enumerate(zip(entry.sym_sources, entry.sym_reasons))}
        return entry


def _dynamic_entry(entry, leaves):
    """The entry (or one of its alternatives) whose shape guards hold at this call."""
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    for e in [entry] + entry.alternatives:
        if e.sym_check is None or e.sym_check(_dynamic.sizes(tensors, e.sym_sources)):
            return e
    return None


def _static_metas(metas: tuple, tensors) -> tuple:
    """Key metadata with the concrete sizes back in place of None."""
    out, k = [], -1
    for m in metas:
        if m[0] == "tensor":
            k += 1
            m = (m[0], tensors[k].shape) + m[2:]
        out.append(m)
    return tuple(out)


def _dynamic_fallback(e: BaseException) -> str | None:
    """The DynamicShapeFallback message behind ``e`` (itself, a cause or a context)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DynamicShapeFallback):
            return str(e)
        e = e.__cause__ or e.__context__
    return None


def _object_results(entry: CacheEntry, nodes: list, tensors, outs):
    """Replay the program's writes to the caller's input objects ``nodes`` and rebuild
    the outputs, input objects returned as the caller's own (frontend/pytrees.py)."""
    writes, out_objects, n_state = entry.object_state
    if writes:  # two paths to one object: eager's writes through one show through the other
        pytrees.check_unshared(nodes)
    state_outs = outs[len(outs) - n_state:]
    outs = outs[:len(outs) - n_state]
    pytrees.replay(writes, nodes, tensors, state_outs)
    if not out_objects:
        return entry.rebuild(outs)
    leaves = list(entry.out_consts)
    for pos, t in zip(entry.out_tensor_positions, outs):
        leaves[pos] = t
    for pos, d in out_objects:
        leaves[pos] = pytrees.build(d, nodes, tensors, state_outs)
    return torch_pytree.tree_unflatten(leaves, entry.out_spec)


def _paths_of_tensors(leaves, spec) -> list[str]:
    """The argument path of each tensor leaf (for error messages)."""
    args, kwargs = optree.tree_unflatten(spec, leaves)
    paths = _paths(args, kwargs)
    return [p for p, x in zip(paths, leaves) if isinstance(x, torch.Tensor)]


def trace_function(fn: Callable, leaves, spec, sharp_edges: str = "warn",
                   grad_inputs: list[bool] | None = None, watch=(), dynamic_dims=None,
                   known_values=None, unbacked: bool = False, recompile_limit: int = 8,
                   guessed: set | None = None, no_guess=frozenset(),
                   index_checks: bool = False, guard_writes: bool = False):
    """Trace ``fn`` on proxies for the tensor leaves (requiring grad as the tensors do, or
    as ``grad_inputs`` says per tensor).

    Returns (trace, out_spec, out_leaves, monitor). Raises TraceError subclasses naming the
    user's line; a program that escapes the functional contract raises SharpEdgeError.
    ``dynamic_dims``: tensor index -> {dim: reason} traced as size symbols
    (``trace.shape_env``, ir/symbolic.py). ``known_values``: the Python values of tensors
    the trace asks for, in order (frontend/value_guards.py); one more raises
    ``ValueNeeded`` with ``need.trace`` the program prefix returning its tensors. None (a
    caller that cannot compute them: examine, distributed programs):
    DataDependentControlFlowError instead. ``unbacked``: the output sizes of data-dependent
    ops become unbacked size symbols where torch's fake kernels allow (value_guards.py);
    ``recompile_limit``: the function's, for their warning past it. ``guessed``: a set
    where unbacked sizes are traced with guessed hints instead of values (the query
    numbers guessed are added to it; frontend/unbacked_sizes.py ``guess``), except the
    queries in ``no_guess``, whose values are computed. ``guard_writes``: with index
    checks, the written inputs' new values keep the old ones unless every check held
    (``runtime_checks.unless_failed``; ``trace.writes_guarded`` says whether it could).
    """
    compat.install()
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    device, scalars = cpu_scalars.program_device(tensors)
    trace = Trace(device)
    monitor = SharpEdgeMonitor(fn, sharp_edges)
    trace.monitor = monitor
    trace.known_values = list(known_values or ())
    trace.unbacked, trace.recompile_limit = unbacked, recompile_limit
    trace.guessed = guessed if unbacked else None
    trace.no_guess = no_guess
    # index bounds checked at run time: the program's last result (runtime_checks.py)
    trace.runtime_checks = index_checks
    for obj, owner in watch:  # objects whose attribute reads are guarded (guards.py)
        monitor.recorder.watch(obj, owner)
    env = trace.shape_env = symbolic.ShapeEnv()
    shapes = [tuple(t.shape) for t in tensors]
    for i, ds in sorted((dynamic_dims or {}).items()):  # (dynamic shapes: dynamic.py)
        shapes[i] = tuple(env.new_symbol((i, d), n, ds[d]) if d in ds else n
                          for d, n in enumerate(shapes[i]))
    with trace.building():
        arg_types = [dtypes.tensor_type(s, t.dtype) for s, t in zip(shapes, tensors)]
        values = iter(trace.begin(arg_types))
        if env.sources:
            trace.func_op.attributes[symbolic.ARG_SHAPES_ATTR] = ir.ArrayAttr.get([
                ir.ArrayAttr.get([ir.StringAttr.get(symbolic.dim_text(n)) for n in s])
                for s in shapes])
        shape_of = iter(shapes)
        proxy_leaves = []
        rg = iter(grad_inputs if grad_inputs is not None else
                  [x.requires_grad for x in tensors])
        for x in leaves:
            if isinstance(x, torch.Tensor):
                v = next(values)
                p = TensorProxy(v, next(shape_of),
                                dtypes.torch_dtype(ir.RankedTensorType(v.type).element_type),
                                trace.device, next(rg))
                trace.inputs.append(p)
                proxy_leaves.append(p)
            else:
                proxy_leaves.append(x)
        for k in scalars:  # 0-d CPU tensors beside a GPU's (frontend/cpu_scalars.py)
            cpu_scalars.track(trace, trace.inputs[k])
        tree = optree.tree_unflatten(spec, proxy_leaves)
        # input objects (a KV cache): their copies, to find the program's writes to them
        objects = pytrees.ObjectState(tree, trace.inputs)
        args, kwargs = freeze_containers(tree)
        try:
            with monitor:
                out = fn(*args, **kwargs)
        except ValueNeeded as need:  # the prefix up to the value: returns its tensors
            if known_values is None:
                raise DataDependentControlFlowError(
                    f"{need.where}\n  {need.what} needs the tensor's data, which this "
                    "entry point does not compute while tracing (jit does). Use tensor ops "
                    "instead (torch.where, masking), or torch.cond.") from None
            trace.finish([p.value for p in need.tensors])
            need.trace = trace
            raise
        # torch's pytree: it knows the containers libraries register with torch
        # (Hugging Face ModelOutput, torch.return_types), which outputs often are.
        # a torch.Size is a value, not a container: kept whole so it comes back as a Size
        out_leaves, out_spec = torch_pytree.tree_flatten(
            out, is_leaf=lambda x: isinstance(x, torch.Size))
        results = []
        out_objects = []  # (leaf position, description): objects returned (pytrees.py)
        for i, x in enumerate(out_leaves):
            if type(x) is TensorProxy:
                results.append(x.value)
            elif pytrees.is_object(x) and (d := objects.describe(x, f"output {i}"))[0] != \
                    "const":
                out_objects.append((i, d))
            elif isinstance(x, torch.Tensor):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a tensor that was not "
                    "computed from the inputs (a global or closure?); pass it as an input")
            elif any(type(v) is TensorProxy for v in optree.tree_leaves(x)) or \
                    "TensorProxy" in repr(type(x)):
                raise TraceError(
                    f"output {i} of {getattr(fn, '__qualname__', fn)} is a "
                    f"{type(x).__qualname__} holding tensors, which is not a pytree container "
                    "thunder_mlir can unpack; return tensors in tuples, lists or dicts")
        writes = objects.writes()
        cpu_scalars.check_outputs(trace, [(f"output {i}", x) for i, x in enumerate(out_leaves)]
                                  + [("a tensor stored on an input object", p)
                                     for p in objects.tensors])
        # the tensors written to input objects or returned inside objects: program outputs
        # after the function's own (state outputs), before the write-backs; one that is also
        # an output comes back as that output (aliasing.output_views)
        results += [p.value for p in objects.tensors]
        trace.objects = (writes, out_objects, objects.tensors) \
            if writes or out_objects else None
        written = sorted(trace.mutated_inputs.items())
        news = [p for _, p in written]
        code_ = runtime_checks.code(trace) if trace.checks else None
        trace.writes_guarded = False
        if guard_writes and code_ is not None and news:  # (donated: cannot be undone)
            olds = [TensorProxy(trace.entry.arguments[i], p.tshape, p.tdtype, p.tdevice)
                    for i, p in written]
            guarded = runtime_checks.unless_failed(trace, code_, news, olds)
            if guarded is not None:
                news, trace.writes_guarded = guarded, True
        results += [p.value for p in news]
        if code_ is not None:  # after the write-backs: the checks' code (runtime_checks.py)
            results.append(code_.value)
        functionalization.emit_unversioned_reads(trace)  # (read by the grad pass)
        region_reads.emit_pairs(trace, region_reads.RECOMPUTE_READ, trace.recompute_reads)
        trace.finish(results)
        tail = len(trace.mutated_inputs) + (1 if trace.checks else 0)
        if tail:  # the trailing results (write-backs, the checks' code): not differentiated
            trace.func_op.attributes[WRITE_BACKS_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), tail)
    monitor.finish()
    return trace, out_spec, out_leaves, monitor


def _forwarded_inputs(plan, n: int, output_views: list) -> tuple[int, ...]:
    """The positions among the first ``n`` program outputs that ``plan`` returns as one of
    its input tensors (the program returns an argument unchanged: ``x.clone()`` and
    decompositions that fold to their operand do) and that ``output_views`` does not make
    eager's view of an input: eager returns a new tensor there, so the runtime copies it
    before writing inputs back (``copy_outputs``)."""
    outputs, n_inputs = getattr(plan, "outputs", None), getattr(plan, "n_inputs", 0)
    if outputs is None:
        return ()
    views = {r[0] for r in output_views if r[1][0] != "copy"}
    return tuple(j for j, o in enumerate(outputs[:n]) if o < n_inputs and j not in views)


def compile_function(fn: Callable, args, kwargs, leaves, spec,
                     sharp_edges: str = "warn", executors=(), joint: str | None = None,
                     watch=(), dynamic_dims=None, known_values=(), unbacked: bool = False,
                     recompile_limit: int = 8, guess_sizes: bool = True,
                     donate_writes: bool = False) -> CacheEntry:
    """Trace, transform, lower and compile ``fn`` for these inputs (under COMPILE_LOCK).
    ``executors``: user executors (thunder_mlir.extend), in priority order. ``joint``:
    "grad" or "value_and_grad" compiles the gradient program of ``thunder_mlir.grad``
    (passes/joint.py) instead of the function. ``watch``: (object, description) pairs
    whose attribute reads become guards (guards.py). ``dynamic_dims``: tensor index ->
    {dim: reason} traced as size symbols (dynamic.py); raises DynamicShapeFallback when
    the program cannot be compiled with them. ``known_values``: Python values of tensors
    already known, in query order (value_specialization.py computes the others).
    ``unbacked``: trace data-dependent output sizes as unbacked size symbols (raises
    DynamicShapeFallback where the program cannot keep them symbolic), with guessed hints
    where ``guess_sizes`` (frontend/unbacked_sizes.py ``guess``), else with the values
    the program prefixes compute. ``donate_writes``: the inputs the program writes are
    kept resident in XLA's memory and donated to it where it can (runtime/resident.py)."""
    from thunder_mlir.executors.extend import compiling
    from thunder_mlir.ir import implementations

    check_tensor_inputs(leaves, lambda: _paths(args, kwargs))  # sparse, nested, ...
    # the implementations this compilation registers live as long as its cache entry, so
    # that every stage's symbols resolve while the function lives (ir/implementations.py)
    with compiling(executors) as ext, implementations.holding() as held:
        entry = _compile(fn, leaves, spec, sharp_edges, ext, joint, watch, dynamic_dims,
                         known_values, unbacked, recompile_limit, guess_sizes,
                         donate_writes)
    entry.implementations = held
    return entry


def program_name(fn) -> str:
    """A compiled program in error messages: the jitted function (a module: its class's
    ``forward``; ``ThunderModule`` jits ``partial(_functional_forward, module)`` and
    ``partial(_functional_method, method)``) and where it is defined, e.g. "`mlp` (defined
    at model.py:12)"."""
    while isinstance(fn, functools.partial) and fn.args:  # the module or method it runs
        fn = fn.args[0]
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = inspect.unwrap(getattr(target, "__func__", target))
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    code = getattr(target, "__code__", None)
    where = f" (defined at {code.co_filename}:{code.co_firstlineno})" \
        if isinstance(code, types.CodeType) else ""
    return f"the compiled program of `{name}`{where}"


def _compile(fn: Callable, leaves, spec, sharp_edges: str, ext,
             joint: str | None = None, watch=(), dynamic_dims=None,
             known_values=(), unbacked: bool = False, recompile_limit: int = 8,
             guess_sizes: bool = True, donate_writes: bool = False) -> CacheEntry:
    from thunder_mlir.executors import execution_transform  # noqa: F401 (registers it)
    from thunder_mlir.transforms.grad import DIFF_OUTPUTS, backward_error, output_reach, \
        reached_inputs
    from thunder_mlir.transforms.registry import PassContext, parse_pipeline, pipeline_string

    from thunder_mlir.runtime.plan import build_plan, place_small_programs

    stages: list[Stage] = []
    t0 = time.perf_counter()
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    floats = [t.is_floating_point() or t.is_complex() for t in tensors]
    # joint: the gradient of every floating-point input (thunder_mlir.grad)
    wrt = floats if joint else [t.requires_grad and f for t, f in zip(tensors, floats)]
    known = list(known_values)
    # unbacked sizes are traced with guessed hints (frontend/unbacked_sizes.py ``guess``):
    # the query numbers guessed, None once a trace with guesses failed
    guessed: set | None = set() if unbacked and guess_sizes else None
    no_guess: set[int] = set()  # queries whose guessed sizes a guard pinned: computed
    while True:  # each Python value of a tensor the trace needs: its prefix computes it
        try:
            trace, out_spec, out_leaves, monitor = trace_function(
                fn, leaves, spec, sharp_edges, grad_inputs=wrt if joint else None,
                watch=watch, dynamic_dims=dynamic_dims, known_values=known,
                unbacked=unbacked, recompile_limit=recompile_limit, guessed=guessed,
                no_guess=no_guess, index_checks=True, guard_writes=donate_writes)
            # (unbacked sizes: a guard relating two of them)
            trace.shape_env.check_unbacked_guards(trace.unbacked_groups)
            pinned = {k for sym, k in trace.guessed_symbols.items()
                      if trace.shape_env.guards_of([sym])}
            if pinned:  # a branch on a guessed size, or one read as an int, took the
                # guessed hint and would fail at this call's run: those sizes are computed
                known, guessed = list(known_values), set()
                no_guess |= pinned
                continue
            break
        except ValueNeeded as need:
            try:
                value = value_specialization.prefix_value(need, ext, tensors)
                known = need.trace.known_values[:need.index] + [value]
            except ValueGuardFailed as failed:  # a guessed size is 0 or 1 at this call
                known = need.trace.known_values[:failed.index] + [failed.observed]
                guessed = {i for i in guessed if i < failed.index}
        except Exception:  # noqa: BLE001 - a guessed hint the program cannot take
            if not guessed:
                raise
            known, guessed = list(known_values), None  # trace with the real values
    module = trace.module
    env = trace.shape_env
    # (before the passes rewrite the values the proxies hold)
    output_views = [] if joint else aliasing.output_views(
        trace.inputs, [x for x in out_leaves if type(x) is TensorProxy] +
        (trace.objects[2] if trace.objects else []))
    eager_backward_error = differentiability.backward_error(
        [x for x in out_leaves if type(x) is TensorProxy])
    # the outputs eager's autograd would track (differentiability.py): grad mode at the
    # call and inside the program (no_grad/enable_grad regions), detach, op derivatives
    state_outs = trace.objects[2] if trace.objects else []  # (pytrees.py)
    diff_outputs = [x.requires_grad for x in out_leaves if type(x) is TensorProxy] + \
        [x.requires_grad for x in state_outs]
    needs_grad = any(diff_outputs) or joint is not None
    if env.sources and symbolic.has_symint(output_views):  # replayed on real tensors
        raise DynamicShapeFallback("an output is a view of an input made with symbolic "
                                   "sizes (eager's view is replayed with concrete ones)")
    if env.sources and needs_grad:
        raise DynamicShapeFallback("gradients through symbolic sizes are not supported: "
                                   "a program that needs a backward is compiled for static "
                                   "shapes")
    # (an input that requires grad written under no_grad() keeps its gradient path, as
    # eager's: frontend/functionalization.py; one written otherwise is eager's leaf error)
    refused = [i for i, p in trace.mutated_inputs.items()
               if tensors[i].requires_grad and not getattr(p, "_no_grad_written", False)
               and not getattr(p, "_eager_accepted_write", False)]
    if needs_grad and refused:
        names = [_paths_of_tensors(leaves, spec)[i] for i in sorted(refused)]
        raise NotImplementedError(
            f"in-place updates of inputs that require grad are not supported ({', '.join(names)}"
            "); use the out-of-place form (inputs that do not require grad, such as "
            "buffers, may be updated in place)")
    mixed = [m for m in trace.unversioned_mixed if m[0].value != m[1]]
    if needs_grad and mixed:
        _, _, line, op = mixed[0]
        raise NotImplementedError(
            f"{line}\n  {op} saves for backward a tensor read through `.data`, and that "
            "memory is written later in the function. Eager's backward reads the written "
            "memory there, and the values the op computed (saved with it) as they were; "
            "thunder_mlir reproduces this only for ops that save their inputs alone. Read a "
            "copy (`x.data.clone()`), or write the memory after the backward.")
    if needs_grad and trace.checkpoint_writes:
        raise NotImplementedError(
            f"{trace.checkpoint_writes[0]}\n  a checkpointed function writes in place into a "
            "tensor from outside it (batch_norm's running statistics, a buffer): eager's "
            "backward re-runs the function and writes it a second time, which thunder_mlir "
            "does not reproduce. Move the write out of the checkpoint, or run that module "
            "in eval mode.")
    stale = region_reads.stale_recomputation(trace) if needs_grad else None
    if stale is not None:
        where, what = stale
        raise NotImplementedError(
            f"{where}\n  {what}. Memory the checkpointed function reads from outside it "
            "is written after the checkpoint, and eager's backward re-runs the function on "
            "the written memory; thunder_mlir's backward does not reproduce this. Write the "
            "memory after the backward, or read a copy (`x.clone()`) inside the checkpoint.")
    if needs_grad and trace.unpaired_reads and eager_backward_error is None:
        _, _, where = trace.unpaired_reads[0]
        raise NotImplementedError(
            f"{where}\n  a tensor read inside a torch.cond or while_loop region (through "
            "`.data`, or by a checkpointed function) is written later in the function. "
            "Eager's backward reads that memory as written; thunder_mlir pairs such reads "
            "with their final value only outside cond/while regions. Read a copy "
            "(`x.clone()`), or write the memory after the backward.")
    n_tail = len(trace.mutated_inputs) + (1 if trace.checks else 0)  # (not differentiated)
    if needs_grad:  # grad sees composites, so composite-level VJP rules can apply
        extra = len(trace.entry.arguments) - len(tensors)  # the seed: not differentiated
        trace.func_op.attributes["thunder.requires_grad"] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(w, trace.ctx) for w in wrt + [False] * extra], trace.ctx)
        trace.func_op.attributes[DIFF_OUTPUTS] = ir.ArrayAttr.get(
            [ir.BoolAttr.get(d, trace.ctx)
             for d in diff_outputs + [False] * n_tail], trace.ctx)
    # (the grad attributes are part of the initial stage: thunder-opt's grad reads them)
    stages.append(Stage("initial", _asm(module), time.perf_counter() - t0))
    # Each stage is one pass of the registry thunder-opt uses, built from its pipeline
    # element (the Stage records the element, so thunder-opt reproduces the stage).
    elements = []
    if needs_grad:
        elements.append(("grad", "grad{remat=true}"))
    if joint:
        keep = "true" if joint == "value_and_grad" else "false"
        elements.append(("joint", f"joint{{keep-outputs={keep}}}"))
    if ext.executors:  # after grad: executors also claim the backward's ops
        names = ",".join(e.name for e in ext.executors)
        elements.append(("execution", f"execution-transform{{executors={names}}}"))
    # (merge-dots: single-device programs only; distributed/program.py leaves the dots of
    # a sharded program to XLA's SPMD partitioner as they are)
    elements += [("prims", "decompose,merge-dots"), ("plan", "partition"),
                 ("stablehlo", "lower-to-stablehlo")]
    ctx = PassContext(compile_state=ext, device=trace.device)
    for stage_name, element in elements:
        t = time.perf_counter()
        passes = parse_pipeline(element)
        for pass_ in passes:
            pass_(module, ctx)
        stages.append(Stage(stage_name, _asm(module), time.perf_counter() - t,
                            pipeline_string(passes)))
    t = time.perf_counter()
    aliased = {}  # written inputs aliased with their new values (runtime/resident.py)
    if needs_grad and not joint:
        from thunder_mlir.transforms.grad import residual_bytes

        from thunder_mlir.runtime.autograd import mark_donated_residuals

        plan, texts = build_plan(module, trace.device, "forward")
        plan.name_program(program_name(fn) + ", its forward")
        # residuals only the backward reads: donated to it (their memory holds gradients)
        mark_donated_residuals(module, plan, sum(type(x) is TensorProxy for x in out_leaves)
                               + len(state_outs) + n_tail)
        bwd, btexts = build_plan(module, trace.device, "backward")
        bwd.name_program(program_name(fn) + ", its backward")
        texts.update(btexts)
    else:
        if donate_writes and trace.mutated_inputs and \
                (not trace.checks or getattr(trace, "writes_guarded", False)) \
                and not trace.value_sites and trace.device.type == "cpu" and not joint:
            from thunder_mlir.runtime.resident import mark_aliased_writes

            aliased = mark_aliased_writes(module, sorted(trace.mutated_inputs),
                                          trailing=1 if trace.checks else 0)
        plan, texts = build_plan(module, trace.device)
        plan.name_program(program_name(fn))
    compiled = f"// {len(texts)} region(s) compiled"
    # inference programs only: a training step's forward and backward stay on the main pool
    # (runtime/plan.py place_small_programs says why)
    placement = None if needs_grad else place_small_programs([plan], texts)
    if placement:
        compiled += f"; {placement}"
    if needs_grad and not joint and any(getattr(s, "donated", ()) for s in bwd.steps):
        # the backward's donated residuals: the module as compiled, donor attributes shown
        compiled += "; the module as compiled:\n" + _asm(module)
    stages.append(Stage("xla-compile", compiled, time.perf_counter() - t))
    positions = [i for i, x in enumerate(out_leaves) if type(x) is TensorProxy]
    consts = [None if type(x) is TensorProxy else x for x in out_leaves]
    entry = CacheEntry(plan, out_spec, consts, positions, stages, list(trace.fallbacks),
                       sorted(trace.mutated_inputs),
                       guards=monitor.guards + monitor.recorder.guards,
                       attribute_writes=monitor.recorder.replay())
    entry.fresh_outputs = _forwarded_inputs(plan, len(positions) + len(state_outs),
                                            output_views)
    entry.output_views = [r for r in output_views if r[0] not in entry.fresh_outputs]
    if not needs_grad and aliased and plan._single and not entry.fresh_outputs:
        from thunder_mlir.runtime.resident import ResidentWrites

        entry.resident = ResidentWrites(plan, entry.mutated_inputs, aliased,
                                        trailing=1 if trace.checks else 0)
        compiled = stages[-1].text + "; written inputs aliased with their new values " \
            f"(resident, donated): {sorted(aliased)}"
        stages[-1] = Stage("xla-compile", compiled, stages[-1].seconds)
    entry.checks = [(error, message) for _, error, message in trace.checks]
    if trace.value_sites:  # value guards (frontend/value_guards.py)
        entry.value_path = trace.known_values[:len(trace.value_sites)]  # (guesses too)
        entry.value_sites = list(trace.value_sites)
        entry.value_group = [entry]
        entry.value_accepts = dict(trace.value_accepts)  # (queries of unbacked sizes)
    if env.unbacked:  # data-dependent sizes kept symbolic: cache_info lists them
        entry.unbacked_sizes = {f"s{k}": env.reasons[k] for k in env.unbacked}
    if trace.objects:
        if joint:
            raise UnsupportedError("thunder_mlir.grad of a function that writes tensors to "
                                   "its input objects or returns objects is not supported")
        entry.object_state = (trace.objects[0], trace.objects[1], len(state_outs))
    if env.input_sources:  # dynamic shapes (ir/symbolic.py): guards checked at every call
        n = len(env.input_sources)
        entry.sym_sources, entry.sym_reasons = list(env.input_sources), env.reasons[:n]
        entry.sym_check = env.guard_function()
        entry.shape_guards = env.describe_guards()
        entry.shape_guard_terms = list(env.guards)
    if joint:
        entry.set_joint_layout(joint == "value_and_grad", sum(wrt))
    elif needs_grad:
        entry.backward_plan = bwd
        # the forward's outputs: the program's, then the write-backs (not differentiable)
        entry.num_outputs = len(positions) + len(state_outs) + n_tail
        entry.diff_outputs = diff_outputs + [False] * n_tail
        entry.backward_error = backward_error(module) or eager_backward_error
        entry.reentrant_checkpoint = trace.reentrant_checkpoint
        entry.unversioned_inputs = tuple(region_reads.inputs_read_unversioned(trace))
        reached = iter(reached_inputs(module))
        entry.wrt = [i for i, w in enumerate(wrt) if w and next(reached)]
        entry.output_reach = output_reach(module)
        entry.residual_bytes = residual_bytes(module)
    return entry


def _asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)
