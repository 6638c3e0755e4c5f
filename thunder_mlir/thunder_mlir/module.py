"""``ThunderModule``: an ``nn.Module`` whose forward runs a thunder_mlir program.

Parameters and buffers are *inputs* of the compiled program (swapped in as
``torch.func.functional_call`` does: frontend/reparametrize.py), never constants: an
optimizer's in-place update is seen by the next call without re-tracing. The training
flags of all submodules are part of the cache key, so ``eval()``/``train()`` select the
matching program (e.g. dropout on or off).
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.parameter import is_lazy

from thunder_mlir.error_reporting import error_boundary
from thunder_mlir.errors import PerformanceWarning
from thunder_mlir.frontend import module_attributes, torch_internals
from thunder_mlir.frontend.guards import active_recorder
from thunder_mlir.frontend.reparametrize import reparametrized
from thunder_mlir.frontend.sharp_edges import freeze_containers
from thunder_mlir.frontend.tracing import _local as _tracing_state
from thunder_mlir.function import ThunderFunction


def _install(root, lifted: dict) -> list:
    """Put each lifted attribute's traced value (``{path: value}``; tensors are proxies)
    on its holder for the trace (lists and dicts as ``TracedList``/``TracedDict``, which
    refuse mutation), telling the active recorder; returns what ``_restore`` needs."""
    undo = []
    rec = active_recorder()
    for path, value in lifted.items():
        if value is module_attributes.NotLifted:
            continue
        holder = module_attributes.resolve(root, path[:-1])
        if holder is module_attributes.MISSING:
            continue
        d = object.__getattribute__(holder, "__dict__")
        name = path[-1]
        undo.append((d, name, d.get(name, module_attributes.MISSING)))
        traced = freeze_containers(value)
        d[name] = traced  # (not setattr: the recorder would take it for the program's write)
        if rec is not None:
            rec.installed[(id(holder), name)] = traced
    return undo


def _restore(undo: list) -> None:
    """Give each lifted attribute its own value back after the trace (``_install``)."""
    for d, name, old in reversed(undo):
        if old is module_attributes.MISSING:
            d.pop(name, None)
        else:
            d[name] = old


def _functional_forward(module: torch.nn.Module, training_flags, state, lifted, args,
                        kwargs):
    # training_flags is unused in the body: as an input it is part of the cache key.
    # lifted: {attribute path: value} of the tensors the module holds as plain attributes
    # (frontend/module_attributes.py), put on their holders while the forward is traced.
    # (reparametrized: torch.func.functional_call's swap, restoring a submodule reachable
    # under two names correctly)
    undo = _install(module, lifted)
    try:
        with reparametrized(module, state):
            return module(*args, **kwargs)
    finally:
        _restore(undo)


_XLA_ALIGNMENT = 64  # bytes: what XLA's CPU client imports without a copy (torch allocates so)


def _storage_users(t: torch.Tensor) -> int | None:
    """How many tensors (and Python storage objects) hold ``t``'s storage, besides the
    temporary storage object this asks through; None where torch offers no count."""
    try:
        return torch_internals.storage_use_count(t) - 1
    except (AttributeError, RuntimeError):
        return None


def align_for_xla(module_name: str, tensors) -> None:
    """Move each CPU parameter or buffer in ``tensors`` whose data is not 64-byte aligned,
    and whose storage no other tensor holds, into a fresh aligned copy: ``t.data =
    t.clone()`` (the same Parameter object, bitwise the same values).

    Why: XLA's CPU client imports a DLPack tensor without a copy only when its data is
    aligned; otherwise it copies it at every call. Hugging Face ``from_pretrained`` leaves
    weights in storages over the memory-mapped safetensors file at unaligned addresses
    (all-MiniLM-L6-v2: 103 of 105 tensors, 90 MB copied per forward, 1.6x eager's time).
    No tensor can tell: a storage held by no other tensor has no tensor alias whose writes
    eager would show. A tensor whose storage is shared (a view, ``p.data`` or a
    ``state_dict()`` tensor still held, tied weights in one storage) keeps it, is copied at
    every call, and a PerformanceWarning names how many bytes that costs and what to do.
    One alias torch does not count: memory owned outside torch (``torch.from_numpy``'s
    array, a ``frombuffer`` object, a writable memory map). After the move, writes through
    that owner no longer reach the parameter (docs/sharp_edges.md, "Parameters in memory
    owned outside torch")."""
    shared, nbytes = [], 0
    for name, t in tensors:
        if t is None or t.device.type != "cpu" or is_lazy(t) or not t.numel() \
                or t.data_ptr() % _XLA_ALIGNMENT == 0:
            continue
        if _storage_users(t) == 1 and t.is_contiguous():
            t.data = t.detach().clone()
        else:
            shared.append(name)
            nbytes += t.numel() * t.element_size()
    if shared:
        warnings.warn(
            f"{len(shared)} parameters/buffers of {module_name} ({nbytes / 2**20:.1f} MiB; "
            f"{', '.join(shared[:3])}{', ...' if len(shared) > 3 else ''}) are not "
            f"{_XLA_ALIGNMENT}-byte aligned and share their memory with other tensors, so "
            "XLA copies them at every call. Give them memory of their own (for p in "
            "module.parameters(): p.data = p.data.clone()) before jit, or drop the other "
            "references (views, state_dict() tensors) to them.", PerformanceWarning,
            stacklevel=4)


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
               "_backward_pre_hooks")


def _hook_dicts(sub: torch.nn.Module) -> list[dict]:
    return [getattr(sub, n) for n in _HOOK_DICTS]


def _global_hooks() -> list[dict]:
    """torch's global module hooks (``register_module_forward_hook`` and friends)."""
    m = torch.nn.modules.module
    return [m._global_forward_hooks, m._global_forward_pre_hooks,
            m._global_backward_hooks, m._global_backward_pre_hooks]


def _global_backward_hooks() -> bool:
    m = torch.nn.modules.module
    return bool(m._global_backward_hooks or m._global_backward_pre_hooks)


def _size_is(name: str, n: int) -> str:
    """The expression ``len(name) == n`` (``not name`` for 0: no call)."""
    return f"len({name}) == {n}" if n else f"not {name}"


class _ModuleState:
    """A module tree's parameters, buffers (by qualified name) and training flags, read on
    every call
    without walking the tree: ``named_parameters``/``modules`` recurse through generators
    (~30 us per call for five modules). The tree's structure — each submodule's
    ``_parameters``/``_buffers``/``_modules`` dicts, their sizes, its children and its hook
    dicts — is checked on every call and the tables rebuilt when it changed, so a parameter,
    buffer, submodule or hook added, removed or replaced is seen; a tensor assigned to an
    existing name is read afresh each call anyway.

    Each parameter or buffer *slot* (an attribute of a submodule object) is one entry:
    a tensor held by two submodules (tied weights) is two entries, as in
    ``named_parameters(remove_duplicate=False)``, but a submodule reachable under two
    names (peft's prompt-learning models hold the base model's embedding also as
    ``word_embeddings``) contributes its slots once, under its first name (as
    ``named_modules()``): one program input per slot, so a buffer the forward writes in
    place is one input, not two overlapping ones (which the program would refuse).

    The check and the reads are one generated function (``current``), remade with the
    tables: one straight-line expression per call instead of loops over the tree."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.generation = -1  # rebuilds so far: part of the cache key (a new structure)
        # the attribute paths (from the module) of the tensors it holds as plain attributes
        # that its programs read: inputs after the parameters and buffers, read at every
        # call (frontend/module_attributes.py), in sorted order (optree's, for their dict)
        self.lifted: tuple[tuple[str, ...], ...] = ()
        self._build()

    def _build(self) -> None:
        named = list(self.module.named_modules(remove_duplicate=False))
        self._structure = [(sub, sub._parameters, sub._buffers, sub._modules,
                            len(sub._parameters), len(sub._buffers), len(sub._modules))
                           for _, sub in named]
        self._children = [(sub._modules, k, child) for _, sub in named
                          for k, child in sub._modules.items()]

        unique = list(self.module.named_modules())  # (each submodule once: its slots once)

        def entries(attr):
            return [(f"{prefix}.{k}" if prefix else k, getattr(sub, attr), k)
                    for prefix, sub in unique for k in getattr(sub, attr)]
        self._entries = entries("_parameters") + entries("_buffers")
        align_for_xla(type(self.module).__name__, [(n, d[k]) for n, d, k in self._entries])
        self._flag_modules = list(self.module.modules())
        self.uninitialized = any(is_lazy(d[k]) for _, d, k in self._entries)
        # hooks run while the forward is traced: a hook added or removed is a new structure
        self._hook_dicts = [d for _, sub in named for d in _hook_dicts(sub)] + _global_hooks()
        self._hooks = [(d, len(d), next(reversed(d)) if d else None) for d in self._hook_dicts]
        backward = [name or type(self.module).__name__ for name, sub in named
                    if sub._backward_hooks or sub._backward_pre_hooks]
        self.backward_hooks = backward or (["(global)"] if _global_backward_hooks() else [])
        self.generation += 1
        self._make_reader()

    def _make_reader(self) -> None:
        """Generate ``current`` for the present structure and the present set of entries
        holding None (``register_parameter('bias', None)``): such an entry is no input, as
        in ``read``'s dict; a value becoming or ceasing to be None makes the generated
        function return None (``current`` remakes it: another ``token``, not another
        generation)."""
        env: dict = {}
        checks = []
        for i, (sub, p, b, m, np_, nb, nm) in enumerate(self._structure):
            env[f"s{i}"], env[f"p{i}"], env[f"b{i}"], env[f"m{i}"] = sub, p, b, m
            checks.append(f"s{i}._parameters is p{i} and s{i}._buffers is b{i} and "
                          f"s{i}._modules is m{i} and {_size_is(f'p{i}', np_)} and "
                          f"{_size_is(f'b{i}', nb)} and {_size_is(f'm{i}', nm)}")
        # the hook dicts empty now (nearly all of them): one C-level any() over a tuple
        # instead of a test each (140 in the tiny GPT-2 of examples/generate.py)
        env["empty_hooks"] = tuple(d for d, n, _ in self._hooks if not n)
        checks.append("not any(empty_hooks)")
        for i, (d, n, last) in enumerate(self._hooks):
            if n:
                env[f"h{i}"], env[f"hl{i}"] = d, last
                checks.append(f"len(h{i}) == {n} and next(reversed(h{i})) == hl{i}")
        for i, (d, k, child) in enumerate(self._children):
            env[f"c{i}"], env[f"cd{i}"] = child, d
            checks.append(f"cd{i}[{k!r}] is c{i}")
        # parameters and buffers in sorted name order: optree's order for the dict ``read``
        # returns, so the leaves are those of flattening (flags, state, args, kwargs)
        order = sorted(range(len(self._entries)), key=lambda j: self._entries[j][0])
        present, values = [], []
        for j in order:
            name, d, k = self._entries[j]
            env[f"d{j}"] = d
            if d[k] is None:  # no input: must stay so
                checks.append(f"d{j}[{k!r}] is None")
            else:
                present.append(name)
                values.append(f"v{j}")
                checks.append(f"(v{j} := d{j}[{k!r}]) is not None")
        for i, sub in enumerate(self._flag_modules):
            env[f"f{i}"] = sub
        flags = "".join(f"f{i}.training, " for i in range(len(self._flag_modules)))
        body = "\n            and ".join(checks) or "True"
        src = (f"def current():\n    try:\n        if not ({body}):\n            return None\n"
               f"    except KeyError:  # a child or an entry removed (and another added)\n"
               f"        return None\n"
               f"    return ({self.generation}, {flags}), ({''.join(v + ', ' for v in values)})\n")
        exec(src, env)  # noqa: S102 - generated from the tables above
        self._current = env["current"]
        # the cache-key form of the module's input structure (function.ThunderFunction
        # .call_module): the generation and the names of the parameters and buffers given
        self.token = (self.generation, tuple(present))
        self.flag_metas = ((), ())  # (flags, their key metadata), cached by the caller

    def current(self) -> tuple[tuple, tuple]:
        """(structure generation and training flag of each module, the parameters and
        buffers that are not None in sorted qualified-name order); ``token`` names the
        structure they have."""
        while True:
            got = self._current()
            if got is not None:
                return got
            if self._unchanged():  # only an entry became or ceased to be None
                self._make_reader()
            else:
                self._build()

    def still_uninitialized(self) -> bool:
        """Whether a parameter or buffer is still uninitialized (a Lazy module before its
        first call); ``uninitialized`` stays False once they are all materialized."""
        self.uninitialized = any(is_lazy(d[k]) for _, d, k in self._entries)
        return self.uninitialized

    def _unchanged(self) -> bool:
        for sub, p, b, m, np_, nb, nm in self._structure:
            if (sub._parameters is not p or sub._buffers is not b or sub._modules is not m
                    or len(p) != np_ or len(b) != nb or len(m) != nm):
                return False
        for d, n, last in self._hooks:
            if len(d) != n or (n and next(reversed(d)) != last):
                return False
        return all(d.get(k) is child for d, k, child in self._children) and \
            all(k in d for _, d, k in self._entries)  # (a name removed and another added)

    def read(self) -> tuple[tuple, dict, dict]:
        """(structure generation and training flag of each module, {qualified name:
        parameter or buffer}, {lifted attribute path: its value now})."""
        flags, _ = self.current()
        state = {}
        for name, d, k in self._entries:
            v = d[k]
            if v is not None:
                state[name] = v
        return flags, state, self.lifted_values()

    def lift(self, paths) -> None:
        """Make the attributes at ``paths`` program inputs from the next call on
        (``LiftNeeded``), with every public tensor attribute of the tree's modules
        (``module_attributes.module_tensor_attributes``: one more trace for all of them, not
        one per layer's cache); raises RuntimeError if ``paths`` are all inputs already (a
        tensor the tracer cannot reach through them: a bug)."""
        if not set(paths) - set(self.lifted):
            raise RuntimeError(f"thunder_mlir: the attributes {sorted(paths)} are program "
                               "inputs already, yet their tensors reached the trace")
        found = module_attributes.module_tensor_attributes(self.module)
        self.lifted = tuple(sorted(set(self.lifted) | set(paths) | set(found)))

    def lifted_values(self) -> dict:
        """{lifted attribute path: its value now, or ``NotLifted``}, in sorted path order."""
        root = self.module
        return {p: module_attributes.current_value(root, p) for p in self.lifted}

    def watched(self) -> list[tuple[torch.nn.Module, str, tuple[str, ...]]]:
        """Every module of the tree with a description and its path from the module: the
        objects whose attribute reads are guarded (guards.py) and whose tensor attributes
        are lifted (frontend/module_attributes.py)."""
        return [(sub, f"module '{name}' ({type(sub).__name__})" if name else
                 f"the module ({type(sub).__name__})", tuple(name.split(".")) if name else ())
                for name, sub in self.module.named_modules(remove_duplicate=False)]


_WRAPPER_ATTRIBUTES = frozenset({"_original", "_state", "_fn"})  # ThunderModule's own


class ThunderModule(torch.nn.Module):
    """Wraps ``module``; ``forward`` has the original's signature. ``_original`` is the
    wrapped module (its parameters are this module's parameters).

    Attributes the wrapper does not have are the original's, read and assigned through it
    (as Lightning Thunder's ThunderModule): ``jm.set_kv_cache(batch_size=1)``,
    ``jm.max_seq_length = 64`` (litgpt's ``generate`` reads ``model.max_seq_length``) act
    on the wrapped module. Raises AttributeError for a name neither has."""

    def __init__(self, module: torch.nn.Module, **jit_options):
        super().__init__()
        self._original = module
        self._state = _ModuleState(module)
        self._fn = ThunderFunction(functools.partial(_functional_forward, module), **jit_options)
        self._fn.watch = self._state.watched

    def signature_target(self):
        """The user's callable whose signature a call must fit: the module's ``forward``."""
        return self._original.forward

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)  # (this wrapper's parameters and submodules)
        except AttributeError:
            original = self.__dict__.get("_modules", {}).get("_original")
            if original is None:
                raise
            return getattr(original, name)

    def __setattr__(self, name: str, value) -> None:
        original = self.__dict__.get("_modules", {}).get("_original")
        if original is not None and name not in _WRAPPER_ATTRIBUTES and \
                name not in self.__dict__ and name not in self.__dict__["_modules"] and \
                hasattr(original, name):
            setattr(original, name, value)  # an attribute of the wrapped module
        else:
            super().__setattr__(name, value)

    @error_boundary
    def __call__(self, *args, **kwargs):  # errors show the user's frames, not torch's
        return super().__call__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        current = self._state.current()
        if self._state.backward_hooks:
            raise NotImplementedError(
                f"backward hooks on {', '.join(self._state.backward_hooks)}: thunder_mlir "
                "computes the backward in compiled code, where Python hooks on module "
                "gradients cannot run. Remove them (register_full_backward_hook), or hook the "
                "result's gradient with a tensor hook on the output instead.")
        if self._state.uninitialized and self._state.still_uninitialized():
            # A Lazy module (nn.LazyLinear, ...) materializes its parameters in a forward
            # pre-hook, from the first input's shape, and initializes them from torch's
            # generator: no program can take them as inputs before that. That call runs
            # eagerly (hooks, initialization and result exactly eager's); the next ones,
            # with every parameter materialized, are compiled.
            return self._original(*args, **kwargs)
        return _call_lifting(self._fn, self._state, current, args, kwargs)


def _functional_method(method, training_flags, state, lifted, args, kwargs):
    # as _functional_forward, for a method called directly (no module hooks run, as eager)
    undo = _install(method.__self__, lifted)
    try:
        with reparametrized(method.__self__, state):
            return method(*args, **kwargs)
    finally:
        _restore(undo)


class ThunderMethod:
    """What ``jit`` returns for a bound method of an ``nn.Module`` (``m.forward =
    thunder_mlir.jit(m.forward)``, the Hugging Face ``generate()`` recipe): calls the method
    with the module's parameters and buffers as program inputs, as ``ThunderModule`` does
    for ``forward`` (its training flags keyed, its attribute reads guarded). ``_fn`` is the
    ThunderFunction, ``_method`` the original bound method."""

    def __init__(self, method, **jit_options):
        module = method.__self__
        self._method = method
        self._state = _ModuleState(module)
        self._fn = ThunderFunction(functools.partial(_functional_method, method), **jit_options)
        self._fn.watch = self._state.watched
        functools.update_wrapper(self, method)

    def signature_target(self):
        """The user's callable whose signature a call must fit: the method."""
        return self._method

    def __call__(self, *args, **kwargs):
        if getattr(_tracing_state, "trace", None) is not None:  # inlined into a traced caller
            return self._method(*args, **kwargs)
        current = self._state.current()
        if self._state.backward_hooks:
            raise NotImplementedError(
                f"backward hooks on {', '.join(self._state.backward_hooks)}: thunder_mlir "
                "computes the backward in compiled code, where Python hooks on module "
                "gradients cannot run. Remove them (register_full_backward_hook).")
        if self._state.uninitialized and self._state.still_uninitialized():
            return self._method(*args, **kwargs)  # Lazy parameters: this call runs eagerly
        return _call_lifting(self._fn, self._state, current, args, kwargs)


def _call_lifting(fn: ThunderFunction, state: _ModuleState, current, args, kwargs):
    """``fn.call_module``; where the trace finds tensors held as plain attributes of the
    module or of objects it holds (``LiftNeeded``), they become program inputs and the
    call is traced again (frontend/module_attributes.py)."""
    while True:
        try:
            return fn.call_module(state, current, args, kwargs)
        except module_attributes.LiftNeeded as need:
            state.lift(need.paths)
            current = state.current()

