"""``TrainStep`` (what ``train_step`` returns) and ``ShardedModule`` (what ``shard``
returns): the runtime side of a sharded program. Parameters and optimizer state live as
sharded jax Arrays on the mesh between calls; only the loss (a replicated scalar) comes
back to torch at each step."""

from __future__ import annotations

from typing import Callable

import torch
import torch.utils._pytree as torch_pytree

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.ir import optimizers

from thunder_mlir.distributed import placement, program
from thunder_mlir.distributed.collectives import Collective, bytes_by_kind
from thunder_mlir.distributed.mesh import DeviceMesh


def _named_state(model: torch.nn.Module):
    """(trained parameters, other tensors): parameters with ``requires_grad`` (tied ones
    once, as torch.optim sees them); frozen parameters join the buffers (inputs the step
    does not update, as torch.optim skips a parameter whose grad is None)."""
    params, buffers = {}, {}
    for n, p in model.named_parameters():
        (params if p.requires_grad else buffers)[n] = p
    buffers.update(model.named_buffers())
    return params, buffers


def _all_state(model: torch.nn.Module):
    """(every parameter, every buffer): inference shards frozen parameters too."""
    return dict(model.named_parameters()), dict(model.named_buffers())


def _run(prog: program.Program, inputs: list, out_shardings: list):
    """Execute ``prog`` on global jax Arrays ``inputs``; -> the outputs as jax Arrays."""
    import jax

    args = [inputs[i] for i in prog.region_inputs]
    try:
        res = prog.executable.execute_sharded(args)
        per_device = res.disassemble_into_single_device_arrays()
    except Exception as e:  # noqa: BLE001 - every XLA runtime error: an ExecutionError
        from thunder_mlir.runtime.plan import XlaStep, execution_error

        step = XlaStep("main", prog.executable, (), (), text=prog.hlo_text,
                       program="the compiled SPMD training step")
        raise execution_error(step, args, e) from e
    outs = []
    for j, (kind, k) in enumerate(prog.outputs):
        if kind == "input":
            outs.append(inputs[k])
            continue
        shards = per_device[k]
        named, shape = out_shardings[j]
        outs.append(jax.make_array_from_single_device_arrays(shape, named, shards))
    return outs


def _raise_failed(prog: program.Program, code) -> None:
    """Raise eager's error for the first of ``prog``'s index checks that failed, given the
    program's code output (a replicated jax Array, runtime_checks.py); nothing when all
    held. The code is read on the host, on every device kind (an SPMD program's outputs
    come back as jax Arrays, not through torch's asynchronous device assert)."""
    from thunder_mlir.frontend.runtime_checks import raise_failed

    raise_failed(prog.checks, placement.local_value(code).cpu())


class TrainStep:
    """One training step of ``model`` as one SPMD program (``train_step``'s docstring).

    ``step(*batch)`` -> the loss (a 0-d torch tensor, the value ``loss_fn`` returned for
    the global batch). The model's own tensors are not modified: ``state_dict()`` gives
    the trained values. Attributes: ``mesh``, ``strategy``, ``param_specs`` ({name:
    spec}), ``program`` (the last compiled ``program.Program``), ``steps`` (calls so far).
    """

    thunder_distributed = True  # examine() and last_traces() ask the step itself

    def __init__(self, model: torch.nn.Module, loss_fn: Callable, optimizer_cls: type,
                 mesh: DeviceMesh, strategy: str = "ddp", tp_plan: dict | None = None,
                 sharp_edges: str = "warn", **optimizer_kwargs):
        if not isinstance(mesh, DeviceMesh):
            raise UnsupportedInputError("mesh must come from thunder_mlir.distributed.mesh()")
        placement.check_strategy(strategy, mesh)
        self.model, self.loss_fn, self.mesh, self.strategy = model, loss_fn, mesh, strategy
        self.tp_plan = dict(tp_plan or {})
        self.sharp_edges = sharp_edges
        # the same rules as jit(opt.step) (ir/optimizers.py), the hyperparameters torch's
        self.hyper = optimizers.defaults(optimizer_cls, optimizer_kwargs)
        self.rule = optimizers.rule_for(optimizer_cls, self.hyper)
        params, buffers = _named_state(model)
        self.pnames, self.bnames = list(params), list(buffers)
        self._meta = {n: (tuple(t.shape), t.dtype) for n, t in {**params, **buffers}.items()}
        if not params:
            raise UnsupportedInputError("the model has no parameter that requires grad")
        self.param_specs = {n: placement.param_spec(n, p.shape, mesh, strategy, self.tp_plan)
                            for n, p in params.items()}
        # the shape each parameter is held in on the devices (fused.py: Fused entries)
        self._stored = {n: placement.stored_shape(n, p.shape, self.tp_plan)
                        for n, p in params.items()}
        self._params = [placement.put(p.detach().reshape(self._stored[n]), mesh,
                                      self.param_specs[n]) for n, p in params.items()]
        self._buffers = [placement.put(b.detach(), mesh, tuple(() for _ in b.shape))
                         for b in buffers.values()]
        self._state = [placement.put(torch.zeros(self._stored[n], dtype=p.dtype), mesh,
                                     self.param_specs[n])
                       for n, p in params.items() for _ in self.rule.state_names]
        self._programs: dict = {}
        self.program: program.Program | None = None
        self._last_batch = None
        self.steps = 0

    # ------------------------------------------------------------------ running
    def __call__(self, *batch: torch.Tensor) -> torch.Tensor:
        prog, xs = self._prepare(batch)
        self.steps += 1
        scalars = [placement.put(torch.tensor(v, dtype=torch.float32), self.mesh, ())
                   for v in self.rule.scalars(self.hyper, float(self.steps))]
        inputs = self._params + self._buffers + xs + self._state + scalars
        outs = _run(prog, inputs, self._out_shardings)
        n, k = len(self._params), len(self._state)
        self._params, self._state = outs[1:1 + n], outs[1 + n:1 + n + k]
        if prog.checks:  # a failed check: parameters and state came back unchanged
            try:
                _raise_failed(prog, outs[-1])
            except Exception:
                self.steps -= 1  # (as eager: the optimizer did not step)
                raise
        return placement.local_value(outs[0])

    def _prepare(self, batch):
        """(the program for this batch's shapes, compiled on first use; the batch as
        global jax Arrays split over "data")."""
        import jax

        if not batch or not all(isinstance(t, torch.Tensor) for t in batch):
            raise UnsupportedInputError("step(*batch) takes tensors (split on dim 0)")
        nproc = jax.process_count()
        specs = [placement.batch_spec(t, self.mesh, t.shape[0] * nproc) for t in batch]
        xs = [placement.put(t.detach(), self.mesh, s, local=True, copy=False)
              for t, s in zip(batch, specs)]
        key = tuple((tuple(x.shape), x.dtype) for x in xs)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._compile(batch, xs, specs)
            self._programs[key] = prog
        self.program = prog
        self._last_batch = [(tuple(t.shape), t.dtype) for t in batch]
        return prog, xs

    def examine(self, *batch):
        """``thunder_mlir.examine(step, *batch)`` (``examine(step)``: the last step's batch
        shapes): the ops of ``loss_fn(model, *batch)``
        (XLA or torch fallback) and the collectives of the step compiled for this batch
        (compiled, not run: parameters and optimizer state are unchanged)."""
        from thunder_mlir.examine import examine

        if not batch:  # the last step's batch shapes (tracing reads no values)
            if self._last_batch is None:
                raise RuntimeError("examine(step) before the first step needs a batch: "
                                   "examine(step, *batch)")
            batch = tuple(torch.zeros(s, dtype=d) for s, d in self._last_batch)
        prog, _ = self._prepare(batch)
        with program.tracing_on(self.mesh):  # with_sharding_constraint's mesh
            exam = examine(program.LossModule(self.model, self.loss_fn), *batch)
        exam.collectives = list(prog.collectives)
        return exam

    def _compile(self, batch, xs, specs) -> program.Program:
        params, buffers = _named_state(self.model)
        glob = lambda x, t: torch.empty(tuple(x.shape), dtype=t.dtype)  # noqa: E731
        prog = program.build(
            self.model, self.loss_fn, self.rule, self.mesh, self.pnames, self.bnames,
            [p.detach().reshape(self._stored[n]) for n, p in params.items()],
            [b.detach() for b in buffers.values()],
            [glob(x, t) for x, t in zip(xs, batch)],
            [self.param_specs[n] for n in self.pnames], specs, self.sharp_edges,
            gather_specs=self._gather_specs(), model_shapes=self._model_shapes())
        pspecs = [self.param_specs[n] for n in self.pnames]
        sspecs = [s for s in pspecs for _ in self.rule.state_names]
        loss_shape = ()
        self._out_shardings = (
            [(self.mesh.named_sharding(()), loss_shape)]
            + [(self.mesh.named_sharding(s), a.shape) for s, a in zip(pspecs, self._params)]
            + [(self.mesh.named_sharding(s), a.shape) for s, a in zip(sspecs, self._state)]
            + [(self.mesh.named_sharding(()), ())] * bool(prog.checks))
        return prog

    def _model_shapes(self):
        """Per parameter, its shape in the model where the devices hold another (a
        ``Fused`` entry: the program reshapes it before the model uses it), else None."""
        return [None if self._stored[n] == self._meta[n][0] else self._meta[n][0]
                for n in self.pnames]

    def _gather_specs(self):
        """fsdp: each parameter's layout in use, its tensor-parallel spec (None where it
        is stored that way already); ddp: None."""
        if self.strategy != "fsdp":
            return None
        params = dict(self.model.named_parameters())
        out = []
        for n in self.pnames:
            g = placement.tp_spec(n, params[n].shape, self.tp_plan)
            out.append(None if g == self.param_specs[n] else g)
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's ``state_dict()`` with the trained parameters gathered to torch CPU
        tensors (tied parameters under each of their names); buffers as the model has
        them."""
        live = dict(zip(self.pnames, self._params))
        by_id = {id(p): n for n, p in self.model.named_parameters()}
        out = {}
        for k, v in self.model.state_dict(keep_vars=True).items():
            n = by_id.get(id(v))
            out[k] = placement.gather(live[n], v.dtype).reshape(v.shape) if n in live else \
                v.detach().clone()
        return out

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Shard the parameters of ``state_dict`` (a ``state_dict()`` of this model) onto
        the mesh again. The optimizer state is kept. Raises KeyError for a missing
        parameter and UnsupportedInputError for a shape or dtype that differs."""
        new = []
        for n, spec in zip(self.pnames, (self.param_specs[n] for n in self.pnames)):
            t = state_dict[n]
            if (tuple(t.shape), t.dtype) != self._meta[n]:
                raise UnsupportedInputError(
                    f"load_state_dict: {n} is {tuple(t.shape)}/{t.dtype}; the model's is "
                    f"{self._meta[n][0]}/{self._meta[n][1]}")
            new.append(placement.put(t.detach().reshape(self._stored[n]), self.mesh, spec))
        self._params = new

    # ------------------------------------------------------------------ inspection
    def collectives(self) -> list[Collective]:
        """The collectives of the last compiled step (collectives.py). Raises RuntimeError
        before the first call."""
        if self.program is None:
            raise RuntimeError("no step has run yet: call the step first")
        return list(self.program.collectives)

    def collective_bytes(self) -> dict[str, int]:
        """{kind: bytes per step per device} of ``collectives()``."""
        return bytes_by_kind(self.collectives())

    def device_bytes(self) -> dict[str, int]:
        """Bytes of parameters and of optimizer state held on the mesh's first device,
        measured from the device buffers."""
        dev = self.mesh.devices[0]
        return {"params": placement.device_bytes(self._params, dev),
                "optimizer_state": placement.device_bytes(self._state, dev)}

    @property
    def last_stages(self):
        return [] if self.program is None else self.program.stages


class ShardedModule:
    """``model``'s forward as an SPMD program on ``mesh`` (``shard``'s docstring):
    parameters sharded by ``tp_plan`` (replicated otherwise), tensor inputs split on dim
    0 over ``"data"`` (replicated without that axis), tensor outputs replicated and
    returned as torch tensors."""

    thunder_distributed = True  # examine() and last_traces() ask it

    def __init__(self, model: torch.nn.Module, mesh: DeviceMesh, tp_plan: dict | None = None,
                 sharp_edges: str = "warn"):
        self.model, self.mesh, self.tp_plan = model, mesh, dict(tp_plan or {})
        self.sharp_edges = sharp_edges
        params, buffers = _all_state(model)
        self.pnames, self.bnames = list(params), list(buffers)
        self.param_specs = {n: placement.param_spec(n, p.shape, mesh, "ddp", self.tp_plan)
                            for n, p in params.items()}
        self._stored = {n: placement.stored_shape(n, p.shape, self.tp_plan)
                        for n, p in params.items()}
        self._params = [placement.put(p.detach().reshape(self._stored[n]), mesh,
                                      self.param_specs[n]) for n, p in params.items()]
        self._buffers = [placement.put(b.detach(), mesh, tuple(() for _ in b.shape))
                         for b in buffers.values()]
        self._programs: dict = {}
        self.program = None

    def __call__(self, *inputs: torch.Tensor, **options):
        """``model(*inputs, **options)``: ``inputs`` tensors (split on dim 0 over
        ``"data"``), ``options`` hashable Python values (``use_cache=False``), part of the
        compiled program's key."""
        (prog, out_spec, out_meta), xs = self._prepare(inputs, options)
        shapes = [s for s, _ in out_meta] + [()] * bool(prog.checks)  # (the checks' code)
        outs = _run(prog, self._params + self._buffers + xs,
                    [(self.mesh.named_sharding(tuple(() for _ in s)), s) for s in shapes])
        if prog.checks:
            _raise_failed(prog, outs.pop())
        tensors = [placement.local_value(o) for o in outs]
        return torch_pytree.tree_unflatten(tensors, out_spec)

    def _prepare(self, inputs, options):
        import jax

        if not all(isinstance(t, torch.Tensor) for t in inputs):
            raise UnsupportedInputError("pass tensors positionally, other values by keyword")
        nproc = jax.process_count()
        specs = [placement.batch_spec(t, self.mesh, t.shape[0] * nproc) for t in inputs]
        xs = [placement.put(t.detach(), self.mesh, s, local=True, copy=False)
              for t, s in zip(inputs, specs)]
        key = (tuple((tuple(x.shape), x.dtype) for x in xs), tuple(sorted(options.items())))
        if key not in self._programs:
            params, buffers = _all_state(self.model)
            self._programs[key] = program.build_forward(
                self.model, options, self.mesh, self.pnames, self.bnames,
                [p.detach().reshape(self._stored[n]) for n, p in params.items()],
                [b.detach() for b in buffers.values()],
                [torch.empty(tuple(x.shape), dtype=t.dtype) for x, t in zip(xs, inputs)],
                [self.param_specs[n] for n in self.pnames], specs, self.sharp_edges,
                model_shapes=[None if self._stored[n] == tuple(p.shape) else tuple(p.shape)
                              for n, p in params.items()])
        self.program = self._programs[key][0]
        return self._programs[key], xs

    def examine(self, *inputs, **options):
        """``thunder_mlir.examine(sharded, *inputs, **options)``: the forward's ops (XLA or
        torch fallback) and the collectives of its program (compiled, not run)."""
        from thunder_mlir.examine import examine

        (prog, _, _), _ = self._prepare(inputs, options)
        with program.tracing_on(self.mesh):
            exam = examine(self.model, *inputs, **options)
        exam.collectives = list(prog.collectives)
        return exam

    @property
    def last_stages(self):
        return [] if self.program is None else self.program.stages

    def collectives(self) -> list[Collective]:
        """The collectives of the last compiled forward (collectives.py)."""
        return [] if self.program is None else list(self.program.collectives)
