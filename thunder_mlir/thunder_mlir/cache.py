"""The compilation cache of one jitted function: hashed keys, guards, recompile reasons.

Key = (input tree structure, per-leaf metadata — shape, dtype, device, requires_grad for
tensors, type and value for Python values —, grad mode, default dtype, current values of
the function's guards, torch.autocast state). One dict lookup per call; no scan of entries.

Guards are Python values the program read from outside its signature while it was traced
(a global, a closure cell). The function's *guard schema* is the list of such sources seen
so far; their current values are part of every key, so a changed value is a cache miss
(a re-trace), never a stale result.
"""

from __future__ import annotations

import collections
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_mlir.errors import RecompileWarning
from thunder_mlir.frontend import autocast
from thunder_mlir.frontend.guards import MISSING as _MISSING, Guard, key_function


_any_autocast = torch._C._is_any_autocast_enabled  # one C call on the hot path
MAX_REASONS = 256  # recompile reasons kept per function
_STRUCTURE = "the structure of the inputs changed"


def fmt(v) -> str:
    return "<deleted>" if v is _MISSING else repr(v)


_BUILT_TYPES = (tuple, list, dict)


def _builder(spec, consts, positions):
    """``outs -> output`` for an output tree of tuples, lists, dicts and None (a training
    step's ``(loss, kinds, grads, ...)``, a dict of tensors) as one generated expression, or
    None for a tree with another node type (a namedtuple, a ``ModelOutput``: torch's
    ``tree_unflatten``). The same output as ``tree_unflatten(leaves, spec)``: the tensor
    leaves at ``positions`` taken from ``outs`` in order, the other leaves ``consts``'
    objects themselves; torch's walks the spec in Python (~1.2 us a node)."""
    at = {pos: j for j, pos in enumerate(positions)}
    keys: list = []
    count = [0]

    def expr(node) -> str | None:
        if node.is_leaf():
            k = count[0]
            count[0] += 1
            return f"o[{at[k]}]" if k in at else f"c[{k}]"
        if node.type is type(None):  # (a node of torch's pytree, without children)
            return "None"
        if node.type not in _BUILT_TYPES:
            return None
        parts = [expr(child) for child in node.children()]
        if any(p is None for p in parts):
            return None
        if node.type is dict:
            if len(node.context) != len(parts):
                return None
            keys.extend(node.context)
            first = len(keys) - len(parts)
            return "{" + "".join(f"K[{first + i}]: {p}, " for i, p in enumerate(parts)) + "}"
        body = "".join(p + ", " for p in parts)
        return f"({body})" if node.type is tuple else f"[{body}]"

    text = expr(spec)
    if text is None or count[0] != len(consts):
        return None
    return eval(f"lambda o: {text}", {"c": list(consts), "K": keys})  # noqa: S307 - generated


@dataclass
class CacheEntry:
    """A compiled specialization: the plan plus how to rebuild the outputs."""

    plan: Any
    out_spec: Any
    out_consts: list  # per output leaf: None for a tensor, else the constant value
    out_tensor_positions: list[int]
    stages: list
    fallbacks: list[str] = field(default_factory=list)
    mutated_inputs: list[int] = field(default_factory=list)  # tensor indices to write back
    # (error, message) per index check; the program's last result says which failed
    # (frontend/runtime_checks.py)
    checks: list = field(default_factory=list)
    key: Any = None
    paths: list[str] = field(default_factory=list)
    guards: list[tuple[Guard, Any]] = field(default_factory=list)
    # attribute writes the program made (guards.AttributeRecorder), replayed after each run
    attribute_writes: list = field(default_factory=list)
    # outputs that alias inputs or earlier outputs: view recipes replayed (aliasing.py)
    output_views: list = field(default_factory=list)
    _rebuild: Any = None
    # with autograd (grad pass): the backward plan and how forward outputs map to it
    backward_plan: Any = None
    num_outputs: int = 0
    diff_outputs: list[bool] = field(default_factory=list)
    wrt: list[int] = field(default_factory=list)  # tensor-input indices that get gradients
    # the tensor-input indices of the inputs written in place with a value that requires
    # grad: written back by a ``copy_`` that autograd records (function.py ``_write_back``),
    # so the caller's tensor gets a grad_fn, eager's leaf errors and version bump
    dirty_writes: frozenset = frozenset()
    residual_bytes: int = 0
    # the inputs (identities, data pointers) of the last call whose written inputs were
    # found apart from the other inputs (runtime/write_back.py ``inputs_overlap``)
    separate_inputs: tuple | None = None
    # {layout: ThunderFunction}: the programs of calls whose written inputs share memory
    # with others, one per layout of their synthetic bases (synthetic_bases.py)
    synthetic: dict | None = None
    backward_error: str | None = None  # eager's error for a derivative it does not implement
    reentrant_checkpoint: bool = False  # the backward refuses .grad() as torch's does
    # output positions the plan returns as an input tensor itself, where eager's result is
    # a new tensor (``x.clone()`` folds to ``x``): copied before any input is written back
    fresh_outputs: tuple = ()
    # written inputs kept in XLA's memory and donated to the program instead of copied
    # back (runtime/resident.py ``ResidentWrites``); None: ``write_back`` copies
    resident: Any = None
    # inputs eager's backward reads as they are then (`.data`, checkpoint): a write into one
    # between the call and the backward is refused (frontend/region_reads.py)
    unversioned_inputs: tuple = ()
    # the outputs eager's autograd graph saves for backward (their positions among the
    # forward's outputs): saved by the Function too, so a write into one after the call
    # makes the backward raise eager's "modified by an inplace operation"
    # (differentiability.saved_outputs)
    saved_outputs: tuple = ()
    # per differentiated output, the positions in ``wrt`` it reaches; None: every one
    # (transforms/grad.output_reach): an input only unused outputs reach gets no gradient
    output_reach: list | None = None
    # the executor implementations the compilation registered, kept alive with the entry
    # (ir/implementations.py)
    implementations: list = field(default_factory=list)
    # (writes to input objects, objects returned, number of state outputs): see
    # frontend/pytrees.py; None when the program neither writes nor returns objects
    object_state: Any = None
    # (attribute path from the jitted module, description as object_state's) per tensor
    # attribute the program assigns (frontend/module_attributes.py): set after every run
    attribute_tensors: list = field(default_factory=list)
    # dynamic shapes (dynamic.py, ir/symbolic.py): the (tensor index, dim) each size symbol
    # s<k> reads, why it is symbolic, the check of the trace's shape guards on the symbols'
    # sizes, the guards as text, entries of the same key with other guards, and why a
    # compilation that asked for symbols was made static
    sym_sources: list = field(default_factory=list)
    # the positions of ``out_consts`` that hold size symbols (``x.shape``, ``u.numel()`` of
    # a data-dependent size): ints at each call (``rebuild_concrete``)
    symbolic_consts: list = field(default_factory=list)
    # inputs an output recipe views with as_strided: checked dense before each run
    # (frontend/aliasing.py check_strided_inputs)
    strided_inputs: list = field(default_factory=list)
    # inputs changed by an in-place view op (t_, squeeze_...): passed twice, a synthetic
    # base gives both arguments the one tensor (synthetic_bases.py)
    restrided_inputs: tuple = ()
    sym_reasons: list = field(default_factory=list)
    sym_check: Any = None
    shape_guards: list[str] = field(default_factory=list)
    shape_guard_terms: list = field(default_factory=list)  # (text, sympy relation, value)
    alternatives: list = field(default_factory=list)
    dynamic_dims: dict = field(default_factory=dict)
    dynamic_fallback: str | None = None
    # value guards (frontend/value_guards.py): the Python values of tensors this entry was
    # traced with, in query order, (what, where) of each, and the entries of the same key
    # traced with other values (one list, shared by them)
    value_path: list = field(default_factory=list)
    value_sites: list = field(default_factory=list)
    value_group: list = field(default_factory=list)
    # per query of a data-dependent size traced as unbacked size symbols: the test of an
    # observed value (any size the symbols stand for passes); s<k> -> the op and its line
    value_accepts: dict = field(default_factory=dict)
    unbacked_sizes: dict = field(default_factory=dict)
    unbacked_fallback: str | None = None  # why data-dependent sizes were specialized

    def failed_guards(self, leaves) -> list[str]:
        """The shape guards (or the size >= 2 rule) this call's sizes break."""
        import torch

        from thunder_mlir.ir.symbolic import symbol

        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        sizes = [tensors[i].shape[d] for i, d in self.sym_sources]
        now = ", ".join(f"s{k}={n}" for k, n in enumerate(sizes))
        out = [f"s{k} = {n} < 2" for k, n in enumerate(sizes) if n < 2]
        values = {symbol(k): n for k, n in enumerate(sizes)}
        for text, rel, value in self.shape_guard_terms:
            if bool(rel.subs(values)) != value:
                out.append(f"{text if value else f'not ({text})'} is false for {now}")
        return out or ["(none)"]

    def rebuild(self, outs: list):
        """The user-visible output from the plan's flat output tensors."""
        if self._rebuild is None:
            self._rebuild = self._make_rebuild()
        return self._rebuild(outs)

    def concrete_consts(self, tensors) -> list:
        """``out_consts`` with the sizes of this call (the call's input ``tensors``, the
        unbacked sizes its run recorded) in place of the size symbols of
        ``symbolic_consts`` (frontend/unbacked_sizes.py ``concrete``)."""
        from thunder_mlir.frontend.unbacked_sizes import concrete

        sizes = [tensors[i].shape[d] for i, d in self.sym_sources]
        consts = list(self.out_consts)
        for pos in self.symbolic_consts:
            consts[pos] = concrete(consts[pos], sizes)
        return consts

    def rebuild_concrete(self, outs: list, tensors):
        """``rebuild`` for an entry with ``symbolic_consts``: their values at this call."""
        import torch.utils._pytree as torch_pytree

        leaves = self.concrete_consts(tensors)
        for pos, t in zip(self.out_tensor_positions, outs):
            leaves[pos] = t
        return torch_pytree.tree_unflatten(leaves, self.out_spec)

    def set_joint_layout(self, keep_outputs: bool, n_grads: int) -> None:
        """A gradient program's plan returns [outputs (keep_outputs)] + [n_grads
        gradients] (write-backs already removed by the caller): ``rebuild`` gives
        (outputs, [gradients]) or the gradients alone."""
        n_out = len(self.out_tensor_positions) if keep_outputs else 0
        plain = self._make_rebuild()
        if keep_outputs:
            self._rebuild = lambda outs: (plain(outs[:n_out]), list(outs[n_out:]))
        else:
            self._rebuild = lambda outs: list(outs[n_out:n_out + n_grads])

    def _make_rebuild(self):
        import torch.utils._pytree as torch_pytree

        spec, consts, positions = self.out_spec, self.out_consts, self.out_tensor_positions
        if spec.is_leaf() and positions == [0]:
            return lambda outs: outs[0]
        if spec.type is tuple and all(c.is_leaf() for c in spec.children()) and \
                positions == list(range(len(consts))):
            return tuple

        built = _builder(spec, consts, positions)
        if built is not None:
            return built

        def general(outs):
            leaves = list(consts)
            for pos, t in zip(positions, outs):
                leaves[pos] = t
            return torch_pytree.tree_unflatten(leaves, spec)
        return general

    def specialization(self) -> dict:
        """What this entry was specialized on, for ``cache_info`` (``autocast``: the
        caller's torch.autocast state, present when one was on)."""
        _, metas, grad, dtype, _ = self.key[:5]
        inputs = {}
        for path, m in zip(self.paths, metas):
            if m[0] == "tensor":
                inputs[path] = {"shape": tuple(m[1]), "dtype": m[2], "device": m[3],
                                "requires_grad": m[4]}
            else:
                inputs[path] = {"type": m[0].__name__, "value": m[1]}
        spec = {"inputs": inputs, "grad_enabled": grad, "default_dtype": dtype,
                "guards": {g.describe(): v for g, v in self.guards}}
        if self.dynamic_dims:  # dynamic shapes: the symbolic dims and the shape guards
            spec["dynamic_dims"] = dict(self.dynamic_dims)
            spec["shape_guards"] = list(self.shape_guards)
        if self.value_sites:  # "bool(tensor) at f.py:3: ..." -> the value traced with
            spec["value_guards"] = {f"{what} at {where}": value for (what, where), value
                                    in zip(self.value_sites, self.value_path)}
        if self.dynamic_fallback is not None:
            spec["static_because"] = self.dynamic_fallback
        if self.unbacked_sizes:  # data-dependent sizes traced as symbols
            spec["unbacked_sizes"] = dict(self.unbacked_sizes)
        if self.unbacked_fallback is not None:
            spec["values_specialized_because"] = self.unbacked_fallback
        if self.key[5] is not None:  # compiled inside a torch.autocast region
            spec["autocast"] = autocast.describe_state(self.key[5])
        return spec


class FunctionCache:
    """Entries of one jitted function; counts hits/misses and why each miss happened."""

    def __init__(self, name: str, recompile_limit: int = 8, enabled: bool = True):
        self.name = name
        self.recompile_limit = recompile_limit
        self.enabled = enabled
        self.entries: dict[Any, CacheEntry] = {}
        self.schema: list[Guard] = []
        self._guard_key = key_function(self.schema)  # the schema's current key values
        self.hits = 0
        self.misses = 0
        # the latest MAX_REASONS (a function re-traced on every call must not grow it)
        self.reasons: collections.deque[str] = collections.deque(maxlen=MAX_REASONS)
        self._last_key = None
        self._last_paths: list[str] = []
        self._hit: tuple | None = None  # (key, entry) of the last hit (``lookup``)
        # value guards (frontend/value_guards.py): "what at where" -> misses at that guard
        self.value_guard_misses: dict[str, int] = {}

    def key(self, spec, metas: tuple) -> tuple:
        return (spec, metas, torch.is_grad_enabled(), torch.get_default_dtype(),
                self._guard_key(), autocast.state_key() if _any_autocast() else None)

    def lookup(self, key) -> CacheEntry | None:
        """The entry of ``key``, None on a miss. The entry of the last hit is checked first,
        by ``==`` alone: the dict lookup would hash the whole key (~60 tensor metadata tuples
        for a decode step) and then compare it as well. ``insert``, through which alone
        ``entries`` changes (a new entry, a replaced one, the clear of a grown guard
        schema), forgets it."""
        if not self.enabled:
            return None
        hit = self._hit
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            entry = self.entries.get(key)
        except TypeError:  # an unhashable Python value among the inputs
            return None
        if entry is not None:
            self._hit = (key, entry)
        return entry

    def promote(self, key, entry: CacheEntry) -> None:
        """Make ``entry`` (of ``key``'s value group: value guards, value_specialization.py)
        the one ``key`` looks up first, after its value guards held at a call where the
        looked-up entry's failed: the next call of the same kind hits it directly."""
        if self.enabled and key in self.entries and self.entries[key] is not entry:
            self.entries[key] = entry
            self._hit = None

    def insert(self, key, entry: CacheEntry, paths: list[str], guards: list[tuple[Guard, Any]]):
        """Record a compiled entry; extends the guard schema with new sources."""
        self._hit = None
        self.misses += 1
        if self.misses > 1:
            reason = self._why(key, paths)
            self.reasons.append(reason)
            if self.enabled and self.misses - 1 > self.recompile_limit:
                from thunder_mlir.frontend.locations import user_stacklevel

                warnings.warn(f"{self.name} has recompiled {self.misses - 1} times (limit "
                              f"{self.recompile_limit}); last recompile because {reason}. A value "
                              "that changes on every call should be a tensor input.",
                              RecompileWarning, stacklevel=user_stacklevel())
        new_sources = [g for g, _ in guards if not any(g.same_source(s) for s in self.schema)]
        if new_sources:
            self.schema.extend(new_sources)
            self._guard_key = key_function(self.schema)
            # keys of existing entries lack the new sources: they can no longer be hit
            self.entries.clear()
            key = key[:4] + (self._guard_key(),) + key[5:]
        entry.key, entry.paths, entry.guards = key, paths, guards
        if self.enabled:
            try:
                self.entries[key] = entry
            except TypeError:
                pass
        self._last_key, self._last_paths = key, paths

    def _why(self, key, paths) -> str:
        """Why ``key`` missed: what differs from the nearest compiled key (fewest
        differences; the latest compiled on a tie), first difference first."""
        candidates = [self._last_key] if self._last_key is not None else []
        candidates += [k for k in reversed(list(self.entries)) if k is not self._last_key]
        if not candidates:
            return "the cache was empty"
        # the nearest of the same input structure first (an input object's new attribute
        # is one difference, but says less than the tensor shapes that changed with it)
        diffs = min((self._diffs(old, key, paths) for old in candidates),
                    key=lambda d: (d[:1] == [_STRUCTURE], len(d)))
        if diffs:
            return diffs[0]
        return "caching is disabled" if not self.enabled else "the previous entry was evicted"

    def _diffs(self, old, key, paths) -> list[str]:
        if old[0] != key[0]:
            return [_STRUCTURE]
        out = [f"input {path} changed: {_meta_str(a)} -> {_meta_str(b)}"
               for path, a, b in zip(paths, old[1], key[1]) if a != b]
        if old[2] != key[2]:
            out.append(f"grad mode changed: {old[2]} -> {key[2]}")
        if old[3] != key[3]:
            out.append(f"default dtype changed: {old[3]} -> {key[3]}")
        if old[5] != key[5]:
            out.append(f"torch.autocast state changed: {autocast.describe_state(old[5])} -> "
                       f"{autocast.describe_state(key[5])}")
        out += [f"{g.describe()} is another object" if g.by_identity else
                f"{g.describe()} is of another type: {b.__qualname__}" if g.by_type else
                f"{g.describe()} changed: {fmt(a)} -> {fmt(b)}"
                for g, a, b in zip(self.schema, old[4], key[4]) if a != b]
        if not out and len(old[4]) != len(key[4]):
            out.append("new guards were recorded")
        return out


def _meta_str(m) -> str:
    if m[0] == "tensor":
        shape = tuple("?" if s is None else s for s in m[1])  # ?: a dynamic dim
        return f"tensor(shape={shape}, dtype={m[2]}, device={m[3]}, requires_grad={m[4]})"
    return f"{m[0].__name__} {m[1]!r}"
