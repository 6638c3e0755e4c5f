"""A whole training step exported as one artifact (docs/export.md, "A training step").

``thunder_mlir.export(step, model, opt, *batch)``, where ``step`` runs the model, calls
``loss.backward()``, ``opt.step()`` and ``opt.zero_grad()``, traces the program that
``jit(step)`` runs (train_step.py: ``TrainStep.prepare`` builds the program's inputs on
the host, ``_program`` is traced, ``TrainStep.finish`` does the host's part after the
run), so an exported step and a jitted one are one builder. This module only names the
program's inputs and outputs, traces it on meta tensors inside ``pipeline.compile_only``,
and, for a torch call of the artifact, prepares the inputs of a call and checks that they
have the exported layout. export.py builds the artifact (``@main``) from the capture.

The program's flat inputs, in order (``StepCapture.input_names``):

* ``params.<name>``: every parameter of the module arguments (``named_parameters``
  order, tied ones once; a second module's are ``params[1].<name>``), then optimizer
  parameters outside the modules (``opt.param_groups[g]['params'][j]``);
* ``buffers.<name>``: the modules' buffers;
* ``grads.<param name>``: the ``.grad`` tensors present at export (none after an
  ``opt.zero_grad()`` with ``set_to_none=True``, torch's default);
* ``opt.state.<param name>.<key>``: each parameter's optimizer state tensors
  (``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``, ``momentum_buffer``; zeros before
  the first step, which the program's scalars make equivalent to torch's ``_init_group``);
  ``opt[k].`` for the k-th of several optimizers;
* ``opt.param_groups[g].scalars``: per parameter group a float table of the per-step
  scalars (rows: the group's parameters; columns ``OptimizerRule.scalar_names``, e.g.
  AdamW's learning rate and bias corrections), computed on the host as jit computes them
  (Python doubles rounded once), so that ``lr_scheduler`` changes need no new artifact;
* the batch: the tensors of the other arguments (``args[2]``, ``kwargs['labels']``).

Its outputs: the step's return value (``output``, ``output[0]``, ...), ``grads.<name>``
for ``.grad`` tensors the step leaves that were not inputs, ``writes.<input name>`` for
every input written in place (new parameters, new optimizer state, accumulated ``.grad``:
eager's side effects), ``index_checks`` when the program indexes with tensors.

The optimizer's step counters (``opt.state[p]['step']``) stay on the host, as in a jitted
step: the scalar table carries their effect.
"""

from __future__ import annotations

import json

import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.errors import CallArgumentError, ExportError
from thunder_mlir.frontend import pytrees
from thunder_mlir.frontend.module_attributes import LiftNeeded
from thunder_mlir.train_step import PreparedCall, TrainStep


def is_step_call(args, kwargs) -> bool:
    """Whether a call passes a ``torch.optim.Optimizer`` (then it is a training step)."""
    return any(isinstance(a, torch.optim.Optimizer) for a in (*args, *kwargs.values()))


class StepCapture:
    """A training step traced for export: ``lowered`` (pipeline.LoweredProgram),
    ``input_names`` (module docstring) and ``tensors`` (the example call's input tensors,
    same order), ``info`` (the JSON facts a torch call checks: the layout, the scalar
    tables' columns, the baked-in Python values), ``stepper`` (the ``TrainStep`` whose
    ``prepare``/``finish`` a torch call of the artifact runs)."""

    def __init__(self, lowered, input_names, tensors, info, stepper):
        self.lowered, self.input_names, self.tensors = lowered, input_names, tensors
        self.info, self.stepper = info, stepper

    def output_names(self) -> list[str]:
        """Names of the program's tensor outputs of the output tree, in ``out_positions``
        order: the step's return value (``output...``) and new ``.grad`` tensors
        (``grads.<name>``)."""
        lowered = self.lowered
        placeholder = torch_pytree.tree_unflatten(list(range(len(lowered.out_consts))),
                                                  lowered.out_spec)
        kinds = placeholder[1]
        kinds = [lowered.out_consts[k] for k in kinds]
        params = self.info["param_names"]
        new_grads = [f"grads.{n}" for n, kind in zip(params, kinds) if kind == "new"]
        names = {}
        for path, idx in torch_pytree.tree_flatten_with_path(placeholder[0])[0]:
            names[idx] = "output" + torch_pytree.keystr(path)
        for k, idx in enumerate(torch_pytree.tree_leaves(placeholder[2])):
            names[idx] = new_grads[k]
        return [names[i] for i in lowered.out_positions]


def _layout_key(layout) -> str:
    """The part of a step's layout an artifact is specialized on (which ``.grad`` exist,
    each group's optimizer rule, options and parameters), as JSON."""
    return json.dumps([list(layout[0]), layout[1]], default=repr)


def _meta(t):
    if not isinstance(t, torch.Tensor):
        return t
    m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return m.requires_grad_(t.requires_grad)


def _input_names(stepper: TrainStep, call: PreparedCall, args, kwargs) -> tuple[list, list]:
    """(names of the program's flat tensor inputs, parameter names by index)."""
    from thunder_mlir.error_reporting import argument_paths

    layout, params, buffers, _, states, _, rest, _ = call.inputs  # (lifted: None)
    objects = call.objects
    pnames: list = [None] * len(params)
    bnames: list = [None] * len(buffers)
    for k, (pn, bn) in enumerate(objects.module_names):
        prefix = "." if k == 0 else f"[{k}]."  # params.<name>, params[1].<name>
        for n, i in pn.items():
            pnames[i] = pnames[i] or prefix + n
        for n, i in bn.items():
            bnames[i] = bnames[i] or prefix + n
    opts = objects.optimizers
    oname = ["opt"] if len(opts) == 1 else [f"opt[{k}]" for k in range(len(opts))]
    pindex = {id(p): i for i, p in enumerate(objects.params)}
    for k, opt in enumerate(opts):
        for g, group in enumerate(opt.param_groups):
            for j, p in enumerate(group["params"]):
                i = pindex[id(p)]
                if pnames[i] is None:
                    pnames[i] = f".{oname[k]}.param_groups[{g}]['params'][{j}]"
    pnames = [n.removeprefix(".") for n in pnames]  # (the key after params.)
    names = [f"params{'' if n.startswith('[') else '.'}{n}" for n in pnames]
    names += [f"buffers{n}" for n in bnames]
    names += [f"grads.{pnames[i]}" for i, present in enumerate(layout[0]) if present]
    scalars = []
    for k, opt in enumerate(opts):
        flat = [(p, group) for group in opt.param_groups for p in group["params"]]
        for j, (p, group) in enumerate(flat):
            rule = stepper._rule(opt, group)
            names += [f"{oname[k]}.state.{pnames[pindex[id(p)]]}.{s}"
                      for s in rule.state_names][:len(states[k][j])]
        for g, group in enumerate(opt.param_groups):
            rule = stepper._rule(opt, group)
            names.append(f"{oname[k]}.param_groups[{g}].scalars")
            scalars.append({"name": names[-1], "rule": rule.name,
                            "columns": list(rule.scalar_names),
                            "rows": [pnames[pindex[id(p)]] for p in group["params"]],
                            "hyperparameters": {  # (at export: a caller without torch)
                                k: v for k, v in group.items() if k != "params"
                                and isinstance(v, (bool, int, float, str, tuple, type(None)))}})
    # the batch: each other argument's tensors, named by their place in the call
    from thunder_mlir.module import ThunderModule

    def other(a):
        return not isinstance(a, (ThunderModule, torch.nn.Module, torch.optim.Optimizer))
    places = [f"args[{i}]" for i, a in enumerate(args) if other(a)] + \
        [f"kwargs[{n!r}]" for n, a in kwargs.items() if other(a)]
    for place, value in zip(places, rest):
        leaves = pytrees.flatten(value)[0]
        paths = argument_paths((value,), {})
        names += [place + p[len("args[0]"):] for p, x in zip(paths, leaves)
                  if isinstance(x, torch.Tensor)]
    return names, pnames, scalars


def _flags(call: PreparedCall) -> dict:
    """The module and parameter flags the traced program depends on and a torch call
    checks: each submodule's ``training`` (dropout, batch norm) and each parameter's
    ``requires_grad`` (which gradients the program computes)."""
    training = [f"{k}:{name}" for k, m in enumerate(call.objects.modules)
                for name, sub in m.named_modules() if sub.training]
    frozen = [i for i, p in enumerate(call.params) if not p.requires_grad]
    return {"training": training, "frozen": frozen}


def _values(inputs) -> list:
    """The non-tensor leaves of a call's inputs but the layout (baked into the program)."""
    return [repr(x) for x in pytrees.flatten(inputs[1:])[0]
            if not isinstance(x, torch.Tensor)]


def capture(fn, args, kwargs, sharp_edges: str) -> StepCapture:
    """Trace the training step ``fn(*args, **kwargs)`` as ``jit(fn)`` would, on meta
    tensors, and return its lowered program (``StepCapture``). Raises ExportError for a
    custom optimizer (its Python-side results are not carried by an artifact) and the
    jit's errors for the step (train_step.py's refusals)."""
    from thunder_mlir import pipeline

    stepper = TrainStep(fn, sharp_edges=sharp_edges)
    stepper._fn.donate_writes = False  # (XLA buffer donation: a run-time choice)
    call = stepper.prepare(args, kwargs)
    for opt, groups in zip(call.objects.optimizers, call.inputs[0][1]):
        if groups and groups[0] == "traced":
            raise ExportError(
                f"{type(opt).__qualname__} is a custom optimizer (its own step() is traced): "
                "export supports torch.optim.SGD, Adam and AdamW, whose state the artifact "
                "names; use one of them, or export the model's forward only")
    names, pnames, scalars = _input_names(stepper, call, args, kwargs)
    leaves, spec = pytrees.flatten(call.inputs[1:])
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if len(tensors) != len(names):
        raise ExportError(f"internal: {len(names)} names for {len(tensors)} step inputs")
    import optree

    meta_inputs = (call.inputs[0], *optree.tree_unflatten(spec, [_meta(x) for x in leaves]))
    traced = PreparedCall(meta_inputs, call.objects, call.params, call.optimizers,
                          call.states, call.fresh)
    lowered = None
    with torch.enable_grad(), pipeline.compile_only(pipeline.Target(torch.device("cpu"),
                                                                    "cpu")):
        try:
            traced.traced_with(stepper._fn)
        except pipeline.ProgramsCaptured as captured:
            lowered = captured.lowered
        except LiftNeeded as need:  # (jit(step) makes them inputs; an artifact names its
            raise ExportError(  # inputs, and has no names for these)
                f"the model holds tensors as plain attributes ({need}), neither parameters "
                "nor buffers, and the step reads them: an exported step takes parameters, "
                "buffers, optimizer state and arguments only. Register them as buffers "
                "(module.register_buffer(name, tensor, persistent=False)) before export, "
                "or run the step with thunder_mlir.jit(step)") from None
    if lowered is None:
        raise ExportError("internal: the step compiled no program")
    info = {"layout": _layout_key(call.inputs[0]), "param_names": pnames,
            "scalars": scalars, "values": _values(call.inputs), "flags": _flags(call)}
    return StepCapture(lowered, names, tensors, info, stepper)


def prepare(stepper: TrainStep, info: dict, args, kwargs) -> tuple[PreparedCall, list]:
    """A torch call of a step artifact: the host's part before the run (``TrainStep.
    prepare``: scalar tables, zero state for parameters without one), checked against
    the exported layout. Returns (the prepared call, its input tensors in ``@main``'s
    order). Raises CallArgumentError where the call differs from the export in which
    ``.grad`` tensors exist, the optimizers' groups, rules or options, or Python values."""
    call = stepper.prepare(args, kwargs)
    got = _layout_key(call.inputs[0])
    if got != info["layout"]:
        want = json.loads(info["layout"])
        have = json.loads(got)
        if want[0] != have[0]:
            names = info["param_names"]
            diff = [n for n, a, b in zip(names, want[0], have[0]) if a != b][:3]
            raise CallArgumentError(
                f"the step was exported with .grad {'set' if want[0][0] else 'None'} for "
                f"{diff} and this call has it {'set' if have[0][0] else 'None'}: an artifact "
                "is specialized on which .grad tensors exist. End the step with "
                "opt.zero_grad() (set_to_none=True, torch's default) so that every step "
                "starts with .grad None, or export again in this state for the later steps")
        raise CallArgumentError(
            "the optimizers' parameter groups, rules or options differ from the export "
            f"(exported {want[1]}, now {have[1]}); export the step again")
    flags = _flags(call)
    if flags != info["flags"]:
        want = info["flags"]
        if flags["training"] != want["training"]:
            raise CallArgumentError(
                "the modules' training flags differ from the export (submodules in training "
                f"mode then: {want['training'][:4]}..., now: {flags['training'][:4]}...): "
                "dropout and batch norm would compute what eager does not. Call "
                "model.train()/model.eval() as at export, or export the step again")
        names = info["param_names"]
        raise CallArgumentError(
            "the parameters' requires_grad differ from the export (frozen then: "
            f"{[names[i] for i in want['frozen']][:4]}, now: "
            f"{[names[i] for i in flags['frozen']][:4]}): the artifact computes the "
            "gradients of the parameters that required grad at export; export the step again")
    values = _values(call.inputs)
    if values != info["values"]:
        raise CallArgumentError(f"the step's Python arguments were {info['values']} at export "
                                f"(baked into the program), got {values}")
    leaves = pytrees.flatten(call.inputs[1:])[0]
    return call, [x for x in leaves if isinstance(x, torch.Tensor)]


def stepper_for(fn=None) -> TrainStep:
    """The ``TrainStep`` a deserialized step artifact's torch call uses for the host's
    parts (its program is the artifact: ``fn`` is never traced)."""
    return TrainStep(fn)
