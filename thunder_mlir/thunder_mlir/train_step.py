"""A whole training step as one compiled program: ``thunder_mlir.jit(step)(model, opt,
*batch)`` where ``step`` runs the model, calls ``loss.backward()``, ``opt.step()`` and
``opt.zero_grad()`` (docs/optim.md, issue 27).

``TrainStep`` is what a jitted function becomes when it is called with a ``torch.optim``
optimizer among its arguments. Each call:

1. **host, before**: the parameters of the ``nn.Module`` arguments (a jitted module: its
   original's) and of the optimizers, their buffers, the present ``.grad`` tensors, the
   optimizers' existing state tensors, the tensors the modules hold as plain attributes
   (lifted as ``jit(module)`` lifts them: frontend/module_attributes.py; an exported step
   refuses them), and per parameter group a table of per-step scalars
   (``ir/optimizers.py``'s ``scalars``, Python doubles rounded once, computed for every
   parameter of the group as if it stepped: its counter + 1) become the inputs of one
   jitted program (``_program``). The layout (which ``.grad`` and state exist, the rules'
   options, the argument objects' identities) is a Python value of the cache key; the
   scalars are run-time values, so ``lr_scheduler.step()`` or editing ``param_groups``
   does not re-trace.
2. **the program**: the user's ``step`` traced with the parameters swapped for proxies
   (``frontend/reparametrize.py``, as ``torch.func.functional_call``) and
   ``opt.step``/``opt.zero_grad`` replaced by their traced forms. The trace keeps a
   ``.grad`` table (``_GradTable``, installed as ``trace.training``): ``p.grad`` reads
   and writes go to it;
   ``loss.backward()`` differentiates the program traced so far
   (``transforms/inline_backward.py``) and accumulates into it as torch's
   ``AccumulateGrad`` does (stored where ``.grad`` is None, added in place otherwise);
   ``opt.zero_grad()`` sets entries to None (or zeros them in place); ``opt.step()``
   applies the optimizer's rule to every parameter whose entry is not None, as
   ``torch.optim`` skips the others. Parameters, in-place accumulated ``.grad`` tensors
   and existing state are written in place (mutated inputs: function.py writes them
   back); new ``.grad`` tensors are outputs. A parameter without state gets zeros made on
   the host (SGD's first momentum buffer is selected from the gradient by the scalar
   ``first``), so the first step and the later ones share one program.
3. **host, after**: ``p.grad`` set to the new tensors (None where the step ended with it
   None), the state kept for parameters that stepped for the first time, and their
   step counters advanced (``torch._foreach_add_``), as torch.optim's ``_init_group`` and
   ``_single_tensor_adam`` leave them.

A **custom optimizer** (a ``torch.optim.Optimizer`` subclass with its own ``step``,
``optimizers.custom_step``) has no rule: its ``step`` itself is traced
(``_TracedOptimizer``) with ``param_groups`` holding the parameters' proxies and
``opt.state`` keyed by them. Its tensors (state, tensor hyperparameters) are program
inputs, written in place where the step mutates them; tensors it stores anew are program
outputs the host puts into ``opt.state``. Its other values (float ``lr``, betas, a Python
step count) are guarded: part of the cache key, so an edit re-traces and no value is ever
stale; the values the step leaves are set on the host after the run.

The returned values are the step's, detached (eager's loss still has a ``grad_fn`` whose
graph ``backward()`` has freed; nothing can be differentiated through it again).

Refused (``UnsupportedInputError``/``NotImplementedError`` naming the cause): torch.optim
classes and options without a rule (``ir/optimizers.py``), ``opt.step(closure)``,
optimizer step hooks, ``opt.step()`` twice in one step, reading the ``opt.param_groups``
hyperparameters of an optimizer with a rule in the step (their values would be baked in;
a custom optimizer's are guarded), ``backward`` with ``gradient=``,
``inputs=`` or ``create_graph=True``, batch tensors that require grad (eager would write
their ``.grad``), a ``loss.backward()`` on a loss inside a ``torch.cond`` region.
"""

from __future__ import annotations

import collections
import copy
import operator
import threading

import torch
import torch.utils._pytree as torch_pytree
from torch.optim import optimizer as _torch_optimizer

from thunder_mlir.errors import ThunderError, TorchOpRuntimeError, UnsupportedError, \
    UnsupportedInputError
from thunder_mlir.frontend import differentiability
from thunder_mlir.frontend.reparametrize import reparametrized
from thunder_mlir.function import ThunderFunction
from thunder_mlir.ir import optimizers
from thunder_mlir.ir.proxy import TensorProxy
from thunder_mlir.optimizer import advance_step_counters, check_parameters

_ACTIVE = threading.local()  # the objects of the call being traced (``_program``)


class _Call:
    """The Python objects of one call that the program cannot take as inputs: the step
    function, the argument template (modules and optimizers in place), the modules'
    parameter and buffer names (-> index), the optimizers."""

    def __init__(self, fn, args, kwargs, modules, module_names, optimizers_, params,
                 root=None):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.modules, self.module_names = modules, module_names
        self.optimizers, self.params = optimizers_, params
        self.root = root  # the modules as one tree (``TrainStep._root``): lifted paths' root


class PreparedCall:
    """One call of a ``TrainStep`` prepared on the host (``TrainStep.prepare``):
    ``inputs``, the arguments of its program (``_program``: layout, parameters, buffers,
    present ``.grad`` tensors, optimizer states, scalar tables, the other arguments);
    ``objects``, the Python objects the trace reads (``_Call``); ``params``: the
    parameters, in the program's order; ``optimizers``; ``states``: per optimizer its
    state tensors; ``fresh``: per optimizer the state made for parameters without one."""

    def __init__(self, inputs, objects, params, optimizers_, states, fresh):
        self.inputs, self.objects, self.params = inputs, objects, params
        self.optimizers, self.states, self.fresh = optimizers_, states, fresh

    def traced_with(self, fn: ThunderFunction):
        """``fn(*inputs)`` (a ThunderFunction of ``_program``) with this call's objects
        visible to the trace (``_program`` reads them)."""
        _ACTIVE.call = self.objects
        try:
            return fn(*self.inputs)
        finally:
            _ACTIVE.call = None


class _GradTable:
    """The ``.grad`` of every parameter while the step is traced: parameter index ->
    TensorProxy or None. ``owns(x)``: ``x`` is a parameter's proxy or the caller's
    parameter itself (the optimizer's ``param_groups`` hold those)."""

    def __init__(self, trace, proxies, real, grads):
        self.trace = trace
        self.proxies = proxies
        self.index = {id(p): i for i, p in enumerate(proxies)}
        self.index.update({id(p): i for i, p in enumerate(real)})
        self.grads = list(grads)
        self.inputs = list(grads)  # the .grad tensors given to the program (or None)
        self.backwards = 0  # loss.backward() calls traced
        self.freed: list = []  # losses backwarded without retain_graph (eager frees the graph)
        self.freed_nodes: set = set()  # their nodes in eager's twin graph (differentiability)

    def owns(self, x) -> bool:
        return id(x) in self.index

    def get_grad(self, x):
        return self.grads[self.index[id(x)]]

    def set_grad(self, x, v):
        i = self.index[id(x)]
        p = self.proxies[i]
        if v is not None:
            if type(v) is not TensorProxy:
                raise UnsupportedInputError(
                    "p.grad = <a tensor not computed in the step> inside a compiled training "
                    "step is not supported; compute it from the step's inputs")
            if tuple(v.shape) != tuple(p.shape) or v.dtype != p.dtype:
                raise _eager_error("assigned grad has data of a different size or type")
        self.grads[i] = v

    def backward(self, loss, gradient, retain_graph, create_graph, inputs):
        """``loss.backward()`` (torch/csrc/autograd/functions/accumulate_grad.h: a leaf's
        ``.grad`` is the new gradient where it was None, else ``grad += new`` in place)."""
        from thunder_mlir.transforms.inline_backward import inline_gradients

        if gradient is not None or inputs is not None or create_graph:
            raise NotImplementedError(
                "loss.backward() inside a compiled training step supports no gradient=, "
                "inputs= or create_graph=True arguments")
        if type(loss) is not TensorProxy or not loss.requires_grad:
            raise _eager_error("element 0 of tensors does not require grad and does not "
                               "have a grad_fn")
        if loss.numel() != 1:
            raise _eager_error("grad can be implicitly created only for scalar outputs")
        if not loss.dtype.is_floating_point:
            raise _eager_error("grad can be implicitly created only for real scalar outputs")
        # eager's graph for this loss (its twin): a node an earlier backward freed, with
        # tensors saved, raises; so does a saved tensor written in place since it was saved
        nodes = differentiability.backward_nodes(loss)
        if nodes is None:  # (no twin: the loss itself backwarded before)
            freed = any(loss is x for x in self.freed)
        else:
            freed = any(n in self.freed_nodes and differentiability.saves_tensors(n)
                        for n in nodes)
        if freed:
            raise _eager_error(  # eager: the first backward freed the graph
                "Trying to backward through the graph a second time (or directly access "
                "saved tensors after they have already been freed). Specify "
                "retain_graph=True if you need to backward through the graph a second time")
        stale = differentiability.backward_error([loss])
        if stale is not None:
            raise _eager_error(stale)
        if not retain_graph:
            self.freed.append(loss)
            self.freed_nodes.update(nodes or ())
        leaves = [i for i, p in enumerate(self.proxies) if p.requires_grad]
        self.backwards += 1
        trace = self.trace
        with trace.location_of_user_line():
            try:
                grads = inline_gradients(trace.module, trace.func_op, loss.value,
                                         [self.proxies[i].value for i in leaves],
                                         before_grad(trace.device),
                                         save_materialized(trace.device))
            except RuntimeError as e:  # eager's error: an op without a derivative
                if isinstance(e, ThunderError):
                    raise
                raise _eager_error(str(e)) from None
        with torch.no_grad():
            for i, g in zip(leaves, grads):
                if g is None:
                    continue
                g = trace.make_proxy(g)
                if self.proxies[i].dtype != g.dtype:
                    g = g.to(self.proxies[i].dtype)
                if self.grads[i] is None:
                    self.grads[i] = g
                else:
                    self.grads[i].add_(g)


def before_grad(device):
    """The passes the pipeline's target (pipeline.Target) runs before ``grad``, as one
    callable on a module for ``inline_gradients``; None when there are none."""
    from thunder_mlir.pipeline import Target

    target = Target.of(device)
    if not target.fused_attention:
        return None
    from thunder_mlir.transforms import fused_attention

    return lambda module: fused_attention.run(module, device)


def save_materialized(device) -> bool:
    """The target's ``grad`` option ``save-materialized`` (pipeline.Target) for
    ``inline_gradients``."""
    from thunder_mlir.pipeline import Target

    return Target.of(device).save_materialized


def gradients(loss: TensorProxy, params: list[TensorProxy]) -> list[TensorProxy | None]:
    """``loss.backward()`` on parameters whose ``.grad`` is None, inside the trace being
    built: the gradient of each of ``params`` (proxies of the trace's inputs, requiring
    grad), None where ``loss`` (0-d, floating point) does not depend on it, as eager
    leaves ``.grad``. The code a compiled step's ``loss.backward()`` runs
    (``_GradTable.backward``: the program traced so far differentiated by the ``grad``
    and ``joint`` passes, transforms/inline_backward.py); ``distributed.train_step``
    builds its step with it. Raises TorchOpRuntimeError with eager's message where eager's
    backward raises."""
    from thunder_mlir.frontend.tracing import current_trace

    trace = current_trace()
    table = _GradTable(trace, params, params, [None] * len(params))
    saved, trace.training = trace.training, table
    try:
        loss.backward()  # (reaches table.backward as a step's call does: autograd_attributes)
    finally:
        trace.training = saved
    return table.grads


class _TracedGroup(dict):
    """A ``param_groups`` entry while the step is traced: its ``params`` can be read, its
    hyperparameters cannot (their value would be baked into the program, and a later
    change not seen: the compiled ``opt.step()`` reads them on the host instead)."""

    def _refuse(self, key):
        from thunder_mlir.frontend.locations import describe_frame, user_frame

        raise UnsupportedError(
            f"{describe_frame(user_frame())}\n  reading opt.param_groups[i][{key!r}] inside "
            "a compiled training step is not supported: its value would be baked into the "
            "program. Read it outside and pass it as a tensor argument")

    def __getitem__(self, key):
        if key != "params":
            self._refuse(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        if key != "params":
            self._refuse(key)
        return dict.get(self, key, default)


def _eager_error(message: str) -> TorchOpRuntimeError:
    """Eager's RuntimeError ``message`` for the user's line (a TorchOpError: shown as is)."""
    from thunder_mlir.frontend.locations import describe_frame, user_frame

    return TorchOpRuntimeError(f"{describe_frame(user_frame())}\n  {message}")


def _refuse_hooks(opt) -> None:
    if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or \
            _torch_optimizer._global_optimizer_pre_hooks or \
            _torch_optimizer._global_optimizer_post_hooks:
        raise UnsupportedInputError(
            f"{_opt_name(opt)}: optimizer step hooks cannot run inside a compiled training "
            "step (supported there: the step itself, of torch.optim.SGD, Adam, AdamW or a "
            "custom subclass whose step() is plain tensor code); remove them, "
            "or compile only the model (thunder_mlir.jit(model)) and the update "
            "(thunder_mlir.jit(opt.step))")




def _guard_key(v, where: str):
    """The cache-key form of a non-tensor value the traced optimizer step reads (a
    hyperparameter or a Python number in ``opt.state``): its type and exact value, so a
    change re-traces (never a stale baked value). Raises UnsupportedInputError for other
    types (their changes could not be seen)."""
    if v is None or isinstance(v, (bool, int, str)):
        return (type(v).__name__, v)
    if isinstance(v, float):
        return ("float", repr(v))  # exact; nan == nan, -0.0 != 0.0
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_guard_key(x, where) for x in v))
    if isinstance(v, (torch.dtype, torch.device)):
        return (type(v).__name__, str(v))
    raise UnsupportedInputError(
        f"{where} is a {type(v).__module__}.{type(v).__qualname__}; a traced optimizer "
        "step supports tensors, numbers, strings, None, dtypes, devices and tuples/lists "
        "of those in param_groups and opt.state")


_NOT_KEYED = ("not keyed",)
_PATCHED = ("param_groups", "state", "step", "zero_grad")  # (_TracedOptimizer.methods)


def _attributes_key(opt) -> tuple:
    """The key of a custom optimizer's public instance attributes (``defaults`` and the
    user's own, e.g. ``self.scale``), which its ``step`` may read: plain values by value
    (a dict entry by entry); tensors (captured under the sharp-edge policy where the step
    uses them) and other objects are not keyed."""
    def key(v):
        if isinstance(v, dict):
            return ("dict", tuple((k, key(x)) for k, x in v.items()))
        try:
            return _guard_key(v, "")
        except UnsupportedInputError:
            return _NOT_KEYED
    return tuple((n, key(v)) for n, v in vars(opt).items()
                 if not n.startswith("_") and n not in _PATCHED)


def _opt_name(opt) -> str:
    return f"{type(opt).__module__}.{type(opt).__qualname__}"


def _custom_inputs(opt, params, pindex):
    """A custom optimizer's part of the call (``optimizers.custom_step``): (layout, its
    tensors). The layout holds, per group, its parameters' indices and each entry's key,
    per parameter (all groups, in order) its ``opt.state`` entry the same way (None: no
    entry), and the optimizer's own attributes (``_attributes_key``). An entry's key:
    ``("tensor", n)`` (the ``n``-th of the tensors: one input per tensor object, so an
    object held twice stays one), ``("param", i)`` (a parameter), or a non-tensor value's
    ``_guard_key``. Raises UnsupportedInputError for ``opt.state`` keyed by other objects
    than the optimizer's parameters, and for distinct tensors sharing memory with each
    other, a parameter or a gradient (a write through one would change the other in
    eager only)."""
    name = _opt_name(opt)
    tensors, index = [], {}

    def key(v, where):
        if not isinstance(v, torch.Tensor):
            return _guard_key(v, where)
        if id(v) in pindex:
            return ("param", pindex[id(v)])
        if id(v) not in index:
            index[id(v)] = len(tensors)
            tensors.append(v)
        return ("tensor", index[id(v)])
    groups = []
    for gi, group in enumerate(opt.param_groups):
        groups.append((tuple(pindex[id(p)] for p in group["params"]), tuple(
            (k, key(v, f"{name}.param_groups[{gi}][{k!r}]"))
            for k, v in group.items() if k != "params")))
    mine = {id(p) for group in opt.param_groups for p in group["params"]}
    if any(id(p) not in mine for p in opt.state):
        raise UnsupportedInputError(
            f"{name}: opt.state holds entries keyed by other objects than the optimizer's "
            "parameters; a traced optimizer step supports state per parameter only")
    layout = []
    for p in (p for group in opt.param_groups for p in group["params"]):
        layout.append(None if p not in opt.state else tuple(  # (`in` adds no entry)
            (k, key(v, f"{name}.state[p][{k!r}]")) for k, v in opt.state[p].items()))
    seen = {}
    for t in (*params, *(p.grad for p in params if p.grad is not None), *tensors):
        if t.numel() and t.device.type != "meta":
            ptr = t.untyped_storage().data_ptr()
            if seen.setdefault(ptr, id(t)) != id(t):
                raise UnsupportedInputError(
                    f"{name}: tensors of its state or param_groups share memory with each "
                    "other, a parameter or a gradient; a traced optimizer step needs "
                    "separate tensors (clone them)")
    return ("traced", tuple(groups), tuple(layout), _attributes_key(opt)), tensors


class _TracedOptimizer:
    """A custom optimizer (``optimizers.custom_step``) while the step is traced: its own
    ``step`` runs on proxies. ``param_groups`` hold the parameters' proxies (``p.grad``
    reads the ``.grad`` table), tensor hyperparameters are program inputs, the others the
    call's values (guarded: part of the cache key, ``_custom_inputs``); ``state`` is a
    ``defaultdict(dict)`` keyed by the proxies, its tensors program inputs (written in
    place when the step mutates them) and its other values the call's. ``result()``: what
    the host sets after the run."""

    def __init__(self, opt, layout, table, inputs, stepped, k_opt):
        _, groups_layout, state_layout, _ = layout
        self.opt, self.table, self.name = opt, table, _opt_name(opt)
        self.refs: dict = {}  # id(input proxy) -> where the host finds its tensor
        for i, p in enumerate(table.proxies):
            self.refs[id(p)] = ("param", i)
        for n, t in enumerate(inputs):
            self.refs[id(t)] = ("tensor", n)

        def value(v, k):  # the traced value of an entry whose host value is v, key k
            if k[0] == "tensor":
                return inputs[k[1]]
            if k[0] == "param":
                return table.proxies[k[1]]
            return copy.deepcopy(v)
        self.groups = []
        for (idx, entries), host in zip(groups_layout, opt.param_groups):
            keys = dict(entries)
            self.groups.append({k: [table.proxies[i] for i in idx] if k == "params" else
                                value(v, keys[k]) for k, v in host.items()})
        self.flat = [table.proxies[i] for idx, _ in groups_layout for i in idx]
        host_flat = [p for g in opt.param_groups for p in g["params"]]
        self.state = collections.defaultdict(dict)
        for proxy, hp, entries in zip(self.flat, host_flat, state_layout):
            if entries is not None:
                keys = dict(entries)
                self.state[proxy] = {k: value(v, keys[k]) for k, v in opt.state[hp].items()}
        fn = optimizers.custom_step(type(opt))

        def step(closure=None):
            if closure is not None:
                raise UnsupportedInputError(
                    f"{self.name}.step(closure) cannot be traced: a compiled step runs the "
                    "optimizer's own step() without a closure; compute the loss and call "
                    "backward() in the step function, then opt.step()")
            with torch.no_grad():  # (Optimizer.step's own code has no grad mode to undo)
                out = fn(opt)
            stepped[k_opt] = "traced"
            return out
        self.methods = {"step": step, "param_groups": self.groups, "state": self.state}
        if type(opt).zero_grad is torch.optim.Optimizer.zero_grad:
            self.methods["zero_grad"] = _traced_zero_grad(
                table, [idx for idx, _ in groups_layout])

    def _ref(self, v, where):
        if isinstance(v, torch.Tensor):
            r = self.refs.get(id(v))
            if r is not None:
                return ("in",) + r
            if type(v) is not TensorProxy:
                raise UnsupportedInputError(
                    f"{where} was set to a tensor not computed in the step; a traced "
                    "optimizer step must compute its state from its inputs")
            return ("new", v)
        return ("value", v)

    def result(self):
        """(per group: {key: ref} of its entries but ``params``; per parameter: None or
        [(key, ref)] of its ``opt.state`` entry). A ref: ("in", kind, n) an input tensor
        (written in place, if mutated), ("new", tensor) an output, ("value", v)."""
        known = {id(p) for p in self.flat}
        for p in self.state:
            if id(p) not in known:
                raise UnsupportedInputError(
                    f"{self.name}.step() keys opt.state by something other than its own "
                    "parameters; a traced optimizer step supports state per parameter only")
        groups = [{k: self._ref(v, f"{self.name}.param_groups[{gi}][{k!r}]")
                   for k, v in g.items() if k != "params"}
                  for gi, g in enumerate(self.groups)]
        states = [None if p not in self.state else
                  [(k, self._ref(v, f"{self.name}.state[p][{k!r}]"))
                   for k, v in self.state[p].items()] for p in self.flat]
        return groups, states


def _apply_custom(opt, result, params, inputs) -> None:
    """Set on the host what a traced custom step left (``_TracedOptimizer.result``): group
    entries, each parameter's ``opt.state`` entry (its dict kept, as eager keeps it). A
    non-tensor value equal to the host's is left as it is (the host's object); a changed
    one is set to a copy (the program's constants are shared by every call)."""
    def value(r, old):
        if r[0] == "in":
            return (params if r[1] == "param" else inputs)[r[2]]
        if r[0] == "value":
            try:
                if old is not _NOT_KEYED and _guard_key(old, "") == _guard_key(r[1], ""):
                    return old
            except UnsupportedInputError:
                pass
            return copy.deepcopy(r[1])
        return r[1]
    groups, states = result
    for g, changes in zip(opt.param_groups, groups):
        for k, r in changes.items():
            g[k] = value(r, g.get(k, _NOT_KEYED))
    flat = [p for g in opt.param_groups for p in g["params"]]
    for p, entries in zip(flat, states):
        if entries is None:
            opt.state.pop(p, None)
            continue
        d = opt.state[p]
        new = [(k, value(r, d.get(k, _NOT_KEYED))) for k, r in entries]
        d.clear()
        d.update(new)


def _traced_step(table, rules, tables, states, stepped, k_opt, positions):
    """``opt.step()`` inside the trace (the ``k_opt``-th optimizer): every group's rule
    applied to its parameters whose ``.grad`` is not None (torch.optim skips the others)."""
    def step(closure=None):
        if closure is not None:
            raise NotImplementedError("opt.step(closure) inside a compiled training step is "
                                      "not supported; compute the loss in the step itself")
        if stepped[k_opt] is not None:
            raise NotImplementedError("opt.step() is called twice in one compiled training "
                                      "step; compile one step per call")
        done, entries = [], []
        with torch.no_grad():
            j = 0  # position among the optimizer's parameters (all groups)
            for rule, tbl, idx in zip(rules, tables, positions):
                k = len(rule.scalar_names)
                rows = None  # the table's rows, split once (unbind: one op, not n * k)
                for r, pi in enumerate(idx):
                    g = table.grads[pi]
                    if g is not None:
                        if rows is None:
                            rows = tbl.unbind(0)
                        s = list(rows[r].unbind(0)) if k else []
                        entries.append((rule, table.proxies[pi], g, states[j], s))
                        done.append(j)
                    j += 1
            optimizers.update_parameters(entries, in_place=True)
        stepped[k_opt] = tuple(done)
    return step


def _traced_zero_grad(table, positions):
    """``opt.zero_grad(set_to_none=True)`` inside the trace (torch/optim/optimizer.py)."""
    def zero_grad(set_to_none: bool = True):
        with torch.no_grad():
            for idx in positions:
                for pi in idx:
                    g = table.grads[pi]
                    if g is None:
                        continue
                    if set_to_none:
                        table.grads[pi] = None
                    else:
                        g.zero_()
    return zero_grad


def _program(layout, params, buffers, grads, states, tables, rest, lifted=None):
    """The traced step (module docstring). ``layout``: (grad present per parameter, per
    optimizer: per group (rule name, options, parameter indices) or a custom optimizer's
    ``_custom_inputs`` layout, object identities); ``grads``: the present ``.grad``
    tensors; ``states``: per optimizer, per parameter, its state tensors
    (``OptimizerRule.state_names``), or a custom optimizer's tensors; ``tables``: per
    optimizer, per group, the (n, k) scalar table ([] for a custom optimizer); ``rest``:
    the other arguments; ``lifted``: {attribute path from ``_Call.root``: value} of the
    tensors the modules hold as plain attributes (frontend/module_attributes.py), or
    None."""
    from thunder_mlir.frontend.tracing import current_trace
    from thunder_mlir.module import _install, _restore

    call: _Call = _ACTIVE.call
    trace = current_trace()
    present, opt_layouts = layout[0], layout[1]
    it = iter(grads)
    grad_in = [next(it) if h else None for h in present]
    table = _GradTable(trace, params, call.params, grad_in)
    by_name = {c.name: c for c in optimizers.RULES.values()}
    stepped = [None] * len(call.optimizers)
    patched, traced = [], {}
    for k, (opt, groups) in enumerate(zip(call.optimizers, opt_layouts)):
        if groups[0] == "traced":  # a custom optimizer: its own step() is traced
            traced[k] = _TracedOptimizer(opt, groups, table, states[k], stepped, k)
            patched.append((opt, dict(traced[k].methods)))
            continue
        rules = [by_name[name](options) for name, options, _ in groups]
        positions = [idx for _, _, idx in groups]
        patched.append((opt, {
            "step": _traced_step(table, rules, tables[k], states[k], stepped, k, positions),
            "zero_grad": _traced_zero_grad(table, positions)}))
    args_tpl, kwargs_tpl = call.args, call.kwargs
    rest_it = iter(rest)
    args = [next(rest_it) if a is None else a for a in args_tpl]
    kwargs = {n: next(rest_it) if a is None else a for n, a in kwargs_tpl.items()}
    saved = []
    contexts = []
    trace.training = table
    undo = _install(call.root, lifted) if lifted else []
    try:
        for opt, methods in patched:
            if "param_groups" not in methods:  # (a custom optimizer's: _TracedOptimizer)
                methods["param_groups"] = [_TracedGroup(g) for g in opt.param_groups]
            saved.append((opt, tuple(methods),
                          {n: opt.__dict__[n] for n in methods if n in opt.__dict__}))
            opt.__dict__.update(methods)
        for m, names in zip(call.modules, call.module_names):
            state = {n: params[i] for n, i in names[0].items()}
            state.update({n: buffers[i] for n, i in names[1].items()})
            c = reparametrized(m, state)
            c.__enter__()
            contexts.append(c)
        out = call.fn(*args, **kwargs)
    finally:
        for c in reversed(contexts):
            c.__exit__(None, None, None)
        for opt, names, old in saved:
            for n in names:
                opt.__dict__.pop(n, None)
            opt.__dict__.update(old)
        _restore(undo)
        trace.training = None
    if not table.backwards and any(type(x) is TensorProxy and x.requires_grad
                                   for x in torch_pytree.tree_leaves(out)):
        raise UnsupportedError(
            "a function of an nn.Module that returns a tensor requiring grad and does not "
            "call loss.backward() is not a training step: its result would be detached. "
            "Compile the model (thunder_mlir.jit(model)) and call the function eagerly, or "
            "call loss.backward() inside it")
    out = torch_pytree.tree_map(
        lambda x: x.detach() if type(x) is TensorProxy and x.requires_grad else x, out)
    kinds, new_grads = [], []
    for g, g0 in zip(table.grads, table.inputs):
        if g is None:
            kinds.append("none")
        elif g is g0:
            kinds.append("same")  # accumulated in place (written back) or untouched
        else:
            kinds.append("new")
            new_grads.append(g)
    custom = {k: t.result() for k, t in traced.items()}
    return out, tuple(kinds), new_grads, tuple(stepped), custom


class TrainStep:
    """``thunder_mlir.jit(step)`` called with a ``torch.optim`` optimizer argument: the
    whole training step as one program (module docstring). ``jstep(*args, **kwargs)``
    returns what ``step`` returns (tensors detached), leaving parameters, ``.grad``,
    ``opt.state`` and ``state_dict()`` as eager's ``step`` would (to float32 rounding:
    docs/optim.md, Exactness).

    ``_fn``: the ThunderFunction of ``_program`` (``cache_misses``, ``last_traces``).
    Raises UnsupportedInputError for a torch.optim class without a rule (naming it and the
    supported ones), unsupported options, hooks, a closure, values of a custom optimizer's
    ``param_groups``/``opt.state`` that are not tensors, numbers, strings, None, dtypes,
    devices or tuples/lists of those, or parameters of a rule's optimizer that are not
    float32/float64 of one dtype and device."""

    def __init__(self, fn, **jit_options):
        self.fn = fn
        self._fn = ThunderFunction(_program, **jit_options)
        self._fn.donate_writes = True  # parameters and state: resident, donated
        self._fn.watch = self._watched
        self._fn.attribute_root = lambda: self._roots[1]
        self._objects: list = []
        self._rules: dict = {}
        self._module_states: dict = {}  # id(module) -> module._ModuleState (last call's)
        self._walk = None  # (structure tokens, tensors, _module_tensors' result)
        # tensors the modules hold as plain attributes, program inputs (lifted), by path
        # from the modules' root (``_root``: module k is "k"), as jit(module) lifts them
        self.lifted: tuple = ()
        self._roots: tuple = ((), None)  # (module ids, root) of the last call

    def _watched(self):
        out = []
        modules = [m for m in self._objects if isinstance(m, torch.nn.Module)]
        for k, m in enumerate(modules):
            out += [(sub, f"module '{name}' ({type(sub).__name__})" if name else
                     f"the module ({type(sub).__name__})",
                     (str(k),) + (tuple(name.split(".")) if name else ()))
                    for name, sub in m.named_modules(remove_duplicate=False)]
        return out

    def _root(self, modules) -> torch.nn.Module:
        """The module arguments as one tree (an ``nn.ModuleList``: module k under "k"),
        the root of the lifted attributes' paths; the last call's while the modules are
        the same objects."""
        ids = tuple(map(id, modules))
        if self._roots[0] != ids:
            self._roots = (ids, torch.nn.ModuleList(modules))
        return self._roots[1]

    def _lift(self, paths, root) -> None:
        """Make the attributes at ``paths`` (from ``root``) program inputs from the next
        call on, with every public tensor attribute of the modules (``module._ModuleState.
        lift``'s rule); raises RuntimeError if they are inputs already (a bug)."""
        from thunder_mlir.frontend import module_attributes

        if not set(paths) - set(self.lifted):
            raise RuntimeError(f"thunder_mlir: the attributes {sorted(paths)} are program "
                               "inputs already, yet their tensors reached the trace")
        found = module_attributes.module_tensor_attributes(root)
        self.lifted = tuple(sorted(set(self.lifted) | set(paths) | set(found)))

    def _rule(self, opt, group) -> optimizers.OptimizerRule:
        cls = optimizers.rule_class(type(opt))
        options = cls.options_of(group)
        rule = self._rules.get((cls, options))
        if rule is None:
            rule = self._rules[(cls, options)] = cls(options)
        return rule

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs)

    def _module_tensors(self, modules):
        """The parameters and buffers of the module arguments: (parameters, {id: index},
        buffers, {id: index}, per module ({qualified name: parameter index}, {qualified
        name: buffer index})), each tensor once (tied ones), in
        ``named_parameters(remove_duplicate=False)`` order.

        The walk is remembered: each module's structure and tensors are read through a
        ``module._ModuleState`` (one generated expression checks every submodule's
        ``_parameters``/``_buffers``/``_modules`` dicts and hooks), and while those are the
        same objects as at the last call, the last walk is reused (BERT tiny, 53 modules:
        the walk took ~160 us of a ~4.5 ms step). A parameter or buffer added, removed or
        replaced is a new walk. The lists returned are the caller's to extend."""
        from thunder_mlir.module import _ModuleState

        states, tokens, values = {}, [], []
        for m in modules:
            st = self._module_states.get(id(m))
            if st is None or st.module is not m:
                st = _ModuleState(m)  # (moves unaligned CPU tensors: align_for_xla)
            states[id(m)] = st
            values += st.current()[1]  # (first: a changed structure renews the token)
            tokens.append(st.token)
        self._module_states = states
        last = self._walk
        if last is not None and last[0] == tokens and len(last[1]) == len(values) and \
                all(map(operator.is_, last[1], values)):
            params, pindex, buffers, bindex, names = last[2]
            return list(params), dict(pindex), buffers, bindex, names
        params, pindex, buffers, bindex, names = [], {}, [], {}, []
        for m in modules:
            pn, bn = {}, {}
            for n, p in m.named_parameters(remove_duplicate=False):
                if id(p) not in pindex:
                    pindex[id(p)] = len(params)
                    params.append(p)
                pn[n] = pindex[id(p)]
            for n, b in m.named_buffers(remove_duplicate=False):
                if id(b) not in bindex:
                    bindex[id(b)] = len(buffers)
                    buffers.append(b)
                bn[n] = bindex[id(b)]
            names.append((pn, bn))
        self._walk = (tokens, values, (params, pindex, buffers, bindex, names))
        return list(params), dict(pindex), buffers, bindex, names

    def call(self, args, kwargs, hooks_on_host: bool = False):
        """``self(*args, **kwargs)``; ``hooks_on_host``: the caller runs the optimizers'
        step hooks around the call (``OptimizerStep``), so they are not refused."""
        from thunder_mlir.frontend.module_attributes import LiftNeeded

        while True:
            call = self.prepare(args, kwargs, hooks_on_host)
            try:
                result = call.traced_with(self._fn)
            except LiftNeeded as need:  # tensors held as attributes: inputs, traced again
                self._lift(need.paths, call.objects.root)
                continue
            return self.finish(call, result)

    def prepare(self, args, kwargs, hooks_on_host: bool = False) -> PreparedCall:
        """The host's part before the program runs (module docstring, 1.): the program's
        arguments for this call and what ``finish`` needs. ``thunder_mlir.export`` traces
        the program of a ``PreparedCall`` (``traced_with``) and calls ``finish`` after
        running its artifact, so an exported step and ``jit(step)`` share this code."""
        from thunder_mlir.module import ThunderModule

        modules, opts, rest = [], [], []

        def sort(a):
            if isinstance(a, ThunderModule):
                a = a._original
            if isinstance(a, torch.nn.Module):
                modules.append(a)
                return a
            if isinstance(a, torch.optim.Optimizer):
                opts.append(a)
                return a
            rest.append(a)
            return None
        args_tpl = [sort(a) for a in args]
        kwargs_tpl = {n: sort(a) for n, a in kwargs.items()}
        # (plain tensors, the common batch, skip torch's pytree walk: ~40 us a step cold)
        leaves = rest if all(type(x) is torch.Tensor for x in rest) else \
            torch_pytree.tree_leaves(rest)
        for x in leaves:
            if isinstance(x, torch.Tensor) and x.requires_grad:
                raise UnsupportedInputError(
                    "a batch tensor of a compiled training step requires grad; eager's "
                    "loss.backward() would write its .grad, which the step does not. Pass it "
                    "detached, or as a parameter of the model")
        params, pindex, buffers, bindex, names = self._module_tensors(modules)
        for opt in opts:
            if optimizers.custom_step(type(opt)) is None:
                optimizers.rule_class(type(opt))
            if not hooks_on_host:
                _refuse_hooks(opt)
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) not in pindex:
                        pindex[id(p)] = len(params)
                        params.append(p)
        grads = [p.grad for p in params]
        opt_layouts, states, tables, fresh = [], [], [], []
        for opt in opts:
            if optimizers.custom_step(type(opt)) is not None:
                lay, st = _custom_inputs(opt, params, pindex)
                opt_layouts.append(lay)
                states.append(st)
                tables.append([])
                fresh.append(None)
                continue
            groups, st, tbls, new = [], [], [], {}
            dtype, device = check_parameters(
                p for group in opt.param_groups for p in group["params"])
            for group in opt.param_groups:
                rule = self._rule(opt, group)
                rows, by_step = [], {}  # (the group's scalars depend on the step alone)
                for p in group["params"]:
                    state = opt.state.get(p)
                    has = bool(state) and all(state.get(k) is not None
                                              for k in rule.state_names)
                    if state and not has and rule.counts_steps:
                        raise UnsupportedInputError(
                            f"torch.optim.{rule.name}: opt.state lacks "
                            f"{[k for k in rule.state_names if k not in state]} (options "
                            "changed after the first step)")
                    if rule.counts_steps:
                        step = state["step"].item() + 1 if has else 1.0
                    else:
                        step = 2.0 if has else 1.0
                    row = by_step.get(step)
                    if row is None:
                        row = by_step[step] = rule.scalars(group, step)
                    rows.append(row)
                    if has:
                        st.append([state[k] for k in rule.state_names])
                    else:  # made now, kept if the parameter steps (torch's _init_group)
                        new[len(st)] = [torch.zeros_like(p, memory_format=torch.preserve_format)
                                        for _ in rule.state_names]
                        st.append(new[len(st)])
                groups.append((rule.name, rule.options,
                               tuple(pindex[id(p)] for p in group["params"])))
                tbl = torch.tensor(rows, dtype=dtype, device=device)
                if tbl.dim() != 2:  # (an empty group; otherwise no view: inputs_overlap
                    tbl = tbl.reshape(len(rows), len(rule.scalar_names))  # skips it)
                tbls.append(tbl)
            opt_layouts.append(tuple(groups))
            states.append(st)
            tables.append(tbls)
            fresh.append(new)
        layout = (tuple(g is not None for g in grads), tuple(opt_layouts),
                  tuple(id(o) for o in modules + opts), _fn_id(self.fn))
        self._objects = modules + opts
        root = self._root(modules)
        lifted = None
        if self.lifted:
            from thunder_mlir.frontend.module_attributes import current_value

            lifted = {p: current_value(root, p) for p in self.lifted}
        objects = _Call(self.fn, args_tpl, kwargs_tpl, modules, names, opts, params, root)
        inputs = (layout, params, buffers, [g for g in grads if g is not None], states,
                  tables, rest, lifted)
        return PreparedCall(inputs, objects, params, opts, states, fresh)

    def finish(self, call: PreparedCall, result):
        """The host's part after the program ran (module docstring, 3.): ``.grad`` set,
        new optimizer state kept, step counters advanced. ``result``: the program's
        output, ``(out, kinds, new_grads, stepped, custom)`` (``_program``); returns
        ``out``."""
        out, kinds, new_grads, stepped, custom = result
        params, opts, states, fresh = call.params, call.optimizers, call.states, call.fresh
        it = iter(new_grads)
        for p, kind in zip(params, kinds):
            if kind == "none":
                p.grad = None
            elif kind == "new":
                p.grad = next(it)
        for k, (opt, done, new) in enumerate(zip(opts, stepped, fresh)):
            if k in custom:
                _apply_custom(opt, custom[k], params, states[k])
                if done is not None:
                    opt._opt_called = True  # what lr_scheduler's wrapper records
            elif done is not None:
                _after_step(self, opt, done, new)
        return out


program = _program  # the function a step's ThunderFunction traces (export.py uses it)


def _fn_id(fn) -> int:
    return id(getattr(fn, "__code__", fn))


def _after_step(self, opt, done, new) -> None:
    """Keep the state made for parameters that stepped for the first time (``new``:
    position -> tensors, which the program wrote; torch.optim's ``_init_group`` creates
    it at that step) and advance the step counters (``state_steps``' ``+= 1``)."""
    flat = [(p, group, rule) for group in opt.param_groups
            for rule in (self._rule(opt, group),) for p in group["params"]]
    counters = []
    for j in done:
        p, group, rule = flat[j]
        if j in new and (rule.state_names or rule.counts_steps):
            state = opt.state[p]  # (SGD without momentum keeps no entry)
            if rule.counts_steps:
                state["step"] = (torch.zeros((), dtype=torch.float32, device=p.device)
                                 if group.get("fused") else
                                 torch.tensor(0.0, dtype=_scalar_dtype()))
            for k, t in zip(rule.state_names, new[j]):
                state[k] = t
        if rule.counts_steps:
            counters.append(opt.state[p]["step"])
    advance_step_counters(counters)
    opt._opt_called = True  # what lr_scheduler's wrapper of opt.step records


def _scalar_dtype() -> torch.dtype:
    """torch/optim/optimizer.py ``_get_scalar_dtype()``: the dtype of ``state["step"]``."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
