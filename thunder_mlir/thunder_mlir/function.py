"""A jitted function (``ThunderFunction``, what ``thunder_mlir.jit`` returns for a function):
the callable, its cache and its runs.

A cache miss compiles through the pipeline (``pipeline.compile_function``: trace, passes,
lowering, XLA compile, for the target device). Entries are cached by
``cache.FunctionCache`` (hashed key of input metadata, Python values, grad mode, default
dtype and guards).
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Callable

import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.frontend import aliasing, module_attributes, pytrees, runtime_checks
from thunder_mlir.cache import CacheEntry, FunctionCache
from thunder_mlir.ir.context import COMPILE_LOCK
from thunder_mlir.error_reporting import argument_paths as _paths, boundary_exception, \
    tensor_argument_paths, unsupported_tensor
from thunder_mlir import dynamic as _dynamic, synthetic_bases, value_specialization
from thunder_mlir.dynamic import DynamicPolicy
from thunder_mlir.errors import DynamicShapeFallback, UnsupportedInputError
from thunder_mlir.pipeline import compile_function
from thunder_mlir.runtime.write_back import inputs_overlap, write_back
from thunder_mlir.frontend.sharp_edges import SharpEdgeMonitor
from thunder_mlir.frontend.value_guards import ValueGuardFailed
from thunder_mlir.frontend.tracing import _local as _tracing_state

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
        # () -> [(object, description[, path])]: objects whose attribute reads the trace
        # guards (a ThunderModule's module tree; guards.py), with their attribute path from
        # the root whose tensor attributes are lifted (frontend/module_attributes.py)
        self.watch: Callable[[], list] | None = None
        # () -> that root, where it is not a module call's (``state.module``): a training
        # step's modules (train_step.py), on which the program's attribute writes are set
        self.attribute_root: Callable[[], object] | None = None
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
        """``self(flags, params, lifted, args, kwargs)`` for a module's function (``fn``
        takes the training flags, the {qualified name: parameter or buffer} dict of
        ``state``, a ``module._ModuleState``, the {path: value} dict of its lifted tensor
        attributes (frontend/module_attributes.py), then the call's arguments), without
        building the first dict or flattening it on a cache hit: ``current`` is
        ``state.current()``, the flags and the parameters in the order optree flattens the
        dict in, their tree structure ``state.token``. The key holds the same metadata,
        leaf by leaf, as the general path's; its tree-structure part is (``state.token``,
        the lifted values' structure, the arguments' structure). Raises
        ``module_attributes.LiftNeeded`` (a BaseException) when a trace finds tensors the
        module holds that are not inputs yet: the caller (``module._call_lifting``) lifts
        them and calls again."""
        if getattr(_tracing_state, "trace", None) is not None:  # inlined (__call__)
            flags, params, _ = state.read()
            # (no lifted attributes: the caller's trace lifts those its module holds)
            return self.fn(flags, params, {}, args, kwargs)
        try:
            flags, values = current
            # tensors held as plain attributes (frontend/module_attributes.py): after the
            # parameters and buffers, the values of the {path: value} dict in path order
            lifted = state.lifted_values() if state.lifted else None
            if lifted is None:
                lifted_leaves, lifted_spec = (), None
            elif all(type(v) is _TENSOR for v in lifted.values()):
                lifted_leaves, lifted_spec = tuple(lifted.values()), state.lifted
            else:
                lifted_leaves, lifted_spec = pytrees.flatten(lifted)
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
            if lifted is None:
                lifted_metas, lifted_tensors = (), ()
            else:
                lifted_metas, lifted_tensors = _metas_tensors(lifted_leaves)
                if lifted_metas is None:
                    raise UnsupportedInputError("a lifted attribute holds another value")
        except Exception:  # noqa: BLE001 - an input refused: the general path reports it
            flags, params, lifted = state.read()
            return self(flags, params, lifted, args, kwargs)
        # they keep static shapes (dynamic.py)
        self.dynamic.static_tensors = len(values) + len(lifted_tensors)
        try:
            return self._run((*flags, *values, *lifted_leaves, *rest),
                             (state.token, lifted_spec, spec), nodes,
                             flag_metas + param_metas + lifted_metas + rest_metas,
                             [*values, *lifted_tensors, *rest_tensors], args, kwargs, state)
        except Exception as e:
            flags, params, lifted = state.read()
            shown = boundary_exception(e, self, (flags, params, lifted, args, kwargs), {})
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
                entry = self._compile_miss(args, kwargs, leaves, spec, key, dims, nodes,
                                           state=state)
        else:
            cache.hits += 1
        self.last = entry
        if (entry.mutated_inputs or entry.restrided_inputs) and inputs_overlap(entry, tensors):
            # a written input shares memory with another: a synthetic base (one input over
            # their memory) runs it as eager does (synthetic_bases.py)
            def paths():
                return [p for p, x in zip(_call_paths(args, kwargs, state), leaves)
                        if isinstance(x, torch.Tensor)]
            return synthetic_bases.call(self, entry, args, kwargs, tensors, paths,
                                        module=state is not None, objects=bool(nodes))
        if entry.strided_inputs:  # (as_strided output views of inputs: aliasing.py)
            aliasing.check_strided_inputs(entry.strided_inputs, tensors)
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
                if entry.dirty_writes:  # (values that require grad: _write_dirty)
                    _write_dirty(entry, tensors, outs[-k:])
                elif torch.is_grad_enabled():
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
            return _object_results(entry, nodes, tensors, outs, state.module if state
                                   is not None else self.attribute_root()
                                   if self.attribute_root is not None else None)
        if entry.symbolic_consts:  # sizes in the outputs: this call's ints
            return entry.rebuild_concrete(outs, tensors)
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

    def _compile_miss(self, args, kwargs, leaves, spec, key, dims, nodes, state=None,
                      known_values=(), guess_sizes: bool = True):
        """Compile for a cache miss; dynamic shapes (dynamic.py): automatic dims, the
        symbolic compile, and the static compile when symbols cannot be used. ``args``,
        ``kwargs`` and ``state``: the call's, as ``_run`` has them (``fn``'s arguments are
        ``function_arguments`` of them). ``nodes``: the input objects of the call
        (frontend/pytrees.py), None for plain inputs. ``known_values``: Python values of
        tensors known for this call (a failed value guard: value_specialization.py);
        ``guess_sizes``: whether unbacked sizes may be traced with guessed hints (not after
        a failed value guard)."""
        args, kwargs = function_arguments(args, kwargs, state)
        cache, policy = self.cache, self.dynamic
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        automatic = None
        if policy.dynamic is None and policy.disabled is None and cache.entries \
                and not known_values:
            # automatic dynamic: a size that changed since an earlier compilation
            before = {i: set(ds) for i, ds in policy.auto.items()}
            if any(policy.observe(k[1], key[1]) for k in list(cache.entries)
                   if k[0] == key[0] and k[2:] == key[2:]):
                paths = tensor_argument_paths(*pytrees.flatten((args, kwargs)))
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
            paths = tensor_argument_paths(full_leaves, full_spec)
            entry.dynamic_dims = {f"{paths[i]}[{d}]": f"s{k} ({why})"
                                  for k, ((i, d), why) in
                                  enumerate(zip(entry.sym_sources, entry.sym_reasons))}
        return entry


def function_arguments(args: tuple, kwargs: dict, state=None) -> tuple[tuple, dict]:
    """The (positional, keyword) arguments a ThunderFunction's ``fn`` is called with, for a
    call whose own arguments are ``args``/``kwargs``: those, or, for a module's call
    (``call_module``: ``state`` its ``module._ModuleState``), ``(flags, params, lifted,
    args, kwargs)`` with the training flags, parameters and lifted attributes
    (frontend/module_attributes.py) read from ``state`` now. The one place a module call's
    arguments are wrapped: ``_run`` and everything it passes them to (a failed value
    guard's recompilation, value_specialization.py; the names of ``_call_paths``) keep
    the call's own."""
    if state is None:
        return args, kwargs
    flags, params, lifted = state.read()
    return (flags, params, lifted, args, kwargs), {}


_MODULE_PARTS = ("training flags", "parameter or buffer", "attribute")


def _call_paths(args, kwargs, state) -> list[str]:
    """The name of each leaf of a call's inputs for messages: ``argument_paths``'s, and
    for a module's call (``state``: its ``_ModuleState``; ``args``, ``kwargs`` the call's
    own, wrapped here by ``function_arguments``) the leaves of its
    flags, parameters and buffers, lifted attributes (frontend/module_attributes.py) and
    arguments, named as the user knows them: ``parameter or buffer 'lin.weight'``,
    ``attribute 'kv.k' of the module``, ``args[0]``."""
    if state is None:
        return _paths(args, kwargs)
    args, kwargs = function_arguments(args, kwargs, state)
    names = []
    for part, value in zip(_MODULE_PARTS[:3], args):
        if part == "parameter or buffer":
            names += [f"parameter or buffer {k!r}" for k in sorted(value)]
        elif part == "attribute":
            for k in sorted(value):
                n = len(pytrees.flatten(value[k])[0])
                names += [f"attribute '{'.'.join(k)}' of the module"] * n
        else:
            names += [part] * len(pytrees.flatten(value)[0])
    return names + _paths(args[3], args[4])


def _write_dirty(entry: CacheEntry, tensors: list, values: list) -> None:
    """Write the program's new values of its written inputs (``values``, in
    ``entry.mutated_inputs`` order) into the caller's tensors. Those written with a value that
    requires grad (``entry.dirty_writes``) are written first, by a ``copy_`` that autograd
    records, as eager's in-place op: the caller's tensor gets a ``grad_fn`` (a view's base a
    ``CopySlices``), its old value's gradient flows through the program's node, its version
    goes up, and eager's RuntimeErrors are raised before anything is written for a leaf that
    requires grad ("a leaf Variable that requires grad is being used in an in-place
    operation") or a view of one. The others are written without grad."""
    dirty = entry.dirty_writes
    with torch.enable_grad():
        for i, v in zip(entry.mutated_inputs, values):
            if i in dirty:
                tensors[i].copy_(v)
    rest = [(i, v) for i, v in zip(entry.mutated_inputs, values) if i not in dirty]
    if rest:
        with torch.no_grad():
            write_back(tensors, [i for i, _ in rest], [v for _, v in rest])


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


def _object_results(entry: CacheEntry, nodes: list, tensors, outs, root=None):
    """Replay the program's writes to the caller's input objects ``nodes`` and, for a
    module's call or a training step (``root``: the module tree the paths start from), the
    tensors it assigned to attributes of the module tree, and rebuild the outputs, input
    objects returned as the caller's own (frontend/pytrees.py,
    frontend/module_attributes.py)."""
    writes, out_objects, n_state = entry.object_state
    if writes:  # two paths to one object: eager's writes through one show through the other
        pytrees.check_unshared(nodes)
    state_outs = outs[len(outs) - n_state:]
    outs = outs[:len(outs) - n_state]
    pytrees.replay(writes, nodes, tensors, state_outs)
    for path, d in entry.attribute_tensors:
        holder = module_attributes.resolve(root, path[:-1])
        object.__getattribute__(holder, "__dict__")[path[-1]] = \
            pytrees.build(d, nodes, tensors, state_outs)
    if not out_objects:
        return entry.rebuild_concrete(outs, tensors) if entry.symbolic_consts else \
            entry.rebuild(outs)
    leaves = entry.concrete_consts(tensors) if entry.symbolic_consts else list(entry.out_consts)
    for pos, t in zip(entry.out_tensor_positions, outs):
        leaves[pos] = t
    for pos, d in out_objects:
        leaves[pos] = pytrees.build(d, nodes, tensors, state_outs)
    return torch_pytree.tree_unflatten(leaves, entry.out_spec)
